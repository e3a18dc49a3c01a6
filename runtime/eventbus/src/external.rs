//! The connections to the external broker (`mqttMode` 1 and 2), as edgecore makes them: one
//! subscribing client and one publishing client, MQTT 3.1.1, clean sessions, keep-alive 30 s,
//! QoS 1 both ways, retain false.
//!
//! A clean session forgets subscriptions when the link drops, so the subscribing client's driver
//! subscribes to the whole topic set again on every CONNACK; between failures it waits with
//! doubling back-off.

use std::collections::BTreeSet;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use bytes::Bytes;
use rumqttc::{
    AsyncClient, ConnectReturnCode, Event, EventLoop, MqttOptions, Packet, QoS, SubscribeFilter,
    TlsConfiguration, Transport,
};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::broker::Delivery;
use crate::error::EventBusError;
use crate::settings::EventBusSettings;
use crate::stats::{DropReason, Stats};
use crate::tls;

/// Largest packet exchanged with the external broker: room for any payload up to the cap plus
/// headers, so an oversized one is still received whole and dropped by the module, not by the
/// codec (which would cost the connection).
fn packet_limit(max_payload: usize) -> usize {
    max_payload.saturating_mul(2).max(16 * 1024 * 1024)
}

/// The pair of connections to the external broker.
pub struct ExternalLink {
    sub: AsyncClient,
    publ: AsyncClient,
    topics: Arc<Mutex<BTreeSet<String>>>,
    stats: Arc<Stats>,
    max_packet: usize,
}

#[derive(Clone, Copy, Debug)]
enum Role {
    Subscriber,
    Publisher,
}

impl ExternalLink {
    /// Starts both connections' drivers on `tasks`; they dial (and redial) in the background
    /// until `token` is cancelled. Messages on `topics` go to `inbound`.
    pub fn start(
        settings: &EventBusSettings,
        topics: impl IntoIterator<Item = String>,
        inbound: mpsc::Sender<Delivery>,
        stats: Arc<Stats>,
        tasks: &TaskTracker,
        token: &CancellationToken,
    ) -> Result<ExternalLink, EventBusError> {
        let transport = if settings.external.tls {
            Some(Transport::tls_with_config(TlsConfiguration::Rustls(
                tls::client_config(settings.tls.as_ref())?,
            )))
        } else {
            None
        };
        let max_packet = packet_limit(settings.max_payload);
        let options = |id: &str| {
            let mut o =
                MqttOptions::new(id, settings.external.host.clone(), settings.external.port);
            o.set_keep_alive(settings.keep_alive)
                .set_clean_session(true)
                .set_max_packet_size(max_packet, max_packet);
            if let Some(creds) = &settings.credentials {
                o.set_credentials(creds.username.clone(), creds.password.clone());
            }
            if let Some(transport) = &transport {
                o.set_transport(transport.clone());
            }
            o
        };
        let queue = settings.session_queue_size.max(10);
        let (sub, sub_loop) = AsyncClient::new(options(&settings.sub_client_id), queue);
        let (publ, pub_loop) = AsyncClient::new(options(&settings.pub_client_id), queue);
        let topics = Arc::new(Mutex::new(topics.into_iter().collect::<BTreeSet<_>>()));
        let backoff = (settings.reconnect_initial, settings.reconnect_max);
        tasks.spawn(drive(
            Role::Subscriber,
            sub_loop,
            sub.clone(),
            topics.clone(),
            Some(inbound),
            stats.clone(),
            backoff,
            token.clone(),
        ));
        tasks.spawn(drive(
            Role::Publisher,
            pub_loop,
            publ.clone(),
            topics.clone(),
            None,
            stats.clone(),
            backoff,
            token.clone(),
        ));
        tracing::info!(broker = %settings.external, "dialling the external MQTT broker");
        Ok(ExternalLink {
            sub,
            publ,
            topics,
            stats,
            max_packet,
        })
    }

    /// Adds `filter` to the subscriptions (kept for reconnects) and subscribes now.
    pub fn subscribe(&self, filter: &str) {
        lock(&self.topics).insert(filter.to_owned());
        if let Err(e) = self.sub.try_subscribe(filter, QoS::AtLeastOnce) {
            // The next CONNACK re-subscribes the whole set.
            tracing::warn!(filter, "external subscribe not queued now: {e}");
        }
    }

    /// Removes `filter` from the subscriptions and unsubscribes now.
    pub fn unsubscribe(&self, filter: &str) {
        lock(&self.topics).remove(filter);
        if let Err(e) = self.sub.try_unsubscribe(filter) {
            tracing::warn!(filter, "external unsubscribe not queued now: {e}");
        }
    }

    /// Publishes with QoS 1, retain false. Dropped (and counted) when the connection's queue
    /// is full or the message is larger than the packet limit.
    pub fn publish(&self, topic: &str, payload: Bytes) {
        if payload.len() + topic.len() + 16 > self.max_packet {
            tracing::warn!(
                topic,
                size = payload.len(),
                "message too large for the external broker; dropped"
            );
            self.stats.count_drop(DropReason::Unpublishable);
            return;
        }
        match self
            .publ
            .try_publish(topic, QoS::AtLeastOnce, false, payload)
        {
            Ok(()) => {
                self.stats
                    .published_external
                    .fetch_add(1, Ordering::Relaxed);
            }
            Err(e) => {
                tracing::warn!(topic, "external publish dropped: {e}");
                self.stats.count_drop(DropReason::QueueFull);
            }
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

#[allow(clippy::too_many_arguments)]
async fn drive(
    role: Role,
    mut eventloop: EventLoop,
    client: AsyncClient,
    topics: Arc<Mutex<BTreeSet<String>>>,
    inbound: Option<mpsc::Sender<Delivery>>,
    stats: Arc<Stats>,
    (initial, max): (Duration, Duration),
    token: CancellationToken,
) {
    let mut backoff = initial;
    let mut connected = false;
    loop {
        let event = tokio::select! {
            _ = token.cancelled() => break,
            event = eventloop.poll() => event,
        };
        match event {
            Ok(Event::Incoming(Packet::ConnAck(ack))) if ack.code == ConnectReturnCode::Success => {
                connected = true;
                backoff = initial;
                tracing::info!(role = ?role, "connected to the external MQTT broker");
                if let Role::Subscriber = role {
                    stats.external_connected.store(true, Ordering::Relaxed);
                    let filters: Vec<SubscribeFilter> = lock(&topics)
                        .iter()
                        .map(|t| SubscribeFilter::new(t.clone(), QoS::AtLeastOnce))
                        .collect();
                    if !filters.is_empty()
                        && let Err(e) = client.try_subscribe_many(filters)
                    {
                        tracing::error!("cannot queue the subscriptions: {e}");
                    }
                }
            }
            Ok(Event::Incoming(Packet::Publish(publish))) => {
                let Some(inbound) = &inbound else { continue };
                let delivery = Delivery {
                    topic: Arc::from(publish.topic.as_str()),
                    payload: publish.payload,
                    qos: publish.qos,
                    retain: publish.retain,
                };
                // Waiting here is back-pressure towards the broker, bounded by the queue.
                tokio::select! {
                    _ = token.cancelled() => break,
                    sent = inbound.send(delivery) => if sent.is_err() { break },
                }
            }
            Ok(Event::Incoming(Packet::SubAck(ack))) => {
                if ack
                    .return_codes
                    .iter()
                    .any(|c| matches!(c, rumqttc::SubscribeReasonCode::Failure))
                {
                    tracing::warn!("the external broker refused a subscription");
                }
            }
            Ok(_) => {}
            Err(e) => {
                if connected {
                    tracing::warn!(role = ?role, "external MQTT broker connection lost: {e}");
                } else {
                    tracing::debug!(role = ?role, "external MQTT broker not reachable: {e}; retrying in {backoff:?}");
                }
                connected = false;
                if let Role::Subscriber = role {
                    stats.external_connected.store(false, Ordering::Relaxed);
                }
                tokio::select! {
                    _ = token.cancelled() => break,
                    _ = tokio::time::sleep(backoff) => {}
                }
                backoff = (backoff * 2).min(max);
            }
        }
    }
    if let Role::Subscriber = role {
        stats.external_connected.store(false, Ordering::Relaxed);
    }
    // Best effort: tell the broker we leave, so it drops the session at once.
    let _ = client.try_disconnect();
    let _ = tokio::time::timeout(Duration::from_millis(200), eventloop.poll()).await;
}
