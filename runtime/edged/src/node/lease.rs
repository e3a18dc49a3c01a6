//! The node lease (`kube-node-lease/lease/<node>`), renewed the way kubelet's lease controller
//! does it, because the apiserver refuses a lease update without the current
//! `metadata.resourceVersion`:
//!
//! - every `leaseDuration / 4` (10 s for KubeEdge's 40 s), update the lease the cloud returned
//!   last time, with a fresh `renewTime`; the cloud's answer is the next lease to update;
//! - without one (first start, or the last update was refused: a conflict, a lease someone
//!   else changed), read the lease from the cloud and update that, or create it when the cloud
//!   has none.
//!
//! A refusal is logged with the cloud's reason and the next period tries again.

use std::time::Duration;

use serde_json::{Value, json};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use wedge_core::message::operation;
use wedge_core::time::now_ms;
use wedge_core::{Bus, Content};

use super::{CallError, NodeReportSettings, call};

/// Kubernetes' MicroTime: RFC 3339 with microseconds.
fn micro_time(now_ms: i64) -> String {
    let base = wedge_core::time::rfc3339_utc(now_ms);
    format!(
        "{}.{:06}Z",
        base.trim_end_matches('Z'),
        now_ms.rem_euclid(1000) * 1000
    )
}

/// A new lease for `node`, owned by its Node object when its uid is known (so the lease goes
/// with the node), renewed at `now_ms`.
pub fn new_lease(node: &str, node_uid: Option<&str>, now_ms: i64, duration: Duration) -> Value {
    let mut lease = json!({
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": node, "namespace": "kube-node-lease"},
        "spec": {
            "holderIdentity": node,
            "leaseDurationSeconds": duration.as_secs(),
        },
    });
    renewed(&mut lease, node, node_uid, now_ms, duration);
    lease
}

/// `lease` (as the cloud last returned it, so with its `resourceVersion`) renewed at
/// `now_ms`; an owner reference to the node is added when missing, as kubelet does.
fn renewed(lease: &mut Value, node: &str, node_uid: Option<&str>, now_ms: i64, duration: Duration) {
    lease["spec"]["holderIdentity"] = json!(node);
    lease["spec"]["leaseDurationSeconds"] = json!(duration.as_secs());
    lease["spec"]["renewTime"] = json!(micro_time(now_ms));
    let owned = lease["metadata"]["ownerReferences"]
        .as_array()
        .is_some_and(|refs| !refs.is_empty());
    if let (false, Some(uid)) = (owned, node_uid) {
        lease["metadata"]["ownerReferences"] = json!([{
            "apiVersion": "v1",
            "kind": "Node",
            "name": node,
            "uid": uid,
        }]);
    }
}

/// The lease in an answer: the cloud's object, or metamanager's cached list of one JSON
/// string (what a query gets while the cloud is away).
fn lease_of(answer: Value) -> Option<Value> {
    match answer {
        Value::Array(items) => match items.into_iter().next()? {
            Value::String(text) => serde_json::from_str(&text).ok(),
            other => Some(other),
        },
        Value::String(text) => serde_json::from_str(&text).ok(),
        object @ Value::Object(_) => Some(object),
        _ => None,
    }
}

/// The renewal state: the lease the cloud returned last.
struct Renewal<'a> {
    bus: &'a Bus,
    settings: &'a NodeReportSettings,
    key: String,
    latest: Option<Value>,
}

impl Renewal<'_> {
    async fn send(&self, op: &str, content: Content) -> Result<Option<Value>, CallError> {
        let answer = call(self.bus, op, &self.key, content, self.settings.call_timeout).await?;
        Ok(answer.and_then(lease_of))
    }

    async fn update(
        &self,
        mut lease: Value,
        node_uid: Option<&str>,
    ) -> Result<Option<Value>, CallError> {
        let s = self.settings;
        renewed(&mut lease, &s.node, node_uid, now_ms(), s.lease_duration);
        let content = Content::json(&lease).map_err(|e| CallError::Unreachable(e.to_string()))?;
        self.send(operation::UPDATE, content).await
    }

    /// One renewal; the error says why the lease was not renewed.
    async fn renew(&mut self, node_uid: Option<&str>) -> Result<(), CallError> {
        if let Some(latest) = self.latest.take() {
            match self.update(latest, node_uid).await {
                Ok(answer) => {
                    self.latest = answer;
                    return Ok(());
                }
                // Stale or refused: read the lease again below.
                Err(CallError::Refused(e)) => {
                    tracing::warn!(node = %self.settings.node, "lease update refused by the cloud: {e}; reading it again");
                }
                Err(e) => return Err(e),
            }
        }
        let s = self.settings;
        match self.send(operation::QUERY, Content::null()).await {
            Ok(Some(current)) => {
                self.latest = self.update(current, node_uid).await?;
                Ok(())
            }
            Ok(None) | Err(CallError::Refused(_)) => {
                // Kubelet creates the lease when the cloud has none.
                let lease = new_lease(&s.node, node_uid, now_ms(), s.lease_duration);
                let content =
                    Content::json(&lease).map_err(|e| CallError::Unreachable(e.to_string()))?;
                match self.send(operation::INSERT, content).await {
                    Ok(answer) => {
                        self.latest = answer;
                        Ok(())
                    }
                    Err(e) => Err(e),
                }
            }
            Err(e) => Err(e),
        }
    }
}

/// Renews the lease every `lease_duration / 4` until `cancel`. `node_uid` carries the Node
/// object's uid once the cloud told it (for the lease's owner reference).
pub async fn run(
    bus: Bus,
    settings: NodeReportSettings,
    node_uid: watch::Receiver<Option<String>>,
    cancel: CancellationToken,
) {
    let mut renewal = Renewal {
        bus: &bus,
        key: format!("kube-node-lease/lease/{}", settings.node),
        settings: &settings,
        latest: None,
    };
    let period = settings.lease_renew_interval();
    let mut tick = tokio::time::interval(period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tick.tick() => {}
        }
        let uid = node_uid.borrow().clone();
        let renewed = tokio::select! {
            _ = cancel.cancelled() => return,
            r = renewal.renew(uid.as_deref()) => r,
        };
        match renewed {
            Ok(()) => tracing::trace!(node = %settings.node, "lease renewed"),
            Err(CallError::Refused(e)) => {
                tracing::warn!(node = %settings.node, "lease not renewed, the cloud refused it: {e}; retrying in {period:?}");
            }
            Err(CallError::Unreachable(e)) => {
                tracing::debug!(node = %settings.node, "lease not renewed: {e}");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_lease_is_owned_by_its_node_and_renewed_in_micro_time() {
        let lease = new_lease(
            "edge-1",
            Some("u-1"),
            1_700_000_000_123,
            Duration::from_secs(40),
        );
        assert_eq!(lease["spec"]["renewTime"], "2023-11-14T22:13:20.123000Z");
        assert_eq!(lease["spec"]["leaseDurationSeconds"], 40);
        assert_eq!(lease["metadata"]["namespace"], "kube-node-lease");
        assert_eq!(lease["metadata"]["ownerReferences"][0]["uid"], "u-1");
        assert_eq!(lease["metadata"]["ownerReferences"][0]["kind"], "Node");
    }

    #[test]
    fn a_renewal_keeps_the_clouds_resource_version() {
        let mut from_cloud = json!({
            "metadata": {"name": "edge-1", "namespace": "kube-node-lease", "resourceVersion": "283",
                         "ownerReferences": [{"kind": "Node", "uid": "old"}]},
            "spec": {"holderIdentity": "edge-1", "renewTime": "2020-01-01T00:00:00.000000Z"},
        });
        renewed(
            &mut from_cloud,
            "edge-1",
            Some("u-1"),
            1_700_000_000_000,
            Duration::from_secs(40),
        );
        assert_eq!(from_cloud["metadata"]["resourceVersion"], "283");
        assert_eq!(from_cloud["metadata"]["ownerReferences"][0]["uid"], "old");
        assert_eq!(
            from_cloud["spec"]["renewTime"],
            "2023-11-14T22:13:20.000000Z"
        );
    }

    #[test]
    fn a_cached_lease_is_read_from_metamanagers_list() {
        let cached = json!([r#"{"metadata":{"resourceVersion":"9"}}"#]);
        assert_eq!(
            lease_of(cached).unwrap()["metadata"]["resourceVersion"],
            "9"
        );
        assert_eq!(lease_of(json!([])), None);
    }
}
