//! The pods the loop runs, as the node server looks them up ([`crate::server::PodLookup`]):
//! kept beside the loop's own map so the server never waits on the loop.
//!
//! A pod stays here while it terminates, until its containers are gone, as kubelet keeps
//! serving a terminating pod: `kubectl logs` during a graceful shutdown is how an operator
//! sees why a pod takes its whole grace period.

use std::collections::HashMap;
use std::sync::Mutex;

use super::sync::{SharedState, lock};
use crate::pod::Pod;
use crate::server::{PodInfo, PodLookup};

/// One pod: what the server reports, and the state its worker keeps (a Wasm pod's modules).
struct Entry {
    info: PodInfo,
    state: SharedState,
    /// Being stopped: no longer desired, its containers not yet removed.
    terminating: bool,
}

/// Pods by uid.
#[derive(Default)]
pub(crate) struct Directory {
    pods: Mutex<HashMap<String, Entry>>,
}

impl Directory {
    fn locked(&self) -> std::sync::MutexGuard<'_, HashMap<String, Entry>> {
        self.pods.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Records `pod` (new or changed), run in the Wasm host when `wasm`.
    pub(super) fn put(&self, pod: &Pod, wasm: bool, state: SharedState) {
        let containers = pod
            .spec
            .init_containers
            .iter()
            .chain(&pod.spec.containers)
            .map(|c| c.name.clone())
            .collect();
        let info = PodInfo {
            namespace: pod.namespace().to_owned(),
            name: pod.metadata.name.clone(),
            uid: pod.metadata.uid.clone(),
            containers,
            wasm: wasm.then(HashMap::new),
        };
        self.locked().insert(
            pod.metadata.uid.clone(),
            Entry {
                info,
                state,
                terminating: false,
            },
        );
    }

    /// Marks pod `uid` as terminating: still served, but a desired pod of the same name (one
    /// created again under a new uid) is found first.
    pub(super) fn terminating(&self, uid: &str) {
        if let Some(entry) = self.locked().get_mut(uid) {
            entry.terminating = true;
        }
    }

    /// Forgets pod `uid`.
    pub(super) fn remove(&self, uid: &str) {
        self.locked().remove(uid);
    }

    fn complete(entry: &Entry) -> PodInfo {
        let mut info = entry.info.clone();
        if let Some(modules) = &mut info.wasm {
            for (container, module) in &lock(&entry.state).wasm {
                modules.insert(container.clone(), module.name().to_owned());
            }
        }
        info
    }
}

impl PodLookup for Directory {
    fn pod(&self, namespace: &str, name: &str) -> Option<PodInfo> {
        self.locked()
            .values()
            .filter(|e| e.info.namespace == namespace && e.info.name == name)
            .min_by_key(|e| e.terminating)
            .map(Directory::complete)
    }

    fn pods(&self) -> Vec<PodInfo> {
        self.locked().values().map(Directory::complete).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(name: &str, uid: &str) -> Pod {
        Pod::from_json(
            &serde_json::json!({
                "metadata": {"name": name, "namespace": "default", "uid": uid},
                "spec": {"containers": [{"name": "main", "image": "busybox"}]},
            })
            .to_string(),
        )
        .expect("a pod")
    }

    #[test]
    fn a_terminating_pod_is_served_until_removed_and_its_successor_first() {
        let directory = Directory::default();
        directory.put(&pod("web", "u1"), false, SharedState::default());
        directory.terminating("u1");
        let found = directory.pod("default", "web").expect("still served");
        assert_eq!(found.uid, "u1");
        assert!(found.has_container("main"));

        // The same name created again under a new uid while the old one stops.
        directory.put(&pod("web", "u2"), false, SharedState::default());
        assert_eq!(
            directory.pod("default", "web").map(|p| p.uid),
            Some("u2".into())
        );
        assert_eq!(directory.pods().len(), 2);

        directory.remove("u1");
        assert_eq!(directory.pods().len(), 1);
        directory.remove("u2");
        assert!(directory.pod("default", "web").is_none());
    }
}
