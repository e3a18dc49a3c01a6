//! KubeEdge's own `keadm ctl` (v1.23.1, from `../shared/realcloud/bin`) against the node's
//! MetaServer: `get pod`, `describe pod`, `logs`, `exec` and `restart pod`, as an operator
//! runs them on an edge node. keadm reads the MetaServer's address and the node's name from
//! `/etc/kubeedge/config/edgecore.yaml`; it runs in a private mount namespace where that
//! file is this node's, so the host's `/etc/kubeedge` is left as it is.

use std::process::Command;
use std::time::Duration;

use anyhow::{Context, Result, ensure};
use wedge_tests::realcloud::{bin_dir, wait_for};

use crate::Bed;

const POD: &str = "keadm-ctl";

fn pod(node: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {POD}\n  namespace: default\nspec:\n  \
         nodeName: {node}\n  terminationGracePeriodSeconds: 1\n  containers:\n  - name: app\n    \
         image: wedge-test/busybox:1\n    imagePullPolicy: Never\n    \
         command: [sh, -c, 'echo hello from keadm-ctl; while true; do sleep 1; done']\n"
    )
}

/// `keadm ctl <args>` with this node's edgecore.yaml at keadm's path; stdout and stderr.
fn keadm(bed: &Bed, config: &std::path::Path, args: &[&str]) -> Result<String> {
    std::fs::create_dir_all("/etc/kubeedge").context("keadm reads /etc/kubeedge/config")?;
    let keadm = bin_dir().join("keadm");
    let script = format!(
        "mount -t tmpfs keadm-ctl /etc/kubeedge && mkdir -p /etc/kubeedge/config && \
         cp {} /etc/kubeedge/config/edgecore.yaml && exec {} ctl \"$@\"",
        config.display(),
        keadm.display()
    );
    let out = Command::new("unshare")
        .args([
            "--mount",
            "--propagation",
            "private",
            "sh",
            "-c",
            &script,
            "keadm",
        ])
        .args(args)
        .output()
        .context("unshare")?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    ensure!(
        out.status.success(),
        "keadm ctl {} failed: {text}",
        args.join(" ")
    );
    let _ = bed;
    Ok(text)
}

/// The check.
pub fn keadm_ctl_gets_describes_logs_execs_and_restarts_a_pod(bed: &mut Bed) -> Result<()> {
    let node = bed.node.name.clone();
    let config = bed.node.dir().join("keadm-edgecore.yaml");
    std::fs::write(
        &config,
        format!(
            "apiVersion: edgecore.config.kubeedge.io/v1alpha2\nkind: EdgeCore\nmodules:\n  \
             edged:\n    hostnameOverride: {node}\n  metaManager:\n    metaServer:\n      \
             enable: true\n      server: 127.0.0.1:{}\n",
            bed.metaserver_port
        ),
    )?;
    bed.cloud.apply(&pod(&node))?;
    let outcome = (|| -> Result<()> {
        wait_for("the pod running", Duration::from_secs(90), || {
            let p = bed.cloud.get(&["pod", POD, "-n", "default"])?;
            Ok((p["status"]["phase"] == "Running").then_some(()))
        })?;
        let got = keadm(bed, &config, &["get", "pod", "-n", "default"])?;
        ensure!(
            got.contains(POD) && got.contains("Running"),
            "keadm ctl get pod: {got}"
        );
        println!(
            "    get pod: {}",
            got.lines().find(|l| l.contains(POD)).unwrap_or("").trim()
        );
        let described = keadm(bed, &config, &["describe", "pod", POD, "-n", "default"])?;
        ensure!(
            described.contains("Node:")
                && described.contains(&node)
                && described.contains("wedge-test/busybox:1"),
            "keadm ctl describe pod: {described}"
        );
        let logs = wait_for("keadm ctl logs", Duration::from_secs(20), || {
            let logs = keadm(bed, &config, &["logs", POD, "-n", "default"])?;
            Ok(logs.contains("hello from keadm-ctl").then_some(logs))
        })?;
        println!("    logs: {}", logs.trim());
        let exec = keadm(
            bed,
            &config,
            &[
                "exec",
                POD,
                "-n",
                "default",
                "--",
                "echo",
                "exec-ran-in-pod",
            ],
        )?;
        ensure!(exec.contains("exec-ran-in-pod"), "keadm ctl exec: {exec}");
        println!("    exec: {}", exec.trim());
        let restarted = keadm(bed, &config, &["restart", "pod", POD, "-n", "default"])?;
        ensure!(
            restarted.contains("restart successful"),
            "keadm ctl restart pod: {restarted}"
        );
        println!("    restart: {}", restarted.trim());
        wait_for(
            "the restart counted in the cloud",
            Duration::from_secs(60),
            || {
                let p = bed.cloud.get(&["pod", POD, "-n", "default"])?;
                let count = p["status"]["containerStatuses"][0]["restartCount"]
                    .as_u64()
                    .unwrap_or(0);
                Ok((count >= 1).then_some(()))
            },
        )?;
        Ok(())
    })();
    let _ = bed
        .cloud
        .kubectl(&["delete", "pod", POD, "-n", "default", "--wait=false"]);
    outcome
}
