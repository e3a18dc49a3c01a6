//! Scenario `report`: DMI `ReportDeviceStatus` → twin committed.
//!
//! The generator registers as the mapper of the bench protocol and reports one property per
//! call (as mapper-framework does), each with a value never sent before, so every report
//! changes the twin and is written. A report counts as committed when its
//! `$hw/events/device/<ns>/<name>/twin/update/result` reaches an MQTT subscriber of the
//! node's embedded broker: devicetwin's output stage publishes it only after the SQLite
//! transaction holding the twin row has committed. The reported value identifies the
//! report in the result.

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use rumqttc::{AsyncClient, Event, MqttOptions, Packet, QoS};
use serde_json::Value;
use tokio::sync::oneshot;

use crate::dmi::{self, MapperServer, NodeClient};
use crate::node::{Node, cpu_time, mib};
use crate::stats::Percentiles;
use crate::{BENCH_PROTOCOL, ReportArgs, devices_yaml, seconds};

const PROPERTY: &str = "temperature";
const RESULT_FILTER: &str = "$hw/events/device/+/+/twin/update/result";

/// A report waiting for its result.
struct Pending {
    start: Instant,
    measured: bool,
    done: Option<oneshot::Sender<()>>,
}

/// What the reporters and the subscriber share.
#[derive(Default)]
struct Tracker {
    pending: Mutex<HashMap<u64, Pending>>,
    window: Mutex<Option<(Instant, Instant)>>,
    commit: Mutex<Vec<Duration>>,
    answer: Mutex<Vec<Duration>>,
    sent: AtomicU64,
    answered: AtomicU64,
    answered_in_window: AtomicU64,
    refused: Mutex<HashMap<String, u64>>,
    results: AtomicU64,
    committed_in_window: AtomicU64,
    error_results: AtomicU64,
    unmatched: AtomicU64,
    given_up: AtomicU64,
    first_error_result: Mutex<Option<String>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Tracker {
    fn in_window(&self, at: Instant) -> bool {
        lock(&self.window).is_some_and(|(from, to)| at >= from && at < to)
    }

    fn register(&self, seq: u64, start: Instant, done: Option<oneshot::Sender<()>>) {
        let measured = self.in_window(start);
        lock(&self.pending).insert(
            seq,
            Pending {
                start,
                measured,
                done,
            },
        );
        self.sent.fetch_add(1, Ordering::Relaxed);
    }

    fn answered(&self, start: Instant, now: Instant) {
        self.answered.fetch_add(1, Ordering::Relaxed);
        if self.in_window(now) {
            self.answered_in_window.fetch_add(1, Ordering::Relaxed);
        }
        if self.in_window(start) {
            lock(&self.answer).push(now - start);
        }
    }

    fn refused(&self, seq: u64, status: &tonic::Status) {
        lock(&self.pending).remove(&seq);
        *lock(&self.refused)
            .entry(format!("{:?}: {}", status.code(), status.message()))
            .or_default() += 1;
    }

    fn give_up(&self, seq: u64) {
        if lock(&self.pending).remove(&seq).is_some() {
            self.given_up.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// A `…/twin/update/result` arrived at `now`: the report whose value it carries is committed.
    fn on_result(&self, payload: &[u8], now: Instant) {
        self.results.fetch_add(1, Ordering::Relaxed);
        let Ok(json) = serde_json::from_slice::<Value>(payload) else {
            self.unmatched.fetch_add(1, Ordering::Relaxed);
            return;
        };
        if json.get("code").is_some() {
            self.error_results.fetch_add(1, Ordering::Relaxed);
            lock(&self.first_error_result).get_or_insert_with(|| json.to_string());
            return;
        }
        let seq = json
            .pointer(&format!("/twin/{PROPERTY}/actual/value"))
            .and_then(Value::as_str)
            .and_then(|v| v.parse::<u64>().ok());
        let Some(pending) = seq.and_then(|seq| lock(&self.pending).remove(&seq)) else {
            self.unmatched.fetch_add(1, Ordering::Relaxed);
            return;
        };
        if self.in_window(now) {
            self.committed_in_window.fetch_add(1, Ordering::Relaxed);
        }
        if pending.measured {
            lock(&self.commit).push(now - pending.start);
        }
        if let Some(done) = pending.done {
            let _ = done.send(());
        }
    }

    fn outstanding(&self) -> usize {
        lock(&self.pending).len()
    }

    fn missing_measured(&self) -> usize {
        lock(&self.pending).values().filter(|p| p.measured).count()
    }
}

/// Connects the result subscriber; returns once its subscription is acknowledged.
async fn subscribe(port: u16, tracker: Arc<Tracker>) -> Result<tokio::task::JoinHandle<()>> {
    let mut options = MqttOptions::new("device-bench-results", "127.0.0.1", port);
    options
        .set_keep_alive(Duration::from_secs(30))
        .set_clean_session(true)
        .set_max_packet_size(1 << 20, 1 << 20);
    let (client, mut events) = AsyncClient::new(options, 64);
    let (ready, subscribed) = oneshot::channel();
    let task = tokio::spawn(async move {
        let mut ready = Some(ready);
        loop {
            match events.poll().await {
                Ok(Event::Incoming(Packet::Publish(p))) => {
                    tracker.on_result(&p.payload, Instant::now())
                }
                Ok(Event::Incoming(Packet::ConnAck(_))) => {
                    let _ = client.try_subscribe(RESULT_FILTER, QoS::AtMostOnce);
                }
                Ok(Event::Incoming(Packet::SubAck(_))) => {
                    if let Some(ready) = ready.take() {
                        let _ = ready.send(());
                    }
                }
                Ok(_) => {}
                Err(e) => {
                    eprintln!("device-bench: result subscriber: {e}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }
    });
    tokio::time::timeout(Duration::from_secs(10), subscribed)
        .await
        .map_err(|_| anyhow!("the result subscriber did not get its SUBACK within 10 s"))?
        .map_err(|_| anyhow!("the result subscriber ended"))?;
    Ok(task)
}

fn device_of(seq: u64, devices: u32) -> String {
    format!("dev-{}", seq % u64::from(devices))
}

/// Sends report `seq`, registered as started at `start`; false when the node refused it.
async fn send(
    client: &mut NodeClient,
    tracker: &Tracker,
    seq: u64,
    devices: u32,
    start: Instant,
    done: Option<oneshot::Sender<()>>,
) -> bool {
    tracker.register(seq, start, done);
    let request = dmi::report(
        "default",
        &device_of(seq, devices),
        PROPERTY,
        seq.to_string(),
    );
    match client.report_device_status(request).await {
        Ok(_) => {
            tracker.answered(start, Instant::now());
            true
        }
        Err(status) => {
            tracker.refused(seq, &status);
            false
        }
    }
}

/// Closed loop: one report at a time per reporter, the next once the previous is committed.
async fn reporter(
    mut client: NodeClient,
    tracker: Arc<Tracker>,
    next: Arc<AtomicU64>,
    devices: u32,
    end: Instant,
    drain: Duration,
) {
    loop {
        let start = Instant::now();
        if start >= end {
            return;
        }
        let seq = next.fetch_add(1, Ordering::Relaxed);
        let (done, committed) = oneshot::channel();
        if !send(&mut client, &tracker, seq, devices, start, Some(done)).await {
            // Refused (devicetwin's mailbox full): the mapper would report again next cycle.
            tokio::time::sleep(Duration::from_millis(1)).await;
            continue;
        }
        if tokio::time::timeout(drain, committed).await.is_err() {
            tracker.give_up(seq);
        }
    }
}

/// Open loop on an OS thread (tokio's timer has 1 ms granularity): report `k` is due at
/// `start + k / rate` and sent then whatever the node does; latency counts from the due time.
fn pace(
    runtime: tokio::runtime::Handle,
    clients: Vec<NodeClient>,
    tracker: Arc<Tracker>,
    next: Arc<AtomicU64>,
    devices: u32,
    rate: f64,
    (start, end): (Instant, Instant),
) {
    for k in 0u64.. {
        let due = start + Duration::from_secs_f64(k as f64 / rate);
        if due >= end {
            return;
        }
        let now = Instant::now();
        if due > now {
            std::thread::sleep(due - now);
        }
        let seq = next.fetch_add(1, Ordering::Relaxed);
        let mut client = clients[(k % clients.len() as u64) as usize].clone();
        let tracker = tracker.clone();
        runtime.spawn(async move {
            send(&mut client, &tracker, seq, devices, due, None).await;
        });
    }
}

/// A report that must commit before the clock starts (the node is ready end to end).
async fn preflight(
    client: &mut NodeClient,
    tracker: &Tracker,
    next: &AtomicU64,
    devices: u32,
) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        let seq = next.fetch_add(1, Ordering::Relaxed);
        let (done, committed) = oneshot::channel();
        if send(client, tracker, seq, devices, Instant::now(), Some(done)).await
            && tokio::time::timeout(Duration::from_secs(2), committed)
                .await
                .is_ok()
        {
            return Ok(());
        }
        tracker.give_up(seq);
    }
    bail!(
        "no report was committed within 20 s (refusals: {:?}, first error result: {:?})",
        lock(&tracker.refused),
        lock(&tracker.first_error_result)
    )
}

fn row(name: &str, p: Option<Percentiles>) -> String {
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    match p {
        Some(p) => format!(
            "{name}: p50 {:.2} ms, p90 {:.2} ms, p99 {:.2} ms, p99.9 {:.2} ms, max {:.2} ms ({} samples)",
            ms(p.p50),
            ms(p.p90),
            ms(p.p99),
            ms(p.p999),
            ms(p.max),
            p.count
        ),
        None => format!("{name}: no samples"),
    }
}

/// Runs the scenario in `root` and prints its figures.
pub async fn run(wedge: &Path, root: &Path, args: &ReportArgs) -> Result<()> {
    let warmup = seconds(args.warmup, "warmup", true)?;
    let duration = seconds(args.duration, "duration", false)?;
    let drain = seconds(args.drain, "drain", false)?;
    if !args.rate.is_finite() || args.rate < 0.0 {
        bail!("--rate must be >= 0 (0 = closed loop)");
    }
    let node = Node::start(
        wedge,
        root,
        &devices_yaml(args.devices, 0),
        &args.synchronous,
    )
    .await?;
    let mapper = MapperServer::serve(&root.join("mapper.sock"))?;
    let mut clients = Vec::new();
    for _ in 0..args.connections {
        clients.push(dmi::connect(&node.dmi_socket).await?);
    }
    let given = mapper
        .register(&mut clients[0], BENCH_PROTOCOL)
        .await
        .map_err(|e| e.context(node.daemon.log_tail(20)))?;
    if given.len() != args.devices as usize {
        bail!(
            "MapperRegister handed over {} devices, {} defined",
            given.len(),
            args.devices
        );
    }
    let tracker = Arc::new(Tracker::default());
    let subscriber = subscribe(node.mqtt_port, tracker.clone()).await?;
    let next = Arc::new(AtomicU64::new(1));
    preflight(&mut clients[0], &tracker, &next, args.devices).await?;

    let start = Instant::now();
    let (from, end) = (start + warmup, start + warmup + duration);
    *lock(&tracker.window) = Some((from, end));
    let rss_start = node.rss_kib();
    // CPU time of the node and of this process when the window opens.
    let cpu_at_window;
    let own_cpu_at_window;
    let load = if args.rate > 0.0 {
        let runtime = tokio::runtime::Handle::current();
        let (c, t, n, devices, rate) = (
            clients.clone(),
            tracker.clone(),
            next.clone(),
            args.devices,
            args.rate,
        );
        let pacer = std::thread::Builder::new()
            .name("device-bench-pacer".to_owned())
            .spawn(move || pace(runtime, c, t, n, devices, rate, (start, end)))
            .context("cannot start the pacing thread")?;
        tokio::time::sleep_until(from.into()).await;
        cpu_at_window = node.cpu_time();
        own_cpu_at_window = cpu_time(std::process::id());
        tokio::time::sleep_until(end.into()).await;
        tokio::task::spawn_blocking(move || pacer.join())
            .await
            .context("pacing thread")?
            .map_err(|_| anyhow!("the pacing thread panicked"))?;
        format!(
            "open loop, {} reports/s on {} connections",
            args.rate, args.connections
        )
    } else {
        let mut reporters = tokio::task::JoinSet::new();
        for i in 0..args.concurrency {
            reporters.spawn(reporter(
                clients[i as usize % clients.len()].clone(),
                tracker.clone(),
                next.clone(),
                args.devices,
                end,
                drain,
            ));
        }
        tokio::time::sleep_until(from.into()).await;
        cpu_at_window = node.cpu_time();
        own_cpu_at_window = cpu_time(std::process::id());
        while reporters.join_next().await.is_some() {}
        format!(
            "closed loop, {} reporters (each waits for its commit) on {} connections",
            args.concurrency, args.connections
        )
    };
    let cpu_window = match (cpu_at_window, node.cpu_time()) {
        (Some(a), Some(b)) => Some(b.saturating_sub(a)),
        _ => None,
    };
    let own_cpu_window = match (own_cpu_at_window, cpu_time(std::process::id())) {
        (Some(a), Some(b)) => Some(b.saturating_sub(a)),
        _ => None,
    };
    let drain_end = Instant::now() + drain;
    while tracker.outstanding() > 0 && Instant::now() < drain_end {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let rss_end = node.rss_kib();
    let metrics = node.metrics(&[
        "wedge_dmi_reports_total",
        "wedge_store_commit_batches_total",
        "wedge_store_writes_total",
        "wedge_store_commit_seconds_sum",
        "wedge_store_commit_seconds_count",
        "wedge_devicetwin_error_results_total",
        "wedge_devicetwin_write_failures_total",
    ]);

    let t = &tracker;
    let secs = duration.as_secs_f64();
    let refused: u64 = lock(&t.refused).values().sum();
    println!("device-bench report: DMI ReportDeviceStatus -> twin committed (result on MQTT)");
    println!(
        "node: {}, store synchronous {}, {} devices of protocol {BENCH_PROTOCOL}, embedded broker",
        wedge.display(),
        args.synchronous,
        args.devices
    );
    println!(
        "load: {load}; {:.1} s measured after {:.1} s warm-up",
        secs,
        warmup.as_secs_f64()
    );
    println!(
        "sent {}, answered OK {}, refused {refused}, results {} (errors {}, unmatched {}), given up {}, measured still missing {}",
        t.sent.load(Ordering::Relaxed),
        t.answered.load(Ordering::Relaxed),
        t.results.load(Ordering::Relaxed),
        t.error_results.load(Ordering::Relaxed),
        t.unmatched.load(Ordering::Relaxed),
        t.given_up.load(Ordering::Relaxed),
        t.missing_measured(),
    );
    for (reason, n) in lock(&t.refused).iter() {
        println!("  refused {n}: {reason}");
    }
    if let Some(first) = lock(&t.first_error_result).as_ref() {
        println!("  first error result: {first}");
    }
    println!(
        "throughput: {:.0} reports committed/s, {:.0} answered/s (inside the window)",
        t.committed_in_window.load(Ordering::Relaxed) as f64 / secs,
        t.answered_in_window.load(Ordering::Relaxed) as f64 / secs,
    );
    println!(
        "{}",
        row(
            "committed (call start -> result on MQTT)",
            Percentiles::of(&mut lock(&t.commit))
        )
    );
    println!(
        "{}",
        row(
            "answered  (call start -> gRPC answer)  ",
            Percentiles::of(&mut lock(&t.answer))
        )
    );
    println!(
        "daemon: RSS {} -> {}, CPU {} over the window ({:.0} % of one core)",
        mib(rss_start),
        mib(rss_end),
        cpu_window.map_or("?".to_owned(), |c| format!("{:.2} s", c.as_secs_f64())),
        cpu_window.map_or(0.0, |c| c.as_secs_f64() / secs * 100.0),
    );
    println!(
        "generator (this process): CPU {:.0} % of one core over the window",
        own_cpu_window.map_or(0.0, |c| c.as_secs_f64() / secs * 100.0)
    );
    let metric = |name: &str| {
        metrics
            .iter()
            .find_map(|l| l.strip_prefix(name)?.trim().parse::<f64>().ok())
    };
    if let (Some(writes), Some(batches), Some(sum), Some(count)) = (
        metric("wedge_store_writes_total"),
        metric("wedge_store_commit_batches_total"),
        metric("wedge_store_commit_seconds_sum"),
        metric("wedge_store_commit_seconds_count"),
    ) && batches > 0.0
        && count > 0.0
    {
        println!(
            "store (whole run): {writes:.0} writes in {batches:.0} commits ({:.1} per commit), {:.3} ms per commit on average",
            writes / batches,
            sum / count * 1e3
        );
    }
    println!("node /metrics at the end:");
    for line in metrics {
        println!("  {line}");
    }
    // The subscriber goes before the node, so it does not log the broker going away.
    subscriber.abort();
    drop(mapper);
    Ok(())
}
