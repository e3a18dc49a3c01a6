//! The WebSocket side: handshake checks (path, headers, client CN), recording, keepalive
//! timeout, and ACK bookkeeping for [`super::CloudHub::send_acked`].

use std::sync::Arc;
use std::time::Instant;

use futures_util::{SinkExt, StreamExt};
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio_rustls::TlsAcceptor;
use tokio_tungstenite::tungstenite::Message as Frame;
use tokio_tungstenite::tungstenite::handshake::server::{ErrorResponse, Request, Response};
use tokio_tungstenite::tungstenite::http::StatusCode;
use wedge_core::Message;

use super::{CloudHubOptions, Connection, Outgoing, RecordedMessage, SentMessage, Shared};

/// Accepts connections until the runtime is shut down.
pub(super) async fn serve(
    listener: TcpListener,
    tls: Arc<rustls::ServerConfig>,
    shared: Arc<Shared>,
    options: CloudHubOptions,
) {
    let acceptor = TlsAcceptor::from(tls);
    while let Ok((tcp, _)) = listener.accept().await {
        let acceptor = acceptor.clone();
        let shared = shared.clone();
        let options = options.clone();
        tokio::spawn(async move {
            match acceptor.accept(tcp).await {
                Ok(stream) => session(stream, shared, options).await,
                Err(e) => shared.update(|r| r.rejections.push(format!("TLS: {e}"))),
            }
        });
    }
}

fn header<'a>(req: &'a Request, name: &str) -> Option<&'a str> {
    // http's HeaderMap is already case-insensitive; the cloud accepts `Node_id` etc.
    req.headers().get(name).and_then(|v| v.to_str().ok())
}

async fn session(
    stream: tokio_rustls::server::TlsStream<tokio::net::TcpStream>,
    shared: Arc<Shared>,
    options: CloudHubOptions,
) {
    let cn = super::tls::peer_cn(stream.get_ref().1.peer_certificates()).unwrap_or_default();
    let cert_sha256 =
        super::tls::peer_sha256(stream.get_ref().1.peer_certificates()).unwrap_or_default();
    let mut seen = None;
    let mut refused_for = None;
    // tungstenite's callback type fixes the error type; its size is not ours to choose.
    #[allow(clippy::result_large_err)]
    let check = |req: &Request, resp: Response| -> Result<Response, ErrorResponse> {
        let node = header(req, "node_id").unwrap_or_default().to_owned();
        let project = header(req, "project_id").unwrap_or_default();
        let using = header(req, "connectionuse").unwrap_or_default();
        let path = req.uri().path().to_owned();
        let problem = if node.is_empty() {
            Some("missing node_id header".to_owned())
        } else if project.is_empty() {
            Some("missing project_id header".to_owned())
        } else if !using.eq_ignore_ascii_case("msg") {
            Some(format!("ConnectionUse is {using:?}, not \"msg\""))
        } else if path != format!("/{project}/{node}/events") {
            Some(format!("path {path} is not /{project}/{node}/events"))
        } else if options.require_node_cn && cn != format!("system:node:{node}") {
            Some(format!("client CN {cn:?} is not system:node:{node}"))
        } else {
            None
        };
        if let Some(problem) = problem {
            refused_for = Some(problem.clone());
            let mut refused = ErrorResponse::new(Some(problem));
            *refused.status_mut() = StatusCode::BAD_REQUEST;
            return Err(refused);
        }
        seen = Some((node, path));
        Ok(resp)
    };
    let ws = match tokio_tungstenite::accept_hdr_async(stream, check).await {
        Ok(ws) => ws,
        Err(e) => {
            let why = refused_for.unwrap_or_else(|| e.to_string());
            shared.update(|r| r.rejections.push(format!("handshake: {why}")));
            return;
        }
    };
    let Some((node, path)) = seen else { return };
    let (tx, mut rx) = mpsc::unbounded_channel::<Outgoing>();
    *shared.session.lock().unwrap_or_else(|e| e.into_inner()) = Some(tx.clone());
    let index = {
        let mut r = shared.lock();
        r.connections.push(Connection {
            node,
            cn,
            cert_sha256,
            path,
            opened: Instant::now(),
            closed: None,
        });
        r.connections.len() - 1
    };
    shared.changed.notify_all();
    let (mut sink, mut source) = ws.split();
    let mut deadline = tokio::time::Instant::now() + options.keepalive_timeout;
    loop {
        tokio::select! {
            out = rx.recv() => {
                let (text, msg) = match out {
                    Some(Outgoing::Message(msg)) => {
                        let mut text = String::from_utf8_lossy(&msg.to_cloud_vec()).into_owned();
                        text.push('\n');
                        (text, Some(msg))
                    }
                    Some(Outgoing::Raw(text)) => (text, None),
                    None => break,
                };
                if sink.send(Frame::text(text)).await.is_err() {
                    break;
                }
                if let Some(message) = msg {
                    shared.update(|r| r.sent.push(SentMessage { message: *message, at: Instant::now() }));
                }
            }
            frame = source.next() => {
                let text = match frame {
                    Some(Ok(Frame::Text(t))) => t.to_string(),
                    Some(Ok(Frame::Binary(b))) => String::from_utf8_lossy(&b).into_owned(),
                    Some(Ok(Frame::Close(_))) | Some(Err(_)) | None => break,
                    Some(Ok(_)) => continue,
                };
                let message = Message::from_slice(text.trim_end().as_bytes()).ok();
                if let Some(m) = &message
                    && m.route.operation == "keepalive"
                {
                    deadline = tokio::time::Instant::now() + options.keepalive_timeout;
                }
                // CloudCore's device controller answers every twin and state message once
                // it has written it.
                if let Some(m) = &message
                    && options.answer_device_messages
                    && m.route.resource.starts_with("device/")
                {
                    let mut answer = m.response(wedge_core::Content::ok());
                    answer.route.source = "devicecontroller".into();
                    answer.route.group = "twin".into();
                    answer.route.resource = "twin".into();
                    let _ = tx.send(Outgoing::Message(Box::new(answer)));
                }
                shared.update(|r| {
                    if let Some(m) = &message
                        && m.route.operation == "response"
                        && !m.header.parent_id.is_empty()
                    {
                        r.acked.push(m.header.parent_id.clone());
                    }
                    r.received.push(RecordedMessage { message, raw: text, at: Instant::now() });
                });
            }
            _ = tokio::time::sleep_until(deadline) => {
                let _ = sink.send(Frame::Close(None)).await;
                break;
            }
        }
    }
    shared.update(|r| {
        if let Some(c) = r.connections.get_mut(index) {
            c.closed.get_or_insert(Instant::now());
        }
    });
}
