//! One tunnel session: from an accepted WebSocket until it breaks.
//!
//! Three parts share the session:
//! - the **reader** (this file's [`serve`]) reads CloudCore's messages and dispatches them: a
//!   `*_CONNECT` opens a local connection (a task of its own, see `local.rs`), `DATA` goes to
//!   that connection's bounded queue, `REMOVE_CONNECT` cancels it, `CLOSE_CONNECT` ends the
//!   session;
//! - the **writer** ([`write_loop`]) owns the socket's writing half: it writes what the
//!   connections queue (one bounded queue, so a full tunnel makes every local reader wait) and
//!   pings CloudCore every `ping_interval`, as edgecore does ("ping you", every 5 s);
//! - the **connections**, each ending with the `REMOVE_CONNECT` edgecore sends however a
//!   connection ended (its kubelet answer done, the cloud's `REMOVE_CONNECT`, a failure).
//!
//! Liveness: CloudCore answers pings only once it reads the session, which it starts after it
//! has recorded the node's kubelet port (up to two minutes while the Node does not exist). So
//! the read deadline applies only after a first pong: from then on, a session that hears
//! nothing for `read_deadline` is dead (edgecore has no such check and notices a dead cloud
//! only when a write fails).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{debug, info, trace, warn};

use crate::config::TunnelConfig;
use crate::connect::ConnectRequest;
use crate::local;
use crate::message::{MAX_ENCODED, MessageType, TunnelMessage};
use crate::stats::Stats;
use crate::ws::{self, FrameReader, WsEvent};

#[cfg(test)]
mod tests;

/// What kind of kubelet connection a connect message opens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// `GET /containerLogs/...`, the body streamed back.
    Logs,
    /// `/exec/...`, upgraded, bytes piped both ways.
    Exec,
    /// `GET /stats/...` or `/metrics/...`, the body streamed back line by line.
    Metrics,
    /// `/attach/...`, upgraded, bytes piped both ways.
    Attach,
}

impl Kind {
    /// Every kind, in [`Kind::index`] order.
    pub(crate) const ALL: [Kind; 4] = [Kind::Logs, Kind::Exec, Kind::Metrics, Kind::Attach];

    pub(crate) fn of(t: MessageType) -> Option<Kind> {
        match t {
            MessageType::LogsConnect => Some(Kind::Logs),
            MessageType::ExecConnect => Some(Kind::Exec),
            MessageType::MetricConnect => Some(Kind::Metrics),
            MessageType::AttachConnect => Some(Kind::Attach),
            _ => None,
        }
    }

    pub(crate) fn index(self) -> usize {
        match self {
            Kind::Logs => 0,
            Kind::Exec => 1,
            Kind::Metrics => 2,
            Kind::Attach => 3,
        }
    }

    pub(crate) fn label(self) -> &'static str {
        Stats::KINDS[self.index()]
    }

    /// Exec and attach: an upgraded connection piped both ways.
    pub(crate) fn is_upgrade(self) -> bool {
        matches!(self, Kind::Exec | Kind::Attach)
    }
}

/// How a session ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum SessionEnd {
    /// The node is shutting down.
    Shutdown,
    /// CloudCore sent `CLOSE_CONNECT` with this reason.
    CloudRefused(String),
    /// CloudCore answered pings, then fell silent for the read deadline.
    CloudSilent,
    /// The socket or the framing failed.
    Failed(String),
}

/// A message for the writer.
#[derive(Debug)]
pub(crate) enum Outgoing {
    /// A tunnel message (one text frame).
    Message(TunnelMessage),
    /// The answer to the cloud's ping.
    Pong(Bytes),
}

/// Why a message could not be queued: the session is over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SessionGone;

/// The connections' way to the writer.
#[derive(Clone)]
pub(crate) struct TunnelWriter {
    tx: mpsc::Sender<Outgoing>,
    stats: Arc<Stats>,
}

impl TunnelWriter {
    /// Queues `msg`, waiting while the queue is full.
    pub(crate) async fn send(&self, msg: TunnelMessage) -> Result<(), SessionGone> {
        if msg.kind == MessageType::Data {
            Stats::add(&self.stats.bytes_out, msg.data.len() as u64);
        }
        self.tx
            .send(Outgoing::Message(msg))
            .await
            .map_err(|_| SessionGone)
    }
}

/// The first reason given wins; giving one cancels the session.
struct Ending {
    token: CancellationToken,
    reason: Mutex<Option<SessionEnd>>,
}

impl Ending {
    fn end(&self, why: SessionEnd) {
        let mut reason = self.reason.lock().unwrap_or_else(|e| e.into_inner());
        if reason.is_none() {
            *reason = Some(why);
        }
        self.token.cancel();
    }

    fn reason(&self) -> SessionEnd {
        self.reason
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
            .unwrap_or(SessionEnd::Shutdown)
    }
}

/// When the cloud was last heard, whether it ever answered a ping, and whether the reader is
/// waiting for it (while the reader hands data to a slow connection, silence is not the
/// cloud's).
struct Liveness {
    start: Instant,
    last_heard_ms: AtomicU64,
    answered: AtomicBool,
    reading: AtomicBool,
}

impl Liveness {
    fn heard(&self) {
        self.last_heard_ms
            .store(self.start.elapsed().as_millis() as u64, Ordering::Relaxed);
    }

    fn waiting(&self, yes: bool) {
        if yes {
            self.heard();
        }
        self.reading.store(yes, Ordering::Relaxed);
    }

    fn silent_for(&self) -> Option<Duration> {
        if !self.answered.load(Ordering::Relaxed) || !self.reading.load(Ordering::Relaxed) {
            return None;
        }
        let now = self.start.elapsed().as_millis() as u64;
        Some(Duration::from_millis(
            now.saturating_sub(self.last_heard_ms.load(Ordering::Relaxed)),
        ))
    }
}

/// An open local connection, as the reader sees it.
struct Handle {
    cancel: CancellationToken,
    /// Cloud bytes for an upgraded connection.
    data: Option<mpsc::Sender<Bytes>>,
}

type Registry = Arc<Mutex<HashMap<u64, Handle>>>;

fn lock(registry: &Registry) -> std::sync::MutexGuard<'_, HashMap<u64, Handle>> {
    registry.lock().unwrap_or_else(|e| e.into_inner())
}

/// What a local connection gets from the session.
pub(crate) struct ConnContext {
    /// The connection id.
    pub id: u64,
    /// What it is.
    pub kind: Kind,
    /// The way to the cloud.
    pub writer: TunnelWriter,
    /// Cancelled by the cloud's `REMOVE_CONNECT`, a stall, or the session's end.
    pub cancel: CancellationToken,
    /// Cloud bytes (upgraded connections only).
    pub data: Option<mpsc::Receiver<Bytes>>,
    /// The session's settings.
    pub config: Arc<TunnelConfig>,
}

impl ConnContext {
    /// Sends `bytes` to the cloud as `DATA` messages of at most `chunk_size` bytes; `false`
    /// when the connection was cancelled or the session is gone.
    pub(crate) async fn send_data(&self, bytes: &[u8]) -> bool {
        for chunk in bytes.chunks(self.config.chunk_size.max(1)) {
            let msg = TunnelMessage::new(self.id, MessageType::Data, Bytes::copy_from_slice(chunk));
            tokio::select! {
                biased;
                _ = self.cancel.cancelled() => return false,
                sent = self.writer.send(msg) => if sent.is_err() { return false },
            }
        }
        true
    }
}

/// Serves one session on an established WebSocket (`already`: bytes read past the
/// handshake) until it ends, then closes every local connection it opened (within 2 s).
pub(crate) async fn serve<S>(
    stream: S,
    already: BytesMut,
    config: Arc<TunnelConfig>,
    stats: Arc<Stats>,
    shutdown: &CancellationToken,
) -> SessionEnd
where
    S: AsyncRead + AsyncWrite + Send + 'static,
{
    let (read_half, write_half) = tokio::io::split(stream);
    let ending = Arc::new(Ending {
        token: shutdown.child_token(),
        reason: Mutex::new(None),
    });
    let liveness = Arc::new(Liveness {
        start: Instant::now(),
        last_heard_ms: AtomicU64::new(0),
        answered: AtomicBool::new(false),
        reading: AtomicBool::new(false),
    });
    let (tx, rx) = mpsc::channel(config.outbound_queue.max(1));
    let writer = TunnelWriter {
        tx,
        stats: stats.clone(),
    };
    let writer_task = tokio::spawn(write_loop(
        write_half,
        rx,
        config.clone(),
        liveness.clone(),
        ending.clone(),
        stats.clone(),
    ));
    let registry: Registry = Arc::new(Mutex::new(HashMap::new()));
    let tracker = TaskTracker::new();
    let mut reader = FrameReader::new(read_half, already, MAX_ENCODED);
    let mut dispatch = Dispatch {
        config: &config,
        stats: &stats,
        writer: &writer,
        registry: &registry,
        tracker: &tracker,
        ending: &ending,
    };
    loop {
        liveness.waiting(true);
        let event = tokio::select! {
            _ = ending.token.cancelled() => break,
            event = reader.next() => event,
        };
        liveness.waiting(false);
        match event {
            Ok(WsEvent::Message(bytes)) => {
                Stats::inc(&stats.messages_in);
                match TunnelMessage::decode(bytes) {
                    Ok(msg) => {
                        if let Some(end) = dispatch.message(msg).await {
                            ending.end(end);
                            break;
                        }
                    }
                    Err(e) => {
                        Stats::inc(&stats.bad_messages);
                        warn!("edgestream: undecodable tunnel message skipped: {e}");
                    }
                }
            }
            Ok(WsEvent::Ping(payload)) => {
                if writer.tx.try_send(Outgoing::Pong(payload)).is_err() {
                    Stats::inc(&stats.dropped_pongs);
                }
            }
            Ok(WsEvent::Pong) => liveness.answered.store(true, Ordering::Relaxed),
            Ok(WsEvent::Oversize(n)) => {
                Stats::inc(&stats.bad_messages);
                warn!(
                    "edgestream: tunnel message of {n} bytes skipped (longer than CloudCore's 1 MiB)"
                );
            }
            Err(e) => {
                ending.end(SessionEnd::Failed(e.to_string()));
                break;
            }
        }
    }
    // Every connection's token is a child of the session's: they stop now.
    ending.token.cancel();
    drop(writer);
    tracker.close();
    if tokio::time::timeout(Duration::from_secs(2), tracker.wait())
        .await
        .is_err()
    {
        warn!("edgestream: local connections still closing 2 s after the session ended");
    }
    lock(&registry).clear();
    let _ = tokio::time::timeout(Duration::from_secs(2), writer_task).await;
    ending.reason()
}

/// The reader's dispatch of one message.
struct Dispatch<'a> {
    config: &'a Arc<TunnelConfig>,
    stats: &'a Arc<Stats>,
    writer: &'a TunnelWriter,
    registry: &'a Registry,
    tracker: &'a TaskTracker,
    ending: &'a Arc<Ending>,
}

impl Dispatch<'_> {
    /// Handles `msg`; `Some` when it ends the session.
    async fn message(&mut self, msg: TunnelMessage) -> Option<SessionEnd> {
        debug!("edgestream: received {msg}");
        match msg.kind {
            MessageType::Data => {
                Stats::add(&self.stats.bytes_in, msg.data.len() as u64);
                self.data(msg).await;
            }
            MessageType::RemoveConnect => {
                if let Some(h) = lock(self.registry).get(&msg.connect_id) {
                    h.cancel.cancel();
                }
            }
            MessageType::CloseConnect => {
                return Some(SessionEnd::CloudRefused(
                    String::from_utf8_lossy(&msg.data).into_owned(),
                ));
            }
            MessageType::Unknown(code) => {
                Stats::inc(&self.stats.bad_messages);
                warn!(
                    "edgestream: tunnel message of unknown type {code} for connection {} ignored",
                    msg.connect_id
                );
            }
            t => {
                if let Some(kind) = Kind::of(t) {
                    self.open(kind, msg).await;
                }
            }
        }
        None
    }

    /// Hands cloud bytes to their connection, waiting at most the write deadline; a
    /// connection that does not take them in time is closed.
    async fn data(&mut self, msg: TunnelMessage) {
        let (tx, cancel) = match lock(self.registry).get(&msg.connect_id) {
            Some(Handle {
                data: Some(tx),
                cancel,
            }) => (tx.clone(), cancel.clone()),
            // Data for a logs or metrics connection, or one already closed: nothing to do.
            _ => return,
        };
        // Nothing for a connection that is closing (a stalled one would make every later
        // message wait the deadline again).
        if msg.data.is_empty() || cancel.is_cancelled() {
            return;
        }
        tokio::select! {
            _ = self.ending.token.cancelled() => {}
            sent = tokio::time::timeout(self.config.write_deadline, tx.send(msg.data)) => {
                if sent.is_err() {
                    Stats::inc(&self.stats.stalled);
                    warn!(
                        "edgestream: connection {} took no data from the cloud for {:?}; closing it",
                        msg.connect_id, self.config.write_deadline
                    );
                    cancel.cancel();
                }
            }
        }
    }

    /// Opens a local connection for a connect message, or refuses it.
    async fn open(&mut self, kind: Kind, msg: TunnelMessage) {
        let id = msg.connect_id;
        trace!(
            "edgestream: {} connect payload: {}",
            kind.label(),
            String::from_utf8_lossy(&msg.data)
        );
        let request = match ConnectRequest::parse(&msg.data, kind.is_upgrade()) {
            Ok(r) => r,
            Err(e) => {
                Stats::inc(&self.stats.refused_connects);
                warn!("edgestream: {} connection {id} refused: {e}", kind.label());
                self.refuse(id, kind, "400 Bad Request", &e.to_string())
                    .await;
                return;
            }
        };
        if request.dropped_headers > 0 {
            Stats::add(&self.stats.dropped_headers, request.dropped_headers as u64);
            warn!(
                "edgestream: {} connection {id}: {} header line(s) left out (not valid HTTP)",
                kind.label(),
                request.dropped_headers
            );
        }
        let (data_tx, data_rx) = if kind.is_upgrade() {
            let (tx, rx) = mpsc::channel(self.config.inbound_queue.max(1));
            (Some(tx), Some(rx))
        } else {
            (None, None)
        };
        let cancel = self.ending.token.child_token();
        enum Verdict {
            Open,
            Duplicate,
            Full,
        }
        let verdict = {
            let mut registry = lock(self.registry);
            if registry.contains_key(&id) {
                Verdict::Duplicate
            } else if registry.len() >= self.config.max_connections {
                Verdict::Full
            } else {
                registry.insert(
                    id,
                    Handle {
                        cancel: cancel.clone(),
                        data: data_tx,
                    },
                );
                Verdict::Open
            }
        };
        match verdict {
            Verdict::Open => {}
            Verdict::Duplicate => {
                Stats::inc(&self.stats.refused_connects);
                warn!(
                    "edgestream: {} connect for connection {id}, which is open, ignored",
                    kind.label()
                );
                return;
            }
            Verdict::Full => {
                Stats::inc(&self.stats.refused_connects);
                let why = format!(
                    "{} connections are open (the limit)",
                    self.config.max_connections
                );
                warn!(
                    "edgestream: {} connection {id} refused: {why}",
                    kind.label()
                );
                self.refuse(id, kind, "503 Service Unavailable", &why).await;
                return;
            }
        }
        Stats::inc(&self.stats.opened[kind.index()]);
        if kind.is_upgrade() {
            // A way into a container: worth a line in the node's log.
            info!(
                "edgestream: {} connection {id}: {} {}",
                kind.label(),
                request.method,
                request.target
            );
        } else {
            debug!(
                "edgestream: {} connection {id}: {} {}",
                kind.label(),
                request.method,
                request.target
            );
        }
        let ctx = ConnContext {
            id,
            kind,
            writer: self.writer.clone(),
            cancel,
            data: data_rx,
            config: self.config.clone(),
        };
        let registry = self.registry.clone();
        let stats = self.stats.clone();
        let session = self.ending.token.clone();
        let writer = self.writer.clone();
        self.tracker.spawn(async move {
            let mut ctx = ctx;
            if let Err(e) = local::serve(&mut ctx, request).await {
                Stats::inc(&stats.local_failures[kind.index()]);
                warn!("edgestream: {} connection {id}: {e}", kind.label());
            }
            lock(&registry).remove(&id);
            drop(ctx);
            if !session.is_cancelled() {
                // edgecore tells the cloud it is done whichever side ended the connection;
                // that ends the apiserver's request.
                let _ = writer.send(TunnelMessage::remove(id)).await;
            }
            debug!("edgestream: {} connection {id} closed", kind.label());
        });
    }

    /// Ends connection `id` at once: for exec and attach, whose bytes are the whole answer
    /// the apiserver gets, with an HTTP error saying why; then `REMOVE_CONNECT`.
    async fn refuse(&self, id: u64, kind: Kind, status: &str, why: &str) {
        let mut msgs = Vec::with_capacity(2);
        if kind.is_upgrade() {
            msgs.push(TunnelMessage::new(
                id,
                MessageType::Data,
                local::error_response(status, why),
            ));
        }
        msgs.push(TunnelMessage::remove(id));
        for msg in msgs {
            tokio::select! {
                _ = self.ending.token.cancelled() => return,
                _ = self.writer.send(msg) => {}
            }
        }
    }
}

/// The writer: frames what is queued (several per flush when they are waiting), pings on
/// schedule, checks the cloud's liveness, and gives up when a write takes longer than the
/// write deadline.
async fn write_loop<W>(
    mut out: W,
    mut rx: mpsc::Receiver<Outgoing>,
    config: Arc<TunnelConfig>,
    liveness: Arc<Liveness>,
    ending: Arc<Ending>,
    stats: Arc<Stats>,
) where
    W: AsyncWrite + Unpin,
{
    const BATCH_BYTES: usize = 256 * 1024;
    let mut ping = tokio::time::interval(config.ping_interval.max(Duration::from_millis(100)));
    ping.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    ping.tick().await;
    let mut buf = BytesMut::with_capacity(64 * 1024);
    let encode = |item: Outgoing, buf: &mut BytesMut| match item {
        Outgoing::Message(m) => {
            Stats::inc(&stats.messages_out);
            debug!("edgestream: sending {m}");
            ws::encode_frame(ws::OP_TEXT, &m.encode(), buf);
        }
        Outgoing::Pong(p) => ws::encode_frame(ws::OP_PONG, &p, buf),
    };
    loop {
        tokio::select! {
            _ = ending.token.cancelled() => {
                // A close frame and TLS close_notify, if the socket still takes them.
                let mut close = BytesMut::new();
                ws::encode_frame(ws::OP_CLOSE, &1000u16.to_be_bytes(), &mut close);
                let _ = tokio::time::timeout(Duration::from_secs(1), async {
                    out.write_all(&close).await?;
                    out.shutdown().await
                })
                .await;
                return;
            }
            _ = ping.tick() => {
                if let Some(silent) = liveness.silent_for()
                    && !config.read_deadline.is_zero()
                    && silent > config.read_deadline
                {
                    Stats::inc(&stats.silent_cloud);
                    ending.end(SessionEnd::CloudSilent);
                    return;
                }
                ws::encode_frame(ws::OP_PING, b"ping you", &mut buf);
            }
            item = rx.recv() => {
                let Some(item) = item else { return };
                encode(item, &mut buf);
                while buf.len() < BATCH_BYTES {
                    match rx.try_recv() {
                        Ok(item) => encode(item, &mut buf),
                        Err(_) => break,
                    }
                }
            }
        }
        if buf.is_empty() {
            continue;
        }
        let written = tokio::time::timeout(config.write_deadline, async {
            out.write_all(&buf).await?;
            out.flush().await
        })
        .await;
        match written {
            Ok(Ok(())) => buf.clear(),
            Ok(Err(e)) => {
                ending.end(SessionEnd::Failed(format!("write: {e}")));
                return;
            }
            Err(_) => {
                ending.end(SessionEnd::Failed(format!(
                    "a write took longer than {:?}",
                    config.write_deadline
                )));
                return;
            }
        }
    }
}
