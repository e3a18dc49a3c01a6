//! Pod start on containerd: edged against the same three CRI calls made by hand (issue 14's
//! target: a ratio of medians of at most 1.2×). A load generator, not a test: it prints
//! figures and fails only when it cannot run.
//!
//! ```sh
//! cargo bench -p wedge-edged --bench pod_start_cri -- --rounds 20
//! cargo bench --profile dev -p wedge-edged --bench pod_start_cri   # no release build
//! ```
//!
//! - **by hand** (what `crictl runp` + `crictl create` + `crictl start` ask, without crictl's
//!   process starts and dials): `RunPodSandbox` with a config like crictl's minimal
//!   `pod-config.json` (metadata, log directory, `linux {}`), `CreateContainer` (busybox
//!   `sleep 3600`, with the sandbox config and a log path), `StartContainer`, then
//!   `ContainerStatus` polled until RUNNING. Timed from the first call to that answer.
//! - **wedge**: edged on the real bus, the bench playing metamanager as the pod suite does
//!   (`tests/pod_suite/`), with kubelet's default settings (relist 1 s) but for the runtime
//!   endpoint and the sandbox image. Timed from handing edged the pod (`insert` on the bus) to
//!   the first `podpatch` whose status says `Running` with the container ready: what the
//!   cloud sees, and all a metamanager can observe. The container's start per CRI
//!   (`started_at`) is printed beside it.
//!
//! - **engine calls** (with `--engine-calls`): the CRI calls of edged's pod worker and status
//!   report in sequence through edged's `Engine` and plans, without the module's loop, each
//!   timed: it tells what edged's requests cost apart from what its loop adds.
//!
//! The side that goes first turns each round, after `--warmup` rounds of each that are not
//! counted. Each round's pod and sandbox are removed before the next (not timed). Needs the
//! containerd `bash .ci/setup` starts (`WEDGE_CRI_ENDPOINT`, default
//! `unix:///run/wedge-ci-containerd/containerd.sock`) with `wedge-test/busybox:1` and
//! `wedge-test/pause:1` in its `k8s.io` namespace. `RUST_LOG=wedge_edged=debug` shows edged's
//! steps with their times (on stderr).

#[path = "../tests/common/mod.rs"]
mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::{IMAGE, PAUSE_IMAGE, WAIT, unique};
use serde_json::{Value, json};
use wedge_core::bus::Mailbox;
use wedge_core::health::Health;
use wedge_core::module::{SupervisionSettings, Supervisor};
use wedge_core::{Bus, Content, Message};
use wedge_cri::Cri;
use wedge_cri::v1::{
    ContainerConfig, ContainerMetadata, ContainerState, ImageSpec, LinuxPodSandboxConfig,
    PodSandboxConfig, PodSandboxMetadata,
};
use wedge_edged::engine::Engine;
use wedge_edged::{Edged, EdgedSettings};

const USAGE: &str = "usage: pod_start_cri [--rounds N (20)] [--warmup N (1)] [--engine-calls]";

/// Wall-clock nanoseconds since the epoch: the clock of CRI's `created_at`/`started_at`.
fn wall_ns() -> i64 {
    let since = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    i64::try_from(since.as_nanos()).unwrap_or(i64::MAX)
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// Milliseconds from `from` to `to`, both wall-clock nanoseconds.
fn ms_between(from: i64, to: i64) -> f64 {
    (to - from) as f64 / 1e6
}

/// One side's round: the total, and named phases (ms).
#[derive(Default)]
struct Sample {
    total: f64,
    phases: BTreeMap<&'static str, f64>,
}

/// The CRI timestamps of a round's sandbox and container, as phases from `t0` (wall ns).
async fn cri_phases(cri: &Cri, t0: i64, sandbox: &str, container: &str, s: &mut Sample) {
    let (Ok(sb), Ok(c)) = (
        cri.pod_sandbox_status(sandbox).await,
        cri.container_status(container).await,
    ) else {
        return;
    };
    s.phases.insert(
        "cri: t0 -> sandbox created_at",
        ms_between(t0, sb.created_at),
    );
    s.phases.insert(
        "cri: sandbox created_at -> container created_at",
        ms_between(sb.created_at, c.created_at),
    );
    s.phases.insert(
        "cri: container created_at -> started_at",
        ms_between(c.created_at, c.started_at),
    );
    s.phases.insert(
        "cri: t0 -> container started_at",
        ms_between(t0, c.started_at),
    );
}

/// The by-hand side: crictl's three calls, then ContainerStatus until RUNNING.
async fn by_hand(cri: &Cri, logs: &std::path::Path) -> Result<Sample, String> {
    let name = unique("bench-hand");
    let log_directory = logs.join(&name);
    std::fs::create_dir_all(&log_directory).map_err(|e| e.to_string())?;
    let sandbox_config = PodSandboxConfig {
        metadata: Some(PodSandboxMetadata {
            name: name.clone(),
            namespace: "default".into(),
            uid: unique("uid"),
            attempt: 1,
        }),
        log_directory: log_directory.display().to_string(),
        linux: Some(LinuxPodSandboxConfig::default()),
        ..PodSandboxConfig::default()
    };
    let container_config = ContainerConfig {
        metadata: Some(ContainerMetadata {
            name: "busybox".into(),
            attempt: 0,
        }),
        image: Some(ImageSpec {
            image: IMAGE.into(),
            ..ImageSpec::default()
        }),
        command: vec!["sleep".into(), "3600".into()],
        log_path: "busybox.0.log".into(),
        ..ContainerConfig::default()
    };
    let mut s = Sample::default();
    let t0 = wall_ns();
    let start = Instant::now();
    let sandbox = cri
        .run_pod_sandbox(sandbox_config.clone(), "")
        .await
        .map_err(|e| e.to_string())?;
    let ran = start.elapsed();
    let outcome = async {
        let container = cri
            .create_container(&sandbox, container_config, sandbox_config)
            .await
            .map_err(|e| e.to_string())?;
        let created = start.elapsed();
        cri.start_container(&container)
            .await
            .map_err(|e| e.to_string())?;
        let started = start.elapsed();
        loop {
            let status = cri
                .container_status(&container)
                .await
                .map_err(|e| e.to_string())?;
            if status.state() == ContainerState::ContainerRunning {
                break;
            }
            if start.elapsed() > WAIT {
                return Err(format!("container {container} not running: {status:?}"));
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        s.total = ms(start.elapsed());
        s.phases.insert("RunPodSandbox", ms(ran));
        s.phases.insert("CreateContainer", ms(created - ran));
        s.phases.insert("StartContainer", ms(started - created));
        s.phases
            .insert("ContainerStatus until RUNNING", s.total - ms(started));
        cri_phases(cri, t0, &sandbox, &container, &mut s).await;
        Ok(())
    }
    .await;
    // Not timed: the sandbox goes, and its container with it.
    let _ = cri.stop_pod_sandbox(&sandbox).await;
    let removed = cri.remove_pod_sandbox(&sandbox).await;
    let _ = std::fs::remove_dir_all(&log_directory);
    outcome?;
    removed.map_err(|e| format!("sandbox {sandbox} left behind: {e}"))?;
    Ok(s)
}

/// The pod edged is given: one busybox `sleep 3600`, no volumes, the image already present.
fn bench_pod(name: &str, uid: &str) -> Value {
    json!({
        "metadata": {"name": name, "namespace": "default", "uid": uid},
        "spec": {
            "terminationGracePeriodSeconds": 1,
            "containers": [{
                "name": "busybox", "image": IMAGE, "imagePullPolicy": "IfNotPresent",
                "command": ["sleep", "3600"],
            }],
        },
    })
}

/// `--engine-calls`: the CRI calls of edged's pod worker and its status report, made in
/// sequence through edged's `Engine` with edged's own plans, without the module's loop:
/// what separates edged's requests from crictl's (the configs, the extra calls) from what the
/// loop, the workers and the bus add. Its pods are labelled for a node of their own, which
/// the running edged does not list.
async fn engine_calls(engine: &Engine, pods_root: &std::path::Path) -> Result<Sample, String> {
    let node = "bench-engine-calls";
    let pod = bench_pod(&unique("bench-engine"), &unique("uid"));
    let pod = wedge_edged::pod::Pod::from_json(&pod.to_string()).map_err(|e| e.to_string())?;
    let spec = &pod.spec.containers[0];
    let mut s = Sample::default();
    let t0 = wall_ns();
    let start = Instant::now();
    let mut lap = Instant::now();
    let mut phase = |s: &mut Sample, name: &'static str| {
        s.phases.insert(name, ms(lap.elapsed()));
        lap = Instant::now();
    };
    let plan = wedge_edged::sandbox::plan(node, &pod, PAUSE_IMAGE, 0);
    let sandbox = engine
        .create_sandbox(&plan)
        .await
        .map_err(|e| e.to_string())?;
    phase(&mut s, "engine: create_sandbox (RunPodSandbox)");
    let outcome = async {
        engine
            .ensure_image(&spec.image, spec.pull_policy(), &[])
            .await
            .map_err(|e| e.to_string())?;
        phase(&mut s, "engine: ensure_image (ImageStatus)");
        let plan =
            wedge_edged::plan::container_plan(node, &pod, spec, 0, pods_root, &[], Some(&sandbox))
                .map_err(|e| e.message)?;
        let container = engine.create(&plan).await.map_err(|e| e.to_string())?;
        phase(&mut s, "engine: create (CreateContainer)");
        engine.start(&container).await.map_err(|e| e.to_string())?;
        phase(&mut s, "engine: start (StartContainer)");
        let started = ms(start.elapsed());
        engine.list(node).await.map_err(|e| e.to_string())?;
        phase(&mut s, "report: list (ListPodSandbox + ListContainers)");
        engine.inspect(&sandbox).await.map_err(|e| e.to_string())?;
        phase(
            &mut s,
            "report: inspect sandbox (ContainerStatus + PodSandboxStatus)",
        );
        let run = engine
            .inspect(&container)
            .await
            .map_err(|e| e.to_string())?;
        phase(&mut s, "report: inspect container (ContainerStatus)");
        if !run.is_some_and(|r| r.running) {
            return Err(format!("container {container} not running"));
        }
        s.total = ms(start.elapsed());
        s.phases.insert("engine: t0 -> start returned", started);
        if let Some(cri) = engine.cri() {
            cri_phases(cri, t0, &sandbox, &container, &mut s).await;
        }
        Ok(())
    }
    .await;
    let _ = engine.stop(&sandbox, Duration::ZERO).await;
    let removed = engine.remove(&sandbox).await;
    outcome?;
    removed.map_err(|e| format!("sandbox {sandbox} left behind: {e}"))?;
    Ok(s)
}

/// edged on a bus, with the bench as metamanager.
struct Node {
    bus: Bus,
    meta: Mailbox,
    supervisor: Option<Supervisor>,
    engine: Engine,
    cri: Cri,
    name: String,
    _root: tempfile::TempDir,
}

/// Whether a pod status says Running with every container ready (the pod suite's `running`).
fn running(status: &Value) -> bool {
    status["phase"] == "Running"
        && status["containerStatuses"]
            .as_array()
            .is_some_and(|c| !c.is_empty() && c.iter().all(|c| c["ready"] == true))
}

impl Node {
    async fn start(cri: Cri) -> Result<Node, String> {
        let root = tempfile::tempdir().map_err(|e| e.to_string())?;
        let name = unique("bench-node");
        let mut settings = EdgedSettings::new(name.clone(), root.path());
        settings.pod_sandbox_image = PAUSE_IMAGE.to_owned();
        settings.runtime_endpoint = common::cri_endpoint();
        let engine = common::engine_on(common::Runtime::Cri).await;
        let bus = Bus::new(1024);
        let mut meta = bus
            .register("metamanager", "meta")
            .map_err(|e| e.to_string())?;
        let mut supervisor =
            Supervisor::new(bus.clone(), Health::new(), SupervisionSettings::default());
        supervisor
            .spawn(std::sync::Arc::new(Edged::new(settings)))
            .map_err(|e| e.to_string())?;
        let query = tokio::time::timeout(WAIT, meta.recv())
            .await
            .ok()
            .flatten()
            .ok_or("edged did not ask metamanager for its pods")?;
        let none: Vec<String> = Vec::new();
        let answer = Content::json(&none).map_err(|e| e.to_string())?;
        if bus.send_response(query.response(answer)).is_some() {
            return Err("edged did not wait for the answer to its pod query".into());
        }
        Ok(Node {
            bus,
            meta,
            supervisor: Some(supervisor),
            engine,
            cri,
            name,
            _root: root,
        })
    }

    async fn send(&self, operation: &str, pod: &Value) -> Result<(), String> {
        let name = pod["metadata"]["name"].as_str().unwrap_or_default();
        let msg = Message::build(
            "metamanager",
            "meta",
            operation,
            &format!("default/pod/{name}"),
            Content::json(pod).map_err(|e| e.to_string())?,
        );
        self.bus.send("edged", msg).await.map_err(|e| e.to_string())
    }

    /// Plays metamanager for one message; returns a status patch as (pod name, status).
    fn take(&self, msg: Message) -> Option<(String, Value)> {
        match msg.route.operation.as_str() {
            "patch" => {
                let name = msg.route.resource.rsplit('/').next()?.to_owned();
                let patch: Value = serde_json::from_str(&msg.content.as_string()?).ok()?;
                Some((name, patch["status"].clone()))
            }
            "query" => {
                let none: Vec<String> = Vec::new();
                let answer = Content::json(&none).ok()?;
                let _ = self.bus.send_response(msg.response(answer));
                None
            }
            "delete" => {
                let _ = self.bus.send_response(msg.response(Content::ok()));
                None
            }
            _ => None,
        }
    }

    /// One pod start: insert, then status patches until one says Running.
    async fn pod_start(&mut self) -> Result<Sample, String> {
        let name = unique("bench-edged");
        let uid = unique("uid");
        let pod = bench_pod(&name, &uid);
        let mut s = Sample::default();
        let t0 = wall_ns();
        let start = Instant::now();
        self.send("insert", &pod).await?;
        let sent = start.elapsed();
        let mut first_patch = None;
        let outcome = loop {
            let left = WAIT.saturating_sub(start.elapsed());
            let Ok(Some(msg)) = tokio::time::timeout(left, self.meta.recv()).await else {
                break Err(format!("no Running status of {name} within {WAIT:?}"));
            };
            let Some((pod_name, status)) = self.take(msg) else {
                continue;
            };
            if pod_name != name {
                continue;
            }
            first_patch.get_or_insert(start.elapsed());
            if running(&status) {
                break Ok(start.elapsed());
            }
        };
        if let Ok(total) = outcome {
            s.total = ms(total);
            s.phases.insert("bus: insert handed to edged", ms(sent));
            if let Some(first) = first_patch {
                s.phases.insert("first podpatch", ms(first));
            }
            let ours: Vec<_> = self
                .engine
                .list(&self.name)
                .await
                .map_err(|e| e.to_string())?
                .into_iter()
                .filter(|c| c.pod_uid == uid)
                .collect();
            let sandbox = ours.iter().find(|c| c.sandbox);
            let container = ours.iter().find(|c| !c.sandbox);
            if let (Some(sb), Some(c)) = (sandbox, container) {
                cri_phases(&self.cri, t0, &sb.id, &c.id, &mut s).await;
                if let Some(started) = s.phases.get("cri: t0 -> container started_at") {
                    let after = s.total - started;
                    s.phases
                        .insert("cri: container started_at -> Running podpatch", after);
                }
            }
        }
        // Not timed: the cloud deletes the pod; wait until its sandbox and container are gone.
        self.send("delete", &pod).await?;
        let deadline = Instant::now() + WAIT;
        loop {
            let left = self
                .engine
                .list(&self.name)
                .await
                .map_err(|e| e.to_string())?;
            if !left.iter().any(|c| c.pod_uid == uid) {
                break;
            }
            if Instant::now() > deadline {
                return Err(format!("pod {name} not removed by edged: {left:?}"));
            }
            let until = Instant::now() + Duration::from_millis(100);
            while let Ok(Some(msg)) = tokio::time::timeout_at(until.into(), self.meta.recv()).await
            {
                self.take(msg);
            }
        }
        outcome.map(|_| s)
    }

    async fn stop(mut self) {
        if let Some(s) = self.supervisor.take() {
            s.shutdown().await;
        }
        // What a failed round may have left.
        if let Ok(left) = self.engine.list(&self.name).await {
            for c in left {
                let _ = self.engine.remove(&c.id).await;
            }
        }
    }
}

/// Median (mean of the middle two for an even count), nearest-rank p90, min, max.
#[derive(Clone, Copy)]
struct Summary {
    median: f64,
    p90: f64,
    min: f64,
    max: f64,
}

fn summary(values: &[f64]) -> Summary {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n == 0 {
        return Summary {
            median: f64::NAN,
            p90: f64::NAN,
            min: f64::NAN,
            max: f64::NAN,
        };
    }
    let median = if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    };
    let rank = (0.9 * n as f64).ceil() as usize;
    Summary {
        median,
        p90: v[rank.clamp(1, n) - 1],
        min: v[0],
        max: v[n - 1],
    }
}

fn summary_json(s: &Summary) -> Value {
    let round = |x: f64| (x * 100.0).round() / 100.0;
    json!({"median_ms": round(s.median), "p90_ms": round(s.p90), "min_ms": round(s.min), "max_ms": round(s.max)})
}

/// Median of each phase over the samples.
fn phase_medians(samples: &[Sample]) -> BTreeMap<&'static str, f64> {
    let mut by_phase: BTreeMap<&'static str, Vec<f64>> = BTreeMap::new();
    for s in samples {
        for (phase, value) in &s.phases {
            by_phase.entry(phase).or_default().push(*value);
        }
    }
    by_phase
        .into_iter()
        .map(|(phase, values)| (phase, summary(&values).median))
        .collect()
}

struct Args {
    rounds: usize,
    warmup: usize,
    engine_calls: bool,
}

fn args() -> Result<Args, String> {
    let mut parsed = Args {
        rounds: 20,
        warmup: 1,
        engine_calls: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut number = |what: &str| {
            it.next()
                .and_then(|n| n.parse::<usize>().ok())
                .ok_or(format!("{what} wants a number\n{USAGE}"))
        };
        match arg.as_str() {
            "--rounds" => parsed.rounds = number("--rounds")?.max(1),
            "--warmup" => parsed.warmup = number("--warmup")?,
            "--engine-calls" => parsed.engine_calls = true,
            // What `cargo bench` passes to every bench binary.
            "--bench" => {}
            "-h" | "--help" => return Err(USAGE.to_owned()),
            other => return Err(format!("unknown argument {other:?}\n{USAGE}")),
        }
    }
    Ok(parsed)
}

/// The runtime and its images, or what is missing.
async fn preflight() -> Result<Cri, String> {
    let endpoint = common::cri_endpoint();
    let cri = Cri::connect(&endpoint).await.map_err(|e| {
        format!(
            "needs a containerd with the CRI plugin at {endpoint} (WEDGE_CRI_ENDPOINT): {e}\n\
             Start the private one with `bash .ci/setup` (as root)."
        )
    })?;
    for image in [IMAGE, PAUSE_IMAGE] {
        match cri.image_status(image).await {
            Ok(Some(_)) => {}
            Ok(None) => {
                return Err(format!(
                    "the image {image} is not in the containerd at {endpoint} (its k8s.io \
                     namespace); `bash .ci/setup` imports it"
                ));
            }
            Err(e) => return Err(format!("image status of {image} at {endpoint}: {e}")),
        }
    }
    Ok(cri)
}

/// What a round times.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Side {
    ByHand,
    Wedge,
    EngineCalls,
}

impl Side {
    fn label(self) -> &'static str {
        match self {
            Side::ByHand => "by hand",
            Side::Wedge => "wedge",
            Side::EngineCalls => "engine calls",
        }
    }
}

async fn run(args: Args) -> Result<(), String> {
    let cri = preflight().await?;
    let scratch = tempfile::tempdir().map_err(|e| e.to_string())?;
    let mut node = Node::start(cri.clone()).await?;
    let profile = if cfg!(debug_assertions) {
        "dev"
    } else {
        "release"
    };
    eprintln!(
        "pod_start_cri: {} at {} ({profile} build), {} warm-up + {} rounds",
        cri.container_runtime_version(),
        common::cri_endpoint(),
        args.warmup,
        args.rounds
    );
    let mut sides = vec![Side::ByHand, Side::Wedge];
    if args.engine_calls {
        sides.push(Side::EngineCalls);
    }
    let mut samples: BTreeMap<&'static str, Vec<Sample>> = BTreeMap::new();
    let mut failed = None;
    for round in 0..args.warmup + args.rounds {
        let counted = round >= args.warmup;
        // The first side turns each round, so none always runs on a fresher runtime.
        let mut order = sides.clone();
        order.rotate_left(round % sides.len());
        let mut line = format!(
            "round {round:>2}{}:",
            if counted { "" } else { " (warm-up)" }
        );
        for side in order {
            let sample = match side {
                Side::ByHand => by_hand(&cri, scratch.path()).await,
                Side::Wedge => node.pod_start().await,
                Side::EngineCalls => engine_calls(&node.engine, scratch.path()).await,
            };
            match sample {
                Ok(s) => {
                    line.push_str(&format!(" {} {:.1} ms", side.label(), s.total));
                    if counted {
                        samples.entry(side.label()).or_default().push(s);
                    }
                }
                Err(e) => {
                    failed = Some(format!("{}, round {round}: {e}", side.label()));
                    break;
                }
            }
        }
        eprintln!("{line}");
        if failed.is_some() {
            break;
        }
    }
    node.stop().await;
    if let Some(e) = failed {
        return Err(e);
    }
    report(&samples, profile, &cri.container_runtime_version());
    Ok(())
}

/// The table, the phases and the JSON line.
fn report(samples: &BTreeMap<&'static str, Vec<Sample>>, profile: &str, runtime: &str) {
    let none = Vec::new();
    let side = |side: Side| samples.get(side.label()).unwrap_or(&none);
    let totals = |s: &[Sample]| summary(&s.iter().map(|s| s.total).collect::<Vec<_>>());
    let started = |s: &[Sample]| {
        let at = "cri: t0 -> container started_at";
        summary(
            &s.iter()
                .filter_map(|s| s.phases.get(at).copied())
                .collect::<Vec<_>>(),
        )
    };
    let (hand, wedge, engine) = (
        side(Side::ByHand),
        side(Side::Wedge),
        side(Side::EngineCalls),
    );
    let (h, w) = (totals(hand), totals(wedge));
    let (hs, ws) = (started(hand), started(wedge));
    let ratio = w.median / h.median;
    let started_ratio = ws.median / hs.median;
    println!();
    println!(
        "pod start on containerd ({runtime}), {} rounds ({profile} build)",
        hand.len()
    );
    println!(
        "{:<46} {:>9} {:>9} {:>9} {:>9}",
        "", "median", "p90", "min", "max"
    );
    let mut rows = vec![
        ("by hand: 3 CRI calls -> RUNNING (ms)", h),
        ("wedge: insert -> Running podpatch (ms)", w),
        ("by hand: t0 -> CRI started_at (ms)", hs),
        ("wedge: t0 -> CRI started_at (ms)", ws),
    ];
    if !engine.is_empty() {
        rows.push(("engine calls: worker + report calls (ms)", totals(engine)));
    }
    for (label, s) in &rows {
        println!(
            "{label:<46} {:>9.1} {:>9.1} {:>9.1} {:>9.1}",
            s.median, s.p90, s.min, s.max
        );
    }
    println!("ratio of medians (wedge / by hand): {ratio:.2}x (target <= 1.2x)");
    println!("  to CRI started_at alone: {started_ratio:.2}x");
    println!("phase medians (ms):");
    let mut phases = serde_json::Map::new();
    for (label, list) in samples {
        let medians = phase_medians(list);
        for (phase, value) in &medians {
            println!("  {label:<12} {phase:<60} {value:>8.1}");
        }
        let round3 = |x: f64| (x * 1000.0).round() / 1000.0;
        let medians: serde_json::Map<String, Value> = medians
            .into_iter()
            .map(|(k, v)| (k.to_owned(), json!(round3(v))))
            .collect();
        phases.insert((*label).to_owned(), Value::Object(medians));
    }
    let round3 = |x: f64| (x * 1000.0).round() / 1000.0;
    let mut line = json!({
        "bench": "pod_start_cri",
        "runtime": runtime,
        "profile": profile,
        "rounds": hand.len(),
        "by_hand": summary_json(&h),
        "wedge": summary_json(&w),
        "ratio_median": round3(ratio),
        "by_hand_started_at": summary_json(&hs),
        "wedge_started_at": summary_json(&ws),
        "ratio_median_started_at": round3(started_ratio),
        "phase_medians_ms": phases,
    });
    if !engine.is_empty() {
        line["engine_calls"] = summary_json(&totals(engine));
    }
    println!("{line}");
}

fn main() -> std::process::ExitCode {
    // `RUST_LOG=wedge_edged=debug` shows what edged did, with times.
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .try_init();
    let outcome = args().and_then(|args| {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .map_err(|e| format!("no tokio runtime: {e}"))?;
        runtime.block_on(run(args))
    });
    match outcome {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("pod_start_cri: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
