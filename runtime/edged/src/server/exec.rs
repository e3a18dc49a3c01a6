//! `/exec/{namespace}/{pod}/{container}` and `/attach/...`: `kubectl exec` and `kubectl attach`.
//!
//! The client (the apiserver, through the tunnel) asks to upgrade the connection to a
//! remotecommand stream (SPDY/3.1, `v4.channel.k8s.io`). How it is served depends on the
//! runtime:
//! - **CRI**: as kubelet does, the runtime's `Exec`/`Attach` gives the address of its own
//!   streaming server, and the upgrade request is replayed there; the runtime speaks the
//!   protocol and this server splices bytes both ways. Nothing here parses the stream.
//! - **Docker**: Docker's exec and attach are hijacked HTTP connections of its own, so the
//!   remotecommand protocol is spoken here ([`wedge_remotecommand`]) and bridged to them:
//!   stdin, stdout/stderr, terminal resizes, then the exit code.
//!
//! Wasm containers have no process to run a command in: exec and attach are refused.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio_util::sync::CancellationToken;

use wedge_remotecommand::StreamOptions;

use super::{Body, NodeServer, full, text};
use crate::engine::RuntimeClient;

/// Which stream is asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Run a command (`kubectl exec`).
    Exec,
    /// Join the container's main process (`kubectl attach`).
    Attach,
}

/// The container a stream is for.
#[derive(Debug, Clone)]
pub struct Target {
    /// Pod namespace.
    pub namespace: String,
    /// Pod name.
    pub pod: String,
    /// Container name.
    pub container: String,
}

/// How long the runtime's streaming server may take to answer the replayed upgrade.
const UPSTREAM_TIMEOUT: Duration = Duration::from_secs(30);
/// Largest error body relayed from the runtime's streaming server.
const MAX_ERROR_BODY: usize = 64 * 1024;

/// Serves one exec or attach request.
pub(super) async fn serve(
    server: &NodeServer,
    kind: Kind,
    target: Target,
    req: Request<Incoming>,
    shutdown: CancellationToken,
) -> Response<Body> {
    let raw_query = req.uri().query().unwrap_or("").to_owned();
    let options = match StreamOptions::from_query(&raw_query) {
        Ok(options) => options,
        Err(e) => return text(StatusCode::BAD_REQUEST, &e.to_string()),
    };
    let command = wedge_remotecommand::command_from_query(&raw_query);
    if kind == Kind::Exec && command.is_empty() {
        return text(StatusCode::BAD_REQUEST, "exec: no command given");
    }
    let Target {
        namespace,
        pod: name,
        container,
    } = &target;
    let pod = match server.find(namespace, name, container) {
        Ok(pod) => pod,
        Err(refused) => return refused.answer(),
    };
    if pod.wasm.is_some() {
        return text(
            StatusCode::BAD_REQUEST,
            &format!(
                "container {container:?} in pod {namespace}/{name} is a Wasm module: it has no \
                 process to exec into or attach to (kubectl logs shows its log)"
            ),
        );
    }
    let instances = match server.instances(&pod, container).await {
        Ok(instances) => instances,
        Err(refused) => return refused.answer(),
    };
    let Some(current) = instances.first().filter(|c| c.state == "running") else {
        return text(
            StatusCode::BAD_REQUEST,
            &format!("container {container:?} in pod {namespace}/{name} is not running"),
        );
    };
    let id = current.id.clone();
    match server.engine.client().await {
        Ok(RuntimeClient::Cri(cri)) => {
            let url = match kind {
                Kind::Exec => {
                    cri.exec(wedge_cri::v1::ExecRequest {
                        container_id: id,
                        cmd: command,
                        tty: options.tty,
                        stdin: options.stdin,
                        stdout: options.stdout,
                        stderr: options.stderr,
                    })
                    .await
                }
                Kind::Attach => {
                    cri.attach(wedge_cri::v1::AttachRequest {
                        container_id: id,
                        stdin: options.stdin,
                        tty: options.tty,
                        stdout: options.stdout,
                        stderr: options.stderr,
                    })
                    .await
                }
            };
            match url {
                Ok(url) => replay(req, &url, shutdown).await,
                Err(e) => text(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    &format!("the container runtime refused the stream: {e}"),
                ),
            }
        }
        Ok(RuntimeClient::Docker(docker)) => {
            super::docker_exec::serve(
                server,
                docker.clone(),
                kind,
                id,
                command,
                options,
                req,
                shutdown,
            )
            .await
        }
        Err(e) => text(
            StatusCode::SERVICE_UNAVAILABLE,
            &format!("the container runtime is not available: {e}"),
        ),
    }
}

/// Replays the upgrade request `req` to the runtime's streaming server at `url` and, once it
/// switches protocols, splices the two connections (kubelet's proxy for CRI streams).
async fn replay(
    mut req: Request<Incoming>,
    url: &str,
    shutdown: CancellationToken,
) -> Response<Body> {
    let bad_gateway = |why: String| text(StatusCode::BAD_GATEWAY, &why);
    let Ok(uri) = url.parse::<hyper::Uri>() else {
        return bad_gateway(format!("the runtime's stream address {url:?} is not a URL"));
    };
    let (Some(authority), "http") = (uri.authority().cloned(), uri.scheme_str().unwrap_or(""))
    else {
        return bad_gateway(format!(
            "the runtime's stream address {url:?} is not an http:// address"
        ));
    };
    let path = uri
        .path_and_query()
        .map_or_else(|| "/".to_owned(), |p| p.as_str().to_owned());
    let upstream = tokio::time::timeout(UPSTREAM_TIMEOUT, async {
        let tcp = tokio::net::TcpStream::connect(authority.as_str()).await?;
        let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tcp))
            .await
            .map_err(std::io::Error::other)?;
        tokio::spawn(async move {
            if let Err(e) = conn.with_upgrades().await {
                tracing::debug!("runtime stream connection ended: {e}");
            }
        });
        let mut forward = Request::builder()
            .method(req.method().clone())
            .uri(path.as_str())
            .body(Empty::<Bytes>::new())
            .map_err(std::io::Error::other)?;
        for (name, value) in req.headers() {
            if name != hyper::header::HOST && name != hyper::header::CONTENT_LENGTH {
                forward.headers_mut().append(name.clone(), value.clone());
            }
        }
        if let Ok(host) = authority.as_str().parse() {
            forward.headers_mut().insert(hyper::header::HOST, host);
        }
        sender
            .send_request(forward)
            .await
            .map_err(std::io::Error::other)
    })
    .await;
    let mut answer = match upstream {
        Ok(Ok(answer)) => answer,
        Ok(Err(e)) => return bad_gateway(format!("the runtime's stream server at {url}: {e}")),
        Err(_) => {
            return bad_gateway(format!(
                "the runtime's stream server at {url} did not answer within {UPSTREAM_TIMEOUT:?}"
            ));
        }
    };
    if answer.status() != StatusCode::SWITCHING_PROTOCOLS {
        // The runtime refused (a protocol it does not speak, a container gone): pass its
        // answer on, as kubelet's proxy does.
        let status = answer.status();
        let headers = answer.headers().clone();
        let body = http_body_util::Limited::new(answer.into_body(), MAX_ERROR_BODY)
            .collect()
            .await
            .map(|b| b.to_bytes())
            .unwrap_or_default();
        let mut relayed = Response::new(full(body));
        *relayed.status_mut() = status;
        *relayed.headers_mut() = headers;
        return relayed;
    }
    let runtime_side = hyper::upgrade::on(&mut answer);
    let client_side = hyper::upgrade::on(&mut req);
    tokio::spawn(async move {
        let (client, runtime) = match tokio::join!(client_side, runtime_side) {
            (Ok(client), Ok(runtime)) => (client, runtime),
            (Err(e), _) | (_, Err(e)) => {
                tracing::debug!("exec stream not upgraded: {e}");
                return;
            }
        };
        let mut client = TokioIo::new(client);
        let mut runtime = TokioIo::new(runtime);
        tokio::select! {
            done = tokio::io::copy_bidirectional(&mut client, &mut runtime) => {
                if let Err(e) = done {
                    tracing::debug!("exec stream ended: {e}");
                }
            }
            () = shutdown.cancelled() => {}
        }
    });
    switching_protocols(answer.headers().clone())
}

/// The `101 Switching Protocols` answer with `headers`, after which the connection is the
/// stream's.
pub(super) fn switching_protocols(headers: hyper::HeaderMap) -> Response<Body> {
    let mut switched = Response::new(full(Bytes::new()));
    *switched.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    *switched.headers_mut() = headers;
    switched
}
