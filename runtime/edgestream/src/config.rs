//! What the tunnel needs to know: where CloudCore's tunnel server is, the node's identity and
//! certificates, where the local kubelet port is, and the tunnel's limits.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use wedge_core::config::{ConfigError, EdgeCoreConfig};

/// KubeEdge's edged port (`constants.ServerPort`): CloudCore always addresses the kubelet
/// requests it sends through the tunnel to `http://127.0.0.1:10350`.
pub const DEFAULT_LOCAL_PORT: u16 = 10350;

/// The node's certificate, its key and the CA that signed CloudCore's certificate.
#[derive(Clone)]
pub enum Credentials {
    /// PEM files, read again at every dial (so a rotated certificate is used by the next
    /// connection): `modules.edgeStream.tlsTunnel{CAFile,CertFile,PrivateKeyFile}`.
    Files {
        /// The CA certificate(s).
        ca: PathBuf,
        /// The node's certificate chain.
        cert: PathBuf,
        /// The node's private key.
        key: PathBuf,
    },
    /// PEM bytes already loaded.
    Pem {
        /// The CA certificate(s).
        ca: Vec<u8>,
        /// The node's certificate chain.
        cert: Vec<u8>,
        /// The node's private key.
        key: Vec<u8>,
    },
}

impl std::fmt::Debug for Credentials {
    /// Never prints key material.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Credentials::Files { ca, cert, key } => f
                .debug_struct("Files")
                .field("ca", ca)
                .field("cert", cert)
                .field("key", key)
                .finish(),
            Credentials::Pem { .. } => f.write_str("Pem { .. }"),
        }
    }
}

/// The redial delays: `initial`, doubling up to `max`, each scattered by ±20 % (never above
/// `max`). edgecore redials every 2 s; the defaults start sooner and never wait longer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reconnect {
    /// The first delay after a session ended or a dial failed.
    pub initial: Duration,
    /// The longest delay.
    pub max: Duration,
}

impl Default for Reconnect {
    fn default() -> Reconnect {
        Reconnect {
            initial: Duration::from_millis(500),
            max: Duration::from_secs(2),
        }
    }
}

/// Everything the tunnel needs.
#[derive(Debug, Clone)]
pub struct TunnelConfig {
    /// CloudCore's tunnel server, `host:port` (`modules.edgeStream.server`, port 10004 by
    /// default); the WebSocket URL is `wss://<server>/v1/kubeedge/connect`.
    pub server: String,
    /// The node's certificate and the cloud's CA.
    pub credentials: Credentials,
    /// The node's name, sent as the session key `SessionHostNameOverride`: CloudCore finds the
    /// session of a logs/exec/attach request by the pod's `spec.nodeName`, and records the
    /// kubelet port on the Node of this name.
    pub node_name: String,
    /// The node's address, sent as `SessionInternalIP`: CloudCore finds the session of a
    /// metrics request by the address the apiserver dialled, the Node's `InternalIP`, so this
    /// must be the address the node reports as its `InternalIP`. `None`: the header is left
    /// out and CloudCore takes the tunnel's source address.
    pub node_ip: Option<IpAddr>,
    /// Where the kubelet's HTTP port is: every request is replayed to it (KubeEdge:
    /// `127.0.0.1:10350`, fixed), unless [`TunnelConfig::kubelet_link`] is set. Its text is
    /// the `Host` of every replayed request either way.
    pub local_addr: SocketAddr,
    /// edged's kubelet server in this process: requests go to it in memory, not over TCP, so
    /// the TCP port need not serve logs, exec or attach to anyone who reaches it.
    pub kubelet_link: Option<wedge_core::kubelet_link::KubeletLink>,
    /// TCP, TLS and WebSocket handshake together (`handshakeTimeout`, 30 s).
    pub handshake_timeout: Duration,
    /// Once CloudCore has answered a ping, the longest it may stay silent before the tunnel is
    /// taken for dead (`readDeadline`, 15 s; zero: never).
    pub read_deadline: Duration,
    /// The longest one write to the tunnel, or one hand-over of cloud data to a local
    /// connection, may take (`writeDeadline`, 15 s).
    pub write_deadline: Duration,
    /// How often the edge pings CloudCore (edgecore: 5 s).
    pub ping_interval: Duration,
    /// Redial delays.
    pub reconnect: Reconnect,
    /// Local connections open at once; a connect message past this is answered with a
    /// `REMOVE_CONNECT` at once.
    pub max_connections: usize,
    /// Messages waiting for the tunnel's writer; a full queue makes local readers wait.
    pub outbound_queue: usize,
    /// Cloud messages waiting for one local connection's writer.
    pub inbound_queue: usize,
    /// The most bytes one `DATA` message carries (at most 1 MiB, CloudCore's limit).
    pub chunk_size: usize,
    /// The longest the local kubelet port may take to accept a connection.
    pub local_connect_timeout: Duration,
}

impl TunnelConfig {
    /// A configuration with KubeEdge's defaults for everything but the server, the
    /// credentials and the node's name.
    pub fn new(
        server: impl Into<String>,
        credentials: Credentials,
        node_name: impl Into<String>,
    ) -> TunnelConfig {
        TunnelConfig {
            server: server.into(),
            credentials,
            node_name: node_name.into(),
            node_ip: None,
            local_addr: SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), DEFAULT_LOCAL_PORT),
            kubelet_link: None,
            handshake_timeout: Duration::from_secs(30),
            read_deadline: Duration::from_secs(15),
            write_deadline: Duration::from_secs(15),
            ping_interval: Duration::from_secs(5),
            reconnect: Reconnect::default(),
            max_connections: 256,
            outbound_queue: 64,
            inbound_queue: 32,
            chunk_size: 32 * 1024,
            local_connect_timeout: Duration::from_secs(10),
        }
    }

    /// The tunnel as `edgecore.yaml` describes it: `modules.edgeStream` (server, certificate
    /// files, handshake/read/write deadlines), the node name (`modules.edged.hostnameOverride`
    /// or the hostname), `modules.edged.nodeIP`, and the local address: the port
    /// `tailoredKubeletConfig.readOnlyPort` (10350; KubeEdge's fixed port when 0) on
    /// `tailoredKubeletConfig.address` when that is one address, else on 127.0.0.1 (where
    /// KubeEdge always sends).
    ///
    /// When `nodeIP` is unset, set [`TunnelConfig::node_ip`] to the address edged reports as
    /// the node's `InternalIP` (edgecore does the same: it sends the host's address).
    pub fn from_edgecore(config: &EdgeCoreConfig) -> Result<TunnelConfig, ConfigError> {
        let stream = &config.modules.edge_stream;
        let kubelet = config.kubelet();
        let mut tunnel = TunnelConfig::new(
            stream.server.clone(),
            Credentials::Files {
                ca: stream.tls_tunnel_ca_file.clone().into(),
                cert: stream.tls_tunnel_cert_file.clone().into(),
                key: stream.tls_tunnel_private_key_file.clone().into(),
            },
            config.node_name()?,
        );
        tunnel.node_ip = kubelet.node_ip;
        if kubelet.read_only_port != 0 {
            tunnel.local_addr.set_port(kubelet.read_only_port);
        }
        if let Ok(ip) = kubelet.address.parse::<IpAddr>()
            && !ip.is_unspecified()
        {
            tunnel.local_addr.set_ip(ip);
        }
        let secs = |s: i32, default: Duration| {
            if s > 0 {
                Duration::from_secs(s.unsigned_abs().into())
            } else {
                default
            }
        };
        tunnel.handshake_timeout = secs(stream.handshake_timeout, tunnel.handshake_timeout);
        tunnel.read_deadline = secs(stream.read_deadline, tunnel.read_deadline);
        tunnel.write_deadline = secs(stream.write_deadline, tunnel.write_deadline);
        Ok(tunnel)
    }

    /// The server's host (for TLS) without the port.
    pub(crate) fn server_host(&self) -> &str {
        let s = self.server.as_str();
        if let Some(rest) = s.strip_prefix('[') {
            return rest.split(']').next().unwrap_or(rest);
        }
        match s.rsplit_once(':') {
            Some((host, _)) => host,
            None => s,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn from_edgecore_reads_kubeedge_keys() {
        let yaml = "apiVersion: edgecore.config.kubeedge.io/v1alpha2\nkind: EdgeCore\nmodules:\n  \
                    edgeStream:\n    enable: true\n    server: 10.0.0.1:10004\n    \
                    handshakeTimeout: 7\n    tlsTunnelCertFile: /c/n.crt\n  edged:\n    \
                    hostnameOverride: edge-1\n    nodeIP: 10.0.0.9\n";
        let config = EdgeCoreConfig::from_yaml_str(yaml).unwrap();
        let t = TunnelConfig::from_edgecore(&config).unwrap();
        assert_eq!(t.server, "10.0.0.1:10004");
        assert_eq!(t.server_host(), "10.0.0.1");
        assert_eq!(t.node_name, "edge-1");
        assert_eq!(t.node_ip, Some("10.0.0.9".parse().unwrap()));
        assert_eq!(t.local_addr, "127.0.0.1:10350".parse().unwrap());
        assert_eq!(t.handshake_timeout, Duration::from_secs(7));
        assert_eq!(t.read_deadline, Duration::from_secs(15));
        match t.credentials {
            Credentials::Files { ca, cert, key } => {
                assert_eq!(ca, PathBuf::from("/etc/kubeedge/ca/rootCA.crt"));
                assert_eq!(cert, PathBuf::from("/c/n.crt"));
                assert_eq!(key, PathBuf::from("/etc/kubeedge/certs/server.key"));
            }
            Credentials::Pem { .. } => panic!("files expected"),
        }
        // An unspecified bind address: the kubelet is reached on loopback.
        let yaml = "apiVersion: edgecore.config.kubeedge.io/v1alpha2\nkind: EdgeCore\nmodules:\n  \
                    edged:\n    hostnameOverride: edge-1\n    tailoredKubeletConfig:\n      \
                    address: 0.0.0.0\n      readOnlyPort: 10999\n";
        let t = TunnelConfig::from_edgecore(&EdgeCoreConfig::from_yaml_str(yaml).unwrap()).unwrap();
        assert_eq!(t.local_addr, "127.0.0.1:10999".parse().unwrap());
        assert_eq!(t.node_ip, None);
    }

    #[test]
    fn server_hosts() {
        let t = |s: &str| {
            TunnelConfig::new(
                s,
                Credentials::Pem {
                    ca: vec![],
                    cert: vec![],
                    key: vec![],
                },
                "n",
            )
        };
        assert_eq!(t("cloud.example:10004").server_host(), "cloud.example");
        assert_eq!(t("[fd00::1]:10004").server_host(), "fd00::1");
        assert_eq!(t("cloud").server_host(), "cloud");
    }
}
