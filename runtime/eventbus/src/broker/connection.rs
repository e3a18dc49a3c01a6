//! One MQTT 3.1.1 client connection of the embedded broker: CONNECT and log-in, then packets in
//! and deliveries out until the client leaves, times out, is taken over, or the broker stops.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use rumqttc::mqttbytes::Error as CodecError;
use rumqttc::{
    ConnAck, ConnectReturnCode, Packet, PubAck, PubComp, PubRec, PubRel, Publish, QoS, SubAck,
    SubscribeReasonCode, UnsubAck,
};
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::router::{ClientKind, Delivery, Router, SessionStore, SubscribeRefused, Unacked};
use super::stats::{Closed, LoginRefused};
use super::wire::{ConnError, Transport, Wire, WireLimits, delivered_size};
use crate::access::{AccessPolicy, Grant, Refusal};
use crate::stats::Stats;
use crate::topics::{valid_filter, valid_topic};

/// The client id the module's own in-process link uses; network clients may not take it.
pub(crate) const LOCAL_CLIENT_ID: &str = "$wedge-eventbus";

/// Limits and log-in rules every connection follows.
#[derive(Debug, Clone)]
pub(crate) struct ConnectionSettings {
    /// Who may log in, and what each client may publish and subscribe to.
    pub access: AccessPolicy,
    /// Where PUBLISHes and SUBSCRIBEs the access policy refused are counted.
    pub stats: Arc<crate::stats::Stats>,
    /// Deliveries queued for a client past which its own packets are not read until it
    /// catches up (`mqttSessionQueueSize`).
    pub queue: usize,
    /// Bytes queued for a client past which it is cut off.
    pub max_queued_bytes: usize,
    /// How long a write to a client may stall before it is cut off.
    pub slow_reader_timeout: Duration,
    /// QoS 1 deliveries awaiting PUBACK before the broker stops sending to that client.
    pub max_inflight: usize,
    /// How long a new connection may take to send CONNECT.
    pub connect_timeout: Duration,
    /// Longest silence allowed: keep-alive 0 gets it, longer keep-alives are capped by it.
    pub idle_timeout: Duration,
    /// Subscriptions one client may hold.
    pub max_filters: usize,
    /// Framing limits shared by every connection.
    pub limits: Arc<WireLimits>,
}

/// How a connection ended, which decides whether the client's will is published.
enum End {
    /// DISCONNECT received: the will is discarded.
    Clean,
    /// Taken over by another connection or broker shutdown.
    Kicked,
}

/// Counts a connection the broker closes itself, by reason.
fn count_close(stats: &Stats, e: &ConnError) {
    let why = match e {
        ConnError::TooLarge(_) => Closed::PacketTooLarge,
        ConnError::PacketTimeout => Closed::PacketTimeout,
        ConnError::Idle => Closed::Idle,
        ConnError::SlowReader => Closed::SlowReader,
        _ => return,
    };
    stats.broker.closed(why);
}

/// Serves one accepted socket until it ends; never fails the broker.
pub(crate) async fn serve(
    stream: Box<dyn Transport>,
    peer: SocketAddr,
    router: Arc<Router>,
    settings: Arc<ConnectionSettings>,
    token: CancellationToken,
) {
    let mut wire = Wire::new(stream, settings.limits.clone());
    let stats = router.stats().clone();
    let first = tokio::select! {
        _ = token.cancelled() => return,
        r = tokio::time::timeout(settings.connect_timeout, wire.read_first_packet()) => r,
    };
    let connect = match first {
        Ok(Ok(Packet::Connect(connect))) => connect,
        Ok(Err(ConnError::Codec(CodecError::InvalidProtocol)))
        | Ok(Err(ConnError::Codec(CodecError::InvalidProtocolLevel(_)))) => {
            tracing::debug!(%peer, "refused: not MQTT 3.1.1");
            let _ = refuse(&mut wire, ConnectReturnCode::RefusedProtocolVersion).await;
            return;
        }
        Ok(Ok(_)) => {
            tracing::debug!(%peer, "first packet is not CONNECT; closing");
            return;
        }
        Ok(Err(e)) => {
            tracing::debug!(%peer, "before CONNECT: {e}");
            count_close(&stats, &e);
            return;
        }
        Err(_) => {
            tracing::debug!(%peer, "no CONNECT in time; closing");
            stats.broker.closed(Closed::ConnectTimeout);
            return;
        }
    };
    if connect.protocol != rumqttc::Protocol::V4 {
        let _ = refuse(&mut wire, ConnectReturnCode::RefusedProtocolVersion).await;
        return;
    }
    let client_id = if connect.client_id.is_empty() {
        if !connect.clean_session {
            stats.broker.login_refused(LoginRefused::ClientId);
            tracing::debug!(%peer, "refused: empty client id without a clean session");
            let _ = refuse(&mut wire, ConnectReturnCode::BadClientId).await;
            return;
        }
        // Generated before the log-in, so `%c` stands for the id the session will have.
        generated_id()
    } else if connect.client_id == LOCAL_CLIENT_ID {
        stats.broker.login_refused(LoginRefused::ClientId);
        tracing::debug!(%peer, "refused: the client id is the eventbus's own");
        let _ = refuse(&mut wire, ConnectReturnCode::BadClientId).await;
        return;
    } else {
        connect.client_id.clone()
    };
    let login = connect
        .login
        .as_ref()
        .map(|l| (l.username.as_str(), l.password.as_str()));
    let will_topic = connect.last_will.as_ref().map(|w| w.topic.as_str());
    let grant = match settings
        .access
        .admit(login, &client_id, will_topic, peer.ip())
        .await
    {
        Ok(grant) => grant,
        Err(refusal) => {
            let (code, why) = answer(refusal);
            stats.broker.login_refused(why);
            let user = login.map(|l| l.0);
            // A guesser makes thousands of refusals: one warning per source a minute, each
            // saying how many went to the debug level since the last.
            match settings.access.warn_due(peer.ip()) {
                Some(unlogged) => tracing::warn!(
                    %peer,
                    ?client_id,
                    ?user,
                    will = ?will_topic,
                    unlogged,
                    "CONNECT refused: {refusal}"
                ),
                None => tracing::debug!(
                    %peer,
                    ?client_id,
                    ?user,
                    will = ?will_topic,
                    "CONNECT refused: {refusal}"
                ),
            }
            let _ = refuse(&mut wire, code).await;
            return;
        }
    };

    let kind = ClientKind::Network {
        max_filters: settings.max_filters,
        max_queued_bytes: settings.max_queued_bytes,
    };
    let attachment = router.attach(&client_id, connect.clean_session, None, kind, &token);
    let Some(store) = attachment.store.clone() else {
        return;
    };
    // A connection that was taken over lets go of the queue as it ends (it was kicked).
    let mut deliveries = tokio::select! {
        rx = store.rx.lock() => rx,
        _ = attachment.kick.cancelled() => return,
    };
    let mut session = Session {
        client_id: &client_id,
        generation: attachment.generation,
        router: &router,
        settings: &settings,
        deliveries: &mut deliveries,
        store: &store,
        keep_alive: Duration::from_secs(u64::from(connect.keep_alive)),
        grant,
    };
    let ended = match wire
        .write_packet(Packet::ConnAck(ConnAck::new(
            ConnectReturnCode::Success,
            attachment.present,
        )))
        .await
    {
        Ok(()) => {
            tracing::debug!(%peer, client_id = %client_id, present = attachment.present, "client connected");
            // Racing the whole session against the kick also interrupts a write stuck on a
            // client that stopped reading, so takeover and shutdown are never held up.
            tokio::select! {
                ended = session.run(&mut wire, &attachment.kick) => ended,
                _ = attachment.kick.cancelled() => Ok(End::Kicked),
            }
        }
        Err(e) => Err(e),
    };
    drop(deliveries);
    router.detach(&client_id, attachment.generation, attachment.connection);
    match ended {
        Ok(End::Clean) => tracing::debug!(client_id = %client_id, "client disconnected"),
        Ok(End::Kicked) => tracing::debug!(client_id = %client_id, "connection closed by broker"),
        Err(e) => {
            tracing::debug!(client_id = %client_id, "connection lost: {e}");
            count_close(&stats, &e);
            if let Some(will) = connect.last_will
                && valid_topic(&will.topic)
                && delivered_size(will.topic.len(), will.message.len()) <= wire.max_packet()
            {
                let pending =
                    router.publish(&will.topic, will.message, will.qos, will.retain, true);
                for delivery in pending {
                    tokio::select! {
                        _ = token.cancelled() => break,
                        _ = delivery.send() => {}
                    }
                }
            }
        }
    }
}

/// The CONNACK code a refused CONNECT gets, and the reason it is counted under. A throttled
/// client is told the service is unavailable, which clients retry, rather than that its
/// password is wrong, which some take as final.
fn answer(refusal: Refusal) -> (ConnectReturnCode, LoginRefused) {
    match refusal {
        Refusal::BadCredentials => (
            ConnectReturnCode::BadUserNamePassword,
            LoginRefused::BadCredentials,
        ),
        Refusal::Throttled => (
            ConnectReturnCode::ServiceUnavailable,
            LoginRefused::Throttled,
        ),
        Refusal::BadClientId(_) => (ConnectReturnCode::BadClientId, LoginRefused::ClientId),
        Refusal::BadUserName(_) => (
            ConnectReturnCode::BadUserNamePassword,
            LoginRefused::UserName,
        ),
        Refusal::WillNotAllowed => (ConnectReturnCode::NotAuthorized, LoginRefused::Will),
    }
}

async fn refuse(wire: &mut Wire, code: ConnectReturnCode) -> Result<(), ConnError> {
    wire.write_packet(Packet::ConnAck(ConnAck::new(code, false)))
        .await
}

fn generated_id() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    format!("wedge-auto-{}", NEXT.fetch_add(1, Ordering::Relaxed))
}

struct Session<'a> {
    client_id: &'a str,
    generation: u64,
    router: &'a Router,
    settings: &'a ConnectionSettings,
    deliveries: &'a mut mpsc::UnboundedReceiver<Delivery>,
    /// The session's queue gauge and packet ids (kept across connections when persistent).
    store: &'a SessionStore,
    keep_alive: Duration,
    /// What the access policy lets this client do.
    grant: Grant,
}

impl Session<'_> {
    async fn run(&mut self, wire: &mut Wire, kick: &CancellationToken) -> Result<End, ConnError> {
        // MQTT-3.1.2-24: one and a half keep-alive periods without a packet closes the link.
        // Keep-alive 0 (none) and long keep-alives are bounded by the idle timeout, so a silent
        // client cannot hold its slot for good.
        let grace = if self.keep_alive.is_zero() {
            self.settings.idle_timeout
        } else {
            (self.keep_alive + self.keep_alive / 2).min(self.settings.idle_timeout)
        };
        let mut deadline = Instant::now() + grace;
        // A resumed session: what was sent and not acknowledged goes again, flagged DUP, in
        // the order it was first sent (MQTT-4.4.0-1).
        let again: Vec<Unacked> = self.store.book().unacked.clone();
        for u in again {
            if u.released {
                wire.write_packet(Packet::PubRel(PubRel::new(u.pkid)))
                    .await?;
                continue;
            }
            let d = u.delivery;
            let mut publish = Publish::from_bytes(d.topic.as_ref(), d.qos, d.payload);
            publish.pkid = u.pkid;
            publish.dup = true;
            self.write_delivery(wire, publish).await?;
        }
        loop {
            let can_send = self.store.book().unacked.len() < self.settings.max_inflight;
            // Flow control: while the client is behind on its deliveries and can take more,
            // its own packets wait (a client publishing what it is subscribed to slows down
            // to the pace it reads at). With its window full it is read, for its PUBACKs.
            let behind = can_send && self.store.gauge.len() >= self.settings.queue;
            tokio::select! {
                biased;
                _ = kick.cancelled() => return Ok(End::Kicked),
                packet = wire.read_packet(), if !behind => {
                    deadline = Instant::now() + grace;
                    if let Some(end) = self.handle(wire, packet?).await? {
                        return Ok(end);
                    }
                }
                Some(delivery) = self.deliveries.recv(), if can_send => {
                    self.store.gauge.taken(&delivery);
                    self.deliver(wire, delivery).await?;
                }
                _ = tokio::time::sleep_until(deadline) => return Err(ConnError::Idle),
            }
        }
    }

    async fn handle(&mut self, wire: &mut Wire, packet: Packet) -> Result<Option<End>, ConnError> {
        match packet {
            Packet::Publish(publish) => {
                if !valid_topic(&publish.topic) {
                    return Err(ConnError::Protocol("PUBLISH to an invalid topic name"));
                }
                // Refused here what no QoS 1 subscriber could ever receive (its copy carries a
                // packet id): retained, it would cost every such subscriber its connection.
                let size = delivered_size(publish.topic.len(), publish.payload.len());
                if size > wire.max_packet() {
                    return Err(ConnError::TooLarge(size));
                }
                if !self.grant.may_publish(&publish.topic) {
                    // MQTT 3.1.1 has no negative acknowledgement: the publish is acknowledged
                    // (so the client does not resend it forever) and not routed, as mosquitto
                    // does; counted and logged.
                    self.denied(&publish.topic, "publish");
                    match publish.qos {
                        QoS::AtMostOnce => {}
                        QoS::AtLeastOnce => {
                            wire.write_packet(Packet::PubAck(PubAck::new(publish.pkid)))
                                .await?;
                        }
                        QoS::ExactlyOnce => {
                            self.store.book().awaiting_release.insert(publish.pkid);
                            wire.write_packet(Packet::PubRec(PubRec::new(publish.pkid)))
                                .await?;
                        }
                    }
                    return Ok(None);
                }
                match publish.qos {
                    QoS::AtMostOnce => self.route(publish).await,
                    QoS::AtLeastOnce => {
                        let pkid = publish.pkid;
                        self.route(publish).await;
                        wire.write_packet(Packet::PubAck(PubAck::new(pkid))).await?;
                    }
                    QoS::ExactlyOnce => {
                        let pkid = publish.pkid;
                        // A re-sent QoS 2 publish is routed once.
                        let first = self.store.book().awaiting_release.insert(pkid);
                        if first {
                            self.route(publish).await;
                        }
                        wire.write_packet(Packet::PubRec(PubRec::new(pkid))).await?;
                    }
                }
            }
            Packet::PubRel(release) => {
                self.store.book().awaiting_release.remove(&release.pkid);
                wire.write_packet(Packet::PubComp(PubComp::new(release.pkid)))
                    .await?;
            }
            Packet::PubAck(ack) => self.store.book().complete(ack.pkid, QoS::AtLeastOnce),
            // Our QoS 2 deliveries: PUBREC is answered with PUBREL (always, MQTT-4.3.3-1),
            // PUBCOMP completes them.
            Packet::PubRec(rec) => {
                self.store.book().release(rec.pkid);
                wire.write_packet(Packet::PubRel(PubRel::new(rec.pkid)))
                    .await?;
            }
            Packet::PubComp(comp) => self.store.book().complete(comp.pkid, QoS::ExactlyOnce),
            Packet::Subscribe(subscribe) => {
                let codes = subscribe
                    .filters
                    .iter()
                    .map(|f| {
                        if !valid_filter(&f.path) {
                            tracing::debug!(client_id = self.client_id, filter = %f.path, "invalid filter refused");
                            return SubscribeReasonCode::Failure;
                        }
                        if !self.grant.may_subscribe(&f.path) {
                            self.denied(&f.path, "subscribe");
                            return SubscribeReasonCode::Failure;
                        }
                        match self.router.subscribe(self.generation, &f.path, f.qos) {
                            Ok(granted) => SubscribeReasonCode::Success(granted),
                            Err(SubscribeRefused::TooManyFilters) => {
                                tracing::debug!(
                                    client_id = self.client_id,
                                    filter = %f.path,
                                    limit = self.settings.max_filters,
                                    "filter refused: wedge.broker.maxFiltersPerClient reached"
                                );
                                SubscribeReasonCode::Failure
                            }
                        }
                    })
                    .collect();
                wire.write_packet(Packet::SubAck(SubAck::new(subscribe.pkid, codes)))
                    .await?;
            }
            Packet::Unsubscribe(unsubscribe) => {
                for filter in &unsubscribe.topics {
                    self.router.unsubscribe(self.generation, filter);
                }
                wire.write_packet(Packet::UnsubAck(UnsubAck::new(unsubscribe.pkid)))
                    .await?;
            }
            Packet::PingReq => wire.write_packet(Packet::PingResp).await?,
            Packet::Disconnect => return Ok(Some(End::Clean)),
            Packet::Connect(_) => return Err(ConnError::Protocol("second CONNECT")),
            Packet::ConnAck(_) | Packet::SubAck(_) | Packet::UnsubAck(_) | Packet::PingResp => {
                return Err(ConnError::Protocol("server-only packet from a client"));
            }
        }
        Ok(None)
    }

    /// Counts and logs a PUBLISH or SUBSCRIBE the access policy refused.
    fn denied(&self, topic: &str, what: &'static str) {
        let stats = &self.settings.stats;
        let n = stats.access_denied.fetch_add(1, Ordering::Relaxed) + 1;
        if n.is_power_of_two() {
            tracing::warn!(
                client_id = self.client_id,
                user = %self.grant.user,
                topic,
                denied_so_far = n,
                "{what} refused by the access policy"
            );
        }
    }

    /// Routes a client's publish. A QoS 1/2 message for the eventbus that finds its queue full
    /// waits here for room, before the caller acknowledges it; meanwhile this connection reads
    /// nothing (back-pressure on that one client only).
    async fn route(&self, publish: Publish) {
        let pending = self.router.publish(
            &publish.topic,
            publish.payload,
            publish.qos,
            publish.retain,
            true,
        );
        for delivery in pending {
            self.router
                .stats()
                .broker
                .backpressure_waits
                .fetch_add(1, Ordering::Relaxed);
            delivery.send().await;
        }
    }

    async fn deliver(&mut self, wire: &mut Wire, delivery: Delivery) -> Result<(), ConnError> {
        if !self.grant.may_receive(&delivery.topic) {
            self.denied(&delivery.topic, "delivery");
            return Ok(());
        }
        // Bytes is a shared buffer: the copy kept for redelivery costs a reference count.
        let mut publish = Publish::from_bytes(
            delivery.topic.as_ref(),
            delivery.qos,
            delivery.payload.clone(),
        );
        publish.retain = delivery.retain;
        if delivery.qos != QoS::AtMostOnce {
            // Set before the size check: the packet id is part of what is sent.
            publish.pkid = self.store.book().next_packet_id();
        }
        if publish.size() > wire.max_packet() {
            self.router
                .stats()
                .broker
                .undeliverable
                .fetch_add(1, Ordering::Relaxed);
            tracing::warn!(
                client_id = self.client_id,
                topic = %delivery.topic,
                "message larger than the broker's packet limit not delivered"
            );
            return Ok(());
        }
        if delivery.qos != QoS::AtMostOnce {
            self.store.book().unacked.push(Unacked {
                pkid: publish.pkid,
                delivery,
                released: false,
            });
        }
        self.write_delivery(wire, publish).await
    }

    /// Writes a delivery, cutting the client off when the write stalls past the deadline.
    async fn write_delivery(&self, wire: &mut Wire, publish: Publish) -> Result<(), ConnError> {
        match tokio::time::timeout(
            self.settings.slow_reader_timeout,
            wire.write_packet(Packet::Publish(publish)),
        )
        .await
        {
            Ok(written) => written,
            Err(_) => Err(ConnError::SlowReader),
        }
    }
}
