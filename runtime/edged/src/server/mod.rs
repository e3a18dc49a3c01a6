//! The node's kubelet server: what the apiserver asks a kubelet for `kubectl logs`, `exec`,
//! `attach` and metrics reads, served on two doors.
//!
//! - **The tunnel door** ([`NodeServer::serve_link`]): edgeStream, in this process, replays
//!   the cloud's requests over an in-memory connection ([`wedge_core::kubelet_link`]). Only
//!   the cloud's stream server reaches it, through the node's mTLS tunnel, so every route is
//!   served there.
//! - **The read-only port** ([`NodeServer::serve`], `tailoredKubeletConfig.readOnlyPort` on
//!   `address`: `127.0.0.1:10350`): no credentials, so it serves what a kubelet's read-only
//!   port serves (`/healthz`, `/stats/summary`, `/metrics/resource`) and `/containerLogs` only
//!   when [`ServerSettings::read_only_logs`] says so. `exec` and `attach` are refused there
//!   (`403`): edgecore serves them on this port because its edgeStream dials edged over TCP,
//!   which lets any local user run commands as root in the node's containers.
//!
//! Routes (kubelet's paths and query names):
//! - `GET /containerLogs/{namespace}/{pod}/{container}`: `follow`, `tailLines`,
//!   `sinceSeconds`, `sinceTime`, `timestamps`, `previous`, `limitBytes` ([`logs`]);
//! - `GET|POST /exec/{namespace}/{pod}/{container}?command=...` and `/attach/...`: an upgraded
//!   stream ([`exec`]);
//! - `GET /stats/summary` and `GET /metrics/resource`: the Summary API and the resource
//!   metrics metrics-server reads ([`crate::stats`]);
//! - `GET /healthz`.
//!
//! The read-only port bounds what anyone can hold: at most
//! [`ServerSettings::max_connections`] open, and at the cap the connection idle the longest is
//! closed for the new one ([`wedge_core::conn_slots`]); a request head must arrive within
//! [`ServerSettings::header_timeout`]. A non-loopback address is warned about at start.

mod docker_exec;
pub mod exec;
pub mod logs;
pub mod pods;
mod query;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use wedge_core::conn_slots::{BusyGuard, ConnectionSlots, Room};
use wedge_core::kubelet_link::KubeletListener;

use crate::engine::{Engine, ManagedContainer};
use crate::stats::summary::{PodRef, Summary};
use crate::stats::{Scope, StatsCollector};
use crate::wasm_pods::WasmPods;
pub use pods::{PodInfo, PodLookup, PodTable};

/// The body of every answer: whole texts and streamed logs alike.
pub type Body = BoxBody<Bytes, std::io::Error>;

/// How the node server runs.
#[derive(Debug, Clone)]
pub struct ServerSettings {
    /// Where the read-only port listens (`address:readOnlyPort`; `127.0.0.1:10350` in
    /// KubeEdge); `None` (`readOnlyPort: 0`): no TCP port, only the tunnel door.
    pub addr: Option<SocketAddr>,
    /// This node's name: the containers listed are the ones its edged created.
    pub node: String,
    /// Connections open at once on the read-only port; at the cap the idlest is closed.
    pub max_connections: usize,
    /// Connections served at once through the tunnel door; more wait for one to end (each
    /// `logs -f` or `exec` holds one for as long as it lasts).
    pub max_tunnel_connections: usize,
    /// The longest a read-only port connection may take to send a request head (and may sit
    /// idle between requests).
    pub header_timeout: Duration,
    /// Serve `/containerLogs` on the read-only port too (`wedge.edged.readOnlyPortLogs`): off
    /// by default, since anyone on the node could read any pod's logs there.
    pub read_only_logs: bool,
    /// How long an exec or attach waits for the client's streams after the upgrade
    /// (kubelet's `streamCreationTimeout`, 4 h by default, is for idle streams; this is only
    /// for setting them up).
    pub stream_setup_timeout: Duration,
}

impl ServerSettings {
    /// KubeEdge's defaults for node `node`, the read-only port on `addr`.
    pub fn new(node: impl Into<String>, addr: SocketAddr) -> ServerSettings {
        ServerSettings {
            addr: Some(addr),
            node: node.into(),
            max_connections: 64,
            max_tunnel_connections: 256,
            header_timeout: Duration::from_secs(10),
            read_only_logs: false,
            stream_setup_timeout: Duration::from_secs(30),
        }
    }
}

/// Why the server cannot run.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// The address is taken or not ours.
    #[error("the node's kubelet port {addr} cannot be bound: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The system's answer.
        source: std::io::Error,
    },
}

/// Requests served, by kind, for `/metrics`.
#[derive(Debug, Default)]
pub struct ServerStats {
    /// `/containerLogs` requests.
    pub logs: AtomicU64,
    /// `/exec` requests.
    pub exec: AtomicU64,
    /// `/attach` requests.
    pub attach: AtomicU64,
    /// `/stats/summary` and `/metrics/resource` reads.
    pub metrics: AtomicU64,
    /// Requests answered with an error status.
    pub errors: AtomicU64,
    /// Read-only port requests refused because the route is served only through the tunnel.
    pub refused_read_only: AtomicU64,
    /// Read-only port connections closed to make room for a new one.
    pub evicted: AtomicU64,
    /// Read-only port connections refused because every open one was busy.
    pub full: AtomicU64,
}

/// Which door a request came in by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Door {
    /// edgeStream's in-process connection: the cloud, through the node's tunnel.
    Tunnel,
    /// The TCP read-only port: anyone on the node.
    ReadOnly,
}

/// The node server: see the module docs.
pub struct NodeServer {
    settings: ServerSettings,
    engine: Engine,
    pods: Arc<dyn PodLookup>,
    wasm: Option<Arc<dyn WasmPods>>,
    collector: StatsCollector,
    stats: Arc<ServerStats>,
}

impl NodeServer {
    /// A server for the pods `pods` names, run by `engine` (containers) and `wasm` (Wasm
    /// pods), with their figures from `collector`.
    pub fn new(
        settings: ServerSettings,
        engine: Engine,
        pods: Arc<dyn PodLookup>,
        wasm: Option<Arc<dyn WasmPods>>,
        collector: StatsCollector,
    ) -> NodeServer {
        NodeServer {
            settings,
            engine,
            pods,
            wasm,
            collector,
            stats: Arc::default(),
        }
    }

    /// The server's counters.
    pub fn stats(&self) -> Arc<ServerStats> {
        self.stats.clone()
    }

    /// Binds the read-only port, when there is one.
    pub async fn bind(&self) -> Result<Option<TcpListener>, ServerError> {
        let Some(addr) = self.settings.addr else {
            return Ok(None);
        };
        if !addr.ip().is_loopback() {
            tracing::warn!(
                %addr,
                "the node's kubelet read-only port is not on loopback: anyone reaching it can \
                 read the node's pod figures{}",
                if self.settings.read_only_logs { " and logs" } else { "" }
            );
        }
        TcpListener::bind(addr)
            .await
            .map(Some)
            .map_err(|source| ServerError::Bind { addr, source })
    }

    /// Serves the read-only port's connections from `listener` until `shutdown`.
    pub async fn serve(self: Arc<Self>, listener: TcpListener, shutdown: CancellationToken) {
        let slots = ConnectionSlots::new(self.settings.max_connections);
        tracing::info!(addr = ?listener.local_addr().ok(), "node kubelet read-only port serving");
        loop {
            let (stream, peer) = tokio::select! {
                _ = shutdown.cancelled() => return,
                accepted = listener.accept() => match accepted {
                    Ok(accepted) => accepted,
                    Err(e) => {
                        // Out of descriptors and the like: wait rather than spin.
                        tracing::warn!("node kubelet port: accept failed: {e}");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                },
            };
            match slots.make_room().await {
                Room::Free => {}
                Room::Evicted => {
                    self.stats.evicted.fetch_add(1, Ordering::Relaxed);
                }
                Room::Full => {
                    self.stats.full.fetch_add(1, Ordering::Relaxed);
                    tracing::debug!(%peer, "node kubelet port: every connection busy; closed");
                    continue;
                }
            }
            let slot = Arc::new(slots.add());
            let server = self.clone();
            let shutdown = shutdown.clone();
            tokio::spawn(async move {
                let evicted = slot.evicted();
                let service = {
                    let server = server.clone();
                    let shutdown = shutdown.clone();
                    hyper::service::service_fn(move |req| {
                        let server = server.clone();
                        let shutdown = shutdown.clone();
                        let busy = slot.busy();
                        async move {
                            let answer = server.route(req, Door::ReadOnly, shutdown).await;
                            Ok::<_, Infallible>(answer.map(|body| guarded(body, busy)))
                        }
                    })
                };
                let mut builder = hyper::server::conn::http1::Builder::new();
                builder
                    .timer(TokioTimer::new())
                    .header_read_timeout(server.settings.header_timeout);
                let conn = builder.serve_connection(TokioIo::new(stream), service);
                tokio::select! {
                    served = conn => if let Err(e) = served {
                        tracing::debug!(%peer, "node kubelet port connection ended: {e}");
                    },
                    // Closed for a newer connection, or the node stops.
                    _ = evicted.cancelled() => {}
                    _ = shutdown.cancelled() => {}
                }
            });
        }
    }

    /// Serves edgeStream's in-process connections from `listener` until `shutdown`; open
    /// streams end with it.
    pub async fn serve_link(
        self: Arc<Self>,
        listener: KubeletListener,
        shutdown: CancellationToken,
    ) {
        let slots = Arc::new(Semaphore::new(self.settings.max_tunnel_connections.max(1)));
        loop {
            let permit = tokio::select! {
                _ = shutdown.cancelled() => return,
                permit = slots.clone().acquire_owned() => match permit {
                    Ok(permit) => permit,
                    Err(_) => return,
                },
            };
            let stream = tokio::select! {
                _ = shutdown.cancelled() => return,
                accepted = listener.accept() => match accepted {
                    Some(stream) => stream,
                    None => return,
                },
            };
            let server = self.clone();
            let shutdown = shutdown.clone();
            tokio::spawn(async move {
                let _permit = permit;
                let service = hyper::service::service_fn(move |req| {
                    let server = server.clone();
                    let shutdown = shutdown.clone();
                    async move { Ok::<_, Infallible>(server.route(req, Door::Tunnel, shutdown).await) }
                });
                let conn = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .with_upgrades();
                if let Err(e) = conn.await {
                    tracing::debug!("node kubelet tunnel connection ended: {e}");
                }
            });
        }
    }

    async fn route(
        &self,
        req: Request<Incoming>,
        door: Door,
        shutdown: CancellationToken,
    ) -> Response<Body> {
        let path = req.uri().path().to_owned();
        let segments: Vec<&str> = path.trim_start_matches('/').split('/').collect();
        let method = req.method().clone();
        let tunnel_only = match segments.first() {
            Some(&"exec" | &"attach") => true,
            Some(&"containerLogs") => !self.settings.read_only_logs,
            _ => false,
        };
        if door == Door::ReadOnly && tunnel_only {
            self.stats.refused_read_only.fetch_add(1, Ordering::Relaxed);
            self.stats.errors.fetch_add(1, Ordering::Relaxed);
            return text(
                StatusCode::FORBIDDEN,
                "this route is served only through the node's tunnel (kubectl logs/exec via \
                 CloudCore), not on the read-only port; logs can be opened here with \
                 wedge.edged.readOnlyPortLogs",
            );
        }
        let answer = match (method, segments.as_slice()) {
            (Method::GET, ["healthz"]) => text(StatusCode::OK, "ok"),
            (Method::GET, ["containerLogs", ns, pod, container]) => {
                self.stats.logs.fetch_add(1, Ordering::Relaxed);
                let query = req.uri().query().unwrap_or("");
                logs::serve(self, ns, pod, container, query, shutdown).await
            }
            (Method::GET | Method::POST, [kind @ ("exec" | "attach"), ns, pod, container]) => {
                let counter = if *kind == "exec" {
                    &self.stats.exec
                } else {
                    &self.stats.attach
                };
                counter.fetch_add(1, Ordering::Relaxed);
                let kind = if *kind == "exec" {
                    exec::Kind::Exec
                } else {
                    exec::Kind::Attach
                };
                let target = exec::Target {
                    namespace: ns.to_string(),
                    pod: pod.to_string(),
                    container: container.to_string(),
                };
                exec::serve(self, kind, target, req, shutdown).await
            }
            (Method::GET, ["stats", "summary"] | ["stats", "summary", ""]) => {
                self.stats.metrics.fetch_add(1, Ordering::Relaxed);
                self.summary(req.uri().query().unwrap_or("")).await
            }
            (Method::GET, ["metrics", "resource"]) => {
                self.stats.metrics.fetch_add(1, Ordering::Relaxed);
                self.resource_metrics().await
            }
            (
                _,
                [
                    "containerLogs" | "exec" | "attach" | "stats" | "metrics" | "healthz",
                    ..,
                ],
            ) => text(
                StatusCode::METHOD_NOT_ALLOWED,
                "method or path not served here",
            ),
            _ => text(StatusCode::NOT_FOUND, "404 page not found"),
        };
        if answer.status().is_client_error() || answer.status().is_server_error() {
            self.stats.errors.fetch_add(1, Ordering::Relaxed);
        }
        answer
    }

    /// The pod `namespace/name` and its container `container`, or the answer kubelet gives
    /// when either is unknown.
    fn find(&self, namespace: &str, name: &str, container: &str) -> Result<PodInfo, Refused> {
        let Some(pod) = self.pods.pod(namespace, name) else {
            return Err(Refused(
                StatusCode::NOT_FOUND,
                format!("pod does not exist: {namespace}/{name}"),
            ));
        };
        if !pod.has_container(container) {
            return Err(Refused(
                StatusCode::NOT_FOUND,
                format!("container {container:?} not found in pod {namespace}/{name}"),
            ));
        }
        Ok(pod)
    }

    /// The instances of `pod`'s container `container` edged created, newest first (by
    /// restart count, then creation).
    async fn instances(
        &self,
        pod: &PodInfo,
        container: &str,
    ) -> Result<Vec<ManagedContainer>, Refused> {
        let listed = self.engine.list(&self.settings.node).await.map_err(|e| {
            Refused(
                StatusCode::SERVICE_UNAVAILABLE,
                format!("the container runtime did not list containers: {e}"),
            )
        })?;
        let mut mine: Vec<ManagedContainer> = listed
            .into_iter()
            .filter(|c| !c.sandbox && c.pod_uid == pod.uid && c.container == container)
            .collect();
        mine.sort_by(|a, b| {
            (b.restart_count, b.created, &b.id).cmp(&(a.restart_count, a.created, &a.id))
        });
        Ok(mine)
    }

    /// The Summary API's answer, by the collector, for the containers edged created and the
    /// Wasm pods (which have no container figures).
    async fn summary_of(&self, scope: Scope) -> Result<Summary, String> {
        let containers = self
            .engine
            .list(&self.settings.node)
            .await
            .map_err(|e| format!("the container runtime did not list containers: {e}"))?;
        let wasm_pods: Vec<PodRef> = self
            .pods
            .pods()
            .into_iter()
            .filter(|p| p.wasm.is_some())
            .map(|p| PodRef {
                name: p.name,
                namespace: p.namespace,
                uid: p.uid,
            })
            .collect();
        self.collector
            .summary(&containers, &wasm_pods, scope)
            .await
            .map_err(|e| e.to_string())
    }

    async fn summary(&self, query: &str) -> Response<Body> {
        let only = query::Query::parse(query).flag("only_cpu_and_memory");
        let scope = match only {
            Ok(true) => Scope::CpuAndMemory,
            Ok(false) => Scope::Full,
            Err(e) => return text(StatusCode::BAD_REQUEST, &e),
        };
        match self.summary_of(scope).await {
            Ok(summary) => json(&summary),
            Err(e) => text(StatusCode::INTERNAL_SERVER_ERROR, &e),
        }
    }

    async fn resource_metrics(&self) -> Response<Body> {
        let summary = self.summary_of(Scope::CpuAndMemory).await;
        if let Err(e) = &summary {
            tracing::debug!("resource metrics without figures: {e}");
        }
        let mut answer = Response::new(full(crate::stats::resource_metrics::render(
            summary.as_ref().ok(),
        )));
        answer.headers_mut().insert(
            hyper::header::CONTENT_TYPE,
            hyper::header::HeaderValue::from_static(crate::stats::resource_metrics::CONTENT_TYPE),
        );
        answer
    }
}

/// A request the server turns down: its status and why.
pub(crate) struct Refused(StatusCode, String);

impl Refused {
    /// As an answer.
    pub(crate) fn answer(self) -> Response<Body> {
        text(self.0, &self.1)
    }
}

/// `body`, keeping the connection marked busy until hyper has written (or dropped) it: the
/// closure owns the guard, so it goes with the body.
fn guarded(body: Body, busy: BusyGuard) -> Body {
    body.map_frame(move |frame| {
        let _held = &busy;
        frame
    })
    .boxed()
}

/// A whole body.
pub(crate) fn full(bytes: impl Into<Bytes>) -> Body {
    Full::new(bytes.into())
        .map_err(|never: Infallible| match never {})
        .boxed()
}

/// A plain-text answer.
pub(crate) fn text(status: StatusCode, message: &str) -> Response<Body> {
    let mut body = message.to_owned();
    if !body.ends_with('\n') {
        body.push('\n');
    }
    let mut answer = Response::new(full(body));
    *answer.status_mut() = status;
    answer.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    answer
}

/// A JSON answer.
fn json(value: &impl serde::Serialize) -> Response<Body> {
    match serde_json::to_vec(value) {
        Ok(bytes) => {
            let mut answer = Response::new(full(bytes));
            answer.headers_mut().insert(
                hyper::header::CONTENT_TYPE,
                hyper::header::HeaderValue::from_static("application/json"),
            );
            answer
        }
        Err(e) => text(StatusCode::INTERNAL_SERVER_ERROR, &e.to_string()),
    }
}
