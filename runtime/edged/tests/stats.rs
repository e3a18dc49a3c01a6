//! The node's stats (`wedge_edged::stats`) against the real runtimes: a pod whose container
//! burns CPU, on Docker and on the CI's containerd through CRI, sampled twice by a
//! [`StatsCollector`]: the Summary has the node, the pod and its container with CPU time and
//! a working set, a CPU rate from the second call on, and `/metrics/resource` shows them.
//!
//! Needs the Docker engine and the CRI containerd `bash .ci/setup` starts, with the
//! `wedge-test/busybox:1` and `wedge-test/pause:1` images; without them the tests fail and
//! say what is missing. Each test owns a node name of its own and removes every container and
//! sandbox labelled with it, also when it fails.

mod common;

use std::future::Future;
use std::path::Path;
use std::time::{Duration, Instant};

use common::{IMAGE, PAUSE_IMAGE, Runtime, WAIT, engine_on, unique};
use serde_json::json;
use wedge_edged::engine::{Engine, ManagedContainer};
use wedge_edged::plan::container_plan;
use wedge_edged::pod::Pod;
use wedge_edged::sandbox;
use wedge_edged::stats::summary::{PodRef, Summary};
use wedge_edged::stats::{Scope, StatsCollector, resource_metrics};

/// Runs `body`, then removes every container and sandbox of `node` whether it passed or not,
/// then passes its panic on.
async fn with_cleanup<F>(engine: &Engine, node: &str, body: F)
where
    F: Future<Output = ()> + Send + 'static,
{
    let outcome = tokio::spawn(body).await;
    let mut leftovers = engine.list(node).await.unwrap_or_default();
    // App containers before the sandboxes whose network they are in.
    leftovers.sort_by_key(|c| c.sandbox);
    for c in leftovers {
        if let Err(e) = engine.stop_and_remove(&c.id, Duration::from_secs(1)).await {
            eprintln!("cleanup of {} failed: {e}", c.id);
        }
    }
    if let Err(e) = outcome {
        std::panic::resume_unwind(e.into_panic());
    }
}

fn pod(name: &str) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "default", "uid": unique("uid")},
        "spec": {"containers": [{
            "name": "burn",
            "image": IMAGE,
            "imagePullPolicy": "Never",
            "command": ["sh", "-c", "while :; do :; done"],
        }]},
    }))
    .expect("a valid pod")
}

/// Runs `pod`'s sandbox and its container on `engine` as a pod worker would, and waits until
/// the engine lists both running.
async fn run(engine: &Engine, node: &str, pod: &Pod) -> Vec<ManagedContainer> {
    engine
        .ensure_sandbox_image(PAUSE_IMAGE)
        .await
        .expect("sandbox image");
    let plan = sandbox::plan(node, pod, PAUSE_IMAGE, 0);
    let sandbox_id = engine.run_sandbox(&plan).await.expect("sandbox runs");
    let plan = container_plan(
        node,
        pod,
        &pod.spec.containers[0],
        0,
        Path::new("/nonexistent"),
        &[],
        Some(&sandbox_id),
    )
    .expect("container plan");
    let id = engine.create(&plan).await.expect("container created");
    engine.start(&id).await.expect("container started");
    let deadline = Instant::now() + WAIT;
    loop {
        let listed = engine.list(node).await.expect("list");
        if listed.len() == 2 && listed.iter().all(|c| c.state == "running") {
            return listed;
        }
        assert!(Instant::now() < deadline, "pod not running: {listed:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The pod entry of `name` in `summary`.
fn pod_entry<'a>(summary: &'a Summary, name: &str) -> &'a wedge_edged::stats::summary::PodStats {
    summary
        .pods
        .iter()
        .find(|p| p.pod_ref.name == name)
        .unwrap_or_else(|| panic!("no pod {name} in {summary:#?}"))
}

async fn burning_pod_is_measured(runtime: Runtime) {
    let engine = engine_on(runtime).await;
    let node = unique("stats");
    let body = {
        let engine = engine.clone();
        let node = node.clone();
        async move {
            let name = unique("burn");
            let pod = pod(&name);
            let containers = run(&engine, &node, &pod).await;
            let root = tempfile::tempdir().expect("temp dir");
            let collector = StatsCollector::new(engine.clone(), &node, root.path());
            let wasm = PodRef {
                name: "wasm-mapper".to_owned(),
                namespace: "default".to_owned(),
                uid: unique("uid"),
            };
            // Let the loop run up some CPU time first.
            tokio::time::sleep(Duration::from_millis(500)).await;
            let first = collector
                .summary(&containers, std::slice::from_ref(&wasm), Scope::Full)
                .await
                .expect("first summary");

            let node_stats = &first.node;
            assert_eq!(node_stats.node_name, node);
            assert!(node_stats.start_time.is_some());
            let node_cpu = node_stats.cpu.expect("node cpu");
            assert!(node_cpu.usage_core_nano_seconds.unwrap_or(0) > 0);
            assert_eq!(node_cpu.usage_nano_cores, None, "no rate on the first call");
            let node_memory = node_stats.memory.expect("node memory");
            assert!(node_memory.working_set_bytes.unwrap_or(0) > 0);
            assert!(node_memory.available_bytes.unwrap_or(0) > 0);
            let fs = node_stats.fs.expect("node fs");
            assert!(fs.capacity_bytes.unwrap_or(0) > 0);

            let entry = pod_entry(&first, &name);
            assert_eq!(entry.pod_ref.uid, pod.metadata.uid);
            assert!(entry.start_time.is_some());
            assert_eq!(entry.containers.len(), 1, "{entry:#?}");
            let burn = &entry.containers[0];
            assert_eq!(burn.name, "burn");
            let cpu = burn.cpu.expect("container cpu");
            let used_first = cpu.usage_core_nano_seconds.expect("cpu time");
            assert!(used_first > 0, "{cpu:?}");
            assert_eq!(cpu.usage_nano_cores, None, "no rate on the first call");
            let memory = burn.memory.expect("container memory");
            assert!(memory.working_set_bytes.unwrap_or(0) > 0, "{memory:?}");
            assert!(memory.usage_bytes >= memory.working_set_bytes);
            let pod_cpu = entry.cpu.expect("pod cpu");
            assert!(pod_cpu.usage_core_nano_seconds.unwrap_or(0) >= used_first);
            assert!(
                entry
                    .memory
                    .expect("pod memory")
                    .working_set_bytes
                    .unwrap_or(0)
                    > 0
            );
            // Docker's sandbox gives the pod's network; containerd 1.6 serves no sandbox
            // stats for a sandbox without a cgroup parent (see the test below).
            if runtime == Runtime::Docker {
                let network = entry
                    .network
                    .as_ref()
                    .expect("pod network from the sandbox");
                assert_eq!(network.default_interface.name, "eth0");
            }
            // The Wasm pod is listed, with nothing measured.
            let wasm_entry = pod_entry(&first, "wasm-mapper");
            assert!(wasm_entry.containers.is_empty() && wasm_entry.cpu.is_none());

            // A second sample over more than a second: rates.
            tokio::time::sleep(Duration::from_millis(1500)).await;
            let second = collector
                .summary(&containers, &[], Scope::Full)
                .await
                .expect("second summary");
            assert!(
                second
                    .node
                    .cpu
                    .and_then(|c| c.usage_nano_cores)
                    .unwrap_or(0)
                    > 0
            );
            let entry = pod_entry(&second, &name);
            let cpu = entry.containers[0].cpu.expect("container cpu");
            assert!(cpu.usage_core_nano_seconds.unwrap_or(0) > used_first);
            let rate = cpu.usage_nano_cores.expect("a rate on the second call");
            // The loop keeps one core busy; on a loaded machine it gets less, never none.
            assert!(rate > 0, "{cpu:?}");
            assert!(rate <= 1_100_000_000, "one loop, at most a core: {cpu:?}");
            assert!(entry.cpu.and_then(|c| c.usage_nano_cores).unwrap_or(0) > 0);
            assert!(second.pods.iter().all(|p| p.pod_ref.name != "wasm-mapper"));

            // The JSON is the Summary API's.
            let json = serde_json::to_value(&second).expect("json");
            eprintln!("{runtime:?} summary: {json:#}");
            let container = &json["pods"]
                .as_array()
                .and_then(|pods| pods.iter().find(|p| p["podRef"]["name"] == name.as_str()))
                .expect("pod in json")["containers"][0];
            assert!(container["cpu"]["usageNanoCores"].as_u64().unwrap_or(0) > 0);
            assert!(container["memory"]["workingSetBytes"].as_u64().unwrap_or(0) > 0);
            assert!(
                json["node"]["cpu"]["usageCoreNanoSeconds"]
                    .as_u64()
                    .unwrap_or(0)
                    > 0
            );

            // And the resource metrics page shows the container, the pod and the node.
            let page = resource_metrics::render(Some(&second));
            eprintln!("{runtime:?} /metrics/resource:\n{page}");
            let labels = format!("{{container=\"burn\",namespace=\"default\",pod=\"{name}\"}}");
            for family in [
                "container_cpu_usage_seconds_total",
                "container_memory_working_set_bytes",
                "container_start_time_seconds",
            ] {
                assert!(
                    page.contains(&format!("\n{family}{labels} ")),
                    "{family} of the container missing:\n{page}"
                );
            }
            for line in [
                format!("\npod_cpu_usage_seconds_total{{namespace=\"default\",pod=\"{name}\"}} "),
                "\nnode_cpu_usage_seconds_total ".to_owned(),
                "\nnode_memory_working_set_bytes ".to_owned(),
                "\nresource_scrape_error 0\n".to_owned(),
            ] {
                assert!(page.contains(&line), "{line:?} missing:\n{page}");
            }

            // Only CPU and memory: no filesystem figures.
            let light = collector
                .summary(&containers, &[], Scope::CpuAndMemory)
                .await
                .expect("cpu and memory summary");
            assert!(light.node.fs.is_none() && light.node.runtime.is_none());
            assert!(pod_entry(&light, &name).containers[0].cpu.is_some());
        }
    };
    with_cleanup(&engine, &node, body).await;
}

#[tokio::test]
async fn docker_burning_pod_is_measured() {
    burning_pod_is_measured(Runtime::Docker).await;
}

#[tokio::test]
async fn cri_burning_pod_is_measured() {
    burning_pod_is_measured(Runtime::Cri).await;
}

/// What containerd itself answers for a container in a sandbox run without
/// `linux.cgroup_parent` (as edged runs them): the figures the CRI path relies on.
#[tokio::test]
async fn containerd_measures_containers_of_sandboxes_without_a_cgroup_parent() {
    let engine = engine_on(Runtime::Cri).await;
    let node = unique("stats-raw");
    let body = {
        let engine = engine.clone();
        let node = node.clone();
        async move {
            let name = unique("raw");
            let pod = pod(&name);
            let containers = run(&engine, &node, &pod).await;
            tokio::time::sleep(Duration::from_millis(500)).await;
            let cri = engine.cri().expect("a CRI engine");
            let app = containers
                .iter()
                .find(|c| !c.sandbox)
                .expect("app container");
            let sandbox = containers.iter().find(|c| c.sandbox).expect("sandbox");
            let stats = cri
                .list_container_stats(None)
                .await
                .expect("ListContainerStats");
            let own = stats
                .iter()
                .find(|s| s.attributes.as_ref().is_some_and(|a| a.id == app.id))
                .expect("the container among the stats");
            eprintln!("ListContainerStats entry: {own:#?}");
            let cpu = own
                .cpu
                .as_ref()
                .and_then(|c| c.usage_core_nano_seconds.as_ref());
            assert!(cpu.is_some_and(|v| v.value > 0), "{own:#?}");
            let memory = own
                .memory
                .as_ref()
                .and_then(|m| m.working_set_bytes.as_ref());
            assert!(memory.is_some_and(|v| v.value > 0), "{own:#?}");
            let single = cri.container_stats(&app.id).await.expect("ContainerStats");
            assert!(single.cpu.and_then(|c| c.usage_core_nano_seconds).is_some());
            // Pod sandbox stats: printed for the record (containerd 1.6 serves them only
            // partly, 1.7+ fully; edged does without them).
            match cri.list_pod_sandbox_stats(None).await {
                Ok(all) => {
                    let own = all
                        .iter()
                        .find(|s| s.attributes.as_ref().is_some_and(|a| a.id == sandbox.id));
                    eprintln!("ListPodSandboxStats entry: {own:#?}");
                }
                Err(e) => eprintln!("ListPodSandboxStats: {e} (code {:?})", e.code()),
            }
        }
    };
    with_cleanup(&engine, &node, body).await;
}
