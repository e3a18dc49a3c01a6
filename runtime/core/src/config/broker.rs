//! `wedge.broker`: the embedded MQTT broker's limits. KubeEdge's keys (`modules.eventBus`) say
//! where it listens and how deep a session queue is; these bound what a hostile or broken client
//! can make the node hold: packet bytes, buffered partial packets, idle sockets, subscriptions,
//! retained messages and connections.

use serde::{Deserialize, Serialize};

/// `wedge.broker`: limits of the embedded MQTT broker (`mqttMode` 0 and 1).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct BrokerSettings {
    /// Largest MQTT packet accepted or sent, whole (fixed header included), in bytes;
    /// 4096..=268435455. The default takes a 1 MiB payload (the eventbus's payload cap) with
    /// its topic. A larger packet closes the connection before its body is read. CONNECT is
    /// limited to 64 KiB whatever this says.
    pub max_packet_bytes: u32,
    /// Bytes all connections together may hold for partial packets larger than 64 KiB, so
    /// many half-sent packets cannot grow memory past it; >= maxPacketBytes. A connection
    /// whose packet does not fit waits (not reading) within its packet deadline.
    pub max_pending_bytes: u64,
    /// Milliseconds a packet that started arriving has to arrive whole; 100..=600000. A
    /// stalled partial packet closes the connection and frees its buffer.
    pub packet_timeout_ms: u32,
    /// Milliseconds a new connection has to send CONNECT; 100..=600000.
    pub connect_timeout_ms: u32,
    /// Seconds a connection may stay silent: the limit for keep-alive 0, and the cap of
    /// 1.5 × keep-alive for longer ones; 1..=86400.
    pub idle_timeout_seconds: u32,
    /// Most clients connected at once; 0 = the soft `RLIMIT_NOFILE` at start minus 512 file
    /// descriptors kept for the rest of the daemon (at least 16, at most 65536); else
    /// 1..=1000000. Connections past it are closed at once.
    pub max_connections: u32,
    /// Most subscriptions one network client may hold; 1..=1000000. A filter past it gets
    /// SUBACK failure (0x80).
    pub max_filters_per_client: u32,
    /// Most retained topics kept; 1..=10000000.
    pub max_retained_topics: u32,
    /// Most payload bytes of retained messages kept; 1024..=4294967296. A retained publish
    /// that would go past it is delivered to current subscribers but not retained (counted).
    pub max_retained_bytes: u64,
    /// A second, TLS listener of the embedded broker (off unless `address` is set).
    #[serde(deserialize_with = "super::serde_util::null_as_default")]
    pub tls: BrokerTlsSettings,
}

/// `wedge.broker.tls`: the embedded broker's TLS listener, beside the plain one on
/// `mqttServerInternal` (KubeEdge's embedded broker has none). It shares the plain listener's
/// users file, limits (all but the packet size, which it may set for itself) and connection
/// budget.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct BrokerTlsSettings {
    /// `host:port` to listen on with TLS ("" = no TLS listener), e.g. `0.0.0.0:8883`.
    pub address: String,
    /// PEM certificate chain the listener presents (the server's certificate first).
    pub cert_file: String,
    /// PEM private key of that certificate.
    pub key_file: String,
    /// PEM CA bundle: when set, every client must present a certificate it signed (mutual
    /// TLS); "" = clients are not asked for one.
    #[serde(rename = "clientCAFile")]
    pub client_ca_file: String,
    /// Largest whole MQTT packet on this listener, in bytes (0 = `wedge.broker.maxPacketBytes`);
    /// else 4096..=268435455 and <= `wedge.broker.maxPendingBytes`. A delivery larger than a
    /// client's listener allows is skipped for that client and counted.
    pub max_packet_bytes: u32,
}

impl BrokerTlsSettings {
    /// Whether the TLS listener is on.
    pub fn enabled(&self) -> bool {
        !self.address.is_empty()
    }
}

impl Default for BrokerSettings {
    fn default() -> Self {
        Self {
            max_packet_bytes: 1024 * 1024 + 64 * 1024,
            max_pending_bytes: 64 * 1024 * 1024,
            packet_timeout_ms: 10_000,
            connect_timeout_ms: 10_000,
            idle_timeout_seconds: 300,
            max_connections: 0,
            max_filters_per_client: 4096,
            max_retained_topics: 10_000,
            max_retained_bytes: 64 * 1024 * 1024,
            tls: BrokerTlsSettings::default(),
        }
    }
}

impl BrokerSettings {
    /// Every bad value as (full key, message), in field order.
    pub(super) fn violations(&self) -> Vec<(String, String)> {
        const P: &str = "wedge.broker";
        let mut out = Vec::new();
        let mut range = |key: &str, value: u64, lo: u64, hi: u64, meaning: &str| {
            if !(lo..=hi).contains(&value) {
                out.push((
                    format!("{P}.{key}"),
                    format!("must be in {lo}..={hi} ({meaning}), got {value}"),
                ));
            }
        };
        range(
            "maxPacketBytes",
            self.max_packet_bytes.into(),
            4096,
            268_435_455,
            "bytes per MQTT packet",
        );
        range(
            "maxPendingBytes",
            self.max_pending_bytes,
            4096,
            1 << 40,
            "bytes of partial packets",
        );
        range(
            "packetTimeoutMs",
            self.packet_timeout_ms.into(),
            100,
            600_000,
            "milliseconds",
        );
        range(
            "connectTimeoutMs",
            self.connect_timeout_ms.into(),
            100,
            600_000,
            "milliseconds",
        );
        range(
            "idleTimeoutSeconds",
            self.idle_timeout_seconds.into(),
            1,
            86_400,
            "seconds",
        );
        if self.max_connections != 0 {
            range(
                "maxConnections",
                self.max_connections.into(),
                1,
                1_000_000,
                "connections; 0 = from the file descriptor limit",
            );
        }
        range(
            "maxFiltersPerClient",
            self.max_filters_per_client.into(),
            1,
            1_000_000,
            "subscriptions per client",
        );
        range(
            "maxRetainedTopics",
            self.max_retained_topics.into(),
            1,
            10_000_000,
            "retained topics",
        );
        range(
            "maxRetainedBytes",
            self.max_retained_bytes,
            1024,
            1 << 32,
            "bytes of retained payloads",
        );
        if self.max_pending_bytes < u64::from(self.max_packet_bytes) {
            out.push((
                format!("{P}.maxPendingBytes"),
                format!(
                    "must be >= wedge.broker.maxPacketBytes ({}), got {}",
                    self.max_packet_bytes, self.max_pending_bytes
                ),
            ));
        }
        self.tls.violations(self.max_pending_bytes, &mut out);
        out
    }
}

impl BrokerTlsSettings {
    fn violations(&self, max_pending_bytes: u64, out: &mut Vec<(String, String)>) {
        const P: &str = "wedge.broker.tls";
        if self.max_packet_bytes != 0 {
            let n = self.max_packet_bytes;
            if !(4096..=268_435_455).contains(&n) {
                out.push((
                    format!("{P}.maxPacketBytes"),
                    format!(
                        "must be 0 (wedge.broker.maxPacketBytes) or in 4096..=268435455, got {n}"
                    ),
                ));
            } else if u64::from(n) > max_pending_bytes {
                out.push((
                    format!("{P}.maxPacketBytes"),
                    format!(
                        "must be <= wedge.broker.maxPendingBytes ({max_pending_bytes}), got {n}"
                    ),
                ));
            }
        }
        let set = |v: &str| !v.is_empty();
        if !self.enabled() {
            for (key, value) in [
                ("certFile", &self.cert_file),
                ("keyFile", &self.key_file),
                ("clientCAFile", &self.client_ca_file),
            ] {
                if set(value) {
                    out.push((
                        format!("{P}.{key}"),
                        format!("is set but {P}.address is empty, so no TLS listener would use it"),
                    ));
                }
            }
            return;
        }
        let port = self
            .address
            .rsplit_once(':')
            .filter(|(host, _)| !host.is_empty())
            .and_then(|(_, port)| port.parse::<u16>().ok());
        if port.is_none() {
            out.push((
                format!("{P}.address"),
                format!("must be host:port, got {:?}", self.address),
            ));
        }
        for (key, value) in [("certFile", &self.cert_file), ("keyFile", &self.key_file)] {
            if !set(value) {
                out.push((
                    format!("{P}.{key}"),
                    "must be set when the TLS listener is on (address)".to_owned(),
                ));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid_and_bad_values_name_their_key() {
        assert!(BrokerSettings::default().violations().is_empty());
        let bad = BrokerSettings {
            max_packet_bytes: 100,
            max_pending_bytes: 5000,
            idle_timeout_seconds: 0,
            max_filters_per_client: 0,
            ..BrokerSettings::default()
        };
        let keys: Vec<String> = bad.violations().into_iter().map(|(k, _)| k).collect();
        assert_eq!(
            keys,
            [
                "wedge.broker.maxPacketBytes",
                "wedge.broker.idleTimeoutSeconds",
                "wedge.broker.maxFiltersPerClient",
            ]
        );
        let bad = BrokerSettings {
            max_pending_bytes: 8192,
            ..BrokerSettings::default()
        };
        let v = bad.violations();
        assert_eq!(v.len(), 1);
        assert!(v[0].1.contains(">= wedge.broker.maxPacketBytes"), "{v:?}");
    }

    #[test]
    fn the_tls_listener_needs_an_address_a_certificate_and_a_key() {
        let keys = |tls: BrokerTlsSettings| -> Vec<String> {
            BrokerSettings {
                tls,
                ..BrokerSettings::default()
            }
            .violations()
            .into_iter()
            .map(|(k, _)| k)
            .collect()
        };
        assert_eq!(
            keys(BrokerTlsSettings {
                address: "0.0.0.0".into(),
                ..BrokerTlsSettings::default()
            }),
            [
                "wedge.broker.tls.address",
                "wedge.broker.tls.certFile",
                "wedge.broker.tls.keyFile"
            ]
        );
        assert_eq!(
            keys(BrokerTlsSettings {
                client_ca_file: "/ca.pem".into(),
                ..BrokerTlsSettings::default()
            }),
            ["wedge.broker.tls.clientCAFile"]
        );
        assert!(
            keys(BrokerTlsSettings {
                address: "[::]:8883".into(),
                cert_file: "/c.pem".into(),
                key_file: "/k.pem".into(),
                client_ca_file: String::new(),
                max_packet_bytes: 0,
            })
            .is_empty()
        );
        assert_eq!(
            keys(BrokerTlsSettings {
                max_packet_bytes: 100,
                ..BrokerTlsSettings::default()
            }),
            ["wedge.broker.tls.maxPacketBytes"]
        );
    }
}
