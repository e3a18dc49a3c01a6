//! Trying one module without a node (`wedge module test`).
//!
//! The module runs in a Wasm host of its own (a scratch directory holds its database and
//! compiled code), behind the same [`WasmTwinHooks`] devicetwin calls on a node: a twin handler
//! reviews the updates it is given exactly as it would review a mapper's report or a cloud's
//! desired value, and a mapper is handed device definitions and desired values by the same
//! workers, then polls on each property's collect cycle. What the module sends out — reports,
//! device states, MQTT publishes — goes to a callback instead of the twin path and the broker.

use std::path::Path;
use std::sync::{Arc, Mutex};

use serde::Deserialize;
use wedge_core::Store;
use wedge_core::store::StoreOptions;
use wedge_devicetwin::definition::DeviceDefinition;
use wedge_devicetwin::effects::DesiredValue;
use wedge_devicetwin::hooks::{HookVerdict, ProposedChange, Proposer, TwinHooks, TwinLookup};
use wedge_devicetwin::validate;
use wedge_wasm::{
    DeviceState, GuestLogLine, HostServices, MapperSink, ModuleKind, ModuleStatus, Publisher,
    TwinValue, WasmEngine, WasmError, WasmHost,
};

use crate::WasmTwinHooks;

/// Something the module under trial sent out.
#[derive(Debug, Clone, PartialEq)]
pub enum TrialEvent {
    /// A value read from a device (a mapper's `report`).
    Report {
        /// Device id.
        device: String,
        /// Property.
        property: String,
        /// The value.
        value: TwinValue,
    },
    /// A device state (a mapper's `report-state`).
    State {
        /// Device id.
        device: String,
        /// The state.
        state: DeviceState,
    },
    /// A message the module published on MQTT (on a node: the node's broker).
    Published {
        /// Topic.
        topic: String,
        /// Payload.
        payload: Vec<u8>,
    },
}

/// Where a trial's events go.
pub type EventSink = Arc<dyn Fn(TrialEvent) + Send + Sync>;

/// Why a trial could not run.
#[derive(Debug, thiserror::Error)]
pub enum TrialError {
    /// The scratch database could not be opened.
    #[error("cannot open the trial's scratch database in {dir}: {reason}")]
    Scratch {
        /// The scratch directory.
        dir: String,
        /// Why.
        reason: String,
    },
    /// The module was refused (not a packaged module, wrong world, `init` failed...).
    #[error("{0}")]
    Module(#[from] WasmError),
    /// The trial asked a handler for something only a mapper does, or the other way round.
    #[error("{module} is a {kind}: {what}")]
    WrongKind {
        /// Module name.
        module: String,
        /// Its kind.
        kind: &'static str,
        /// What was asked of it, and what to do instead.
        what: &'static str,
    },
    /// An update or device the trial was given is not valid.
    #[error("{0}")]
    Input(String),
}

/// An update to review, as `wedge module test --update` takes it (JSON).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct TrialUpdate {
    /// Device id (`<namespace>/<name>`).
    pub device: String,
    /// Twin key.
    pub property: String,
    /// The proposed value, as KubeEdge writes it (text).
    pub value: String,
    /// The twin's type: `int`, `float`, `boolean` or `string` (default `string`).
    #[serde(default = "string_type", rename = "type")]
    pub value_type: String,
    /// True for a desired value (from the cloud or `wedge twin set`), false for a reported
    /// one (from a mapper). Default false.
    #[serde(default)]
    pub desired: bool,
    /// The value stored now on that side.
    #[serde(default)]
    pub previous: Option<String>,
    /// `mapper` or `cloud` (default: `cloud` for a desired value, else `mapper`).
    #[serde(default)]
    pub source: Option<TrialSource>,
    /// Twins the handler may read during the call.
    #[serde(default)]
    pub twins: Vec<TrialTwin>,
}

fn string_type() -> String {
    "string".to_owned()
}

/// Who proposes a trial update.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TrialSource {
    /// A mapper's report.
    Mapper,
    /// A desired value from the cloud.
    Cloud,
}

/// A stored twin a handler may read during a trial.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TrialTwin {
    /// Device id (default: the update's device).
    #[serde(default)]
    pub device: Option<String>,
    /// Twin key.
    pub property: String,
    /// Reported value.
    #[serde(default)]
    pub actual: Option<String>,
    /// Desired value.
    #[serde(default)]
    pub desired: Option<String>,
}

impl TrialUpdate {
    /// Reads one update, or a JSON array of them.
    pub fn parse_many(json: &str) -> Result<Vec<TrialUpdate>, TrialError> {
        let value: serde_json::Value = serde_json::from_str(json)
            .map_err(|e| TrialError::Input(format!("the update is not JSON: {e}")))?;
        let many = match value {
            serde_json::Value::Array(items) => items,
            one => vec![one],
        };
        many.into_iter()
            .map(|v| {
                serde_json::from_value(v).map_err(|e| {
                    TrialError::Input(format!(
                        "not an update ({e}); expected {{\"device\": \"default/thermo-1\", \"property\": \"temperature\", \"value\": \"21.5\", \"type\": \"float\"}} with optional desired, previous, source (mapper|cloud) and twins"
                    ))
                })
            })
            .collect()
    }

    /// The change devicetwin would hand its hooks for this update, checked the way devicetwin
    /// checks a request first.
    fn change(&self) -> Result<ProposedChange, TrialError> {
        let bad = |what: &str, reason: &str| {
            TrialError::Input(format!(
                "{what} of {}/{}: {reason}",
                self.device, self.property
            ))
        };
        if !validate::valid_key(&self.property) {
            return Err(bad("the property name", validate::BAD_KEY));
        }
        if !matches!(
            self.value_type.as_str(),
            "int" | "float" | "boolean" | "string"
        ) {
            return Err(bad(
                "the type",
                "must be int, float, boolean or string (KubeEdge's twin types)",
            ));
        }
        if !validate::valid_value(&self.value) {
            return Err(bad("the value", validate::BAD_VALUE));
        }
        validate::check_type(&self.value, &self.value_type).map_err(|r| bad("the value", r))?;
        let proposer = match self.source {
            Some(TrialSource::Mapper) => Proposer::Mapper,
            Some(TrialSource::Cloud) => Proposer::Cloud,
            None if self.desired => Proposer::Cloud,
            None => Proposer::Mapper,
        };
        Ok(ProposedChange {
            device: self.device.clone(),
            key: self.property.clone(),
            desired: self.desired,
            value: self.value.clone(),
            value_type: self.value_type.clone(),
            previous: self.previous.clone(),
            proposer,
        })
    }
}

/// The twins of one trial update.
struct GivenTwins {
    device: String,
    twins: Vec<TrialTwin>,
}

impl TwinLookup for GivenTwins {
    fn twin(&self, device: &str, key: &str) -> Option<(Option<String>, Option<String>)> {
        self.twins
            .iter()
            .find(|t| t.property == key && t.device.as_deref().unwrap_or(&self.device) == device)
            .map(|t| (t.desired.clone(), t.actual.clone()))
    }
}

/// Hands what the module sends to the trial's callback.
struct Relay {
    events: EventSink,
}

impl Publisher for Relay {
    fn publish(&self, _module: &str, topic: &str, payload: Vec<u8>) -> Result<(), String> {
        (self.events)(TrialEvent::Published {
            topic: topic.to_owned(),
            payload,
        });
        Ok(())
    }
}

impl MapperSink for Relay {
    fn report_actual(
        &self,
        _mapper: &str,
        device: &str,
        property: &str,
        value: TwinValue,
    ) -> Result<(), String> {
        (self.events)(TrialEvent::Report {
            device: device.to_owned(),
            property: property.to_owned(),
            value,
        });
        Ok(())
    }

    fn report_state(&self, _mapper: &str, device: &str, state: DeviceState) -> Result<(), String> {
        (self.events)(TrialEvent::State {
            device: device.to_owned(),
            state,
        });
        Ok(())
    }
}

/// One module loaded for a trial.
pub struct Trial {
    host: Arc<WasmHost>,
    hooks: WasmTwinHooks,
    name: String,
    kind: ModuleKind,
    /// Definitions handed over, to type desired values.
    defined: Mutex<Vec<DeviceDefinition>>,
}

impl Trial {
    /// Loads the packaged module `bytes` into a host keeping its state in `scratch` (which
    /// should be empty and is left for the caller to remove). Must run inside a tokio runtime.
    pub async fn load(
        scratch: &Path,
        bytes: Vec<u8>,
        events: EventSink,
    ) -> Result<Trial, TrialError> {
        let scratch_error = |reason: String| TrialError::Scratch {
            dir: scratch.display().to_string(),
            reason,
        };
        let store = Store::open(&scratch.join("trial.db"), StoreOptions::default())
            .map_err(|e| scratch_error(e.to_string()))?;
        store
            .migrate("wasm", wedge_wasm::MIGRATIONS)
            .await
            .map_err(|e| scratch_error(e.to_string()))?;
        let engine = WasmEngine::new(&scratch.join("cache"), &Default::default())?;
        let relay = Arc::new(Relay { events });
        let services = HostServices {
            publisher: relay.clone(),
            mapper_sink: relay,
        };
        let host = Arc::new(WasmHost::new(
            engine,
            services,
            &scratch.join("modules"),
            store,
        ));
        let status = host.deploy(bytes).await?;
        let kind = if status.kind == ModuleKind::Mapper.as_str() {
            ModuleKind::Mapper
        } else {
            ModuleKind::TwinHandler
        };
        Ok(Trial {
            hooks: WasmTwinHooks::new(host.clone()),
            host,
            name: status.name,
            kind,
            defined: Mutex::default(),
        })
    }

    /// The module's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The module's kind.
    pub fn kind(&self) -> ModuleKind {
        self.kind
    }

    /// The module's status: calls, traps, its last error.
    pub fn status(&self) -> Option<ModuleStatus> {
        self.host.get(&self.name).map(|d| d.status())
    }

    /// The module's log lines after line `after` (0: all it keeps).
    pub fn log_lines(&self, after: u64) -> Vec<GuestLogLine> {
        self.host
            .get(&self.name)
            .map(|d| d.log_lines(after))
            .unwrap_or_default()
    }

    fn wrong_kind(&self, what: &'static str) -> TrialError {
        TrialError::WrongKind {
            module: self.name.clone(),
            kind: self.kind.as_str(),
            what,
        }
    }

    /// Whether the handler's manifest binds `device` (a handler reviews nothing else).
    pub fn binds(&self, device: &str) -> bool {
        self.hooks.reviews(device)
    }

    /// Runs `update` through the handler as devicetwin would. An update for a device the
    /// handler's manifest does not bind is accepted without calling it, as on a node.
    pub async fn review(&self, update: &TrialUpdate) -> Result<HookVerdict, TrialError> {
        if self.kind != ModuleKind::TwinHandler {
            return Err(self.wrong_kind(
                "it reviews no updates; give it a device (--device FILE) to drive instead",
            ));
        }
        let change = update.change()?;
        let twins = Arc::new(GivenTwins {
            device: update.device.clone(),
            twins: update.twins.clone(),
        });
        Ok(self.hooks.review(change, twins).await)
    }

    /// Hands the mapper `definition` and returns once it drives the device (its `add-device`
    /// ran). From then on it polls the device on each property's collect cycle.
    pub async fn drive(&self, definition: DeviceDefinition) -> Result<(), TrialError> {
        let Some(wedge_wasm::Deployed::Mapper(mapper)) = self.host.get(&self.name) else {
            return Err(self.wrong_kind(
                "it drives no devices; give it updates to review (--update JSON) instead",
            ));
        };
        if definition.protocol != mapper.protocol() {
            return Err(TrialError::Input(format!(
                "device {} speaks protocol {:?}, but mapper {} drives {:?}",
                definition.id,
                definition.protocol,
                self.name,
                mapper.protocol()
            )));
        }
        let id = definition.id.clone();
        self.hooks.device_defined(definition.clone());
        self.hooks.settle(&self.name).await;
        if !mapper.devices().contains(&id) {
            let why = mapper
                .status()
                .last_error
                .unwrap_or_else(|| "see its log".to_owned());
            return Err(TrialError::Input(format!(
                "mapper {} did not take device {id}: {why}",
                self.name
            )));
        }
        self.defined
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(definition);
        Ok(())
    }

    /// Asks the mapper to write `value` to `property` of `device`, or of every device it
    /// drives that has the property when `device` is `None`, as a desired value from the cloud
    /// reaches it on a node. Returns the devices written to, once the mapper took the writes
    /// (a refusal is in its log). Nothing is written when one target's type refuses `value`.
    pub async fn desire(
        &self,
        device: Option<&str>,
        property: &str,
        value: &str,
    ) -> Result<Vec<String>, TrialError> {
        let targets: Vec<(String, String)> = self
            .defined
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .filter(|d| device.is_none_or(|id| d.id == id))
            .filter_map(|d| {
                let p = d.properties.iter().find(|p| p.name == property)?;
                Some((d.id.clone(), p.value_type.clone()))
            })
            .collect();
        if targets.is_empty() {
            return Err(TrialError::Input(match device {
                Some(device) => {
                    format!("device {device} has no property {property:?} in the definitions given")
                }
                None => format!("no device driven has property {property:?}"),
            }));
        }
        for (id, value_type) in &targets {
            validate::check_type(value, value_type).map_err(|r| {
                TrialError::Input(format!("{value:?} for {id}/{property} ({value_type}): {r}"))
            })?;
        }
        let mut written = Vec::with_capacity(targets.len());
        for (id, value_type) in targets {
            self.hooks.desired(DesiredValue {
                device: id.clone(),
                key: property.to_owned(),
                value: value.to_owned(),
                value_type,
            });
            written.push(id);
        }
        self.hooks.settle(&self.name).await;
        Ok(written)
    }

    /// Stops the module.
    pub async fn stop(self) {
        let _ = self.host.remove(&self.name).await;
        self.host.shutdown();
    }
}

#[cfg(test)]
mod tests;
