//! KubeEdge's hold-upgrade (v1.23) through the real cloud: a pod annotated
//! `edge.kubeedge.io/hold-upgrade: "true"` that the scheduler binds to the node stays
//! `Pending` with the condition `HeldUpgrade=True` until the operator releases it through
//! MetaServer (`POST /api/v1/pods/unhold-upgrade`, one pod; `/api/v1/nodes/unhold-upgrade`,
//! every held pod of the node), then runs. The binding is made as the scheduler makes it
//! (a `Binding` object; this suite's cloud runs no scheduler), so the node first hears of
//! the pod in an `update`, which is what edgecore holds.

use std::time::Duration;

use anyhow::{Result, ensure};
use serde_json::Value;
use wedge_tests::realcloud::wait_for;

use crate::Bed;

fn held_pod(name: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n  namespace: default\n  \
         annotations:\n    edge.kubeedge.io/hold-upgrade: \"true\"\nspec:\n  \
         terminationGracePeriodSeconds: 1\n  containers:\n  - name: app\n    \
         image: wedge-test/busybox:1\n    imagePullPolicy: Never\n    command: [sleep, \"3600\"]\n"
    )
}

fn binding(name: &str, node: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Binding\nmetadata:\n  name: {name}\n  namespace: default\n\
         target:\n  apiVersion: v1\n  kind: Node\n  name: {node}\n"
    )
}

/// POSTs `body` to MetaServer's `path`; the status and the body.
fn post(addr: &str, path: &str, body: &str) -> Result<(u16, String)> {
    let addr: std::net::SocketAddr = addr.parse()?;
    wedge_tests::http_request(
        addr,
        "POST",
        path,
        &[("Content-Type", "text/plain")],
        body.as_bytes(),
    )
}

fn held(pod: &Value) -> bool {
    pod["status"]["phase"] == "Pending"
        && pod["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|c| {
                c["type"] == "HeldUpgrade"
                    && c["status"] == "True"
                    && c["reason"] == "HoldUpgradeEnabled"
            })
}

/// The check.
pub fn a_held_pod_waits_for_unhold_upgrade(bed: &mut Bed) -> Result<()> {
    let node = bed.node.name.clone();
    let metaserver = format!("127.0.0.1:{}", bed.metaserver_port);
    let pods = ["rc-held-1", "rc-held-2", "rc-held-3"];
    for pod in pods {
        bed.cloud.apply(&held_pod(pod))?;
        // Bindings are created, never applied (they cannot be read back).
        bed.cloud
            .kubectl_client()
            .run(&["create", "-f", "-"], Some(&binding(pod, &node)))?;
    }
    for pod in pods {
        wait_for(
            &format!("{pod} shown held"),
            Duration::from_secs(60),
            || {
                let p = bed.cloud.get(&["pod", pod])?;
                Ok(held(&p).then_some(()))
            },
        )?;
    }
    // Still held a while later: nothing started it.
    std::thread::sleep(Duration::from_secs(3));
    let p = bed.cloud.get(&["pod", pods[0]])?;
    ensure!(held(&p), "{} no longer held: {}", pods[0], p["status"]);

    // Refusals as v1.23.1 answers them.
    let (status, body) = post(&metaserver, "/api/v1/pods/unhold-upgrade", "no-slash")?;
    ensure!(
        status == 400 && body.contains("<namespace>/<name>"),
        "{status} {body:?}"
    );
    let (status, _) = post(
        &metaserver,
        "/api/v1/pods/unhold-upgrade",
        "default/rc-nosuch",
    )?;
    ensure!(status == 404, "an unknown pod got {status}");
    let (status, _) = post(&metaserver, "/api/v1/nodes/unhold-upgrade", "another-node")?;
    ensure!(status == 404, "another node got {status}");

    // One pod, then the node.
    let (status, body) = post(
        &metaserver,
        "/api/v1/pods/unhold-upgrade",
        &format!("default/{}", pods[0]),
    )?;
    ensure!(status == 200, "unhold of one pod: {status} {body:?}");
    wait_for(
        &format!("{} runs once released", pods[0]),
        Duration::from_secs(60),
        || {
            let p = bed.cloud.get(&["pod", pods[0]])?;
            Ok((p["status"]["phase"] == "Running").then_some(()))
        },
    )?;
    for pod in &pods[1..] {
        let p = bed.cloud.get(&["pod", pod])?;
        ensure!(
            held(&p),
            "{pod} was released with another pod: {}",
            p["status"]
        );
    }
    let (status, body) = post(&metaserver, "/api/v1/nodes/unhold-upgrade", &node)?;
    ensure!(status == 200, "unhold of the node: {status} {body:?}");
    for pod in &pods[1..] {
        wait_for(
            &format!("{pod} runs once the node is released"),
            Duration::from_secs(60),
            || {
                let p = bed.cloud.get(&["pod", pod])?;
                Ok((p["status"]["phase"] == "Running").then_some(()))
            },
        )?;
    }
    let mut args = vec!["delete", "pod", "--wait=false"];
    args.extend(pods);
    bed.cloud.kubectl(&args)?;
    Ok(())
}
