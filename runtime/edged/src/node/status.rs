//! The Node object and its status, shaped as KubeEdge v1.23.1's edged (a kubelet v1.32)
//! sends them: capacity and allocatable (with kubelet's default hard-eviction reserve taken
//! off), the pressure conditions, InternalIP and Hostname addresses, the kubelet endpoint the
//! cloud's stream server tunnels to, and the machine's identity.

use serde_json::{Value, json};
use wedge_core::time::rfc3339_utc;

use super::NodeReportSettings;
use super::host::HostInfo;
use super::pressure::Pressure;

/// The node's conditions and when each took its value (`lastTransitionTime`): `Ready` since
/// the node's first report, each pressure condition since its last change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeConditions {
    /// What the eviction signals say now.
    pub pressure: Pressure,
    first_ms: i64,
    /// When memory, disk and pid pressure last changed.
    changed_ms: [i64; 3],
}

impl NodeConditions {
    /// No pressure, every condition since `now_ms`.
    pub fn new(now_ms: i64) -> NodeConditions {
        NodeConditions {
            pressure: Pressure::default(),
            first_ms: now_ms,
            changed_ms: [now_ms; 3],
        }
    }

    /// Takes a new reading at `now_ms`; a condition whose value changed moves its time.
    pub fn observe(&mut self, pressure: Pressure, now_ms: i64) {
        let old = [self.pressure.memory, self.pressure.disk, self.pressure.pid];
        let new = [pressure.memory, pressure.disk, pressure.pid];
        for i in 0..3 {
            if old[i] != new[i] {
                self.changed_ms[i] = now_ms;
            }
        }
        self.pressure = pressure;
    }
}

/// The kubelet version reported: the kubelet KubeEdge v1.23.1 builds on, marked as Wedge's.
pub const KUBELET_VERSION: &str = concat!(
    "v1.32.10-kubeedge-v1.23.1-wedge-",
    env!("CARGO_PKG_VERSION")
);

/// Memory kept back from allocatable: kubelet's default hard eviction `memory.available<100Mi`.
const MEMORY_EVICTION_KIB: u64 = 100 * 1024;

/// The node's allocatable CPU in millicores and memory in bytes, as its status reports them
/// (memory less kubelet's default hard-eviction reserve), for pod admission.
pub fn allocatable_cpu_memory(host: &HostInfo) -> (i64, i64) {
    let cpu = i64::try_from(host.cpus).unwrap_or(i64::MAX / 1000) * 1000;
    let memory = host.memory_kib.saturating_sub(MEMORY_EVICTION_KIB) * 1024;
    (cpu, i64::try_from(memory).unwrap_or(i64::MAX))
}

/// The Node object registered with the cloud.
pub fn node_object(
    settings: &NodeReportSettings,
    host: &HostInfo,
    runtime_version: &str,
    now_ms: i64,
    conditions: &NodeConditions,
) -> Value {
    let node = &settings.node;
    let mut status = node_status(settings, host, runtime_version, now_ms, conditions);
    // The kubelet port goes only into the registration, as edgecore's kubelet does: CloudCore
    // writes its own tunnel port there whenever the node's EdgeStream tunnel connects, and a
    // status update carrying ours would overwrite it (the apiserver would then dial a port
    // nothing is routed to).
    status["daemonEndpoints"] = json!({"kubeletEndpoint": {"Port": settings.kubelet_port}});
    json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": node,
            "labels": {
                "kubernetes.io/hostname": node,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": host.arch,
                "beta.kubernetes.io/os": "linux",
                "beta.kubernetes.io/arch": host.arch,
                "node-role.kubernetes.io/edge": "",
                "node-role.kubernetes.io/agent": "",
            },
        },
        "spec": {},
        "status": status,
    })
}

/// The node's status at `now_ms`, with its `conditions` (the pressure conditions as
/// [`super::pressure`] reads them, `Ready` while the node reports).
pub fn node_status(
    settings: &NodeReportSettings,
    host: &HostInfo,
    runtime_version: &str,
    now_ms: i64,
    conditions: &NodeConditions,
) -> Value {
    let ephemeral = host.ephemeral_bytes;
    let capacity = json!({
        "cpu": host.cpus.to_string(),
        "memory": format!("{}Ki", host.memory_kib),
        "ephemeral-storage": format!("{}Ki", ephemeral / 1024),
        "hugepages-1Gi": "0",
        "hugepages-2Mi": "0",
        "pods": settings.max_pods.to_string(),
    });
    let mut allocatable = capacity.clone();
    allocatable["memory"] = json!(format!(
        "{}Ki",
        host.memory_kib.saturating_sub(MEMORY_EVICTION_KIB)
    ));
    // Kubelet's default hard eviction `nodefs.available<10%`.
    allocatable["ephemeral-storage"] = json!((ephemeral - ephemeral / 10).to_string());
    let mut addresses = Vec::new();
    if let Some(ip) = settings.node_ip.as_ref().or(host.ip.as_ref()) {
        addresses.push(json!({"type": "InternalIP", "address": ip}));
    }
    addresses.push(json!({"type": "Hostname", "address": settings.node}));
    let now = rfc3339_utc(now_ms);
    let condition = |kind: &str, status: &str, reason: &str, message: &str, since_ms: i64| {
        json!({
            "type": kind,
            "status": status,
            "reason": reason,
            "message": message,
            "lastHeartbeatTime": now,
            "lastTransitionTime": rfc3339_utc(since_ms),
        })
    };
    let pressure = conditions.pressure;
    let [memory_since, disk_since, pid_since] = conditions.changed_ms;
    // Kubelet's words for each state.
    let memory = if pressure.memory {
        (
            "True",
            "KubeletHasInsufficientMemory",
            "kubelet has insufficient memory available",
        )
    } else {
        (
            "False",
            "KubeletHasSufficientMemory",
            "kubelet has sufficient memory available",
        )
    };
    let disk = if pressure.disk {
        (
            "True",
            "KubeletHasDiskPressure",
            "kubelet has disk pressure",
        )
    } else {
        (
            "False",
            "KubeletHasNoDiskPressure",
            "kubelet has no disk pressure",
        )
    };
    let pid = if pressure.pid {
        (
            "True",
            "KubeletHasInsufficientPID",
            "kubelet has insufficient PID available",
        )
    } else {
        (
            "False",
            "KubeletHasSufficientPID",
            "kubelet has sufficient PID available",
        )
    };
    json!({
        "capacity": capacity,
        "allocatable": allocatable,
        "addresses": addresses,
        "conditions": [
            condition("MemoryPressure", memory.0, memory.1, memory.2, memory_since),
            condition("DiskPressure", disk.0, disk.1, disk.2, disk_since),
            condition("PIDPressure", pid.0, pid.1, pid.2, pid_since),
            condition("Ready", "True", "EdgeReady", "edge is posting ready status", conditions.first_ms),
        ],
        "nodeInfo": {
            "machineID": host.machine_id,
            "systemUUID": host.system_uuid,
            "bootID": host.boot_id,
            "kernelVersion": host.kernel,
            "osImage": host.os_image,
            "operatingSystem": "linux",
            "architecture": host.arch,
            "containerRuntimeVersion": format!("{}://{runtime_version}", settings.runtime_name),
            "kubeletVersion": KUBELET_VERSION,
        },
    })
}

/// A node status without its heartbeat times, which differ at every report: two statuses
/// equal under this say the same.
pub fn without_heartbeat(status: &Value) -> Value {
    let mut s = status.clone();
    if let Some(conditions) = s["conditions"].as_array_mut() {
        for c in conditions {
            c["lastHeartbeatTime"] = Value::Null;
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host() -> HostInfo {
        HostInfo {
            cpus: 2,
            memory_kib: 1_000_000,
            ephemeral_bytes: 10 * 1024 * 1024 * 1024,
            ip: Some("192.0.2.2".into()),
            kernel: "6.1.0".into(),
            os_image: "Debian GNU/Linux 12 (bookworm)".into(),
            arch: "amd64".into(),
            machine_id: "m1".into(),
            boot_id: "b1".into(),
            system_uuid: "u1".into(),
        }
    }

    #[test]
    fn the_status_has_what_a_kubelet_reports() {
        let settings = NodeReportSettings::new("edge-1");
        let at = 1_700_000_000_000;
        let node = node_object(&settings, &host(), "20.10.24", at, &NodeConditions::new(at));
        assert_eq!(node["metadata"]["name"], "edge-1");
        assert!(node["metadata"]["labels"]["node-role.kubernetes.io/edge"].is_string());
        assert_eq!(
            node["metadata"]["labels"]["beta.kubernetes.io/arch"],
            "amd64"
        );
        let s = &node["status"];
        assert_eq!(s["capacity"]["cpu"], "2");
        assert_eq!(s["capacity"]["ephemeral-storage"], "10485760Ki");
        assert_eq!(s["allocatable"]["memory"], "897600Ki");
        assert_eq!(s["allocatable"]["ephemeral-storage"], "9663676416");
        assert_eq!(
            s["addresses"],
            json!([{"type": "InternalIP", "address": "192.0.2.2"}, {"type": "Hostname", "address": "edge-1"}])
        );
        assert_eq!(s["daemonEndpoints"]["kubeletEndpoint"]["Port"], 10350);
        assert_eq!(s["nodeInfo"]["bootID"], "b1");
        assert_eq!(s["nodeInfo"]["systemUUID"], "u1");
        assert_eq!(
            s["nodeInfo"]["containerRuntimeVersion"],
            "docker://20.10.24"
        );
        let kinds: Vec<&str> = s["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["type"].as_str().unwrap())
            .collect();
        assert_eq!(
            kinds,
            ["MemoryPressure", "DiskPressure", "PIDPressure", "Ready"]
        );
        assert_eq!(
            s["conditions"][3]["lastTransitionTime"],
            "2023-11-14T22:13:20Z"
        );
    }

    #[test]
    fn only_the_heartbeat_moves_between_reports() {
        let mut settings = NodeReportSettings::new("edge-1");
        let mut conditions = NodeConditions::new(1_000);
        let a = node_status(&settings, &host(), "1", 1_000_000, &conditions);
        let b = node_status(&settings, &host(), "1", 2_000_000, &conditions);
        assert_ne!(a, b);
        assert_eq!(without_heartbeat(&a), without_heartbeat(&b));
        // Status updates leave the kubelet port to CloudCore (it writes its tunnel port).
        assert!(a.get("daemonEndpoints").is_none(), "{a}");
        // A configured node IP is the InternalIP.
        settings.node_ip = Some("127.0.0.2".into());
        let c = node_status(&settings, &host(), "1", 2_000_000, &conditions);
        assert_eq!(c["addresses"][0]["address"], "127.0.0.2");
        // Disk pressure: that condition flips, with kubelet's words and a new transition time;
        // the others keep theirs.
        let tight = Pressure {
            disk: true,
            ..Pressure::default()
        };
        conditions.observe(tight, 3_000_000);
        conditions.observe(tight, 4_000_000);
        let d = node_status(&settings, &host(), "1", 4_000_000, &conditions);
        assert_eq!(
            (&d["conditions"][1]["status"], &d["conditions"][1]["reason"]),
            (&json!("True"), &json!("KubeletHasDiskPressure"))
        );
        assert_eq!(
            d["conditions"][1]["lastTransitionTime"],
            rfc3339_utc(3_000_000)
        );
        assert_eq!(d["conditions"][0]["lastTransitionTime"], rfc3339_utc(1_000));
        assert_eq!(d["conditions"][3]["lastTransitionTime"], rfc3339_utc(1_000));
    }
}
