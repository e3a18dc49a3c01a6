//! Log output: `tracing` to stderr, human-readable or JSON, filtered by `RUST_LOG` or else
//! `wedge.logLevel`. The filter sits behind a reload handle so SIGHUP can change it.

use std::io::IsTerminal;

use anyhow::{Context, Result};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer, Registry, reload};
use wedge_core::config::LogFormat;

/// Changes the active filter of the installed subscriber.
#[derive(Clone)]
pub struct LogControl {
    handle: Option<reload::Handle<EnvFilter, Registry>>,
    /// `RUST_LOG` as found at start; when set it wins over `wedge.logLevel`.
    env: Option<String>,
}

impl LogControl {
    /// Applies `level` (`wedge.logLevel`), unless `RUST_LOG` fixed the filter at start.
    /// Returns the filter in effect.
    pub fn apply(&self, level: &str) -> Result<String> {
        if let Some(env) = &self.env {
            return Ok(format!("RUST_LOG={env} (wedge.logLevel ignored)"));
        }
        let filter = parse(level)?;
        if let Some(handle) = &self.handle {
            handle
                .reload(filter)
                .context("cannot change the log filter")?;
        }
        Ok(level.to_owned())
    }
}

fn parse(level: &str) -> Result<EnvFilter> {
    EnvFilter::try_new(level).with_context(|| format!("wedge.logLevel {level:?} is not a filter"))
}

/// Checks `level` without installing it, so a bad `wedge.logLevel` stops the start.
pub fn check(level: &str) -> Result<()> {
    parse(level).map(|_| ())
}

/// Installs the global subscriber. `RUST_LOG` overrides `level`.
pub fn init(format: LogFormat, level: &str) -> Result<LogControl> {
    let env = std::env::var("RUST_LOG").ok().filter(|v| !v.is_empty());
    let filter = match &env {
        Some(env) => EnvFilter::try_new(env).unwrap_or_else(|e| {
            eprintln!("wedge: RUST_LOG={env:?} is not a filter ({e}); using info");
            EnvFilter::new("info")
        }),
        None => parse(level)?,
    };
    let (filter, handle) = reload::Layer::new(filter);
    let fmt = tracing_subscriber::fmt::layer()
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr);
    let fmt = match format {
        LogFormat::Json => fmt.json().boxed(),
        LogFormat::Human => fmt.boxed(),
    };
    let installed = tracing_subscriber::registry()
        .with(filter)
        .with(fmt)
        .try_init();
    let handle = match installed {
        Ok(()) => Some(handle),
        Err(e) => {
            eprintln!("wedge: logging already initialised: {e}");
            None
        }
    };
    Ok(LogControl { handle, env })
}
