//! One struct per KubeEdge module section under `modules`.
//!
//! Integer types follow KubeEdge's Go types (mostly `int32`) so that every
//! value a KubeEdge file can hold is representable here and out-of-range
//! values get a validation error naming the key, not a parse error.

use serde::{Deserialize, Serialize};

use super::serde_util::null_as_default;

/// `modules.edgeHub`: the connection to CloudCore.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct EdgeHub {
    /// Off by default in Wedge: a fresh node is standalone (KubeEdge: true).
    pub enable: bool,
    /// Seconds between keepalive pings to CloudCore; >= 1.
    pub heartbeat: i32,
    /// Messages per second sent to the cloud (token-bucket rate); >= 0.
    #[serde(rename = "messageQPS")]
    pub message_qps: i32,
    /// Token-bucket burst for `messageQPS`; >= 0.
    pub message_burst: i32,
    /// Project id sent in the connection headers (KubeEdge's fixed default).
    #[serde(rename = "projectID")]
    pub project_id: String,
    /// CA bundle that signs CloudCore's certificate.
    pub tls_ca_file: String,
    /// This node's client certificate (fetched with `token` if missing).
    pub tls_cert_file: String,
    /// Private key of `tlsCertFile`.
    pub tls_private_key_file: String,
    /// The websocket transport (the one Wedge supports).
    #[serde(deserialize_with = "null_as_default")]
    pub websocket: EdgeHubWebSocket,
    /// The QUIC transport (accepted for compatibility, must stay disabled).
    #[serde(deserialize_with = "null_as_default")]
    pub quic: EdgeHubQuic,
    /// CloudCore's HTTPS address for certificate requests, e.g. `https://host:10002`.
    pub http_server: String,
    /// Bootstrap token for the first certificate request.
    pub token: String,
    /// Renew the node certificate automatically before it expires.
    pub rotate_certificates: bool,
}

impl Default for EdgeHub {
    fn default() -> Self {
        Self {
            enable: false,
            heartbeat: 15,
            message_qps: 30,
            message_burst: 60,
            project_id: "e632aba927ea4ac2b575ec1603d56f10".to_owned(),
            tls_ca_file: "/etc/kubeedge/ca/rootCA.crt".to_owned(),
            tls_cert_file: "/etc/kubeedge/certs/server.crt".to_owned(),
            tls_private_key_file: "/etc/kubeedge/certs/server.key".to_owned(),
            websocket: EdgeHubWebSocket::default(),
            quic: EdgeHubQuic::default(),
            http_server: String::new(),
            token: String::new(),
            rotate_certificates: true,
        }
    }
}

/// `modules.edgeHub.websocket`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct EdgeHubWebSocket {
    /// Use websocket to reach CloudCore.
    pub enable: bool,
    /// CloudCore websocket endpoint as `host:port`; empty in Wedge's default
    /// because a standalone node has no cloud.
    pub server: String,
    /// Seconds allowed for the TLS + websocket handshake; >= 1.
    pub handshake_timeout: i32,
    /// Seconds without a received frame before the link is declared dead; >= 1.
    pub read_deadline: i32,
    /// Seconds a single write may take; >= 1.
    pub write_deadline: i32,
}

impl Default for EdgeHubWebSocket {
    fn default() -> Self {
        Self {
            enable: true,
            server: String::new(),
            handshake_timeout: 30,
            read_deadline: 15,
            write_deadline: 15,
        }
    }
}

/// `modules.edgeHub.quic`: KubeEdge's Google-QUIC lane. Parsed so KubeEdge
/// files load, but `enable: true` is rejected (out of scope for Wedge).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct EdgeHubQuic {
    /// Must be false in Wedge.
    pub enable: bool,
    /// CloudCore QUIC endpoint `host:port` (unused).
    pub server: String,
    /// Seconds (unused).
    pub handshake_timeout: i32,
    /// Seconds (unused).
    pub read_deadline: i32,
    /// Seconds (unused).
    pub write_deadline: i32,
}

impl Default for EdgeHubQuic {
    fn default() -> Self {
        Self {
            enable: false,
            server: String::new(),
            handshake_timeout: 30,
            read_deadline: 15,
            write_deadline: 15,
        }
    }
}

/// `modules.eventBus`: the MQTT side of edgecore.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct EventBus {
    /// Whether the module runs.
    pub enable: bool,
    /// 0 = embedded broker on `mqttServerInternal`, 1 = both, 2 = external
    /// broker on `mqttServerExternal`. Wedge defaults to 0 (KubeEdge: 2) so a
    /// node works without installing mosquitto.
    pub mqtt_mode: u8,
    /// QoS used when publishing: 0, 1 or 2.
    #[serde(rename = "mqttQOS")]
    pub mqtt_qos: u8,
    /// Set the MQTT retain flag on published messages.
    pub mqtt_retain: bool,
    /// Messages buffered per MQTT session in the embedded broker.
    pub mqtt_session_queue_size: i32,
    /// External broker URL, `tcp://host:port` or `ssl://host:port`.
    pub mqtt_server_external: String,
    /// Embedded broker listen URL, `tcp://host:port` or `ssl://host:port`.
    pub mqtt_server_internal: String,
    /// Broker user name (empty = anonymous).
    pub mqtt_username: String,
    /// Broker password.
    pub mqtt_password: String,
    /// Client id of the publishing connection (empty = generated).
    #[serde(rename = "mqttPubClientID")]
    pub mqtt_pub_client_id: String,
    /// Client id of the subscribing connection (empty = generated).
    #[serde(rename = "mqttSubClientID")]
    pub mqtt_sub_client_id: String,
    /// TLS towards the broker.
    #[serde(rename = "eventBusTLS", deserialize_with = "null_as_default")]
    pub event_bus_tls: EventBusTls,
}

impl Default for EventBus {
    fn default() -> Self {
        Self {
            enable: true,
            mqtt_mode: 0,
            mqtt_qos: 0,
            mqtt_retain: false,
            mqtt_session_queue_size: 100,
            mqtt_server_external: "tcp://127.0.0.1:1883".to_owned(),
            mqtt_server_internal: "tcp://127.0.0.1:1884".to_owned(),
            mqtt_username: String::new(),
            mqtt_password: String::new(),
            mqtt_pub_client_id: String::new(),
            mqtt_sub_client_id: String::new(),
            event_bus_tls: EventBusTls::default(),
        }
    }
}

/// `modules.eventBus.eventBusTLS`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct EventBusTls {
    /// Use TLS for the broker connection.
    pub enable: bool,
    /// CA bundle for the broker certificate.
    #[serde(rename = "tlsMqttCAFile")]
    pub tls_mqtt_ca_file: String,
    /// Client certificate.
    pub tls_mqtt_cert_file: String,
    /// Client private key.
    pub tls_mqtt_private_key_file: String,
}

/// `modules.metaManager`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct MetaManager {
    /// Whether the module runs.
    pub enable: bool,
    /// Bus group that cloud-bound messages are sent to.
    pub context_send_group: String,
    /// Bus module that cloud-bound messages are sent to.
    pub context_send_module: String,
    /// Seconds to wait for the cloud to answer a metadata query; >= 1.
    pub remote_query_timeout: i32,
    /// The node's local Kubernetes API (Wedge serves its unhold-upgrade extension so far).
    #[serde(deserialize_with = "null_as_default")]
    pub meta_server: MetaServer,
}

impl Default for MetaManager {
    fn default() -> Self {
        Self {
            enable: true,
            context_send_group: "hub".to_owned(),
            context_send_module: "websocket".to_owned(),
            remote_query_timeout: 60,
            meta_server: MetaServer::default(),
        }
    }
}

/// `modules.metaManager.metaServer`: KubeEdge's local Kubernetes-API facade.
/// Wedge acts on `enable` and `server` (plain HTTP); the TLS, token and
/// dummy-interface keys are accepted so KubeEdge files load, and do nothing yet.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct MetaServer {
    /// Whether it listens (with metamanager on).
    pub enable: bool,
    /// Listen address `ip:port` (plain HTTP in Wedge).
    pub server: String,
    /// CA of the facade's serving certificate.
    pub tls_ca_file: String,
    /// The facade's serving certificate.
    pub tls_cert_file: String,
    /// Key of `tlsCertFile`.
    pub tls_private_key_file: String,
    /// Accepted service account token issuers. v1.14+.
    #[serde(deserialize_with = "null_as_default")]
    pub service_account_issuers: Vec<String>,
    /// Accepted token audiences. v1.14+.
    #[serde(deserialize_with = "null_as_default")]
    pub api_audiences: Vec<String>,
    /// Keys that verify service account tokens. v1.14+.
    #[serde(deserialize_with = "null_as_default")]
    pub service_account_key_files: Vec<String>,
    /// Address of the dummy interface pods reach the facade on. v1.17+.
    pub dummy_server: String,
}

impl Default for MetaServer {
    fn default() -> Self {
        Self {
            enable: false,
            server: "127.0.0.1:10550".to_owned(),
            tls_ca_file: "/etc/kubeedge/ca/rootCA.crt".to_owned(),
            tls_cert_file: "/etc/kubeedge/certs/server.crt".to_owned(),
            tls_private_key_file: "/etc/kubeedge/certs/server.key".to_owned(),
            service_account_issuers: vec![
                "https://kubernetes.default.svc.cluster.local".to_owned(),
            ],
            api_audiences: Vec::new(),
            service_account_key_files: Vec::new(),
            dummy_server: "169.254.30.10:10550".to_owned(),
        }
    }
}

/// `modules.deviceTwin`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct DeviceTwin {
    /// Whether the module runs.
    pub enable: bool,
    /// Unix socket where device mappers reach the DMI gRPC service.
    pub dmi_sock_path: String,
}

impl Default for DeviceTwin {
    fn default() -> Self {
        Self {
            enable: true,
            dmi_sock_path: "/etc/kubeedge/dmi.sock".to_owned(),
        }
    }
}

/// `modules.serviceBus`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct ServiceBus {
    /// Whether the module runs.
    pub enable: bool,
    /// Listen address (IP or host) of the server edge apps post to.
    pub server: String,
    /// Listen port; 1..=65535.
    pub port: i32,
    /// Seconds an edge app's request waits for the cloud's answer.
    pub timeout: i32,
}

impl Default for ServiceBus {
    fn default() -> Self {
        Self {
            enable: false,
            server: "127.0.0.1".to_owned(),
            port: 9060,
            timeout: 60,
        }
    }
}

/// `modules.edgeStream`: KubeEdge's `kubectl logs/exec` tunnel to the cloud.
/// Wedge has no tunnel yet: the keys load and do nothing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct EdgeStream {
    /// Whether the tunnel runs (it does not in Wedge).
    pub enable: bool,
    /// CA of the tunnel server's certificate.
    #[serde(rename = "tlsTunnelCAFile")]
    pub tls_tunnel_ca_file: String,
    /// Client certificate of the tunnel.
    pub tls_tunnel_cert_file: String,
    /// Key of `tlsTunnelCertFile`.
    pub tls_tunnel_private_key_file: String,
    /// Seconds allowed for the handshake.
    pub handshake_timeout: i32,
    /// Seconds a read may take.
    pub read_deadline: i32,
    /// CloudCore's tunnel endpoint `host:port`.
    pub server: String,
    /// Seconds a write may take.
    pub write_deadline: i32,
}

impl Default for EdgeStream {
    fn default() -> Self {
        Self {
            enable: false,
            tls_tunnel_ca_file: "/etc/kubeedge/ca/rootCA.crt".to_owned(),
            tls_tunnel_cert_file: "/etc/kubeedge/certs/server.crt".to_owned(),
            tls_tunnel_private_key_file: "/etc/kubeedge/certs/server.key".to_owned(),
            handshake_timeout: 30,
            read_deadline: 15,
            server: "127.0.0.1:10004".to_owned(),
            write_deadline: 15,
        }
    }
}
