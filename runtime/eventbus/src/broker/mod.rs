//! The embedded MQTT 3.1.1 broker (`mqttMode` 0 and 1).
//!
//! Why our own and not rumqttd: rumqttd refuses subscriptions to filters starting with `$` and
//! never routes topics starting with `$` (bytebeamio/rumqtt#650), and every KubeEdge device topic
//! is `$hw/...`. The broker here is small: packets are encoded and decoded by rumqttc's MQTT 3.1.1
//! codec; this module adds sessions, topic routing with the `$` rule done right
//! ([`crate::topics::matches`]), QoS 0/1 (and QoS 2 from publishers), retained messages, wills,
//! keep-alive, client-id takeover and optional user name / password. Sessions are not persisted:
//! each connection starts clean.
//!
//! What a client can make it hold is bounded (`wedge.broker`): packet size and partial packets
//! ([`wire`]), silence (idle timeout, keep-alive 0 included), subscriptions per client (indexed
//! by topic level, [`trie`]), retained topics and bytes ([`retained`]), connections (from the
//! file descriptor budget, [`limits`]). A QoS 1/2 message for the eventbus is acknowledged only
//! once the eventbus's queue took it.
//!
//! Clients connect over plain TCP on `mqttServerInternal` and, when `wedge.broker.tls` names an
//! address, over TLS on a second listener; both share the connection budget and the rules
//! above. The TLS handshake runs in the connection's task under the CONNECT deadline, so a slow
//! or silent handshake never holds up accepting others.
//!
//! The module reaches the broker in-process through a [`LocalLink`]: no socket, no codec.

mod connection;
mod limits;
mod retained;
mod router;
mod stats;
#[cfg(test)]
mod tests;
mod trie;
mod wire;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use bytes::Bytes;
use rumqttc::QoS;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, mpsc};
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

pub use limits::connection_limit;
pub use router::Delivery;
pub use stats::BrokerStats;

use crate::error::EventBusError;
use crate::settings::BrokerUrl;
use crate::stats::Stats;
use connection::{ConnectionSettings, LOCAL_CLIENT_ID};
use router::{ClientKind, Router};
use wire::WireLimits;

/// Tuning of the embedded broker (`wedge.broker` and `mqttSessionQueueSize`).
#[derive(Debug, Clone)]
pub struct BrokerOptions {
    /// Who may log in and which topics each client may use (anyone, everything, by default).
    pub access: crate::access::AccessPolicy,
    /// Deliveries queued for a client (`mqttSessionQueueSize`) past which its connection stops
    /// reading the client's own packets until it catches up (flow control; nothing is dropped).
    pub queue: usize,
    /// Bytes queued for one client past which it is cut off as too slow (16 MiB).
    pub max_queued_bytes: usize,
    /// How long a write to a client may stall (it stopped reading) before it is cut off (30 s).
    pub slow_reader_timeout: Duration,
    /// Largest whole packet accepted or sent.
    pub max_packet: usize,
    /// Bytes of large partial packets all connections may hold together.
    pub max_pending_bytes: usize,
    /// Time a packet that started arriving has to arrive whole.
    pub packet_timeout: Duration,
    /// QoS 1 deliveries awaiting acknowledgement per client.
    pub max_inflight: usize,
    /// Most clients connected at once; further connections are closed at once.
    pub max_connections: usize,
    /// Subscriptions one network client may hold.
    pub max_filters: usize,
    /// Most retained topics kept.
    pub max_retained: usize,
    /// Most retained payload bytes kept.
    pub max_retained_bytes: u64,
    /// How long a new connection may take to send CONNECT.
    pub connect_timeout: Duration,
    /// Longest silence of a connected client (keep-alive 0 included).
    pub idle_timeout: Duration,
    /// The TLS listener, if any.
    pub tls: Option<TlsListener>,
}

/// A second listener whose clients speak TLS (`wedge.broker.tls`).
#[derive(Clone)]
pub struct TlsListener {
    /// `host:port` to bind.
    pub address: String,
    /// Certificate, key and client verification.
    pub config: Arc<rustls::ServerConfig>,
    /// Whether clients must present a certificate (said at start).
    pub client_certificates: bool,
    /// Largest whole packet on this listener; `None` = [`BrokerOptions::max_packet`].
    pub max_packet: Option<usize>,
}

impl std::fmt::Debug for TlsListener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsListener")
            .field("address", &self.address)
            .finish_non_exhaustive()
    }
}

impl TlsListener {
    /// A listener on `address` presenting `cert_file` with `key_file`; with `client_ca_file`,
    /// clients must present a certificate that CA signed. Fails naming the file that cannot be
    /// used.
    pub fn from_files(
        address: &str,
        cert_file: &std::path::Path,
        key_file: &std::path::Path,
        client_ca_file: Option<&std::path::Path>,
    ) -> Result<TlsListener, EventBusError> {
        Ok(TlsListener {
            address: address.to_owned(),
            config: crate::tls::server_config(cert_file, key_file, client_ca_file)?,
            client_certificates: client_ca_file.is_some(),
            max_packet: None,
        })
    }
}

impl Default for BrokerOptions {
    fn default() -> BrokerOptions {
        BrokerOptions {
            access: crate::access::AccessPolicy::open(),
            queue: 100,
            max_queued_bytes: 16 * 1024 * 1024,
            slow_reader_timeout: Duration::from_secs(30),
            max_packet: 1024 * 1024 + 64 * 1024,
            max_pending_bytes: 64 * 1024 * 1024,
            packet_timeout: Duration::from_secs(10),
            max_inflight: 100,
            max_connections: 1024,
            max_filters: 4096,
            max_retained: 10_000,
            max_retained_bytes: 64 * 1024 * 1024,
            connect_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(300),
            tls: None,
        }
    }
}

/// A running embedded broker. Stops (closing every connection) on [`EmbeddedBroker::stop`], when
/// the token it was started under is cancelled, or when dropped.
pub struct EmbeddedBroker {
    router: Arc<Router>,
    settings: Arc<ConnectionSettings>,
    local_addr: SocketAddr,
    tls_addr: Option<SocketAddr>,
    token: CancellationToken,
    tasks: TaskTracker,
}

impl EmbeddedBroker {
    /// Binds `url` and starts accepting clients. Fails if the address cannot be bound, so the
    /// caller knows the broker listens once this returns.
    pub async fn start(
        url: &BrokerUrl,
        options: BrokerOptions,
        stats: Arc<Stats>,
        parent: &CancellationToken,
    ) -> Result<EmbeddedBroker, EventBusError> {
        let (listener, local_addr) = bind(&url.host, url.port, &url.to_string()).await?;
        let tls = match &options.tls {
            Some(tls) => {
                let (host, port) = split_address(&tls.address)?;
                let (listener, addr) = bind(host, port, &tls.address).await?;
                Some((listener, addr, TlsAcceptor::from(tls.config.clone())))
            }
            None => None,
        };
        let tls_max_packet = options.tls.as_ref().and_then(|t| t.max_packet);
        let router = Arc::new(Router::new(
            stats.clone(),
            options.max_retained,
            options.max_retained_bytes,
        ));
        let token = parent.child_token();
        let tasks = TaskTracker::new();
        let limits = Arc::new(WireLimits {
            max_packet: options.max_packet,
            packet_timeout: options.packet_timeout,
            pending: Arc::new(Semaphore::new(
                options
                    .max_pending_bytes
                    .max(options.max_packet)
                    .max(tls_max_packet.unwrap_or(0))
                    .min(Semaphore::MAX_PERMITS),
            )),
        });
        announce_access(&options.access, local_addr);
        let settings = Arc::new(ConnectionSettings {
            access: options.access,
            stats: stats.clone(),
            queue: options.queue.max(1),
            max_queued_bytes: options.max_queued_bytes.max(options.max_packet),
            slow_reader_timeout: options.slow_reader_timeout,
            max_inflight: options.max_inflight.max(1),
            connect_timeout: options.connect_timeout,
            idle_timeout: options.idle_timeout,
            max_filters: options.max_filters,
            limits,
        });
        let max_connections = options.max_connections.max(1);
        stats
            .broker
            .max_connections
            .store(max_connections as u64, Ordering::Relaxed);
        stats.internal_listening.store(true, Ordering::Relaxed);
        tracing::info!(
            addr = %local_addr,
            max_connections,
            max_packet = options.max_packet,
            "embedded MQTT broker listening"
        );
        let slots = Arc::new(Semaphore::new(max_connections));
        let tls_addr = tls.as_ref().map(|(_, addr, _)| *addr);
        if let Some((listener, addr, acceptor)) = tls {
            // Its own packet limit, the same partial-packet budget and everything else.
            let mut tls_settings = (*settings).clone();
            let max_packet = tls_max_packet.unwrap_or(options.max_packet);
            tls_settings.limits = Arc::new(WireLimits {
                max_packet,
                packet_timeout: settings.limits.packet_timeout,
                pending: settings.limits.pending.clone(),
            });
            tracing::info!(
                %addr,
                max_packet,
                client_certificates = options.tls.as_ref().is_some_and(|t| t.client_certificates),
                "embedded MQTT broker listening with TLS"
            );
            tasks.spawn(accept_loop(
                listener,
                Some(acceptor),
                router.clone(),
                Arc::new(tls_settings),
                slots.clone(),
                tasks.clone(),
                stats.clone(),
                token.clone(),
            ));
        }
        tasks.spawn(accept_loop(
            listener,
            None,
            router.clone(),
            settings.clone(),
            slots,
            tasks.clone(),
            stats,
            token.clone(),
        ));
        Ok(EmbeddedBroker {
            router,
            settings,
            local_addr,
            tls_addr,
            token,
            tasks,
        })
    }

    /// The address the broker listens on (the real port when 0 was asked for).
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// The address of the TLS listener, when there is one.
    pub fn tls_local_addr(&self) -> Option<SocketAddr> {
        self.tls_addr
    }

    /// Serves one client over an already connected byte stream, as the plain listener serves
    /// an accepted socket (same rules and limits, no connection slot taken); returns when the
    /// session ends. For transports the broker does not listen on itself, and for driving
    /// sessions from fuzz targets without sockets.
    pub async fn serve_stream<S>(&self, stream: S, peer: SocketAddr)
    where
        S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    {
        connection::serve(
            Box::new(stream),
            peer,
            self.router.clone(),
            self.settings.clone(),
            self.token.clone(),
        )
        .await;
    }

    /// An in-process client whose deliveries go to `deliveries`.
    pub fn local_link(&self, deliveries: mpsc::Sender<Delivery>) -> LocalLink {
        let attachment = self.router.attach(
            LOCAL_CLIENT_ID,
            true,
            Some(router::Outlet::Eventbus(deliveries)),
            ClientKind::Eventbus,
            &self.token,
        );
        LocalLink {
            router: self.router.clone(),
            generation: attachment.generation,
            connection: attachment.connection,
        }
    }

    /// Stops listening, closes every connection and waits (up to 2 s) for their tasks.
    pub async fn stop(self) {
        self.token.cancel();
        self.router.kick_all();
        self.tasks.close();
        if tokio::time::timeout(Duration::from_secs(2), self.tasks.wait())
            .await
            .is_err()
        {
            tracing::warn!("embedded broker tasks still running 2 s after stop");
        }
    }
}

impl Drop for EmbeddedBroker {
    fn drop(&mut self) {
        self.token.cancel();
    }
}

/// Says at start who may use the broker: anonymous access to everything is KubeEdge's
/// default, and an operator must know it is on.
fn announce_access(access: &crate::access::AccessPolicy, addr: SocketAddr) {
    let users = access.user_count();
    match access.anonymous() {
        Some(acl) if *acl == crate::access::Acl::everything() => tracing::warn!(
            %addr,
            users,
            "MQTT: anonymous clients may publish and subscribe to every topic (KubeEdge's default); \
             set wedge.mqtt.usersFile to require a log-in and limit each client's topics"
        ),
        Some(acl) => tracing::info!(
            %addr,
            users,
            publish = ?acl.publish,
            subscribe = ?acl.subscribe,
            "MQTT: anonymous clients allowed, limited to the users file's anonymous topics"
        ),
        None => tracing::info!(%addr, users, "MQTT: log-in required; anonymous clients refused"),
    }
}

/// Binds `host:port`; `shown` names the address in errors.
async fn bind(
    host: &str,
    port: u16,
    shown: &str,
) -> Result<(TcpListener, SocketAddr), EventBusError> {
    let listen_error = |source| EventBusError::Listen {
        addr: shown.to_owned(),
        source,
    };
    let listener = TcpListener::bind((host, port))
        .await
        .map_err(listen_error)?;
    let addr = listener.local_addr().map_err(listen_error)?;
    Ok((listener, addr))
}

/// `host:port` (`[v6]:port` too) into its parts.
fn split_address(address: &str) -> Result<(&str, u16), EventBusError> {
    let bad = || EventBusError::Listen {
        addr: address.to_owned(),
        source: std::io::Error::new(std::io::ErrorKind::InvalidInput, "not host:port"),
    };
    let (host, port) = address.rsplit_once(':').ok_or_else(bad)?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let port = port.parse().map_err(|_| bad())?;
    Ok((host, port))
}

/// Runs a client's connection: the TLS handshake first on the TLS listener (under the CONNECT
/// deadline, counted when it fails), then the MQTT session.
async fn serve_accepted(
    stream: TcpStream,
    peer: SocketAddr,
    tls: Option<TlsAcceptor>,
    router: Arc<Router>,
    settings: Arc<ConnectionSettings>,
    token: CancellationToken,
) {
    let _ = stream.set_nodelay(true);
    let transport: Box<dyn wire::Transport> = match tls {
        None => Box::new(stream),
        Some(acceptor) => {
            let handshake = tokio::select! {
                _ = token.cancelled() => return,
                r = tokio::time::timeout(settings.connect_timeout, acceptor.accept(stream)) => r,
            };
            match handshake {
                Ok(Ok(stream)) => Box::new(stream),
                Ok(Err(e)) => {
                    settings.stats.broker.closed(stats::Closed::TlsHandshake);
                    tracing::debug!(%peer, "TLS handshake failed: {e}");
                    return;
                }
                Err(_) => {
                    settings.stats.broker.closed(stats::Closed::TlsHandshake);
                    tracing::debug!(%peer, "TLS handshake not done in time (wedge.broker.connectTimeoutMs)");
                    return;
                }
            }
        }
    };
    connection::serve(transport, peer, router, settings, token).await;
}

#[allow(clippy::too_many_arguments)]
async fn accept_loop(
    listener: TcpListener,
    tls: Option<TlsAcceptor>,
    router: Arc<Router>,
    settings: Arc<ConnectionSettings>,
    slots: Arc<Semaphore>,
    tasks: TaskTracker,
    stats: Arc<Stats>,
    token: CancellationToken,
) {
    loop {
        let accepted = tokio::select! {
            _ = token.cancelled() => break,
            accepted = listener.accept() => accepted,
        };
        let (stream, peer) = match accepted {
            Ok(pair) => pair,
            Err(e) => {
                // Out of file descriptors and the like: wait a little rather than spin, and
                // go on accepting once descriptors are free again.
                stats.broker.accept_errors.fetch_add(1, Ordering::Relaxed);
                tracing::warn!("embedded broker cannot accept: {e}; retrying in 100 ms");
                tokio::select! {
                    _ = token.cancelled() => break,
                    _ = tokio::time::sleep(Duration::from_millis(100)) => continue,
                }
            }
        };
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            stats.broker.closed(stats::Closed::ConnectionLimit);
            tracing::warn!(%peer, "embedded broker at its connection limit (wedge.broker.maxConnections); closing");
            continue;
        };
        let (router, settings, token) = (router.clone(), settings.clone(), token.clone());
        let tls = tls.clone();
        tasks.spawn(async move {
            serve_accepted(stream, peer, tls, router, settings, token).await;
            drop(slot);
        });
    }
    if tls.is_none() {
        stats.internal_listening.store(false, Ordering::Relaxed);
        tracing::info!("embedded MQTT broker stopped");
    }
}

/// The module's in-process connection to the embedded broker.
pub struct LocalLink {
    router: Arc<Router>,
    generation: u64,
    connection: u64,
}

impl LocalLink {
    /// Subscribes (QoS 1) to `filter`; the caller has validated it.
    pub fn subscribe(&self, filter: &str) {
        // The eventbus's link has no filter cap, so this cannot be refused.
        let _ = self
            .router
            .subscribe(self.generation, filter, QoS::AtLeastOnce);
    }

    /// Drops the subscription to `filter`.
    pub fn unsubscribe(&self, filter: &str) {
        self.router.unsubscribe(self.generation, filter);
    }

    /// Publishes to every matching client; never waits, since the module publishing here is
    /// the one that drains its own queue (network clients' queues take every delivery).
    pub fn publish(&self, topic: &str, payload: Bytes, qos: QoS, retain: bool) {
        self.router.publish(topic, payload, qos, retain, false);
    }
}

impl Drop for LocalLink {
    fn drop(&mut self) {
        self.router
            .detach(LOCAL_CLIENT_ID, self.generation, self.connection);
    }
}
