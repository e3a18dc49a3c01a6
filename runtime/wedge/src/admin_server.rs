//! The admin API's listeners and connections: a unix socket (mode 0600) always, loopback TCP
//! when configured, each under its own connection cap, with header and body deadlines, a body
//! cap, a bearer token on TCP for everything but `/healthz` and `/metrics`, and an accept loop
//! that outlives fd exhaustion.
//!
//! axum's `serve` cannot do any of that (no header timeout, no cap, no per-transport rule), so
//! connections are served with hyper's HTTP/1 server directly and requests handed to the
//! axum router only once they are complete and allowed.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use axum::Router;
use axum::body::Body;
use axum::http::{HeaderMap, Method, Request, Response, StatusCode, header};
use http_body_util::{BodyExt, LengthLimitError, Limited};
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, UnixListener};
use tokio_util::sync::CancellationToken;
use tower::ServiceExt;
use wedge_core::conn_slots::{ConnectionSlots, Room, Slot};
use wedge_core::metrics::{MetricsSource, PromWriter};

use crate::admin_guard::Guarded;
use wedge_core::conn_slots::BusyGuard;

/// What the listeners need to know, resolved from `wedge.adminAddr` and `wedge.admin`.
#[derive(Debug, Clone)]
pub struct ServerSettings {
    /// The unix socket (always served).
    pub socket: PathBuf,
    /// The TCP address, when configured.
    pub tcp: Option<SocketAddr>,
    /// The token TCP clients must present (set whenever `tcp` is).
    pub token: Option<String>,
    /// Deadline for a request's headers, and for an idle connection.
    pub header_timeout: Duration,
    /// Deadline for a request's body.
    pub body_timeout: Duration,
    /// Largest request body.
    pub max_body: usize,
    /// Connections per listener.
    pub max_connections: usize,
}

/// The two listeners, as metric labels and array indexes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Transport {
    Unix = 0,
    Tcp = 1,
}

impl Transport {
    fn label(self) -> &'static str {
        match self {
            Transport::Unix => "unix",
            Transport::Tcp => "tcp",
        }
    }
}

/// Counters of one listener.
#[derive(Default)]
struct ListenerCounters {
    connections: AtomicU64,
    accepted: AtomicU64,
    fd_exhausted: AtomicU64,
    accept_other_errors: AtomicU64,
    evicted: AtomicU64,
    refused: AtomicU64,
    unauthorized: AtomicU64,
    header_timeouts: AtomicU64,
    body_timeouts: AtomicU64,
    too_large: AtomicU64,
}

/// The admin server's own metrics, so a flood, fd exhaustion or a guessing client shows in
/// `/metrics` rather than only in the log.
#[derive(Default)]
pub struct AdminMetrics {
    listeners: [ListenerCounters; 2],
}

impl AdminMetrics {
    fn of(&self, transport: Transport) -> &ListenerCounters {
        &self.listeners[transport as usize]
    }
}

impl MetricsSource for AdminMetrics {
    fn write_metrics(&self, w: &mut PromWriter) {
        type Pick = fn(&ListenerCounters) -> &AtomicU64;
        let families: [(&str, &str, &str, Pick); 9] = [
            (
                "wedge_admin_connections",
                "Admin API connections open now.",
                "gauge",
                |c| &c.connections,
            ),
            (
                "wedge_admin_connections_accepted_total",
                "Admin API connections accepted.",
                "counter",
                |c| &c.accepted,
            ),
            (
                "wedge_admin_accept_fd_exhausted_total",
                "Accepts that failed for lack of file descriptors (EMFILE/ENFILE); the loop backs off and retries.",
                "counter",
                |c| &c.fd_exhausted,
            ),
            (
                "wedge_admin_connections_evicted_total",
                "Idle admin connections closed to make room under wedge.admin.maxConnections.",
                "counter",
                |c| &c.evicted,
            ),
            (
                "wedge_admin_connections_refused_total",
                "Admin connections closed at once (every slot busy, or a unix peer of another user).",
                "counter",
                |c| &c.refused,
            ),
            (
                "wedge_admin_unauthorized_total",
                "Admin requests refused with 401 (no or wrong bearer token on TCP).",
                "counter",
                |c| &c.unauthorized,
            ),
            (
                "wedge_admin_header_timeouts_total",
                "Admin connections closed because headers did not arrive within wedge.admin.headerTimeoutMs.",
                "counter",
                |c| &c.header_timeouts,
            ),
            (
                "wedge_admin_body_timeouts_total",
                "Admin requests answered 408 because the body did not arrive within wedge.admin.bodyTimeoutMs.",
                "counter",
                |c| &c.body_timeouts,
            ),
            (
                "wedge_admin_body_too_large_total",
                "Admin requests answered 413 (body over wedge.admin.maxBodyBytes).",
                "counter",
                |c| &c.too_large,
            ),
        ];
        for (name, help, kind, pick) in families {
            w.family(name, help, kind);
            for transport in [Transport::Unix, Transport::Tcp] {
                let value = pick(self.of(transport)).load(Ordering::Relaxed);
                w.sample(name, &[("listener", transport.label())], value as f64);
            }
        }
    }
}

/// What every connection shares.
struct Shared {
    router: Router,
    settings: ServerSettings,
    metrics: Arc<AdminMetrics>,
    stop: CancellationToken,
}

/// The running listeners; [`AdminServer::finish`] waits for them and removes the socket.
pub struct AdminServer {
    tasks: Vec<tokio::task::JoinHandle<()>>,
    socket: PathBuf,
}

impl AdminServer {
    /// Waits for the accept loops (they end when the stop token fires) and removes the socket
    /// file, so a stale one does not outlive the daemon.
    pub async fn finish(self) {
        for task in self.tasks {
            let _ = task.await;
        }
        if let Err(e) = std::fs::remove_file(&self.socket)
            && e.kind() != std::io::ErrorKind::NotFound
        {
            tracing::warn!(socket = %self.socket.display(), "cannot remove the admin socket: {e}");
        }
    }
}

/// Binds every listener now (a taken address or an unusable socket path fails the start with
/// a clear error) and serves `router` until `stop` fires.
pub async fn serve(
    settings: ServerSettings,
    router: Router,
    metrics: Arc<AdminMetrics>,
    stop: CancellationToken,
) -> Result<AdminServer> {
    let unix = bind_unix(&settings.socket)?;
    tracing::info!(socket = %settings.socket.display(), "admin API listening (unix socket, mode 0600)");
    let tcp = match settings.tcp {
        Some(addr) => {
            let listener = bind_tcp(addr)
                .map_err(|e| anyhow::anyhow!("cannot listen on admin address {addr}: {e}"))?;
            tracing::info!(%addr, "admin API listening (TCP: /healthz and /metrics open, everything else needs the bearer token)");
            if !addr.ip().is_loopback() {
                tracing::warn!(
                    %addr,
                    "the admin API listens beyond loopback without TLS \
                     (wedge.admin.allowInsecureRemote): its token crosses the network in clear"
                );
            }
            Some(listener)
        }
        None => None,
    };
    let socket = settings.socket.clone();
    let shared = Arc::new(Shared {
        router,
        settings,
        metrics,
        stop,
    });
    let mut tasks = vec![tokio::spawn(accept_loop(
        Listener::Unix(unix),
        shared.clone(),
    ))];
    if let Some(tcp) = tcp {
        tasks.push(tokio::spawn(accept_loop(Listener::Tcp(tcp), shared)));
    }
    Ok(AdminServer { tasks, socket })
}

/// Connections the kernel queues while the accept loop waits (for a descriptor, or for a slot
/// to free): the default of 128 makes clients of a busy node retry their SYN for a minute.
const LISTEN_BACKLOG: u32 = 1024;

fn bind_tcp(addr: SocketAddr) -> std::io::Result<TcpListener> {
    let socket = if addr.is_ipv4() {
        tokio::net::TcpSocket::new_v4()?
    } else {
        tokio::net::TcpSocket::new_v6()?
    };
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(LISTEN_BACKLOG)
}

/// Creates the unix socket with mode 0600 before it listens, so there is no moment another
/// user could connect. A stale socket of a dead daemon is replaced; a live one is an error.
fn bind_unix(path: &Path) -> Result<UnixListener> {
    use std::os::unix::fs::{FileTypeExt, PermissionsExt};
    let key = "wedge.admin.socket";
    if path.as_os_str().len() > wedge_core::config::MAX_SOCKET_PATH {
        bail!(
            "{key}: {} is longer than the {} bytes a unix socket path may have; set a shorter \
             wedge.admin.socket or wedge.dataDir",
            path.display(),
            wedge_core::config::MAX_SOCKET_PATH
        );
    }
    if let Some(parent) = path.parent() {
        wedge_core::private_fs::create_dirs_private(parent).with_context(|| key.to_owned())?;
    }
    match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.file_type().is_socket() => {
            if std::os::unix::net::UnixStream::connect(path).is_ok() {
                bail!(
                    "{key}: another process (a running wedge?) already serves {}",
                    path.display()
                );
            }
            std::fs::remove_file(path).with_context(|| {
                format!("{key}: cannot replace the stale socket {}", path.display())
            })?;
        }
        Ok(_) => bail!(
            "{key}: {} exists and is not a socket; refusing to replace it",
            path.display()
        ),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => bail!("{key}: cannot inspect {}: {e}", path.display()),
    }
    let socket = socket2::Socket::new(socket2::Domain::UNIX, socket2::Type::STREAM, None)
        .context("cannot create the admin unix socket")?;
    let addr = socket2::SockAddr::unix(path)
        .with_context(|| format!("{key}: {} is not a usable socket path", path.display()))?;
    socket
        .bind(&addr)
        .with_context(|| format!("{key}: cannot bind {}", path.display()))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
        .with_context(|| format!("{key}: cannot make {} mode 0600", path.display()))?;
    socket
        .listen(LISTEN_BACKLOG as i32)
        .with_context(|| format!("{key}: cannot listen on {}", path.display()))?;
    socket.set_nonblocking(true)?;
    let std_listener: std::os::unix::net::UnixListener = socket.into();
    UnixListener::from_std(std_listener).context("cannot register the admin socket")
}

enum Listener {
    Unix(UnixListener),
    Tcp(TcpListener),
}

enum Stream {
    Unix(tokio::net::UnixStream),
    Tcp(tokio::net::TcpStream),
}

impl Listener {
    fn transport(&self) -> Transport {
        match self {
            Listener::Unix(_) => Transport::Unix,
            Listener::Tcp(_) => Transport::Tcp,
        }
    }

    async fn accept(&self) -> std::io::Result<Stream> {
        match self {
            Listener::Unix(l) => l.accept().await.map(|(s, _)| Stream::Unix(s)),
            Listener::Tcp(l) => l.accept().await.map(|(s, _)| Stream::Tcp(s)),
        }
    }
}

/// True for the errors that mean "no file descriptor (or kernel memory) right now": the
/// pending connection stays queued, so the loop waits and tries again instead of spinning
/// or dying.
fn is_resource_exhaustion(e: &std::io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM)
    )
}

/// First and longest pause after an accept failed for lack of descriptors.
const EXHAUSTED_BACKOFF: (Duration, Duration) =
    (Duration::from_millis(10), Duration::from_millis(500));

async fn accept_loop(listener: Listener, shared: Arc<Shared>) {
    let transport = listener.transport();
    let counters = shared.metrics.of(transport);
    let slots = ConnectionSlots::new(shared.settings.max_connections);
    let mut backoff = EXHAUSTED_BACKOFF.0;
    let mut last_warning: Option<Instant> = None;
    let uid = wedge_core::private_fs::effective_uid();
    loop {
        let accepted = tokio::select! {
            _ = shared.stop.cancelled() => break,
            accepted = listener.accept() => accepted,
        };
        let stream = match accepted {
            Ok(stream) => {
                backoff = EXHAUSTED_BACKOFF.0;
                stream
            }
            Err(e) if is_resource_exhaustion(&e) => {
                counters.fd_exhausted.fetch_add(1, Ordering::Relaxed);
                if last_warning.is_none_or(|t| t.elapsed() >= Duration::from_secs(10)) {
                    last_warning = Some(Instant::now());
                    tracing::warn!(
                        listener = transport.label(),
                        "admin API cannot accept a connection: {e}; retrying (counted in \
                         wedge_admin_accept_fd_exhausted_total)"
                    );
                }
                tokio::select! {
                    _ = shared.stop.cancelled() => break,
                    _ = tokio::time::sleep(backoff) => {}
                }
                backoff = (backoff * 2).min(EXHAUSTED_BACKOFF.1);
                continue;
            }
            Err(e) => {
                // ECONNABORTED and the like: that one client is gone; the listener is fine.
                counters.accept_other_errors.fetch_add(1, Ordering::Relaxed);
                tracing::debug!(listener = transport.label(), "admin accept failed: {e}");
                continue;
            }
        };
        if let Stream::Unix(s) = &stream {
            // Defence in depth behind the socket's mode: only this user and root.
            let peer = s.peer_cred().map(|c| c.uid()).ok();
            if !peer.is_some_and(|p| p == uid || p == 0) {
                counters.refused.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(?peer, "admin socket: connection of another user refused");
                continue;
            }
        }
        if !make_room(&slots, counters).await {
            counters.refused.fetch_add(1, Ordering::Relaxed);
            continue;
        }
        counters.accepted.fetch_add(1, Ordering::Relaxed);
        let slot = slots.add();
        let open = OpenConnection::new(shared.metrics.clone(), transport);
        let shared = shared.clone();
        tokio::spawn(async move {
            let _open = open;
            match stream {
                Stream::Unix(s) => serve_connection(s, transport, slot, shared).await,
                Stream::Tcp(s) => serve_connection(s, transport, slot, shared).await,
            }
        });
    }
}

/// Room for a new connection (see [`ConnectionSlots::make_room`]), counting evictions;
/// false when every connection is busy, so the new one is closed instead.
async fn make_room(slots: &ConnectionSlots, counters: &ListenerCounters) -> bool {
    match slots.make_room().await {
        Room::Free => true,
        Room::Evicted => {
            counters.evicted.fetch_add(1, Ordering::Relaxed);
            true
        }
        Room::Full => false,
    }
}

/// Counts a connection in its listener's `connections` gauge while it lives.
struct OpenConnection {
    metrics: Arc<AdminMetrics>,
    transport: Transport,
}

impl OpenConnection {
    fn new(metrics: Arc<AdminMetrics>, transport: Transport) -> OpenConnection {
        metrics
            .of(transport)
            .connections
            .fetch_add(1, Ordering::Relaxed);
        OpenConnection { metrics, transport }
    }
}

impl Drop for OpenConnection {
    fn drop(&mut self) {
        self.metrics
            .of(self.transport)
            .connections
            .fetch_sub(1, Ordering::Relaxed);
    }
}

async fn serve_connection<IO>(io: IO, transport: Transport, slot: Slot, shared: Arc<Shared>)
where
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let kill = slot.evicted();
    let slot = Arc::new(slot);
    let service = {
        let shared = shared.clone();
        let slot = slot.clone();
        hyper::service::service_fn(move |request| {
            let shared = shared.clone();
            let busy = slot.busy();
            async move { Ok::<_, Infallible>(answer(request, transport, busy, &shared).await) }
        })
    };
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(shared.settings.header_timeout);
    let connection = builder.serve_connection(TokioIo::new(io), service);
    tokio::pin!(connection);
    let counters = shared.metrics.of(transport);
    tokio::select! {
        served = connection.as_mut() => {
            if let Err(e) = served {
                if e.is_timeout() {
                    counters.header_timeouts.fetch_add(1, Ordering::Relaxed);
                }
                tracing::debug!(listener = transport.label(), "admin connection ended: {e}");
            }
        }
        // Evicted to make room: dropping the connection closes the socket.
        _ = kill.cancelled() => {}
        _ = shared.stop.cancelled() => {
            connection.as_mut().graceful_shutdown();
            let _ = tokio::time::timeout(Duration::from_secs(1), connection).await;
        }
    }
}

/// Routes open on TCP without a token: the read-only health and metrics a monitoring system
/// scrapes. Everything else (module list, deploy, remove, unknown paths) needs the token.
fn open_on_tcp(method: &Method, path: &str) -> bool {
    (method == Method::GET || method == Method::HEAD) && matches!(path, "/healthz" | "/metrics")
}

/// Compares the bearer token in constant time, so its bytes cannot be guessed by timing.
fn token_matches(headers: &HeaderMap, token: &str) -> bool {
    let Some(given) = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
    else {
        return false;
    };
    let (a, b) = (given.trim().as_bytes(), token.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

fn error_response(code: StatusCode, text: &str) -> Response<Body> {
    let body = serde_json::json!({ "error": text }).to_string();
    let mut response = Response::new(Body::from(body));
    *response.status_mut() = code;
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("application/json"),
    );
    // The request may not have been read to its end: the connection cannot be reused.
    headers.insert(
        header::CONNECTION,
        header::HeaderValue::from_static("close"),
    );
    if code == StatusCode::UNAUTHORIZED {
        headers.insert(
            header::WWW_AUTHENTICATE,
            header::HeaderValue::from_static("Bearer"),
        );
    }
    response
}

/// One request: the token check (TCP), the body read under its deadline and cap, then the
/// router. The response body carries `busy`, so the connection counts as busy (not evictable)
/// until its answer is written.
async fn answer(
    request: Request<Incoming>,
    transport: Transport,
    busy: BusyGuard,
    shared: &Shared,
) -> Response<Body> {
    let counters = shared.metrics.of(transport);
    let response = 'answer: {
        if transport == Transport::Tcp && !open_on_tcp(request.method(), request.uri().path()) {
            let ok = shared
                .settings
                .token
                .as_deref()
                .is_some_and(|t| token_matches(request.headers(), t));
            if !ok {
                counters.unauthorized.fetch_add(1, Ordering::Relaxed);
                break 'answer error_response(
                    StatusCode::UNAUTHORIZED,
                    "this route needs `Authorization: Bearer <token>` on TCP: the token is in \
                     the node's wedge.admin.tokenFile (default <dataDir>/admin.token; `wedge \
                     module ... --token-file`), or use the unix socket",
                );
            }
        }
        if open_on_tcp(request.method(), request.uri().path()) {
            // Health and metrics take no body and need no credentials: whatever body was sent
            // is never read (hyper closes the connection after the answer instead of
            // draining it), so no one can make the node buffer or wait for one.
            let (parts, _unread) = request.into_parts();
            match shared
                .router
                .clone()
                .oneshot(Request::from_parts(parts, Body::empty()))
                .await
            {
                Ok(response) => break 'answer response,
                Err(never) => match never {},
            }
        }
        let max = shared.settings.max_body;
        let declared = request
            .headers()
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok());
        if declared.is_some_and(|n| n > max as u64) {
            counters.too_large.fetch_add(1, Ordering::Relaxed);
            break 'answer error_response(
                StatusCode::PAYLOAD_TOO_LARGE,
                &format!("the body is larger than wedge.admin.maxBodyBytes ({max} bytes)"),
            );
        }
        let (parts, body) = request.into_parts();
        let read = tokio::time::timeout(
            shared.settings.body_timeout,
            Limited::new(body, max).collect(),
        )
        .await;
        let bytes = match read {
            Ok(Ok(collected)) => collected.to_bytes(),
            Ok(Err(e)) if e.downcast_ref::<LengthLimitError>().is_some() => {
                counters.too_large.fetch_add(1, Ordering::Relaxed);
                break 'answer error_response(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    &format!("the body is larger than wedge.admin.maxBodyBytes ({max} bytes)"),
                );
            }
            Ok(Err(e)) => {
                break 'answer error_response(
                    StatusCode::BAD_REQUEST,
                    &format!("cannot read the body: {e}"),
                );
            }
            Err(_) => {
                counters.body_timeouts.fetch_add(1, Ordering::Relaxed);
                break 'answer error_response(
                    StatusCode::REQUEST_TIMEOUT,
                    &format!(
                        "the body did not arrive within wedge.admin.bodyTimeoutMs ({} ms)",
                        shared.settings.body_timeout.as_millis()
                    ),
                );
            }
        };
        match shared
            .router
            .clone()
            .oneshot(Request::from_parts(parts, Body::from(bytes)))
            .await
        {
            Ok(response) => response,
            Err(never) => match never {},
        }
    };
    response.map(|body| Body::new(Guarded::new(body, busy)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_health_and_metrics_are_open_on_tcp() {
        assert!(open_on_tcp(&Method::GET, "/healthz"));
        assert!(open_on_tcp(&Method::GET, "/metrics"));
        assert!(!open_on_tcp(&Method::POST, "/healthz"));
        assert!(!open_on_tcp(&Method::GET, "/modules"));
        assert!(!open_on_tcp(&Method::POST, "/modules"));
        assert!(!open_on_tcp(&Method::DELETE, "/modules/x"));
        assert!(!open_on_tcp(&Method::GET, "/healthz/../modules"));
    }

    #[test]
    fn the_token_must_match_exactly() {
        let mut headers = HeaderMap::new();
        assert!(!token_matches(&headers, "secret-token"));
        headers.insert(
            header::AUTHORIZATION,
            "Bearer secret-token".parse().unwrap(),
        );
        assert!(token_matches(&headers, "secret-token"));
        assert!(!token_matches(&headers, "secret-tokem"));
        assert!(!token_matches(&headers, "secret-token2"));
        headers.insert(header::AUTHORIZATION, "Basic secret-token".parse().unwrap());
        assert!(!token_matches(&headers, "secret-token"));
    }
}
