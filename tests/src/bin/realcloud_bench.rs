//! `realcloud-bench`: timings of a node under a real KubeEdge cloud, for Wedge and (with
//! `--reference`) for KubeEdge's own edgecore v1.23.1 joined to the same cloud:
//! join → node Ready, `kubectl apply` → pod Running, graceful `kubectl delete` → pod gone, and
//! the writes an idle Running pod costs the cloud (its object's updates per minute: each is an
//! etcd write). Not a test: it prints figures.
//!
//! ```sh
//! cargo build --release -p wedge -p wedge-tests --bins
//! target/release/realcloud-bench --pods 5 --idle 60 [--reference]
//! ```

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use clap::Parser;
use serde_json::Value;
use wedge_tests::realcloud::{RealCloud, RealNode, RealNodeOptions, stubborn_pod, wait_for};

#[derive(Parser, Debug)]
#[command(about = "Timings of Wedge (and edgecore) under a real KubeEdge cloud")]
struct Args {
    /// Pods started one after the other on each node.
    #[arg(long, default_value_t = 5)]
    pods: usize,
    /// Seconds the pods stay idle while their object updates are counted.
    #[arg(long, default_value_t = 60)]
    idle: u64,
    /// The pods' grace period, in seconds (their shell ignores SIGTERM, so deletion takes it).
    #[arg(long, default_value_t = 5)]
    grace: u64,
    /// Also measure KubeEdge's edgecore v1.23.1 (needs root, containerd and
    /// ../shared/realcloud/reference-edgecore.sh).
    #[arg(long)]
    reference: bool,
}

struct Figures {
    join_ready: Duration,
    apply_running: Vec<Duration>,
    idle_writes_per_pod_minute: f64,
    delete_gone: Vec<Duration>,
}

fn main() -> Result<()> {
    let args = Args::parse();
    let cloud = RealCloud::start()?;
    let started = Instant::now();
    let node = RealNode::join(&cloud, RealNodeOptions::new("wedge-bench"))?;
    let wedge = measure(&cloud, &node.name, started, &args)?;
    report("wedge", &wedge, &args);
    drop(node);
    if args.reference {
        let started = Instant::now();
        let reference = Reference::start(&cloud)?;
        let figures = measure(&cloud, "edgecore-bench", started, &args);
        drop(reference);
        report("edgecore v1.23.1", &figures?, &args);
    }
    Ok(())
}

fn report(who: &str, f: &Figures, args: &Args) {
    let ms = |d: &Duration| d.as_secs_f64() * 1000.0;
    let median = |v: &[Duration]| {
        let mut v: Vec<f64> = v.iter().map(ms).collect();
        v.sort_by(f64::total_cmp);
        v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
    };
    println!("== {who}");
    println!("join -> node Ready:            {:.0} ms", ms(&f.join_ready));
    println!(
        "apply -> Running (median of {}): {:.0} ms  (all: {:?})",
        f.apply_running.len(),
        median(&f.apply_running),
        f.apply_running
            .iter()
            .map(|d| ms(d).round())
            .collect::<Vec<_>>()
    );
    println!(
        "graceful delete -> gone (grace {} s, median): {:.0} ms",
        args.grace,
        median(&f.delete_gone)
    );
    println!(
        "writes per idle pod per minute ({} s window): {:.2}",
        args.idle, f.idle_writes_per_pod_minute
    );
}

fn measure(cloud: &RealCloud, node: &str, started: Instant, args: &Args) -> Result<Figures> {
    wait_for("node Ready", Duration::from_secs(120), || {
        let n = cloud.get_opt(&["node", node])?;
        Ok(n.filter(|n| condition(n, "Ready") == "True").map(|_| ()))
    })?;
    let join_ready = started.elapsed();
    let names: Vec<String> = (0..args.pods)
        .map(|i| format!("bench-{node}-{i}"))
        .collect();
    let mut apply_running = Vec::new();
    for name in &names {
        let at = Instant::now();
        cloud.apply(&stubborn_pod(node, name, args.grace))?;
        wait_for("pod Running", Duration::from_secs(120), || {
            let p = cloud.get_opt(&["pod", name])?;
            Ok(
                p.filter(|p| p["status"]["phase"] == "Running" && condition(p, "Ready") == "True")
                    .map(|_| ()),
            )
        })?;
        apply_running.push(at.elapsed());
    }
    // Let the starts settle, then count every update of the pods' objects.
    std::thread::sleep(Duration::from_secs(5));
    let writes = count_updates(cloud, &names, Duration::from_secs(args.idle))?;
    let idle_writes_per_pod_minute = writes as f64 / names.len() as f64 * 60.0 / args.idle as f64;
    let mut delete_gone = Vec::new();
    for name in &names {
        let at = Instant::now();
        cloud.kubectl(&["delete", "pod", name, "--wait=false"])?;
        wait_for("pod gone", Duration::from_secs(args.grace + 60), || {
            Ok(cloud.get_opt(&["pod", name])?.is_none().then_some(()))
        })?;
        delete_gone.push(at.elapsed());
    }
    Ok(Figures {
        join_ready,
        apply_running,
        idle_writes_per_pod_minute,
        delete_gone,
    })
}

fn condition(object: &Value, kind: &str) -> String {
    object["status"]["conditions"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["type"] == kind))
        .and_then(|c| c["status"].as_str())
        .unwrap_or_default()
        .to_owned()
}

/// Updates of the named pods' objects within `window`, from `kubectl get --watch`: every
/// event after the first (the current state) is one write.
fn count_updates(cloud: &RealCloud, names: &[String], window: Duration) -> Result<usize> {
    let kubeconfig = cloud.kubeconfig();
    let mut watch = Command::new(wedge_tests::realcloud::bin_dir().join("kubectl"))
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .args([
            "get",
            "pods",
            "--watch",
            "--output-watch-events",
            "-o",
            "jsonpath={.type} {.object.metadata.name} {.object.metadata.resourceVersion}{\"\\n\"}",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .context("kubectl get --watch")?;
    std::thread::sleep(window);
    let _ = watch.kill();
    let out = watch.wait_with_output()?;
    let text = String::from_utf8_lossy(&out.stdout);
    Ok(text
        .lines()
        .filter(|l| l.starts_with("MODIFIED") && names.iter().any(|n| l.contains(n.as_str())))
        .count())
}

/// KubeEdge's edgecore v1.23.1 joined to the same cloud by `reference-edgecore.sh`; stopped
/// on drop.
struct Reference {
    env: Vec<(String, String)>,
    script: std::path::PathBuf,
}

impl Reference {
    fn start(cloud: &RealCloud) -> Result<Reference> {
        let script = wedge_tests::realcloud::shared_dir()?.join("realcloud/reference-edgecore.sh");
        let dir = std::env::temp_dir().join("wedge-bench-edgecore");
        let _ = std::fs::remove_dir_all(&dir);
        let p = &cloud.ports;
        let env = vec![
            ("STATE".to_owned(), cloud.state_dir().display().to_string()),
            (
                "BIN".to_owned(),
                wedge_tests::realcloud::bin_dir().display().to_string(),
            ),
            ("NODE".to_owned(), "edgecore-bench".to_owned()),
            ("DIR".to_owned(), dir.display().to_string()),
            (
                "CONTAINERD_DIR".to_owned(),
                std::env::temp_dir()
                    .join("wedge-bench-containerd")
                    .display()
                    .to_string(),
            ),
            (
                "MQTT".to_owned(),
                format!("tcp://127.0.0.1:{}", wedge_tests::free_port()),
            ),
            ("CLOUDHUB_PORT".to_owned(), p.cloudhub.to_string()),
            (
                "CLOUDHUB_HTTPS_PORT".to_owned(),
                p.cloudhub_https.to_string(),
            ),
        ];
        let status = Command::new("bash")
            .arg(&script)
            .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .status()?;
        if !status.success() {
            bail!("{} failed: {status}", script.display());
        }
        Ok(Reference { env, script })
    }
}

impl Drop for Reference {
    fn drop(&mut self) {
        let _ = Command::new("bash")
            .arg(&self.script)
            .arg("stop")
            .envs(self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .status();
    }
}
