//! `link-load`: throughput of the node's cloud link, from the bus to the cloud.
//!
//! Everything runs in this process, with real parts: a store on a temporary SQLite file with
//! the default durability (synchronous full, group commit), the bus, the supervisor, the real
//! `EdgeHub` module with its durable outbox, and a [`CloudHub`] simulator joined over mutual
//! TLS, with rate limiting off (`messageQPS: 0`). N cloud-bound `edge_updated` messages are
//! built first, then handed to the `websocket` module on the bus as fast as the bus takes them.
//!
//! ```text
//! cargo build --release -p wedge-tests --bin link-load
//! target/release/link-load --messages 100000 --size 400
//! ```
//!
//! The report gives messages/s from the first send until the simulator has received all N
//! distinct `msg_id`s, when the bus had taken them all, the store's commit batches (writes per
//! commit show group commit at work, or its absence), the outbox's peak depth, refusals and
//! duplicates. Exit status is non-zero only when the run could not be done (no connection,
//! messages missing after `--timeout`), never because of a figure.

#[path = "link_load/payload.rs"]
mod payload;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use clap::Parser;
use wedge_core::health::Health;
use wedge_core::metrics::{MetricsSource, PromWriter};
use wedge_core::module::SupervisionSettings;
use wedge_core::store::StoreOptions;
use wedge_core::{Bus, Store, Supervisor};
use wedge_tests::cloudhub::{CloudHub, CloudHubOptions};
use wedge_tests::inproc_link;

const NODE: &str = "load-node";

/// Command-line options.
#[derive(Parser, Debug)]
#[command(
    name = "link-load",
    about = "Cloud link throughput: bus -> outbox -> TLS WebSocket -> simulator"
)]
struct Args {
    /// Messages to send.
    #[arg(long, default_value_t = 100_000)]
    messages: usize,
    /// Content size of each message in bytes.
    #[arg(long, default_value_t = 400)]
    size: usize,
    /// Give up when the simulator has not received everything after this many seconds.
    #[arg(long, default_value_t = 600)]
    timeout: u64,
}

/// Seconds the store's writer has spent running and committing batches so far (the sum of
/// its `wedge_store_commit_seconds` histogram): how much of a run the disk accounts for.
fn commit_seconds(store: &Store) -> f64 {
    let mut w = PromWriter::new();
    store.write_metrics(&mut w);
    w.finish()
        .lines()
        .find_map(|l| {
            l.strip_prefix("wedge_store_commit_seconds_sum ")?
                .trim()
                .parse()
                .ok()
        })
        .unwrap_or_default()
}

fn main() -> Result<()> {
    let args = Args::parse();
    let hub = CloudHub::start(CloudHubOptions::default()).context("cannot start the simulator")?;
    let dir = tempfile::tempdir().context("cannot make a temporary directory")?;
    let mut config = inproc_link::edgehub_config(&hub, &dir.path().join("certs"), NODE)?;
    config.message_qps = 0;
    // Named so a profile (`perf report --sort comm`) tells the node's threads from the
    // simulator's (`tokio-runtime-w`).
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("node")
        .build()
        .context("cannot start the async runtime")?;
    // The outbox holds the whole run if the link falls behind; refusals are reported.
    let cap = args.messages.max(100_000);
    let (store, bus, outbox, supervisor) = rt.block_on(async {
        let store = Store::open(&dir.path().join("edgecore.db"), StoreOptions::default())?;
        let bus = Bus::new(1024);
        let mut supervisor =
            Supervisor::new(bus.clone(), Health::new(), SupervisionSettings::default());
        let (edgehub, outbox) = inproc_link::edgehub(&store, &config, NODE, cap).await?;
        supervisor.spawn(edgehub)?;
        anyhow::Ok((store, bus, outbox, supervisor))
    })?;
    hub.wait_connected(Duration::from_secs(15))
        .context("the node did not connect")?;

    let now_ms = wedge_core::time::now_ms();
    let messages = (0..args.messages)
        .map(|i| payload::edge_updated(i, args.size, now_ms))
        .collect::<Result<Vec<_>>>()?;
    let (batches_before, writes_before) = store.commit_counts();
    let commit_before = commit_seconds(&store);

    // Peak outbox depth, sampled every millisecond while the run lasts.
    let peak = Arc::new(AtomicUsize::new(0));
    let running = Arc::new(AtomicBool::new(true));
    let sampler = {
        let (peak, running, outbox) = (peak.clone(), running.clone(), outbox.clone());
        rt.spawn(async move {
            while running.load(Ordering::Relaxed) {
                peak.fetch_max(outbox.len(), Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        })
    };
    let started = Instant::now();
    let sender = {
        let bus = bus.clone();
        rt.spawn(async move {
            for msg in messages {
                bus.send("websocket", msg).await?;
            }
            anyhow::Ok(started.elapsed())
        })
    };
    let is_load = |m: &wedge_core::Message| {
        m.route.source == "twin" && m.route.resource.ends_with("/edge_updated")
    };
    let received = hub.wait_for_distinct(is_load, args.messages, Duration::from_secs(args.timeout));
    let elapsed = started.elapsed();
    running.store(false, Ordering::Relaxed);
    let received = received?;
    let bus_took_all = rt
        .block_on(sender)
        .context("the sender task failed")?
        .context("the bus refused a message")?;
    let _ = rt.block_on(sampler);
    let commit_time = commit_seconds(&store) - commit_before;
    let (batches, writes) = store.commit_counts();
    let (batches, writes) = (batches - batches_before, writes - writes_before);
    let arrivals: Vec<Instant> = hub
        .received()
        .iter()
        .filter(|m| m.message.as_ref().is_some_and(is_load))
        .map(|m| m.at)
        .collect();
    let total = arrivals.len();
    let since_start = |at: Option<&Instant>| {
        at.map(|at| at.saturating_duration_since(started).as_secs_f64())
            .unwrap_or_default()
    };
    if received != args.messages {
        bail!(
            "{received} distinct messages received, {} sent",
            args.messages
        );
    }

    let secs = elapsed.as_secs_f64();
    println!(
        "link-load: {} messages of {} content bytes, messageQPS 0",
        args.messages, args.size
    );
    println!(
        "  throughput        {:.0} messages/s ({:.3} s first send -> all received)",
        args.messages as f64 / secs,
        secs
    );
    println!(
        "  bus took all      after {:.3} s",
        bus_took_all.as_secs_f64()
    );
    println!(
        "  store commits     {batches} batches, {writes} writes ({:.1} writes/batch)",
        writes as f64 / batches.max(1) as f64
    );
    println!(
        "  store commit time {commit_time:.3} s in all ({:.0}% of the run, {:.3} ms per commit)",
        100.0 * commit_time / secs,
        1000.0 * commit_time / batches.max(1) as f64
    );
    println!(
        "  simulator got     the first after {:.3} s, the last after {:.3} s",
        since_start(arrivals.first()),
        since_start(arrivals.last())
    );
    println!("  outbox peak depth {}", peak.load(Ordering::Relaxed));
    println!(
        "  received frames   {total} ({} duplicates)",
        total - received
    );
    rt.block_on(supervisor.shutdown());
    drop(store);
    Ok(())
}
