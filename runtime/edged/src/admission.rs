//! Pod admission, as kubelet admits a pod before it runs it: a pod the node is not to run is
//! refused with kubelet's reason, its status `Failed`, and nothing of it starts.
//!
//! In kubelet's order:
//! 1. the eviction manager's: under `DiskPressure` no pod is admitted, under `MemoryPressure`
//!    no `BestEffort` pod (reason `Evicted`, "The node had condition: [DiskPressure]. ");
//! 2. resources: one more pod than `maxPods` (`OutOfpods`), more CPU or memory requested than
//!    the node's allocatable less what the admitted pods request (`OutOfcpu`, `OutOfmemory`),
//!    with kubelet's message ("Node didn't have enough resource: cpu, requested: …").
//!
//! What a pod requests is kubelet's effective request: the larger of its app containers' sum
//! and its largest init container.

use crate::node::pressure::Pressure;
use crate::pod::{Container, Pod};

/// Kubelet's reasons for refusing a pod at admission: pods refused so are terminal.
pub const REASONS: [&str; 4] = ["Evicted", "OutOfpods", "OutOfcpu", "OutOfmemory"];

/// What admission weighs a pod against.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct NodeFacts {
    /// `maxPods`.
    pub max_pods: u32,
    /// Allocatable CPU, in millicores.
    pub cpu_millis: i64,
    /// Allocatable memory, in bytes.
    pub memory_bytes: i64,
    /// The node's pressure conditions.
    pub pressure: Pressure,
}

/// Why a pod was refused: kubelet's reason and message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejection {
    /// One of [`REASONS`].
    pub reason: &'static str,
    /// What the pod's status and event say.
    pub message: String,
}

/// CPU (millicores) and memory (bytes) a container requests; unreadable quantities count 0
/// (the apiserver validated them).
fn requests(c: &Container) -> (i64, i64) {
    let cpu = c
        .resources
        .requests
        .get("cpu")
        .and_then(|q| wedge_core::config::quantity::nano_cpus(q).ok())
        .map_or(0, |n| (n + 999_999) / 1_000_000);
    let memory = c
        .resources
        .requests
        .get("memory")
        .and_then(|q| wedge_core::config::quantity::bytes(q).ok())
        .unwrap_or(0);
    (cpu, memory)
}

/// Kubelet's effective request of `pod`: per resource, the larger of the app containers' sum
/// and the largest init container.
pub fn pod_requests(pod: &Pod) -> (i64, i64) {
    let (mut cpu, mut memory) = pod
        .spec
        .containers
        .iter()
        .map(requests)
        .fold((0, 0), |(a, b), (c, m)| (a + c, b + m));
    for init in &pod.spec.init_containers {
        let (c, m) = requests(init);
        cpu = cpu.max(c);
        memory = memory.max(m);
    }
    (cpu, memory)
}

/// Whether `pod` may run beside `admitted` (the pods the node runs now, not counting
/// finished ones) on a node with `facts`.
pub fn admit<'a>(
    pod: &Pod,
    admitted: impl IntoIterator<Item = &'a Pod>,
    facts: &NodeFacts,
) -> Result<(), Rejection> {
    let mut conditions = Vec::new();
    if facts.pressure.memory && crate::status::qos_class(pod) == "BestEffort" {
        conditions.push("MemoryPressure");
    }
    if facts.pressure.disk {
        conditions.push("DiskPressure");
    }
    if !conditions.is_empty() {
        return Err(Rejection {
            reason: "Evicted",
            message: format!("The node had condition: [{}]. ", conditions.join(", ")),
        });
    }
    let (mut pods, mut cpu, mut memory) = (0i64, 0i64, 0i64);
    for other in admitted {
        let (c, m) = pod_requests(other);
        pods += 1;
        cpu += c;
        memory += m;
    }
    let short = |resource: &str, requested: i64, used: i64, capacity: i64| Rejection {
        reason: match resource {
            "pods" => "OutOfpods",
            "cpu" => "OutOfcpu",
            _ => "OutOfmemory",
        },
        message: format!(
            "Node didn't have enough resource: {resource}, requested: {requested}, used: {used}, \
             capacity: {capacity}"
        ),
    };
    let max_pods = i64::from(facts.max_pods);
    if pods + 1 > max_pods {
        return Err(short("pods", 1, pods, max_pods));
    }
    let (want_cpu, want_memory) = pod_requests(pod);
    if want_cpu > 0 && cpu + want_cpu > facts.cpu_millis {
        return Err(short("cpu", want_cpu, cpu, facts.cpu_millis));
    }
    if want_memory > 0 && memory + want_memory > facts.memory_bytes {
        return Err(short("memory", want_memory, memory, facts.memory_bytes));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(cpu: Option<&str>, memory: Option<&str>) -> Pod {
        let mut requests = serde_json::Map::new();
        if let Some(c) = cpu {
            requests.insert("cpu".into(), json!(c));
        }
        if let Some(m) = memory {
            requests.insert("memory".into(), json!(m));
        }
        serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "default", "uid": "u"},
            "spec": {"containers": [{"name": "app", "image": "img", "resources": {"requests": requests}}]}
        }))
        .unwrap()
    }

    fn node() -> NodeFacts {
        NodeFacts {
            max_pods: 3,
            cpu_millis: 2000,
            memory_bytes: 1 << 30,
            pressure: Pressure::default(),
        }
    }

    #[test]
    fn one_pod_more_than_max_pods_is_out_of_pods() {
        let running = [pod(None, None), pod(None, None), pod(None, None)];
        let e = admit(&pod(None, None), &running, &node()).unwrap_err();
        assert_eq!(e.reason, "OutOfpods");
        assert_eq!(
            e.message,
            "Node didn't have enough resource: pods, requested: 1, used: 3, capacity: 3"
        );
        assert!(admit(&pod(None, None), &running[..2], &node()).is_ok());
    }

    #[test]
    fn requests_beyond_allocatable_are_out_of_cpu_or_memory() {
        let running = [pod(Some("1500m"), Some("512Mi"))];
        let e = admit(&pod(Some("600m"), None), &running, &node()).unwrap_err();
        assert_eq!(
            (e.reason, e.message.as_str()),
            (
                "OutOfcpu",
                "Node didn't have enough resource: cpu, requested: 600, used: 1500, capacity: 2000"
            )
        );
        let e = admit(&pod(Some("100m"), Some("600Mi")), &running, &node()).unwrap_err();
        assert_eq!(e.reason, "OutOfmemory");
        assert!(admit(&pod(Some("500m"), Some("512Mi")), &running, &node()).is_ok());
    }

    #[test]
    fn pressure_refuses_as_the_eviction_manager_does() {
        let mut facts = node();
        facts.pressure.memory = true;
        // Memory pressure refuses BestEffort pods only.
        let e = admit(&pod(None, None), [], &facts).unwrap_err();
        assert_eq!(e.reason, "Evicted");
        assert_eq!(e.message, "The node had condition: [MemoryPressure]. ");
        assert!(admit(&pod(Some("100m"), None), [], &facts).is_ok());
        facts.pressure.disk = true;
        let e = admit(&pod(Some("100m"), None), [], &facts).unwrap_err();
        assert_eq!(e.message, "The node had condition: [DiskPressure]. ");
    }

    #[test]
    fn an_init_container_counts_when_it_asks_for_more_than_the_app_containers() {
        let p: Pod = serde_json::from_value(json!({
            "metadata": {"name": "p", "uid": "u"},
            "spec": {
                "initContainers": [{"name": "i", "image": "img", "resources": {"requests": {"cpu": "1", "memory": "1Mi"}}}],
                "containers": [
                    {"name": "a", "image": "img", "resources": {"requests": {"cpu": "100m", "memory": "2Mi"}}},
                    {"name": "b", "image": "img", "resources": {"requests": {"cpu": "100m", "memory": "2Mi"}}}
                ]
            }
        }))
        .unwrap();
        assert_eq!(pod_requests(&p), (1000, 4 << 20));
    }
}
