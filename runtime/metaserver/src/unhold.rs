//! KubeEdge's unhold-upgrade extension: which pods a request releases, and the message that
//! tells edged to release one. The checks and answers are v1.23.1's.

use serde_json::Value;
use wedge_core::message::{module, operation};
use wedge_core::{Content, Message};

/// The annotation that holds a pod's update.
pub const ANNOTATION: &str = "edge.kubeedge.io/hold-upgrade";

/// The largest request body read: v1.23.1's 3 MiB.
pub const MAX_BODY: usize = 3 * 1024 * 1024;

/// Why a request releases nothing; each is an HTTP status and edgecore's text.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// The body is not `<namespace>/<name>`.
    #[error("invalid format, expected <namespace>/<name>")]
    Format,
    /// The node request names no node.
    #[error("node name required in body")]
    NoNode,
    /// No such pod (or node) on this node.
    #[error("{0}")]
    NotFound(String),
    /// The pod has no `hold-upgrade: "true"` annotation.
    #[error("pod is not marked with hold-upgrade annotation")]
    NotHeld,
    /// The pod is past `Pending`.
    #[error("pod is not in pending phase")]
    NotPending,
    /// The store could not be read.
    #[error("{0}")]
    Store(String),
}

impl Refusal {
    /// The HTTP status v1.23.1 answers with.
    pub fn status(&self) -> u16 {
        match self {
            Refusal::Format | Refusal::NoNode | Refusal::NotHeld | Refusal::NotPending => 400,
            Refusal::NotFound(_) => 404,
            Refusal::Store(_) => 500,
        }
    }
}

/// `(namespace, name)` of a pod request's body.
pub fn pod_key(body: &str) -> Result<(String, String), Refusal> {
    match body.split_once('/') {
        Some((namespace, name)) => Ok((namespace.to_owned(), name.to_owned())),
        None => Err(Refusal::Format),
    }
}

/// Whether `pod` may be released: annotated and still `Pending`.
pub fn check(pod: &Value) -> Result<(), Refusal> {
    if pod["metadata"]["annotations"][ANNOTATION] != "true" {
        return Err(Refusal::NotHeld);
    }
    if pod["status"]["phase"] != "Pending" {
        return Err(Refusal::NotPending);
    }
    Ok(())
}

/// The message that releases pod `namespace/name` (to edged), as v1.23.1 builds it.
pub fn release(namespace: &str, name: &str) -> Message {
    Message::build(
        module::METAMANAGER,
        "",
        operation::UNHOLD_UPGRADE,
        &format!("{namespace}/pod/{name}"),
        Content::null(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_pod_request_names_namespace_and_pod() {
        assert_eq!(
            pod_key("default/a").unwrap(),
            ("default".into(), "a".into())
        );
        assert_eq!(pod_key("a"), Err(Refusal::Format));
    }

    #[test]
    fn only_an_annotated_pending_pod_is_released() {
        let pod = |a: &str, phase: &str| json!({"metadata": {"annotations": {ANNOTATION: a}}, "status": {"phase": phase}});
        assert_eq!(check(&pod("true", "Pending")), Ok(()));
        assert_eq!(check(&pod("false", "Pending")), Err(Refusal::NotHeld));
        assert_eq!(check(&pod("true", "Running")), Err(Refusal::NotPending));
        assert_eq!(Refusal::NotPending.status(), 400);
        let m = release("default", "a");
        assert_eq!(m.route.operation, "unhold-upgrade");
        assert_eq!(m.route.resource, "default/pod/a");
        assert_eq!(m.route.source, "metamanager");
    }
}
