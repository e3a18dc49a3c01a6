//! Semantic rules that serde's types cannot express.
//!
//! All rules are checked and every violation is reported (see
//! [`ConfigError::Invalid`]), in file order. Value ranges are checked whether
//! or not the module is enabled, so a typo does not wait until the module is
//! switched on; "can this module run" requirements (a cloud address,
//! unsupported transports) only apply to enabled modules, as in KubeEdge.

use std::net::Ipv6Addr;

use super::dns;
use super::edged::Edged;
use super::error::{ConfigError, Violation};
use super::kubelet::{
    DEFAULT_IMAGE_GC_HIGH_THRESHOLD_PERCENT, DEFAULT_IMAGE_GC_LOW_THRESHOLD_PERCENT,
    TailoredKubeletConfig,
};
use super::model::{API_VERSION, Database, EdgeCoreConfig, KIND};
use super::modules::{EdgeHub, EventBus, MetaManager, ServiceBus};
use super::wedge::WedgeSettings;

impl EdgeCoreConfig {
    /// Checks every rule; `Err(ConfigError::Invalid)` carries all violations.
    ///
    /// `from_yaml_str` and `load` already call this; call it again after
    /// changing a config in code.
    pub fn validate(&self) -> Result<(), ConfigError> {
        match ConfigError::from_violations(violations(self)) {
            Some(err) => Err(err),
            None => Ok(()),
        }
    }
}

/// Why `apiVersion` is wrong, or `None` if it is right.
pub(crate) fn api_version_problem(api_version: &str) -> Option<String> {
    if api_version == API_VERSION {
        return None;
    }
    let mut msg = format!("must be {API_VERSION:?}, got {api_version:?}");
    if api_version.ends_with("/v1alpha1") {
        msg.push_str(
            "; v1alpha1 is the old edgecore config format of KubeEdge <= v1.11 and is not \
             supported: start from Wedge's conf/edgecore.yaml or regenerate the file with \
             `edgecore --defaultconfig` of KubeEdge >= v1.12",
        );
    }
    Some(msg)
}

/// Why `kind` is wrong, or `None` if it is right.
pub(crate) fn kind_problem(kind: &str) -> Option<String> {
    (kind != KIND).then(|| format!("must be {KIND:?}, got {kind:?}"))
}

/// Collects violations with their keys.
#[derive(Default)]
struct Checker(Vec<Violation>);

impl Checker {
    fn fail(&mut self, key: &str, message: impl Into<String>) {
        self.0.push(Violation {
            key: key.to_owned(),
            message: message.into(),
        });
    }

    /// `value >= min`; `unit` is appended in parentheses, e.g. "seconds".
    fn at_least(&mut self, key: &str, value: impl Into<i64>, min: i64, unit: &str) {
        let value = value.into();
        if value < min {
            self.fail(key, format!("must be >= {min} ({unit}), got {value}"));
        }
    }

    /// `lo <= value <= hi`; `meaning` explains the allowed values.
    fn in_range(&mut self, key: &str, value: impl Into<i64>, lo: i64, hi: i64, meaning: &str) {
        let value = value.into();
        if !(lo..=hi).contains(&value) {
            self.fail(
                key,
                format!("must be in {lo}..={hi} ({meaning}), got {value}"),
            );
        }
    }
}

fn violations(c: &EdgeCoreConfig) -> Vec<Violation> {
    let mut v = Checker::default();
    if let Some(msg) = api_version_problem(&c.api_version) {
        v.fail("apiVersion", msg);
    }
    if let Some(msg) = kind_problem(&c.kind) {
        v.fail("kind", msg);
    }
    database(&c.database, &mut v);
    edge_hub(&c.modules.edge_hub, &mut v);
    event_bus(&c.modules.event_bus, &mut v);
    meta_manager(&c.modules.meta_manager, &mut v);
    edged(&c.modules.edged, &mut v);
    service_bus(&c.modules.service_bus, &mut v);
    wedge(&c.wedge, &mut v);
    v.0
}

fn database(d: &Database, v: &mut Checker) {
    if d.driver_name != "sqlite3" {
        v.fail(
            "database.driverName",
            format!(
                "must be \"sqlite3\" (the only driver Wedge has), got {:?}",
                d.driver_name
            ),
        );
    }
}

fn edge_hub(h: &EdgeHub, v: &mut Checker) {
    const P: &str = "modules.edgeHub";
    v.at_least(&format!("{P}.heartbeat"), h.heartbeat, 1, "seconds");
    v.at_least(
        &format!("{P}.messageQPS"),
        h.message_qps,
        0,
        "messages per second",
    );
    v.at_least(&format!("{P}.messageBurst"), h.message_burst, 0, "messages");
    let ws = &h.websocket;
    v.at_least(
        &format!("{P}.websocket.handshakeTimeout"),
        ws.handshake_timeout,
        1,
        "seconds",
    );
    v.at_least(
        &format!("{P}.websocket.readDeadline"),
        ws.read_deadline,
        1,
        "seconds",
    );
    v.at_least(
        &format!("{P}.websocket.writeDeadline"),
        ws.write_deadline,
        1,
        "seconds",
    );
    if !h.enable {
        return;
    }
    if h.quic.enable {
        v.fail(
            &format!("{P}.quic.enable"),
            "QUIC is not supported by Wedge; use websocket (quic.enable: false, websocket.enable: true)",
        );
    } else if !ws.enable {
        v.fail(
            &format!("{P}.websocket.enable"),
            format!(
                "exactly one of {P}.websocket.enable and {P}.quic.enable must be true when \
                 edgeHub is enabled; Wedge supports websocket only"
            ),
        );
    }
    if ws.enable
        && let Err(why) = check_host_port(&ws.server)
    {
        v.fail(
            &format!("{P}.websocket.server"),
            format!(
                "must be CloudCore's websocket endpoint as host:port (e.g. 192.168.1.10:10000) \
                 when edgeHub is enabled: {why}, got {:?}",
                ws.server
            ),
        );
    }
}

fn event_bus(b: &EventBus, v: &mut Checker) {
    const P: &str = "modules.eventBus";
    v.in_range(
        &format!("{P}.mqttMode"),
        b.mqtt_mode,
        0,
        2,
        "0 = embedded broker, 1 = both, 2 = external broker",
    );
    v.in_range(&format!("{P}.mqttQOS"), b.mqtt_qos, 0, 2, "MQTT QoS level");
    for (key, url) in [
        ("mqttServerExternal", &b.mqtt_server_external),
        ("mqttServerInternal", &b.mqtt_server_internal),
    ] {
        if let Err(why) = check_mqtt_url(url) {
            v.fail(
                &format!("{P}.{key}"),
                format!("must be tcp://host:port or ssl://host:port: {why}, got {url:?}"),
            );
        }
    }
}

fn meta_manager(m: &MetaManager, v: &mut Checker) {
    const P: &str = "modules.metaManager";
    v.at_least(
        &format!("{P}.remoteQueryTimeout"),
        m.remote_query_timeout,
        1,
        "seconds",
    );
    if m.meta_server.enable
        && m.meta_server
            .server
            .parse::<std::net::SocketAddr>()
            .is_err()
    {
        v.fail(
            &format!("{P}.metaServer.server"),
            "must be host:port with an IP address, e.g. 127.0.0.1:10550",
        );
    }
}

fn edged(e: &Edged, v: &mut Checker) {
    const P: &str = "modules.edged";
    if !e.hostname_override.is_empty()
        && let Err(why) = dns::check_subdomain(&e.hostname_override)
    {
        v.fail(
            &format!("{P}.hostnameOverride"),
            format!(
                "{} (or empty for the machine hostname): {why}, got {:?}",
                dns::SUBDOMAIN_RULE,
                e.hostname_override
            ),
        );
    }
    if let Err(why) = dns::check_label(&e.register_node_namespace) {
        v.fail(
            &format!("{P}.registerNodeNamespace"),
            format!(
                "{}: {why}, got {:?}",
                dns::LABEL_RULE,
                e.register_node_namespace
            ),
        );
    }
    if !e.node_ip.is_empty() && e.node_ip.parse::<std::net::IpAddr>().is_err() {
        v.fail(
            &format!("{P}.nodeIP"),
            format!(
                "must be an IP address (or empty for the host's first address), got {:?}",
                e.node_ip
            ),
        );
    }
    if e.minimum_gc_age.as_nanos() < 0 {
        v.fail(
            &format!("{P}.minimumGCAge"),
            format!("must not be negative, got {}", e.minimum_gc_age),
        );
    }
    kubelet(&e.tailored_kubelet_config, v);
}

/// The `tailoredKubeletConfig` keys Wedge acts on or exposes to edged, with
/// kubelet's own rules for them.
fn kubelet(k: &TailoredKubeletConfig, v: &mut Checker) {
    const P: &str = "modules.edged.tailoredKubeletConfig";
    if let Some(driver) = &k.cgroup_driver
        && !matches!(driver.as_str(), "cgroupfs" | "systemd")
    {
        v.fail(
            &format!("{P}.cgroupDriver"),
            format!("must be \"cgroupfs\" or \"systemd\", got {driver:?}"),
        );
    }
    let high = k
        .image_gc_high_threshold_percent
        .unwrap_or(DEFAULT_IMAGE_GC_HIGH_THRESHOLD_PERCENT);
    let low = k
        .image_gc_low_threshold_percent
        .unwrap_or(DEFAULT_IMAGE_GC_LOW_THRESHOLD_PERCENT);
    v.in_range(
        &format!("{P}.imageGCHighThresholdPercent"),
        high,
        0,
        100,
        "percent of disk",
    );
    v.in_range(
        &format!("{P}.imageGCLowThresholdPercent"),
        low,
        0,
        100,
        "percent of disk",
    );
    if high <= low {
        v.fail(
            &format!("{P}.imageGCHighThresholdPercent"),
            format!("must be greater than imageGCLowThresholdPercent ({low}), got {high}"),
        );
    }
    for (key, value) in [
        ("nodeStatusUpdateFrequency", k.node_status_update_frequency),
        ("nodeStatusReportFrequency", k.node_status_report_frequency),
        ("fileCheckFrequency", k.file_check_frequency),
    ] {
        if let Some(d) = value
            && d.as_nanos() <= 0
        {
            v.fail(
                &format!("{P}.{key}"),
                format!("must be a positive duration, got {d}"),
            );
        }
    }
    for (key, value) in [
        ("imageMinimumGCAge", k.image_minimum_gc_age),
        ("imageMaximumGCAge", k.image_maximum_gc_age),
    ] {
        if let Some(d) = value
            && d.as_nanos() < 0
        {
            v.fail(
                &format!("{P}.{key}"),
                format!("must not be negative, got {d}"),
            );
        }
    }
    if let Some(size) = &k.container_log_max_size
        && super::quantity::bytes(size).is_err()
    {
        v.fail(
            &format!("{P}.containerLogMaxSize"),
            format!("must be a size above 0 such as 10Mi, got {size:?}"),
        );
    }
    if let Some(files) = k.container_log_max_files {
        v.at_least(&format!("{P}.containerLogMaxFiles"), files, 2, "files");
    }
    if let Some(d) = k.container_log_monitor_interval
        && d.as_nanos() < 3_000_000_000
    {
        v.fail(
            &format!("{P}.containerLogMonitorInterval"),
            format!("must be at least 3s, got {d}"),
        );
    }
    if let Some(secs) = k.node_lease_duration_seconds {
        v.at_least(&format!("{P}.nodeLeaseDurationSeconds"), secs, 1, "seconds");
    }
    if let Some(port) = k.read_only_port {
        v.in_range(
            &format!("{P}.readOnlyPort"),
            port,
            0,
            65535,
            "TCP port; 0 disables",
        );
    }
    if let Some(max) = k.max_pods {
        v.at_least(&format!("{P}.maxPods"), max, 0, "pods");
    }
    if let Err(problems) = super::eviction::EvictionPolicy::from_tailored(k) {
        for (key, message) in problems {
            v.fail(&format!("{P}.{key}"), message);
        }
    }
    for ip in k.cluster_dns.iter().flatten() {
        if ip.parse::<std::net::IpAddr>().is_err() {
            v.fail(
                &format!("{P}.clusterDNS"),
                format!("must list IP addresses, got {ip:?}"),
            );
        }
    }
}

fn service_bus(s: &ServiceBus, v: &mut Checker) {
    v.in_range("modules.serviceBus.port", s.port, 1, 65535, "TCP port");
}

fn wedge(w: &WedgeSettings, v: &mut Checker) {
    v.0.extend(w.admin.violations(&w.admin_addr));
    if w.log_level.trim().is_empty() {
        v.fail("wedge.logLevel", "must not be empty (e.g. info or debug)");
    }
    v.in_range(
        "wedge.store.maxBatch",
        w.store.max_batch,
        1,
        65536,
        "writes per transaction",
    );
    v.in_range(
        "wedge.modules.maxInstances",
        w.modules.max_instances,
        1,
        10_000,
        "module instances",
    );
    v.in_range(
        "wedge.modules.memoryBudgetMiB",
        w.modules.memory_budget_mib,
        1,
        1_048_576,
        "MiB of guest memory",
    );
    v.in_range(
        "wedge.modules.logLineBytes",
        w.modules.log_line_bytes,
        256,
        1_048_576,
        "bytes per guest log line",
    );
    v.in_range(
        "wedge.modules.logLinesPerSecond",
        w.modules.log_lines_per_second,
        1,
        100_000,
        "guest log lines per second",
    );
    v.in_range(
        "wedge.modules.logBurst",
        w.modules.log_burst,
        1,
        1_000_000,
        "guest log lines in a burst",
    );
    v.in_range(
        "wedge.outbox.maxMessages",
        w.outbox.max_messages,
        1,
        10_000_000,
        "queued cloud-bound messages",
    );
    v.in_range(
        "wedge.devices.maxTwinsPerDevice",
        w.devices.max_twins_per_device,
        1,
        1_000_000,
        "twins per device",
    );
    v.in_range(
        "wedge.devices.maxDevices",
        w.devices.max_devices,
        1,
        10_000_000,
        "devices on the node",
    );
    v.in_range(
        "wedge.outbox.relayedPercent",
        w.outbox.relayed_percent,
        1,
        100,
        "percent of the outbox for relayed uploads",
    );
    v.in_range(
        "wedge.edgeHub.maxFrameBytes",
        w.edge_hub.max_frame_bytes,
        4096,
        268_435_456,
        "bytes per inbound cloud frame",
    );
    v.in_range(
        "wedge.edgeHub.reconnectInitialMs",
        w.edge_hub.reconnect_initial_ms,
        10,
        60_000,
        "milliseconds",
    );
    v.in_range(
        "wedge.edgeHub.reconnectMaxMs",
        w.edge_hub.reconnect_max_ms,
        100,
        600_000,
        "milliseconds",
    );
    if w.edge_hub.reconnect_max_ms < w.edge_hub.reconnect_initial_ms {
        v.fail(
            "wedge.edgeHub.reconnectMaxMs",
            format!(
                "must be >= wedge.edgeHub.reconnectInitialMs ({}), got {}",
                w.edge_hub.reconnect_initial_ms, w.edge_hub.reconnect_max_ms
            ),
        );
    }
    for (key, message) in w.broker.violations() {
        v.fail(&key, message);
    }
    for (key, value) in [
        (
            "wedge.devices.dmiReportsPerSecond",
            w.devices.dmi_reports_per_second,
        ),
        ("wedge.devices.dmiReportBurst", w.devices.dmi_report_burst),
    ] {
        v.in_range(key, value, 1, 1_000_000, "reports");
    }
    if w.edged.wasm_runtime_class.is_empty() {
        v.fail("wedge.edged.wasmRuntimeClass", "must not be empty");
    }
    for namespace in &w.edged.wasm_pod_module_namespaces {
        let label = !namespace.is_empty()
            && namespace.len() <= 63
            && namespace
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            && !namespace.starts_with('-')
            && !namespace.ends_with('-');
        if !label {
            v.fail(
                "wedge.edged.wasmPodModuleNamespaces",
                format!("{namespace:?} is not a namespace name (a DNS label)"),
            );
        }
    }
    v.in_range(
        "wedge.bus.queueCapacity",
        w.bus.queue_capacity,
        1,
        1_000_000,
        "messages per mailbox",
    );
    let s = &w.supervision;
    v.at_least(
        "wedge.supervision.pingInterval",
        s.ping_interval,
        1,
        "seconds",
    );
    v.at_least(
        "wedge.supervision.pingMisses",
        s.ping_misses,
        1,
        "missed pings",
    );
    let (initial, max) = (s.restart_backoff_initial_ms, s.restart_backoff_max_ms);
    // u64 does not fit i64 losslessly; saturate, the bound is tiny anyway.
    let as_i64 = |x: u64| i64::try_from(x).unwrap_or(i64::MAX);
    v.at_least(
        "wedge.supervision.restartBackoffInitialMs",
        as_i64(initial),
        1,
        "milliseconds",
    );
    v.at_least(
        "wedge.supervision.restartBackoffMaxMs",
        as_i64(max),
        1,
        "milliseconds",
    );
    if initial > max {
        v.fail(
            "wedge.supervision.restartBackoffInitialMs",
            format!("must be <= restartBackoffMaxMs ({max}), got {initial}"),
        );
    }
}

/// Checks `host:port` (IPv6 in brackets), port 1..=65535, no scheme.
fn check_host_port(s: &str) -> Result<(), String> {
    if s.is_empty() {
        return Err("it is empty".to_owned());
    }
    if s.contains("://") {
        return Err("it must not have a scheme".to_owned());
    }
    let Some((host, port)) = s.rsplit_once(':') else {
        return Err("it has no :port".to_owned());
    };
    if let Some(inner) = host.strip_prefix('[') {
        let ok = inner
            .strip_suffix(']')
            .is_some_and(|ip| ip.parse::<Ipv6Addr>().is_ok());
        if !ok {
            return Err("the bracketed host is not an IPv6 address".to_owned());
        }
    } else if host.is_empty() {
        return Err("the host is empty".to_owned());
    } else if host.contains(':') {
        return Err("an IPv6 host must be in brackets, e.g. [::1]:10000".to_owned());
    } else if host.contains(|c: char| c.is_whitespace() || c == '/') {
        return Err("the host contains a space or '/'".to_owned());
    }
    match port.parse::<u16>() {
        Ok(p) if p != 0 => Ok(()),
        _ => Err(format!("the port {port:?} is not in 1..=65535")),
    }
}

/// Checks an MQTT broker URL: `tcp://` or `ssl://` followed by `host:port`.
fn check_mqtt_url(s: &str) -> Result<(), String> {
    let rest = s
        .strip_prefix("tcp://")
        .or_else(|| s.strip_prefix("ssl://"))
        .ok_or_else(|| "the scheme is not tcp:// or ssl://".to_owned())?;
    check_host_port(rest)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::GoDuration;

    /// The default config with edgeHub switched on and pointed at a cloud.
    fn connected() -> EdgeCoreConfig {
        let mut c = EdgeCoreConfig::default();
        c.modules.edge_hub.enable = true;
        c.modules.edge_hub.websocket.server = "10.0.0.1:10000".to_owned();
        c
    }

    /// Asserts that `c` is rejected, with a violation on `key` whose message
    /// contains `needle`.
    fn rejects(c: &EdgeCoreConfig, key: &str, needle: &str) {
        let err = c.validate().expect_err("config should be invalid");
        let text = err.to_string();
        assert!(
            text.lines()
                .any(|l| l.starts_with(&format!("{key}: ")) && l.contains(needle)),
            "expected `{key}: ...{needle}...` in:\n{text}"
        );
    }

    #[test]
    fn defaults_and_connected_are_valid() {
        EdgeCoreConfig::default().validate().unwrap();
        connected().validate().unwrap();
    }

    #[test]
    fn header() {
        let c = EdgeCoreConfig {
            api_version: "edgecore.config.kubeedge.io/v1alpha1".into(),
            ..EdgeCoreConfig::default()
        };
        rejects(&c, "apiVersion", "v1alpha1 is the old");
        let c = EdgeCoreConfig {
            kind: "CloudCore".into(),
            ..EdgeCoreConfig::default()
        };
        rejects(&c, "kind", "\"EdgeCore\"");
    }

    #[test]
    fn database_driver() {
        let mut c = EdgeCoreConfig::default();
        c.database.driver_name = "mysql".into();
        rejects(&c, "database.driverName", "sqlite3");
    }

    #[test]
    fn edge_hub_transport() {
        let mut c = connected();
        c.modules.edge_hub.quic.enable = true;
        rejects(
            &c,
            "modules.edgeHub.quic.enable",
            "QUIC is not supported by Wedge; use websocket",
        );
        c.modules.edge_hub.websocket.enable = false;
        rejects(&c, "modules.edgeHub.quic.enable", "QUIC is not supported");

        let mut c = connected();
        c.modules.edge_hub.websocket.enable = false;
        rejects(&c, "modules.edgeHub.websocket.enable", "exactly one of");

        // Disabled hub: transport and server do not matter.
        let mut c = EdgeCoreConfig::default();
        c.modules.edge_hub.quic.enable = true;
        c.modules.edge_hub.websocket.enable = false;
        c.validate().unwrap();
    }

    #[test]
    fn edge_hub_server() {
        for bad in [
            "",
            "10.0.0.1",
            "wss://10.0.0.1:10000",
            "h:0",
            "h:70000",
            ":10000",
            "::1:10000",
            "[zz]:1",
        ] {
            let mut c = connected();
            c.modules.edge_hub.websocket.server = bad.into();
            rejects(&c, "modules.edgeHub.websocket.server", "host:port");
        }
        for good in ["cloud.example.com:10000", "[fd00::1]:10000", "10.0.0.1:1"] {
            let mut c = connected();
            c.modules.edge_hub.websocket.server = good.into();
            c.validate().unwrap();
        }
    }

    #[test]
    fn edge_hub_numbers() {
        let mut c = EdgeCoreConfig::default();
        c.modules.edge_hub.heartbeat = 0;
        rejects(&c, "modules.edgeHub.heartbeat", ">= 1");
        let mut c = EdgeCoreConfig::default();
        c.modules.edge_hub.message_qps = -1;
        rejects(&c, "modules.edgeHub.messageQPS", ">= 0");
        let mut c = EdgeCoreConfig::default();
        c.modules.edge_hub.message_burst = -5;
        rejects(&c, "modules.edgeHub.messageBurst", ">= 0");
        let mut c = EdgeCoreConfig::default();
        c.modules.edge_hub.websocket.read_deadline = 0;
        rejects(&c, "modules.edgeHub.websocket.readDeadline", ">= 1");
    }

    #[test]
    fn event_bus() {
        let mut c = EdgeCoreConfig::default();
        c.modules.event_bus.mqtt_mode = 3;
        rejects(&c, "modules.eventBus.mqttMode", "0..=2");
        let mut c = EdgeCoreConfig::default();
        c.modules.event_bus.mqtt_qos = 3;
        rejects(&c, "modules.eventBus.mqttQOS", "0..=2");
        for bad in [
            "127.0.0.1:1883",
            "mqtt://127.0.0.1:1883",
            "tcp://127.0.0.1",
            "tcp://",
        ] {
            let mut c = EdgeCoreConfig::default();
            c.modules.event_bus.mqtt_server_external = bad.into();
            rejects(
                &c,
                "modules.eventBus.mqttServerExternal",
                "tcp://host:port or ssl://host:port",
            );
            let mut c = EdgeCoreConfig::default();
            c.modules.event_bus.mqtt_server_internal = bad.into();
            rejects(&c, "modules.eventBus.mqttServerInternal", "tcp://host:port");
        }
        let mut c = EdgeCoreConfig::default();
        c.modules.event_bus.mqtt_server_external = "ssl://broker.local:8883".into();
        c.validate().unwrap();
    }

    #[test]
    fn meta_manager() {
        let mut c = EdgeCoreConfig::default();
        c.modules.meta_manager.remote_query_timeout = 0;
        rejects(&c, "modules.metaManager.remoteQueryTimeout", ">= 1");
        let mut c = EdgeCoreConfig::default();
        c.validate().unwrap();
        c.modules.meta_manager.meta_server.enable = true;
        c.validate().unwrap();
        c.modules.meta_manager.meta_server.server = "localhost".into();
        rejects(&c, "modules.metaManager.metaServer.server", "host:port");
    }

    #[test]
    fn edged() {
        for bad in ["Node1", "my_host", "-a", "a..b"] {
            let mut c = EdgeCoreConfig::default();
            c.modules.edged.hostname_override = bad.into();
            rejects(&c, "modules.edged.hostnameOverride", "DNS-1123 subdomain");
        }
        let mut c = EdgeCoreConfig::default();
        c.modules.edged.hostname_override = "edge-1.example.com".into();
        c.validate().unwrap();

        for bad in ["", "kube.system", "Default"] {
            let mut c = EdgeCoreConfig::default();
            c.modules.edged.register_node_namespace = bad.into();
            rejects(&c, "modules.edged.registerNodeNamespace", "DNS-1123 label");
        }
        let tkc = "modules.edged.tailoredKubeletConfig";
        let mut c = EdgeCoreConfig::default();
        c.modules.edged.tailored_kubelet_config.cgroup_driver = Some("cgroup".into());
        rejects(
            &c,
            &format!("{tkc}.cgroupDriver"),
            "\"cgroupfs\" or \"systemd\"",
        );
        c.modules.edged.tailored_kubelet_config.cgroup_driver = Some("systemd".into());
        c.validate().unwrap();

        let mut c = EdgeCoreConfig::default();
        c.modules
            .edged
            .tailored_kubelet_config
            .image_gc_high_threshold_percent = Some(101);
        rejects(&c, &format!("{tkc}.imageGCHighThresholdPercent"), "0..=100");
        let mut c = EdgeCoreConfig::default();
        c.modules
            .edged
            .tailored_kubelet_config
            .image_gc_high_threshold_percent = Some(80);
        rejects(
            &c,
            &format!("{tkc}.imageGCHighThresholdPercent"),
            "greater than imageGCLowThresholdPercent (80)",
        );
        let mut c = EdgeCoreConfig::default();
        c.modules
            .edged
            .tailored_kubelet_config
            .image_gc_low_threshold_percent = Some(-1);
        rejects(&c, &format!("{tkc}.imageGCLowThresholdPercent"), "0..=100");
        // Unset means KubeEdge's default, which is valid.
        let mut c = EdgeCoreConfig::default();
        c.modules
            .edged
            .tailored_kubelet_config
            .image_gc_low_threshold_percent = None;
        c.validate().unwrap();

        let mut c = EdgeCoreConfig::default();
        c.modules
            .edged
            .tailored_kubelet_config
            .node_status_update_frequency = Some(GoDuration::ZERO);
        rejects(
            &c,
            &format!("{tkc}.nodeStatusUpdateFrequency"),
            "positive duration",
        );
        let mut c = EdgeCoreConfig::default();
        c.modules
            .edged
            .tailored_kubelet_config
            .node_lease_duration_seconds = Some(0);
        rejects(&c, &format!("{tkc}.nodeLeaseDurationSeconds"), ">= 1");
        let mut c = EdgeCoreConfig::default();
        c.modules.edged.tailored_kubelet_config.eviction_soft =
            Some([("memory.available".to_owned(), "1Gi".to_owned())].into());
        rejects(
            &c,
            &format!("{tkc}.evictionSoftGracePeriod"),
            "grace period must be specified for the soft eviction threshold memory.available",
        );
        c = connected();
        c.modules.edged.tailored_kubelet_config.eviction_hard =
            Some([("disk.free".to_owned(), "1Gi".to_owned())].into());
        rejects(
            &c,
            &format!("{tkc}.evictionHard"),
            "unsupported eviction signal",
        );
        c = connected();
        c.modules.edged.tailored_kubelet_config.read_only_port = Some(70000);
        rejects(&c, &format!("{tkc}.readOnlyPort"), "0..=65535");
        let mut c = EdgeCoreConfig::default();
        c.modules.edged.tailored_kubelet_config.max_pods = Some(-1);
        rejects(&c, &format!("{tkc}.maxPods"), ">= 0");
        let mut c = EdgeCoreConfig::default();
        c.modules.edged.tailored_kubelet_config.cluster_dns = Some(vec!["dns.local".into()]);
        rejects(&c, &format!("{tkc}.clusterDNS"), "IP addresses");
        let mut c = EdgeCoreConfig::default();
        c.modules.edged.node_ip = "10.0.0.300".into();
        rejects(&c, "modules.edged.nodeIP", "IP address");
    }

    #[test]
    fn container_log_rotation_keys() {
        let tkc = "modules.edged.tailoredKubeletConfig";
        // The quantity parser edged rotates by: what passes here is a size it can act on.
        for bad in ["0", "lots", "-1Mi", "0.5", ""] {
            let mut c = EdgeCoreConfig::default();
            c.modules
                .edged
                .tailored_kubelet_config
                .container_log_max_size = Some(bad.into());
            rejects(&c, &format!("{tkc}.containerLogMaxSize"), "size above 0");
        }
        for good in ["10Mi", "1.5Gi", "4096"] {
            let mut c = EdgeCoreConfig::default();
            c.modules
                .edged
                .tailored_kubelet_config
                .container_log_max_size = Some(good.into());
            c.validate().unwrap();
        }
        let mut c = EdgeCoreConfig::default();
        c.modules
            .edged
            .tailored_kubelet_config
            .container_log_max_files = Some(1);
        rejects(&c, &format!("{tkc}.containerLogMaxFiles"), ">= 2");
        let mut c = EdgeCoreConfig::default();
        c.modules
            .edged
            .tailored_kubelet_config
            .container_log_monitor_interval = Some(GoDuration::from_secs(2));
        rejects(
            &c,
            &format!("{tkc}.containerLogMonitorInterval"),
            "at least 3s",
        );
    }

    #[test]
    fn service_bus_port() {
        let mut c = EdgeCoreConfig::default();
        c.modules.service_bus.port = 0;
        rejects(&c, "modules.serviceBus.port", "1..=65535");
    }

    #[test]
    fn wedge_settings() {
        let mut c = EdgeCoreConfig::default();
        c.wedge.admin_addr = "localhost:10240".into();
        rejects(&c, "wedge.adminAddr", "socket address");
        c.wedge.admin_addr = "0.0.0.0:10240".into();
        rejects(&c, "wedge.adminAddr", "allowInsecureRemote");
        let mut c = EdgeCoreConfig::default();
        c.wedge.admin.max_connections = 0;
        rejects(&c, "wedge.admin.maxConnections", "2..=65536");
        let mut c = EdgeCoreConfig::default();
        c.wedge.log_level = " ".into();
        rejects(&c, "wedge.logLevel", "must not be empty");
        let mut c = EdgeCoreConfig::default();
        c.wedge.store.max_batch = 0;
        rejects(&c, "wedge.store.maxBatch", "1..=65536");
        c.wedge.store.max_batch = 65537;
        rejects(&c, "wedge.store.maxBatch", "1..=65536");
        let mut c = EdgeCoreConfig::default();
        c.wedge.bus.queue_capacity = 0;
        rejects(&c, "wedge.bus.queueCapacity", "1..=1000000");
        c.wedge.bus.queue_capacity = 1_000_001;
        rejects(&c, "wedge.bus.queueCapacity", "1..=1000000");
        let mut c = EdgeCoreConfig::default();
        c.wedge.edge_hub.max_frame_bytes = 4095;
        rejects(&c, "wedge.edgeHub.maxFrameBytes", "4096..=268435456");
        c.wedge.edge_hub.max_frame_bytes = 268_435_457;
        rejects(&c, "wedge.edgeHub.maxFrameBytes", "4096..=268435456");
        let mut c = EdgeCoreConfig::default();
        c.wedge.edge_hub.reconnect_initial_ms = 5;
        rejects(&c, "wedge.edgeHub.reconnectInitialMs", "10..=60000");
        let mut c = EdgeCoreConfig::default();
        c.wedge.edge_hub.reconnect_initial_ms = 5_000;
        c.wedge.edge_hub.reconnect_max_ms = 1_000;
        rejects(
            &c,
            "wedge.edgeHub.reconnectMaxMs",
            ">= wedge.edgeHub.reconnectInitialMs",
        );
        let mut c = EdgeCoreConfig::default();
        c.wedge.edged.wasm_runtime_class = String::new();
        rejects(&c, "wedge.edged.wasmRuntimeClass", "must not be empty");
        let mut c = EdgeCoreConfig::default();
        c.wedge.supervision.ping_interval = 0;
        rejects(&c, "wedge.supervision.pingInterval", ">= 1");
        let mut c = EdgeCoreConfig::default();
        c.wedge.supervision.ping_misses = 0;
        rejects(&c, "wedge.supervision.pingMisses", ">= 1");
        let mut c = EdgeCoreConfig::default();
        c.wedge.supervision.restart_backoff_initial_ms = 0;
        rejects(&c, "wedge.supervision.restartBackoffInitialMs", ">= 1");
        let mut c = EdgeCoreConfig::default();
        c.wedge.supervision.restart_backoff_max_ms = 0;
        rejects(&c, "wedge.supervision.restartBackoffMaxMs", ">= 1");
        let mut c = EdgeCoreConfig::default();
        c.wedge.supervision.restart_backoff_initial_ms = 30_001;
        rejects(
            &c,
            "wedge.supervision.restartBackoffInitialMs",
            "<= restartBackoffMaxMs (30000)",
        );
    }

    #[test]
    fn every_violation_is_reported_in_file_order() {
        let mut c = EdgeCoreConfig::default();
        c.modules.edge_hub.heartbeat = 0;
        c.wedge.bus.queue_capacity = 0;
        match c.validate().unwrap_err() {
            ConfigError::Invalid { key, others, .. } => {
                assert_eq!(key, "modules.edgeHub.heartbeat");
                assert_eq!(others.len(), 1);
                assert_eq!(others[0].key, "wedge.bus.queueCapacity");
            }
            other => panic!("unexpected {other:?}"),
        }
    }
}
