//! What the node server needs to know of the pods edged runs: which pod a request names,
//! its uid and containers, and for a Wasm pod the module each container runs.
//!
//! The server asks through [`PodLookup`] rather than reading edged's loop state, so the two
//! never share a lock across an await and the server can be tested with a plain table.

use std::collections::HashMap;

/// A pod as the node server sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodInfo {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// The pod's uid: containers carry it in their labels.
    pub uid: String,
    /// Names of its containers, init containers included, in spec order.
    pub containers: Vec<String>,
    /// For a Wasm pod, the module each started container runs (container → module name);
    /// `None` for a pod of containers.
    pub wasm: Option<HashMap<String, String>>,
}

impl PodInfo {
    /// Whether `container` is one of the pod's containers.
    pub fn has_container(&self, container: &str) -> bool {
        self.containers.iter().any(|c| c == container)
    }
}

/// The pods the node runs, as edged knows them now.
pub trait PodLookup: Send + Sync + 'static {
    /// The pod `namespace/name`, if edged runs it.
    fn pod(&self, namespace: &str, name: &str) -> Option<PodInfo>;
    /// Every pod edged runs.
    fn pods(&self) -> Vec<PodInfo>;
}

/// A fixed table of pods: for tests, and for a server with no edged behind it.
#[derive(Debug, Default, Clone)]
pub struct PodTable(pub Vec<PodInfo>);

impl PodLookup for PodTable {
    fn pod(&self, namespace: &str, name: &str) -> Option<PodInfo> {
        self.0
            .iter()
            .find(|p| p.namespace == namespace && p.name == name)
            .cloned()
    }

    fn pods(&self) -> Vec<PodInfo> {
        self.0.clone()
    }
}
