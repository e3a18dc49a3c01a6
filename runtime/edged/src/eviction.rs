//! Eviction under disk pressure, as kubelet's eviction manager does it for `nodefs.available`:
//! when the node's filesystem has less available than `evictionHard` allows, one pod is
//! evicted per pass (every 10 s, kubelet's monitoring period), chosen in kubelet's order —
//! pods whose disk use exceeds their `ephemeral-storage` request first, then lower
//! `priority`, then the largest use — and only once the last evicted pod's containers are
//! gone. An evicted pod is `Failed` with reason `Evicted` and kubelet's message, gets a
//! Warning event, and its containers and volumes are removed (which frees the disk); it is not
//! started again. Static pods are never evicted.
//!
//! A pod's disk use is what it writes on the node's filesystem: its directory under the pods
//! root (emptyDir volumes, written ConfigMaps/Secrets), never crossing into a mount (sub-path
//! binds) and never following a symlink. Container writable layers and logs, which live in the
//! runtime's own directories, are not counted.

use std::path::Path;

use crate::node::pressure::{Signals, Thresholds};
use crate::pod::Pod;

/// The signal this eviction acts on.
pub const SIGNAL: &str = "nodefs.available";

/// A pod that may be evicted, with what it uses.
#[derive(Debug, Clone)]
pub struct Candidate {
    /// Its uid.
    pub uid: String,
    /// The pod.
    pub pod: Pod,
    /// Bytes it uses on the node's filesystem.
    pub usage: u64,
}

/// The pod's `ephemeral-storage` request, summed over its app containers (0 when none asks).
fn requested(pod: &Pod) -> u64 {
    pod.spec
        .containers
        .iter()
        .filter_map(|c| c.resources.requests.get("ephemeral-storage"))
        .filter_map(|q| wedge_core::config::quantity::bytes(q).ok())
        .map(|b| u64::try_from(b).unwrap_or(0))
        .sum()
}

/// Kubelet's order for disk pressure: use above request first, then lower priority, then
/// larger use. The first is evicted.
pub fn rank(candidates: &mut [Candidate]) {
    candidates.sort_by(|a, b| {
        let above = |c: &Candidate| c.usage > requested(&c.pod);
        above(b)
            .cmp(&above(a))
            .then(
                a.pod
                    .spec
                    .priority
                    .unwrap_or(0)
                    .cmp(&b.pod.spec.priority.unwrap_or(0)),
            )
            .then(b.usage.cmp(&a.usage))
    });
}

/// Whether `signals` cross `thresholds` for [`SIGNAL`]: `(threshold bytes, available)`.
pub fn pressure(thresholds: &Thresholds, signals: &Signals) -> Option<(u64, u64)> {
    let (available, capacity) = signals.nodefs?;
    let threshold = thresholds.bytes(SIGNAL, capacity)?;
    (available < threshold).then_some((threshold, available))
}

/// Kubelet's status message for a pod evicted for `nodefs.available`.
pub fn message(threshold: u64, available: u64, victim: &Candidate) -> String {
    format!(
        "The node was low on resource: ephemeral-storage. Threshold quantity: {}Ki, available: \
         {}Ki. Pod {} was using {}Ki, request is {}Ki, has larger consumption of ephemeral-storage. ",
        threshold / 1024,
        available / 1024,
        victim.pod.metadata.name,
        victim.usage / 1024,
        requested(&victim.pod) / 1024,
    )
}

/// Bytes under `dir` on its own filesystem: files counted by their allocated blocks, no
/// symlink followed, no mount point entered.
pub fn disk_usage(dir: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let Ok(top) = std::fs::symlink_metadata(dir) else {
        return 0;
    };
    let device = top.dev();
    let mut total = 0u64;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(path) = stack.pop() {
        let Ok(meta) = std::fs::symlink_metadata(&path) else {
            continue;
        };
        if meta.dev() != device {
            continue;
        }
        total = total.saturating_add(meta.blocks().saturating_mul(512));
        if meta.is_dir()
            && let Ok(entries) = std::fs::read_dir(&path)
        {
            stack.extend(entries.flatten().map(|e| e.path()));
        }
    }
    total
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn candidate(
        name: &str,
        usage: u64,
        request: Option<&str>,
        priority: Option<i32>,
    ) -> Candidate {
        let mut requests = serde_json::Map::new();
        if let Some(r) = request {
            requests.insert("ephemeral-storage".into(), json!(r));
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
        }
    }

    #[test]
    fn kubelets_order_above_request_then_priority_then_usage() {
        let mut c = vec![
            candidate("big-within-request", 900 << 20, Some("1Gi"), None),
            candidate("small-above", 10 << 20, None, None),
            candidate("large-above", 200 << 20, None, None),
            candidate("large-above-important", 500 << 20, None, Some(1000)),
        ];
        rank(&mut c);
        let order: Vec<&str> = c.iter().map(|c| c.uid.as_str()).collect();
        assert_eq!(
            order,
            [
                "large-above",
                "small-above",
                "large-above-important",
                "big-within-request"
            ]
        );
    }

    #[test]
    fn pressure_is_available_below_the_threshold() {
        let t = Thresholds::from_eviction_hard(
            &[("nodefs.available".to_owned(), "10%".to_owned())].into(),
        );
        let mut s = Signals {
            nodefs: Some((50, 1000)),
            ..Signals::default()
        };
        assert_eq!(pressure(&t, &s), Some((100, 50)));
        s.nodefs = Some((200, 1000));
        assert_eq!(pressure(&t, &s), None);
        let c = candidate("web", 4 << 20, None, None);
        assert_eq!(
            message(10 << 20, 1 << 20, &c),
            "The node was low on resource: ephemeral-storage. Threshold quantity: 10240Ki, \
             available: 1024Ki. Pod web was using 4096Ki, request is 0Ki, has larger consumption \
             of ephemeral-storage. "
        );
    }

    #[test]
    fn usage_counts_files_and_follows_no_symlink() {
        let dir = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("big"), vec![7u8; 1 << 20]).unwrap();
        std::fs::create_dir(dir.path().join("vol")).unwrap();
        std::fs::write(dir.path().join("vol/data"), vec![1u8; 256 << 10]).unwrap();
        std::os::unix::fs::symlink(outside.path(), dir.path().join("vol/out")).unwrap();
        let used = disk_usage(dir.path());
        assert!(used >= 256 << 10, "{used}");
        assert!(
            used < 1 << 20,
            "the symlinked megabyte is not counted: {used}"
        );
    }
}
