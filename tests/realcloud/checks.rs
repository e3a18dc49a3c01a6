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
    for kind in ["MemoryPressure", "DiskPressure", "PIDPressure"] {
        let c = condition(&node, kind);
        ensure!(
            c.is_some_and(|c| c["status"] == "False"),
            "condition {kind}: {c:?}"
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
