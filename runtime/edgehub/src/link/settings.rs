//! What the link needs from `modules.edgeHub`, checked once at start-up.

use std::path::PathBuf;
use std::time::Duration;

use wedge_core::config::{EdgeCoreConfig, EdgeHub as EdgeHubConfig};

use super::backoff::BackoffSettings;

/// Largest inbound frame decoded by default (32 MiB, `wedge.edgeHub.maxFrameBytes`). KubeEdge
/// sets no limit; Wedge bounds the memory one frame may take. A LIST MetaServer asks of the
/// cloud comes back as one frame: 1,000 pods are 4.4 MB, which the earlier 4 MiB refused.
pub const DEFAULT_MAX_FRAME: usize = 32 * 1024 * 1024;

/// Why `modules.edgeHub` cannot drive a link.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SettingsError {
    /// `websocket.server` is empty: a standalone node has no cloud to dial.
    #[error("modules.edgeHub.websocket.server is empty")]
    NoServer,
    /// `websocket.server` is not `host:port`.
    #[error("modules.edgeHub.websocket.server {0:?} is not host:port")]
    BadServer(String),
    /// The node name is empty; it is part of the URL, the headers and the certificate CN.
    #[error("the node name (edged.hostnameOverride) is empty")]
    NoNode,
    /// The project id is empty or cannot travel in an HTTP header.
    #[error("modules.edgeHub.projectID {0:?} is empty or not a valid header value")]
    BadProjectId(String),
}

/// Everything the connection task needs, resolved from `edgecore.yaml`.
///
/// `websocket.readDeadline` is not used: edgecore sets no read deadline on the cloud link (the
/// cloud sends nothing when idle, so one would cut healthy sessions). A dead peer is found by
/// the keepalive write failing instead.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LinkSettings {
    /// CloudCore's WebSocket endpoint, `host:port`.
    pub server: String,
    /// The host part of `server`, used as the TLS server name.
    pub host: String,
    /// `projectID`, sent in the path and the `project_id` header.
    pub project_id: String,
    /// The node name, sent in the path and the `node_id` header.
    pub node: String,
    /// Interval between keepalives (`heartbeat`, seconds).
    pub heartbeat: Duration,
    /// Outbound messages per second; 0 = unlimited.
    pub message_qps: u32,
    /// Outbound token-bucket burst.
    pub message_burst: u32,
    /// CA bundle that verifies CloudCore's certificate.
    pub ca_file: PathBuf,
    /// The node's client certificate chain (PEM).
    pub cert_file: PathBuf,
    /// The client certificate's private key (PEM).
    pub key_file: PathBuf,
    /// Time allowed for TCP connect + TLS + WebSocket handshake.
    pub handshake_timeout: Duration,
    /// Time one frame write may take before the link is declared broken.
    pub write_timeout: Duration,
    /// Largest inbound frame decoded; larger frames are logged and skipped.
    pub max_frame: usize,
    /// Redial delays.
    pub backoff: BackoffSettings,
    /// How long a written message stays in the durable queue before it counts as delivered
    /// (the link must stay up that long after the write).
    pub confirm_after: Duration,
}

impl LinkSettings {
    /// Resolves `modules.edgeHub` for node `node`. Numbers below their minimum are raised to it
    /// (config validation already rejects them; this keeps the link safe if called directly).
    pub fn from_config(config: &EdgeHubConfig, node: &str) -> Result<LinkSettings, SettingsError> {
        let server = config.websocket.server.trim();
        if server.is_empty() {
            return Err(SettingsError::NoServer);
        }
        let host = split_host(server).ok_or_else(|| SettingsError::BadServer(server.to_owned()))?;
        if node.is_empty() {
            return Err(SettingsError::NoNode);
        }
        let project = config.project_id.as_str();
        if project.is_empty() || project.bytes().any(|b| b < 0x21 || b == 0x7f || b == b'/') {
            return Err(SettingsError::BadProjectId(project.to_owned()));
        }
        let secs = |v: i32| Duration::from_secs(u64::try_from(v.max(1)).unwrap_or(1));
        Ok(LinkSettings {
            server: server.to_owned(),
            host,
            project_id: project.to_owned(),
            node: node.to_owned(),
            heartbeat: secs(config.heartbeat),
            message_qps: u32::try_from(config.message_qps.max(0)).unwrap_or(0),
            message_burst: u32::try_from(config.message_burst.max(0)).unwrap_or(0),
            ca_file: PathBuf::from(&config.tls_ca_file),
            cert_file: PathBuf::from(&config.tls_cert_file),
            key_file: PathBuf::from(&config.tls_private_key_file),
            handshake_timeout: secs(config.websocket.handshake_timeout),
            write_timeout: secs(config.websocket.write_deadline),
            max_frame: DEFAULT_MAX_FRAME,
            backoff: BackoffSettings::default(),
            confirm_after: Duration::from_secs(1),
        })
    }

    /// Resolves the whole node config: `modules.edgeHub` as [`LinkSettings::from_config`], plus
    /// Wedge's own link limits from `wedge.edgeHub` (the inbound frame limit). A separate
    /// constructor rather than a wider `from_config`, so callers that only have KubeEdge's
    /// section keep working with the defaults.
    pub fn from_edgecore(
        config: &EdgeCoreConfig,
        node: &str,
    ) -> Result<LinkSettings, SettingsError> {
        let mut settings = LinkSettings::from_config(&config.modules.edge_hub, node)?;
        // Validation keeps it in 4 KiB..=256 MiB; a u32 always fits a usize on the targets
        // Wedge builds for, and saturating keeps it safe if ever it did not.
        let wedge = &config.wedge.edge_hub;
        settings.max_frame = usize::try_from(wedge.max_frame_bytes)
            .unwrap_or(usize::MAX)
            .max(1);
        settings.backoff.initial = Duration::from_millis(u64::from(wedge.reconnect_initial_ms));
        settings.backoff.max =
            Duration::from_millis(u64::from(wedge.reconnect_max_ms)).max(settings.backoff.initial);
        Ok(settings)
    }

    /// `wss://<server>/<projectID>/<node>/events` (the cloud ignores the path, but edgecore
    /// sends it and so do we).
    pub fn url(&self) -> String {
        format!(
            "wss://{}/{}/{}/events",
            self.server, self.project_id, self.node
        )
    }

    /// The handshake headers, in the lower-case spelling (header names are case-insensitive).
    pub fn headers(&self) -> [(&'static str, String); 3] {
        [
            ("node_id", self.node.clone()),
            ("project_id", self.project_id.clone()),
            ("ConnectionUse", "msg".to_owned()),
        ]
    }
}

/// The host of `host:port` or `[v6]:port`, or `None` when there is no valid port.
fn split_host(server: &str) -> Option<String> {
    let (host, port) = server.rsplit_once(':')?;
    port.parse::<u16>().ok()?;
    let host = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    (!host.is_empty() && !host.contains('/')).then(|| host.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(server: &str) -> EdgeHubConfig {
        let mut c = EdgeHubConfig::default();
        c.websocket.server = server.to_owned();
        c
    }

    #[test]
    fn defaults_resolve_to_kubeedge_values() {
        let s = LinkSettings::from_config(&config("10.0.0.1:10000"), "edge-1").unwrap();
        assert_eq!(s.host, "10.0.0.1");
        assert_eq!(s.heartbeat, Duration::from_secs(15));
        assert_eq!((s.message_qps, s.message_burst), (30, 60));
        assert_eq!(s.handshake_timeout, Duration::from_secs(30));
        assert_eq!(s.write_timeout, Duration::from_secs(15));
        assert_eq!(s.max_frame, 32 * 1024 * 1024);
        assert_eq!(s.ca_file, PathBuf::from("/etc/kubeedge/ca/rootCA.crt"));
        assert_eq!(s.cert_file, PathBuf::from("/etc/kubeedge/certs/server.crt"));
        assert_eq!(s.key_file, PathBuf::from("/etc/kubeedge/certs/server.key"));
        assert_eq!(
            s.url(),
            "wss://10.0.0.1:10000/e632aba927ea4ac2b575ec1603d56f10/edge-1/events"
        );
        assert_eq!(
            s.headers(),
            [
                ("node_id", "edge-1".to_owned()),
                ("project_id", "e632aba927ea4ac2b575ec1603d56f10".to_owned()),
                ("ConnectionUse", "msg".to_owned()),
            ]
        );
    }

    #[test]
    fn rejects_missing_server_node_and_bad_values() {
        let e = |c: &EdgeHubConfig, n: &str| LinkSettings::from_config(c, n).unwrap_err();
        assert_eq!(e(&config(""), "n"), SettingsError::NoServer);
        assert_eq!(
            e(&config("cloud"), "n"),
            SettingsError::BadServer("cloud".into())
        );
        assert_eq!(
            e(&config("cloud:x"), "n"),
            SettingsError::BadServer("cloud:x".into())
        );
        assert_eq!(e(&config("cloud:1"), ""), SettingsError::NoNode);
        let mut c = config("cloud:1");
        c.project_id = "a b".into();
        assert_eq!(e(&c, "n"), SettingsError::BadProjectId("a b".into()));
    }

    #[test]
    fn frame_limit_comes_from_the_wedge_section() {
        let mut c = EdgeCoreConfig::default();
        c.modules.edge_hub.websocket.server = "cloud:10000".into();
        let s = LinkSettings::from_edgecore(&c, "n").unwrap();
        assert_eq!(s.max_frame, DEFAULT_MAX_FRAME);
        c.wedge.edge_hub.max_frame_bytes = 65536;
        c.wedge.edge_hub.reconnect_initial_ms = 50;
        c.wedge.edge_hub.reconnect_max_ms = 2_000;
        let s = LinkSettings::from_edgecore(&c, "n").unwrap();
        assert_eq!(s.max_frame, 65536);
        assert_eq!(s.backoff.initial, Duration::from_millis(50));
        assert_eq!(s.backoff.max, Duration::from_secs(2));
        assert_eq!(s.server, "cloud:10000");
        c.modules.edge_hub.websocket.server = String::new();
        assert_eq!(
            LinkSettings::from_edgecore(&c, "n").unwrap_err(),
            SettingsError::NoServer
        );
    }

    #[test]
    fn ipv6_host_and_clamped_numbers() {
        let mut c = config("[::1]:10000");
        c.heartbeat = 0;
        c.message_qps = -3;
        let s = LinkSettings::from_config(&c, "n").unwrap();
        assert_eq!(s.host, "::1");
        assert_eq!(s.heartbeat, Duration::from_secs(1));
        assert_eq!(s.message_qps, 0);
    }
}
