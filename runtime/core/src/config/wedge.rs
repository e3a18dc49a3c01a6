//! The `wedge` section: settings that only Wedge has (not in KubeEdge).

use serde::{Deserialize, Serialize};

use super::broker::BrokerSettings;
use super::serde_util::null_as_default;

/// `wedge`: Wedge's own knobs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct WedgeSettings {
    /// State directory. Empty = decided at run time (see
    /// [`WedgeSettings::resolve_data_dir`]) so one file works for root and
    /// for a normal user.
    pub data_dir: String,
    /// Admin API over TCP, a loopback socket address ("" = none: the unix socket of
    /// `wedge.admin.socket` only). Off by default because anyone who can connect could deploy
    /// code; on TCP, everything but `/healthz` and `/metrics` needs the token.
    pub admin_addr: String,
    /// The admin API's unix socket, token and limits.
    #[serde(deserialize_with = "null_as_default")]
    pub admin: super::admin::AdminSettings,
    /// Log output format.
    pub log_format: LogFormat,
    /// Log filter (`info`, `debug`, `info,wedge_eventbus=debug`: `RUST_LOG`'s syntax), re-read
    /// on SIGHUP so a running node's verbosity can change without a restart. `RUST_LOG`, when
    /// set, wins.
    pub log_level: String,
    /// Metadata store tuning.
    #[serde(deserialize_with = "null_as_default")]
    pub store: StoreSettings,
    /// In-process message bus tuning.
    #[serde(deserialize_with = "null_as_default")]
    pub bus: BusSettings,
    /// Module supervision (liveness pings and restarts).
    #[serde(deserialize_with = "null_as_default")]
    pub supervision: SupervisionSettings,
    /// Wasm modules (mappers and twin handlers).
    #[serde(deserialize_with = "null_as_default")]
    pub modules: ModulesSettings,
    /// Devices defined on the node itself (no cloud needed).
    #[serde(deserialize_with = "null_as_default")]
    pub devices: DevicesSettings,
    /// The durable outbox of cloud-bound messages.
    #[serde(deserialize_with = "null_as_default")]
    pub outbox: OutboxSettings,
    /// The cloud link's own limits (beyond `modules.edgeHub`).
    #[serde(deserialize_with = "null_as_default")]
    pub edge_hub: EdgeHubSettings,
    /// Who may use the embedded MQTT broker (beyond `modules.eventBus`).
    #[serde(deserialize_with = "null_as_default")]
    pub mqtt: MqttSettings,
    /// Wedge's edged (static pods, Wasm pods).
    #[serde(deserialize_with = "null_as_default")]
    pub edged: EdgedSettings,
    /// The embedded MQTT broker's limits.
    #[serde(deserialize_with = "null_as_default")]
    pub broker: BrokerSettings,
}

impl Default for WedgeSettings {
    fn default() -> Self {
        Self {
            data_dir: String::new(),
            admin_addr: String::new(),
            admin: super::admin::AdminSettings::default(),
            log_format: LogFormat::Human,
            log_level: "info".to_owned(),
            store: StoreSettings::default(),
            bus: BusSettings::default(),
            supervision: SupervisionSettings::default(),
            modules: ModulesSettings::default(),
            devices: DevicesSettings::default(),
            outbox: OutboxSettings::default(),
            edge_hub: EdgeHubSettings::default(),
            mqtt: MqttSettings::default(),
            edged: EdgedSettings::default(),
            broker: BrokerSettings::default(),
        }
    }
}

/// `wedge.modules`: the Wasm host.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct ModulesSettings {
    /// Directory whose `*.wasm` modules are deployed at start ("" = none). Deployed modules
    /// are kept in `<dataDir>/modules` either way.
    pub dir: String,
    /// Module instances alive at once (the size of the instance pool); 1..=10000.
    pub max_instances: u32,
    /// MiB of memory all guests together may be granted; 1..=1048576. Each module's manifest
    /// limit is reserved at deploy and a deploy past the budget is refused, so hostile or
    /// greedy guests cannot take the node's memory.
    #[serde(rename = "memoryBudgetMiB")]
    pub memory_budget_mib: u32,
    /// Longest guest log line kept, in bytes; 256..=1048576. Longer lines are cut with a
    /// marker (control characters are always escaped), so a guest cannot flood or forge the
    /// node's log.
    pub log_line_bytes: u32,
    /// Guest log lines each module may write per second; 1..=100000. The rest are dropped
    /// and counted (`wedge_wasm_log_lines_dropped_total`).
    pub log_lines_per_second: u32,
    /// Guest log lines a module may write in a burst above that rate; 1..=1000000.
    pub log_burst: u32,
}

impl Default for ModulesSettings {
    fn default() -> Self {
        Self {
            dir: String::new(),
            max_instances: 512,
            memory_budget_mib: 512,
            log_line_bytes: 4096,
            log_lines_per_second: 50,
            log_burst: 200,
        }
    }
}

/// `wedge.devices`: devices defined locally, and how many devices and twins the node keeps.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct DevicesSettings {
    /// Directory of KubeEdge `Device` / `DeviceModel` YAML files (`devices.kubeedge.io/v1beta1`)
    /// loaded at start ("" = none): each device is added to devicetwin if it is not known yet
    /// and handed to the mapper of its protocol, as if the cloud had sent it.
    pub dir: String,
    /// Most twins (properties) one device may have: a request that would add more is refused
    /// whole (a twin update gets a 400 result), so no client can grow a device without end.
    /// 1..=1_000_000.
    pub max_twins_per_device: u32,
    /// Most devices the node keeps: a membership change or definition that would add more is
    /// refused. 1..=10_000_000.
    pub max_devices: u32,
    /// Group of the DMI socket (`modules.deviceTwin.dmiSockPath`): `null` (the default) keeps
    /// it mode 0600, the node's user's only; a gid makes it 0660 in that group, for mappers
    /// run as another user of the group (their effective gid must be it).
    pub dmi_socket_group: Option<u32>,
    /// Users whose mappers may connect to the DMI socket (checked by `SO_PEERCRED`); empty
    /// (the default): the node's own user and root.
    pub dmi_allowed_uids: Vec<u32>,
    /// Reports (ReportDeviceStatus/States) one registered mapper may send per second, past a
    /// burst of `dmiReportBurst`; more are refused `RESOURCE_EXHAUSTED` and counted.
    /// 1..=1_000_000.
    pub dmi_reports_per_second: u32,
    /// The largest burst of reports one mapper may send. 1..=1_000_000.
    pub dmi_report_burst: u32,
    /// A device's DMI reports count only from the *process* that registered its protocol's
    /// mapper (true, the default, as mapper-framework mappers do both from one process);
    /// false: from any process of that user, for a mapper reporting from helper processes.
    pub dmi_reports_from_registering_process: bool,
}

impl Default for DevicesSettings {
    fn default() -> Self {
        Self {
            dir: String::new(),
            max_twins_per_device: 1_000,
            max_devices: 10_000,
            dmi_socket_group: None,
            dmi_allowed_uids: Vec::new(),
            dmi_reports_per_second: 100,
            dmi_report_burst: 200,
            dmi_reports_from_registering_process: true,
        }
    }
}

/// `wedge.mqtt`: who may use the embedded MQTT broker.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct MqttSettings {
    /// YAML file of the embedded broker's users (PBKDF2 password hashes) and the topics each
    /// may publish and subscribe to, plus what anonymous clients may do ("" = KubeEdge's
    /// rules: `mqttUsername`/`mqttPassword` when set, else anyone may do anything, which the
    /// broker says at start). Must not be readable by other users.
    pub users_file: String,
}

/// `wedge.outbox`: cloud-bound messages kept in SQLite until the cloud has them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct OutboxSettings {
    /// Most messages queued while the cloud is unreachable; past it new ones are refused
    /// (logged and counted), never silently dropped. 1..=10_000_000.
    pub max_messages: u32,
    /// The share of `max_messages`, in percent, that messages relayed for local MQTT clients
    /// (`$hw/events/upload/...` and other uploads) may take; the rest is kept for the node's
    /// own messages (twin changes, pod and node status), which a flood of uploads from any
    /// client of the broker must not crowd out. 1..=100.
    pub relayed_percent: u8,
}

impl Default for OutboxSettings {
    fn default() -> Self {
        Self {
            max_messages: 100_000,
            relayed_percent: 50,
        }
    }
}

/// `wedge.edgeHub`: limits of the cloud link that KubeEdge does not have.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct EdgeHubSettings {
    /// Largest inbound frame decoded, in bytes; 4096..=268_435_456. KubeEdge sets no limit;
    /// Wedge bounds the memory one cloud frame may take. Larger frames are logged, counted
    /// and skipped, and the session stays up.
    pub max_frame_bytes: u32,
    /// First redial delay after the link fails, in ms; 10..=60_000. KubeEdge waits 5 s
    /// between dials and 30 s after five.
    pub reconnect_initial_ms: u32,
    /// Longest redial delay, in ms; 100..=600_000 and >= the first. It bounds how long the
    /// node takes to notice the cloud is back.
    pub reconnect_max_ms: u32,
}

impl Default for EdgeHubSettings {
    fn default() -> Self {
        Self {
            max_frame_bytes: 32 * 1024 * 1024,
            reconnect_initial_ms: 100,
            reconnect_max_ms: 800,
        }
    }
}

/// `wedge.edged`: what Wedge's edged has beyond KubeEdge's keys.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct EdgedSettings {
    /// Directory of static pod manifests ("" = none).
    pub static_pod_dir: String,
    /// `runtimeClassName` of pods that run in the Wasm host instead of Docker.
    pub wasm_runtime_class: String,
    /// Where module files of Wasm pods fetched from `https://...@sha256:<hex>` images are kept,
    /// by digest, so those pods start again after a reboot with no network ("" =
    /// `<modules.edged.rootDirectory>/wasm-modules`).
    pub module_cache_dir: String,
    /// A PEM file of CA certificates trusted for those downloads besides the system's roots,
    /// for module servers with a private CA ("" = the system's roots only).
    pub module_ca_file: String,
    /// Serve `/containerLogs` on the kubelet read-only port (`readOnlyPort`) too. Off by
    /// default: that port has no credentials, so any local user could read any pod's logs;
    /// `kubectl logs` reaches edged through the tunnel either way. Exec and attach are never
    /// served there.
    pub read_only_port_logs: bool,
    /// Namespaces whose Wasm pods may bring their own module (`configmap://`, `https://`),
    /// deployed under a name of the pod's. Every module is a mapper or a twin handler, trusted
    /// with devices, so by default (none) Wasm pods run only modules the operator deployed
    /// (`wasm://<module>`).
    pub wasm_pod_module_namespaces: Vec<String>,
}

impl Default for EdgedSettings {
    fn default() -> Self {
        Self {
            static_pod_dir: String::new(),
            wasm_runtime_class: "wedge-wasm".to_owned(),
            module_cache_dir: String::new(),
            module_ca_file: String::new(),
            read_only_port_logs: false,
            wasm_pod_module_namespaces: Vec::new(),
        }
    }
}

/// `wedge.logFormat`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// One readable line per event (for terminals and journald).
    #[default]
    Human,
    /// One JSON object per line (for log shippers).
    Json,
}

/// `wedge.store`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct StoreSettings {
    /// Most writes committed in one SQLite transaction (group commit);
    /// 1..=65536. Larger = fewer fsyncs under load, longer single commits.
    pub max_batch: u32,
    /// SQLite `PRAGMA synchronous`.
    pub synchronous: Synchronous,
}

impl Default for StoreSettings {
    fn default() -> Self {
        Self {
            max_batch: 512,
            synchronous: Synchronous::Full,
        }
    }
}

/// `wedge.store.synchronous`: the SQLite durability level.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Synchronous {
    /// fsync on every commit: a committed write survives power loss.
    #[default]
    Full,
    /// fsync at WAL checkpoints only: faster, the last commits may be lost
    /// on power loss (never corrupted).
    Normal,
}

/// `wedge.bus`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct BusSettings {
    /// Messages each module's mailbox holds before senders wait; 1..=1_000_000.
    pub queue_capacity: u32,
}

impl Default for BusSettings {
    fn default() -> Self {
        Self {
            queue_capacity: 1024,
        }
    }
}

/// `wedge.supervision`: how hung or crashed modules are detected and restarted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct SupervisionSettings {
    /// Seconds between liveness pings to each module; >= 1.
    pub ping_interval: u32,
    /// Consecutive unanswered pings before a module is restarted; >= 1.
    pub ping_misses: u32,
    /// First restart delay in milliseconds; >= 1 and <= `restartBackoffMaxMs`.
    pub restart_backoff_initial_ms: u64,
    /// Cap of the growing restart delay in milliseconds; >= 1.
    pub restart_backoff_max_ms: u64,
}

impl Default for SupervisionSettings {
    fn default() -> Self {
        Self {
            ping_interval: 5,
            ping_misses: 3,
            restart_backoff_initial_ms: 100,
            restart_backoff_max_ms: 30_000,
        }
    }
}
