//! What the eventbus needs from `edgecore.yaml` (`modules.eventBus`), parsed once at start-up so
//! a bad URL is reported with its key before anything listens or dials.

use std::path::PathBuf;
use std::time::Duration;

use wedge_core::config::{BrokerSettings, EventBus};

use crate::error::SettingsError;

/// Which brokers the node uses (`mqttMode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MqttMode {
    /// `0`: only the embedded broker on `mqttServerInternal`.
    Internal = 0,
    /// `1`: the embedded broker and the external one; publishes go to both.
    Both = 1,
    /// `2`: only the external broker on `mqttServerExternal` (KubeEdge's default).
    External = 2,
}

impl MqttMode {
    /// The mode for a `mqttMode` value.
    pub fn from_code(code: u8) -> Result<MqttMode, SettingsError> {
        match code {
            0 => Ok(MqttMode::Internal),
            1 => Ok(MqttMode::Both),
            2 => Ok(MqttMode::External),
            other => Err(SettingsError::Mode(other)),
        }
    }

    /// True when the embedded broker runs.
    pub fn uses_internal(self) -> bool {
        matches!(self, MqttMode::Internal | MqttMode::Both)
    }

    /// True when the external broker is dialled.
    pub fn uses_external(self) -> bool {
        matches!(self, MqttMode::External | MqttMode::Both)
    }
}

/// A broker address as KubeEdge writes it: `tcp://host:port` or `ssl://host:port`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrokerUrl {
    /// Host name or IP literal (IPv6 without brackets).
    pub host: String,
    /// TCP port.
    pub port: u16,
    /// True for `ssl://` (also `tls://`, `mqtts://`): the connection uses TLS.
    pub tls: bool,
}

impl BrokerUrl {
    /// Parses `scheme://host:port`; `key` names the setting in errors.
    pub fn parse(key: &'static str, url: &str) -> Result<BrokerUrl, SettingsError> {
        let bad = |reason: &str| SettingsError::Url {
            key,
            url: url.to_owned(),
            reason: reason.to_owned(),
        };
        let (scheme, rest) = url
            .split_once("://")
            .ok_or_else(|| bad("expected scheme://host:port"))?;
        let tls = match scheme.to_ascii_lowercase().as_str() {
            "tcp" | "mqtt" => false,
            "ssl" | "tls" | "mqtts" => true,
            _ => return Err(bad("the scheme must be tcp:// or ssl://")),
        };
        let authority = rest.trim_end_matches('/');
        let (host, port) = authority
            .rsplit_once(':')
            .ok_or_else(|| bad("the port is missing"))?;
        let host = host.trim_start_matches('[').trim_end_matches(']');
        if host.is_empty() {
            return Err(bad("the host is missing"));
        }
        let port: u16 = port
            .parse()
            .map_err(|_| bad("the port is not a number from 1 to 65535"))?;
        Ok(BrokerUrl {
            host: host.to_owned(),
            port,
            tls,
        })
    }
}

impl std::fmt::Display for BrokerUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let scheme = if self.tls { "ssl" } else { "tcp" };
        if self.host.contains(':') {
            write!(f, "{scheme}://[{}]:{}", self.host, self.port)
        } else {
            write!(f, "{scheme}://{}:{}", self.host, self.port)
        }
    }
}

/// A user name and password, for the external broker and for clients of the embedded one.
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    /// User name.
    pub username: String,
    /// Password.
    pub password: String,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print the password into logs.
        f.debug_struct("Credentials")
            .field("username", &self.username)
            .finish_non_exhaustive()
    }
}

/// TLS material for the external broker (`eventBusTLS`). Files are read when connecting.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TlsFiles {
    /// CA bundle that signs the broker's certificate; `None` = the system's roots.
    pub ca_file: Option<PathBuf>,
    /// Client certificate chain (PEM), for brokers that require client certificates.
    pub cert_file: Option<PathBuf>,
    /// Client private key (PEM).
    pub key_file: Option<PathBuf>,
}

/// Everything the eventbus module runs with.
#[derive(Debug, Clone)]
pub struct EventBusSettings {
    /// Which brokers are used.
    pub mode: MqttMode,
    /// Where the embedded broker listens (`mqttServerInternal`; `tcp://` only).
    pub internal: BrokerUrl,
    /// The external broker (`mqttServerExternal`).
    pub external: BrokerUrl,
    /// QoS of messages the module publishes into the embedded broker (`mqttQOS`). The
    /// external broker always gets QoS 1, as in KubeEdge.
    pub qos: u8,
    /// Retain flag of messages published into the embedded broker (`mqttRetain`); always false
    /// towards the external broker.
    pub retain: bool,
    /// Messages queued per client of the embedded broker (`mqttSessionQueueSize`); also the
    /// request queue of each external connection. Past it messages are dropped, never buffered
    /// without bound.
    pub session_queue_size: usize,
    /// `mqttUsername` / `mqttPassword`: used to log in to the external broker, and required
    /// from clients of the embedded broker.
    pub credentials: Option<Credentials>,
    /// `wedge.mqtt.usersFile`: the embedded broker's users, passwords and topic ACLs
    /// (see [`crate::access`]); `None` keeps KubeEdge's rules.
    pub users_file: Option<PathBuf>,
    /// TLS files for the external broker, when `eventBusTLS.enable`.
    pub tls: Option<TlsFiles>,
    /// Client id of the subscribing connection (`hub-client-sub-<unix s>` unless configured).
    pub sub_client_id: String,
    /// Client id of the publishing connection (`hub-client-pub-<unix s>` unless configured).
    pub pub_client_id: String,
    /// The node's name, for `$hw/events/node/<node>/authInfo/get/result`.
    pub node_name: String,
    /// Largest MQTT payload forwarded to the bus; bigger ones are dropped with a warning.
    pub max_payload: usize,
    /// Keep-alive of the external connections (30 s, as KubeEdge).
    pub keep_alive: Duration,
    /// First delay before redialling the external broker; doubles up to `reconnect_max`.
    pub reconnect_initial: Duration,
    /// Longest delay between redials.
    pub reconnect_max: Duration,
    /// The embedded broker's limits (`wedge.broker`); defaults unless
    /// [`EventBusSettings::with_broker`] sets them.
    pub broker: BrokerSettings,
}

/// Default payload cap: 1 MiB.
pub const DEFAULT_MAX_PAYLOAD: usize = 1024 * 1024;

impl EventBusSettings {
    /// Settings from `modules.eventBus`, for node `node`.
    pub fn from_config(config: &EventBus, node: &str) -> Result<EventBusSettings, SettingsError> {
        let mode = MqttMode::from_code(config.mqtt_mode)?;
        if config.mqtt_qos > 2 {
            return Err(SettingsError::Qos(config.mqtt_qos));
        }
        let internal = BrokerUrl::parse("mqttServerInternal", &config.mqtt_server_internal)?;
        if internal.tls && mode.uses_internal() {
            return Err(SettingsError::Url {
                key: "mqttServerInternal",
                url: config.mqtt_server_internal.clone(),
                reason: "the embedded broker listens on tcp:// here; its TLS listener is wedge.broker.tls"
                    .to_owned(),
            });
        }
        let external = BrokerUrl::parse("mqttServerExternal", &config.mqtt_server_external)?;
        let credentials = (!config.mqtt_username.is_empty()).then(|| Credentials {
            username: config.mqtt_username.clone(),
            password: config.mqtt_password.clone(),
        });
        let tls_config = &config.event_bus_tls;
        let path = |p: &str| (!p.is_empty()).then(|| PathBuf::from(p));
        let tls = tls_config.enable.then(|| TlsFiles {
            ca_file: path(&tls_config.tls_mqtt_ca_file),
            cert_file: path(&tls_config.tls_mqtt_cert_file),
            key_file: path(&tls_config.tls_mqtt_private_key_file),
        });
        if let Some(files) = &tls
            && files.cert_file.is_some() != files.key_file.is_some()
        {
            return Err(SettingsError::Tls(
                "tlsMqttCertFile and tlsMqttPrivateKeyFile must be set together".to_owned(),
            ));
        }
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        let or_default = |id: &str, role: &str| {
            if id.is_empty() {
                format!("hub-client-{role}-{now}")
            } else {
                id.to_owned()
            }
        };
        Ok(EventBusSettings {
            mode,
            internal,
            external,
            qos: config.mqtt_qos,
            retain: config.mqtt_retain,
            session_queue_size: usize::try_from(config.mqtt_session_queue_size)
                .unwrap_or(0)
                .max(1),
            credentials,
            users_file: None,
            tls,
            sub_client_id: or_default(&config.mqtt_sub_client_id, "sub"),
            pub_client_id: or_default(&config.mqtt_pub_client_id, "pub"),
            node_name: node.to_owned(),
            max_payload: DEFAULT_MAX_PAYLOAD,
            keep_alive: Duration::from_secs(30),
            reconnect_initial: Duration::from_millis(200),
            reconnect_max: Duration::from_secs(10),
            broker: BrokerSettings::default(),
        })
    }

    /// These settings with the embedded broker's limits from `wedge.broker`.
    pub fn with_broker(mut self, broker: &BrokerSettings) -> EventBusSettings {
        self.broker = broker.clone();
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_kubeedge_urls() {
        let url = BrokerUrl::parse("k", "tcp://127.0.0.1:1884").unwrap();
        assert_eq!(
            (url.host.as_str(), url.port, url.tls),
            ("127.0.0.1", 1884, false)
        );
        let url = BrokerUrl::parse("k", "ssl://mqtt.example:8883").unwrap();
        assert_eq!(
            (url.host.as_str(), url.port, url.tls),
            ("mqtt.example", 8883, true)
        );
        let url = BrokerUrl::parse("k", "tcp://[::1]:1883").unwrap();
        assert_eq!(url.host, "::1");
        assert_eq!(url.to_string(), "tcp://[::1]:1883");
        for bad in [
            "127.0.0.1:1883",
            "http://h:1",
            "tcp://h",
            "tcp://:1",
            "tcp://h:99999",
        ] {
            let err = BrokerUrl::parse("mqttServerExternal", bad).unwrap_err();
            assert!(err.to_string().contains("mqttServerExternal"), "{err}");
        }
    }

    #[test]
    fn from_config_defaults() {
        let config = EventBus::default();
        let s = EventBusSettings::from_config(&config, "edge-1").unwrap();
        assert_eq!(s.mode, MqttMode::Internal);
        assert_eq!(s.internal.port, 1884);
        assert_eq!(s.external.port, 1883);
        assert!(s.sub_client_id.starts_with("hub-client-sub-"));
        assert!(s.pub_client_id.starts_with("hub-client-pub-"));
        assert_eq!(s.session_queue_size, 100);
        assert!(s.credentials.is_none() && s.tls.is_none());
        assert_eq!(s.node_name, "edge-1");
        assert_eq!(s.max_payload, DEFAULT_MAX_PAYLOAD);
    }

    #[test]
    fn from_config_rejects_bad_values() {
        let config = EventBus {
            mqtt_mode: 3,
            ..EventBus::default()
        };
        assert!(EventBusSettings::from_config(&config, "n").is_err());
        let config = EventBus {
            mqtt_server_internal: "ssl://127.0.0.1:1884".to_owned(),
            ..EventBus::default()
        };
        assert!(EventBusSettings::from_config(&config, "n").is_err());
        let mut config = EventBus::default();
        config.event_bus_tls.enable = true;
        config.event_bus_tls.tls_mqtt_cert_file = "/c.pem".to_owned();
        assert!(EventBusSettings::from_config(&config, "n").is_err());
    }

    #[test]
    fn credentials_and_ids_from_config() {
        let mut config = EventBus {
            mqtt_mode: 2,
            mqtt_username: "u".to_owned(),
            mqtt_password: "secret".to_owned(),
            mqtt_sub_client_id: "sub-x".to_owned(),
            mqtt_pub_client_id: "pub-x".to_owned(),
            ..EventBus::default()
        };
        config.event_bus_tls.enable = true;
        config.event_bus_tls.tls_mqtt_ca_file = "/ca.pem".to_owned();
        let s = EventBusSettings::from_config(&config, "n").unwrap();
        assert_eq!(s.mode, MqttMode::External);
        let creds = s.credentials.unwrap();
        assert_eq!(creds.username, "u");
        assert!(!format!("{creds:?}").contains("secret"));
        assert_eq!(s.sub_client_id, "sub-x");
        assert_eq!(s.pub_client_id, "pub-x");
        assert_eq!(s.tls.unwrap().ca_file, Some(PathBuf::from("/ca.pem")));
    }
}
