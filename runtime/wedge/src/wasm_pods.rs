//! edged's Wasm pods run in the node's Wasm host: [`wedge_edged::wasm_pods::WasmPods`] over
//! [`wedge_wasm::WasmHost`]. A module file a pod brings is deployed like `wedge module deploy`
//! (validated, stored, swapped in) under a name of the pod's
//! ([`wedge_wasm::pod_module_name`]); a module from the store is only looked up.

use std::sync::Arc;

use wedge_edged::wasm_pods::{BoxFuture, ModuleLogLine, ModuleSource, ModuleState, WasmPods};
use wedge_wasm::{RunState, WasmHost};

/// The Wasm host, as edged sees it.
pub struct HostPods {
    host: Arc<WasmHost>,
}

impl HostPods {
    /// Pods run in `host`.
    pub fn new(host: Arc<WasmHost>) -> HostPods {
        HostPods { host }
    }
}

impl WasmPods for HostPods {
    fn start(&self, source: ModuleSource) -> BoxFuture<'_, Result<String, String>> {
        Box::pin(async move {
            match source {
                ModuleSource::Store(name) => match self.host.get(&name) {
                    Some(_) => Ok(name),
                    None => Err(format!(
                        "module {name:?} is not deployed on this node (wedge module deploy, or wedge.modules.dir)"
                    )),
                },
                ModuleSource::File {
                    bytes,
                    pod_uid,
                    container,
                } => {
                    let owner = wedge_wasm::PodModule { pod_uid, container };
                    let status = self
                        .host
                        .deploy_for_pod(bytes, &owner)
                        .await
                        .map_err(|e| e.to_string())?;
                    crate::heap::release_free_memory();
                    Ok(status.name)
                }
            }
        })
    }

    fn stop(&self, name: &str) -> BoxFuture<'_, Result<(), String>> {
        let name = name.to_owned();
        Box::pin(async move { self.host.remove(&name).await.map_err(|e| e.to_string()) })
    }

    fn state(&self, name: &str) -> Option<ModuleState> {
        let status = self.host.get(name)?.status();
        Some(ModuleState {
            running: status.state == RunState::Running,
            restarts: status.restarts,
            last_error: status.last_error,
            sha256: status.sha256,
        })
    }

    fn log_lines(&self, name: &str, after: u64) -> Option<Vec<ModuleLogLine>> {
        let lines = self.host.get(name)?.log_lines(after);
        Some(
            lines
                .into_iter()
                .map(|l| ModuleLogLine {
                    seq: l.seq,
                    unix_ms: l.unix_ms,
                    level: l.level.to_owned(),
                    text: l.text,
                })
                .collect(),
        )
    }
}
