//! Pods as an operator runs them: `kubectl apply` → Running, ConfigMap edits, idle pods that
//! cost the cloud nothing, graceful and forced deletion.

use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use serde_json::Value;
use wedge_tests::realcloud::{stubborn_pod, wait_for};

use crate::Bed;

/// The pod of `../shared/realcloud/manifests/pod-busybox.yaml` (a ConfigMap volume and a
/// Secret in its environment), with what a real cluster adds: the `kube-api-access-*` volume
/// the ServiceAccount admission plugin injects (off on this apiserver, so the manifest carries
/// it, exactly as the plugin writes it), and an init container that prepares a file in an
/// emptyDir from the ConfigMap before the app starts.
const POD: &str = "rc-busybox";

/// Where the service-account volume is mounted, as in every Kubernetes pod.
const SA_DIR: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

fn manifest(bed: &Bed) -> Result<String> {
    let path = wedge_tests::realcloud::shared_dir()?.join("realcloud/manifests/pod-busybox.yaml");
    let text = std::fs::read_to_string(&path).with_context(|| path.display().to_string())?;
    let text = text.replace("__NODE__", &bed.node.name);
    // The shared pod opts out of the token; a real cluster's pod has it.
    let text = text.replace(
        "  automountServiceAccountToken: false\n",
        "  serviceAccountName: default\n",
    );
    let text = text.replace(
        "    volumeMounts:\n    - name: conf\n      mountPath: /etc/rc\n",
        MOUNTS,
    );
    let text = text.replace("  volumes:\n", VOLUMES);
    let text = text.replace("  containers:\n", INIT_CONTAINERS);
    Ok(text)
}

/// The pod's securityContext, a non-root user as restricted clusters require, and the init
/// container (they replace the `  containers:` line): it reads the ConfigMap's key from its
/// environment and leaves a file for the app container.
const INIT_CONTAINERS: &str = r#"  securityContext: {runAsUser: 1000, runAsGroup: 3000, fsGroup: 2000}
  initContainers:
  - name: prepare
    image: wedge-test/busybox:1
    imagePullPolicy: Never
    command: [sh, -c, "echo prepared-$GREETING > /scratch/ready"]
    env:
    - name: GREETING
      valueFrom:
        configMapKeyRef: {name: rc-config, key: greeting}
    volumeMounts:
    - {name: scratch, mountPath: /scratch}
  containers:
"#;

/// The app container's mounts: the manifest's ConfigMap, the init container's emptyDir, and
/// the service-account volume where every pod has it.
const MOUNTS: &str = r#"    volumeMounts:
    - name: conf
      mountPath: /etc/rc
    - {name: scratch, mountPath: /scratch}
    - {name: kube-api-access-rc, mountPath: /var/run/secrets/kubernetes.io/serviceaccount, readOnly: true}
"#;

/// The volume added: `kube-api-access-*` exactly as the ServiceAccount admission plugin
/// writes it (it replaces the `  volumes:` line).
const VOLUMES: &str = r#"  volumes:
  - name: scratch
    emptyDir: {}
  - name: kube-api-access-rc
    projected:
      defaultMode: 420
      sources:
      - serviceAccountToken: {expirationSeconds: 3607, path: token}
      - configMap:
          name: kube-root-ca.crt
          items: [{key: ca.crt, path: ca.crt}]
      - downwardAPI:
          items: [{path: namespace, fieldRef: {apiVersion: v1, fieldPath: metadata.namespace}}]
"#;

/// What a cluster's controllers would have made and this cloud has not: the `default`
/// ServiceAccount and the `kube-root-ca.crt` ConfigMap.
fn service_account_objects(bed: &Bed) -> Result<String> {
    let ca = std::fs::read_to_string(bed.cloud.state_dir().join("pki/ca.crt"))?;
    let ca_yaml: String = ca.lines().map(|l| format!("    {l}\n")).collect();
    Ok(format!(
        "apiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: default\n  namespace: default\n---\n\
apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: kube-root-ca.crt\n  namespace: default\ndata:\n  ca.crt: |\n{ca_yaml}"
    ))
}

/// The condition of `kind` in a pod's status.
fn condition<'a>(pod: &'a Value, kind: &str) -> Option<&'a Value> {
    pod["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == kind)
}

/// Waits until pod `name` is Running and Ready.
pub(crate) fn wait_running(bed: &Bed, name: &str, timeout: Duration) -> Result<Value> {
    wait_for(&format!("pod {name} Running"), timeout, || {
        let pod = bed.cloud.get_opt(&["pod", name])?;
        Ok(pod.filter(|p| {
            p["status"]["phase"] == "Running"
                && condition(p, "Ready").is_some_and(|c| c["status"] == "True")
        }))
    })
}

/// The engine ids of pod `name`'s app containers (sandboxes left out), running or not.
pub(crate) fn containers_of(name: &str) -> Result<Vec<String>> {
    let out = Command::new("docker")
        .args([
            "ps",
            "-aq",
            "--filter",
            &format!("label=io.kubernetes.pod.name={name}"),
        ])
        .output()
        .context("docker ps (a Docker engine must run: bash .ci/setup)")?;
    ensure!(out.status.success(), "docker ps failed: {out:?}");
    Ok(String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .map(str::to_owned)
        .collect())
}

/// A file's text inside the running container `container` of pod `pod` (this incarnation of
/// it: by the uid the cloud gave it).
fn file_in(bed: &Bed, pod: &str, container: &str, path: &str) -> Result<String> {
    exec_in(bed, pod, container, &["cat", path])
}

/// What `command` prints in the running container `container` of pod `pod`, run as the
/// container's user.
fn exec_in(bed: &Bed, pod: &str, container: &str, command: &[&str]) -> Result<String> {
    let object = bed.cloud.get(&["pod", pod])?;
    let uid = object["metadata"]["uid"].as_str().unwrap_or_default();
    let out = Command::new("docker")
        .args([
            "ps",
            "-q",
            "--filter",
            &format!("label=io.kubernetes.pod.uid={uid}"),
            "--filter",
            &format!("label=io.kubernetes.container.name={container}"),
        ])
        .output()?;
    let id = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    ensure!(
        !id.is_empty(),
        "no running container {container} of pod {pod}"
    );
    let out = Command::new("docker")
        .arg("exec")
        .arg(&id)
        .args(command)
        .output()?;
    ensure!(out.status.success(), "docker exec {command:?}: {out:?}");
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// `kubectl apply` of a pod with a ConfigMap volume, Secret env, an init container, a
/// non-root securityContext and the service-account volume → Running, with the status fields
/// a kubelet v1.32 writes; the init container completed before the app, the app runs as the
/// pod's user and groups, and the token, CA and namespace are in the pod.
pub fn pod_with_configmap_secret_runs(bed: &mut Bed) -> Result<()> {
    bed.cloud.apply(&service_account_objects(bed)?)?;
    let manifest = manifest(bed)?;
    let applied = Instant::now();
    bed.cloud.apply(&manifest)?;
    let pod = wait_running(bed, POD, Duration::from_secs(90))?;
    println!("    apply -> Running in {:.1?}", applied.elapsed());
    let status = &pod["status"];
    ensure!(status["startTime"].is_string(), "no startTime: {status}");
    ensure!(
        status["hostIPs"].as_array().is_some_and(|a| !a.is_empty()),
        "no hostIPs: {status}"
    );
    ensure!(status["podIP"].is_string(), "no podIP: {status}");
    // Mounts as edgecore v1.23.1 reports them (seen side by side on this cloud).
    let mounts = &status["containerStatuses"][0]["volumeMounts"];
    ensure!(
        mounts.as_array().is_some_and(|m| m.iter().any(|m| {
            m["mountPath"] == "/var/run/secrets/kubernetes.io/serviceaccount"
                && m["readOnly"] == true
                && m["recursiveReadOnly"] == "Disabled"
        }) && m.iter().any(|m| m["mountPath"] == "/etc/rc")),
        "container volumeMounts: {mounts}"
    );
    for kind in [
        "PodReadyToStartContainers",
        "Initialized",
        "Ready",
        "ContainersReady",
        "PodScheduled",
    ] {
        let c = condition(&pod, kind);
        ensure!(
            c.is_some_and(|c| c["status"] == "True" && c["lastTransitionTime"].is_string()),
            "condition {kind}: {c:?} in {status}"
        );
        // The reason it had while False (ContainersNotInitialized...) is gone: CloudCore
        // merges conditions by type, so the node must clear it.
        ensure!(
            c.is_some_and(|c| c.get("reason").is_none() && c.get("message").is_none()),
            "condition {kind} kept an old reason: {c:?}"
        );
    }
    let init = &status["initContainerStatuses"][0];
    ensure!(
        init["name"] == "prepare"
            && init["ready"] == true
            && init["state"]["terminated"]["reason"] == "Completed",
        "init container status: {status}"
    );
    let ids = exec_in(
        bed,
        POD,
        "main",
        &["sh", "-c", "busybox id -u; busybox id -g; busybox id -G"],
    )?;
    ensure!(
        ids.split_whitespace().collect::<Vec<_>>() == ["1000", "3000", "3000", "2000"],
        "the pod's securityContext inside the container (uid, gid, groups): {ids:?}"
    );
    let prepared = file_in(bed, POD, "main", "/scratch/ready")?;
    ensure!(
        prepared == "prepared-hello-from-configmap\n",
        "the init container's file: {prepared:?}"
    );
    let conf = file_in(bed, POD, "main", "/etc/rc/app.conf")?;
    ensure!(conf.contains("mode=edge"), "ConfigMap volume: {conf:?}");
    let token = file_in(bed, POD, "main", &format!("{SA_DIR}/token"))?;
    ensure!(
        token.split('.').count() == 3,
        "service-account token is no JWT: {token:?}"
    );
    let namespace = file_in(bed, POD, "main", &format!("{SA_DIR}/namespace"))?;
    ensure!(namespace == "default", "namespace file: {namespace:?}");
    let ca = file_in(bed, POD, "main", &format!("{SA_DIR}/ca.crt"))?;
    ensure!(ca.contains("BEGIN CERTIFICATE"), "ca.crt: {ca:?}");
    Ok(())
}

/// An idle Running pod is not rewritten: no status sent while nothing changes (edgecore
/// v1.23.1: none; Wedge before: one etcd write per pod per 10 s).
pub fn an_idle_pod_is_not_rewritten(bed: &mut Bed) -> Result<()> {
    let version = |bed: &Bed| -> Result<String> {
        let pod = bed.cloud.get(&["pod", POD])?;
        Ok(pod["metadata"]["resourceVersion"]
            .as_str()
            .unwrap_or_default()
            .to_owned())
    };
    // Let the start settle (probes, the cloud's echo).
    std::thread::sleep(Duration::from_secs(3));
    let before = version(bed)?;
    // Two and a half periodic syncs.
    std::thread::sleep(Duration::from_secs(25));
    let after = version(bed)?;
    ensure!(
        before == after,
        "the idle pod was rewritten: resourceVersion {before} -> {after}"
    );
    Ok(())
}

/// `kubectl patch configmap` reaches the running pod's volume, as the kubelet's volume sync
/// does (within a minute).
pub fn a_configmap_edit_reaches_the_running_pod(bed: &mut Bed) -> Result<()> {
    let edited = Instant::now();
    bed.cloud.kubectl(&[
        "patch",
        "configmap",
        "rc-config",
        "--type",
        "merge",
        "-p",
        r#"{"data":{"app.conf":"mode=edited\n"}}"#,
    ])?;
    wait_for(
        "the edited ConfigMap in the pod",
        Duration::from_secs(90),
        || {
            let conf = file_in(bed, POD, "main", "/etc/rc/app.conf")?;
            Ok(conf.contains("mode=edited").then_some(()))
        },
    )?;
    println!(
        "    ConfigMap edit visible in the pod after {:.1?}",
        edited.elapsed()
    );
    Ok(())
}

/// `kubectl delete pod` (graceful): the containers get their grace period, then the node asks
/// the cloud to remove the pod, which is gone within grace + 5 s.
pub fn graceful_delete_stops_containers_and_removes_the_pod(bed: &mut Bed) -> Result<()> {
    const NAME: &str = "rc-grace";
    const GRACE: u64 = 8;
    bed.cloud
        .apply(&stubborn_pod(&bed.node.name, NAME, GRACE))?;
    wait_running(bed, NAME, Duration::from_secs(90))?;
    let deleted = Instant::now();
    bed.cloud
        .kubectl(&["delete", "pod", NAME, "--wait=false"])?;
    wait_for(
        "the deleted pod gone from the cloud",
        Duration::from_secs(GRACE + 5),
        || Ok(bed.cloud.get_opt(&["pod", NAME])?.is_none().then_some(())),
    )?;
    let gone = deleted.elapsed();
    println!("    graceful delete (grace {GRACE} s) -> gone in {gone:.1?}");
    ensure!(
        gone >= Duration::from_secs(GRACE - 1),
        "gone after {gone:?}: the containers did not get their grace period"
    );
    let left = containers_of(NAME)?;
    ensure!(left.is_empty(), "containers left: {left:?}");
    Ok(())
}

/// `kubectl delete --force --grace-period=0`: the object goes at once and the node removes
/// the containers.
pub fn force_delete_removes_the_pod_at_once(bed: &mut Bed) -> Result<()> {
    const NAME: &str = "rc-force";
    bed.cloud.apply(&stubborn_pod(&bed.node.name, NAME, 30))?;
    wait_running(bed, NAME, Duration::from_secs(90))?;
    bed.cloud
        .kubectl(&["delete", "pod", NAME, "--force", "--grace-period=0"])?;
    ensure!(
        bed.cloud.get_opt(&["pod", NAME])?.is_none(),
        "the pod is still there"
    );
    wait_for(
        "the force-deleted pod's containers removed",
        Duration::from_secs(15),
        || Ok(containers_of(NAME)?.is_empty().then_some(())),
    )?;
    Ok(())
}

/// A pod the node cannot run (here: an NFS volume, which edged does not mount) is not
/// dropped silently: its status says which field, and nothing of it runs.
pub fn a_pod_the_node_cannot_run_names_the_field(bed: &mut Bed) -> Result<()> {
    const NAME: &str = "rc-nfs";
    let manifest = format!(
        "{}  volumes:\n  - name: data\n    nfs: {{server: nas.example, path: /export}}\n",
        stubborn_pod(&bed.node.name, NAME, 2)
    );
    bed.cloud.apply(&manifest)?;
    let status = wait_for(
        "the refusal in the pod's status",
        Duration::from_secs(60),
        || {
            let pod = bed.cloud.get_opt(&["pod", NAME])?;
            Ok(pod.map(|p| p["status"].clone()).filter(|s| {
                s["message"]
                    .as_str()
                    .is_some_and(|m| m.contains("spec.volumes[0] (data)"))
            }))
        },
    )?;
    ensure!(status["phase"] == "Pending", "{status}");
    ensure!(status["reason"] == "InvalidPodSpec", "{status}");
    ensure!(
        containers_of(NAME)?.is_empty(),
        "containers of a refused pod run"
    );
    bed.cloud
        .kubectl(&["delete", "pod", NAME, "--force", "--grace-period=0"])?;
    Ok(())
}
