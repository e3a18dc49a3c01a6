//! Errors of the Wasm host.
//!
//! Errors that come from elsewhere (wasmtime, the file system, SQLite) keep their cause: in the
//! variant's `source` field (downcast it there) and through `source()`. The text of a `WasmError` is complete on
//! its own (it ends with the cause's chain), because it goes as it is into API answers and
//! logs.

use std::sync::Arc;

/// A cause kept with a [`WasmError`] (shared, so that the error stays `Clone`).
pub type Cause = Arc<dyn std::error::Error + Send + Sync + 'static>;

/// What went wrong in the Wasm host.
#[derive(Debug, Clone, thiserror::Error)]
pub enum WasmError {
    /// The engine could not be set up.
    #[error("wasm engine: {context}{}", with_cause(.source))]
    Engine {
        /// What was being done.
        context: String,
        /// Why it failed, when another error says so.
        #[source]
        source: Option<Cause>,
    },
    /// A file could not be read or written, or a tool could not be run.
    #[error("{context}{}", with_cause(.source))]
    Io {
        /// What was being done.
        context: String,
        /// Why it failed, when another error says so.
        #[source]
        source: Option<Cause>,
    },
    /// The bytes are not a valid component, or not for the declared world.
    #[error("invalid module: {context}{}", with_cause(.source))]
    Invalid {
        /// What is wrong.
        context: String,
        /// The engine's or parser's reason, when there is one.
        #[source]
        source: Option<Cause>,
    },
    /// The module's `init` refused its configuration.
    #[error("module init failed: {0}")]
    Init(String),
    /// No module of that name.
    #[error("no module named {0:?}")]
    NotFound(String),
    /// The module is waiting out its restart back-off after failures.
    #[error(
        "module {module:?} is restarting after {failures} failure(s); next attempt in {retry_in_ms} ms (last error: {last_error})"
    )]
    Restarting {
        /// Module name.
        module: String,
        /// Consecutive failures.
        failures: u32,
        /// Time until the next attempt.
        retry_in_ms: u64,
        /// Why it last failed.
        last_error: String,
    },
    /// The call trapped or ran out of time or memory; the instance was discarded.
    #[error("module {module:?} trapped: {reason}")]
    Trap {
        /// Module name.
        module: String,
        /// The trap, e.g. `wasm trap: interrupt` for a deadline.
        reason: String,
    },
    /// The guest returned an error.
    #[error("{0}")]
    Guest(String),
    /// Deploying the module would exceed the node's guest memory budget.
    #[error(
        "module {module:?} asks for {asked_mib} MiB of memory, but {reserved_mib} MiB of the node's guest memory budget of {budget_mib} MiB (wedge.modules.memoryBudgetMiB) is reserved by other modules"
    )]
    MemoryBudget {
        /// Module name.
        module: String,
        /// Its manifest's memory limit.
        asked_mib: u64,
        /// Reserved by the other modules.
        reserved_mib: u64,
        /// The node's budget.
        budget_mib: u64,
    },
    /// The module was stopped (removed, replaced or shut down) while the call ran.
    #[error("module {0:?} was stopped")]
    Stopped(String),
    /// Persisting the module store failed.
    #[error("module store: {}", chain(.0.as_ref()))]
    Store(#[source] Cause),
}

impl WasmError {
    /// [`WasmError::Engine`] without a cause.
    pub fn engine(context: impl Into<String>) -> WasmError {
        WasmError::Engine {
            context: context.into(),
            source: None,
        }
    }

    /// [`WasmError::Engine`] caused by `source`.
    pub fn engine_from(context: impl Into<String>, source: impl Into<BoxedCause>) -> WasmError {
        WasmError::Engine {
            context: context.into(),
            source: Some(Arc::from(source.into())),
        }
    }

    /// [`WasmError::Io`] without a cause.
    pub fn io(context: impl Into<String>) -> WasmError {
        WasmError::Io {
            context: context.into(),
            source: None,
        }
    }

    /// [`WasmError::Io`] caused by `source`.
    pub fn io_from(context: impl Into<String>, source: impl Into<BoxedCause>) -> WasmError {
        WasmError::Io {
            context: context.into(),
            source: Some(Arc::from(source.into())),
        }
    }

    /// [`WasmError::Invalid`] without a cause.
    pub fn invalid(context: impl Into<String>) -> WasmError {
        WasmError::Invalid {
            context: context.into(),
            source: None,
        }
    }

    /// [`WasmError::Invalid`] caused by `source`.
    pub fn invalid_from(context: impl Into<String>, source: impl Into<BoxedCause>) -> WasmError {
        WasmError::Invalid {
            context: context.into(),
            source: Some(Arc::from(source.into())),
        }
    }

    /// [`WasmError::Store`] caused by `source`.
    pub fn store(source: impl Into<BoxedCause>) -> WasmError {
        WasmError::Store(Arc::from(source.into()))
    }
}

/// What a cause is taken from (any error: `std::io::Error`, `wasmtime::Error`, ...).
pub type BoxedCause = Box<dyn std::error::Error + Send + Sync + 'static>;

/// `": <cause chain>"`, or nothing.
fn with_cause(source: &Option<Cause>) -> String {
    match source {
        Some(cause) => format!(": {}", chain(cause.as_ref())),
        None => String::new(),
    }
}

/// An error and its sources, `": "`-separated (as anyhow's `{:#}` prints them).
fn chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut next = error.source();
    while let Some(cause) = next {
        let more = cause.to_string();
        // Wrappers often repeat their cause's text; print it once.
        if !text.ends_with(&more) {
            text.push_str(": ");
            text.push_str(&more);
        }
        next = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::error::Error;

    #[test]
    fn causes_are_kept_and_printed_once() {
        let io = std::io::Error::new(std::io::ErrorKind::PermissionDenied, "denied");
        let e = WasmError::io_from("cannot write /x", io);
        assert_eq!(e.to_string(), "cannot write /x: denied");
        assert_eq!(
            e.source().map(ToString::to_string).as_deref(),
            Some("denied")
        );
        // The cause itself, for code that inspects it.
        let WasmError::Io {
            source: Some(cause),
            ..
        } = &e
        else {
            panic!("an I/O error with a cause: {e:?}");
        };
        assert_eq!(
            cause.downcast_ref::<std::io::Error>().map(|e| e.kind()),
            Some(std::io::ErrorKind::PermissionDenied)
        );
        assert_eq!(
            WasmError::invalid("no world").to_string(),
            "invalid module: no world"
        );
        assert!(WasmError::invalid("no world").source().is_none());
    }
}
