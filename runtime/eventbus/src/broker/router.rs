//! The embedded broker's routing state: who is connected, what they subscribed to, and the
//! retained messages.
//!
//! One mutex guards it all. Subscriptions are indexed by topic level ([`super::trie`]), so
//! routing costs the matching subscriptions, not every filter held. Fan-out never waits, so the
//! lock is held for microseconds and never across an await:
//! - a network client's queue ([`ClientQueue`]) takes every delivery: nothing is dropped for a
//!   client that reads. Its connection flow-controls itself (it stops reading the client's own
//!   packets while its queue is over `mqttSessionQueueSize`), and a client whose queue passes
//!   `max_queued_bytes` — it reads slower than messages arrive — is cut off, counted and logged
//!   with its id, never silently shortened;
//! - the eventbus's own queue is bounded: a QoS 1/2 delivery that does not fit is handed back to
//!   the publisher ([`Pending`]), which waits for room before it acknowledges — an acknowledged
//!   message is never lost on its way to the bus.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use bytes::Bytes;
use rumqttc::QoS;
use tokio::sync::mpsc;
use tokio::sync::mpsc::error::TrySendError;
use tokio_util::sync::CancellationToken;

use super::retained::{NotKept, Retained};
use super::trie::FilterTrie;
use crate::stats::Stats;

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

/// What kind of client attaches, which decides what happens when its queue is full.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ClientKind {
    /// A network client: its queue takes every delivery up to `max_queued_bytes`, past which
    /// the client is cut off; at most `max_filters` subscriptions.
    Network {
        /// `wedge.broker.maxFiltersPerClient`.
        max_filters: usize,
        /// Bytes (topics and payloads) queued for the client before it is cut off as too slow.
        max_queued_bytes: usize,
    },
    /// The eventbus's own link: a QoS 1/2 publisher waits for room in its queue before it is
    /// acknowledged, so an acknowledged message always reaches the bus.
    Eventbus,
}

/// Where a client's deliveries go.
pub(crate) enum Outlet {
    /// A network client's queue.
    Network(ClientQueue),
    /// The eventbus's bounded queue.
    Eventbus(mpsc::Sender<Delivery>),
}

/// A network client's delivery queue: unbounded as a channel, bounded by the bytes it holds,
/// which both ends count (the connection reads [`ClientQueue::len`] to flow-control itself).
#[derive(Clone)]
pub(crate) struct ClientQueue {
    tx: mpsc::UnboundedSender<Delivery>,
    gauge: Arc<QueueGauge>,
}

/// What a [`ClientQueue`] holds now.
#[derive(Debug, Default)]
pub(crate) struct QueueGauge {
    messages: AtomicUsize,
    bytes: AtomicUsize,
}

impl QueueGauge {
    /// Deliveries queued.
    pub fn len(&self) -> usize {
        self.messages.load(Ordering::Relaxed)
    }

    /// Bytes queued.
    pub fn bytes(&self) -> usize {
        self.bytes.load(Ordering::Relaxed)
    }

    /// Counts `delivery` into the queue.
    fn put(&self, delivery: &Delivery) {
        self.messages.fetch_add(1, Ordering::Relaxed);
        self.bytes.fetch_add(delivery.size(), Ordering::Relaxed);
    }

    /// Counts `delivery` out of the queue (the connection took it).
    pub fn taken(&self, delivery: &Delivery) {
        self.messages.fetch_sub(1, Ordering::Relaxed);
        self.bytes.fetch_sub(delivery.size(), Ordering::Relaxed);
    }
}

/// A new client queue: the router's end, the connection's receiver, and the shared gauge.
pub(crate) fn client_queue() -> (
    ClientQueue,
    mpsc::UnboundedReceiver<Delivery>,
    Arc<QueueGauge>,
) {
    let (tx, rx) = mpsc::unbounded_channel();
    let gauge = Arc::new(QueueGauge::default());
    (
        ClientQueue {
            tx,
            gauge: gauge.clone(),
        },
        rx,
        gauge,
    )
}

/// What a client's session keeps beyond one connection: its queue and, for QoS 1/2, the
/// deliveries sent and not yet acknowledged and the QoS 2 publishes awaiting release. A
/// persistent session (CleanSession=0) keeps it while the client is away; its next
/// connection takes it over ([`Attachment::store`]).
pub(crate) struct SessionStore {
    /// The deliveries queued for the client; the connection serving it holds the lock.
    pub rx: tokio::sync::Mutex<mpsc::UnboundedReceiver<Delivery>>,
    /// What the queue holds.
    pub gauge: Arc<QueueGauge>,
    /// Packet-id bookkeeping.
    pub book: Mutex<Book>,
}

/// A QoS 1/2 delivery in flight.
#[derive(Debug, Clone)]
pub(crate) struct Unacked {
    /// Its packet id.
    pub pkid: u16,
    /// What was sent.
    pub delivery: Delivery,
    /// QoS 2: PUBREC came and PUBREL was sent; PUBCOMP is awaited.
    pub released: bool,
}

/// A session's packet ids.
#[derive(Default)]
pub(crate) struct Book {
    /// QoS 1/2 deliveries sent and not completed, in the order sent: sent again when a
    /// persistent session's client comes back (PUBLISH with DUP, or PUBREL for a QoS 2 one the
    /// client already received).
    pub unacked: Vec<Unacked>,
    /// The last packet id given.
    pub next_pkid: u16,
    /// QoS 2 publishes received, waiting for PUBREL.
    pub awaiting_release: std::collections::HashSet<u16>,
}

impl Book {
    /// The client completed the `qos` delivery `pkid` (PUBACK for QoS 1, PUBCOMP for QoS 2).
    pub fn complete(&mut self, pkid: u16, qos: QoS) {
        self.unacked
            .retain(|u| u.pkid != pkid || u.delivery.qos != qos);
    }

    /// The client received the QoS 2 delivery `pkid` (PUBREC): PUBCOMP is awaited now.
    pub fn release(&mut self, pkid: u16) {
        if let Some(u) = self
            .unacked
            .iter_mut()
            .find(|u| u.pkid == pkid && u.delivery.qos == QoS::ExactlyOnce)
        {
            u.released = true;
        }
    }

    /// A packet id no unacknowledged delivery holds.
    pub fn next_packet_id(&mut self) -> u16 {
        loop {
            self.next_pkid = self.next_pkid.wrapping_add(1).max(1);
            let id = self.next_pkid;
            if !self.unacked.iter().any(|u| u.pkid == id) {
                return id;
            }
        }
    }
}

impl SessionStore {
    /// The bookkeeping; never held across an await.
    pub fn book(&self) -> MutexGuard<'_, Book> {
        self.book
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// A new session: the router's end of its queue and the store its connections share.
pub(crate) fn new_session() -> (ClientQueue, Arc<SessionStore>) {
    let (queue, rx, gauge) = client_queue();
    (
        queue,
        Arc::new(SessionStore {
            rx: tokio::sync::Mutex::new(rx),
            gauge,
            book: Mutex::default(),
        }),
    )
}

impl Delivery {
    /// The bytes it holds in a queue (topic and payload).
    pub fn size(&self) -> usize {
        self.topic.len() + self.payload.len()
    }
}

struct Client {
    id: String,
    outlet: Outlet,
    filters: HashMap<String, QoS>,
    kick: CancellationToken,
    kind: ClientKind,
    /// CleanSession=0: the session outlives its connections.
    persistent: bool,
    /// A connection serves it now (a persistent session's client may be away).
    online: bool,
    /// Which connection serves (or last served) it: a connection that was taken over does
    /// not detach its successor.
    connection: u64,
    /// The session's store, for the connections that take it over.
    store: Option<Arc<SessionStore>>,
}

impl Client {
    /// Where `delivery` goes: queued for a network client (or the client cut off when it is too
    /// far behind), or handed back with the eventbus's queue, whose caller decides.
    fn offer(
        &self,
        delivery: Delivery,
        stats: &Stats,
    ) -> Option<(&mpsc::Sender<Delivery>, Delivery)> {
        match &self.outlet {
            Outlet::Eventbus(tx) => Some((tx, delivery)),
            Outlet::Network(queue) => {
                self.queue(queue, delivery, stats);
                None
            }
        }
    }

    /// Queues `delivery` for this network client. While it is connected, a queue that would
    /// pass `max_queued_bytes` cuts it off; while it is away from its persistent session, QoS 0
    /// is not kept (as mosquitto by default) and what would pass the cap is counted as overflow.
    fn queue(&self, queue: &ClientQueue, delivery: Delivery, stats: &Stats) {
        if self.online && self.kick.is_cancelled() {
            return;
        }
        if !self.online && delivery.qos == QoS::AtMostOnce {
            return;
        }
        let max = match self.kind {
            ClientKind::Network {
                max_queued_bytes, ..
            } => max_queued_bytes,
            ClientKind::Eventbus => usize::MAX,
        };
        if queue.gauge.bytes().saturating_add(delivery.size()) > max {
            if self.online {
                stats.broker.closed(super::stats::Closed::SlowReader);
                tracing::warn!(
                    client_id = %self.id,
                    queued = queue.gauge.len(),
                    queued_bytes = queue.gauge.bytes(),
                    "client cut off: it reads slower than its messages arrive (its queue is full)"
                );
                self.kick.cancel();
            } else {
                stats
                    .broker
                    .session_overflow
                    .fetch_add(1, Ordering::Relaxed);
            }
            return;
        }
        queue.gauge.put(&delivery);
        if let Err(returned) = queue.tx.send(delivery) {
            // The session is gone: nothing will take it out.
            queue.gauge.taken(&returned.0);
        }
    }
}

struct State {
    /// By attachment generation.
    clients: HashMap<u64, Client>,
    /// Client id -> generation of its current attachment.
    ids: HashMap<String, u64>,
    trie: FilterTrie,
    retained: Retained,
    next_generation: u64,
}

/// A client's place in the router, returned by [`Router::attach`].
pub(crate) struct Attachment {
    /// The session's key in the router (kept across a persistent session's connections).
    pub generation: u64,
    /// This connection, for [`Router::detach`].
    pub connection: u64,
    /// Fires when another connection takes the client id over, or the broker stops.
    pub kick: CancellationToken,
    /// The session's store (a network client's).
    pub store: Option<Arc<SessionStore>>,
    /// A persistent session was there and is resumed (CONNACK's session present).
    pub present: bool,
}

/// A delivery to the eventbus that found its queue full: the publisher sends it (waiting for
/// room) before it acknowledges the message.
pub(crate) struct Pending {
    tx: mpsc::Sender<Delivery>,
    delivery: Delivery,
}

impl Pending {
    /// Waits for room and queues the delivery; false when the eventbus is gone.
    pub async fn send(self) -> bool {
        self.tx.send(self.delivery).await.is_ok()
    }
}

/// Why a subscription was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SubscribeRefused {
    /// The client holds `maxFiltersPerClient` filters already.
    TooManyFilters,
}

/// The broker's routing table.
pub(crate) struct Router {
    state: Mutex<State>,
    stats: Arc<Stats>,
}

/// The highest QoS the broker grants and delivers with.
pub(crate) const MAX_QOS: QoS = QoS::ExactlyOnce;

impl Router {
    /// An empty router that keeps at most `max_retained` retained topics and
    /// `max_retained_bytes` bytes of retained payloads.
    pub fn new(stats: Arc<Stats>, max_retained: usize, max_retained_bytes: u64) -> Router {
        Router {
            state: Mutex::new(State {
                clients: HashMap::new(),
                ids: HashMap::new(),
                trie: FilterTrie::default(),
                retained: Retained::new(max_retained, max_retained_bytes),
                next_generation: 0,
            }),
            stats,
        }
    }

    /// The counters the router and its connections write.
    pub fn stats(&self) -> &Arc<Stats> {
        &self.stats
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // The state is plain maps; a panic elsewhere leaves them usable.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Registers `client_id`, taking the id over from any connection that holds it
    /// (MQTT-3.1.4-2: the old one is kicked). A network client with `clean_session` false
    /// resumes its persistent session when there is one (its filters, queue and unacknowledged
    /// deliveries); otherwise any old session is discarded and a new one begins, persistent
    /// unless `clean_session`. The eventbus's link passes its own `outlet`.
    pub fn attach(
        &self,
        client_id: &str,
        clean_session: bool,
        outlet: Option<Outlet>,
        kind: ClientKind,
        parent: &CancellationToken,
    ) -> Attachment {
        let kick = parent.child_token();
        let mut state = self.state();
        state.next_generation += 1;
        let connection = state.next_generation;
        if let Some(previous) = state.ids.get(client_id).copied() {
            let resume = state.clients.get_mut(&previous).filter(|c| {
                if c.online {
                    tracing::info!(client_id, "client id taken over by a new connection");
                    c.kick.cancel();
                }
                !clean_session && c.persistent
            });
            if let Some(c) = resume {
                c.kick = kick.clone();
                c.online = true;
                c.connection = connection;
                c.kind = kind;
                let store = c.store.clone();
                self.count(&state);
                return Attachment {
                    generation: previous,
                    connection,
                    kick,
                    store,
                    present: true,
                };
            }
            state.ids.remove(client_id);
            remove_client(&mut state, previous);
        }
        let (outlet, store) = match outlet {
            Some(outlet) => (outlet, None),
            None => {
                let (queue, store) = new_session();
                (Outlet::Network(queue), Some(store))
            }
        };
        state.ids.insert(client_id.to_owned(), connection);
        state.clients.insert(
            connection,
            Client {
                id: client_id.to_owned(),
                outlet,
                filters: HashMap::new(),
                kick: kick.clone(),
                kind,
                persistent: !clean_session && kind != ClientKind::Eventbus,
                online: true,
                connection,
                store: store.clone(),
            },
        );
        self.count(&state);
        Attachment {
            generation: connection,
            connection,
            kick,
            store,
            present: false,
        }
    }

    fn count(&self, state: &State) {
        let online = state.clients.values().filter(|c| c.online).count();
        self.stats
            .broker_clients
            .store(online as u64, Ordering::Relaxed);
        self.stats
            .broker
            .sessions_parked
            .store((state.clients.len() - online) as u64, Ordering::Relaxed);
    }

    /// The connection `connection` of session `generation` ended: a clean session goes with
    /// its filters; a persistent one stays, its client away. Nothing happens when another
    /// connection took the session over meanwhile.
    pub fn detach(&self, client_id: &str, generation: u64, connection: u64) {
        let mut state = self.state();
        let Some(client) = state.clients.get_mut(&generation) else {
            return;
        };
        if client.connection != connection {
            return;
        }
        if client.persistent {
            client.online = false;
        } else {
            if state.ids.get(client_id) == Some(&generation) {
                state.ids.remove(client_id);
            }
            remove_client(&mut state, generation);
        }
        self.count(&state);
    }

    /// Adds a subscription and queues the retained messages it matches. Returns the QoS
    /// granted, or why it was refused.
    pub fn subscribe(
        &self,
        generation: u64,
        filter: &str,
        qos: QoS,
    ) -> Result<QoS, SubscribeRefused> {
        let granted = min_qos(qos, MAX_QOS);
        let mut state = self.state();
        let State {
            clients,
            retained,
            trie,
            ..
        } = &mut *state;
        let Some(client) = clients.get_mut(&generation) else {
            return Ok(granted);
        };
        if let ClientKind::Network { max_filters, .. } = client.kind
            && client.filters.len() >= max_filters
            && !client.filters.contains_key(filter)
        {
            self.stats
                .broker
                .filters_refused
                .fetch_add(1, Ordering::Relaxed);
            return Err(SubscribeRefused::TooManyFilters);
        }
        client.filters.insert(filter.to_owned(), granted);
        trie.insert(filter, generation, granted);
        for (topic, payload, stored_qos) in retained.matching(filter) {
            let delivery = Delivery {
                topic: Arc::from(topic),
                payload: payload.clone(),
                qos: min_qos(stored_qos, granted),
                retain: true,
            };
            if let Some((tx, delivery)) = client.offer(delivery, &self.stats)
                && tx.try_send(delivery).is_err()
            {
                self.stats.broker_dropped.fetch_add(1, Ordering::Relaxed);
            }
        }
        Ok(granted)
    }

    /// Removes a subscription.
    pub fn unsubscribe(&self, generation: u64, filter: &str) {
        let mut state = self.state();
        let State { clients, trie, .. } = &mut *state;
        if let Some(client) = clients.get_mut(&generation)
            && client.filters.remove(filter).is_some()
        {
            trie.remove(filter, generation);
        }
    }

    /// Routes a message to every matching subscriber (once each, with the highest matching
    /// QoS), storing or clearing it as retained when `retain` is set.
    ///
    /// A QoS 1/2 delivery to the eventbus that finds its queue full is returned when `can_wait`
    /// (the publisher sends it, waiting, before it acknowledges); otherwise it is dropped and
    /// counted. Network clients' deliveries are always queued (or the client cut off).
    pub fn publish(
        &self,
        topic: &str,
        payload: Bytes,
        qos: QoS,
        retain: bool,
        can_wait: bool,
    ) -> Vec<Pending> {
        let mut state = self.state();
        if retain {
            match state.retained.set(topic, &payload, qos) {
                Ok(()) => {}
                Err(why) => {
                    self.stats
                        .broker
                        .retained_refused
                        .fetch_add(1, Ordering::Relaxed);
                    let limit = match why {
                        NotKept::Topics => "wedge.broker.maxRetainedTopics",
                        NotKept::Bytes => "wedge.broker.maxRetainedBytes",
                    };
                    tracing::warn!(
                        topic,
                        size = payload.len(),
                        limit,
                        "retained message delivered but not kept: over the limit"
                    );
                }
            }
            self.stats
                .broker
                .retained_bytes
                .store(state.retained.bytes(), Ordering::Relaxed);
        }
        let topic: Arc<str> = Arc::from(topic);
        let mut pending = Vec::new();
        for (generation, sub_qos) in state.trie.matches(&topic) {
            let Some(client) = state.clients.get(&generation) else {
                continue;
            };
            let delivery = Delivery {
                topic: topic.clone(),
                payload: payload.clone(),
                qos: min_qos(qos, sub_qos),
                retain: false,
            };
            let Some((tx, delivery)) = client.offer(delivery, &self.stats) else {
                continue;
            };
            match tx.try_send(delivery) {
                Ok(()) | Err(TrySendError::Closed(_)) => {}
                Err(TrySendError::Full(delivery)) => {
                    if delivery.qos != QoS::AtMostOnce && can_wait {
                        pending.push(Pending {
                            tx: tx.clone(),
                            delivery,
                        });
                        continue;
                    }
                    if delivery.qos == QoS::AtMostOnce {
                        self.stats.broker.shed_qos0.fetch_add(1, Ordering::Relaxed);
                    }
                    self.stats.broker_dropped.fetch_add(1, Ordering::Relaxed);
                    tracing::debug!(
                        client_id = %client.id,
                        topic = %topic,
                        "eventbus queue full; message dropped"
                    );
                }
            }
        }
        pending
    }

    /// Kicks every client (broker shutdown).
    pub fn kick_all(&self) {
        for client in self.state().clients.values() {
            client.kick.cancel();
        }
    }
}

/// Kicks the attachment `generation` and removes it and its subscriptions.
fn remove_client(state: &mut State, generation: u64) {
    if let Some(client) = state.clients.remove(&generation) {
        client.kick.cancel();
        for filter in client.filters.keys() {
            state.trie.remove(filter, generation);
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

    const NET: ClientKind = ClientKind::Network {
        max_filters: 3,
        max_queued_bytes: 1 << 20,
    };

    fn network() -> (Outlet, mpsc::UnboundedReceiver<Delivery>) {
        let (queue, rx, _) = client_queue();
        (Outlet::Network(queue), rx)
    }

    fn router() -> Router {
        Router::new(Arc::default(), 10, 1 << 20)
    }

    #[test]
    fn routes_once_with_best_qos_and_keeps_retained() {
        let r = router();
        let token = CancellationToken::new();
        let (tx, mut rx) = network();
        let a = r.attach("c", true, Some(tx), NET, &token);
        let g = a.generation;
        r.subscribe(g, "$hw/events/device/+/+/twin/+", QoS::AtMostOnce)
            .unwrap();
        r.subscribe(g, "$hw/events/device/#", QoS::ExactlyOnce)
            .unwrap();
        r.publish(
            "$hw/events/device/ns/d/twin/update",
            Bytes::from_static(b"x"),
            QoS::AtLeastOnce,
            false,
            true,
        );
        let d = rx.try_recv().unwrap();
        assert_eq!(d.qos, QoS::AtLeastOnce);
        assert!(rx.try_recv().is_err(), "delivered once");

        r.publish(
            "a/b",
            Bytes::from_static(b"kept"),
            QoS::AtLeastOnce,
            true,
            true,
        );
        assert_eq!(r.subscribe(g, "a/+", QoS::AtMostOnce), Ok(QoS::AtMostOnce));
        let d = rx.try_recv().unwrap();
        assert!(d.retain);
        assert_eq!(d.qos, QoS::AtMostOnce);
        r.publish("a/b", Bytes::new(), QoS::AtMostOnce, true, true);
        let cleared = rx.try_recv().unwrap();
        assert!(cleared.payload.is_empty() && !cleared.retain);
        // The fourth filter is over the cap; one already held can be subscribed again.
        assert_eq!(
            r.subscribe(g, "a/#", QoS::AtMostOnce),
            Err(SubscribeRefused::TooManyFilters)
        );
        assert_eq!(
            r.subscribe(g, "a/+", QoS::AtLeastOnce),
            Ok(QoS::AtLeastOnce)
        );
        assert!(rx.try_recv().is_err(), "retained message cleared");
        r.unsubscribe(g, "a/+");
        r.subscribe(g, "a/#", QoS::AtMostOnce).unwrap();
    }

    #[test]
    fn a_full_eventbus_queue_makes_qos1_publishers_wait_and_sheds_qos0() {
        let r = router();
        let token = CancellationToken::new();
        let (tx, mut rx) = mpsc::channel(1);
        let bus = r.attach(
            "$bus",
            true,
            Some(Outlet::Eventbus(tx)),
            ClientKind::Eventbus,
            &token,
        );
        r.subscribe(bus.generation, "t/#", QoS::AtLeastOnce)
            .unwrap();
        let (ntx, mut nrx) = network();
        let net = r.attach("n", true, Some(ntx), NET, &token);
        r.subscribe(net.generation, "t/#", QoS::AtLeastOnce)
            .unwrap();
        let p = |qos| r.publish("t/x", Bytes::from_static(b"1"), qos, false, true);
        assert!(p(QoS::AtLeastOnce).is_empty(), "room: queued at once");
        let pending = p(QoS::AtLeastOnce);
        assert_eq!(pending.len(), 1, "only the eventbus's delivery waits");
        assert!(p(QoS::AtMostOnce).is_empty());
        assert_eq!(r.stats.broker.shed_qos0.load(Ordering::Relaxed), 1);
        // Only the eventbus's QoS 0 copy: the network client got all three.
        assert_eq!(r.stats.broker_dropped.load(Ordering::Relaxed), 1);
        for _ in 0..3 {
            assert!(nrx.try_recv().is_ok());
        }
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        rt.block_on(async {
            let sent = tokio::spawn(pending.into_iter().next().unwrap().send());
            assert!(rx.recv().await.is_some());
            assert!(sent.await.unwrap(), "sent once there was room");
            assert!(rx.recv().await.is_some());
        });
    }

    #[test]
    fn takeover_kicks_the_old_connection() {
        let r = router();
        let token = CancellationToken::new();
        let (tx1, _rx1) = network();
        let (tx2, mut rx2) = network();
        let first = r.attach("c", true, Some(tx1), NET, &token);
        r.subscribe(first.generation, "x", QoS::AtMostOnce).unwrap();
        let second = r.attach("c", true, Some(tx2), NET, &token);
        assert!(first.kick.is_cancelled());
        assert!(!second.kick.is_cancelled());
        r.publish("x", Bytes::from_static(b"1"), QoS::AtMostOnce, false, false);
        assert!(
            rx2.try_recv().is_err(),
            "the old connection's filters went with it"
        );
        r.detach("c", first.generation, first.connection);
        assert_eq!(r.stats.broker_clients.load(Ordering::Relaxed), 1);
        r.detach("c", second.generation, second.connection);
        assert_eq!(r.stats.broker_clients.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn a_client_that_falls_too_far_behind_is_cut_off_not_shortened() {
        let r = router();
        let token = CancellationToken::new();
        let (queue, mut rx, gauge) = client_queue();
        let kind = ClientKind::Network {
            max_filters: 3,
            max_queued_bytes: 100,
        };
        let c = r.attach("slow", true, Some(Outlet::Network(queue)), kind, &token);
        r.subscribe(c.generation, "t", QoS::AtLeastOnce).unwrap();
        let payload = Bytes::from(vec![0u8; 29]);
        for _ in 0..3 {
            r.publish("t", payload.clone(), QoS::AtLeastOnce, false, true);
        }
        assert_eq!((gauge.len(), gauge.bytes()), (3, 90));
        assert!(!c.kick.is_cancelled());
        // The fourth would take it past 100 bytes: cut off, counted; nothing is dropped
        // quietly from what it was given.
        r.publish("t", payload, QoS::AtLeastOnce, false, true);
        assert!(c.kick.is_cancelled());
        assert_eq!(gauge.len(), 3);
        assert_eq!(r.stats.broker_dropped.load(Ordering::Relaxed), 0);
        let d = rx.try_recv().unwrap();
        gauge.taken(&d);
        assert_eq!((gauge.len(), gauge.bytes()), (2, 60));
    }

    #[test]
    fn a_persistent_session_keeps_filters_and_qos1_messages_while_away() {
        let r = router();
        let token = CancellationToken::new();
        let first = r.attach("p", false, None, NET, &token);
        assert!(!first.present);
        r.subscribe(first.generation, "t/#", QoS::AtLeastOnce)
            .unwrap();
        r.detach("p", first.generation, first.connection);
        assert_eq!(r.stats.broker_clients.load(Ordering::Relaxed), 0);
        assert_eq!(r.stats.broker.sessions_parked.load(Ordering::Relaxed), 1);
        r.publish(
            "t/a",
            Bytes::from_static(b"kept"),
            QoS::AtLeastOnce,
            false,
            true,
        );
        r.publish(
            "t/a",
            Bytes::from_static(b"not"),
            QoS::AtMostOnce,
            false,
            true,
        );
        let again = r.attach("p", false, None, NET, &token);
        assert!(again.present, "session present");
        assert_eq!(again.generation, first.generation);
        let store = again.store.clone().unwrap();
        let mut rx = store.rx.try_lock().unwrap();
        assert_eq!(rx.try_recv().unwrap().payload, Bytes::from_static(b"kept"));
        assert!(
            rx.try_recv().is_err(),
            "QoS 0 is not kept for an absent client"
        );
        drop(rx);
        // The old connection's late detach does not touch the resumed session.
        r.detach("p", first.generation, first.connection);
        assert_eq!(r.stats.broker_clients.load(Ordering::Relaxed), 1);
        // CleanSession=1 discards it.
        let clean = r.attach("p", true, None, NET, &token);
        assert!(!clean.present);
        assert!(again.kick.is_cancelled());
        r.publish(
            "t/a",
            Bytes::from_static(b"x"),
            QoS::AtLeastOnce,
            false,
            true,
        );
        let store = clean.store.unwrap();
        assert!(
            store.rx.try_lock().unwrap().try_recv().is_err(),
            "the old filters went with the old session"
        );
    }
}
