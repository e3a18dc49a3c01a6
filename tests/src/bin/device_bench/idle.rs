//! Scenario `idle`: the resident memory of a node driving devices and nothing else.
//!
//! Two nodes, one after the other, with the same config:
//!
//! 1. no devices, no mapper (the baseline);
//! 2. `--wasm` devices driven by the `virtual-thermometer` module and `--dmi` devices driven by
//!    the real KubeEdge mapper of `../shared/dmi/` (`virtualdevice-mapper`, mapper-framework
//!    v1.23.1) over DMI, every property collected and reported every `--collect-ms`.
//!
//! Each node is left to settle for `--settle` seconds (for the devices node: counted from
//! the moment every device has reported), then its RSS and CPU are sampled once a second for
//! `--window` seconds.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use wedge_tests::dmi_mapper::DmiMapper;

use crate::node::{Node, mib};
use crate::procs;
use crate::{IdleArgs, THERMOMETER, seconds};

/// The DeviceModel of `../shared/dmi/devices.yaml` and `n` Devices like its `vdev-1`
/// (protocol `virtualProtocol`), collected every `collect_ms`.
fn kubeedge_devices(n: u32, collect_ms: u64) -> String {
    let mut yaml = String::from(
        "apiVersion: devices.kubeedge.io/v1beta1
kind: DeviceModel
metadata:
  name: virtual-sensor
  namespace: default
spec:
  protocol: virtualProtocol
  properties:
  - name: temperature
    type: INT
    accessMode: ReadOnly
  - name: setpoint
    type: INT
    accessMode: ReadWrite
",
    );
    for i in 0..n {
        yaml.push_str(&format!(
            "---
apiVersion: devices.kubeedge.io/v1beta1
kind: Device
metadata:
  name: vdev-{i}
  namespace: default
spec:
  deviceModelRef:
    name: virtual-sensor
  nodeName: {node}
  protocol:
    protocolName: virtualProtocol
    configData:
      deviceID: vdev-{i}
  stateReport:
    reportToCloud: true
    reportCycle: {collect_ms}
  properties:
  - name: temperature
    collectCycle: {collect_ms}
    reportCycle: {collect_ms}
    reportToCloud: true
    visitors:
      protocolName: virtualProtocol
      configData:
        key: temperature
        dataType: int
        initial: \"23\"
  - name: setpoint
    collectCycle: {collect_ms}
    reportCycle: {collect_ms}
    reportToCloud: true
    desired:
      value: \"30\"
    visitors:
      protocolName: virtualProtocol
      configData:
        key: setpoint
        dataType: int
        initial: \"10\"
",
            node = crate::node::NODE,
        ));
    }
    yaml
}

/// How many devices of the node have a reported value in every twin.
async fn reporting(node: &Node) -> Result<usize> {
    let list = node.admin("GET", "/devices", Vec::new()).await?;
    Ok(list
        .as_array()
        .map(|devices| {
            devices
                .iter()
                .filter(|d| {
                    d["twins"].as_object().is_some_and(|twins| {
                        !twins.is_empty() && twins.values().all(|t| t["actual"].is_string())
                    })
                })
                .count()
        })
        .unwrap_or(0))
}

/// RSS samples (KiB) and CPU share of the node over `window`, after `settle`.
struct Sampled {
    rss: Vec<u64>,
    cpu_share: Option<f64>,
    mapper_rss: Vec<u64>,
    /// Twin updates devicetwin handled per second over the window.
    updates_per_s: Option<f64>,
}

const TWIN_UPDATES: &str = "wedge_devicetwin_requests_total{kind=\"twin_update\"}";

fn twin_updates(node: &Node) -> Option<f64> {
    node.metrics(&[TWIN_UPDATES])
        .iter()
        .find_map(|l| l.strip_prefix(TWIN_UPDATES)?.trim().parse().ok())
}

async fn sample(
    node: &Node,
    mapper_pid: Option<u32>,
    settle: Duration,
    window: Duration,
) -> Sampled {
    tokio::time::sleep(settle).await;
    let cpu_start = node.cpu_time();
    let updates_start = twin_updates(node);
    let start = Instant::now();
    let mut rss = Vec::new();
    let mut mapper_rss = Vec::new();
    while start.elapsed() < window {
        rss.extend(node.rss_kib());
        mapper_rss.extend(mapper_pid.and_then(procs::rss_kib));
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let elapsed = start.elapsed().as_secs_f64();
    let cpu_share = match (cpu_start, node.cpu_time()) {
        (Some(a), Some(b)) => Some(b.saturating_sub(a).as_secs_f64() / elapsed),
        _ => None,
    };
    let updates_per_s = match (updates_start, twin_updates(node)) {
        (Some(a), Some(b)) => Some((b - a) / elapsed),
        _ => None,
    };
    Sampled {
        rss,
        cpu_share,
        mapper_rss,
        updates_per_s,
    }
}

fn spread(kib: &[u64]) -> String {
    let mut sorted = kib.to_vec();
    sorted.sort_unstable();
    match (sorted.first(), sorted.get(sorted.len() / 2), sorted.last()) {
        (Some(min), Some(median), Some(max)) => format!(
            "median {} (min {}, max {}, {} samples)",
            mib(Some(*median)),
            mib(Some(*min)),
            mib(Some(*max)),
            sorted.len()
        ),
        _ => "no samples".to_owned(),
    }
}

fn median(kib: &[u64]) -> Option<u64> {
    let mut sorted = kib.to_vec();
    sorted.sort_unstable();
    sorted.get(sorted.len() / 2).copied()
}

/// Runs the scenario in `root` and prints its figures.
pub async fn run(wedge: &Path, root: &Path, args: &IdleArgs) -> Result<()> {
    let settle = seconds(args.settle, "settle", true)?;
    let window = seconds(args.window, "window", false)?;
    let module = wedge_tests::guests::try_module(THERMOMETER).map_err(anyhow::Error::msg)?;
    // The mapper's binary and example must be there before anything starts.
    wedge_tests::dmi_mapper::example_devices()?;

    // 1. The baseline.
    let empty = root.join("empty");
    let node = Node::start(wedge, &empty, "# no devices\n", &args.synchronous).await?;
    let baseline_started = node.rss_kib();
    let baseline = sample(&node, None, settle, window).await;
    drop(node);

    // 2. The devices node.
    let full = root.join("devices");
    let yaml = format!(
        "{}---\n{}",
        crate::thermometer_devices(args.wasm, args.collect_ms),
        kubeedge_devices(args.dmi, args.collect_ms)
    );
    let node = Node::start(wedge, &full, &yaml, &args.synchronous).await?;
    let mut steps = vec![("started, devices defined, no mapper", node.rss_kib())];
    node.deploy(&module)?;
    // Let the module take its devices and poll them once.
    tokio::time::sleep(Duration::from_millis(2 * args.collect_ms)).await;
    steps.push((
        "virtual-thermometer deployed, driving its devices",
        node.rss_kib(),
    ));
    let mapper_dir = full.join("mapper");
    std::fs::create_dir_all(&mapper_dir)?;
    let mut mapper = DmiMapper::start(&mapper_dir, &node.dmi_socket)?;
    mapper.wait_log("Mapper register finished", Duration::from_secs(30))?;
    let want = (args.wasm + args.dmi) as usize;
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut have = 0;
    while Instant::now() < deadline {
        have = reporting(&node).await?;
        if have == want {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    if have != want {
        bail!(
            "{have} of {want} devices report after 60 s; node log:\n{}\nmapper log:\n{}",
            node.daemon.log_tail(20),
            mapper.log()
        );
    }
    steps.push((
        "KubeEdge mapper registered, every device reporting",
        node.rss_kib(),
    ));
    let loaded = sample(&node, Some(mapper.pid()), settle, window).await;
    let commits = node.metrics(&[
        "wedge_dmi_reports_total",
        "wedge_store_commit_batches_total",
    ]);
    mapper.stop();
    drop(node);

    println!("device-bench idle: RSS of a node driving devices, nothing else running against it");
    println!(
        "node: {}, store synchronous {}; each node settled {:.0} s, then sampled once a second for {:.0} s",
        wedge.display(),
        args.synchronous,
        settle.as_secs_f64(),
        window.as_secs_f64()
    );
    println!(
        "no devices, no mapper:  RSS {} ({} just after start), CPU {:.1} % of one core",
        spread(&baseline.rss),
        mib(baseline_started),
        baseline.cpu_share.unwrap_or(0.0) * 100.0
    );
    println!(
        "{} Wasm devices ({THERMOMETER}) + {} DMI devices (virtualdevice-mapper), every property every {} ms: RSS {}, CPU {:.1} % of one core",
        args.wasm,
        args.dmi,
        args.collect_ms,
        spread(&loaded.rss),
        loaded.cpu_share.unwrap_or(0.0) * 100.0
    );
    println!(
        "  on the way: {}",
        steps
            .iter()
            .map(|(what, kib)| format!("{what}: {}", mib(*kib)))
            .collect::<Vec<_>>()
            .join("; ")
    );
    if let Some(rate) = loaded.updates_per_s {
        println!("  twin updates handled: {rate:.0}/s over the window (group-committed)");
    }
    if let (Some(a), Some(b)) = (median(&baseline.rss), median(&loaded.rss)) {
        println!(
            "difference of the medians: {:+.1} MiB",
            (b as f64 - a as f64) / 1024.0
        );
    }
    println!(
        "the KubeEdge mapper process itself (not in the node's figure): RSS {}",
        spread(&loaded.mapper_rss)
    );
    for line in commits {
        println!("  {line}");
    }
    Ok(())
}
