//! The pods the loop runs, as the node server looks them up ([`crate::server::PodLookup`]):
//! kept beside the loop's own map so the server never waits on the loop.

use std::collections::HashMap;
use std::sync::Mutex;

use super::sync::{SharedState, lock};
use crate::pod::Pod;
use crate::server::{PodInfo, PodLookup};

/// One pod: what the server reports, and the state its worker keeps (a Wasm pod's modules).
struct Entry {
    info: PodInfo,
    state: SharedState,
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
        self.locked()
            .insert(pod.metadata.uid.clone(), Entry { info, state });
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
            .find(|e| e.info.namespace == namespace && e.info.name == name)
            .map(Directory::complete)
    }

    fn pods(&self) -> Vec<PodInfo> {
        self.locked().values().map(Directory::complete).collect()
    }
}
