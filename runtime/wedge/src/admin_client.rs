//! The client side of the node's admin API for `wedge module ...`: hyper's HTTP/1 client over
//! the node's unix socket (the default, found in its data directory) or over TCP with the
//! bearer token.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use axum::body::Bytes;
use axum::http::{Request, header};
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use wedge_core::config::EdgeCoreConfig;

use crate::cli::AdminArgs;

/// How long a request may take (a deploy validates and compiles the module).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(120);
/// How long reaching the node may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);

/// An answer: status code and body.
pub struct Response {
    /// HTTP status.
    pub status: u16,
    /// Body bytes.
    pub body: Vec<u8>,
}

impl Response {
    /// The body as JSON, or the body text in the error.
    pub fn json(&self) -> Result<serde_json::Value> {
        serde_json::from_slice(&self.body).with_context(|| {
            format!(
                "the node answered {} with a body that is not JSON: {}",
                self.status,
                String::from_utf8_lossy(&self.body)
            )
        })
    }

    /// The `error` field of an error answer, or the raw body.
    pub fn error_text(&self) -> String {
        self.json()
            .ok()
            .and_then(|v| v["error"].as_str().map(str::to_owned))
            .unwrap_or_else(|| String::from_utf8_lossy(&self.body).into_owned())
    }
}

/// Where the request goes, resolved from the command line.
enum Endpoint {
    Unix(PathBuf),
    Tcp {
        addr: std::net::SocketAddr,
        token: Option<String>,
    },
}

/// The config of the node the command names (`--config`, `--data-dir`), built as `wedge run`
/// builds it: its admin socket and token file are found from it.
fn node_config(args: &AdminArgs) -> Result<EdgeCoreConfig> {
    crate::config_cmd::node_config(args.config.as_deref(), args.data_dir.as_deref())
}

fn endpoint(args: &AdminArgs) -> Result<Endpoint> {
    let Some(addr) = args.admin_addr else {
        let socket = match &args.admin_socket {
            Some(socket) => socket.clone(),
            None => node_config(args)?.admin_socket_path(),
        };
        return Ok(Endpoint::Unix(socket));
    };
    let token = match &args.token_file {
        Some(file) => Some(read_token(file)?),
        None => read_token(&node_config(args)?.admin_token_path()).ok(),
    };
    Ok(Endpoint::Tcp { addr, token })
}

fn read_token(file: &Path) -> Result<String> {
    let text = std::fs::read_to_string(file)
        .with_context(|| format!("cannot read the admin token file {}", file.display()))?;
    Ok(text.trim().to_owned())
}

/// Sends one request and reads the whole answer.
pub fn request(args: &AdminArgs, method: &str, path: &str, body: &[u8]) -> Result<Response> {
    let endpoint = endpoint(args)?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let answer = runtime.block_on(async {
        tokio::time::timeout(
            REQUEST_TIMEOUT,
            send(&endpoint, method, path, Bytes::copy_from_slice(body)),
        )
        .await
        .unwrap_or_else(|_| bail!("the node did not answer within {REQUEST_TIMEOUT:?}"))
    })?;
    if answer.status == 401 {
        bail!(
            "the node refused the request (401): {}\nhint: pass --token-file with the node's \
             token file (<data dir>/admin.token), or use its unix socket (--config / \
             --data-dir / --admin-socket)",
            answer.error_text()
        );
    }
    Ok(answer)
}

async fn send(endpoint: &Endpoint, method: &str, path: &str, body: Bytes) -> Result<Response> {
    let mut builder = Request::builder()
        .method(method)
        .uri(path)
        .header(header::HOST, "localhost")
        .header(header::CONTENT_TYPE, "application/wasm");
    let response = match endpoint {
        Endpoint::Unix(socket) => {
            let stream =
                tokio::time::timeout(CONNECT_TIMEOUT, tokio::net::UnixStream::connect(socket))
                    .await
                    .map_err(|_| anyhow::anyhow!("timed out"))
                    .and_then(|r| r.map_err(anyhow::Error::from))
                    .with_context(|| {
                        format!(
                            "cannot reach the node's admin socket {}: is `wedge run` running there \
                     (as this user, with this --config / --data-dir)?",
                            socket.display()
                        )
                    })?;
            exchange(stream, builder.body(Full::new(body))?).await?
        }
        Endpoint::Tcp { addr, token } => {
            let stream = tokio::time::timeout(
                CONNECT_TIMEOUT,
                tokio::net::TcpStream::connect(addr),
            )
            .await
            .map_err(|_| anyhow::anyhow!("timed out"))
            .and_then(|r| r.map_err(anyhow::Error::from))
            .with_context(|| {
                format!(
                    "cannot reach the node's admin API at {addr}: is `wedge run` running there?"
                )
            })?;
            if let Some(token) = token {
                builder = builder.header(header::AUTHORIZATION, format!("Bearer {token}"));
            }
            exchange(stream, builder.body(Full::new(body))?).await?
        }
    };
    Ok(response)
}

async fn exchange<IO>(io: IO, request: Request<Full<Bytes>>) -> Result<Response>
where
    IO: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(io))
        .await
        .context("HTTP handshake with the node failed")?;
    let driver = tokio::spawn(connection);
    let response = sender
        .send_request(request)
        .await
        .context("the node closed the connection without answering")?;
    let status = response.status().as_u16();
    let body = response
        .into_body()
        .collect()
        .await
        .context("cannot read the node's answer")?
        .to_bytes()
        .to_vec();
    driver.abort();
    Ok(Response { status, body })
}
