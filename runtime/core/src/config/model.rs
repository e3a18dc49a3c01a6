//! The top of the config tree: `EdgeCoreConfig`, `database`, `modules`.
//!
//! Every struct has `#[serde(default)]` so a partial file merges with the
//! defaults, and `#[serde(deny_unknown_fields)]` so a misspelt key is an
//! error instead of a silently ignored setting. The `Default` impls must
//! agree with `conf/edgecore.yaml` (a test checks it).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::edged::Edged;
use super::modules::{DeviceTwin, EdgeHub, EdgeStream, EventBus, MetaManager, ServiceBus};
use super::serde_util::null_as_default;
use super::wedge::WedgeSettings;

/// The only accepted `apiVersion` (KubeEdge ≥ v1.12 edgecore config format).
pub const API_VERSION: &str = "edgecore.config.kubeedge.io/v1alpha2";

/// The only accepted `kind`.
pub const KIND: &str = "EdgeCore";

/// A whole `edgecore.yaml`: KubeEdge's v1alpha2 EdgeCore schema (the subset
/// Wedge understands) plus Wedge's own `wedge` section.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct EdgeCoreConfig {
    /// Must be [`API_VERSION`]; may be omitted.
    pub api_version: String,
    /// Must be [`KIND`]; may be omitted.
    pub kind: String,
    /// Local metadata store (`database`, the JSON name every KubeEdge release
    /// writes; the Go type is `DataBase`).
    #[serde(deserialize_with = "null_as_default")]
    pub database: Database,
    /// Per-module settings.
    #[serde(deserialize_with = "null_as_default")]
    pub modules: Modules,
    /// Feature gate name -> enabled. Kept for KubeEdge compatibility; Wedge
    /// reads the gates it knows and ignores the rest.
    #[serde(deserialize_with = "null_as_default")]
    pub feature_gates: BTreeMap<String, bool>,
    /// Version string edgecore reports; informational (keadm upgrade uses it).
    pub edgecore_version: String,
    /// Wedge-only settings (not part of KubeEdge's schema).
    #[serde(deserialize_with = "null_as_default")]
    pub wedge: WedgeSettings,
}

impl Default for EdgeCoreConfig {
    fn default() -> Self {
        Self {
            api_version: API_VERSION.to_owned(),
            kind: KIND.to_owned(),
            database: Database::default(),
            modules: Modules::default(),
            feature_gates: BTreeMap::new(),
            edgecore_version: String::new(),
            wedge: WedgeSettings::default(),
        }
    }
}

/// `database`: where edgecore keeps its local copy of cloud metadata.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct Database {
    /// Must be `sqlite3` (the only driver KubeEdge and Wedge support).
    pub driver_name: String,
    /// Beego ORM alias in KubeEdge; accepted and ignored by Wedge.
    pub alias_name: String,
    /// SQLite file path. Empty means `<wedge.dataDir>/edgecore.db`, see
    /// [`EdgeCoreConfig::database_path`].
    pub data_source: String,
}

impl Default for Database {
    fn default() -> Self {
        Self {
            driver_name: "sqlite3".to_owned(),
            alias_name: "default".to_owned(),
            data_source: String::new(),
        }
    }
}

/// `modules`: one section per edgecore module.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct Modules {
    /// Cloud connection (websocket to CloudCore).
    #[serde(deserialize_with = "null_as_default")]
    pub edge_hub: EdgeHub,
    /// MQTT bridge for devices and apps.
    #[serde(deserialize_with = "null_as_default")]
    pub event_bus: EventBus,
    /// Local metadata cache and cloud query proxy.
    #[serde(deserialize_with = "null_as_default")]
    pub meta_manager: MetaManager,
    /// Device twin state and the DMI socket for mappers.
    #[serde(deserialize_with = "null_as_default")]
    pub device_twin: DeviceTwin,
    /// Node agent (kubelet-like pod lifecycle).
    #[serde(deserialize_with = "null_as_default")]
    pub edged: Edged,
    /// HTTP proxy from the cloud to edge apps.
    #[serde(deserialize_with = "null_as_default")]
    pub service_bus: ServiceBus,
    /// `kubectl logs/exec` tunnel (not in Wedge yet).
    #[serde(deserialize_with = "null_as_default")]
    pub edge_stream: EdgeStream,
    /// Node task (upgrade, image pre-pull) runner; only `enable` is understood.
    #[serde(deserialize_with = "null_as_default")]
    pub task_manager: Enable,
    /// KubeEdge's database self-test module; only `enable` is understood.
    #[serde(deserialize_with = "null_as_default")]
    pub db_test: Enable,
}

/// A module section that only has an on/off switch (default off).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct Enable {
    /// Whether the module runs.
    pub enable: bool,
}
