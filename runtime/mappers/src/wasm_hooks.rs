//! devicetwin's hooks over the node's Wasm host: twin handlers review proposed changes, and
//! mappers are handed device definitions and desired values (`drive.rs`: recorded, then
//! applied by one worker per mapper, so devicetwin never waits for a mapper and nothing
//! queues without bound).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, MutexGuard};

use wedge_devicetwin::definition::DeviceDefinition;
use wedge_devicetwin::effects::DesiredValue;
use wedge_devicetwin::hooks::{
    HookFuture, HookVerdict, ProposedChange, Proposer, TwinHooks, TwinLookup,
};
use wedge_devicetwin::validate;
use wedge_wasm::{
    Deployed, Device, HandlerModule, MapperModule, ModuleKind, Property, PushTarget, TwinReader,
    TwinUpdate, TwinValue, UpdateSource, Verdict, WasmHost,
};

/// Definitions by device id, shared with the twin reader of handler calls (for types).
type Definitions = Arc<Mutex<BTreeMap<String, DeviceDefinition>>>;

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // Only plain map updates happen under these locks; a poisoned one is still consistent.
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

/// [`TwinHooks`] over a [`WasmHost`].
pub struct WasmTwinHooks {
    host: Arc<WasmHost>,
    /// Every device defined on the node, by id — also those no mapper drives yet.
    definitions: Definitions,
    /// The mappers' workers.
    drive: Arc<drive::Drive>,
}

/// The host's form of a definition.
fn to_wasm(definition: &DeviceDefinition) -> Device {
    Device {
        id: definition.id.clone(),
        protocol: definition.protocol.clone(),
        protocol_config: definition.protocol_config.clone(),
        properties: definition
            .properties
            .iter()
            .map(|p| Property {
                name: p.name.clone(),
                value_type: p.value_type.clone(),
                visitor: p.visitor.clone(),
                collect_cycle_ms: p.collect_cycle_ms,
                report_to_cloud: p.report_to_cloud,
                report_cycle_ms: p.report_cycle_ms,
                push: p.push_mqtt.as_ref().map(|m| PushTarget {
                    topic: m.topic.clone(),
                }),
            })
            .collect(),
    }
}

/// Tells the operator, once per device handed over, which of its reporting settings the Wasm
/// host applies differently from a KubeEdge mapper, or not at all: properties without
/// `reportToCloud` (not reported, as KubeEdge's mappers do), a push broker other than the
/// node's, QoS and retain flags, and push methods other than MQTT.
fn reporting_notes(mapper: &str, definition: &DeviceDefinition) {
    let silent: Vec<&str> = definition
        .properties
        .iter()
        .filter(|p| !p.report_to_cloud)
        .map(|p| p.name.as_str())
        .collect();
    if !silent.is_empty() {
        tracing::info!(
            mapper,
            device = %definition.id,
            properties = ?silent,
            "properties without reportToCloud: true are not reported to the twin (as KubeEdge mappers do); set it to report them"
        );
    }
    for p in &definition.properties {
        if let Some(push) = &p.push_mqtt
            && (!push.address.is_empty() || push.qos != 1 || push.retained)
        {
            tracing::info!(
                mapper,
                device = %definition.id,
                property = %p.name,
                address = %push.address,
                qos = push.qos,
                retained = push.retained,
                "pushMethod.mqtt: values are published on this node's broker, QoS 1, not retained; address, qos and retained are not applied"
            );
        }
        if !p.push_other.is_empty() {
            tracing::warn!(
                mapper,
                device = %definition.id,
                property = %p.name,
                methods = ?p.push_other,
                "pushMethod: only mqtt is applied to Wasm mappers; these are ignored"
            );
        }
    }
}

fn mapper_named(host: &WasmHost, name: &str) -> Option<Arc<MapperModule>> {
    match host.get(name) {
        Some(Deployed::Mapper(m)) => Some(m),
        _ => None,
    }
}

/// Every deployed mapper, by name.
fn mappers(host: &WasmHost) -> Vec<Arc<MapperModule>> {
    host.list()
        .into_iter()
        .filter(|s| s.kind == ModuleKind::Mapper.as_str())
        .filter_map(|s| mapper_named(host, &s.name))
        .collect()
}

/// The mapper chosen for `protocol` (none for an empty protocol: such devices are driven by
/// mappers outside the node's Wasm host, over MQTT).
fn mapper_for(host: &WasmHost, protocol: &str) -> Option<Arc<MapperModule>> {
    if protocol.is_empty() {
        return None;
    }
    host.mapper_for_protocol(protocol)
}

/// Names of the mappers that drive `device` now.
fn drivers(host: &WasmHost, device: &str) -> Vec<String> {
    mappers(host)
        .into_iter()
        .filter(|m| m.devices().iter().any(|d| d == device))
        .map(|m| m.manifest().name.clone())
        .collect()
}

impl WasmTwinHooks {
    /// Hooks over `host`. Must be called inside the tokio runtime that will run the mapper
    /// workers (the daemon's).
    pub fn new(host: Arc<WasmHost>) -> WasmTwinHooks {
        let definitions: Definitions = Arc::default();
        WasmTwinHooks {
            drive: drive::Drive::new(host.clone(), definitions.clone()),
            host,
            definitions,
        }
    }

    /// Whether a deployed Wasm mapper drives `protocol`.
    pub fn drives_protocol(&self, protocol: &str) -> bool {
        mapper_for(&self.host, protocol).is_some()
    }

    /// Hands mapper `name` (just deployed, upgraded or reloaded) the remembered definitions of
    /// its protocol, and returns once it has them. Devices it already drives with the same
    /// definition are left alone. A mapper that is not the one chosen for its protocol (another
    /// mapper of the same protocol sorts first) gets nothing: a device has one driver.
    pub async fn mapper_deployed(&self, name: &str) {
        let Some(mapper) = mapper_named(&self.host, name) else {
            return;
        };
        let protocol = mapper.protocol().to_owned();
        let chosen = mapper_for(&self.host, &protocol).map(|m| m.manifest().name.clone());
        if chosen.as_deref() != Some(name) {
            if let Some(chosen) = chosen {
                tracing::warn!(
                    mapper = name,
                    protocol = %protocol,
                    "mapper {chosen} already drives this protocol; no devices handed over"
                );
            }
            return;
        }
        let devices: Vec<String> = lock(&self.definitions)
            .values()
            .filter(|d| d.protocol == protocol)
            .map(|d| d.id.clone())
            .collect();
        for device in devices {
            self.drive.touch(name, &device);
        }
        self.settle(name).await;
    }

    /// Returns once mapper `name` has made the calls for every definition and desired value
    /// handed to the hooks so far (`wedge module test` waits on it before it goes on).
    pub async fn settle(&self, name: &str) {
        self.drive.settle(name).await;
    }
}

/// Reads twins for handlers from devicetwin's [`TwinLookup`], typed: the reviewed twin by its
/// own type, others by their definition's type, anything else as text.
struct LookupReader {
    lookup: Arc<dyn TwinLookup>,
    definitions: Definitions,
    device: String,
    key: String,
    value_type: String,
}

impl LookupReader {
    fn value_type(&self, device: &str, property: &str) -> Option<String> {
        if device == self.device && property == self.key {
            return Some(self.value_type.clone());
        }
        lock(&self.definitions)
            .get(device)?
            .properties
            .iter()
            .find(|p| p.name == property)
            .map(|p| p.value_type.clone())
    }

    fn typed(&self, device: &str, property: &str, value: String) -> TwinValue {
        match self.value_type(device, property) {
            Some(ty) => TwinValue::from_kubeedge(&value, &ty).unwrap_or(TwinValue::Text(value)),
            None => TwinValue::Text(value),
        }
    }
}

impl TwinReader for LookupReader {
    fn actual(&self, device: &str, property: &str) -> Option<TwinValue> {
        let (_, actual) = self.lookup.twin(device, property)?;
        actual.map(|v| self.typed(device, property, v))
    }

    fn desired(&self, device: &str, property: &str) -> Option<TwinValue> {
        let (expected, _) = self.lookup.twin(device, property)?;
        expected.map(|v| self.typed(device, property, v))
    }
}

/// The error text of a failed handler call, naming the handler once.
fn failure_text(handler: &str, error: &wedge_wasm::WasmError) -> String {
    let text = error.to_string();
    if text.contains(handler) {
        text
    } else {
        format!("twin handler {handler:?}: {text}")
    }
}

/// Whether a handler's replacement can be stored in a twin of type `ty`, by the rules
/// devicetwin applies to what mappers send (KubeEdge's reason when not).
fn fits(text: &str, ty: &str) -> Result<(), &'static str> {
    if !validate::valid_value(text) {
        return Err(validate::BAD_VALUE);
    }
    validate::check_type(text, ty)
}

/// Runs `change` through `handlers` in order: a replacement is what the next handler sees, the
/// first rejection or failure ends the review.
async fn review_change(
    mut handlers: Vec<Arc<HandlerModule>>,
    change: ProposedChange,
    reader: Arc<dyn TwinReader>,
) -> HookVerdict {
    if handlers.is_empty() {
        return HookVerdict::Accept;
    }
    handlers.sort_by(|a, b| a.manifest().name.cmp(&b.manifest().name));
    let ty = change.value_type.as_str();
    let mut value = match TwinValue::from_kubeedge(&change.value, ty) {
        Ok(v) => v,
        // devicetwin validates before reviewing; refuse with KubeEdge's reason all the same.
        Err(reason) => return HookVerdict::Reject(reason),
    };
    let previous = change
        .previous
        .as_deref()
        .map(|p| TwinValue::from_kubeedge(p, ty).unwrap_or_else(|_| TwinValue::Text(p.to_owned())));
    let source = match change.proposer {
        Proposer::Mapper => UpdateSource::Mapper,
        Proposer::Cloud => UpdateSource::Cloud,
    };
    for handler in handlers {
        let name = &handler.manifest().name;
        let update = TwinUpdate {
            device: change.device.clone(),
            property: change.key.clone(),
            desired: change.desired,
            value: value.clone(),
            previous: previous.clone(),
            source,
        };
        match handler.on_update(update, Some(reader.clone())).await {
            Ok(Verdict::Accept) => {}
            Ok(Verdict::Replace(replacement)) => {
                let text = replacement.to_kubeedge();
                if let Err(reason) = fits(&text, ty) {
                    return HookVerdict::Failed(format!(
                        "twin handler {name:?} replaced {}/{} with {text:?}, which is not a valid {ty} value: {reason}",
                        change.device, change.key
                    ));
                }
                value = replacement;
            }
            Ok(Verdict::Reject(reason)) => {
                tracing::debug!(handler = %name, device = %change.device, key = %change.key, "change rejected: {reason}");
                return HookVerdict::Reject(reason);
            }
            Err(e) => return HookVerdict::Failed(failure_text(name, &e)),
        }
    }
    let text = value.to_kubeedge();
    if text == change.value {
        HookVerdict::Accept
    } else {
        HookVerdict::Replace(text)
    }
}

impl TwinHooks for WasmTwinHooks {
    fn reviews(&self, device: &str) -> bool {
        !self.host.handlers_for(device).is_empty()
    }

    fn review(&self, change: ProposedChange, twins: Arc<dyn TwinLookup>) -> HookFuture<'_> {
        let handlers = self.host.handlers_for(&change.device);
        let reader = Arc::new(LookupReader {
            lookup: twins,
            definitions: self.definitions.clone(),
            device: change.device.clone(),
            key: change.key.clone(),
            value_type: change.value_type.clone(),
        });
        Box::pin(review_change(handlers, change, reader))
    }

    fn desired(&self, value: DesiredValue) {
        // The mapper driving the device, or the one chosen for its protocol (its add may not
        // have run yet; the worker adds the device first).
        let name = drivers(&self.host, &value.device)
            .into_iter()
            .next()
            .or_else(|| {
                let protocol = lock(&self.definitions)
                    .get(&value.device)
                    .map(|d| d.protocol.clone())?;
                mapper_for(&self.host, &protocol).map(|m| m.manifest().name.clone())
            });
        let Some(name) = name else {
            // Not a Wasm-driven device (an MQTT mapper learns the value from the delta topic, a
            // DMI mapper from DMI), or not yet: kept for a Wasm mapper deployed later.
            tracing::debug!(device = %value.device, key = %value.key, "no Wasm mapper drives the device; desired value kept for one deployed later");
            self.drive
                .remember(&value.device, &value.key, (value.value, value.value_type));
            return;
        };
        self.drive.desire(
            &name,
            &value.device,
            &value.key,
            (value.value, value.value_type),
        );
    }

    fn device_defined(&self, definition: DeviceDefinition) {
        let id = definition.id.clone();
        let previous = lock(&self.definitions).insert(id.clone(), definition.clone());
        // Whoever drives it now, was chosen for its previous protocol, or is chosen for its
        // protocol now looks at it: the ones not chosen let go, the chosen one adds it.
        let mut concerned: BTreeSet<String> = drivers(&self.host, &id).into_iter().collect();
        for protocol in [
            Some(&definition.protocol),
            previous.as_ref().map(|p| &p.protocol),
        ]
        .into_iter()
        .flatten()
        {
            if let Some(m) = mapper_for(&self.host, protocol) {
                concerned.insert(m.manifest().name.clone());
            }
        }
        if concerned.is_empty() {
            tracing::debug!(
                device = %id,
                protocol = %definition.protocol,
                "no Wasm mapper for the protocol yet; definition kept for one"
            );
        }
        for name in concerned {
            self.drive.touch(&name, &id);
        }
    }

    fn device_removed(&self, device: &str) {
        let previous = lock(&self.definitions).remove(device);
        self.drive.forget(device);
        let mut concerned: BTreeSet<String> = drivers(&self.host, device).into_iter().collect();
        if let Some(m) = previous.and_then(|p| mapper_for(&self.host, &p.protocol)) {
            concerned.insert(m.manifest().name.clone());
        }
        for name in concerned {
            self.drive.touch(&name, device);
        }
    }
}

mod drive;

#[cfg(test)]
mod tests;
