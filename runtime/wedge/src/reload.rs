//! SIGHUP: reload what a running node can take without a restart, and never die of it.
//!
//! * the log filter (`wedge.logLevel`, from the config file read again);
//! * the local device definitions (`wedge.devices.dir`): every `Device`/`DeviceModel` of the
//!   directory is sent to devicetwin as metamanager sends the cloud's objects (`update` of
//!   `<ns>/device/<name>`), so new devices get their rows and go to the mapper of their
//!   protocol, changed ones are handed to it again, and devices that were in the directory
//!   before and are gone now are deleted from the catalog (their mapper stops driving them; their
//!   twin rows stay, as when the cloud deletes a Device). They are sent as source
//!   [`DEVICES_DIR_SOURCE`], so devicetwin does not keep them with the cloud's objects: the
//!   directory is read again at every start.
//!
//! Other keys changed in the file are named in a warning: they apply at the next restart. A
//! config file that no longer parses is reported and changes nothing; so does a device file
//! that no longer parses (its devices stay as they were until it is fixed or removed), and a
//! devices directory that cannot be read.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde_json::Value;
use wedge_core::Bus;
use wedge_core::config::EdgeCoreConfig;
use wedge_core::message::{Content, Message, group, module, operation};
use wedge_devicetwin::inbound::DEVICES_DIR_SOURCE;

use crate::logging::LogControl;

/// Keys a reload applies; other changes wait for a restart.
const RELOADED_KEYS: [&str; 2] = ["wedge.logLevel", "wedge.devices.dir"];

/// `(resource type, <namespace>/<name>)` of a definition object.
type ObjectKey = (&'static str, String);

/// One definition object read from the directory: its key, the object as JSON and the file
/// that holds it.
struct Object {
    key: ObjectKey,
    value: Value,
    file: PathBuf,
}

/// What a read of the devices directory found.
#[derive(Default)]
struct DirectoryObjects {
    /// The objects of every file that parsed.
    objects: Vec<Object>,
    /// Files that are there but did not parse: what they defined before is kept.
    unreadable: BTreeSet<PathBuf>,
}

/// What a reload works from: how the running config was made, and what the devices directory
/// held at the last (re)load.
pub struct Reloader {
    /// Builds the config the way `wedge run` did (file + command-line overrides).
    load: Box<dyn Fn() -> anyhow::Result<EdgeCoreConfig> + Send>,
    current: EdgeCoreConfig,
    log: LogControl,
    bus: Bus,
    twin_enabled: bool,
    /// Objects of the devices directory at start or at the last reload, with their files.
    known: BTreeMap<ObjectKey, PathBuf>,
}

impl Reloader {
    /// Remembers `current` and what its devices directory holds now (devicetwin loads the same
    /// directory at start), so the first SIGHUP knows which devices were removed.
    pub fn new(
        load: Box<dyn Fn() -> anyhow::Result<EdgeCoreConfig> + Send>,
        current: EdgeCoreConfig,
        log: LogControl,
        bus: Bus,
    ) -> Reloader {
        let twin_enabled = current.modules.device_twin.enable;
        let known = devices_dir(&current)
            .and_then(|dir| read_objects(&dir).ok())
            .map(|read| read.objects.into_iter().map(|o| (o.key, o.file)).collect())
            .unwrap_or_default();
        Reloader {
            load,
            current,
            log,
            bus,
            twin_enabled,
            known,
        }
    }

    /// Does one reload. Every failure is logged; none stops the node.
    pub async fn reload(&mut self) {
        tracing::info!("SIGHUP received; reloading the log level and the devices directory");
        match (self.load)() {
            Ok(config) => {
                let restart = changed_keys(&self.current, &config)
                    .into_iter()
                    .filter(|k| !RELOADED_KEYS.contains(&k.as_str()))
                    .collect::<Vec<_>>();
                if !restart.is_empty() {
                    tracing::warn!(
                        "changed in the config file, applied at the next restart: {}",
                        restart.join(", ")
                    );
                }
                self.current = config;
            }
            Err(e) => tracing::error!(
                "config not re-read ({e:#}); keeping the running settings and reloading the \
                 devices directory they name"
            ),
        }
        match self.log.apply(&self.current.wedge.log_level) {
            Ok(filter) => tracing::info!(%filter, "log filter"),
            Err(e) => tracing::error!("log filter kept: {e:#}"),
        }
        self.reload_devices().await;
    }

    async fn reload_devices(&mut self) {
        if !self.twin_enabled {
            return;
        }
        let Some(dir) = devices_dir(&self.current) else {
            if self.known.is_empty() {
                tracing::info!("no wedge.devices.dir: no device definitions to reload");
            } else {
                tracing::info!("wedge.devices.dir is now empty; removing its devices");
                self.send_all(DirectoryObjects::default()).await;
            }
            return;
        };
        let read = match tokio::task::spawn_blocking(move || read_objects(&dir)).await {
            Ok(Ok(read)) => read,
            Ok(Err(e)) => {
                tracing::error!("devices directory not reloaded, its devices kept: {e}");
                return;
            }
            Err(e) => {
                tracing::error!("devices directory not reloaded: {e}");
                return;
            }
        };
        self.send_all(read).await;
    }

    /// Sends models, then devices, then deletions of what disappeared, in that order, so a
    /// device never waits for a model that is on its way. What a file that no longer parses
    /// defined is neither sent nor deleted.
    async fn send_all(&mut self, read: DirectoryObjects) {
        let DirectoryObjects {
            mut objects,
            unreadable,
        } = read;
        objects.sort_by_key(|o| o.key.0 != definition_resource::MODEL);
        let mut now: BTreeMap<ObjectKey, PathBuf> = objects
            .iter()
            .map(|o| (o.key.clone(), o.file.clone()))
            .collect();
        for (key, file) in &self.known {
            if unreadable.contains(file) && !now.contains_key(key) {
                tracing::warn!(object = %key.1, file = %file.display(), "kept as it was: its file no longer parses");
                now.insert(key.clone(), file.clone());
            }
        }
        let gone: Vec<ObjectKey> = self
            .known
            .keys()
            .filter(|key| !now.contains_key(*key))
            .cloned()
            .collect();
        let (mut sent, mut removed) = (0usize, 0usize);
        for object in objects {
            let content = match Content::json(&object.value) {
                Ok(content) => content,
                Err(e) => {
                    tracing::error!(object = %object.key.1, "not reloaded: {e}");
                    continue;
                }
            };
            if self.send(&object.key, operation::UPDATE, content).await {
                sent += 1;
            }
        }
        for key in &gone {
            if self.send(key, operation::DELETE, Content::null()).await {
                removed += 1;
            }
        }
        self.known = now;
        tracing::info!(
            objects = sent,
            removed,
            "devices directory reloaded (new devices added, changed ones handed to their mapper again)"
        );
    }

    async fn send(&self, (kind, id): &ObjectKey, op: &str, content: Content) -> bool {
        let Some((namespace, name)) = id.split_once('/') else {
            return false;
        };
        let resource = format!("{namespace}/{kind}/{name}");
        let msg = Message::build(DEVICES_DIR_SOURCE, group::TWIN, op, &resource, content);
        match self.bus.send(module::TWIN, msg).await {
            Ok(()) => true,
            Err(e) => {
                tracing::error!(%resource, "not sent to devicetwin: {e}");
                false
            }
        }
    }
}

/// Resource types of definitions in metamanager's `<ns>/<type>/<name>`.
mod definition_resource {
    pub use wedge_devicetwin::definition::kube::{
        DEVICE_RESOURCE as DEVICE, MODEL_RESOURCE as MODEL,
    };
}

fn devices_dir(config: &EdgeCoreConfig) -> Option<PathBuf> {
    let dir = &config.wedge.devices.dir;
    (!dir.is_empty()).then(|| PathBuf::from(dir))
}

/// Every Device and DeviceModel of the directory's YAML files, each file read once and
/// checked by devicetwin's own reader first (a file it would refuse at start is refused here
/// too, with its reason, and listed as unreadable). Only a directory that cannot be read
/// fails.
fn read_objects(dir: &Path) -> Result<DirectoryObjects, String> {
    use serde::Deserialize;
    use wedge_devicetwin::definition;
    let mut read = DirectoryObjects::default();
    for file in definition::yaml_files(dir).map_err(|e| e.to_string())? {
        let text = match definition::read_file(&file) {
            Ok((text, _)) => text,
            Err(e) => {
                tracing::error!("local device definitions: {e}");
                read.unreadable.insert(file);
                continue;
            }
        };
        let mut objects = Vec::new();
        for document in serde_norway::Deserializer::from_str(&text) {
            // The reader above parsed every document already.
            let Ok(value) = Value::deserialize(document) else {
                read.unreadable.insert(file.clone());
                objects.clear();
                break;
            };
            if let Some(key) = object_key(&value) {
                objects.push(Object {
                    key,
                    value,
                    file: file.clone(),
                });
            }
        }
        read.objects.extend(objects);
    }
    Ok(read)
}

fn object_key(value: &Value) -> Option<ObjectKey> {
    let kind = match value.get("kind")?.as_str()? {
        "Device" => definition_resource::DEVICE,
        "DeviceModel" => definition_resource::MODEL,
        _ => return None,
    };
    let metadata = value.get("metadata")?;
    let name = metadata.get("name")?.as_str()?;
    let namespace = metadata
        .get("namespace")
        .and_then(Value::as_str)
        .filter(|ns| !ns.is_empty())
        .unwrap_or("default");
    Some((kind, format!("{namespace}/{name}")))
}

/// Dotted keys whose values differ between two configs (leaves only).
fn changed_keys(old: &EdgeCoreConfig, new: &EdgeCoreConfig) -> Vec<String> {
    let (Ok(old), Ok(new)) = (serde_json::to_value(old), serde_json::to_value(new)) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    diff("", &old, &new, &mut out);
    out
}

fn diff(prefix: &str, old: &Value, new: &Value, out: &mut Vec<String>) {
    match (old, new) {
        (Value::Object(a), Value::Object(b)) => {
            let keys: BTreeSet<&String> = a.keys().chain(b.keys()).collect();
            for key in keys {
                let path = if prefix.is_empty() {
                    key.clone()
                } else {
                    format!("{prefix}.{key}")
                };
                diff(
                    &path,
                    a.get(key).unwrap_or(&Value::Null),
                    b.get(key).unwrap_or(&Value::Null),
                    out,
                );
            }
        }
        (a, b) if a != b => out.push(prefix.to_owned()),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn changed_keys_are_dotted_leaves() {
        let old = EdgeCoreConfig::default();
        let mut new = old.clone();
        new.wedge.log_level = "debug".into();
        new.modules.edge_hub.heartbeat = 99;
        let keys = changed_keys(&old, &new);
        assert_eq!(keys, ["modules.edgeHub.heartbeat", "wedge.logLevel"]);
    }

    #[test]
    fn objects_are_keyed_by_kind_namespace_and_name() {
        let device: Value = serde_json::json!({"kind": "Device", "metadata": {"name": "d1"}});
        assert_eq!(
            object_key(&device),
            Some(("device", "default/d1".to_owned()))
        );
        let model: Value = serde_json::json!({"kind": "DeviceModel",
            "metadata": {"name": "m", "namespace": "plant"}});
        assert_eq!(
            object_key(&model),
            Some(("devicemodel", "plant/m".to_owned()))
        );
        assert_eq!(object_key(&serde_json::json!({"kind": "Pod"})), None);
    }
}
