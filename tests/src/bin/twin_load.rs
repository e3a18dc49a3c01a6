//! `twin-load`: a load generator for Wedge's device twin path, end to end over MQTT.
//!
//! It starts everything it measures itself, in a fresh temporary directory:
//! N devices `default/load-<i>` (one DeviceModel, property `temperature` of type INT) in
//! `wedge.devices.dir`, a `wedge run` daemon with the default store durability (synchronous
//! full; `--synchronous normal` to compare), and with `--broker mosquitto` a mosquitto on a free loopback port (the daemon in
//! `mqttMode: 2`); with `--broker embedded` the daemon's own broker (`mqttMode: 0`).
//! Publishers then play KubeEdge mappers, sending twin updates on
//! `$hw/events/device/default/load-<i>/twin/update` round-robin over the devices, and
//! subscribers match each `…/twin/update/result` to its update by `event_id`.
//!
//! ```text
//! cargo build --release -p wedge -p wedge-tests --bin wedge --bin twin-load
//! target/release/twin-load                                # embedded broker, closed loop
//! target/release/twin-load --broker mosquitto --rate 1000 --duration 20
//! target/release/twin-load --rate 0 --inflight 64 --json  # one JSON object on stdout
//! ```
//!
//! * `--rate R` (> 0): open loop, R updates/s in total, sent on schedule whatever the results
//!   do; latency counts from the *scheduled* send time, so a stalled daemon cannot hide its
//!   stall by slowing the sender (coordinated omission).
//! * `--rate 0` (default): closed loop, as fast as results come back with at most
//!   `--inflight W` unanswered updates per publisher.
//! * A pre-flight update to `load-0` must get a success result before the clock starts; then
//!   `--warmup S` seconds are sent but not counted, then `--duration S` seconds are measured,
//!   then results are awaited for up to `--drain S` seconds.
//!
//! The report gives sent, results, error results (payloads with `code`), missing, unmatched,
//! throughput (results arriving inside the measured window per second), latency percentiles
//! (exact, nearest rank), the daemon's RSS and the store lines of its `/metrics`.
//!
//! Exit status is non-zero only when the run could not be done (a binary missing, daemon or
//! broker not starting, clients not connecting, no result at all), never because of a figure.
//! Everything started is stopped with SIGTERM on exit, Ctrl-C and errors included; the
//! temporary directory is removed unless `--keep`.

// The crate root sits in src/bin/, so the sub-modules in src/bin/twin_load/ need their paths.
#[path = "twin_load/clients.rs"]
mod clients;
#[path = "twin_load/foreign.rs"]
mod foreign;
#[path = "twin_load/procs.rs"]
mod procs;
#[path = "twin_load/report.rs"]
mod report;
#[path = "twin_load/setup.rs"]
mod setup;
#[path = "twin_load/stats.rs"]
mod stats;
#[path = "twin_load/tracker.rs"]
mod tracker;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Command, ExitCode};
use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail};
use clap::{Parser, ValueEnum};
use rumqttc::QoS;

use clients::{Pace, Plan};
use procs::Managed;
use report::Report;
use setup::{BrokerSetting, Layout};

/// Which broker the daemon and the clients use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum BrokerKind {
    /// The daemon's embedded broker (`mqttMode: 0`).
    Embedded,
    /// A mosquitto started for the run (`mqttMode: 2`).
    Mosquitto,
}

/// Load generator for Wedge's device twin: mapper twin updates over MQTT against a daemon it
/// starts itself.
#[derive(Debug, Parser)]
#[command(name = "twin-load", version)]
struct Args {
    /// Broker to run against.
    #[arg(long, value_enum, default_value_t = BrokerKind::Embedded)]
    broker: BrokerKind,
    /// Devices defined for the run (`default/load-0` …).
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    devices: u32,
    /// Publishing MQTT connections.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    publishers: u32,
    /// Result-subscribing MQTT connections (the devices are split between them).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=1_000))]
    subscribers: u32,
    /// One connection publishes the updates and takes every result (as a KubeEdge mapper
    /// does); `--publishers` and `--subscribers` are then ignored.
    #[arg(long)]
    one_connection: bool,
    /// QoS of the twin updates.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u8).range(0..=1))]
    qos: u8,
    /// QoS of the result subscriptions.
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u8).range(0..=1))]
    sub_qos: u8,
    /// Updates per second in total, open loop; 0 = closed loop (see --inflight).
    #[arg(long, default_value_t = 0.0)]
    rate: f64,
    /// Closed loop: unanswered updates allowed per publisher.
    #[arg(long, default_value_t = 32, value_parser = clap::value_parser!(u32).range(1..=65_535))]
    inflight: u32,
    /// Seconds measured.
    #[arg(long, default_value_t = 10.0)]
    duration: f64,
    /// Seconds of load before the measured window, not counted.
    #[arg(long, default_value_t = 2.0)]
    warmup: f64,
    /// Seconds to wait for outstanding results after the last update; in closed loop also the
    /// age at which an unanswered update is given up (and counted missing).
    #[arg(long, default_value_t = 5.0)]
    drain: f64,
    /// Per-client message queue of the broker (mosquitto `max_queued_messages`, embedded
    /// `mqttSessionQueueSize`, which in mode 2 also sizes the daemon's MQTT client queues):
    /// high, so that a backlog shows as latency rather than loss.
    #[arg(long, default_value_t = 100_000, value_parser = clap::value_parser!(u32).range(1..=i32::MAX as i64))]
    queue: u32,
    /// The node's `wedge.store.synchronous`: `full` (fsync every commit; the default and what
    /// the durability figures mean) or `normal` (no fsync on commit: survives a crash of the
    /// process, not a power cut).
    #[arg(long, default_value = "full", value_parser = ["full", "normal"])]
    synchronous: String,
    /// Worker threads of the load generator. It shares the machine with the daemon and the
    /// broker; few threads keep its share of the CPU bounded.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=256))]
    client_threads: u32,
    /// The wedge binary [default: the release `wedge` of this build's target directory, else
    /// target/release/wedge].
    #[arg(long)]
    wedge: Option<PathBuf>,
    /// The mosquitto binary [default: from PATH or /usr/sbin].
    #[arg(long)]
    mosquitto: Option<PathBuf>,
    /// Filters that extra connections (4,000 each) subscribe and hold for the run, matching no
    /// load topic, to measure whether routing slows with unrelated subscriptions.
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u32).range(0..=1_000_000))]
    foreign_filters: u32,
    /// Embedded broker only: require a log-in (`wedge.mqtt.usersFile`, one user whose
    /// PBKDF2 hash has 100,000 iterations) and check every publish and subscribe against the
    /// user's topic patterns, as a node with access control does.
    #[arg(long)]
    auth: bool,
    /// Print one JSON object instead of text.
    #[arg(long)]
    json: bool,
    /// Keep the run directory (config, devices, data, logs) instead of removing it.
    #[arg(long)]
    keep: bool,
}

/// Seconds from the command line as a duration; `what` names the option in the error.
fn seconds(value: f64, what: &str, allow_zero: bool) -> Result<Duration> {
    if !value.is_finite() || value < 0.0 || (!allow_zero && value == 0.0) {
        bail!(
            "--{what} must be a finite number of seconds{}",
            if allow_zero { " >= 0" } else { " > 0" }
        );
    }
    Ok(Duration::from_secs_f64(value))
}

fn qos(level: u8) -> QoS {
    if level == 0 {
        QoS::AtMostOnce
    } else {
        QoS::AtLeastOnce
    }
}

/// The clients' plan from the arguments, checked.
fn plan(args: &Args, port: u16) -> Result<Plan> {
    if !args.rate.is_finite() || args.rate < 0.0 {
        bail!("--rate must be >= 0 (0 = closed loop)");
    }
    let pace = if args.rate > 0.0 {
        Pace::Open { rate: args.rate }
    } else {
        Pace::Closed {
            inflight: args.inflight as usize,
        }
    };
    Ok(Plan {
        port,
        login: args.auth.then(setup::load_login),
        devices: args.devices as usize,
        publishers: args.publishers as usize,
        subscribers: args.subscribers as usize,
        one_connection: args.one_connection,
        pub_qos: qos(args.qos),
        sub_qos: qos(args.sub_qos),
        pace,
        warmup: seconds(args.warmup, "warmup", true)?,
        duration: seconds(args.duration, "duration", false)?,
        drain: seconds(args.drain, "drain", false)?,
    })
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

/// The `/metrics` lines about the store (comment lines left out).
fn store_metrics(admin: SocketAddr) -> Result<Vec<String>, String> {
    match wedge_tests::http_get(admin, "/metrics") {
        Ok((200, body)) => Ok(body
            .lines()
            .filter(|l| !l.starts_with('#') && l.contains("store"))
            .map(str::to_owned)
            .collect()),
        Ok((code, body)) => Err(format!("/metrics answered {code}: {}", body.trim())),
        Err(e) => Err(format!("/metrics: {e:#}")),
    }
}

/// Starts mosquitto for the run and waits until it listens.
async fn start_mosquitto(args: &Args, layout: &Layout, port: u16) -> Result<Managed> {
    let bin = procs::find_mosquitto(args.mosquitto.as_deref())?;
    let conf = layout.mosquitto_conf();
    std::fs::write(
        &conf,
        setup::mosquitto_config(port, args.queue, wedge_tests::is_root()),
    )
    .with_context(|| format!("cannot write {}", conf.display()))?;
    let mut cmd = Command::new(bin);
    cmd.arg("-c").arg(&conf);
    let mut broker = Managed::spawn("mosquitto", cmd, &layout.mosquitto_log())?;
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    procs::wait_listening(&mut broker, addr, Duration::from_secs(10)).await?;
    Ok(broker)
}

/// Does the whole run; the returned report may still describe a failed run (no results).
async fn run(args: &Args) -> Result<Report> {
    let wedge = procs::find_wedge(args.wedge.as_deref())?;
    let dir = tempfile::Builder::new()
        .prefix("twin-load-")
        .tempdir()
        .context("cannot create the run directory")?;
    let dir = if args.keep {
        RunDir::Kept(dir.keep())
    } else {
        RunDir::Temp(dir)
    };
    let layout = Layout { root: dir.path() };
    setup::write_devices(&layout.devices_dir(), args.devices as usize)?;

    // Declared before the daemon so that it is dropped (stopped) after it.
    let mut _broker = None;
    let (broker, broker_name) = match args.broker {
        BrokerKind::Embedded => (
            BrokerSetting::Embedded {
                port: procs::free_port()?,
            },
            "embedded",
        ),
        BrokerKind::Mosquitto => {
            let port = procs::free_port()?;
            _broker = Some(start_mosquitto(args, &layout, port).await?);
            (BrokerSetting::External { port }, "mosquitto")
        }
    };
    let plan = plan(args, broker.port())?;
    let users_file = match (args.auth, &broker) {
        (false, _) => None,
        (true, BrokerSetting::Embedded { .. }) => Some(setup::write_users_file(&layout)?),
        (true, BrokerSetting::External { .. }) => {
            bail!("--auth needs --broker embedded (it configures the embedded broker's users)")
        }
    };
    let config = setup::wedge_config(
        &layout,
        broker,
        args.queue,
        &args.synchronous,
        users_file.as_deref(),
    )?;
    std::fs::write(layout.config(), config).context("cannot write the daemon's config")?;

    let admin = SocketAddr::from(([127, 0, 0, 1], procs::free_port()?));
    let mut cmd = Command::new(&wedge);
    cmd.arg("run")
        .arg("--config")
        .arg(layout.config())
        .arg("--data-dir")
        .arg(layout.data_dir())
        .arg("--admin-addr")
        .arg(admin.to_string())
        // A clean, fixed environment: the figures must not depend on who runs the tool
        // (RUST_LOG, WEDGE_* overrides).
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("HOME", &layout.root);
    let mut daemon = Managed::spawn("wedge", cmd, &layout.wedge_log())?;
    procs::wait_healthy(&mut daemon, admin, Duration::from_secs(30)).await?;
    let _foreign = if args.foreign_filters > 0 {
        let foreign = foreign::subscribe(
            broker.port(),
            args.foreign_filters as usize,
            plan.login.clone(),
        )
        .await
        .map_err(|e| e.context(daemon.failure("was subscribing foreign filters")))?;
        eprintln!(
            "twin-load: {} foreign filters subscribed in {:.1} s",
            args.foreign_filters,
            foreign.took.as_secs_f64()
        );
        Some(foreign)
    } else {
        None
    };
    let rss_start_kib = procs::rss_kib(daemon.pid());

    let outcome = match clients::run(plan.clone()).await {
        Ok(outcome) => outcome,
        Err(e) => return Err(e.context(daemon.failure("was the daemon under test"))),
    };
    let rss_end_kib = procs::rss_kib(daemon.pid());
    let died = daemon.exited();
    let store_metrics = store_metrics(admin);
    let suspicious = died.is_some()
        || outcome.tally.results == 0
        || outcome.tally.error_results > 0
        || !outcome.preflight.ok;
    let daemon_log_tail = suspicious.then(|| daemon.log_tail(30));
    let daemon_exit = match died {
        Some(status) => format!("ENDED DURING THE RUN: {status}"),
        None => {
            let stopping = std::time::Instant::now();
            match daemon.stop() {
                Some(status) => format!(
                    "{status} {:.0} ms after SIGTERM",
                    stopping.elapsed().as_secs_f64() * 1e3
                ),
                None => "could not be waited for".to_owned(),
            }
        }
    };
    let mut latencies = outcome.tally.latencies.clone();
    Ok(Report {
        broker: broker_name,
        broker_url: format!("tcp://127.0.0.1:{}", broker.port()),
        queue: args.queue,
        foreign_filters: args.foreign_filters,
        synchronous: args.synchronous.clone(),
        wedge,
        wedge_pid: daemon.pid(),
        plan,
        latency: stats::Percentiles::of(&mut latencies),
        outcome,
        rss_start_kib,
        rss_end_kib,
        store_metrics,
        daemon_exit,
        daemon_log_tail,
        kept_dir: matches!(dir, RunDir::Kept(_)).then(|| layout.root.clone()),
    })
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
    let args = Args::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(args.client_threads as usize)
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("twin-load: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    // `block_on` polls `run` on this (main) thread, so the children are spawned from the
    // thread whose exit the kernel's parent-death signal watches. Leaving the select drops
    // `run`, which stops the daemon and the broker and removes the directory.
    let result = runtime.block_on(async {
        tokio::select! {
            report = run(&args) => report,
            signal = interrupted() => Err(anyhow!("interrupted by {signal}; everything started was stopped")),
        }
    });
    runtime.shutdown_timeout(Duration::from_secs(1));
    match result {
        Ok(report) => {
            if args.json {
                println!("{}", report.json());
            } else {
                print!("{}", report.text());
            }
            if report.outcome.tally.results == 0 {
                eprintln!("twin-load: no results for the measured updates");
                return ExitCode::FAILURE;
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("twin-load: {e:#}");
            ExitCode::FAILURE
        }
    }
}
