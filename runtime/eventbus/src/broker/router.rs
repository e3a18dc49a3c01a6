//! The embedded broker's routing state: who is connected, what they subscribed to, and the
//! retained messages.
//!
//! One mutex guards it all. Fan-out only does `try_send` into each client's bounded queue, so the
//! lock is held for microseconds and never across an await; a client whose queue is full loses
//! that delivery (counted) instead of slowing every publisher down.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, MutexGuard};

use bytes::Bytes;
use rumqttc::QoS;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::stats::Stats;
use crate::topics::matches;

/// One message on its way to one subscriber (or from a broker to the module).
#[derive(Debug, Clone)]
pub struct Delivery {
    /// The topic it was published on.
    pub topic: Arc<str>,
    /// The payload.
    pub payload: Bytes,
    /// The QoS it is delivered with.
    pub qos: QoS,
    /// True when it is a retained message sent because of a new subscription.
    pub retain: bool,
}

struct Client {
    tx: mpsc::Sender<Delivery>,
    filters: HashMap<String, QoS>,
    kick: CancellationToken,
    generation: u64,
}

#[derive(Default)]
struct State {
    clients: HashMap<String, Client>,
    retained: HashMap<String, (Bytes, QoS)>,
    next_generation: u64,
}

/// A client's place in the router, returned by [`Router::attach`].
pub(crate) struct Attachment {
    /// Tells this attachment from a later one under the same client id.
    pub generation: u64,
    /// Fires when another connection takes the client id over, or the broker stops.
    pub kick: CancellationToken,
}

/// The broker's routing table.
pub(crate) struct Router {
    state: Mutex<State>,
    stats: Arc<Stats>,
    max_retained: usize,
}

/// The highest QoS the broker grants and delivers with (no outbound QoS 2 flow).
pub(crate) const MAX_QOS: QoS = QoS::AtLeastOnce;

impl Router {
    /// An empty router that keeps at most `max_retained` retained topics.
    pub fn new(stats: Arc<Stats>, max_retained: usize) -> Router {
        Router {
            state: Mutex::new(State::default()),
            stats,
            max_retained,
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // The state is plain maps; a panic elsewhere leaves them usable.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Registers `client_id` with its delivery queue, taking the id over from any connection
    /// that holds it (MQTT-3.1.4-2): the old one is kicked.
    pub fn attach(
        &self,
        client_id: &str,
        tx: mpsc::Sender<Delivery>,
        parent: &CancellationToken,
    ) -> Attachment {
        let kick = parent.child_token();
        let mut state = self.state();
        state.next_generation += 1;
        let generation = state.next_generation;
        let previous = state.clients.insert(
            client_id.to_owned(),
            Client {
                tx,
                filters: HashMap::new(),
                kick: kick.clone(),
                generation,
            },
        );
        if let Some(previous) = previous {
            tracing::info!(client_id, "client id taken over by a new connection");
            previous.kick.cancel();
        }
        self.stats
            .broker_clients
            .store(state.clients.len() as u64, Ordering::Relaxed);
        Attachment { generation, kick }
    }

    /// Removes a client, unless its id has been taken over since.
    pub fn detach(&self, client_id: &str, generation: u64) {
        let mut state = self.state();
        if state
            .clients
            .get(client_id)
            .is_some_and(|c| c.generation == generation)
        {
            state.clients.remove(client_id);
        }
        self.stats
            .broker_clients
            .store(state.clients.len() as u64, Ordering::Relaxed);
    }

    /// Adds a subscription and queues the retained messages it matches. Returns the QoS granted.
    pub fn subscribe(&self, client_id: &str, generation: u64, filter: &str, qos: QoS) -> QoS {
        let granted = min_qos(qos, MAX_QOS);
        let mut state = self.state();
        let State {
            clients, retained, ..
        } = &mut *state;
        let Some(client) = clients
            .get_mut(client_id)
            .filter(|c| c.generation == generation)
        else {
            return granted;
        };
        client.filters.insert(filter.to_owned(), granted);
        for (topic, (payload, stored_qos)) in retained.iter() {
            if matches(topic, filter) {
                let delivery = Delivery {
                    topic: Arc::from(topic.as_str()),
                    payload: payload.clone(),
                    qos: min_qos(*stored_qos, granted),
                    retain: true,
                };
                if client.tx.try_send(delivery).is_err() {
                    self.stats.broker_dropped.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
        granted
    }

    /// Removes a subscription.
    pub fn unsubscribe(&self, client_id: &str, generation: u64, filter: &str) {
        let mut state = self.state();
        if let Some(client) = state
            .clients
            .get_mut(client_id)
            .filter(|c| c.generation == generation)
        {
            client.filters.remove(filter);
        }
    }

    /// Routes a message to every matching subscriber (once each, with the highest matching
    /// QoS), storing or clearing it as retained when `retain` is set.
    pub fn publish(&self, topic: &str, payload: Bytes, qos: QoS, retain: bool) {
        let mut state = self.state();
        if retain {
            if payload.is_empty() {
                state.retained.remove(topic);
            } else if state.retained.len() < self.max_retained || state.retained.contains_key(topic)
            {
                state
                    .retained
                    .insert(topic.to_owned(), (payload.clone(), qos));
            } else {
                tracing::warn!(
                    topic,
                    limit = self.max_retained,
                    "retained message not kept: too many retained topics"
                );
            }
        }
        let topic: Arc<str> = Arc::from(topic);
        for (client_id, client) in &state.clients {
            let best = client
                .filters
                .iter()
                .filter(|(filter, _)| matches(&topic, filter))
                .map(|(_, q)| *q)
                .max_by_key(|q| *q as u8);
            let Some(sub_qos) = best else { continue };
            let delivery = Delivery {
                topic: topic.clone(),
                payload: payload.clone(),
                qos: min_qos(qos, sub_qos),
                retain: false,
            };
            if client.tx.try_send(delivery).is_err() {
                self.stats.broker_dropped.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(
                    client_id = %client_id,
                    topic = %topic,
                    "client queue full; message dropped for this client"
                );
            }
        }
    }

    /// Kicks every client (broker shutdown).
    pub fn kick_all(&self) {
        for client in self.state().clients.values() {
            client.kick.cancel();
        }
    }
}

/// The lower of two QoS levels.
pub(crate) fn min_qos(a: QoS, b: QoS) -> QoS {
    if (a as u8) <= (b as u8) { a } else { b }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn router() -> Router {
        Router::new(Arc::default(), 10)
    }

    #[test]
    fn routes_once_with_best_qos_and_keeps_retained() {
        let r = router();
        let token = CancellationToken::new();
        let (tx, mut rx) = mpsc::channel(10);
        let a = r.attach("c", tx, &token);
        r.subscribe(
            "c",
            a.generation,
            "$hw/events/device/+/+/twin/+",
            QoS::AtMostOnce,
        );
        r.subscribe("c", a.generation, "$hw/events/device/#", QoS::ExactlyOnce);
        r.publish(
            "$hw/events/device/ns/d/twin/update",
            Bytes::from_static(b"x"),
            QoS::AtLeastOnce,
            false,
        );
        let d = rx.try_recv().unwrap();
        assert_eq!(d.qos, QoS::AtLeastOnce);
        assert!(rx.try_recv().is_err(), "delivered once");

        r.publish("a/b", Bytes::from_static(b"kept"), QoS::AtLeastOnce, true);
        assert_eq!(
            r.subscribe("c", a.generation, "a/+", QoS::AtMostOnce),
            QoS::AtMostOnce
        );
        let d = rx.try_recv().unwrap();
        assert!(d.retain);
        assert_eq!(d.qos, QoS::AtMostOnce);
        r.publish("a/b", Bytes::new(), QoS::AtMostOnce, true);
        let cleared = rx.try_recv().unwrap();
        assert!(cleared.payload.is_empty() && !cleared.retain);
        r.subscribe("c", a.generation, "a/#", QoS::AtMostOnce);
        assert!(rx.try_recv().is_err(), "retained message cleared");
    }

    #[test]
    fn takeover_kicks_the_old_connection() {
        let r = router();
        let token = CancellationToken::new();
        let (tx1, _rx1) = mpsc::channel(1);
        let (tx2, _rx2) = mpsc::channel(1);
        let first = r.attach("c", tx1, &token);
        let second = r.attach("c", tx2, &token);
        assert!(first.kick.is_cancelled());
        assert!(!second.kick.is_cancelled());
        r.detach("c", first.generation);
        assert_eq!(r.stats.broker_clients.load(Ordering::Relaxed), 1);
        r.detach("c", second.generation);
        assert_eq!(r.stats.broker_clients.load(Ordering::Relaxed), 0);
    }
}
