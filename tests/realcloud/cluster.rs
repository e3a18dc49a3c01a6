//! What a cluster's controllers do to a node that a hand-driven apiserver never did: several
//! pods of one owner start at once and share their objects, and a pod's address changes under
//! it. Both were broken on Wedge while single pods worked (issue 28).

use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use serde_json::Value;
use wedge_tests::realcloud::wait_for;

use crate::Bed;
use crate::pods::wait_running;

/// A pod like a ReplicaSet's: mounts ConfigMap `shared` as every replica does.
fn replica(bed: &Bed, name: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n  namespace: default\n  \
         labels: {{app: replicas}}\nspec:\n  nodeName: {node}\n  terminationGracePeriodSeconds: 1\n  \
         automountServiceAccountToken: false\n  containers:\n  - name: app\n    \
         image: wedge-test/busybox:1\n    imagePullPolicy: Never\n    \
         command: [sh, -c, \"cat /etc/shared/greeting; sleep 3600\"]\n    \
         volumeMounts: [{{name: shared, mountPath: /etc/shared}}]\n  \
         volumes: [{{name: shared, configMap: {{name: shared}}}}]\n---\n",
        node = bed.node.name
    )
}

/// Pods of one namespace that need the same ConfigMap start together. CloudCore keeps one
/// answer per object in its queue to the node: two lookups of one object at once used to leave
/// one pod waiting out edged's 10 s object timeout (a Deployment of 2 took ~21 s to run on
/// Wedge, 2 s on edgecore). Judged by what the second pod waited for, not by a time target:
/// every pod's containers start before that timeout could have passed.
pub fn pods_sharing_a_configmap_start_together(bed: &mut Bed) -> Result<()> {
    bed.cloud.apply(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: shared\n  namespace: default\n\
         data:\n  greeting: hello\n",
    )?;
    let names: Vec<String> = (1..=4).map(|i| format!("replica-{i}")).collect();
    let all: String = names.iter().map(|n| replica(bed, n)).collect();
    let applied = Instant::now();
    bed.cloud.apply(&all)?;
    for name in &names {
        wait_running(bed, name, Duration::from_secs(90))?;
    }
    let took = applied.elapsed();
    println!(
        "realcloud: {} pods sharing a ConfigMap Running {took:.1?} after apply",
        names.len()
    );
    // Each pod's container started (Docker's own clock) within 8 s of the first: no pod sat
    // out a lookup that was never answered.
    let mut started: Vec<(String, String)> = Vec::new();
    for name in &names {
        let pod = bed.cloud.get(&["pod", name])?;
        let at = pod["status"]["containerStatuses"][0]["state"]["running"]["startedAt"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        started.push((name.clone(), at));
    }
    let secs: Vec<i64> = started
        .iter()
        .map(|(_, at)| rfc3339_seconds(at))
        .collect::<Result<_>>()?;
    let spread = secs.iter().max().unwrap_or(&0) - secs.iter().min().unwrap_or(&0);
    ensure!(
        spread < 8,
        "the pods' containers started {spread} s apart (a lookup left unanswered waits 10 s): {started:?}"
    );
    let mut args = vec!["delete", "pod", "--wait=false"];
    args.extend(names.iter().map(String::as_str));
    bed.cloud.kubectl(&args)?;
    Ok(())
}

/// Seconds since the epoch of `2026-11-27T16:08:06Z` (the form Kubernetes writes).
fn rfc3339_seconds(at: &str) -> Result<i64> {
    let out = Command::new("date")
        .args(["-u", "-d", at, "+%s"])
        .output()
        .context("date")?;
    ensure!(out.status.success(), "not a time: {at:?}");
    Ok(String::from_utf8_lossy(&out.stdout).trim().parse()?)
}

/// The pod sandbox of pod `name` (its Docker id).
fn sandbox_of(name: &str) -> Result<Option<String>> {
    let out = Command::new("docker")
        .args([
            "ps",
            "-q",
            "--filter",
            &format!("label=io.kubernetes.pod.name={name}"),
            "--filter",
            "label=io.kubernetes.docker.type=podsandbox",
        ])
        .output()
        .context("docker ps (a Docker engine must run: bash .ci/setup)")?;
    ensure!(out.status.success(), "docker ps failed: {out:?}");
    Ok(String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .next()
        .map(str::to_owned))
}

fn ips(pod: &Value) -> Vec<String> {
    pod["status"]["podIPs"]
        .as_array()
        .map(|l| {
            l.iter()
                .filter_map(|ip| ip["ip"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

/// A pod whose sandbox is removed under it gets a new sandbox, with another address, and the
/// cloud shows that address, alone. A status patch that merged the new `podIPs` into the old
/// ones was refused by the apiserver (one IP per family) and the pod's status froze.
pub fn a_pod_whose_sandbox_is_removed_shows_its_new_ip(bed: &mut Bed) -> Result<()> {
    let name = "readdressed";
    bed.cloud.apply(&format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n  namespace: default\nspec:\n  \
         nodeName: {node}\n  terminationGracePeriodSeconds: 1\n  \
         automountServiceAccountToken: false\n  containers:\n  - name: app\n    \
         image: wedge-test/busybox:1\n    imagePullPolicy: Never\n    command: [sleep, \"3600\"]\n",
        node = bed.node.name
    ))?;
    let pod = wait_running(bed, name, Duration::from_secs(90))?;
    let before = ips(&pod);
    ensure!(before.len() == 1, "one pod IP, not {before:?}");
    let sandbox = sandbox_of(name)?.context("the pod has a running sandbox")?;
    // Another container takes the address the sandbox frees, so the next one gets another.
    let squatter = format!("wedge-squatter-{}", std::process::id());
    let removed = Command::new("docker")
        .args(["rm", "-f", &sandbox])
        .output()?;
    ensure!(removed.status.success(), "docker rm -f: {removed:?}");
    let squat = Command::new("docker")
        .args([
            "run",
            "-d",
            "--name",
            &squatter,
            "wedge-test/busybox:1",
            "sleep",
            "300",
        ])
        .output()?;
    let gone = Instant::now();
    let outcome = wait_for(
        "the cloud shows the pod's new address",
        Duration::from_secs(60),
        || {
            let pod = bed.cloud.get(&["pod", name])?;
            let now = ips(&pod);
            Ok((now.len() == 1
                && now != before
                && pod["status"]["podIP"].as_str() == Some(now[0].as_str())
                && pod["status"]["phase"] == "Running")
                .then_some(now))
        },
    );
    let _ = Command::new("docker")
        .args(["rm", "-f", &squatter])
        .output();
    ensure!(squat.status.success(), "docker run (squatter): {squat:?}");
    let after = outcome?;
    println!(
        "realcloud: pod IP {} -> {} shown {:.1?} after its sandbox was removed",
        before[0],
        after[0],
        gone.elapsed()
    );
    let new_sandbox = sandbox_of(name)?.context("a new sandbox runs")?;
    ensure!(new_sandbox != sandbox, "the sandbox was made anew");
    bed.cloud
        .kubectl(&["delete", "pod", name, "--wait=false"])?;
    Ok(())
}

/// The reasons of the events the cloud holds about pod `name`, each with its type and count.
fn events_of(bed: &Bed, name: &str) -> Result<Vec<(String, String, u64)>> {
    let list = bed.cloud.get(&[
        "events",
        "--field-selector",
        &format!("involvedObject.name={name}"),
    ])?;
    Ok(list["items"]
        .as_array()
        .map(|items| {
            items
                .iter()
                .map(|e| {
                    (
                        e["reason"].as_str().unwrap_or_default().to_owned(),
                        e["type"].as_str().unwrap_or_default().to_owned(),
                        e["count"].as_u64().unwrap_or(0),
                    )
                })
                .collect()
        })
        .unwrap_or_default())
}

/// The Events part of `kubectl describe pod name`, as an operator reads it.
fn described_events(bed: &Bed, name: &str) -> Result<String> {
    let text = bed.cloud.kubectl(&["describe", "pod", name])?;
    Ok(text
        .split_once("Events:")
        .map(|(_, events)| format!("Events:{events}"))
        .unwrap_or(text))
}

/// With `reportEvent` on, `kubectl describe pod` explains what happened on the node, as
/// kubelet's events do: a missing image, a container started, a liveness probe failing and the
/// container killed and restarted.
pub fn pod_events_explain_a_missing_image_and_a_failing_probe(bed: &mut Bed) -> Result<()> {
    let node = bed.node.name.clone();
    bed.cloud.apply(&format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: no-image\n  namespace: default\nspec:\n  \
         nodeName: {node}\n  terminationGracePeriodSeconds: 1\n  \
         automountServiceAccountToken: false\n  containers:\n  - name: app\n    \
         image: wedge-test/absent:1\n    imagePullPolicy: Never\n---\n\
         apiVersion: v1\nkind: Pod\nmetadata:\n  name: sick\n  namespace: default\nspec:\n  \
         nodeName: {node}\n  terminationGracePeriodSeconds: 1\n  \
         automountServiceAccountToken: false\n  containers:\n  - name: app\n    \
         image: wedge-test/busybox:1\n    imagePullPolicy: Never\n    command: [sleep, \"3600\"]\n    \
         livenessProbe:\n      exec: {{command: [\"false\"]}}\n      periodSeconds: 1\n      \
         failureThreshold: 2\n"
    ))?;
    let wanted = |events: &[(String, String, u64)], reason: &str, kind: &str| {
        events.iter().any(|(r, t, _)| r == reason && t == kind)
    };
    wait_for(
        "events of the pod whose image is missing",
        Duration::from_secs(60),
        || {
            let events = events_of(bed, "no-image")?;
            Ok(wanted(&events, "ErrImageNeverPull", "Warning").then_some(()))
        },
    )?;
    let sick = wait_for(
        "events of the pod whose liveness probe fails",
        Duration::from_secs(90),
        || {
            let events = events_of(bed, "sick")?;
            let all = ["Pulled", "Created", "Started", "Killing"]
                .iter()
                .all(|r| wanted(&events, r, "Normal"))
                && wanted(&events, "Unhealthy", "Warning");
            Ok(all.then_some(events))
        },
    )?;
    // A repeat is counted on the first event, not made anew.
    let unhealthy: Vec<u64> = sick
        .iter()
        .filter(|(r, _, _)| r == "Unhealthy")
        .map(|(_, _, n)| *n)
        .collect();
    ensure!(
        unhealthy.len() == 1,
        "one Unhealthy event, counted: {sick:?}"
    );
    println!(
        "kubectl describe pod no-image\n{}",
        described_events(bed, "no-image")?
    );
    println!(
        "kubectl describe pod sick\n{}",
        described_events(bed, "sick")?
    );
    bed.cloud
        .kubectl(&["delete", "pod", "no-image", "sick", "--wait=false"])?;
    Ok(())
}

/// A pod that asks for more CPU than the node has is refused at admission as kubelet refuses
/// it: `Failed`, reason `OutOfcpu`, kubelet's message, and nothing of it runs. (With no
/// scheduler in this cloud, `nodeName` puts it there; a scheduler would not, but a pod bound
/// by hand or a static pod would.)
pub fn a_pod_asking_for_more_than_the_node_has_is_refused(bed: &mut Bed) -> Result<()> {
    let name = "too-big";
    bed.cloud.apply(&format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n  namespace: default\nspec:\n  \
         nodeName: {node}\n  automountServiceAccountToken: false\n  containers:\n  - name: app\n    \
         image: wedge-test/busybox:1\n    imagePullPolicy: Never\n    command: [sleep, \"3600\"]\n    \
         resources: {{requests: {{cpu: \"512\"}}}}\n",
        node = bed.node.name
    ))?;
    let pod = wait_for("the pod refused", Duration::from_secs(60), || {
        let pod = bed.cloud.get(&["pod", name])?;
        Ok((pod["status"]["phase"] == "Failed").then_some(pod))
    })?;
    ensure!(
        pod["status"]["reason"] == "OutOfcpu",
        "reason OutOfcpu: {}",
        pod["status"]
    );
    let message = pod["status"]["message"].as_str().unwrap_or_default();
    ensure!(
        message.starts_with("Node didn't have enough resource: cpu, requested: 512000, used: "),
        "kubelet's message: {message}"
    );
    ensure!(
        crate::pods::containers_of(name)?.is_empty(),
        "no container of a refused pod"
    );
    bed.cloud
        .kubectl(&["delete", "pod", name, "--wait=false"])?;
    Ok(())
}
