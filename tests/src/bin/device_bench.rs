//! `device-bench`: figures of Wedge's device plane (issue 13, "Benchmarks"), each scenario
//! against a real `wedge run` it starts itself in a fresh temporary directory (embedded
//! broker, a DMI socket, devices in `wedge.devices.dir`, default store durability: SQLite
//! `synchronous: full`, `--synchronous normal` to compare).
//!
//! ```text
//! cargo build --release -p wedge -p wedge-tests --bin wedge --bin device-bench
//! target/release/device-bench report                 # DMI report -> twin committed, closed loop
//! target/release/device-bench report --rate 1000     # latency at a fixed 1,000 reports/s
//! target/release/device-bench desired                # desired value -> Wasm / DMI mapper write
//! target/release/device-bench idle                   # RSS: 100 Wasm + 10 DMI devices vs none
//! ```
//!
//! * `report`: the generator plays a KubeEdge mapper: it serves `DeviceMapperService` on a unix
//!   socket of its own, registers with `MapperRegister` for the devices of its protocol, and
//!   calls `DeviceManagerService.ReportDeviceStatus` (tonic, over the node's DMI unix socket)
//!   with one property per call, each value new. Committed = the report's
//!   `…/twin/update/result` reached an MQTT subscriber (devicetwin publishes it after the
//!   SQLite commit of the twin row); the gRPC answer (the node has queued the report for
//!   devicetwin) is timed separately. `--rate 0` (default): closed loop, `--concurrency`
//!   reporters that each wait for their report's commit; `--rate R`: open loop, R reports/s
//!   sent on schedule, latency from the scheduled time (no coordinated omission).
//! * `desired`: `PUT /devices/<ns>/<name>/twins/<property>` on the admin API (what `wedge twin
//!   set` does), one change at a time, until (a) the `virtual-thermometer` Wasm mapper's
//!   `write-property` logs the value, (b) the generator's DMI mapper receives `UpdateDevice`
//!   with it.
//! * `idle`: RSS and CPU of a node with `--wasm` devices on `virtual-thermometer` and `--dmi`
//!   devices on the real KubeEdge mapper of `../shared/dmi/`, against the same node with no
//!   devices.
//!
//! The Wasm mapper poll overhead per property is measured in-process by
//! `cargo bench -p wedge-tests --bench wasm`.
//!
//! Guest modules are built from `modules/` as the tests build them. Exit status is non-zero
//! only when a run could not be done, never because of a figure. Every process started is
//! stopped on exit (SIGTERM; the kernel sends it too if device-bench dies) and the run
//! directory is removed unless `--keep`.

// The crate root sits in src/bin/, so the sub-modules in src/bin/device_bench/ need paths.
#[path = "device_bench/desired.rs"]
mod desired;
#[path = "device_bench/dmi.rs"]
mod dmi;
#[path = "device_bench/idle.rs"]
mod idle;
#[path = "device_bench/node.rs"]
mod node;
// twin-load's process handling and percentiles, shared rather than copied.
#[allow(dead_code)]
#[path = "twin_load/procs.rs"]
mod procs;
#[path = "device_bench/report.rs"]
mod report;
#[allow(dead_code)]
#[path = "twin_load/stats.rs"]
mod stats;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail};
use clap::{Args, Parser, Subcommand};

/// The protocol of the devices the generator's DMI mapper drives.
pub const BENCH_PROTOCOL: &str = "device-bench";
/// The Wasm mapper module (`modules/virtual-thermometer`, protocol `virtual`).
pub const THERMOMETER: &str = "virtual-thermometer";

/// Figures of Wedge's device plane: DMI reports, desired values, idle memory.
#[derive(Debug, Parser)]
#[command(name = "device-bench", version)]
struct Cli {
    #[command(subcommand)]
    scenario: Scenario,
    /// The wedge binary [default: the release `wedge` of this build's target directory, else
    /// target/release/wedge].
    #[arg(long, global = true)]
    wedge: Option<PathBuf>,
    /// Worker threads of the generator (it shares the machine with the node).
    #[arg(long, global = true, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=64))]
    client_threads: u32,
    /// Keep the run directory (configs, data, logs) instead of removing it.
    #[arg(long, global = true)]
    keep: bool,
}

#[derive(Debug, Subcommand)]
enum Scenario {
    /// DMI ReportDeviceStatus -> twin committed: reports/s and latency.
    Report(ReportArgs),
    /// Desired value (admin API) -> write at a Wasm mapper and at a DMI mapper.
    Desired(DesiredArgs),
    /// RSS of a node with Wasm and KubeEdge-mapper devices, against one without devices.
    Idle(IdleArgs),
}

/// Options of `report`.
#[derive(Debug, Args)]
pub struct ReportArgs {
    /// Devices of the generator's protocol (`default/dev-0` ...), reported round-robin.
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub devices: u32,
    /// HTTP/2 connections to the node's DMI socket.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=1_000))]
    pub connections: u32,
    /// Closed loop: reporters, each with one report in flight until it is committed.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub concurrency: u32,
    /// Reports per second in total, open loop; 0 = closed loop.
    #[arg(long, default_value_t = 0.0)]
    pub rate: f64,
    /// Seconds measured.
    #[arg(long, default_value_t = 10.0)]
    pub duration: f64,
    /// Seconds of load before the measured window, not counted.
    #[arg(long, default_value_t = 2.0)]
    pub warmup: f64,
    /// Seconds to wait for outstanding results at the end; in closed loop also how long a
    /// reporter waits for one commit before giving it up.
    #[arg(long, default_value_t = 5.0)]
    pub drain: f64,
    /// The node's `wedge.store.synchronous`: `full` (fsync per commit, the default) or `normal`.
    #[arg(long, default_value = "full", value_parser = ["full", "normal"])]
    pub synchronous: String,
}

/// Options of `desired`.
#[derive(Debug, Args)]
pub struct DesiredArgs {
    /// Changes per mapper kind.
    #[arg(long, default_value_t = 200, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub changes: u32,
    /// Devices per mapper kind (changes go round-robin over them).
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u32).range(1..=1_000))]
    pub devices: u32,
    /// Pause between changes, ms.
    #[arg(long, default_value_t = 50)]
    pub gap_ms: u64,
    /// The node's `wedge.store.synchronous`.
    #[arg(long, default_value = "full", value_parser = ["full", "normal"])]
    pub synchronous: String,
}

/// Options of `idle`.
#[derive(Debug, Args)]
pub struct IdleArgs {
    /// Devices driven by the virtual-thermometer Wasm mapper.
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(0..=10_000))]
    pub wasm: u32,
    /// Devices driven by the KubeEdge mapper of ../shared/dmi over DMI.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u32).range(0..=10_000))]
    pub dmi: u32,
    /// Collect (and report) cycle of every property, ms.
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(100..=3_600_000))]
    pub collect_ms: u64,
    /// Seconds each node runs before sampling.
    #[arg(long, default_value_t = 20.0)]
    pub settle: f64,
    /// Seconds of sampling (once a second).
    #[arg(long, default_value_t = 10.0)]
    pub window: f64,
    /// The node's `wedge.store.synchronous`.
    #[arg(long, default_value = "full", value_parser = ["full", "normal"])]
    pub synchronous: String,
}

/// Seconds from the command line as a duration; `what` names the option in the error.
pub fn seconds(value: f64, what: &str, allow_zero: bool) -> Result<Duration> {
    if !value.is_finite() || value < 0.0 || (!allow_zero && value == 0.0) {
        bail!(
            "--{what} must be a finite number of seconds{}",
            if allow_zero { " >= 0" } else { " > 0" }
        );
    }
    Ok(Duration::from_secs_f64(value))
}

/// `n` devices `default/wasm-<i>` of protocol `virtual` (the thermometer's), model
/// `bench-thermometer` (temperature INT ReadWrite, humidity FLOAT ReadOnly), constant signal,
/// collected every `collect_ms`.
pub fn thermometer_devices(n: u32, collect_ms: u64) -> String {
    let mut yaml = String::from(
        "apiVersion: devices.kubeedge.io/v1beta1
kind: DeviceModel
metadata:
  name: bench-thermometer
  namespace: default
spec:
  protocol: virtual
  properties:
  - name: temperature
    type: INT
    accessMode: ReadWrite
  - name: humidity
    type: FLOAT
    accessMode: ReadOnly
",
    );
    for i in 0..n {
        yaml.push_str(&format!(
            "---
apiVersion: devices.kubeedge.io/v1beta1
kind: Device
metadata:
  name: wasm-{i}
  namespace: default
spec:
  deviceModelRef:
    name: bench-thermometer
  nodeName: {node}
  protocol:
    protocolName: virtual
    configData:
      signal: constant
      base: 21
  properties:
  - name: temperature
    collectCycle: {collect_ms}
    reportToCloud: true
    visitors:
      protocolName: virtual
      configData: {{}}
  - name: humidity
    collectCycle: {collect_ms}
    reportToCloud: true
    visitors:
      protocolName: virtual
      configData: {{}}
",
            node = node::NODE,
        ));
    }
    yaml
}

/// `dmi` devices `default/dev-<i>` of the generator's protocol (model `bench-sensor`:
/// temperature INT ReadOnly, setpoint INT ReadWrite) and `wasm` thermometer devices.
pub fn devices_yaml(dmi: u32, wasm: u32) -> String {
    let mut yaml = format!(
        "apiVersion: devices.kubeedge.io/v1beta1
kind: DeviceModel
metadata:
  name: bench-sensor
  namespace: default
spec:
  protocol: {BENCH_PROTOCOL}
  properties:
  - name: temperature
    type: INT
    accessMode: ReadOnly
  - name: setpoint
    type: INT
    accessMode: ReadWrite
"
    );
    for i in 0..dmi {
        yaml.push_str(&format!(
            "---
apiVersion: devices.kubeedge.io/v1beta1
kind: Device
metadata:
  name: dev-{i}
  namespace: default
spec:
  deviceModelRef:
    name: bench-sensor
  nodeName: {node}
  protocol:
    protocolName: {BENCH_PROTOCOL}
    configData: {{}}
  properties:
  - name: temperature
    visitors:
      protocolName: {BENCH_PROTOCOL}
      configData: {{}}
  - name: setpoint
    visitors:
      protocolName: {BENCH_PROTOCOL}
      configData: {{}}
",
            node = node::NODE,
        ));
    }
    if wasm > 0 {
        yaml.push_str("---\n");
        yaml.push_str(&thermometer_devices(wasm, 1000));
    }
    yaml
}

/// The run directory: removed on drop unless kept.
enum RunDir {
    Temp(tempfile::TempDir),
    Kept(PathBuf),
}

impl RunDir {
    fn path(&self) -> PathBuf {
        match self {
            RunDir::Temp(dir) => dir.path().to_owned(),
            RunDir::Kept(path) => path.clone(),
        }
    }
}

async fn run(cli: &Cli) -> Result<()> {
    let wedge = procs::find_wedge(cli.wedge.as_deref())?;
    let dir = tempfile::Builder::new()
        .prefix("device-bench-")
        .tempdir()
        .context("cannot create the run directory")?;
    let dir = if cli.keep {
        RunDir::Kept(dir.keep())
    } else {
        RunDir::Temp(dir)
    };
    let root = dir.path();
    let result = match &cli.scenario {
        Scenario::Report(args) => report::run(&wedge, &root, args).await,
        Scenario::Desired(args) => desired::run(&wedge, &root, args).await,
        Scenario::Idle(args) => idle::run(&wedge, &root, args).await,
    };
    if let RunDir::Kept(path) = &dir {
        eprintln!("device-bench: run directory kept at {}", path.display());
    }
    result
}

/// Resolves on Ctrl-C or SIGTERM with the signal's name.
async fn interrupted() -> &'static str {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = match signal(SignalKind::terminate()) {
        Ok(term) => term,
        Err(_) => {
            let _ = tokio::signal::ctrl_c().await;
            return "SIGINT";
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => "SIGINT",
        _ = term.recv() => "SIGTERM",
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(cli.client_threads as usize)
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("device-bench: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    // `block_on` polls `run` on the main thread, so the children are spawned from the thread
    // whose exit the kernel's parent-death signal watches. Leaving the select drops `run`,
    // which stops every process it started and removes the directory.
    let result = runtime.block_on(async {
        tokio::select! {
            result = run(&cli) => result,
            signal = interrupted() => Err(anyhow!("interrupted by {signal}; everything started was stopped")),
        }
    });
    runtime.shutdown_timeout(Duration::from_secs(1));
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("device-bench: {e:#}");
            ExitCode::FAILURE
        }
    }
}
