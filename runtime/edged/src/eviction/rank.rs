//! Which pod goes first, and the status message it gets, as kubelet's eviction manager ranks
//! and words them. For both memory and the disk the order is kubelet's: pods using more than
//! they requested first, then lower `priority`, then the larger use above the request.

use std::collections::BTreeMap;

use super::manager::{Reclaim, Resource};
use crate::pod::Pod;

/// A pod that may be evicted, with what it uses of the resource being reclaimed.
#[derive(Debug, Clone)]
pub struct Candidate {
    /// Its uid.
    pub uid: String,
    /// The pod.
    pub pod: Pod,
    /// Bytes it uses: on the node's filesystem (disk), or its containers' working set
    /// (memory).
    pub usage: u64,
    /// Memory working set per container name, for the message (memory only).
    pub containers: BTreeMap<String, u64>,
}

/// Bytes of `resource` (`memory`, `ephemeral-storage`) a container requests (0 when none).
fn container_request(c: &crate::pod::Container, resource: &str) -> u64 {
    c.resources
        .requests
        .get(resource)
        .and_then(|q| wedge_core::config::quantity::bytes(q).ok())
        .and_then(|b| u64::try_from(b).ok())
        .unwrap_or(0)
}

/// The pod's request of `resource`, summed over its app containers.
fn requested(pod: &Pod, resource: &str) -> u64 {
    pod.spec
        .containers
        .iter()
        .map(|c| container_request(c, resource))
        .sum()
}

/// Kubelet's order for `resource`: use above request first, then lower priority, then the
/// larger use above the request. The first is evicted.
pub fn rank(candidates: &mut [Candidate], resource: Resource) {
    let name = resource.name();
    candidates.sort_by(|a, b| {
        let above = |c: &Candidate| c.usage > requested(&c.pod, name);
        let excess = |c: &Candidate| i128::from(c.usage) - i128::from(requested(&c.pod, name));
        above(b)
            .cmp(&above(a))
            .then(
                a.pod
                    .spec
                    .priority
                    .unwrap_or(0)
                    .cmp(&b.pod.spec.priority.unwrap_or(0)),
            )
            .then(excess(b).cmp(&excess(a)))
    });
}

/// A byte count as Kubernetes prints a binary quantity: the largest binary suffix that divides
/// it exactly (`100Mi`, `1025Ki`), a plain number otherwise.
pub fn binary_quantity(bytes: u64) -> String {
    const SUFFIXES: [&str; 6] = ["Ki", "Mi", "Gi", "Ti", "Pi", "Ei"];
    if bytes < 1024 {
        return bytes.to_string();
    }
    let (mut value, mut suffix) = (bytes, "");
    for s in SUFFIXES {
        if value % 1024 != 0 || value == 0 {
            break;
        }
        value /= 1024;
        suffix = s;
    }
    format!("{value}{suffix}")
}

/// Kubelet's status message of a pod evicted for `reclaim`.
pub fn message(reclaim: &Reclaim, victim: &Candidate) -> String {
    let resource = reclaim.resource.name();
    let mut text = format!(
        "The node was low on resource: {resource}. Threshold quantity: {}, available: {}. ",
        binary_quantity(reclaim.threshold),
        binary_quantity(reclaim.available),
    );
    match reclaim.resource {
        Resource::Memory => {
            for c in &victim.pod.spec.containers {
                let Some(used) = victim.containers.get(&c.name) else {
                    continue;
                };
                let request = c.resources.requests.get(resource);
                if *used > container_request(c, resource) {
                    text.push_str(&format!(
                        "Container {} was using {}, request is {}, has larger consumption of {resource}. ",
                        c.name,
                        binary_quantity(*used),
                        request.map_or("0", String::as_str),
                    ));
                }
            }
        }
        Resource::EphemeralStorage | Resource::Pids => text.push_str(&format!(
            "Pod {} was using {}, request is {}, has larger consumption of {resource}. ",
            victim.pod.metadata.name,
            binary_quantity(victim.usage),
            binary_quantity(requested(&victim.pod, resource)),
        )),
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn candidate(
        name: &str,
        usage: u64,
        resource: &str,
        request: Option<&str>,
        priority: Option<i32>,
    ) -> Candidate {
        let mut requests = serde_json::Map::new();
        if let Some(r) = request {
            requests.insert(resource.into(), json!(r));
        }
        let mut spec = json!({"containers": [{"name": "app", "image": "img", "resources": {"requests": requests}}]});
        if let Some(p) = priority {
            spec["priority"] = json!(p);
        }
        Candidate {
            uid: name.into(),
            pod: serde_json::from_value(
                json!({"metadata": {"name": name, "uid": name}, "spec": spec}),
            )
            .unwrap(),
            usage,
            containers: [("app".to_owned(), usage)].into(),
        }
    }

    fn order(c: &[Candidate]) -> Vec<&str> {
        c.iter().map(|c| c.uid.as_str()).collect()
    }

    #[test]
    fn kubelets_order_above_request_then_priority_then_excess() {
        for (resource, kind) in [
            ("ephemeral-storage", Resource::EphemeralStorage),
            ("memory", Resource::Memory),
        ] {
            let mut c = vec![
                candidate("big-within-request", 900 << 20, resource, Some("1Gi"), None),
                candidate("small-above", 10 << 20, resource, None, None),
                candidate("large-above", 200 << 20, resource, None, None),
                candidate(
                    "large-above-important",
                    500 << 20,
                    resource,
                    None,
                    Some(1000),
                ),
                // 300 MiB above its 100 MiB request: more excess than large-above's 200.
                candidate("most-excess", 400 << 20, resource, Some("100Mi"), None),
            ];
            rank(&mut c, kind);
            assert_eq!(
                order(&c),
                [
                    "most-excess",
                    "large-above",
                    "small-above",
                    "large-above-important",
                    "big-within-request"
                ],
                "{resource}"
            );
        }
    }

    #[test]
    fn quantities_print_as_kubernetes_prints_them() {
        assert_eq!(binary_quantity(0), "0");
        assert_eq!(binary_quantity(1000), "1000");
        assert_eq!(binary_quantity(100 << 20), "100Mi");
        assert_eq!(binary_quantity(1025 << 10), "1025Ki");
        assert_eq!(binary_quantity((100 << 20) + 1), "104857601");
        assert_eq!(binary_quantity(1 << 30), "1Gi");
    }

    #[test]
    fn messages_are_kubelets() {
        let memory = Reclaim {
            signal: "memory.available".into(),
            resource: Resource::Memory,
            threshold: 100 << 20,
            available: 50 << 20,
            hard: true,
        };
        let hog = candidate("hog", 300 << 20, "memory", Some("64Mi"), None);
        assert_eq!(
            message(&memory, &hog),
            "The node was low on resource: memory. Threshold quantity: 100Mi, available: 50Mi. \
             Container app was using 300Mi, request is 64Mi, has larger consumption of memory. "
        );
        let quiet = candidate("quiet", 10 << 20, "memory", Some("64Mi"), None);
        assert_eq!(
            message(&memory, &quiet),
            "The node was low on resource: memory. Threshold quantity: 100Mi, available: 50Mi. "
        );
        let disk = Reclaim {
            signal: "nodefs.available".into(),
            resource: Resource::EphemeralStorage,
            threshold: 10 << 20,
            available: 1 << 20,
            hard: true,
        };
        let web = candidate("web", 4 << 20, "ephemeral-storage", None, None);
        assert_eq!(
            message(&disk, &web),
            "The node was low on resource: ephemeral-storage. Threshold quantity: 10Mi, \
             available: 1Mi. Pod web was using 4Mi, request is 0, has larger consumption of \
             ephemeral-storage. "
        );
    }
}
