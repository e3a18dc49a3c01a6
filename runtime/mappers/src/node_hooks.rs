//! devicetwin's hooks for the whole node: twin handlers review changes (Wasm), and every kind
//! of mapper hears of definitions and desired values — Wasm mappers through
//! [`WasmTwinHooks`], KubeEdge mappers through DMI. MQTT mappers need no hook: devicetwin
//! publishes the delta topic itself.

use std::sync::Arc;

use wedge_devicetwin::definition::DeviceDefinition;
use wedge_devicetwin::effects::DesiredValue;
use wedge_devicetwin::hooks::{HookFuture, ProposedChange, TwinHooks, TwinLookup};
use wedge_dmi::Dmi;

use crate::wasm_hooks::WasmTwinHooks;

/// The node's [`TwinHooks`].
pub struct NodeTwinHooks {
    /// Wasm twin handlers and mappers.
    pub wasm: Arc<WasmTwinHooks>,
    /// KubeEdge mappers over DMI (when devicetwin runs).
    pub dmi: Option<Arc<Dmi>>,
}

impl TwinHooks for NodeTwinHooks {
    fn reviews(&self, device: &str) -> bool {
        self.wasm.reviews(device)
    }

    fn review(&self, change: ProposedChange, twins: Arc<dyn TwinLookup>) -> HookFuture<'_> {
        self.wasm.review(change, twins)
    }

    fn desired(&self, value: DesiredValue) {
        if let Some(dmi) = &self.dmi {
            dmi.desired(&value.device, &value.key, &value.value);
        }
        self.wasm.desired(value);
    }

    fn device_defined(&self, definition: DeviceDefinition) {
        let protocol = definition.protocol.clone();
        let by_dmi = self
            .dmi
            .as_ref()
            .is_some_and(|d| d.mappers().iter().any(|(p, _)| *p == protocol));
        if !protocol.is_empty() && !by_dmi && !self.wasm.drives_protocol(&protocol) {
            // Said once per definition, at info: an MQTT mapper may drive it, and a Wasm or
            // KubeEdge mapper arriving later gets it then.
            tracing::info!(
                device = %definition.id,
                %protocol,
                "no Wasm or KubeEdge (DMI) mapper for the device's protocol on this node yet; it waits for one (or an MQTT mapper)"
            );
        }
        if let Some(dmi) = &self.dmi {
            dmi.device_defined(definition.clone());
        }
        self.wasm.device_defined(definition);
    }

    fn device_removed(&self, device: &str) {
        if let Some(dmi) = &self.dmi {
            dmi.device_removed(device);
        }
        self.wasm.device_removed(device);
    }
}
