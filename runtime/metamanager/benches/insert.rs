//! Load generator: cloud `insert`s of pods through the bus into the metamanager, with durable
//! (synchronous=FULL) group commits on a real file, counting until the last ACK comes back.
//! A message is done when its ACK arrives, and no ACK leaves before its commit.
//!
//! Run: `cargo bench -p wedge-metamanager --bench insert [-- MESSAGES [synchronous]]`
//! (defaults: 100000 messages, `full`; pass `normal` to compare).

use std::sync::Arc;
use std::time::{Duration, Instant};

use wedge_core::config::Synchronous;
use wedge_core::health::Health;
use wedge_core::module::{SupervisionSettings, Supervisor};
use wedge_core::store::StoreOptions;
use wedge_core::{Bus, Content, Message, Store};
use wedge_metamanager::{MIGRATIONS, MetaManager, MetaManagerSettings};

fn pod(i: u64) -> Content {
    Content::json(&serde_json::json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": format!("pod-{i}"), "namespace": "default",
                     "uid": format!("5d8f0c1e-0000-4000-8000-{i:012}"),
                     "labels": {"app": "bench", "tier": "edge"}, "resourceVersion": "12345"},
        "spec": {"nodeName": "edge-1", "restartPolicy": "Always",
                 "containers": [{"name": "app", "image": "registry.local/app:1.2.3",
                                 "ports": [{"containerPort": 8080, "protocol": "TCP"}],
                                 "env": [{"name": "MODE", "value": "edge"}],
                                 "resources": {"limits": {"cpu": "500m", "memory": "128Mi"}}}]}
    }))
    .unwrap()
}

fn main() {
    let mut args = std::env::args().skip(1).filter(|a| !a.starts_with('-'));
    let total: u64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(100_000);
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
    store.migrate("metamanager", MIGRATIONS).await.unwrap();
    let bus = Bus::new(4096);
    let mut cloud = bus.register("websocket", "hub").unwrap();
    let mut edged = bus.register("edged", "edged").unwrap();
    let mut supervisor =
        Supervisor::new(bus.clone(), Health::new(), SupervisionSettings::default());
    let mm = Arc::new(MetaManager::new(
        bus.clone(),
        store.clone(),
        MetaManagerSettings::default(),
    ));
    supervisor.spawn(mm).unwrap();

    let messages: Vec<Message> = (0..total)
        .map(|i| {
            Message::build(
                "edgecontroller",
                "resource",
                "insert",
                &format!("default/pod/pod-{i}"),
                pod(i),
            )
        })
        .collect();
    let sent_at: Arc<Vec<std::sync::OnceLock<Instant>>> =
        Arc::new((0..total).map(|_| std::sync::OnceLock::new()).collect());
    tokio::spawn(async move { while edged.recv().await.is_some() {} });
    let (batches_before, _) = store.commit_counts();

    let start = Instant::now();
    let producer = {
        let bus = bus.clone();
        let sent_at = sent_at.clone();
        tokio::spawn(async move {
            for (i, msg) in messages.into_iter().enumerate() {
                let _ = sent_at[i].set(Instant::now());
                bus.send("metamanager", msg).await.unwrap();
            }
        })
    };
    let mut latencies = Vec::with_capacity(total as usize);
    for i in 0..total as usize {
        let ack = tokio::time::timeout(Duration::from_secs(30), cloud.recv())
            .await
            .expect("ACK within 30 s")
            .unwrap();
        assert_eq!(ack.content.raw(), "\"OK\"");
        if let Some(t) = sent_at[i].get() {
            latencies.push(t.elapsed());
        }
    }
    let elapsed = start.elapsed();
    producer.await.unwrap();
    let (batches, _) = store.commit_counts();
    latencies.sort();
    let pct = |p: f64| latencies[((latencies.len() as f64 * p) as usize).min(latencies.len() - 1)];
    let commits = batches - batches_before;
    println!(
        "metamanager cloud inserts, durable ({synchronous:?}): {total} messages in {:.2} s = {:.0} msg/s; \
         {commits} commits (avg {:.0} writes/commit); ACK latency under full load p50 {:?} p99 {:?}",
        elapsed.as_secs_f64(),
        total as f64 / elapsed.as_secs_f64(),
        total as f64 / commits.max(1) as f64,
        pct(0.50),
        pct(0.99),
    );
    supervisor.shutdown().await;
}
