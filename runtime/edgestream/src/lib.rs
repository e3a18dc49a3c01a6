//! EdgeStream: the edge end of KubeEdge's cloudstream tunnel, which carries `kubectl logs`,
//! `kubectl exec`/`attach` and metrics reads (`/stats/...`, `/metrics/...`) from the apiserver
//! to the node's kubelet port.
//!
//! # How a request gets here (KubeEdge v1.23.1, checked against the real cloud)
//!
//! 1. The apiserver dials the node as it dials any kubelet: `https://<Node InternalIP>:<Node
//!    status.daemonEndpoints.kubeletEndpoint.Port>`. On a KubeEdge cluster that address is
//!    routed (iptables DNAT: CloudCore's iptablesManager, or the operator) to CloudCore's
//!    stream server (`cloudStream.streamPort`, 10003). The apiserver's node proxy
//!    (`/api/v1/nodes/<node>/proxy/...`, what metrics reads use) refuses a loopback
//!    `InternalIP` ("address not allowed"); logs and exec do not care.
//! 2. The port is CloudCore's, not the node's: CloudCore negotiates one per CloudCore
//!    instance (10351 for the first; configmap `kubeedge/tunnelport`, annotation
//!    `tunnelportrecord.kubeedge.io`) and writes it into the Node's
//!    `status.daemonEndpoints.kubeletEndpoint.Port` each time the node's tunnel connects
//!    (trying every 20 s for up to 2 min while the Node does not exist, then refusing the
//!    tunnel with `CLOSE_CONNECT`). edgecore's kubelet reports its own port (`readOnlyPort`,
//!    10350) only when it registers the Node and leaves it out of later status updates, so
//!    CloudCore's stays: a node daemon must do the same, and must report an `InternalIP` equal
//!    to the address sent here ([`TunnelConfig::node_ip`]).
//! 3. The stream server finds the node's session: for logs, exec and attach by the pod's
//!    `spec.nodeName` (it reads the pod), for metrics by the host the apiserver dialled (the
//!    `InternalIP`) or the node name in `X-Forwarded-Uri`. It sends a `*_CONNECT` message with
//!    the apiserver's request (see `connect.rs`) and relays `DATA` both ways: for logs and
//!    metrics into a `200` chunked answer it has already begun, for exec and attach onto the
//!    apiserver's hijacked connection (so the kubelet's own `101` head goes back too).
//!
//! # The tunnel (this crate)
//!
//! - `wss://<modules.edgeStream.server>/v1/kubeedge/connect` (CloudCore's `tunnelPort`,
//!   10004), TLS ≥ 1.2 with the node's certificate (CloudCore requires one signed by its CA),
//!   headers `SessionHostNameOverride: <node name>` and `SessionInternalIP: <node address>`
//!   (written as Go canonicalises them, `Sessionhostnameoverride`/`Sessioninternalip`).
//! - Every message, both ways, is one WebSocket **text** frame holding a varint connection id,
//!   a varint type and the payload (`message.rs`); the bytes need not be UTF-8 (a connection id
//!   from 128 on, exec streams), which is why the framing is our own (`ws.rs`).
//! - Types: `LOGS_CONNECT` 0, `EXEC_CONNECT` 1, `METRIC_CONNECT` 2, `DATA` 3, `REMOVE_CONNECT`
//!   4, `CLOSE_CONNECT` 5, `ATTACH_CONNECT` 6.
//! - Who closes what: the edge sends `REMOVE_CONNECT` when a connection is over however it
//!   ended (the kubelet's answer ended, the upgraded connection closed, the cloud removed it);
//!   that ends the apiserver's request (for exec/attach CloudCore notices it at the client's
//!   next write: its loop blocks reading the client). The cloud sends `REMOVE_CONNECT` when the
//!   apiserver's request ended (`kubectl logs -f` interrupted); the edge then closes the
//!   kubelet connection. `CLOSE_CONNECT` ends the tunnel; the edge dials again.
//! - edgecore pings every 5 s ("ping you") and redials every 2 s; we ping alike and redial
//!   after 0.5 s doubling to 2 s.
//!
//! The local side (`local.rs`) replays the request to edged in this process
//! ([`TunnelConfig::kubelet_link`]) or else to [`TunnelConfig::local_addr`]
//! (KubeEdge: `127.0.0.1:10350`, where CloudCore addresses every request) and streams the
//! answer back.
//!
//! # Where we differ from edgecore, on purpose
//!
//! - Requests reach edged in this process ([`TunnelConfig::kubelet_link`]), not over TCP:
//!   edgecore's edgeStream dials `127.0.0.1:10350`, so that port must serve exec and attach to
//!   anyone on the node; edged's TCP port serves only what a kubelet's read-only port does.
//! - The server's certificate must chain to `tlsTunnelCAFile` (edgecore checks nothing); its
//!   name is not checked (CloudCore serves the tunnel with CloudHub's certificate).
//! - Logs are asked for with `Accept-Encoding: identity`, as edgecore asks metrics: CloudCore
//!   drops the kubelet's response headers, so a compressed body would reach kubectl unreadable.
//! - A request that cannot reach the kubelet, or is refused, still ends with
//!   `REMOVE_CONNECT` (edgecore's hangs until the client gives up); an exec/attach one is
//!   answered with an HTTP error (`502`, `503`, `400`) the apiserver passes on to kubectl.
//! - A message type KubeEdge does not have is skipped (edgecore panics), as is a connect for an
//!   id already open; a metrics line longer than a chunk is passed in pieces (Go's scanner ends
//!   the answer at 64 KiB); a cloud that answered pings and then falls silent for
//!   `readDeadline` is left and dialled again (edgecore waits for a write to fail).
//!
//! # Bounds
//!
//! One bounded queue to the tunnel's writer (a full one makes every local reader wait), one
//! bounded queue per upgraded connection for the cloud's bytes (a connection that does not
//! take them within the write deadline is closed), at most
//! [`TunnelConfig::max_connections`] connections, messages from the cloud at most 1 MiB (longer
//! ones are read past, never buffered). Failures and refusals are counted in [`Stats`].

#![warn(missing_docs)]

mod config;
mod connect;
mod local;
mod message;
mod session;
mod stats;
mod tls;
mod tunnel;
mod ws;

use std::sync::Arc;

use rustls::pki_types::ServerName;
use tokio_util::sync::CancellationToken;

pub use config::{Credentials, DEFAULT_LOCAL_PORT, Reconnect, TunnelConfig};
pub use message::{DecodeError, MAX_DATA, MessageType, TunnelMessage};
pub use stats::Stats;
pub use tunnel::{CONNECT_PATH, HEADER_NODE_IP, HEADER_NODE_NAME};

/// Why the tunnel cannot run.
#[derive(Debug, thiserror::Error)]
pub enum EdgeStreamError {
    /// A setting can never work; the message names it.
    #[error("edgestream: {0}")]
    Config(String),
}

/// The tunnel client: one per node.
pub struct EdgeStream {
    config: Arc<TunnelConfig>,
    server_name: ServerName<'static>,
    stats: Arc<Stats>,
    /// Dial only while this is true (see [`EdgeStream::after`]).
    gate: Option<tokio::sync::watch::Receiver<bool>>,
}

impl EdgeStream {
    /// Checks `config` (what can never work is refused here, naming the setting; missing
    /// certificate files are waited for by [`EdgeStream::run`], since the bootstrap writes
    /// them).
    pub fn new(config: TunnelConfig) -> Result<EdgeStream, EdgeStreamError> {
        let bad = |what: String| Err(EdgeStreamError::Config(what));
        if config.server.trim().is_empty() {
            return bad("modules.edgeStream.server is empty".into());
        }
        if config.node_name.is_empty() {
            return bad("the node name is empty".into());
        }
        if config.chunk_size == 0 || config.chunk_size > MAX_DATA {
            return bad(format!(
                "chunk size {} is not in 1..={MAX_DATA} (CloudCore reads at most 1 MiB a message)",
                config.chunk_size
            ));
        }
        if config.max_connections == 0 || config.outbound_queue == 0 || config.inbound_queue == 0 {
            return bad("connection and queue limits must be at least 1".into());
        }
        let server_name = match ServerName::try_from(config.server_host().to_owned()) {
            Ok(name) => name,
            Err(_) => {
                return bad(format!(
                    "modules.edgeStream.server {:?}: {:?} is not a host name or address",
                    config.server,
                    config.server_host()
                ));
            }
        };
        Ok(EdgeStream {
            config: Arc::new(config),
            server_name,
            stats: Arc::new(Stats::default()),
            gate: None,
        })
    }

    /// Dials only once `gate` is true: edged's "the Node exists". CloudCore's tunnel server
    /// writes the negotiated kubelet port into the Node when a tunnel opens; for a node it
    /// cannot find yet it retries every 20 s and then closes the tunnel, so a tunnel opened
    /// before registration leaves the Node with edged's own port for a while (or for good).
    pub fn after(mut self, gate: tokio::sync::watch::Receiver<bool>) -> EdgeStream {
        self.gate = Some(gate);
        self
    }

    /// The tunnel's counters (also a [`wedge_core::metrics::MetricsSource`] for `/metrics`).
    pub fn stats(&self) -> Arc<Stats> {
        self.stats.clone()
    }

    /// Keeps the tunnel up until `shutdown` is cancelled: dials, serves the session, redials
    /// after every failure or end with back-off. Returns `Ok` after shutdown, once the local
    /// connections are closed (within about 3 s).
    pub async fn run(self, shutdown: CancellationToken) -> Result<(), EdgeStreamError> {
        tunnel::run(
            self.config,
            self.server_name,
            self.stats,
            self.gate,
            shutdown,
        )
        .await;
        Ok(())
    }
}
