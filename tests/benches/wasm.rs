//! Wasm host figures: twin-handler call overhead (warm), load of a cached module, the host
//! cost of one mapper poll per property (`virtual-thermometer`, devices of 1, 10 and 50
//! properties), and the resident memory 100 mapper instances add.
//!
//! Run: `cargo bench -p wedge-tests --bench wasm` (builds the guests from modules/ first).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use wedge_core::Store;
use wedge_core::store::StoreOptions;
use wedge_tests::guests::module_bytes;
use wedge_wasm::package;
use wedge_wasm::{
    Deployed, Device, DeviceState, HostServices, MapperSink, Property, Publisher, TwinReader,
    TwinUpdate, TwinValue, UpdateSource, Verdict, WasmEngine, WasmHost,
};

/// Twins as devicetwin would serve them: every property reads 21.5.
struct Twins;
impl TwinReader for Twins {
    fn actual(&self, _: &str, _: &str) -> Option<TwinValue> {
        Some(TwinValue::Float(21.5))
    }
    fn desired(&self, _: &str, _: &str) -> Option<TwinValue> {
        None
    }
}

/// Reports the mapper sink has taken.
static REPORTS: AtomicU64 = AtomicU64::new(0);

struct Sink;
impl Publisher for Sink {
    fn publish(&self, _: &str, _: &str, _: Vec<u8>) -> Result<(), String> {
        Ok(())
    }
}
impl MapperSink for Sink {
    /// Builds the twin update the node's bridge (`runtime/wedge/src/wasm_bridge.rs`) hands to
    /// devicetwin, so the poll figures include that host-side work; the bus send and
    /// devicetwin are left out.
    fn report_actual(
        &self,
        _: &str,
        _: &str,
        property: &str,
        value: TwinValue,
    ) -> Result<(), String> {
        let payload = serde_json::json!({
            "event_id": "",
            "timestamp": 1,
            "twin": { property: {
                "actual": { "value": value.to_kubeedge() },
                "metadata": { "type": value.kubeedge_type() },
            }},
        });
        std::hint::black_box(payload.to_string());
        REPORTS.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }
    fn report_state(&self, _: &str, _: &str, _: DeviceState) -> Result<(), String> {
        Ok(())
    }
}

fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn main() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(run());
}

async fn run() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("edgecore.db"), StoreOptions::default()).unwrap();
    store.migrate("wasm", wedge_wasm::MIGRATIONS).await.unwrap();
    let engine = WasmEngine::new(&dir.path().join("cache"), &Default::default()).unwrap();
    let services = HostServices {
        publisher: Arc::new(Sink),
        mapper_sink: Arc::new(Sink),
    };
    // 101 modules of 16 MiB: above the default guest memory budget.
    let host = WasmHost::new(
        engine.clone(),
        services,
        &dir.path().join("modules"),
        store.clone(),
    )
    .with_limits(wedge_wasm::GuestLimits {
        memory_budget_mib: 4096,
        ..Default::default()
    });
    let threshold_bytes = module_bytes("threshold");
    host.deploy(threshold_bytes.clone()).await.unwrap();
    let Some(Deployed::Handler(threshold)) = host.get("threshold") else {
        panic!("threshold not deployed")
    };

    host.deploy(module_bytes("test-guests/read-twin"))
        .await
        .unwrap();
    let Some(Deployed::Handler(read_twin)) = host.get("test-read-twin") else {
        panic!("test-read-twin not deployed")
    };
    let twins: Arc<dyn TwinReader> = Arc::new(Twins);

    // Twin-handler calls, warm: threshold accepting (no host call), test-read-twin (exactly one
    // host call, a twin read answered by the host), threshold rejecting (formats a reason and
    // logs it: one host call plus guest-side formatting).
    for (label, handler, value, expect_reject) in [
        ("threshold accept, no host call", &threshold, 21.5, false),
        ("read-twin, one host call", &read_twin, 21.5, false),
        (
            "threshold reject, formats a reason + one log call",
            &threshold,
            120.0,
            true,
        ),
    ] {
        let update = TwinUpdate {
            device: "default/thermo-1".into(),
            property: "temperature".into(),
            desired: false,
            value: TwinValue::Float(value),
            previous: None,
            source: UpdateSource::Mapper,
        };
        for _ in 0..2_000 {
            handler
                .on_update(update.clone(), Some(twins.clone()))
                .await
                .unwrap();
        }
        let mut per_call = Vec::new();
        for _ in 0..20 {
            let n = 5_000;
            let batch: Vec<(TwinUpdate, Arc<dyn TwinReader>)> =
                (0..n).map(|_| (update.clone(), twins.clone())).collect();
            let start = Instant::now();
            for (u, t) in batch {
                let verdict = handler.on_update(u, Some(t)).await.unwrap();
                debug_assert_eq!(matches!(verdict, Verdict::Reject(_)), expect_reject);
            }
            per_call.push(start.elapsed().as_secs_f64() * 1e6 / n as f64);
        }
        println!(
            "twin-handler call ({label}): median {:.2} µs/call (20 batches of 5,000; min {:.2}, max {:.2})",
            median(per_call.clone()),
            per_call.iter().cloned().fold(f64::MAX, f64::min),
            per_call.iter().cloned().fold(0.0, f64::max),
        );
    }

    // Loading a module whose compilation is in the disk cache (nothing in memory).
    let code = package::without_manifest(&threshold_bytes).unwrap();
    let cold = WasmEngine::new(&dir.path().join("cache"), &Default::default()).unwrap();
    let mut loads = Vec::new();
    for _ in 0..50 {
        cold.retain_components(&Default::default());
        let start = Instant::now();
        let (_, source) = cold.component(&code).unwrap();
        loads.push(start.elapsed().as_secs_f64() * 1e3);
        assert_eq!(source, wedge_wasm::CompileSource::Cached);
    }
    println!(
        "cached module load (precompiled, from the disk cache): median {:.3} ms (50 loads)",
        median(loads)
    );
    let mut deploys = Vec::new();
    for i in 0..20 {
        let mut manifest = package::extract(&threshold_bytes).unwrap();
        manifest.name = format!("threshold-copy-{i}");
        let bytes = package::embed(&threshold_bytes, &manifest).unwrap();
        let start = Instant::now();
        host.deploy(bytes).await.unwrap();
        deploys.push(start.elapsed().as_secs_f64() * 1e3);
    }
    println!(
        "deploy of a cached twin handler (validate, link, instantiate, init, persist): median {:.2} ms (20 deploys)",
        median(deploys)
    );

    // One poll of a device with N properties: the command to the mapper's thread, the guest's
    // `poll` (one signal value and one `report.actual` host call per property) and the
    // node-side payload of each report (see `Sink`), until the answer is back.
    let thermometer = module_bytes("virtual-thermometer");
    host.deploy(thermometer.clone()).await.unwrap();
    let Some(Deployed::Mapper(mapper)) = host.get("virtual-thermometer") else {
        panic!("virtual-thermometer not deployed")
    };
    let mut per_poll_at = Vec::new();
    for n in [1usize, 10, 50] {
        let id = format!("default/poll-{n}");
        mapper
            .add_device(Device {
                id: id.clone(),
                protocol: "virtual".into(),
                protocol_config: "{}".into(),
                properties: (0..n)
                    .map(|i| Property {
                        name: format!("p{i}"),
                        value_type: "float".into(),
                        visitor: "{}".into(),
                        // An explicit poll names every property.
                        collect_cycle_ms: 0,
                        report_to_cloud: true,
                        ..Default::default()
                    })
                    .collect(),
            })
            .await
            .unwrap();
        for _ in 0..500 {
            mapper.poll(&id).await.unwrap();
        }
        let mut per_poll = Vec::new();
        for _ in 0..20 {
            let polls = 500;
            let reports = REPORTS.load(Ordering::Relaxed);
            let start = Instant::now();
            for _ in 0..polls {
                mapper.poll(&id).await.unwrap();
            }
            per_poll.push(start.elapsed().as_secs_f64() * 1e6 / polls as f64);
            // The mapper's own 1 s cycle may add a poll of its own to a batch.
            assert!(REPORTS.load(Ordering::Relaxed) - reports >= (polls * n) as u64);
        }
        let median_poll = median(per_poll.clone());
        per_poll_at.push((n, median_poll));
        println!(
            "mapper poll, {n} properties: median {median_poll:.2} µs/poll, {:.2} µs/property (20 batches of 500; min {:.2}, max {:.2} µs/poll)",
            median_poll / n as f64,
            per_poll.iter().cloned().fold(f64::MAX, f64::min),
            per_poll.iter().cloned().fold(0.0, f64::max),
        );
        mapper.remove_device(&id).await.unwrap();
    }
    if let (Some((n1, t1)), Some((n2, t2))) = (per_poll_at.first(), per_poll_at.last()) {
        println!(
            "mapper poll: {:.2} µs per extra property ({n1} -> {n2} properties), {:.2} µs fixed per poll",
            (t2 - t1) / (n2 - n1) as f64,
            t1 - (t2 - t1) / (n2 - n1) as f64 * *n1 as f64,
        );
    }

    // 100 mapper instances, each with its own thread, store and linear memory.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let before = rss_kib();
    for i in 0..100 {
        let mut manifest = package::extract(&thermometer).unwrap();
        manifest.name = format!("vt-{i}");
        manifest.protocol = Some(format!("virtual-{i}"));
        host.deploy(package::embed(&thermometer, &manifest).unwrap())
            .await
            .unwrap();
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let after = rss_kib();
    println!(
        "100 mapper instances: RSS {:.1} MB -> {:.1} MB (+{:.1} MB, {:.0} KB each)",
        before as f64 / 1024.0,
        after as f64 / 1024.0,
        (after - before) as f64 / 1024.0,
        (after - before) as f64 / 100.0
    );
    host.shutdown();
}
