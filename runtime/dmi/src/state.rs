//! What the node knows about its devices and its DMI mappers, and what each mapper should be
//! told next.
//!
//! Keeping a mapper's devices in step is *level-triggered*, like a kubelet's pod workers: for
//! each registered mapper the state holds what the mapper was last sent (its devices and
//! models) and a set of device ids that may have changed. A mapper's worker takes one id at a
//! time, compares what the device should be (its definition, with the twin's desired values)
//! with what the mapper holds, and makes the one call that closes the gap. Changes that come
//! faster than a mapper takes them coalesce in the set, so nothing queues without bound, and a
//! call that fails leaves the id in the set to be tried again.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Instant;

use tokio::sync::Notify;
use wedge_device::definition::DeviceDefinition;

use crate::convert;
use crate::pb;
use crate::peer::Peer;
use crate::rate::TokenBucket;
use crate::settings::Rate;

/// One registered mapper (edgecore keeps one per protocol: a later registration replaces it,
/// here only as `owner.rs` allows).
pub(crate) struct MapperLink {
    /// What the mapper said about itself.
    pub info: pb::MapperInfo,
    /// The process that registered it: only its reports count for the protocol's devices.
    pub owner: Peer,
    /// Its reports' token bucket.
    pub bucket: TokenBucket,
    /// Bumped by every registration; a worker of an older one stops.
    pub generation: u64,
    /// The devices the mapper holds, as last sent, by id.
    pub devices: BTreeMap<String, pb::Device>,
    /// The models the mapper holds, as last sent, by id.
    pub models: BTreeMap<String, pb::DeviceModel>,
    /// Loaded from the store after a restart: what the mapper holds is not known, so a device
    /// first seen is taken to be held as it is now (the mapper kept running), and only later
    /// changes are sent.
    pub adopted: bool,
    /// Devices to look at.
    pub dirty: BTreeSet<String>,
    /// Devices whose desired values must be sent again even if unchanged.
    pub forced: BTreeSet<String>,
    /// Wakes the worker.
    pub wake: Arc<Notify>,
}

impl MapperLink {
    pub(crate) fn new(
        info: pb::MapperInfo,
        owner: Peer,
        rate: Rate,
        generation: u64,
        adopted: bool,
    ) -> MapperLink {
        MapperLink {
            info,
            owner,
            bucket: TokenBucket::new(rate, Instant::now()),
            generation,
            devices: BTreeMap::new(),
            models: BTreeMap::new(),
            adopted,
            dirty: BTreeSet::new(),
            forced: BTreeSet::new(),
            wake: Arc::new(Notify::new()),
        }
    }

    fn touch(&mut self, id: &str, force: bool) {
        self.dirty.insert(id.to_owned());
        if force {
            self.forced.insert(id.to_owned());
        }
        self.wake.notify_one();
    }
}

/// The node's devices and mappers.
#[derive(Default)]
pub(crate) struct State {
    /// Every device defined on the node, by id.
    pub definitions: BTreeMap<String, DeviceDefinition>,
    /// The twins' desired values, by device and property: what mappers must apply.
    pub desired: BTreeMap<String, BTreeMap<String, String>>,
    /// Registered mappers, by protocol.
    pub mappers: BTreeMap<String, MapperLink>,
    /// Last generation handed out.
    pub generation: u64,
}

/// The device-model call that must precede a device call.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum ModelCall {
    /// The mapper does not have the model.
    Create(pb::DeviceModel),
    /// The mapper has an older form of it.
    Update(pb::DeviceModel),
}

/// The device call that closes the gap for one device.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum DeviceCall {
    /// The mapper does not have the device.
    Register(pb::Device),
    /// The mapper has another form of it (or must apply its desired values again).
    Update(pb::Device),
    /// The mapper has a device the node no longer gives it.
    Remove {
        /// `metadata.namespace`.
        namespace: String,
        /// `metadata.name`.
        name: String,
    },
}

/// One step of a worker.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Step {
    /// The device id.
    pub id: String,
    /// Model id and call, when the model must go first.
    pub model: Option<(String, ModelCall)>,
    /// The device call.
    pub call: DeviceCall,
}

impl State {
    /// The DMI form of device `id` as mappers of its protocol should hold it, if it is
    /// defined and can be converted.
    pub(crate) fn wanted(&self, id: &str) -> Option<(DeviceDefinition, pb::Device)> {
        let definition = self.definitions.get(id)?;
        let empty = BTreeMap::new();
        let desired = self.desired.get(id).unwrap_or(&empty);
        match convert::device(&definition.device, &definition.device_model, desired) {
            Ok(device) => Some((definition.clone(), device)),
            Err(e) => {
                tracing::warn!(device = %id, "device cannot be sent to its DMI mapper: {e}");
                None
            }
        }
    }

    /// Devices and models a mapper of `protocol` gets when it registers.
    pub(crate) fn register_answer(&self, protocol: &str) -> pb::MapperRegisterResponse {
        let mut answer = pb::MapperRegisterResponse::default();
        let mut models = BTreeSet::new();
        for (id, definition) in &self.definitions {
            if definition.protocol != protocol {
                continue;
            }
            let Some((definition, device)) = self.wanted(id) else {
                continue;
            };
            if models.insert(definition.model.clone()) {
                answer
                    .model_list
                    .push(convert::model(&definition.device_model));
            }
            answer.device_list.push(device);
        }
        answer
    }

    /// A device was defined or changed: the mappers of its old and new protocol look at it.
    /// The definition's desired values are the twins' (devicetwin hands them over reviewed
    /// by the twin handlers); a property without one is sent with an empty desired value,
    /// never the object's own, which a handler may have refused.
    pub(crate) fn define(&mut self, definition: DeviceDefinition) {
        let id = definition.id.clone();
        let desired = definition
            .properties
            .iter()
            .map(|p| (p.name.clone(), p.desired.clone().unwrap_or_default()))
            .collect();
        self.desired.insert(id.clone(), desired);
        let previous = self.definitions.insert(id.clone(), definition.clone());
        if let Some(previous) = previous
            && previous.protocol != definition.protocol
            && let Some(link) = self.mappers.get_mut(&previous.protocol)
        {
            link.touch(&id, false);
        }
        if let Some(link) = self.mappers.get_mut(&definition.protocol) {
            link.touch(&id, false);
        }
    }

    /// A device was removed from the node.
    pub(crate) fn remove(&mut self, id: &str) {
        self.desired.remove(id);
        if let Some(previous) = self.definitions.remove(id)
            && let Some(link) = self.mappers.get_mut(&previous.protocol)
        {
            link.touch(id, false);
        }
    }

    /// A desired value the device must get (a twin's desired side differs from its reported
    /// one): it is sent even when the mapper was already given it.
    pub(crate) fn desire(&mut self, device: &str, key: &str, value: &str) {
        self.desired
            .entry(device.to_owned())
            .or_default()
            .insert(key.to_owned(), value.to_owned());
        let Some(protocol) = self.definitions.get(device).map(|d| d.protocol.clone()) else {
            return;
        };
        if let Some(link) = self.mappers.get_mut(&protocol) {
            // Sent again unless the mapper was just given exactly this value (a new device's
            // definition carries it already).
            let given = link
                .devices
                .get(device)
                .and_then(|d| d.spec.as_ref())
                .and_then(|s| s.properties.iter().find(|p| p.name == key))
                .and_then(|p| p.desired.as_ref())
                .is_some_and(|d| d.value == value);
            link.touch(device, link.adopted || !given);
        }
    }

    /// The next call for the mapper of `protocol` at `generation`; `None` when it has nothing
    /// left to do (or was replaced).
    pub(crate) fn next_step(&mut self, protocol: &str, generation: u64) -> Option<Step> {
        loop {
            let link = self.mappers.get(protocol)?;
            if link.generation != generation {
                return None;
            }
            let id = link.dirty.first()?.clone();
            let wanted = self
                .wanted(&id)
                .filter(|(definition, _)| definition.protocol == protocol);
            let link = self.mappers.get_mut(protocol)?;
            link.dirty.remove(&id);
            let forced = link.forced.remove(&id);
            let held = link.devices.get(&id);
            let call = match (wanted, held) {
                (None, None) => continue,
                (None, Some(held)) => DeviceCall::Remove {
                    namespace: held.namespace.clone(),
                    name: held.name.clone(),
                },
                (Some((_, device)), None) if link.adopted && !forced => {
                    link.devices.insert(id.clone(), device);
                    continue;
                }
                (Some((definition, device)), held) => {
                    let model = convert::model(&definition.device_model);
                    let model_call = match link.models.get(&definition.model) {
                        None if !link.adopted => Some(ModelCall::Create(model)),
                        Some(sent) if *sent != model => Some(ModelCall::Update(model)),
                        _ => None,
                    };
                    let call = match held {
                        Some(held) if *held == device && !forced => {
                            if model_call.is_none() {
                                continue;
                            }
                            DeviceCall::Update(device)
                        }
                        Some(_) => DeviceCall::Update(device),
                        None if link.adopted => DeviceCall::Update(device),
                        None => DeviceCall::Register(device),
                    };
                    return Some(Step {
                        id,
                        model: model_call.map(|c| (definition.model.clone(), c)),
                        call,
                    });
                }
            };
            return Some(Step {
                id,
                model: None,
                call,
            });
        }
    }

    /// Records that `step` reached the mapper of `protocol` at `generation`.
    pub(crate) fn done(&mut self, protocol: &str, generation: u64, step: Step) {
        let Some(link) = self.mappers.get_mut(protocol) else {
            return;
        };
        if link.generation != generation {
            return;
        }
        if let Some((model_id, call)) = step.model {
            let (ModelCall::Create(model) | ModelCall::Update(model)) = call;
            link.models.insert(model_id, model);
        }
        match step.call {
            DeviceCall::Register(device) | DeviceCall::Update(device) => {
                link.devices.insert(step.id, device);
            }
            DeviceCall::Remove { .. } => {
                link.devices.remove(&step.id);
            }
        }
    }

    /// Puts `step` back to be tried again.
    pub(crate) fn retry(&mut self, protocol: &str, generation: u64, step: &Step) {
        if let Some(link) = self.mappers.get_mut(protocol)
            && link.generation == generation
        {
            link.dirty.insert(step.id.clone());
            if matches!(step.call, DeviceCall::Update(_)) {
                link.forced.insert(step.id.clone());
            }
        }
    }
}

#[cfg(test)]
mod tests;
