//! MetaServer through the real cloud (CloudCore's dynamicController on): `kubectl --server`
//! to the node's MetaServer lists what the apiserver lists, a watch opened there sees a
//! ConfigMap edited in the cloud, and through a CloudCore outage the node answers LIST and GET
//! from its store, keeps the watch open, and delivers the edit made during the outage after
//! it. kubectl is the client: it is what operators point at MetaServer, and its watch is
//! client-go's.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use serde_json::Value;
use wedge_tests::realcloud::bin_dir;

use crate::Bed;

/// kubectl pointed at the node's MetaServer, with no kubeconfig of its own.
fn edge_kubectl(bed: &Bed, args: &[&str]) -> Command {
    let mut command = Command::new(bin_dir().join("kubectl"));
    command
        .env("KUBECONFIG", "/dev/null")
        .env("HOME", std::env::temp_dir())
        .arg(format!("--server=http://127.0.0.1:{}", bed.metaserver_port))
        .args(args);
    command
}

fn edge_run(bed: &Bed, args: &[&str]) -> Result<String> {
    let out = edge_kubectl(bed, args).stdin(Stdio::null()).output()?;
    ensure!(
        out.status.success(),
        "kubectl --server MetaServer {} failed: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr).trim()
    );
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The sorted `namespace/name`s of a `kubectl get -o json` list.
fn names(list: &Value) -> Vec<String> {
    let mut names: Vec<String> = list["items"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|o| {
            format!(
                "{}/{}",
                o["metadata"]["namespace"].as_str().unwrap_or(""),
                o["metadata"]["name"].as_str().unwrap_or("")
            )
        })
        .collect();
    names.sort();
    names
}

fn edge_names(bed: &Bed, args: &[&str]) -> Result<Vec<String>> {
    let mut all = vec!["get"];
    all.extend_from_slice(args);
    all.extend_from_slice(&["-o", "json"]);
    let list: Value =
        serde_json::from_str(&edge_run(bed, &all)?).context("MetaServer's list is not JSON")?;
    Ok(names(&list))
}

/// Reads a child's stdout lines on a thread, each with when it arrived.
fn lines_of(child: &mut Child) -> Result<mpsc::Receiver<(Instant, String)>> {
    let stdout = child.stdout.take().context("no stdout")?;
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { return };
            if tx.send((Instant::now(), line)).is_err() {
                return;
            }
        }
    });
    Ok(rx)
}

/// Waits up to `within` for a line equal to `want`; when it arrived.
fn expect_line(
    lines: &mpsc::Receiver<(Instant, String)>,
    want: &str,
    within: Duration,
) -> Result<Instant> {
    let start = Instant::now();
    let mut seen = Vec::new();
    while let Some(left) = within.checked_sub(start.elapsed()) {
        match lines.recv_timeout(left) {
            Ok((at, line)) if line.trim() == want => return Ok(at),
            Ok((_, line)) => seen.push(line),
            Err(mpsc::RecvTimeoutError::Timeout) => break,
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                bail!("the watch ended; it printed {seen:?}")
            }
        }
    }
    bail!("no {want:?} within {within:?}; the watch printed {seen:?}")
}

fn configmap(value: &str) -> String {
    format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: edge-watched\n  namespace: default\n  \
         labels:\n    app: metaserver-check\ndata:\n  k: {value}\n"
    )
}

/// The check.
pub fn metaserver_lists_watches_and_serves_through_an_outage(bed: &mut Bed) -> Result<()> {
    bed.cloud.apply(&configmap("v1"))?;
    // LIST through MetaServer gives the apiserver's sets.
    for args in [
        &["pods", "-A"][..],
        &["configmaps", "-n", "default"],
        &["services", "-A"],
        &["endpointslices", "-A"],
    ] {
        let mut cloud_args = vec!["get"];
        cloud_args.extend_from_slice(args);
        cloud_args.extend_from_slice(&["-o", "json"]);
        let cloud_list: Value = serde_json::from_str(&bed.cloud.kubectl(&cloud_args)?)?;
        let want = names(&cloud_list);
        let got = edge_names(bed, args)?;
        ensure!(
            got == want,
            "kubectl get {} through MetaServer: {got:?}, the apiserver: {want:?}",
            args.join(" ")
        );
        println!(
            "    get {}: {} objects, as the apiserver",
            args.join(" "),
            got.len()
        );
    }
    // kubectl's own table.
    let table = edge_run(bed, &["get", "configmaps", "-n", "default"])?;
    ensure!(
        table
            .lines()
            .next()
            .is_some_and(|h| h.starts_with("NAME") && h.contains("DATA")),
        "kubectl's table through MetaServer: {table}"
    );
    ensure!(
        table.contains("edge-watched"),
        "the table lacks the ConfigMap: {table}"
    );
    // A watch sees an edit made in the cloud.
    let mut watch = edge_kubectl(
        bed,
        &[
            "get",
            "configmap",
            "edge-watched",
            "-n",
            "default",
            "--watch",
            "-o",
            "jsonpath={.data.k}{\"\\n\"}",
        ],
    )
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .spawn()?;
    let outcome = (|| -> Result<()> {
        let lines = lines_of(&mut watch)?;
        expect_line(&lines, "v1", Duration::from_secs(20))?;
        let edited = Instant::now();
        bed.cloud.apply(&configmap("v2"))?;
        let seen = expect_line(&lines, "v2", Duration::from_secs(20))?;
        println!(
            "    the watch saw the cloud's edit {:.1?} after kubectl apply started",
            seen.duration_since(edited)
        );
        // The watch is served from the node's store: the edit is in it.
        // Outage: LIST and GET answer from the node, the watch stays open.
        bed.cloud.stop_cloudcore()?;
        let down = Instant::now();
        let offline = edge_names(bed, &["configmaps", "-n", "default"])?;
        ensure!(
            offline.contains(&"default/edge-watched".to_owned()),
            "offline LIST: {offline:?}"
        );
        let one = edge_run(
            bed,
            &[
                "get",
                "configmap",
                "edge-watched",
                "-n",
                "default",
                "-o",
                "jsonpath={.data.k}",
            ],
        )?;
        ensure!(one == "v2", "offline GET gave {one:?}");
        let write = edge_kubectl(
            bed,
            &["label", "configmap", "edge-watched", "-n", "default", "x=y"],
        )
        .output()?;
        let refused = String::from_utf8_lossy(&write.stderr);
        ensure!(
            !write.status.success() && refused.contains("connection lost"),
            "an offline write: {refused}"
        );
        println!(
            "    offline: LIST {} ConfigMaps, GET, a write refused: {}",
            offline.len(),
            refused.trim()
        );
        // An edit in the cloud during the outage arrives after it.
        bed.cloud.apply(&configmap("v3"))?;
        std::thread::sleep(Duration::from_secs(20).saturating_sub(down.elapsed()));
        ensure!(
            watch.try_wait()?.is_none(),
            "the watch ended during the outage"
        );
        let restart = Instant::now();
        bed.cloud.up()?;
        let ready = restart.elapsed();
        let seen = expect_line(&lines, "v3", Duration::from_secs(60))?;
        println!(
            "    the edit made during the outage reached the watch {:.1?} after CloudCore's restart began (up.sh returned after {ready:.1?})",
            seen.duration_since(restart)
        );
        Ok(())
    })();
    let _ = watch.kill();
    let _ = watch.wait();
    outcome
}
