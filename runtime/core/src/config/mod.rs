//! Wedge's configuration: KubeEdge's `edgecore.yaml` (v1alpha2) schema plus
//! Wedge's own `wedge` section, its validation, and the embedded default.
//!
//! Loading is parse, then merge with defaults, then validate:
//! - every key is optional; a missing key or section takes the value from
//!   `conf/edgecore.yaml` (equal to the `Default` impls, a test checks it);
//! - unknown keys, wrong types and YAML syntax errors are
//!   [`ConfigError::Parse`], naming the full dotted key (and line/column);
//! - broken rules are [`ConfigError::Invalid`], which carries *every*
//!   violation (the first in `key`/`message`, the rest in `others`) and
//!   displays them one per line.
//!
//! The schema is the union of the keys KubeEdge v1.12 – v1.23 write (JSON
//! names, taken from each release's `edgecore/v1alpha2/types.go`), so every
//! file those releases generate loads, while a key no release has is still an
//! error. Keys Wedge accepts but does not act on are named once at start
//! ([`EdgeCoreConfig::not_implemented`]).
//!
//! Files: `model.rs`/`modules.rs`/`edged.rs`/`kubelet.rs`/`wedge.rs` (the
//! schema; `optional.rs` declares kubelet's all-optional sections,
//! `duration.rs` Go durations, `quantity.rs` resource quantities),
//! `kubelet_settings.rs` (the effective kubelet values edged uses),
//! `compat.rs` (which keys Wedge acts on), `parse.rs` (text to struct, error
//! wording), `validate.rs` (rules), `dns.rs` (DNS-1123 names), `node.rs`
//! (node name), `paths.rs` (data dir and DB path), `error.rs`,
//! `serde_util.rs`.

mod admin;
mod broker;
mod compat;
mod dns;
mod duration;
mod edged;
mod error;
pub mod eviction;
mod kubelet;
mod kubelet_settings;
mod model;
mod modules;
mod node;
mod optional;
mod parse;
mod paths;
pub mod quantity;
mod serde_util;
mod validate;
mod wedge;

use std::path::Path;

pub use admin::{ADMIN_SOCKET_FILE, ADMIN_TOKEN_FILE, AdminSettings, MAX_SOCKET_PATH};
pub use broker::{BrokerSettings, BrokerTlsSettings};
pub use compat::NOT_IMPLEMENTED_PREFIX;
pub use duration::GoDuration;
pub use edged::Edged;
pub use error::{ConfigError, Violation};
pub use kubelet::{
    CrashLoopBackOff, KubeletAnonymousAuthentication, KubeletAuthentication, KubeletAuthorization,
    KubeletWebhookAuthentication, KubeletWebhookAuthorization, KubeletX509Authentication,
    LogOutputOptions, Logging, LoggingOptions, MemoryReservation, MemorySwap,
    ShutdownGracePeriodByPodPriority, TailoredKubeletConfig, Taint, VModuleItem,
};
pub use kubelet_settings::KubeletSettings;
pub use model::{API_VERSION, Database, EdgeCoreConfig, Enable, KIND, Modules};
pub use modules::{
    DeviceTwin, EdgeHub, EdgeHubQuic, EdgeHubWebSocket, EdgeStream, EventBus, EventBusTls,
    MetaManager, MetaServer, ServiceBus,
};
pub use quantity::Quantity;
pub use wedge::{
    BusSettings, DevicesSettings, EdgeHubSettings, LogFormat, ModulesSettings, OutboxSettings,
    StoreSettings, SupervisionSettings, Synchronous, WedgeSettings,
};

/// The commented default config file, as shipped in `conf/edgecore.yaml`.
/// Public so the binary can print it (like `edgecore --defaultconfig`).
pub const DEFAULT_CONFIG_YAML: &str = include_str!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../conf/edgecore.yaml"
));

impl EdgeCoreConfig {
    /// The built-in default config, parsed from [`DEFAULT_CONFIG_YAML`].
    ///
    /// # Panics
    /// Never in a tested build: a test parses and validates the embedded file.
    pub fn embedded_default() -> EdgeCoreConfig {
        match Self::from_yaml_str(DEFAULT_CONFIG_YAML) {
            Ok(config) => config,
            Err(e) => panic!("embedded conf/edgecore.yaml is invalid: {e}"),
        }
    }

    /// Parses YAML text, fills missing keys from the defaults, validates.
    pub fn from_yaml_str(text: &str) -> Result<EdgeCoreConfig, ConfigError> {
        let config = parse::parse(text)?;
        config.validate()?;
        Ok(config)
    }

    /// Reads `path` and calls [`from_yaml_str`](Self::from_yaml_str).
    /// Only a read failure names the path; callers wrap parse/validation
    /// errors with the path if they want it in the message.
    pub fn load(path: &Path) -> Result<EdgeCoreConfig, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_owned(),
            source,
        })?;
        Self::from_yaml_str(&text)
    }

    /// The effective config as YAML (no comments), every key present.
    /// Feeding it back to `from_yaml_str` yields an equal config.
    pub fn to_yaml(&self) -> String {
        // Plain structs of strings, integers, bools and a string map cannot
        // fail to serialize.
        serde_norway::to_string(self).expect("EdgeCoreConfig always serializes to YAML")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_err(text: &str) -> (String, String) {
        match EdgeCoreConfig::from_yaml_str(text) {
            Err(ConfigError::Parse { key, message }) => (key, message),
            other => panic!("expected a parse error, got {other:?}"),
        }
    }

    #[test]
    fn embedded_default_parses_validates_and_equals_default() {
        let c = EdgeCoreConfig::embedded_default();
        c.validate().unwrap();
        assert_eq!(c, EdgeCoreConfig::default());
    }

    /// `deny_unknown_fields` plus `default` only proves that the file's keys
    /// exist in the structs; this proves the file lists every key, so the
    /// shipped file really is the complete documentation.
    #[test]
    fn embedded_default_has_every_key() {
        let file: serde_norway::Value = serde_norway::from_str(DEFAULT_CONFIG_YAML).unwrap();
        let full: serde_norway::Value =
            serde_norway::from_str(&EdgeCoreConfig::default().to_yaml()).unwrap();
        assert_eq!(file, full);
    }

    /// Fuzzing regression: an empty or null key was refused without naming any key.
    #[test]
    fn empty_and_null_keys_are_named() {
        for (text, want) in [
            ("? \n", "\"\""),
            ("\"\": 1\n", "\"\""),
            ("modules:\n  \"\": 1\n", "modules.\"\""),
            ("modules:\n  edgeHub:\n    ~: 1\n", "modules.edgeHub.~"),
        ] {
            let (key, message) = parse_err(text);
            assert_eq!(key, want, "{text:?}: {message}");
            assert!(message.starts_with("unknown key"), "{message}");
        }
    }

    #[test]
    fn empty_and_comment_only_files_are_defaults() {
        for text in ["", "# nothing\n", "~\n"] {
            assert_eq!(
                EdgeCoreConfig::from_yaml_str(text).unwrap(),
                EdgeCoreConfig::default()
            );
        }
    }

    #[test]
    fn partial_file_merges_with_defaults() {
        let c = EdgeCoreConfig::from_yaml_str("modules: {edgeHub: {heartbeat: 5}}").unwrap();
        let mut want = EdgeCoreConfig::default();
        want.modules.edge_hub.heartbeat = 5;
        assert_eq!(c, want);
    }

    #[test]
    fn null_sections_are_defaults() {
        let text = "database:\nmodules:\n  edgeHub: ~\n  eventBus:\n    eventBusTLS: null\nfeatureGates:\nwedge:\n  store: ~\n";
        assert_eq!(
            EdgeCoreConfig::from_yaml_str(text).unwrap(),
            EdgeCoreConfig::default()
        );
    }

    #[test]
    fn keadm_style_join_config_loads() {
        let text = "\
apiVersion: edgecore.config.kubeedge.io/v1alpha2
kind: EdgeCore
database:
  dataSource: /var/lib/kubeedge/edgecore.db
modules:
  edgeHub:
    enable: true
    httpServer: https://10.0.0.1:10002
    token: abc.def
    websocket:
      enable: true
      server: 10.0.0.1:10000
  eventBus:
    mqttMode: 2
  edged:
    hostnameOverride: edge-node-1
    tailoredKubeletConfig:
      cgroupDriver: systemd
featureGates:
  requireAuthorization: true
";
        let c = EdgeCoreConfig::from_yaml_str(text).unwrap();
        assert!(c.modules.edge_hub.enable);
        assert_eq!(c.modules.edge_hub.websocket.server, "10.0.0.1:10000");
        assert_eq!(c.modules.event_bus.mqtt_mode, 2);
        assert_eq!(c.feature_gates.get("requireAuthorization"), Some(&true));
        assert_eq!(c.node_name().unwrap(), "edge-node-1");
        assert_eq!(
            c.database_path(),
            Path::new("/var/lib/kubeedge/edgecore.db")
        );
        assert_eq!(c.modules.edge_hub.heartbeat, 15);
        assert_eq!(c.kubelet().cgroup_driver, "systemd");
    }

    #[test]
    fn keys_wedge_once_took_from_v1alpha1_point_to_their_v1alpha2_place() {
        let (key, message) = parse_err("modules:\n  edged:\n    imageGCHighThreshold: 70\n");
        assert_eq!(key, "modules.edged.imageGCHighThreshold");
        assert!(
            message.contains("modules.edged.tailoredKubeletConfig.imageGCHighThresholdPercent"),
            "{message}"
        );
    }

    #[test]
    fn unknown_nested_key_names_full_key_and_alternatives() {
        let (key, message) = parse_err("modules:\n  edgeHub:\n    heartbaet: 5\n");
        assert_eq!(key, "modules.edgeHub.heartbaet");
        assert!(
            message.starts_with("unknown key; expected one of: enable, heartbeat, messageQPS,"),
            "{message}"
        );
        assert!(message.ends_with("(line 3, column 5)"), "{message}");
        let err = EdgeCoreConfig::from_yaml_str("modules:\n  edgeHub:\n    heartbaet: 5\n");
        assert!(err.unwrap_err().to_string().starts_with(
            "modules.edgeHub.heartbaet: unknown key; expected one of: enable, heartbeat"
        ));
    }

    #[test]
    fn unknown_top_level_and_deep_keys() {
        let (key, message) = parse_err("modulez: {}\n");
        assert_eq!(key, "modulez");
        assert!(
            message.contains("expected one of: apiVersion, kind, database, modules"),
            "{message}"
        );
        let (key, _) = parse_err("modules: {eventBus: {eventBusTLS: {caFile: x}}}\n");
        assert_eq!(key, "modules.eventBus.eventBusTLS.caFile");
        let (key, _) = parse_err("wedge: {supervision: {pingIntervalMs: 5}}\n");
        assert_eq!(key, "wedge.supervision.pingIntervalMs");
    }

    #[test]
    fn wrong_type_names_the_key() {
        let (key, message) = parse_err("modules:\n  eventBus:\n    mqttMode: x\n");
        assert_eq!(key, "modules.eventBus.mqttMode");
        assert!(
            message.starts_with("invalid type: string \"x\", expected u8"),
            "{message}"
        );
        let err = EdgeCoreConfig::from_yaml_str("modules:\n  eventBus:\n    mqttMode: x\n")
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("modules.eventBus.mqttMode: invalid type: string \"x\", expected u8"),
            "{err}"
        );

        let (key, message) = parse_err("modules: {edgeHub: {enable: yes}}\n");
        assert_eq!(key, "modules.edgeHub.enable");
        assert!(message.contains("expected a boolean"), "{message}");

        let (key, message) = parse_err("modules: {edgeHub: [1]}\n");
        assert_eq!(key, "modules.edgeHub");
        assert!(message.contains("expected a mapping of keys"), "{message}");

        let (key, message) = parse_err("modules: {edgeHub: {heartbeat: }}\n");
        assert_eq!(key, "modules.edgeHub.heartbeat");
        assert!(message.contains("null (empty value)"), "{message}");

        let (key, _) = parse_err("featureGates: {foo: maybe}\n");
        assert_eq!(key, "featureGates.foo");
    }

    #[test]
    fn bad_enum_value_lists_choices() {
        let (key, message) = parse_err("wedge: {logFormat: text}\n");
        assert_eq!(key, "wedge.logFormat");
        assert!(
            message.starts_with("unknown value \"text\"; expected one of: human, json"),
            "{message}"
        );
        let (key, message) = parse_err("wedge: {store: {synchronous: off}}\n");
        assert_eq!(key, "wedge.store.synchronous");
        assert!(message.contains("full, normal"), "{message}");
    }

    #[test]
    fn duplicate_key_is_named() {
        let (key, message) =
            parse_err("modules:\n  edgeHub:\n    heartbeat: 1\n    heartbeat: 2\n");
        assert_eq!(key, "modules.edgeHub.heartbeat");
        assert!(message.starts_with("duplicate key"), "{message}");
        let (key, _) = parse_err("kind: EdgeCore\nkind: EdgeCore\n");
        assert_eq!(key, "kind");
    }

    #[test]
    fn syntax_errors_give_line_and_column() {
        let (key, message) = parse_err("modules:\n  edgeHub:\n    enable: true\n   heartbeat: 1\n");
        assert_eq!(key, "");
        assert!(message.starts_with("invalid YAML: "), "{message}");
        assert!(message.contains("line 4 column 4"), "{message}");
        let (_, message) = parse_err("a: b: c\n");
        assert!(message.contains("line 1 column 5"), "{message}");
    }

    #[test]
    fn non_mapping_document_is_rejected() {
        let (key, message) = parse_err("- a\n- b\n");
        assert_eq!(key, "");
        assert!(message.contains("must be a YAML mapping"), "{message}");
    }

    #[test]
    fn header_checked_before_keys() {
        // A v1alpha1 file has keys v1alpha2 lacks; the apiVersion error wins.
        let text = "apiVersion: edgecore.config.kubeedge.io/v1alpha1\nkind: EdgeCore\nedged: {}\n";
        match EdgeCoreConfig::from_yaml_str(text).unwrap_err() {
            ConfigError::Invalid { key, message, .. } => {
                assert_eq!(key, "apiVersion");
                assert!(message.contains("v1alpha1 is the old"), "{message}");
            }
            other => panic!("unexpected {other:?}"),
        }
        let err = EdgeCoreConfig::from_yaml_str("kind: EdgeCoreConfig\n").unwrap_err();
        assert!(
            err.to_string().starts_with("kind: must be \"EdgeCore\""),
            "{err}"
        );
        // Omitted header is fine.
        EdgeCoreConfig::from_yaml_str("modules: {}\n").unwrap();
    }

    #[test]
    fn validation_runs_on_parsed_text() {
        let err =
            EdgeCoreConfig::from_yaml_str("modules: {edgeHub: {enable: true}}\n").unwrap_err();
        assert!(
            err.to_string()
                .starts_with("modules.edgeHub.websocket.server: must be CloudCore's"),
            "{err}"
        );
    }

    #[test]
    fn to_yaml_round_trips() {
        let mut c = EdgeCoreConfig::default();
        c.modules.edge_hub.enable = true;
        c.modules.edge_hub.websocket.server = "[fd00::1]:10000".into();
        c.modules.event_bus.mqtt_password = "p: w # not a comment".into();
        c.modules.edged.hostname_override = "edge-1".into();
        c.feature_gates.insert("someGate".into(), true);
        c.edgecore_version = "1.23.0".into();
        c.wedge.log_format = LogFormat::Json;
        c.wedge.store.synchronous = Synchronous::Normal;
        c.database.data_source = "".into();
        let text = c.to_yaml();
        assert!(text.contains("messageQPS: 30"), "{text}");
        assert!(text.contains("synchronous: normal"), "{text}");
        assert_eq!(EdgeCoreConfig::from_yaml_str(&text).unwrap(), c);
        let d = EdgeCoreConfig::default();
        assert_eq!(EdgeCoreConfig::from_yaml_str(&d.to_yaml()).unwrap(), d);
    }

    #[test]
    fn load_reads_file_and_names_path_on_error() {
        let dir = std::env::temp_dir().join(format!("wedge-config-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("edgecore.yaml");
        std::fs::write(&file, "modules: {edgeHub: {heartbeat: 7}}\n").unwrap();
        assert_eq!(
            EdgeCoreConfig::load(&file)
                .unwrap()
                .modules
                .edge_hub
                .heartbeat,
            7
        );
        let missing = dir.join("missing.yaml");
        let err = EdgeCoreConfig::load(&missing).unwrap_err();
        assert!(matches!(err, ConfigError::Read { .. }));
        assert!(err.to_string().contains("missing.yaml"), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
