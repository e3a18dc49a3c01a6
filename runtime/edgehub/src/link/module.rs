//! The `EdgeHub` module (bus name `websocket`, group `hub`): the connection loop.
//!
//! Durability: every message the node sends to the cloud (keepalives and control acks aside)
//! is committed to the [`Outbox`] before it is written, and sent *from* the outbox in seq
//! order, so a reconnect resends the backlog first, with the same bytes and `msg_id`.
//! Messages reach the outbox two ways: modules send them to this module's mailbox (taken in
//! batches and committed together, online or not), or a module stages them in the transaction
//! of the change they report ([`Outbox::stage`], devicetwin's `edge_updated`); either way the
//! session only ever sends what it reads back from the outbox, woken by [`Outbox::changed`].
//! Responses and ACKs from modules take the same path (one rule, and a lost ACK would make the
//! cloud resend its message).
//!
//! Delivery is confirmed without help from the cloud, which acknowledges only some messages: a
//! message written to the socket counts as delivered once the link has stayed up for
//! `confirm_after` (1 s) after the write; it is then removed. A link that breaks sooner leaves
//! it in the outbox and it is sent again (at least once; the cloud sees the same `msg_id`).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Instant;

use futures_util::StreamExt;
use tokio_tungstenite::tungstenite::Message as WsMessage;
use wedge_core::message::{group, module, operation};
use wedge_core::metrics::{MetricsSource, PromWriter};
use wedge_core::{Content, Message, Module, ModuleContext, ModuleError};

use super::answer_gate::AnswerGate;
use super::backoff::Backoff;
use super::connection::{WsSink, dial, write, write_batch};
use super::dispatch::{Dispatch, route_inbound};
use super::frame::{control_ack, decode, is_control, keepalive};
use super::inbound::{INBOUND_CAPACITY, InboundQueue, deliver};
use super::ratelimit::TokenBucket;
use super::settings::LinkSettings;
use wedge_core::outbox::{Outbox, OutboxError};

/// Groups told when the cloud link comes up or goes down (edgecore v1.23's list).
const CONNECTION_GROUPS: [&str; 5] = [
    group::TWIN,
    group::META,
    group::BUS,
    group::TASKMANAGER,
    group::METASERVER,
];

/// Outbox rows read per batch.
const FLUSH_BATCH: usize = 256;

/// Whether `msg` is an upload eventbus relays for a local MQTT client (source `bus`, group
/// `user`): it takes a place in the outbox's relayed share, which any client of the broker can
/// fill, and never the places the node's own messages need.
fn is_relayed(msg: &Message) -> bool {
    msg.route.source == group::BUS && msg.route.group == group::USER
}

/// Mailbox messages committed to the outbox together (one shared commit).
const INTAKE_BATCH: usize = 256;

/// Ready messages written with one flush.
const SEND_BATCH: usize = 64;

/// Counters shown on `/metrics`.
#[derive(Debug, Default)]
pub(crate) struct Stats {
    connected: AtomicBool,
    connects: AtomicU64,
    dial_failures: AtomicU64,
    disconnects: AtomicU64,
    sent: AtomicU64,
    received: AtomicU64,
    malformed: AtomicU64,
    /// Device messages sent on without the cloud's answer to the previous one.
    unanswered: AtomicU64,
    inbound_overflow: AtomicU64,
    pub(crate) undeliverable: AtomicU64,
    refused: AtomicU64,
}

/// The cloud link module.
pub struct EdgeHub {
    settings: LinkSettings,
    outbox: Outbox,
    stats: Arc<Stats>,
    reconnect: tokio::sync::Notify,
}

/// The connection broadcast sent to `group`: content `"cloud_connected"` or
/// `"cloud_disconnected"`.
pub fn connection_message(group: &str, content: &str) -> Message {
    Message::build(
        module::EDGEHUB_SOURCE,
        group,
        operation::CONNECT,
        "node/connection",
        Content::string(content),
    )
}

/// How a session with the cloud ended.
enum SessionEnd {
    /// The node is shutting down.
    Stop,
    /// The link broke; redial.
    Broken(String),
}

impl EdgeHub {
    /// A module that dials per `settings` and keeps cloud-bound messages in `outbox` (opened on
    /// a store migrated with [`crate::outbox::COMPONENT`] / [`crate::outbox::MIGRATIONS`]).
    pub fn new(settings: LinkSettings, outbox: Outbox) -> EdgeHub {
        EdgeHub {
            settings,
            outbox,
            stats: Arc::default(),
            reconnect: tokio::sync::Notify::new(),
        }
    }

    /// Ends the current session and dials again (after a certificate rotation, so the new
    /// certificate is presented). Without a session, the next one is ended right after it
    /// starts; call it only when a fresh session is wanted.
    pub fn reconnect(&self) {
        self.reconnect.notify_one();
    }

    /// True while a session with the cloud is up.
    pub fn is_connected(&self) -> bool {
        self.stats.connected.load(Ordering::Relaxed)
    }

    /// Queues `first` and whatever else is already waiting in the mailbox (up to
    /// [`INTAKE_BATCH`]) for the outbox, so they share commits, without waiting for those
    /// commits: each commit wakes the session ([`Outbox::changed`]), which sends only what is
    /// committed. A message refused because the outbox is full is logged and counted; so is
    /// one whose commit fails (nothing was acknowledged for it), and the store's own error
    /// ends the module when it cannot even queue.
    async fn take_in(&self, first: Message, ctx: &mut ModuleContext) -> Result<(), ModuleError> {
        let mut pushes = Vec::new();
        let mut next = Some(first);
        while let Some(msg) = next {
            let submitted = if is_relayed(&msg) {
                self.outbox.submit_relayed(&msg).await
            } else {
                self.outbox.submit(&msg).await
            };
            match submitted {
                Ok(push) => pushes.push((msg.header.id.clone(), push)),
                Err(e @ (OutboxError::Full { .. } | OutboxError::RelayedFull { .. })) => {
                    let refused = self.stats.refused.fetch_add(1, Ordering::Relaxed) + 1;
                    // A flood is logged at its start and then every 1,000th refusal; every
                    // refusal is counted on /metrics.
                    if refused == 1 || refused.is_multiple_of(1000) {
                        tracing::warn!(
                            msg_id = %msg.header.id,
                            resource = %msg.route.resource,
                            refused_so_far = refused,
                            "cloud-bound message refused: {e}"
                        );
                    }
                }
                Err(e) => return Err(Box::new(e)),
            }
            next = if pushes.len() < INTAKE_BATCH {
                ctx.try_recv()
            } else {
                None
            };
        }
        let stats = self.stats.clone();
        tokio::spawn(async move {
            for (msg_id, push) in pushes {
                if let Err(e) = push.await {
                    stats.refused.fetch_add(1, Ordering::Relaxed);
                    tracing::error!(%msg_id, "cloud-bound message not stored: {e}");
                }
            }
        });
        Ok(())
    }

    /// Waits `delay` while still taking messages into the outbox; false on shutdown.
    async fn idle(
        &self,
        ctx: &mut ModuleContext,
        delay: std::time::Duration,
    ) -> Result<bool, ModuleError> {
        let sleep = tokio::time::sleep(delay);
        tokio::pin!(sleep);
        loop {
            tokio::select! {
                _ = &mut sleep => return Ok(true),
                msg = ctx.recv() => match msg {
                    Some(msg) => self.take_in(msg, ctx).await?,
                    None => return Ok(false),
                },
            }
        }
    }

    fn broadcast(&self, queue: &InboundQueue, content: &str) {
        for group in CONNECTION_GROUPS {
            self.enqueue(
                queue,
                Dispatch::Group(group),
                connection_message(group, content),
            );
        }
    }

    fn enqueue(&self, queue: &InboundQueue, to: Dispatch, msg: Message) {
        if let Some(dropped) = queue.push(to, msg) {
            self.stats.inbound_overflow.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(msg_id = %dropped.header.id, "inbound queue full; oldest message dropped");
        }
    }

    /// Handles one inbound frame payload; `Some(ack)` is a control ack to write at once.
    fn inbound(
        &self,
        payload: &[u8],
        queue: &InboundQueue,
        gate: &mut AnswerGate,
    ) -> Option<Message> {
        self.stats.received.fetch_add(1, Ordering::Relaxed);
        let msg = match decode(payload, self.settings.max_frame) {
            Ok(msg) => msg,
            Err(e) => {
                self.stats.malformed.fetch_add(1, Ordering::Relaxed);
                tracing::warn!("cloud frame skipped: {e}");
                return None;
            }
        };
        gate.answered(&msg);
        if is_control(&msg) {
            return Some(control_ack(&msg));
        }
        match route_inbound(&msg) {
            Dispatch::Drop => {
                let n = self.stats.undeliverable.fetch_add(1, Ordering::Relaxed) + 1;
                // Said at the 1st, 2nd, 4th, 8th... so a cloud that keeps sending them cannot
                // flood the log; the counter has them all.
                if n.is_power_of_two() {
                    tracing::warn!(group = %msg.route.group, source = %msg.route.source, resource = %msg.route.resource, undeliverable_so_far = n, "cloud message has no destination; dropped");
                }
            }
            to => self.enqueue(queue, to, msg),
        }
        None
    }

    /// One connected session: keepalives, backlog flush, live traffic, inbound frames.
    async fn session(
        &self,
        ctx: &mut ModuleContext,
        ws: super::connection::Ws,
        queue: &InboundQueue,
        bucket: &mut TokenBucket,
    ) -> Result<SessionEnd, ModuleError> {
        let deadline = self.settings.write_timeout;
        let (mut sink, mut stream) = ws.split();
        if let Err(e) = write(&mut sink, &keepalive(), deadline).await {
            return Ok(SessionEnd::Broken(e));
        }
        let mut heartbeat = tokio::time::interval(self.settings.heartbeat);
        heartbeat.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        heartbeat.tick().await;
        let mut confirm = tokio::time::interval(self.settings.confirm_after);
        confirm.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        confirm.tick().await;
        // Outbox rows read but not yet written, oldest first.
        let mut ready: std::collections::VecDeque<(u64, Message)> = Default::default();
        // True while the outbox may hold committed rows beyond `loaded`: at the start (the
        // backlog from before this session) and after every commit that added rows.
        let mut unread = true;
        let mut loaded: Option<u64> = None;
        let mut written: Option<u64> = None;
        let mut mark: Option<u64> = None;
        let mut gate = AnswerGate::default();
        let cancel = ctx.token().clone();
        loop {
            ctx.alive();
            // Read on while fewer than a batch wait: messages held for a device's answer must
            // not keep newer messages of other resources unread.
            if unread && ready.len() < FLUSH_BATCH {
                match self.outbox.oldest(loaded, FLUSH_BATCH).await {
                    Ok(batch) if batch.is_empty() => unread = false,
                    Ok(batch) => {
                        loaded = batch.last().map(|(seq, _)| *seq);
                        ready.extend(batch);
                    }
                    Err(OutboxError::Corrupt { seq, reason }) => {
                        tracing::error!("outbox row {seq} cannot be sent ({reason}); removed");
                        self.outbox.remove(seq).await?;
                        loaded = Some(seq);
                    }
                    Err(e) => return Err(Box::new(e)),
                }
                continue;
            }
            // A token now sends at once; otherwise wait for the bucket (rate limit). A device
            // message whose predecessor is unanswered waits for the answer (see AnswerGate).
            let now = Instant::now();
            let sendable = !gate.pick(ready.iter().map(|(_, m)| m), 1, now).is_empty();
            let held = !ready.is_empty() && !sendable;
            let send_wait = sendable.then(|| bucket.ready_in(now));
            let send_now = send_wait == Some(std::time::Duration::ZERO);
            let gives_up = gate.gives_up_at().unwrap_or(now);
            tokio::select! {
                biased;
                _ = cancel.cancelled() => {
                    Self::close(&mut sink).await;
                    return Ok(SessionEnd::Stop);
                }
                _ = self.reconnect.notified() => {
                    Self::close(&mut sink).await;
                    return Ok(SessionEnd::Broken("reconnect requested".to_owned()));
                }
                frame = stream.next() => {
                    let payload = match frame {
                        Some(Ok(WsMessage::Text(text))) => Some(text.as_bytes().to_vec()),
                        Some(Ok(WsMessage::Binary(bytes))) => Some(bytes.to_vec()),
                        Some(Ok(WsMessage::Close(_))) | None => {
                            return Ok(SessionEnd::Broken("closed by the cloud".to_owned()));
                        }
                        // WebSocket pings are answered by tungstenite itself.
                        Some(Ok(_)) => None,
                        Some(Err(e)) => return Ok(SessionEnd::Broken(format!("read failed: {e}"))),
                    };
                    if let Some(ack) = payload.and_then(|p| self.inbound(&p, queue, &mut gate))
                        && let Err(e) = write(&mut sink, &ack, deadline).await
                    {
                        return Ok(SessionEnd::Broken(e));
                    }
                }
                _ = heartbeat.tick() => {
                    if let Err(e) = write(&mut sink, &keepalive(), deadline).await {
                        return Ok(SessionEnd::Broken(e));
                    }
                }
                _ = confirm.tick() => {
                    // Everything written before the previous tick has survived a full interval
                    // of a live link: count it as delivered.
                    let confirmed = mark.take();
                    if let Some(upto) = confirmed {
                        self.outbox.remove_upto(upto).await?;
                    }
                    mark = written.filter(|w| Some(*w) != confirmed);
                }
                () = std::future::ready(()), if send_now => {
                    if let Some(end) = self.send_front(&mut sink, &mut ready, &mut written, bucket, &mut gate, loaded).await {
                        return Ok(end);
                    }
                }
                _ = tokio::time::sleep(send_wait.unwrap_or_default()), if send_wait.is_some() && !send_now => {
                    if let Some(end) = self.send_front(&mut sink, &mut ready, &mut written, bucket, &mut gate, loaded).await {
                        return Ok(end);
                    }
                }
                _ = tokio::time::sleep_until(gives_up.into()), if held => {
                    let expired = gate.expire(Instant::now());
                    self.stats.unanswered.fetch_add(expired as u64, Ordering::Relaxed);
                }
                _ = self.outbox.changed() => unread = true,
                msg = ctx.recv() => match msg {
                    Some(msg) => self.take_in(msg, ctx).await?,
                    None => {
                        Self::close(&mut sink).await;
                        return Ok(SessionEnd::Stop);
                    }
                },
            }
        }
    }

    /// Writes the oldest ready messages that `gate` lets go (see [`AnswerGate::pick`]), as
    /// many as the rate limit has tokens for (at most [`SEND_BATCH`]), with one flush; `Some`
    /// when the write broke the link. `written` becomes the newest seq below which every
    /// message has been written: only those may be removed once delivered.
    async fn send_front(
        &self,
        sink: &mut WsSink,
        ready: &mut std::collections::VecDeque<(u64, Message)>,
        written: &mut Option<u64>,
        bucket: &mut TokenBucket,
        gate: &mut AnswerGate,
        loaded: Option<u64>,
    ) -> Option<SessionEnd> {
        let now = Instant::now();
        let mut picked = gate.pick(ready.iter().map(|(_, m)| m), SEND_BATCH, now);
        let tokens = picked
            .iter()
            .take_while(|_| bucket.try_take(now).is_ok())
            .count();
        picked.truncate(tokens);
        if picked.is_empty() {
            return None;
        }
        let batch: Vec<&Message> = picked.iter().map(|&i| &ready[i].1).collect();
        if let Err(e) = write_batch(sink, &batch, self.settings.write_timeout).await {
            return Some(SessionEnd::Broken(e));
        }
        for &i in picked.iter().rev() {
            if let Some((_, msg)) = ready.remove(i) {
                gate.sent(&msg, now);
            }
        }
        // Everything loaded below the oldest message still waiting has been written (held
        // messages may wait below what was just written).
        let prefix = match ready.front() {
            Some((seq, _)) => seq.checked_sub(1),
            None => loaded,
        };
        if prefix > *written {
            *written = prefix;
        }
        self.stats
            .sent
            .fetch_add(picked.len() as u64, Ordering::Relaxed);
        None
    }

    async fn close(sink: &mut WsSink) {
        use futures_util::SinkExt;
        let _ = tokio::time::timeout(std::time::Duration::from_secs(1), sink.close()).await;
    }
}

impl Module for EdgeHub {
    fn name(&self) -> &'static str {
        module::EDGEHUB
    }

    fn group(&self) -> &'static str {
        group::HUB
    }

    async fn run(self: Arc<Self>, mut ctx: ModuleContext) -> Result<(), ModuleError> {
        let queue = Arc::new(InboundQueue::new(INBOUND_CAPACITY));
        let stop_delivery = ctx.token().child_token();
        let _stop_on_exit = stop_delivery.clone().drop_guard();
        tokio::spawn(deliver(
            ctx.bus().clone(),
            queue.clone(),
            self.stats.clone(),
            stop_delivery,
        ));
        let mut backoff = Backoff::from_clock(self.settings.backoff);
        let mut dial_warnings =
            wedge_core::log_limit::RepeatLimit::new(std::time::Duration::from_secs(60));
        let s = &self.settings;
        let mut bucket = TokenBucket::new(s.message_qps, s.message_burst, Instant::now());
        ctx.ready();
        loop {
            let dialed = {
                let dialing = dial(&self.settings);
                tokio::pin!(dialing);
                loop {
                    tokio::select! {
                        result = &mut dialing => break result,
                        msg = ctx.recv() => match msg {
                            Some(msg) => self.take_in(msg, &mut ctx).await?,
                            None => return Ok(()),
                        },
                    }
                }
            };
            let ws = match dialed {
                Ok(ws) => ws,
                Err(e) => {
                    self.stats.dial_failures.fetch_add(1, Ordering::Relaxed);
                    let delay = backoff.next_delay();
                    // During an outage: the first failure, then one line a minute with the
                    // count (`wedge_edgehub_dial_failures_total` has them all).
                    match dial_warnings.check(Instant::now()) {
                        Some(0) => {
                            tracing::warn!(server = %self.settings.server, "cloud dial failed: {e}; retrying in {delay:?}")
                        }
                        Some(held_back) => {
                            tracing::warn!(server = %self.settings.server, "cloud dial failed: {e}; retrying in {delay:?} ({held_back} more failures in the last minute)")
                        }
                        None => {
                            tracing::debug!(server = %self.settings.server, "cloud dial failed: {e}; retrying in {delay:?}")
                        }
                    }
                    if !self.idle(&mut ctx, delay).await? {
                        return Ok(());
                    }
                    continue;
                }
            };
            backoff.reset();
            dial_warnings.reset();
            self.stats.connected.store(true, Ordering::Relaxed);
            self.stats.connects.fetch_add(1, Ordering::Relaxed);
            tracing::info!(server = %self.settings.server, "connected to the cloud");
            self.broadcast(&queue, "cloud_connected");
            let end = self.session(&mut ctx, ws, &queue, &mut bucket).await;
            self.stats.connected.store(false, Ordering::Relaxed);
            self.stats.disconnects.fetch_add(1, Ordering::Relaxed);
            self.broadcast(&queue, "cloud_disconnected");
            match end? {
                SessionEnd::Stop => return Ok(()),
                SessionEnd::Broken(reason) => {
                    let delay = backoff.next_delay();
                    tracing::warn!("cloud link lost: {reason}; redialing in {delay:?}");
                    if !self.idle(&mut ctx, delay).await? {
                        return Ok(());
                    }
                }
            }
        }
    }
}

impl MetricsSource for EdgeHub {
    /// Writes the link's counters, then the outbox's.
    fn write_metrics(&self, w: &mut PromWriter) {
        let s = &self.stats;
        let load = |c: &AtomicU64| c.load(Ordering::Relaxed) as f64;
        w.family(
            "wedge_edgehub_connected",
            "1 while the cloud link is up.",
            "gauge",
        );
        let up = if s.connected.load(Ordering::Relaxed) {
            1.0
        } else {
            0.0
        };
        w.sample("wedge_edgehub_connected", &[], up);
        let counters: [(&str, &str, &AtomicU64); 10] = [
            (
                "wedge_edgehub_connects_total",
                "Sessions established with the cloud.",
                &s.connects,
            ),
            (
                "wedge_edgehub_dial_failures_total",
                "Failed dials to the cloud.",
                &s.dial_failures,
            ),
            (
                "wedge_edgehub_disconnects_total",
                "Sessions that ended.",
                &s.disconnects,
            ),
            (
                "wedge_edgehub_messages_sent_total",
                "Cloud-bound messages written to the link (resends included).",
                &s.sent,
            ),
            (
                "wedge_edgehub_frames_received_total",
                "Frames received from the cloud.",
                &s.received,
            ),
            (
                "wedge_edgehub_frames_malformed_total",
                "Inbound frames skipped as oversize or not a message.",
                &s.malformed,
            ),
            (
                "wedge_edgehub_device_answers_missed_total",
                "Device messages sent on after the cloud did not answer the previous one of \
                 their device within a second.",
                &s.unanswered,
            ),
            (
                "wedge_edgehub_inbound_dropped_total",
                "Inbound messages dropped because the inbound queue was full.",
                &s.inbound_overflow,
            ),
            (
                "wedge_edgehub_inbound_undeliverable_total",
                "Inbound messages no module or waiting request took.",
                &s.undeliverable,
            ),
            (
                "wedge_edgehub_outbound_refused_total",
                "Cloud-bound messages refused because the outbox was full.",
                &s.refused,
            ),
        ];
        for (name, help, counter) in counters {
            w.family(name, help, "counter");
            w.sample(name, &[], load(counter));
        }
        self.outbox.write_metrics(w);
    }
}
