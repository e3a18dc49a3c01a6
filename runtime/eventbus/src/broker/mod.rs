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
//! The module reaches the broker in-process through a [`LocalLink`]: no socket, no codec.

mod connection;
mod router;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use bytes::Bytes;
use rumqttc::QoS;
use tokio::net::TcpListener;
use tokio::sync::{Semaphore, mpsc};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

pub use router::Delivery;

use crate::error::EventBusError;
use crate::settings::BrokerUrl;
use crate::stats::Stats;
use connection::{ConnectionSettings, LOCAL_CLIENT_ID};
use router::Router;

/// Tuning of the embedded broker.
#[derive(Debug, Clone)]
pub struct BrokerOptions {
    /// Who may log in and which topics each client may use (anyone, everything, by default).
    pub access: crate::access::AccessPolicy,
    /// Deliveries queued per client (`mqttSessionQueueSize`) before they are dropped.
    pub queue: usize,
    /// Largest packet accepted or sent.
    pub max_packet: usize,
    /// QoS 1 deliveries awaiting acknowledgement per client.
    pub max_inflight: usize,
    /// Most clients connected at once; further connections are closed at once.
    pub max_connections: usize,
    /// Most retained topics kept.
    pub max_retained: usize,
    /// How long a new connection may take to send CONNECT.
    pub connect_timeout: Duration,
}

impl Default for BrokerOptions {
    fn default() -> BrokerOptions {
        BrokerOptions {
            access: crate::access::AccessPolicy::open(),
            queue: 100,
            max_packet: 16 * 1024 * 1024,
            max_inflight: 100,
            max_connections: 1024,
            max_retained: 10_000,
            connect_timeout: Duration::from_secs(10),
        }
    }
}

/// A running embedded broker. Stops (closing every connection) on [`EmbeddedBroker::stop`], when
/// the token it was started under is cancelled, or when dropped.
pub struct EmbeddedBroker {
    router: Arc<Router>,
    local_addr: SocketAddr,
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
        let listener = TcpListener::bind((url.host.as_str(), url.port))
            .await
            .map_err(|source| EventBusError::Listen {
                addr: url.to_string(),
                source,
            })?;
        let local_addr = listener
            .local_addr()
            .map_err(|source| EventBusError::Listen {
                addr: url.to_string(),
                source,
            })?;
        let router = Arc::new(Router::new(stats.clone(), options.max_retained));
        let token = parent.child_token();
        let tasks = TaskTracker::new();
        announce_access(&options.access, local_addr);
        let settings = Arc::new(ConnectionSettings {
            access: options.access,
            stats: stats.clone(),
            queue: options.queue,
            max_packet: options.max_packet,
            max_inflight: options.max_inflight.max(1),
            connect_timeout: options.connect_timeout,
        });
        stats.internal_listening.store(true, Ordering::Relaxed);
        tracing::info!(addr = %local_addr, "embedded MQTT broker listening");
        tasks.spawn(accept_loop(
            listener,
            router.clone(),
            settings,
            Arc::new(Semaphore::new(options.max_connections.max(1))),
            tasks.clone(),
            stats,
            token.clone(),
        ));
        Ok(EmbeddedBroker {
            router,
            local_addr,
            token,
            tasks,
        })
    }

    /// The address the broker listens on (the real port when 0 was asked for).
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// An in-process client whose deliveries go to `deliveries`.
    pub fn local_link(&self, deliveries: mpsc::Sender<Delivery>) -> LocalLink {
        let attachment = self.router.attach(LOCAL_CLIENT_ID, deliveries, &self.token);
        LocalLink {
            router: self.router.clone(),
            generation: attachment.generation,
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

async fn accept_loop(
    listener: TcpListener,
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
                // Out of file descriptors and the like: wait a little rather than spin.
                tracing::warn!("embedded broker cannot accept: {e}");
                tokio::select! {
                    _ = token.cancelled() => break,
                    _ = tokio::time::sleep(Duration::from_millis(100)) => continue,
                }
            }
        };
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            tracing::warn!(%peer, "embedded broker at its connection limit; closing");
            continue;
        };
        let (router, settings, token) = (router.clone(), settings.clone(), token.clone());
        tasks.spawn(async move {
            connection::serve(stream, peer, router, settings, token).await;
            drop(slot);
        });
    }
    stats.internal_listening.store(false, Ordering::Relaxed);
    tracing::info!("embedded MQTT broker stopped");
}

/// The module's in-process connection to the embedded broker.
pub struct LocalLink {
    router: Arc<Router>,
    generation: u64,
}

impl LocalLink {
    /// Subscribes (QoS 1) to `filter`; the caller has validated it.
    pub fn subscribe(&self, filter: &str) {
        self.router
            .subscribe(LOCAL_CLIENT_ID, self.generation, filter, QoS::AtLeastOnce);
    }

    /// Drops the subscription to `filter`.
    pub fn unsubscribe(&self, filter: &str) {
        self.router
            .unsubscribe(LOCAL_CLIENT_ID, self.generation, filter);
    }

    /// Publishes to every matching client.
    pub fn publish(&self, topic: &str, payload: Bytes, qos: QoS, retain: bool) {
        self.router.publish(topic, payload, qos, retain);
    }
}

impl Drop for LocalLink {
    fn drop(&mut self) {
        self.router.detach(LOCAL_CLIENT_ID, self.generation);
    }
}
