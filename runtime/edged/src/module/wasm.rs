//! The Wasm-pod side of the module: containers run as modules in the node's Wasm host
//! ([`crate::wasm_pods`]), synced by pod workers and reported like Docker containers.

use std::sync::atomic::Ordering;

use super::EdgedSettings;
use super::sync::{Outcome, PodSync, SharedState, lock};
use crate::engine::ContainerRun;
use crate::objects::Kind;
use crate::pod::Pod;
use crate::projected::Objects;
use crate::status::Observed;
use crate::wasm_pods::{ModuleRef, ModuleSource, WasmPods};

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

impl WasmContainer {
    /// The module's name in the host.
    pub(super) fn name(&self) -> &str {
        &self.name
    }
}

/// Whether `pod` runs in the Wasm host: its runtime class is Wedge's Wasm class, or every
/// container image names a module.
pub(super) fn is_wasm_pod(settings: &EdgedSettings, pod: &Pod) -> bool {
    let class = &settings.wasm_runtime_class;
    pod.spec.runtime_class_name.as_deref() == Some(class.as_str())
        || (!pod.spec.containers.is_empty()
            && pod
                .spec
                .containers
                .iter()
                .all(|c| ModuleRef::is_wasm_image(&c.image)))
}

impl PodSync {
    /// Starts every container of Wasm pod `pod` whose module is not running in the host.
    pub(super) async fn sync_wasm(&self, pod: &Pod, state: &SharedState) -> Outcome {
        let Some(host) = self.edged.wasm.clone() else {
            let mut state = lock(state);
            for c in &pod.spec.containers {
                state.waiting.insert(
                    c.name.clone(),
                    (
                        "RunContainerError".into(),
                        "this node runs no Wasm host for Wasm pods".into(),
                    ),
                );
            }
            return Outcome {
                ok: false,
                changed: true,
            };
        };
        let mut outcome = Outcome {
            ok: true,
            changed: false,
        };
        let bus = self.bus.clone();
        let mut objects = Objects::new(&bus, pod, self.settings().object_timeout);
        for spec in &pod.spec.containers {
            let current = lock(state).wasm.get(&spec.name).map(|m| m.name.clone());
            if current.is_some_and(|name| host.state(&name).is_some()) {
                continue;
            }
            outcome.changed = true;
            let file = |bytes: Vec<u8>| ModuleSource::File {
                bytes,
                pod_uid: pod.metadata.uid.clone(),
                container: spec.name.clone(),
            };
            let namespace = &pod.metadata.namespace;
            let allowed = &self.settings().wasm_pod_module_namespaces;
            let source = match ModuleRef::parse(&spec.image) {
                // Every module is a mapper or a twin handler, both trusted with devices: only
                // the namespaces the operator named may bring their own.
                Ok(ModuleRef::ConfigMap { .. } | ModuleRef::Https { .. })
                    if !allowed.iter().any(|n| n == namespace) =>
                {
                    Err((
                        "CreateContainerConfigError",
                        format!(
                            "pods of namespace {namespace:?} may run only modules deployed on the \
                         node (wasm://<module>): bringing one (a mapper or twin handler, trusted \
                         with devices) needs the namespace in \
                         wedge.edged.wasmPodModuleNamespaces"
                        ),
                    ))
                }
                Ok(ModuleRef::Store(name)) => Ok(ModuleSource::Store(name)),
                Ok(ModuleRef::ConfigMap { name, key }) => {
                    match objects.get(Kind::ConfigMap, &name).await {
                        Ok(Some(data)) => data.get(&key).cloned().map(file).ok_or_else(|| {
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
                    .map(file)
                    .map_err(|e| ("ErrImagePull", e)),
                Err(e) => Err(("InvalidImageName", e)),
            };
            let owned = matches!(source, Ok(ModuleSource::File { .. }));
            let started = match source {
                Ok(source) => host
                    .start(source)
                    .await
                    .map_err(|e| ("RunContainerError", e)),
                Err(e) => Err(e),
            };
            let mut state = lock(state);
            match started {
                Ok(name) => {
                    tracing::info!(pod = %pod.key(), container = %spec.name, module = %name, "Wasm container started");
                    self.edged.stats.starts.fetch_add(1, Ordering::Relaxed);
                    state.waiting.remove(&spec.name);
                    state.wasm.insert(
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
                    state
                        .waiting
                        .insert(spec.name.clone(), (reason.to_owned(), message));
                    outcome.ok = false;
                }
            }
        }
        outcome
    }

    /// Removes the modules a deleted Wasm pod deployed (modules from the store stay).
    pub(super) async fn stop_wasm_pod(&self, state: &SharedState) {
        let Some(host) = self.edged.wasm.clone() else {
            return;
        };
        let owned: Vec<String> = lock(state)
            .wasm
            .values()
            .filter(|m| m.owned)
            .map(|m| m.name.clone())
            .collect();
        for module in owned {
            if let Err(e) = host.stop(&module).await {
                tracing::warn!(module = %module, "Wasm module not removed: {e}");
            }
        }
    }
}

/// What the Wasm host says of each container of Wasm pod `pod`.
pub(super) fn wasm_observed(
    host: Option<&dyn WasmPods>,
    pod: &Pod,
    state: &SharedState,
) -> Vec<Observed> {
    let state = lock(state);
    pod.spec
        .containers
        .iter()
        .map(|spec| {
            let module = state.wasm.get(&spec.name);
            let host_state = module.and_then(|m| host.and_then(|h| h.state(&m.name)));
            let run = match (module, &host_state) {
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
            let waiting = match (&host_state, state.waiting.get(&spec.name)) {
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
                restart_count: host_state.map(|s| s.restarts as u32).unwrap_or(0),
                waiting,
                ready: running,
            }
        })
        .collect()
}
