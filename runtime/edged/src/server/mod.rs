//! The node's kubelet port: what the apiserver asks a kubelet for `kubectl logs`, `exec`,
//! `attach` and metrics reads, served where KubeEdge's EdgeStream tunnel replays those
//! requests (`tailoredKubeletConfig.readOnlyPort` on `address`: `127.0.0.1:10350`).
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
//! Like edgecore's, the port has no authentication: it is meant for loopback, where only the
//! tunnel reaches it. A non-loopback address is the operator's choice and is warned about at
//! start, since it lets anyone who reaches it run commands in the node's containers.

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
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

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
    /// Where it listens (`address:readOnlyPort`; `127.0.0.1:10350` in KubeEdge).
    pub addr: SocketAddr,
    /// This node's name: the containers listed are the ones its edged created.
    pub node: String,
    /// Connections served at once; more wait for one to end (each `logs -f` or `exec`
    /// holds one for as long as it lasts).
    pub max_connections: usize,
    /// How long an exec or attach waits for the client's streams after the upgrade
    /// (kubelet's `streamCreationTimeout`, 4 h by default, is for idle streams; this is only
    /// for setting them up).
    pub stream_setup_timeout: Duration,
}

impl ServerSettings {
    /// KubeEdge's defaults for node `node` on `addr`.
    pub fn new(node: impl Into<String>, addr: SocketAddr) -> ServerSettings {
        ServerSettings {
            addr,
            node: node.into(),
            max_connections: 64,
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

    /// Binds the server's address.
    pub async fn bind(&self) -> Result<TcpListener, ServerError> {
        let addr = self.settings.addr;
        if !addr.ip().is_loopback() {
            tracing::warn!(
                %addr,
                "the node's kubelet port is not on loopback: it has no authentication, so \
                 anyone reaching it can read logs and run commands in the node's containers"
            );
        }
        TcpListener::bind(addr)
            .await
            .map_err(|source| ServerError::Bind { addr, source })
    }

    /// Serves connections from `listener` until `shutdown`; open streams end with it.
    pub async fn serve(self: Arc<Self>, listener: TcpListener, shutdown: CancellationToken) {
        let slots = Arc::new(Semaphore::new(self.settings.max_connections.max(1)));
        tracing::info!(addr = ?listener.local_addr().ok(), "node kubelet port serving");
        loop {
            let permit = tokio::select! {
                _ = shutdown.cancelled() => return,
                permit = slots.clone().acquire_owned() => match permit {
                    Ok(permit) => permit,
                    Err(_) => return,
                },
            };
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
            let server = self.clone();
            let shutdown = shutdown.clone();
            tokio::spawn(async move {
                let _permit = permit;
                let service = hyper::service::service_fn(move |req| {
                    let server = server.clone();
                    let shutdown = shutdown.clone();
                    async move { Ok::<_, Infallible>(server.route(req, shutdown).await) }
                });
                let conn = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .with_upgrades();
                if let Err(e) = conn.await {
                    tracing::debug!(%peer, "node kubelet port connection ended: {e}");
                }
            });
        }
    }

    async fn route(&self, req: Request<Incoming>, shutdown: CancellationToken) -> Response<Body> {
        let path = req.uri().path().to_owned();
        let segments: Vec<&str> = path.trim_start_matches('/').split('/').collect();
        let method = req.method().clone();
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
