//! Outbox write overhead per message: what the durable outbox adds to each cloud-bound message,
//! on a real database file with durable (synchronous=FULL) commits.
//!
//! Two figures: `push` one message at a time (each waits for its own commit: the latency a lone
//! message pays), and `submit` pipelined (a sender that queues many, as the link does under load:
//! the per-message cost once group commit shares each fsync). Removal in acknowledged order is
//! timed too, since every stored message is also deleted once.
//!
//! Run: `cargo bench -p wedge-core --bench outbox [-- MESSAGES [synchronous]]`
//! (defaults: 50000 messages, `full`; pass `normal` to compare). `WEDGE_BENCH_DIR` picks the
//! directory of the database (default: the current one), so the disk under test is explicit.

use std::time::{Duration, Instant};

use wedge_core::config::Synchronous;
use wedge_core::outbox::{COMPONENT, MIGRATIONS, Outbox};
use wedge_core::store::StoreOptions;
use wedge_core::{Content, Message, Store};

/// A twin update as devicetwin sends it to the cloud: a typical small message.
fn twin_update(i: u64) -> Message {
    Message::build(
        "twin",
        "twin",
        "update",
        &format!("$hw/events/device/thermo-{}/twin/edge_updated", i % 64),
        Content::json(&serde_json::json!({
            "event_id": format!("ev-{i}"), "timestamp": 1_700_000_000_000u64 + i,
            "twin": {"temperature": {"actual": {"value": format!("{}", 20 + i % 10),
                                                 "metadata": {"timestamp": 1_700_000_000_000u64 + i}},
                                     "optional": false,
                                     "metadata": {"type": "float"}}}
        }))
        .unwrap(),
    )
}

fn main() {
    let mut args = std::env::args().skip(1).filter(|a| !a.starts_with('-'));
    let total: u64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(50_000);
    let synchronous = match args.next().as_deref() {
        Some("normal") => Synchronous::Normal,
        _ => Synchronous::Full,
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(run(total, synchronous));
}

fn per_msg(d: Duration, n: u64) -> String {
    format!(
        "{:.1} µs/msg ({:.0} msg/s)",
        d.as_secs_f64() * 1e6 / n as f64,
        n as f64 / d.as_secs_f64()
    )
}

async fn run(total: u64, synchronous: Synchronous) {
    let dir =
        tempfile::tempdir_in(std::env::var_os("WEDGE_BENCH_DIR").unwrap_or_else(|| ".".into()))
            .expect("temp dir for the database");
    let store = Store::open(
        &dir.path().join("edgecore.db"),
        StoreOptions {
            synchronous,
            ..StoreOptions::default()
        },
    )
    .unwrap();
    store.migrate(COMPONENT, MIGRATIONS).await.unwrap();
    let outbox = Outbox::open(store.clone(), usize::MAX).await.unwrap();
    let msgs: Vec<Message> = (0..total).map(twin_update).collect();
    let body_bytes: usize = msgs.iter().map(|m| m.to_cloud_vec().len()).sum();

    // One at a time: every message waits for its own commit.
    let lone = (total / 10).max(1);
    let start = Instant::now();
    for m in &msgs[..lone as usize] {
        outbox.push(m).await.unwrap();
    }
    let lone_time = start.elapsed();
    outbox.remove_upto(u64::MAX).await.unwrap();

    // Pipelined: queue everything, then wait for the commits.
    let (batches_before, writes_before) = store.commit_counts();
    let start = Instant::now();
    let mut pending = Vec::with_capacity(msgs.len());
    for m in &msgs {
        pending.push(outbox.submit(m).await.unwrap());
    }
    let mut last = 0;
    for p in pending {
        last = p.await.unwrap();
    }
    let piped_time = start.elapsed();
    let (batches, writes) = store.commit_counts();

    // Reading back for a resend, then removal in acknowledged order, 256 at a time.
    let start = Instant::now();
    let mut after = None;
    let mut read = 0u64;
    loop {
        let page = outbox.oldest(after, 256).await.unwrap();
        let Some((seq, _)) = page.last() else { break };
        read += page.len() as u64;
        after = Some(*seq);
        outbox.remove_upto(*seq).await.unwrap();
    }
    let drain_time = start.elapsed();
    assert_eq!(read, total);
    assert!(outbox.is_empty() && last > 0);

    println!(
        "edgehub outbox, durable ({synchronous:?}), {} B/msg avg:\n  \
         push, one at a time ({lone} msgs): {}\n  \
         submit, pipelined ({total} msgs): {}; {} commits (avg {:.0} writes/commit)\n  \
         read back + remove in order, 256/page: {}",
        body_bytes / msgs.len().max(1),
        per_msg(lone_time, lone),
        per_msg(piped_time, total),
        batches - batches_before,
        (writes - writes_before) as f64 / (batches - batches_before).max(1) as f64,
        per_msg(drain_time, total),
    );
}
