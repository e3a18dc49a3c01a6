//! The Wasm-pod side of the module: containers run as modules in the node's Wasm host
//! ([`crate::wasm_pods`]), converged and reported like Docker containers.

use std::sync::atomic::Ordering;

use super::{Desired, Turn};
use crate::engine::ContainerRun;
use crate::objects::Kind;
use crate::pod::Pod;
use crate::projected::Objects;
use crate::status::Observed;
use crate::wasm_pods::{ModuleRef, ModuleSource};

/// The module a Wasm container runs.
#[derive(Debug, Clone)]
pub(super) struct WasmContainer {
    /// Module name in the host.
    name: String,
    /// Deployed for this pod (removed with it), rather than taken from the module store.
    owned: bool,
    /// When it was started, RFC 3339.
    started_at: String,
}

impl Turn<'_> {
    /// Whether `pod` runs in the Wasm host: its runtime class is Wedge's Wasm class, or every
    /// container image names a module.
    pub(super) fn is_wasm_pod(&self, pod: &Pod) -> bool {
        let class = &self.settings().wasm_runtime_class;
        pod.spec.runtime_class_name.as_deref() == Some(class.as_str())
            || (!pod.spec.containers.is_empty()
                && pod
                    .spec
                    .containers
                    .iter()
                    .all(|c| ModuleRef::is_wasm_image(&c.image)))
    }

    /// Starts every container of Wasm pod `uid` whose module is not running in the host.
    pub(super) async fn converge_wasm_pod(&mut self, uid: &str) {
        let Some(d) = self.desired.get(uid) else {
            return;
        };
        let pod = d.pod.clone();
        let Some(host) = self.edged.wasm.clone() else {
            let d = self.desired.get_mut(uid).expect("present above");
            for c in &pod.spec.containers {
                d.waiting.insert(
                    c.name.clone(),
                    (
                        "RunContainerError".into(),
                        "this node runs no Wasm host for Wasm pods".into(),
                    ),
                );
            }
            return;
        };
        let bus = self.bus.clone();
        let mut objects = Objects::new(&bus, &pod, self.settings().object_timeout);
        for spec in &pod.spec.containers {
            let current = d_wasm(&self.desired, uid, &spec.name);
            if current.is_some_and(|name| host.state(&name).is_some()) {
                continue;
            }
            let source = match ModuleRef::parse(&spec.image) {
                Ok(ModuleRef::Store(name)) => Ok(ModuleSource::Store(name)),
                Ok(ModuleRef::ConfigMap { name, key }) => {
                    match objects.get(Kind::ConfigMap, &name).await {
                        Ok(Some(data)) => data
                            .get(&key)
                            .cloned()
                            .map(ModuleSource::File)
                            .ok_or_else(|| {
                                (
                                    "ErrImagePull",
                                    format!("configmap {name:?} has no key {key:?}"),
                                )
                            }),
                        Ok(None) => Err(("ErrImagePull", format!("configmap {name:?} not found"))),
                        Err(e) => Err(("ErrImagePull", e)),
                    }
                }
                Ok(ModuleRef::Https { url, sha256 }) => self
                    .edged
                    .fetcher
                    .fetch(&url, &sha256)
                    .await
                    .map(ModuleSource::File)
                    .map_err(|e| ("ErrImagePull", e)),
                Err(e) => Err(("InvalidImageName", e)),
            };
            let owned = matches!(source, Ok(ModuleSource::File(_)));
            let started = match source {
                Ok(source) => host
                    .start(source)
                    .await
                    .map_err(|e| ("RunContainerError", e)),
                Err(e) => Err(e),
            };
            let Some(d) = self.desired.get_mut(uid) else {
                return;
            };
            match started {
                Ok(name) => {
                    tracing::info!(pod = %pod.key(), container = %spec.name, module = %name, "Wasm container started");
                    self.edged.stats.starts.fetch_add(1, Ordering::Relaxed);
                    d.waiting.remove(&spec.name);
                    d.wasm.insert(
                        spec.name.clone(),
                        WasmContainer {
                            name,
                            owned,
                            started_at: wedge_core::time::rfc3339_utc(wedge_core::time::now_ms()),
                        },
                    );
                }
                Err((reason, message)) => {
                    tracing::warn!(pod = %pod.key(), container = %spec.name, reason, "Wasm container not started: {message}");
                    d.waiting
                        .insert(spec.name.clone(), (reason.to_owned(), message));
                }
            }
        }
    }

    /// What the Wasm host says of each container of Wasm pod `d`.
    pub(super) fn wasm_observed(&self, d: &Desired) -> Vec<Observed> {
        let host = self.edged.wasm.as_ref();
        d.pod
            .spec
            .containers
            .iter()
            .map(|spec| {
                let module = d.wasm.get(&spec.name);
                let state = module.and_then(|m| host.and_then(|h| h.state(&m.name)));
                let run = match (module, &state) {
                    (Some(m), Some(s)) => Some(ContainerRun {
                        running: s.running,
                        started_at: m.started_at.clone(),
                        image_id: format!("sha256:{}", s.sha256),
                        error: s.last_error.clone().unwrap_or_default(),
                        ..ContainerRun::default()
                    }),
                    _ => None,
                };
                let running = run.as_ref().is_some_and(|r| r.running);
                let waiting = match (&state, d.waiting.get(&spec.name)) {
                    (_, Some(w)) if !running => Some(w.clone()),
                    (Some(s), _) if !s.running => Some((
                        "CrashLoopBackOff".to_owned(),
                        s.last_error.clone().unwrap_or_default(),
                    )),
                    _ => None,
                };
                Observed {
                    name: spec.name.clone(),
                    image: spec.image.clone(),
                    id: module.map(|m| format!("wasm://{}", m.name)),
                    run,
                    restart_count: state.map(|s| s.restarts as u32).unwrap_or(0),
                    waiting,
                    ready: running,
                }
            })
            .collect()
    }

    /// Removes the modules a deleted Wasm pod deployed (modules from the store stay).
    pub(super) async fn stop_wasm_pod(&mut self, d: &Desired) {
        let Some(host) = self.edged.wasm.clone() else {
            return;
        };
        for module in d.wasm.values().filter(|m| m.owned) {
            if let Err(e) = host.stop(&module.name).await {
                tracing::warn!(module = %module.name, "Wasm module not removed: {e}");
            }
        }
    }
}

/// The module recorded for container `name` of pod `uid`.
fn d_wasm(
    desired: &std::collections::BTreeMap<String, Desired>,
    uid: &str,
    name: &str,
) -> Option<String> {
    desired.get(uid)?.wasm.get(name).map(|m| m.name.clone())
}
