//! KubeEdge's hold-upgrade (v1.23): a pod annotated `edge.kubeedge.io/hold-upgrade: "true"`
//! that the cloud still shows `Pending` is not started or changed by an update from the
//! cloud until the operator releases it through MetaServer's `unhold-upgrade` extension
//! (one pod, or every held pod of the node). Meanwhile the cloud shows the condition
//! `HeldUpgrade=True` (`HoldUpgradeEnabled`), as edgecore reports it.
//!
//! As edgecore, only `update` messages and the stored pods read at start are held (a pod's
//! first message is an `update` when the scheduler bound it: the cloud saw it unbound first).
//! Unlike edgecore, which keeps every held update and sends the condition again for each,
//! Wedge keeps the latest pod per name (edged acts on the pod as it is, not on the steps) and
//! sends the condition once per hold, so its own patch coming back as an update does not
//! patch again.

use std::collections::BTreeMap;

use serde_json::json;

use crate::pod::Pod;

/// The annotation that asks for the hold.
pub const ANNOTATION: &str = "edge.kubeedge.io/hold-upgrade";

/// The condition the cloud shows while a pod is held.
pub const CONDITION: &str = "HeldUpgrade";

/// Whether an update of `pod` is held, as edgecore decides it.
pub fn holds(pod: &Pod) -> bool {
    pod.metadata.deletion_timestamp.is_none()
        && pod.metadata.annotations.get(ANNOTATION).map(String::as_str) == Some("true")
        && pod.status.phase == "Pending"
}

/// Whether the cloud already shows `pod` held.
pub fn shown_held(pod: &Pod) -> bool {
    pod.status
        .conditions
        .iter()
        .any(|c| c.kind == CONDITION && c.status == "True")
}

/// The `podpatch` content that shows the hold: the condition alone (merged by type with the
/// others), as edgecore sends it.
pub fn condition_patch(now_ms: i64) -> String {
    json!({"status": {"conditions": [{
        "type": CONDITION,
        "status": "True",
        "reason": "HoldUpgradeEnabled",
        "message": "Upgrade is currently held due to edge-hold-upgrade annotation",
        "lastTransitionTime": wedge_core::time::rfc3339_utc(now_ms),
    }]}})
    .to_string()
}

/// The held pods, by `namespace/name`.
#[derive(Debug, Default)]
pub struct Held {
    pods: BTreeMap<String, Pod>,
}

impl Held {
    /// Keeps `pod` (replacing an earlier update of it); true when it was not held yet.
    pub fn hold(&mut self, pod: Pod) -> bool {
        self.pods.insert(pod.key(), pod).is_none()
    }

    /// Releases the pod `namespace/name`, if held.
    pub fn release(&mut self, key: &str) -> Option<Pod> {
        self.pods.remove(key)
    }

    /// Forgets a deleted pod.
    pub fn forget(&mut self, namespace: &str, name: &str) {
        self.pods
            .retain(|_, p| !(p.namespace() == namespace && p.metadata.name == name));
    }

    /// How many pods are held.
    pub fn len(&self) -> usize {
        self.pods.len()
    }

    /// Whether none is.
    pub fn is_empty(&self) -> bool {
        self.pods.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(annotation: Option<&str>, phase: &str, deleting: bool) -> Pod {
        let mut p = Pod::from_json(
            r#"{"metadata":{"name":"a","namespace":"default","uid":"u1"},"spec":{"containers":[{"name":"c","image":"i"}]}}"#,
        )
        .unwrap();
        if let Some(value) = annotation {
            p.metadata
                .annotations
                .insert(ANNOTATION.into(), value.into());
        }
        p.status.phase = phase.into();
        if deleting {
            p.metadata.deletion_timestamp = Some("2026-11-28T00:00:00Z".into());
        }
        p
    }

    #[test]
    fn only_an_annotated_pending_pod_not_being_deleted_is_held() {
        assert!(holds(&pod(Some("true"), "Pending", false)));
        assert!(!holds(&pod(Some("true"), "Running", false)));
        assert!(!holds(&pod(Some("true"), "", false)));
        assert!(!holds(&pod(Some("false"), "Pending", false)));
        assert!(!holds(&pod(None, "Pending", false)));
        assert!(!holds(&pod(Some("true"), "Pending", true)));
    }

    #[test]
    fn the_latest_update_is_kept_and_released_once() {
        let mut held = Held::default();
        assert!(held.hold(pod(Some("true"), "Pending", false)));
        assert!(!held.hold(pod(Some("true"), "Pending", false)));
        assert_eq!(held.len(), 1);
        assert!(held.release("default/a").is_some());
        assert!(held.release("default/a").is_none());
        held.hold(pod(Some("true"), "Pending", false));
        held.forget("default", "a");
        assert!(held.is_empty());
    }

    #[test]
    fn the_patch_is_edgecores_condition() {
        let patch: serde_json::Value =
            serde_json::from_str(&condition_patch(1_795_834_067_000)).unwrap();
        let c = &patch["status"]["conditions"][0];
        assert_eq!(c["type"], "HeldUpgrade");
        assert_eq!(c["status"], "True");
        assert_eq!(c["reason"], "HoldUpgradeEnabled");
        assert_eq!(
            c["message"],
            "Upgrade is currently held due to edge-hold-upgrade annotation"
        );
        assert!(c["lastTransitionTime"].as_str().unwrap().ends_with('Z'));
    }
}
