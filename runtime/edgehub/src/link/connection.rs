//! Dialing CloudCore: TCP, mutual TLS, then the WebSocket handshake with edgecore's headers.

use std::time::Duration;

use futures_util::SinkExt;
use futures_util::stream::SplitSink;
use rustls::pki_types::ServerName;
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::http::{HeaderName, HeaderValue};
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::tungstenite::{self, Message as WsMessage};
use wedge_core::Message;

use super::frame::encode;
use super::settings::LinkSettings;
use super::tls::{TlsError, client_config};

/// An established link.
pub(crate) type Ws = WebSocketStream<TlsStream<TcpStream>>;
/// Its writing half.
pub(crate) type WsSink = SplitSink<Ws, WsMessage>;

/// Why a dial failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum DialError {
    /// The certificate files are unusable.
    #[error(transparent)]
    Tls(#[from] TlsError),
    /// The server host is not a valid TLS server name.
    #[error("{0:?} is not a valid TLS server name")]
    ServerName(String),
    /// TCP or TLS failed.
    #[error("connect: {0}")]
    Io(#[from] std::io::Error),
    /// The WebSocket handshake failed.
    #[error("websocket handshake: {0}")]
    Handshake(#[from] tungstenite::Error),
    /// Everything together took longer than the handshake timeout.
    #[error("no connection within {0:?}")]
    Timeout(Duration),
}

/// Connects to CloudCore within the handshake timeout.
pub(crate) async fn dial(settings: &LinkSettings) -> Result<Ws, DialError> {
    let tls = client_config(&settings.ca_file, &settings.cert_file, &settings.key_file)?;
    let name = ServerName::try_from(settings.host.clone())
        .map_err(|_| DialError::ServerName(settings.host.clone()))?;
    let mut request = settings.url().into_client_request()?;
    for (key, value) in settings.headers() {
        let key = HeaderName::from_bytes(key.as_bytes()).map_err(tungstenite::Error::from)?;
        let value = HeaderValue::from_str(&value).map_err(tungstenite::Error::from)?;
        request.headers_mut().insert(key, value);
    }
    // tungstenite's own limit is twice ours: frames between the two are decoded-and-rejected
    // (logged, link kept); only absurd ones break the link, before they are buffered whole.
    let limit = settings.max_frame.saturating_mul(2);
    let ws_config = WebSocketConfig::default()
        .max_frame_size(Some(limit))
        .max_message_size(Some(limit));
    let connect = async {
        let tcp = TcpStream::connect(&settings.server).await?;
        // Messages are small and latency matters more than packet count.
        tcp.set_nodelay(true)?;
        let stream = TlsConnector::from(tls).connect(name, tcp).await?;
        let (ws, _response) =
            tokio_tungstenite::client_async_with_config(request, stream, Some(ws_config)).await?;
        Ok::<Ws, DialError>(ws)
    };
    tokio::time::timeout(settings.handshake_timeout, connect)
        .await
        .map_err(|_| DialError::Timeout(settings.handshake_timeout))?
}

/// Writes `msgs` as one text frame each and flushes once, all within `deadline`; an error
/// means the link is broken. One flush per batch keeps a backlog from costing a TLS record
/// and a system call per message.
pub(crate) async fn write_batch(
    sink: &mut WsSink,
    msgs: &[&Message],
    deadline: Duration,
) -> Result<(), String> {
    let all = async {
        for msg in msgs {
            sink.feed(WsMessage::Text(encode(msg).into())).await?;
        }
        sink.flush().await
    };
    match tokio::time::timeout(deadline, all).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(format!("write failed: {e}")),
        Err(_) => Err(format!("write took longer than {deadline:?}")),
    }
}

/// Writes one message as one text frame within `deadline`; an error means the link is broken.
pub(crate) async fn write(
    sink: &mut WsSink,
    msg: &Message,
    deadline: Duration,
) -> Result<(), String> {
    let frame = WsMessage::Text(encode(msg).into());
    match tokio::time::timeout(deadline, sink.send(frame)).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(format!("write failed: {e}")),
        Err(_) => Err(format!("write took longer than {deadline:?}")),
    }
}
