//! One upgraded exec/attach connection: stream set-up, the reader and writer tasks, the end.
//!
//! Two tasks own the connection. The reader decodes the client's frames, answers each
//! SYN_STREAM with a SYN_REPLY (through the writer), echoes PINGs, and routes DATA: stdin into a
//! bounded queue (awaiting space: back-pressure reaches the client through TCP, since
//! spdystream does no flow control), resize JSON into a bounded queue of [`TerminalSize`].
//! The writer encodes frames from two bounded queues, control frames first, and never waits for
//! send windows (WINDOW_UPDATE is ignored, as spdystream ignores it).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use serde::Deserialize;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::frame::{self, Frame, FrameDecoder, FrameEncoder, FrameError, HeaderBlock, Limits};
use crate::{ExitOutcome, Protocol, RemoteCommandError, StreamOptions};

/// Kubelet's default for how long the client has to create its streams
/// (`remotecommand.DefaultStreamCreationTimeout`).
pub const DEFAULT_STREAM_CREATION_TIMEOUT: Duration = Duration::from_secs(30);

/// Queued control frames (SYN_REPLY, PING, RST_STREAM) waiting for the writer.
const CONTROL_QUEUE: usize = 64;
/// Queued data frames waiting for the writer.
const DATA_QUEUE: usize = 32;
/// Queued stdin chunks waiting for the caller.
const STDIN_QUEUE: usize = 16;
/// Queued resize events waiting for the caller.
const RESIZE_QUEUE: usize = 8;
/// Streams one connection may open (an exec needs at most five).
const MAX_STREAMS: usize = 16;
/// Largest data frame we send.
const OUTPUT_CHUNK: usize = 32 * 1024;
/// Bytes the writer gathers before writing to the socket.
const WRITE_BATCH: usize = 64 * 1024;
/// Largest incomplete JSON object kept from the resize stream.
const RESIZE_BUFFER_MAX: usize = 4096;
/// How long `finish` may take to hand the last frames to the socket.
const FINISH_TIMEOUT: Duration = Duration::from_secs(10);
/// How long `finish` waits for the client to close after our GOAWAY.
const LINGER: Duration = Duration::from_secs(2);

/// A terminal size, as the client sends it on the resize stream (`{"Width":W,"Height":H}`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Deserialize)]
pub struct TerminalSize {
    /// Columns.
    #[serde(rename = "Width", alias = "width", default)]
    pub width: u16,
    /// Rows.
    #[serde(rename = "Height", alias = "height", default)]
    pub height: u16,
}

/// Counters of one session.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SessionStats {
    /// Stdin bytes handed to the caller.
    pub stdin_bytes: u64,
    /// Stdout bytes accepted from the caller.
    pub stdout_bytes: u64,
    /// Stderr bytes accepted from the caller.
    pub stderr_bytes: u64,
    /// Resize events handed to the caller.
    pub resize_events: u64,
    /// Data frames refused: for streams that take no input, unknown or closed streams, or stdin
    /// after its consumer went away.
    pub refused_frames: u64,
    /// Payload bytes of the refused frames.
    pub refused_bytes: u64,
    /// Resize events refused because the caller's resize queue was full or closed.
    pub refused_resizes: u64,
}

#[derive(Debug, Default)]
struct Counters {
    stdin_bytes: AtomicU64,
    stdout_bytes: AtomicU64,
    stderr_bytes: AtomicU64,
    resize_events: AtomicU64,
    refused_frames: AtomicU64,
    refused_bytes: AtomicU64,
    refused_resizes: AtomicU64,
}

impl Counters {
    fn add(counter: &AtomicU64, n: usize) {
        counter.fetch_add(n as u64, Ordering::Relaxed);
    }

    fn refuse(&self, bytes: usize) {
        Counters::add(&self.refused_frames, 1);
        Counters::add(&self.refused_bytes, bytes);
    }

    fn snapshot(&self) -> SessionStats {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        SessionStats {
            stdin_bytes: get(&self.stdin_bytes),
            stdout_bytes: get(&self.stdout_bytes),
            stderr_bytes: get(&self.stderr_bytes),
            resize_events: get(&self.resize_events),
            refused_frames: get(&self.refused_frames),
            refused_bytes: get(&self.refused_bytes),
            refused_resizes: get(&self.refused_resizes),
        }
    }
}

/// State shared by the tasks and the handles.
#[derive(Debug, Default)]
struct Shared {
    counters: Counters,
    /// The client is gone: connection closed or broken, or it sent GOAWAY.
    gone: CancellationToken,
    /// Our side is ending the session: stop waiting on the caller's queues.
    closing: CancellationToken,
    /// Streams the client reset.
    reset: Mutex<HashSet<u32>>,
    /// Why the reader stopped, when it stopped on bad input.
    failure: Mutex<Option<FrameError>>,
}

impl Shared {
    fn is_reset(&self, stream_id: u32) -> bool {
        self.reset
            .lock()
            .map(|set| set.contains(&stream_id))
            .unwrap_or(false)
    }

    fn mark_reset(&self, stream_id: u32) {
        if let Ok(mut set) = self.reset.lock() {
            set.insert(stream_id);
        }
    }

    fn take_failure(&self) -> Option<FrameError> {
        self.failure.lock().ok().and_then(|mut f| f.take())
    }
}

/// Signals that the client has gone away (connection closed or broken, or GOAWAY received):
/// the caller should stop the command's I/O and call [`Session::finish`].
#[derive(Debug, Clone)]
pub struct PeerGone(CancellationToken);

impl PeerGone {
    /// Resolves once the client is gone.
    pub async fn wait(&self) {
        self.0.cancelled().await;
    }

    /// Whether the client is gone.
    pub fn is_gone(&self) -> bool {
        self.0.is_cancelled()
    }
}

/// The stream kinds of the remotecommand protocol (the `streamtype` header).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Kind {
    Error,
    Stdin,
    Stdout,
    Stderr,
    Resize,
    Other,
}

impl Kind {
    fn of(headers: &HeaderBlock) -> Kind {
        match headers.get("streamtype") {
            Some("error") => Kind::Error,
            Some("stdin") => Kind::Stdin,
            Some("stdout") => Kind::Stdout,
            Some("stderr") => Kind::Stderr,
            Some("resize") => Kind::Resize,
            // v5's "close" stream is WebSocket-only; kubelet does not expect it over SPDY
            // either. Like any other type it is accepted and ignored.
            _ => Kind::Other,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Kind::Error => "error",
            Kind::Stdin => "stdin",
            Kind::Stdout => "stdout",
            Kind::Stderr => "stderr",
            Kind::Resize => "resize",
            Kind::Other => "other",
        }
    }
}

/// Work for the writer task.
#[derive(Debug)]
enum WriterCmd {
    /// Accept a client stream (SYN_REPLY with no headers, as apimachinery's server does).
    Reply {
        stream_id: u32,
    },
    Ping {
        id: u32,
    },
    Reset {
        stream_id: u32,
        status: u32,
    },
    Data {
        stream_id: u32,
        data: Bytes,
        fin: bool,
    },
    /// GOAWAY(PROTOCOL_ERROR), after bad input from the client.
    ProtocolError,
    /// FIN every stream still open on our side, GOAWAY, flush, shut the socket's write side.
    Finish {
        done: oneshot::Sender<bool>,
    },
}

/// A stream the reader learnt of, handed to [`accept`].
struct Registration {
    kind: Kind,
    stream_id: u32,
    stdin: Option<mpsc::Receiver<Bytes>>,
    resize: Option<mpsc::Receiver<TerminalSize>>,
}

/// The client's stdin: chunks in arrival order, `None` (or a 0-byte read) once the client
/// closed it or went away. Also an [`AsyncRead`], for `tokio::io::copy` into a process's stdin.
#[derive(Debug)]
pub struct Stdin {
    rx: mpsc::Receiver<Bytes>,
    pending: Bytes,
}

impl Stdin {
    /// The next chunk; `None` at end of input.
    pub async fn recv(&mut self) -> Option<Bytes> {
        if !self.pending.is_empty() {
            return Some(std::mem::take(&mut self.pending));
        }
        self.rx.recv().await
    }
}

impl AsyncRead for Stdin {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        while this.pending.is_empty() {
            match this.rx.poll_recv(cx) {
                Poll::Ready(Some(chunk)) => this.pending = chunk,
                Poll::Ready(None) => return Poll::Ready(Ok(())),
                Poll::Pending => return Poll::Pending,
            }
        }
        let n = buf.remaining().min(this.pending.len());
        buf.put_slice(&this.pending.split_to(n));
        Poll::Ready(Ok(()))
    }
}

/// Sends the command's stdout or stderr to the client. Cloneable; sending waits while the
/// writer's bounded queue is full.
#[derive(Clone)]
pub struct OutputSender {
    stream_id: u32,
    stderr: bool,
    tx: mpsc::Sender<WriterCmd>,
    shared: Arc<Shared>,
}

impl std::fmt::Debug for OutputSender {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OutputSender")
            .field("stream_id", &self.stream_id)
            .field("stderr", &self.stderr)
            .finish_non_exhaustive()
    }
}

impl OutputSender {
    /// The SPDY stream this sender writes to.
    pub fn stream_id(&self) -> u32 {
        self.stream_id
    }

    /// Queues `data` for the client (split into frames of at most 32 KiB). Fails with
    /// [`RemoteCommandError::ConnectionClosed`] once the client is gone, or
    /// [`RemoteCommandError::StreamReset`] if it reset this stream.
    pub async fn send(&self, mut data: Bytes) -> Result<(), RemoteCommandError> {
        let counter = if self.stderr {
            &self.shared.counters.stderr_bytes
        } else {
            &self.shared.counters.stdout_bytes
        };
        while !data.is_empty() {
            if self.shared.gone.is_cancelled() {
                return Err(RemoteCommandError::ConnectionClosed);
            }
            if self.shared.is_reset(self.stream_id) {
                return Err(RemoteCommandError::StreamReset(self.stream_id));
            }
            let chunk = data.split_to(data.len().min(OUTPUT_CHUNK));
            let n = chunk.len();
            let cmd = WriterCmd::Data {
                stream_id: self.stream_id,
                data: chunk,
                fin: false,
            };
            tokio::select! {
                biased;
                _ = self.shared.gone.cancelled() => return Err(RemoteCommandError::ConnectionClosed),
                sent = self.tx.send(cmd) => sent.map_err(|_| RemoteCommandError::ConnectionClosed)?,
            }
            Counters::add(counter, n);
        }
        Ok(())
    }
}

/// An accepted exec/attach session. Take the handles you need out of the public fields, run
/// the command, then call [`Session::finish`] with its outcome. Dropping a session without
/// finishing it drops the connection abruptly.
///
/// Stdin is delivered with back-pressure: while its queue is full the connection is not read
/// (the client is paused, as spdystream has no flow control). A caller with nowhere to put
/// stdin should drop [`Session::stdin`]; what arrives then is discarded and counted in
/// [`SessionStats::refused_bytes`]. Resize events are not worth pausing for: when the resize
/// queue is full an event is refused and counted in [`SessionStats::refused_resizes`].
///
/// Bridging to Docker (bollard's `start_exec` in attached mode): copy `stdin` into its input
/// (`tokio::io::copy(&mut stdin, &mut input)`, then shut the input down at EOF), send each
/// output chunk to `stdout` / `stderr` by its kind, forward `resize` events to `resize_exec`,
/// stop when [`Session::peer_gone`] fires, and finish with the exit code from `inspect_exec`.
pub struct Session {
    /// The client's stdin, if it asked for stdin.
    pub stdin: Option<Stdin>,
    /// The command's stdout, if the client asked for it.
    pub stdout: Option<OutputSender>,
    /// The command's stderr, if the client asked for it (never with a tty).
    pub stderr: Option<OutputSender>,
    /// Terminal size changes, for a tty session on v3 and later; ends when the client closes
    /// the resize stream.
    pub resize: Option<mpsc::Receiver<TerminalSize>>,
    protocol: Protocol,
    options: StreamOptions,
    error_stream: u32,
    data_tx: mpsc::Sender<WriterCmd>,
    shared: Arc<Shared>,
    reader: Option<JoinHandle<()>>,
    writer: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("protocol", &self.protocol)
            .field("options", &self.options)
            .field("error_stream", &self.error_stream)
            .finish_non_exhaustive()
    }
}

impl Session {
    /// The negotiated protocol.
    pub fn protocol(&self) -> Protocol {
        self.protocol
    }

    /// The streams of this session.
    pub fn options(&self) -> StreamOptions {
        self.options
    }

    /// A signal that resolves when the client goes away.
    pub fn peer_gone(&self) -> PeerGone {
        PeerGone(self.shared.gone.clone())
    }

    /// The counters so far.
    pub fn stats(&self) -> SessionStats {
        self.shared.counters.snapshot()
    }

    /// Ends the session: writes the outcome on the error stream (a JSON `metav1.Status` on
    /// v4/v5, the error text, if any, before), half-closes every stream (FIN), sends GOAWAY and
    /// closes our side of the connection, then gives the client a moment to close its side.
    ///
    /// Output queued earlier through the [`OutputSender`]s is written first. Fails with
    /// [`RemoteCommandError::ConnectionClosed`] if the client was gone before the status could
    /// be written, or [`RemoteCommandError::FinishTimeout`] if it stopped reading.
    pub async fn finish(
        mut self,
        outcome: ExitOutcome,
    ) -> Result<SessionStats, RemoteCommandError> {
        self.shared.closing.cancel();
        self.stdin = None;
        self.resize = None;
        let payload = outcome.error_stream_payload(self.protocol);
        let tx = self.data_tx.clone();
        let error_stream = self.error_stream;
        let delivered = tokio::time::timeout(FINISH_TIMEOUT, async move {
            if !payload.is_empty() {
                let cmd = WriterCmd::Data {
                    stream_id: error_stream,
                    data: Bytes::from(payload),
                    fin: true,
                };
                if tx.send(cmd).await.is_err() {
                    return false;
                }
            }
            let (done, flushed) = oneshot::channel();
            if tx.send(WriterCmd::Finish { done }).await.is_err() {
                return false;
            }
            flushed.await.unwrap_or(false)
        })
        .await;
        let writer = self.writer.take();
        let reader = self.reader.take();
        let result = match delivered {
            Ok(true) => {
                // The client closes the connection once it has read everything.
                if let Some(reader) = reader {
                    let abort = reader.abort_handle();
                    if tokio::time::timeout(LINGER, reader).await.is_err() {
                        abort.abort();
                    }
                }
                Ok(self.shared.counters.snapshot())
            }
            Ok(false) => {
                abort_all(reader, None);
                Err(RemoteCommandError::ConnectionClosed)
            }
            Err(_) => {
                abort_all(reader, None);
                Err(RemoteCommandError::FinishTimeout)
            }
        };
        abort_all(None, writer);
        self.shared.gone.cancel();
        result
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        self.shared.closing.cancel();
        abort_all(self.reader.take(), self.writer.take());
    }
}

fn abort_all(reader: Option<JoinHandle<()>>, writer: Option<JoinHandle<()>>) {
    for task in [reader, writer].into_iter().flatten() {
        task.abort();
    }
}

/// Runs the SPDY side of an upgraded exec/attach request on `io` (the connection after the 101
/// answer): waits up to `stream_timeout` (kubelet: [`DEFAULT_STREAM_CREATION_TIMEOUT`]) for the
/// client to create the streams `options` call for (error; stdin, stdout, stderr as requested;
/// resize for a tty on v3+), replying to each.
///
/// Must run inside a tokio runtime; spawns the reader and writer tasks.
pub async fn accept<IO>(
    io: IO,
    protocol: Protocol,
    options: StreamOptions,
    stream_timeout: Duration,
) -> Result<Session, RemoteCommandError>
where
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let options = options.validated()?;
    let mut wanted: Vec<Kind> = vec![Kind::Error];
    for (on, kind) in [
        (options.stdin, Kind::Stdin),
        (options.stdout, Kind::Stdout),
        (options.stderr, Kind::Stderr),
        (options.tty && protocol.supports_resize(), Kind::Resize),
    ] {
        if on {
            wanted.push(kind);
        }
    }

    let encoder = FrameEncoder::new()?;
    let shared = Arc::new(Shared::default());
    let (read_half, write_half) = tokio::io::split(io);
    let (control_tx, control_rx) = mpsc::channel(CONTROL_QUEUE);
    let (data_tx, data_rx) = mpsc::channel(DATA_QUEUE);
    let (reg_tx, mut reg_rx) = mpsc::channel(MAX_STREAMS);

    let writer = tokio::spawn(
        Writer {
            io: write_half,
            encoder,
            shared: shared.clone(),
            open: BTreeMap::new(),
        }
        .run(control_rx, data_rx),
    );
    let reader = tokio::spawn(
        Reader {
            decoder: FrameDecoder::new(Limits::default()),
            control: control_tx,
            registrations: Some(reg_tx),
            wanted: wanted.iter().copied().collect(),
            shared: shared.clone(),
            streams: HashMap::new(),
            last_stream_id: 0,
        }
        .run(read_half),
    );

    let mut found: HashMap<Kind, Registration> = HashMap::new();
    let deadline = tokio::time::sleep(stream_timeout);
    tokio::pin!(deadline);
    let failure = loop {
        if wanted.iter().all(|k| found.contains_key(k)) {
            break None;
        }
        tokio::select! {
            reg = reg_rx.recv() => match reg {
                Some(reg) => {
                    found.insert(reg.kind, reg);
                }
                None => {
                    break Some(match shared.take_failure() {
                        Some(e) => RemoteCommandError::Frame(e),
                        None => RemoteCommandError::ConnectionClosed,
                    });
                }
            },
            () = &mut deadline => {
                let missing: Vec<&str> = wanted
                    .iter()
                    .filter(|k| !found.contains_key(k))
                    .map(|k| k.name())
                    .collect();
                break Some(RemoteCommandError::StreamCreationTimeout {
                    missing: missing.join(", "),
                });
            }
        }
    };
    if let Some(error) = failure {
        tracing::debug!(%error, "remotecommand: stream set-up failed");
        shared.closing.cancel();
        abort_all(Some(reader), Some(writer));
        return Err(error);
    }
    drop(reg_rx);

    let mut take = |kind: Kind| found.remove(&kind);
    let error_stream = take(Kind::Error).map(|r| r.stream_id).unwrap_or_default();
    let stdin_reg = take(Kind::Stdin);
    if protocol == Protocol::V1
        && let Some(reg) = &stdin_reg
    {
        // v1 servers close their side of stdin right away (kubelet's v1ProtocolHandler).
        let _ = data_tx
            .send(WriterCmd::Data {
                stream_id: reg.stream_id,
                data: Bytes::new(),
                fin: true,
            })
            .await;
    }
    let output = |reg: Option<Registration>, stderr: bool| {
        reg.map(|r| OutputSender {
            stream_id: r.stream_id,
            stderr,
            tx: data_tx.clone(),
            shared: shared.clone(),
        })
    };
    let stdout = output(take(Kind::Stdout), false);
    let stderr = output(take(Kind::Stderr), true);
    let resize = take(Kind::Resize).and_then(|r| r.resize);
    Ok(Session {
        stdin: stdin_reg.and_then(|r| r.stdin).map(|rx| Stdin {
            rx,
            pending: Bytes::new(),
        }),
        stdout,
        stderr,
        resize,
        protocol,
        options,
        error_stream,
        data_tx,
        shared,
        reader: Some(reader),
        writer: Some(writer),
    })
}

/// What the reader does with DATA on a stream.
enum Inbound {
    /// The session's stdin; `None` once closed or abandoned.
    Stdin(Option<mpsc::Sender<Bytes>>),
    /// The session's resize stream; `None` once closed or broken.
    Resize(Option<ResizeParser>),
    /// A stream that takes no input from the client.
    Sink,
}

struct ResizeParser {
    tx: mpsc::Sender<TerminalSize>,
    buf: Vec<u8>,
}

impl ResizeParser {
    /// Adds bytes; returns the complete objects, or `Err` when the stream is not JSON sizes.
    fn feed(&mut self, data: &[u8]) -> Result<Vec<TerminalSize>, String> {
        self.buf.extend_from_slice(data);
        let mut sizes = Vec::new();
        let mut consumed = 0;
        let mut objects =
            serde_json::Deserializer::from_slice(&self.buf).into_iter::<TerminalSize>();
        loop {
            match objects.next() {
                Some(Ok(size)) => {
                    sizes.push(size);
                    consumed = objects.byte_offset();
                }
                Some(Err(e)) if e.is_eof() => break,
                Some(Err(e)) => return Err(e.to_string()),
                None => {
                    consumed = objects.byte_offset();
                    break;
                }
            }
        }
        self.buf.drain(..consumed);
        if self.buf.len() > RESIZE_BUFFER_MAX {
            return Err("resize message too long".into());
        }
        Ok(sizes)
    }
}

struct Reader {
    decoder: FrameDecoder,
    control: mpsc::Sender<WriterCmd>,
    registrations: Option<mpsc::Sender<Registration>>,
    wanted: HashSet<Kind>,
    shared: Arc<Shared>,
    streams: HashMap<u32, Inbound>,
    last_stream_id: u32,
}

/// Why the reader loop stops early.
enum Stop {
    WriterGone,
}

impl Reader {
    async fn run<R: AsyncRead + Unpin>(mut self, mut io: R) {
        let mut buf = BytesMut::with_capacity(16 * 1024);
        'outer: loop {
            loop {
                match self.decoder.decode(&mut buf) {
                    Ok(Some(frame)) => {
                        if let Err(Stop::WriterGone) = self.handle(frame).await {
                            break 'outer;
                        }
                    }
                    Ok(None) => break,
                    Err(error) => {
                        tracing::warn!(%error, "remotecommand: bad frame from the client, closing");
                        let _ = self.control.try_send(WriterCmd::ProtocolError);
                        if let Ok(mut slot) = self.shared.failure.lock() {
                            *slot = Some(error);
                        }
                        break 'outer;
                    }
                }
            }
            if buf.capacity() - buf.len() < 4096 {
                buf.reserve(16 * 1024);
            }
            match io.read_buf(&mut buf).await {
                Ok(0) => {
                    tracing::debug!("remotecommand: client closed the connection");
                    break;
                }
                Ok(_) => {}
                Err(error) => {
                    tracing::debug!(%error, "remotecommand: connection read failed");
                    break;
                }
            }
        }
        // Ending here closes stdin and resize for the caller (their senders drop with us).
        self.shared.gone.cancel();
    }

    async fn handle(&mut self, frame: Frame) -> Result<(), Stop> {
        let fin = frame.is_fin();
        match frame {
            Frame::SynStream {
                stream_id, headers, ..
            } => self.open(stream_id, &headers, fin).await?,
            Frame::Data {
                stream_id, data, ..
            } => self.data(stream_id, data, fin).await,
            Frame::RstStream { stream_id, status } => {
                tracing::debug!(stream_id, status, "remotecommand: client reset a stream");
                self.shared.mark_reset(stream_id);
                self.remote_closed(stream_id);
            }
            Frame::Ping { id } => {
                // Client pings are odd; an even id would be the answer to one of ours.
                if id % 2 == 1 {
                    self.control_send(WriterCmd::Ping { id }).await?;
                }
            }
            Frame::GoAway { .. } => {
                tracing::debug!("remotecommand: client sent GOAWAY");
                self.shared.gone.cancel();
            }
            Frame::Headers { stream_id, .. } => {
                if fin {
                    self.remote_closed(stream_id);
                }
            }
            Frame::SynReply { .. }
            | Frame::Settings { .. }
            | Frame::WindowUpdate { .. }
            | Frame::Unknown { .. } => {}
        }
        Ok(())
    }

    async fn control_send(&self, cmd: WriterCmd) -> Result<(), Stop> {
        self.control.send(cmd).await.map_err(|_| Stop::WriterGone)
    }

    async fn open(&mut self, stream_id: u32, headers: &HeaderBlock, fin: bool) -> Result<(), Stop> {
        if stream_id.is_multiple_of(2) || stream_id <= self.last_stream_id {
            tracing::debug!(
                stream_id,
                "remotecommand: invalid stream id from the client"
            );
            return self
                .control_send(WriterCmd::Reset {
                    stream_id,
                    status: frame::RST_PROTOCOL_ERROR,
                })
                .await;
        }
        self.last_stream_id = stream_id;
        if self.streams.len() >= MAX_STREAMS {
            return self
                .control_send(WriterCmd::Reset {
                    stream_id,
                    status: frame::RST_REFUSED_STREAM,
                })
                .await;
        }
        let kind = Kind::of(headers);
        let mut reg = Registration {
            kind,
            stream_id,
            stdin: None,
            resize: None,
        };
        // The first stream of each expected kind is the session's; others are accepted and
        // ignored (kubelet logs unknown types and replies to them all the same).
        let inbound = if self.wanted.remove(&kind) {
            match kind {
                Kind::Stdin => {
                    let (tx, rx) = mpsc::channel(STDIN_QUEUE);
                    reg.stdin = Some(rx);
                    Inbound::Stdin(Some(tx))
                }
                Kind::Resize => {
                    let (tx, rx) = mpsc::channel(RESIZE_QUEUE);
                    reg.resize = Some(rx);
                    Inbound::Resize(Some(ResizeParser {
                        tx,
                        buf: Vec::new(),
                    }))
                }
                _ => Inbound::Sink,
            }
        } else {
            tracing::debug!(
                stream_id,
                streamtype = headers.get("streamtype").unwrap_or(""),
                "remotecommand: unexpected stream, ignoring its data"
            );
            Inbound::Sink
        };
        self.streams.insert(stream_id, inbound);
        // The reply goes out before the caller can write on the stream: spdystream drops data
        // arriving on a stream it has no reply for.
        self.control_send(WriterCmd::Reply { stream_id }).await?;
        if fin {
            self.remote_closed(stream_id);
        }
        if let Some(tx) = &self.registrations
            && tx.try_send(reg).is_err()
        {
            // `accept` is done with set-up; later streams only get their reply.
            self.registrations = None;
        }
        Ok(())
    }

    async fn data(&mut self, stream_id: u32, data: Bytes, fin: bool) {
        let len = data.len();
        let shared = &self.shared;
        match self.streams.get_mut(&stream_id) {
            Some(Inbound::Stdin(slot)) if !data.is_empty() => {
                let delivered = match slot {
                    Some(tx) => tokio::select! {
                        sent = tx.send(data) => sent.is_ok(),
                        _ = shared.closing.cancelled() => false,
                    },
                    None => false,
                };
                if delivered {
                    Counters::add(&shared.counters.stdin_bytes, len);
                } else {
                    *slot = None;
                    shared.counters.refuse(len);
                }
            }
            Some(Inbound::Resize(slot)) if !data.is_empty() => {
                let Some(parser) = slot else {
                    shared.counters.refuse(len);
                    return self.finish_data(stream_id, fin);
                };
                match parser.feed(&data) {
                    Ok(sizes) => {
                        for size in sizes {
                            match parser.tx.try_send(size) {
                                Ok(()) => Counters::add(&shared.counters.resize_events, 1),
                                Err(_) => {
                                    tracing::debug!(?size, "remotecommand: resize event refused");
                                    Counters::add(&shared.counters.refused_resizes, 1);
                                }
                            }
                        }
                    }
                    Err(error) => {
                        // Kubelet stops reading resizes at the first undecodable one.
                        tracing::debug!(%error, "remotecommand: bad resize stream, ignoring it");
                        *slot = None;
                        shared.counters.refuse(len);
                    }
                }
            }
            Some(_) if data.is_empty() => {}
            Some(Inbound::Sink) | None => {
                if !data.is_empty() {
                    shared.counters.refuse(len);
                }
            }
            Some(_) => {}
        }
        self.finish_data(stream_id, fin);
    }

    fn finish_data(&mut self, stream_id: u32, fin: bool) {
        if fin {
            self.remote_closed(stream_id);
        }
    }

    /// The client closed its side of `stream_id`: end the matching queue for the caller.
    fn remote_closed(&mut self, stream_id: u32) {
        match self.streams.get_mut(&stream_id) {
            Some(Inbound::Stdin(slot)) => *slot = None,
            Some(Inbound::Resize(slot)) => *slot = None,
            _ => {}
        }
    }
}

struct Writer<W> {
    io: W,
    encoder: FrameEncoder,
    shared: Arc<Shared>,
    /// Streams we replied to, and whether we sent FIN on them.
    open: BTreeMap<u32, bool>,
}

impl<W: AsyncWrite + Unpin> Writer<W> {
    async fn run(
        mut self,
        mut control: mpsc::Receiver<WriterCmd>,
        mut data: mpsc::Receiver<WriterCmd>,
    ) {
        let mut out = BytesMut::with_capacity(WRITE_BATCH);
        loop {
            let cmd = tokio::select! {
                biased;
                Some(cmd) = control.recv() => cmd,
                Some(cmd) = data.recv() => cmd,
                else => break,
            };
            let mut finish = self.encode(cmd, &mut out);
            // Gather what is already queued into one write, control frames first.
            while finish.is_none() && out.len() < WRITE_BATCH {
                let next = match control.try_recv() {
                    Ok(cmd) => cmd,
                    Err(_) => match data.try_recv() {
                        Ok(cmd) => cmd,
                        Err(_) => break,
                    },
                };
                finish = self.encode(next, &mut out);
            }
            if let Err(error) = self.io.write_all(&out).await {
                tracing::debug!(%error, "remotecommand: connection write failed");
                self.shared.gone.cancel();
                if let Some(done) = finish {
                    let _ = done.send(false);
                }
                return;
            }
            out.clear();
            if let Some(done) = finish {
                let ok = self.io.flush().await.is_ok() && self.io.shutdown().await.is_ok();
                let _ = done.send(ok);
                return;
            }
            if control.is_empty()
                && data.is_empty()
                && let Err(error) = self.io.flush().await
            {
                tracing::debug!(%error, "remotecommand: connection flush failed");
                self.shared.gone.cancel();
                return;
            }
        }
    }

    /// Encodes `cmd` into `out`; returns the acknowledgement channel of a finish.
    fn encode(&mut self, cmd: WriterCmd, out: &mut BytesMut) -> Option<oneshot::Sender<bool>> {
        let frames: Vec<Frame> = match cmd {
            WriterCmd::Reply { stream_id } => {
                self.open.insert(stream_id, false);
                vec![Frame::SynReply {
                    stream_id,
                    flags: 0,
                    headers: HeaderBlock::new(),
                }]
            }
            WriterCmd::Ping { id } => vec![Frame::Ping { id }],
            WriterCmd::Reset { stream_id, status } => {
                self.open.remove(&stream_id);
                vec![Frame::RstStream { stream_id, status }]
            }
            WriterCmd::ProtocolError => vec![Frame::GoAway {
                last_good_stream_id: self.last_stream_id(),
                status: frame::GOAWAY_PROTOCOL_ERROR,
            }],
            WriterCmd::Data {
                stream_id,
                data,
                fin,
            } => {
                let writable =
                    self.open.get(&stream_id) == Some(&false) && !self.shared.is_reset(stream_id);
                if !writable {
                    if !data.is_empty() {
                        self.shared.counters.refuse(data.len());
                    }
                    return None;
                }
                if fin {
                    self.open.insert(stream_id, true);
                }
                vec![Frame::Data {
                    stream_id,
                    flags: if fin { frame::FLAG_FIN } else { 0 },
                    data,
                }]
            }
            WriterCmd::Finish { done } => {
                let last_good_stream_id = self.last_stream_id();
                let mut frames = Vec::new();
                for (&stream_id, fin_sent) in self.open.iter_mut() {
                    if !*fin_sent && !self.shared.is_reset(stream_id) {
                        *fin_sent = true;
                        frames.push(Frame::Data {
                            stream_id,
                            flags: frame::FLAG_FIN,
                            data: Bytes::new(),
                        });
                    }
                }
                frames.push(Frame::GoAway {
                    last_good_stream_id,
                    status: frame::GOAWAY_OK,
                });
                for f in &frames {
                    if let Err(error) = self.encoder.encode(f, out) {
                        tracing::warn!(%error, "remotecommand: cannot encode frame");
                    }
                }
                return Some(done);
            }
        };
        for f in &frames {
            if let Err(error) = self.encoder.encode(f, out) {
                tracing::warn!(%error, "remotecommand: cannot encode frame");
            }
        }
        None
    }

    fn last_stream_id(&self) -> u32 {
        self.open.keys().next_back().copied().unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parser() -> (ResizeParser, mpsc::Receiver<TerminalSize>) {
        let (tx, rx) = mpsc::channel(4);
        (
            ResizeParser {
                tx,
                buf: Vec::new(),
            },
            rx,
        )
    }

    #[test]
    fn resize_objects_split_across_frames() {
        let (mut p, _rx) = parser();
        assert_eq!(p.feed(br#"{"Width":80,"Hei"#), Ok(vec![]));
        assert_eq!(
            p.feed(b"ght\":24}\n{\"Width\":100,\"Height\":40}\n{\"width\":1"),
            Ok(vec![
                TerminalSize {
                    width: 80,
                    height: 24
                },
                TerminalSize {
                    width: 100,
                    height: 40
                }
            ])
        );
        assert_eq!(
            p.feed(b"20,\"height\":50}\n"),
            Ok(vec![TerminalSize {
                width: 120,
                height: 50
            }])
        );
        assert!(p.buf.is_empty());
    }

    #[test]
    fn garbage_on_the_resize_stream_is_an_error() {
        let (mut p, _rx) = parser();
        assert!(p.feed(b"not json").is_err());
        let (mut p, _rx) = parser();
        assert!(p.feed(&[b' '; 10]).is_ok());
        let mut long = b"{\"Width\":1,\"x\":\"".to_vec();
        long.extend(std::iter::repeat_n(b'a', RESIZE_BUFFER_MAX + 1));
        assert!(p.feed(&long).is_err());
    }
}
