//! The bootstrap HTTPS endpoints (cloudcore's `httpServer`): `GET /ca.crt` and `GET /edge.crt`.
//! A small HTTP/1.1 reader is enough: one request per connection, answered, then closed.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use anyhow::{Context, Result, bail};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

use super::{CloudCa, Issuing, Shared};

/// Accepts connections until the runtime is shut down.
pub(super) async fn serve(
    listener: TcpListener,
    tls: Arc<rustls::ServerConfig>,
    ca: Arc<CloudCa>,
    shared: Arc<Shared>,
    issuing: Issuing,
) {
    let acceptor = TlsAcceptor::from(tls);
    let refusals = Arc::new(AtomicU32::new(issuing.refuse_first));
    while let Ok((tcp, _)) = listener.accept().await {
        let acceptor = acceptor.clone();
        let ca = ca.clone();
        let shared = shared.clone();
        let issuing = issuing.clone();
        let refusals = refusals.clone();
        tokio::spawn(async move {
            if let Ok(mut stream) = acceptor.accept(tcp).await {
                let peer_cn = super::tls::peer_cn(stream.get_ref().1.peer_certificates());
                let (status, body, path) = match read_request(&mut stream).await {
                    Ok(req) if req.path == "/edge.crt" && take_one(&refusals) => {
                        (503, b"unavailable (simulated)".to_vec(), req.path)
                    }
                    Ok(req) => {
                        let (status, body) = answer(&ca, &req, peer_cn.as_deref(), &issuing);
                        (status, body, req.path)
                    }
                    Err(e) => (400, e.to_string().into_bytes(), String::new()),
                };
                shared.update(|r| r.bootstrap.push(format!("{path} {status}")));
                let reason = if status == 200 { "OK" } else { "Error" };
                let head = format!(
                    "HTTP/1.1 {status} {reason}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                    body.len()
                );
                let _ = stream.write_all(head.as_bytes()).await;
                let _ = stream.write_all(&body).await;
                let _ = stream.shutdown().await;
            }
        });
    }
}

/// Takes one of the refusals left; false when none are.
fn take_one(left: &AtomicU32) -> bool {
    left.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1))
        .is_ok()
}

struct HttpRequest {
    method: String,
    path: String,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl HttpRequest {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

async fn read_request(stream: &mut (impl AsyncReadExt + Unpin)) -> Result<HttpRequest> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            bail!("connection closed before a full request");
        }
        buf.extend_from_slice(&chunk[..n]);
        let mut headers = [httparse::EMPTY_HEADER; 32];
        let mut req = httparse::Request::new(&mut headers);
        if let httparse::Status::Complete(head_len) = req.parse(&buf)? {
            let headers: Vec<(String, String)> = req
                .headers
                .iter()
                .map(|h| {
                    (
                        h.name.to_owned(),
                        String::from_utf8_lossy(h.value).into_owned(),
                    )
                })
                .collect();
            let mut parsed = HttpRequest {
                method: req.method.unwrap_or_default().to_owned(),
                path: req.path.unwrap_or_default().to_owned(),
                headers,
                body: Vec::new(),
            };
            let length: usize = parsed
                .header("content-length")
                .map(|v| v.trim().parse())
                .transpose()
                .context("bad Content-Length")?
                .unwrap_or(0);
            while buf.len() < head_len + length {
                let n = stream.read(&mut chunk).await?;
                if n == 0 {
                    bail!("connection closed inside the body");
                }
                buf.extend_from_slice(&chunk[..n]);
            }
            parsed.body = buf[head_len..head_len + length].to_vec();
            return Ok(parsed);
        }
    }
}

fn answer(
    ca: &CloudCa,
    req: &HttpRequest,
    peer_cn: Option<&str>,
    issuing: &Issuing,
) -> (u16, Vec<u8>) {
    if req.method != "GET" {
        return (405, b"method not allowed".to_vec());
    }
    match req.path.as_str() {
        "/ca.crt" => (200, ca.ca_der()),
        "/edge.crt" => match edge_crt(ca, req, peer_cn, issuing) {
            Ok(cert) => (200, cert),
            Err(e) => (401, format!("{e:#}").into_bytes()),
        },
        _ => (404, b"not found".to_vec()),
    }
}

/// Signs the CSR for a valid bearer token, or — for rotation, which sends no token — for a
/// client certificate of the same node.
fn edge_crt(
    ca: &CloudCa,
    req: &HttpRequest,
    peer_cn: Option<&str>,
    issuing: &Issuing,
) -> Result<Vec<u8>> {
    let node = req.header("NodeName").context("missing NodeName header")?;
    match req.header("Authorization") {
        Some(auth) => {
            let jwt = auth
                .strip_prefix("Bearer ")
                .context("Authorization is not a bearer token")?;
            ca.verify_jwt(jwt)?;
        }
        None => {
            let cn = peer_cn.context("no token and no client certificate")?;
            if cn != format!("system:node:{node}") {
                bail!("client certificate CN {cn} does not match node {node}");
            }
        }
    }
    ca.sign_csr_with(&req.body, issuing)
}
