//! `pod-bench`: how fast `wedge run` starts a pod on the local Docker engine, against
//! `docker run` of the same image and command on the same machine, and what edged costs with
//! idle pods.
//!
//! A cloud-hub simulator (in-process, mutual TLS) inserts pods one at a time; the time of one
//! pod is from the insert's send to the arrival of its first `podpatch` whose phase is
//! `Running` (so it includes metamanager's commit, edged's create and start, and the status's
//! way back over the link). `docker run -d` is timed from the command's start to the
//! container's state being `running`; and, as the floor for a pod with a sandbox, the same run
//! in the network of a pause container started just before it. Then `--idle` pods are left running and the CPU time of
//! the `wedge` process is read from `/proc` over `--window` seconds.
//!
//! Needs a running Docker engine and the `wedge-test/busybox:1` and `wedge-test/pause:1` images
//! (`bash .ci/setup`), and a
//! built `wedge` binary (`cargo build --release -p wedge`, which `pod-bench` runs).

use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use clap::Parser;
use serde_json::{Value, json};
use wedge_core::{Content, Message};
use wedge_tests::cloud_node::{CloudNode, PAUSE_IMAGE};
use wedge_tests::cloudhub::{CloudHub, CloudHubOptions};

const IMAGE: &str = "wedge-test/busybox:1";

/// Pod start latency against `docker run`, and edged's CPU with idle pods.
#[derive(Parser)]
struct Args {
    /// Pods started one after another (and as many `docker run`s).
    #[arg(long, default_value_t = 10)]
    pods: usize,
    /// Pods left running while CPU is measured.
    #[arg(long, default_value_t = 30)]
    idle: usize,
    /// Seconds over which the idle CPU is measured.
    #[arg(long, default_value_t = 30)]
    window: u64,
}

fn main() -> Result<()> {
    let args = Args::parse();
    check_engine()?;
    let hub = CloudHub::start(CloudHubOptions::default())?;
    let mut node = CloudNode::start_with_edged(&hub, "    messageQPS: 0\n")?;
    hub.wait_connected(Duration::from_secs(15))?;
    let run_id = &wedge_core::message::new_id()[..8];

    let mut wedge = Vec::new();
    for i in 0..args.pods.max(args.idle) {
        let name = format!("bench-{run_id}-{i}");
        let took = start_pod(&hub, &name, &format!("uid-{run_id}-{i}"))?;
        if i < args.pods {
            wedge.push(took);
        }
    }
    let mut docker = Vec::new();
    let mut docker_pods = Vec::new();
    for i in 0..args.pods {
        docker.push(docker_run(&format!("bench-docker-{run_id}-{i}"), &[])?);
        docker_pods.push(docker_pod(&format!("bench-dpod-{run_id}-{i}"))?);
    }
    report("wedge: insert -> Running podpatch", &mut wedge);
    report("docker run -d -> running", &mut docker);
    report("docker: pause, then joined run", &mut docker_pods);
    let ratio = median(&wedge) / median(&docker);
    println!("median ratio      {ratio:.2}x (target <= 1.3x)");
    let floor = median(&wedge) / median(&docker_pods);
    println!(
        "vs the same two starts by hand  {floor:.2}x (a pod's sandbox, then its container in the sandbox's network)"
    );

    let pid = node.daemon.pid();
    std::thread::sleep(Duration::from_secs(3));
    let before = cpu_ticks(pid)?;
    let started = Instant::now();
    std::thread::sleep(Duration::from_secs(args.window));
    let ticks = cpu_ticks(pid)? - before;
    let hz = 100.0; // USER_HZ on Linux
    let cpu = ticks as f64 / hz / started.elapsed().as_secs_f64() * 100.0;
    println!(
        "idle CPU          {cpu:.2}% of one core for wedge run with {} running pods over {}s",
        args.pods.max(args.idle),
        args.window
    );

    node.daemon.stop(libc::SIGTERM, Duration::from_secs(10))?;
    cleanup(run_id);
    Ok(())
}

fn check_engine() -> Result<()> {
    for image in [IMAGE, PAUSE_IMAGE] {
        let ok = Command::new("docker")
            .args(["image", "inspect", image])
            .output()
            .is_ok_and(|o| o.status.success());
        if !ok {
            bail!("pod-bench needs a running Docker engine with {image} (bash .ci/setup)");
        }
    }
    Ok(())
}

/// Inserts a pod from the cloud and waits for its Running status; returns the time it took.
fn start_pod(hub: &CloudHub, name: &str, uid: &str) -> Result<Duration> {
    let pod = json!({
        "metadata": {"name": name, "namespace": "default", "uid": uid},
        "spec": {"nodeName": "edge-1", "containers": [
            {"name": "app", "image": IMAGE, "imagePullPolicy": "IfNotPresent", "command": ["sleep", "3600"]}
        ]}
    });
    let mut insert = Message::build(
        "edgecontroller",
        "resource",
        "insert",
        &format!("default/pod/{name}"),
        Content::json(&pod)?,
    );
    insert.header.resource_version = "1".into();
    let resource = format!("default/podpatch/{name}");
    let sent = Instant::now();
    hub.send_acked(insert)?;
    let got = hub.wait_for(
        |m| {
            m.message.as_ref().is_some_and(|msg| {
                msg.route.resource == resource
                    && msg
                        .content
                        .as_string()
                        .and_then(|t| serde_json::from_str::<Value>(&t).ok())
                        .is_some_and(|p| p["status"]["phase"] == "Running")
            })
        },
        Duration::from_secs(60),
    )?;
    Ok(got.at.saturating_duration_since(sent))
}

/// What a pod with a sandbox costs the engine, done by hand: `docker run -d` of the pause
/// image, then of the same image and command in its network, until the second runs.
fn docker_pod(name: &str) -> Result<Duration> {
    let started = Instant::now();
    let pause = format!("{name}-pause");
    let out = Command::new("docker")
        .args(["run", "-d", "--name", &pause, PAUSE_IMAGE])
        .output()
        .context("docker run")?;
    if !out.status.success() {
        bail!(
            "docker run {PAUSE_IMAGE} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    docker_run(name, &["--network", &format!("container:{pause}")])?;
    Ok(started.elapsed())
}

/// `docker run -d` (with `options`) of the same image and command, until the engine says it
/// runs.
fn docker_run(name: &str, options: &[&str]) -> Result<Duration> {
    let started = Instant::now();
    let out = Command::new("docker")
        .args(["run", "-d", "--name", name])
        .args(options)
        .args([IMAGE, "sleep", "3600"])
        .output()
        .context("docker run")?;
    if !out.status.success() {
        bail!(
            "docker run failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    loop {
        let state = Command::new("docker")
            .args(["inspect", "-f", "{{.State.Running}}", name])
            .output()?;
        if String::from_utf8_lossy(&state.stdout).trim() == "true" {
            return Ok(started.elapsed());
        }
        if started.elapsed() > Duration::from_secs(60) {
            bail!("{name} not running after 60 s");
        }
    }
}

/// utime + stime of `pid`, in clock ticks.
fn cpu_ticks(pid: u32) -> Result<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    // Fields after the command name (which may hold spaces) start after the last ')'.
    let rest = stat.rsplit_once(')').context("bad /proc stat")?.1;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let utime: u64 = fields.get(11).context("no utime")?.parse()?;
    let stime: u64 = fields.get(12).context("no stime")?.parse()?;
    Ok(utime + stime)
}

fn median(d: &[Duration]) -> f64 {
    let mut v: Vec<f64> = d.iter().map(Duration::as_secs_f64).collect();
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

fn report(what: &str, d: &mut [Duration]) {
    d.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    println!(
        "{what:<34} median {:.0} ms, min {:.0} ms, max {:.0} ms ({} runs)",
        median(d) * 1000.0,
        d.first().copied().map(ms).unwrap_or(f64::NAN),
        d.last().copied().map(ms).unwrap_or(f64::NAN),
        d.len()
    );
}

/// Removes what the benchmark started on the engine: its `docker run`s and the node's pods.
fn cleanup(run_id: &str) {
    let all: Vec<String> = [
        format!("name=bench-.*{run_id}"),
        "label=io.wedge.node=edge-1".to_owned(),
    ]
    .iter()
    .flat_map(|filter| container_ids(filter))
    .collect();
    if !all.is_empty() {
        let _ = Command::new("docker")
            .arg("rm")
            .arg("-f")
            .args(&all)
            .output();
    }
}

/// Ids of the containers `docker ps -a` lists with `filter` (none when docker fails).
fn container_ids(filter: &str) -> Vec<String> {
    Command::new("docker")
        .args(["ps", "-aq", "--filter", filter])
        .output()
        .map(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default()
}
