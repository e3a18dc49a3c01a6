//! `wedge check`: prints a line per check and fails when one fails. The machine-side checks
//! are `wedge_setup::check`'s; the ones that need the rest of the binary are here.

use std::path::{Path, PathBuf};

use anyhow::{Result, bail};
use wedge_core::config::EdgeCoreConfig;
use wedge_setup::check::{Finding, Level};

use crate::admin_client;
use crate::cli::AdminArgs;

/// `wedge check`.
pub fn run(config: Option<PathBuf>) -> Result<()> {
    let mut findings = Vec::new();
    let joined = wedge_setup::Layout::default().config();
    let path = config.or_else(|| joined.exists().then_some(joined));
    let config = match &path {
        Some(path) => match EdgeCoreConfig::load(path) {
            Ok(config) => {
                findings.push(config_finding(path, &config));
                config
            }
            Err(e) => {
                print(&[Finding::new(
                    Level::Fail,
                    format!("config {}", path.display()),
                    e.to_string(),
                )]);
                bail!("the config is invalid; nothing else was checked");
            }
        },
        None => {
            findings.push(Finding::new(
                Level::Pass,
                "config",
                "none given and not joined: the built-in defaults (no cloud)",
            ));
            EdgeCoreConfig::embedded_default()
        }
    };
    let admin = AdminArgs {
        config: None,
        data_dir: Some(config.data_dir()),
        admin_socket: Some(config.admin_socket_path()),
        admin_addr: None,
        token_file: None,
    };
    let health = node_health(&admin);
    let running = health.is_some();
    findings.extend(wedge_setup::check::machine(&config, running));
    if config.modules.device_twin.enable && !running {
        let socket = wedge_dmi::socket_path(&config.modules.device_twin.dmi_sock_path);
        findings.push(wedge_setup::check::dmi_socket_dir(&socket));
    }
    findings.push(match wedge_wasm::guest_build::Toolchain::detect() {
        Ok(toolchain) => Finding::new(
            Level::Pass,
            "guest toolchain",
            format!("{} (for `wedge module build`)", toolchain.describe()),
        ),
        Err(e) => Finding::new(
            Level::Warn,
            "guest toolchain",
            format!("`wedge module build` cannot build here: {e}"),
        ),
    });
    findings.extend(health.unwrap_or_else(|| {
        vec![Finding::new(
            Level::Warn,
            "node",
            format!(
                "not running (no answer on {}); start it to check its modules",
                config.admin_socket_path().display()
            ),
        )]
    }));
    print(&findings);
    let failed = findings.iter().filter(|f| f.level == Level::Fail).count();
    if failed > 0 {
        bail!("{failed} check(s) failed");
    }
    Ok(())
}

fn print(findings: &[Finding]) {
    for finding in findings {
        println!("{}", finding.line());
    }
}

fn config_finding(path: &Path, config: &EdgeCoreConfig) -> Finding {
    let what = format!("config {}", path.display());
    match config.node_name() {
        Ok(node) => {
            let mut detail = format!("valid (node name {node})");
            if let Some(line) = config.not_implemented_line() {
                detail.push_str("; ");
                detail.push_str(&line);
            }
            Finding::new(Level::Pass, what, detail)
        }
        Err(e) => Finding::new(Level::Fail, what, e.to_string()),
    }
}

/// A running node's modules, from `/healthz`; `None` when no node answers.
fn node_health(admin: &AdminArgs) -> Option<Vec<Finding>> {
    let answer = admin_client::request(admin, "GET", "/healthz", b"").ok()?;
    let body = answer.json().ok()?;
    let node = body["node"].as_str().unwrap_or("?").to_owned();
    let mut out = vec![Finding::new(
        if answer.status == 200 {
            Level::Pass
        } else {
            Level::Fail
        },
        format!("node {node}"),
        format!("running, {}", body["status"].as_str().unwrap_or("?")),
    )];
    if let Some(modules) = body["modules"].as_object() {
        for (name, health) in modules {
            let state = health["state"].as_str().unwrap_or("?");
            let mut text = format!("{state}, {} restart(s)", health["restarts"]);
            if let Some(error) = health["last_error"].as_str() {
                text.push_str(&format!(", last error: {error}"));
            }
            let level = match state {
                "running" => Level::Pass,
                "starting" => Level::Warn,
                _ => Level::Fail,
            };
            out.push(Finding::new(level, format!("module {name}"), text));
        }
    }
    Some(out)
}
