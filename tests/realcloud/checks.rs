//! The node itself: registration, readiness and the status a kubelet reports.

use std::time::Duration;

use anyhow::{Result, ensure};
use serde_json::Value;
use wedge_tests::realcloud::wait_for;

use crate::Bed;

/// The node's condition of `kind`.
pub fn condition<'a>(node: &'a Value, kind: &str) -> Option<&'a Value> {
    node["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == kind)
}

/// Join → Ready, with the fields edgecore v1.23.1's node status has on the same cloud.
pub fn node_is_ready_with_a_kubelets_status(bed: &mut Bed) -> Result<()> {
    let name = bed.node.name.clone();
    let node = wait_for("node Ready", Duration::from_secs(60), || {
        let node = bed.cloud.get_opt(&["node", &name])?;
        Ok(node.filter(|n| condition(n, "Ready").is_some_and(|c| c["status"] == "True")))
    })?;
    let status = &node["status"];
    // What the suite's thresholds say of this machine (the same disk holds the node's root
    // and Docker's): DiskPressure below SUITE_DISK_PERCENT free, memory below 100Mi; edged
    // reports the same.
    let free = |path: &str| -> Result<f64> {
        let out = std::process::Command::new("df")
            .args(["--output=avail,size", "-B1", path])
            .output()?;
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let numbers: Vec<f64> = text
            .split_whitespace()
            .filter_map(|w| w.parse().ok())
            .collect();
        ensure!(numbers.len() == 2, "df: {text}");
        Ok(numbers[0] / numbers[1])
    };
    let docker_root = std::process::Command::new("docker")
        .args(["info", "-f", "{{.DockerRootDir}}"])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_default();
    // Within a point of the threshold the disk may cross it between edged's reading and
    // this one (CI fills the disk it builds on): then either value is right, with its reason.
    let free_share = free(&docker_root).unwrap_or(1.0);
    let threshold = f64::from(wedge_tests::realcloud::SUITE_DISK_PERCENT) / 100.0;
    let disk_pressure = free_share < threshold;
    let disk_either = (free_share - threshold).abs() < 0.01;
    for (kind, expected, reason, either) in [
        ("MemoryPressure", false, "KubeletHasSufficientMemory", false),
        (
            "DiskPressure",
            disk_pressure,
            if disk_pressure {
                "KubeletHasDiskPressure"
            } else {
                "KubeletHasNoDiskPressure"
            },
            disk_either,
        ),
        ("PIDPressure", false, "KubeletHasSufficientPID", false),
    ] {
        let c = condition(&node, kind);
        let status = if expected { "True" } else { "False" };
        let matches = |c: &Value| {
            (c["status"] == status && c["reason"] == reason)
                || (either
                    && ((c["status"] == "True" && c["reason"] == "KubeletHasDiskPressure")
                        || (c["status"] == "False" && c["reason"] == "KubeletHasNoDiskPressure")))
        };
        ensure!(
            c.is_some_and(matches),
            "condition {kind}: {c:?}, expected {status} ({reason}); {:.1} % of the image \
             filesystem free",
            free_share * 100.0
        );
    }
    for c in status["conditions"].as_array().into_iter().flatten() {
        ensure!(
            c["lastTransitionTime"].is_string() && c["lastHeartbeatTime"].is_string(),
            "condition without times: {c}"
        );
    }
    ensure!(
        status["daemonEndpoints"]["kubeletEndpoint"]["Port"] == 10350,
        "kubeletEndpoint: {}",
        status["daemonEndpoints"]
    );
    for key in [
        "bootID",
        "systemUUID",
        "machineID",
        "kernelVersion",
        "osImage",
    ] {
        ensure!(
            status["nodeInfo"][key]
                .as_str()
                .is_some_and(|v| !v.is_empty()),
            "nodeInfo.{key}: {}",
            status["nodeInfo"]
        );
    }
    let addresses = status["addresses"].as_array().cloned().unwrap_or_default();
    ensure!(
        addresses
            .iter()
            .any(|a| a["type"] == "Hostname" && a["address"] == name.as_str()),
        "no Hostname address: {addresses:?}"
    );
    ensure!(
        addresses.iter().any(|a| a["type"] == "InternalIP"),
        "no InternalIP: {addresses:?}"
    );
    for key in ["cpu", "memory", "pods", "ephemeral-storage"] {
        ensure!(
            status["capacity"][key].is_string() && status["allocatable"][key].is_string(),
            "capacity/allocatable {key}: {} / {}",
            status["capacity"],
            status["allocatable"]
        );
    }
    Ok(())
}
