//! The node's Device and DeviceModel objects, and the definitions they resolve to.
//!
//! A device is *defined* once its model is known: the model gives each property its twin type
//! (and the protocol when the device names none). Objects arrive in any order — from the cloud
//! a device may come before its model — so a device waiting for its model is kept and resolved
//! when the model arrives.

use std::collections::BTreeMap;

use super::kube::{KubeDevice, KubeModel, KubeObject, twin_type};
use super::{DeviceDefinition, PropertyDefinition};
use crate::value as validate;

/// Models and devices by id, with the current definition of every resolved device.
#[derive(Debug, Clone, Default)]
pub struct Catalog {
    models: BTreeMap<String, KubeModel>,
    devices: BTreeMap<String, KubeDevice>,
    defined: BTreeMap<String, DeviceDefinition>,
}

/// The definition of `device` typed by `model`.
fn resolve(device: &KubeDevice, model: &KubeModel) -> DeviceDefinition {
    let id = device.id();
    let properties = device
        .properties
        .iter()
        .map(|p| {
            let value_type = match model.property(&p.name) {
                Some(m) => twin_type(&m.kind),
                None => {
                    tracing::warn!(
                        device = %id,
                        model = %model.id(),
                        property = %p.name,
                        "property not in the device model; typed string"
                    );
                    "string"
                }
            };
            let desired = p.desired.clone().filter(|value| {
                let fits = validate::check_type(value, value_type);
                if let Err(reason) = fits {
                    tracing::warn!(
                        device = %id,
                        property = %p.name,
                        value = %value,
                        "desired value ignored: {reason}"
                    );
                }
                fits.is_ok()
            });
            PropertyDefinition {
                name: p.name.clone(),
                value_type: value_type.to_owned(),
                visitor: p.visitor.clone(),
                collect_cycle_ms: p.collect_cycle_ms,
                desired,
                report_to_cloud: p.report_to_cloud,
                report_cycle_ms: p.report_cycle_ms,
                push_mqtt: p.push_mqtt.clone(),
                push_other: p.push_other.clone(),
            }
        })
        .collect();
    let protocol = if device.protocol.is_empty() {
        model.protocol.clone()
    } else {
        device.protocol.clone()
    };
    DeviceDefinition {
        id,
        protocol,
        protocol_config: device.protocol_config.clone(),
        properties,
        name: device.name.clone(),
        description: device.description.clone(),
        model: model.id(),
        device: device.clone(),
        device_model: model.clone(),
    }
}

impl Catalog {
    /// An empty catalog.
    pub fn new() -> Catalog {
        Catalog::default()
    }

    /// Re-resolves device `id` against the catalog; returns its definition when it is new or
    /// differs from the one it had.
    fn refresh(&mut self, id: &str) -> Option<DeviceDefinition> {
        let device = self.devices.get(id)?;
        let Some(model) = self.models.get(&device.model_id()) else {
            // Waiting for its model: no definition until it arrives.
            self.defined.remove(id);
            return None;
        };
        let definition = resolve(device, model);
        if self.defined.get(id) == Some(&definition) {
            return None;
        }
        self.defined.insert(id.to_owned(), definition.clone());
        Some(definition)
    }

    /// Adds or replaces a model. Returns the definitions of its devices that this changed
    /// (devices that were waiting for it, or whose types or protocol it changes), by id.
    pub fn put_model(&mut self, model: KubeModel) -> Vec<DeviceDefinition> {
        let model_id = model.id();
        self.models.insert(model_id.clone(), model);
        let users: Vec<String> = self
            .devices
            .iter()
            .filter(|(_, d)| d.model_id() == model_id)
            .map(|(id, _)| id.clone())
            .collect();
        users.iter().filter_map(|id| self.refresh(id)).collect()
    }

    /// Adds or replaces a device. Returns its definition when that is new or changed; `None`
    /// when nothing changed or its model is not known yet (it is then resolved by the
    /// [`Catalog::put_model`] that brings the model).
    pub fn put_device(&mut self, device: KubeDevice) -> Option<DeviceDefinition> {
        let id = device.id();
        self.devices.insert(id.clone(), device);
        self.refresh(&id)
    }

    /// Adds or replaces either kind of object; returns the definitions that changed.
    pub fn put(&mut self, object: KubeObject) -> Vec<DeviceDefinition> {
        match object {
            KubeObject::Device(d) => self.put_device(d).into_iter().collect(),
            KubeObject::Model(m) => self.put_model(m),
        }
    }

    /// Forgets a device; true when it was known (defined or waiting for its model).
    pub fn remove_device(&mut self, id: &str) -> bool {
        self.defined.remove(id);
        self.devices.remove(id).is_some()
    }

    /// Forgets a model; true when it was known. Devices already defined by it keep their
    /// definition (KubeEdge does not cascade a model's deletion to its devices either); a
    /// device put later that needs it waits for it again.
    pub fn remove_model(&mut self, id: &str) -> bool {
        self.models.remove(id).is_some()
    }

    /// The definition of device `id`, if it is defined.
    pub fn definition(&self, id: &str) -> Option<&DeviceDefinition> {
        self.defined.get(id)
    }

    /// Every defined device, by id.
    pub fn definitions(&self) -> Vec<DeviceDefinition> {
        self.defined.values().cloned().collect()
    }

    /// Devices waiting for their model: `(device id, model id)`, by device id.
    pub fn waiting(&self) -> Vec<(String, String)> {
        self.devices
            .iter()
            .filter(|(id, _)| !self.defined.contains_key(*id))
            .map(|(id, d)| (id.clone(), d.model_id()))
            .collect()
    }

    /// The model `id`, if known.
    pub fn model(&self, id: &str) -> Option<&KubeModel> {
        self.models.get(id)
    }

    /// The device object `id`, if known.
    pub fn device(&self, id: &str) -> Option<&KubeDevice> {
        self.devices.get(id)
    }
}
