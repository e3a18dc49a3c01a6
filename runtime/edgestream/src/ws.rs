//! A WebSocket client (RFC 6455) small enough to read in one sitting: the opening handshake and
//! the framing, nothing else (no extensions, no compression).
//!
//! Why not tungstenite's: CloudCore (gorilla/websocket) sends the tunnel's binary messages in
//! *text* frames, and tungstenite refuses a text message that is not UTF-8, which a connection
//! id of 128 or any exec stream is. Here a message is bytes, whatever its opcode.
//!
//! What it enforces: frames from the server are unmasked, control frames are final and at most
//! 125 bytes, reserved bits are 0, continuation frames only inside a fragmented message. A
//! message longer than the reader's limit is read past and reported as
//! [`WsEvent::Oversize`], never buffered.

use bytes::{Buf, BufMut, Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// The longest response head the handshake reads.
const MAX_HEAD: usize = 16 * 1024;

/// Opcodes.
pub(crate) const OP_CONTINUATION: u8 = 0x0;
/// A text frame (what KubeEdge's tunnel uses for everything).
pub(crate) const OP_TEXT: u8 = 0x1;
pub(crate) const OP_BINARY: u8 = 0x2;
pub(crate) const OP_CLOSE: u8 = 0x8;
pub(crate) const OP_PING: u8 = 0x9;
pub(crate) const OP_PONG: u8 = 0xA;

/// Why the WebSocket failed.
#[derive(Debug, thiserror::Error)]
pub enum WsError {
    /// The socket failed.
    #[error("{0}")]
    Io(#[from] std::io::Error),
    /// The server did not accept the upgrade.
    #[error("websocket handshake: {0}")]
    Handshake(String),
    /// The server broke the framing rules.
    #[error("websocket protocol: {0}")]
    Protocol(String),
    /// The server closed the connection (with a close frame, or by ending the stream).
    #[error("connection closed by the server{0}")]
    Closed(String),
}

/// What the reader got.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum WsEvent {
    /// A whole data message (text or binary: the tunnel does not care).
    Message(Bytes),
    /// A ping; the caller answers it with a pong of the same payload.
    Ping(Bytes),
    /// A pong.
    Pong,
    /// A message longer than the limit, read past; its length.
    Oversize(u64),
}

/// Runs the client side of the opening handshake on `stream`: a `GET <path>` with `Host`,
/// the upgrade headers and `extra` headers (written as given), then checks the `101` answer
/// and its `Sec-WebSocket-Accept`. Returns the bytes the server sent after its head (the
/// start of the frame stream).
pub(crate) async fn handshake<S>(
    stream: &mut S,
    host: &str,
    path: &str,
    extra: &[(&str, &str)],
) -> Result<BytesMut, WsError>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let key = tungstenite::handshake::client::generate_key();
    let mut request = format!(
        "GET {path} HTTP/1.1\r\nHost: {host}\r\nUser-Agent: wedge-edgestream/{}\r\n\
         Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n",
        env!("CARGO_PKG_VERSION")
    );
    for (name, value) in extra {
        if [name, value].iter().any(|s| s.contains(['\r', '\n'])) {
            return Err(WsError::Handshake(format!(
                "header {name:?} has a line break"
            )));
        }
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str("Upgrade: websocket\r\n\r\n");
    stream.write_all(request.as_bytes()).await?;
    stream.flush().await?;

    let mut buf = BytesMut::with_capacity(4096);
    let head_len = loop {
        if let Some(i) = find(&buf, b"\r\n\r\n") {
            break i + 4;
        }
        if buf.len() > MAX_HEAD {
            return Err(WsError::Handshake(format!(
                "response head longer than {MAX_HEAD} bytes"
            )));
        }
        if stream.read_buf(&mut buf).await? == 0 {
            return Err(WsError::Handshake(
                "connection closed before the response".into(),
            ));
        }
    };
    let mut headers = [httparse::EMPTY_HEADER; 32];
    let mut response = httparse::Response::new(&mut headers);
    response
        .parse(&buf[..head_len])
        .map_err(|e| WsError::Handshake(format!("bad response head: {e}")))?;
    let code = response.code.unwrap_or(0);
    if code != 101 {
        let body = String::from_utf8_lossy(&buf[head_len..]);
        return Err(WsError::Handshake(format!(
            "server answered {code} {}{}",
            response.reason.unwrap_or(""),
            if body.trim().is_empty() {
                String::new()
            } else {
                format!(": {}", body.trim())
            }
        )));
    }
    let header = |name: &str| {
        response
            .headers
            .iter()
            .find(|h| h.name.eq_ignore_ascii_case(name))
            .map(|h| String::from_utf8_lossy(h.value).into_owned())
    };
    if !header("upgrade").is_some_and(|v| v.eq_ignore_ascii_case("websocket")) {
        return Err(WsError::Handshake(
            "101 without `Upgrade: websocket`".into(),
        ));
    }
    if !header("connection").is_some_and(|v| {
        v.split(',')
            .any(|t| t.trim().eq_ignore_ascii_case("upgrade"))
    }) {
        return Err(WsError::Handshake(
            "101 without `Connection: Upgrade`".into(),
        ));
    }
    let expected = tungstenite::handshake::derive_accept_key(key.as_bytes());
    if header("sec-websocket-accept").as_deref() != Some(expected.as_str()) {
        return Err(WsError::Handshake("wrong Sec-WebSocket-Accept".into()));
    }
    let _ = buf.split_to(head_len);
    Ok(buf)
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// Appends one final, masked client frame with `payload` to `out`.
pub(crate) fn encode_frame(opcode: u8, payload: &[u8], out: &mut BytesMut) {
    out.reserve(14 + payload.len());
    out.put_u8(0x80 | opcode);
    let len = payload.len();
    if len < 126 {
        out.put_u8(0x80 | len as u8);
    } else if len <= usize::from(u16::MAX) {
        out.put_u8(0x80 | 126);
        out.put_u16(len as u16);
    } else {
        out.put_u8(0x80 | 127);
        out.put_u64(len as u64);
    }
    let mask: [u8; 4] = rand::random();
    out.put_slice(&mask);
    let start = out.len();
    out.put_slice(payload);
    for (i, b) in out[start..].iter_mut().enumerate() {
        *b ^= mask[i & 3];
    }
}

/// Reads frames from the server and puts messages together.
pub(crate) struct FrameReader<R> {
    inner: R,
    buf: BytesMut,
    max_message: usize,
    /// The message being put together, if a fragmented one started.
    partial: Option<Partial>,
}

enum Partial {
    Collecting(BytesMut),
    /// Too long: its bytes are read and dropped; how many so far.
    Skipping(u64),
}

struct Header {
    fin: bool,
    opcode: u8,
    len: u64,
}

impl<R: AsyncRead + Unpin> FrameReader<R> {
    /// A reader of `inner` that starts with `already` (what the handshake read past the
    /// head) and holds messages of at most `max_message` bytes.
    pub(crate) fn new(inner: R, already: BytesMut, max_message: usize) -> FrameReader<R> {
        FrameReader {
            inner,
            buf: already,
            max_message,
            partial: None,
        }
    }

    /// The next message or control frame. A close frame, or the end of the stream, is
    /// [`WsError::Closed`].
    pub(crate) async fn next(&mut self) -> Result<WsEvent, WsError> {
        loop {
            let h = self.header().await?;
            match h.opcode {
                OP_CLOSE | OP_PING | OP_PONG => {
                    if !h.fin || h.len > 125 {
                        return Err(WsError::Protocol(
                            "fragmented or oversize control frame".into(),
                        ));
                    }
                    let payload = self.payload(h.len as usize).await?;
                    match h.opcode {
                        OP_PING => return Ok(WsEvent::Ping(payload)),
                        OP_PONG => return Ok(WsEvent::Pong),
                        _ => return Err(WsError::Closed(close_reason(&payload))),
                    }
                }
                OP_TEXT | OP_BINARY | OP_CONTINUATION => {
                    let starts = h.opcode != OP_CONTINUATION;
                    match (&self.partial, starts) {
                        (Some(_), true) => {
                            return Err(WsError::Protocol(
                                "new message inside a fragmented one".into(),
                            ));
                        }
                        (None, false) => {
                            return Err(WsError::Protocol(
                                "continuation frame outside a message".into(),
                            ));
                        }
                        _ => {}
                    }
                    let mut partial = self
                        .partial
                        .take()
                        .unwrap_or_else(|| Partial::Collecting(BytesMut::new()));
                    if let Partial::Collecting(so_far) = &partial
                        && so_far.len() as u64 + h.len > self.max_message as u64
                    {
                        partial = Partial::Skipping(so_far.len() as u64);
                    }
                    match &mut partial {
                        Partial::Collecting(so_far) => {
                            let payload = self.payload(h.len as usize).await?;
                            so_far.extend_from_slice(&payload);
                        }
                        Partial::Skipping(n) => {
                            self.skip(h.len).await?;
                            *n += h.len;
                        }
                    }
                    if !h.fin {
                        self.partial = Some(partial);
                        continue;
                    }
                    return Ok(match partial {
                        Partial::Collecting(all) => WsEvent::Message(all.freeze()),
                        Partial::Skipping(n) => WsEvent::Oversize(n),
                    });
                }
                other => {
                    return Err(WsError::Protocol(format!("unknown opcode {other:#x}")));
                }
            }
        }
    }

    async fn header(&mut self) -> Result<Header, WsError> {
        self.fill(2).await?;
        let (b0, b1) = (self.buf[0], self.buf[1]);
        if b0 & 0x70 != 0 {
            return Err(WsError::Protocol("reserved bits set".into()));
        }
        if b1 & 0x80 != 0 {
            return Err(WsError::Protocol("masked frame from the server".into()));
        }
        let (len, extra) = match b1 & 0x7f {
            126 => {
                self.fill(4).await?;
                (u64::from(u16::from_be_bytes([self.buf[2], self.buf[3]])), 2)
            }
            127 => {
                self.fill(10).await?;
                let mut n = [0u8; 8];
                n.copy_from_slice(&self.buf[2..10]);
                (u64::from_be_bytes(n), 8)
            }
            n => (u64::from(n), 0),
        };
        self.buf.advance(2 + extra);
        Ok(Header {
            fin: b0 & 0x80 != 0,
            opcode: b0 & 0x0f,
            len,
        })
    }

    /// Reads until at least `n` bytes are buffered.
    async fn fill(&mut self, n: usize) -> Result<(), WsError> {
        while self.buf.len() < n {
            self.buf.reserve(n - self.buf.len());
            if self.inner.read_buf(&mut self.buf).await? == 0 {
                return Err(WsError::Closed(" (end of stream)".into()));
            }
        }
        Ok(())
    }

    async fn payload(&mut self, len: usize) -> Result<Bytes, WsError> {
        self.fill(len).await?;
        Ok(self.buf.split_to(len).freeze())
    }

    async fn skip(&mut self, mut len: u64) -> Result<(), WsError> {
        while len > 0 {
            if self.buf.is_empty() {
                self.fill(1).await?;
            }
            let n = (self.buf.len() as u64).min(len);
            self.buf.advance(n as usize);
            len -= n;
        }
        // Do not keep a large buffer around after a skip.
        if self.buf.capacity() > 64 * 1024 && self.buf.len() < 1024 {
            self.buf = BytesMut::from(&self.buf[..]);
        }
        Ok(())
    }
}

fn close_reason(payload: &[u8]) -> String {
    if payload.len() < 2 {
        return String::new();
    }
    let code = u16::from_be_bytes([payload[0], payload[1]]);
    format!(
        " (close {code}{})",
        match String::from_utf8_lossy(&payload[2..]).trim() {
            "" => String::new(),
            reason => format!(": {reason}"),
        }
    )
}

/// The server's side of the framing, for tests that play CloudCore's part on a socket.
#[cfg(test)]
pub(crate) mod testing {
    use tokio::io::{AsyncRead, AsyncReadExt};

    /// An unmasked server frame.
    pub(crate) fn server_frame(fin: bool, opcode: u8, payload: &[u8]) -> Vec<u8> {
        let mut out = vec![if fin { 0x80 } else { 0 } | opcode];
        match payload.len() {
            n if n < 126 => out.push(n as u8),
            n if n <= 0xffff => {
                out.push(126);
                out.extend_from_slice(&(n as u16).to_be_bytes());
            }
            n => {
                out.push(127);
                out.extend_from_slice(&(n as u64).to_be_bytes());
            }
        }
        out.extend_from_slice(payload);
        out
    }

    /// Reads one (masked) client frame: its opcode and unmasked payload.
    pub(crate) async fn read_client_frame<R: AsyncRead + Unpin>(
        r: &mut R,
    ) -> std::io::Result<(u8, Vec<u8>)> {
        let mut head = [0u8; 2];
        r.read_exact(&mut head).await?;
        assert_eq!(head[1] & 0x80, 0x80, "client frames are masked");
        let len = match head[1] & 0x7f {
            126 => u64::from(r.read_u16().await?),
            127 => r.read_u64().await?,
            n => u64::from(n),
        };
        let mut mask = [0u8; 4];
        r.read_exact(&mut mask).await?;
        let mut payload = vec![0u8; len as usize];
        r.read_exact(&mut payload).await?;
        for (i, b) in payload.iter_mut().enumerate() {
            *b ^= mask[i & 3];
        }
        Ok((head[0] & 0x0f, payload))
    }
}

#[cfg(test)]
mod tests {
    use super::testing::server_frame;
    use super::*;

    async fn read_all(bytes: Vec<u8>, max: usize) -> Vec<Result<WsEvent, String>> {
        let mut reader = FrameReader::new(&bytes[..], BytesMut::new(), max);
        let mut out = Vec::new();
        loop {
            match reader.next().await {
                Ok(e) => out.push(Ok(e)),
                Err(e) => {
                    out.push(Err(e.to_string()));
                    return out;
                }
            }
        }
    }

    #[tokio::test]
    async fn text_frames_that_are_not_utf8_are_messages() {
        let mut wire = server_frame(true, OP_TEXT, b"\x80\x01\x00{}");
        wire.extend(server_frame(true, OP_BINARY, b"\xff"));
        let events = read_all(wire, 1024).await;
        assert_eq!(
            events,
            vec![
                Ok(WsEvent::Message(Bytes::from_static(b"\x80\x01\x00{}"))),
                Ok(WsEvent::Message(Bytes::from_static(b"\xff"))),
                Err("connection closed by the server (end of stream)".into()),
            ]
        );
    }

    #[tokio::test]
    async fn fragments_join_around_control_frames() {
        // gorilla splits a message longer than its write buffer into frames.
        let big = vec![7u8; 70_000];
        let mut wire = server_frame(false, OP_TEXT, &big[..4096]);
        wire.extend(server_frame(true, OP_PING, b"hi"));
        wire.extend(server_frame(false, OP_CONTINUATION, &big[4096..8192]));
        wire.extend(server_frame(true, OP_CONTINUATION, &big[8192..]));
        wire.extend(server_frame(true, OP_PONG, b""));
        wire.extend(server_frame(true, OP_CLOSE, b"\x03\xe8bye"));
        let events = read_all(wire, 1 << 20).await;
        assert_eq!(
            events,
            vec![
                Ok(WsEvent::Ping(Bytes::from_static(b"hi"))),
                Ok(WsEvent::Message(Bytes::from(big))),
                Ok(WsEvent::Pong),
                Err("connection closed by the server (close 1000: bye)".into()),
            ]
        );
    }

    #[tokio::test]
    async fn oversize_messages_are_read_past() {
        let mut wire = server_frame(false, OP_TEXT, &[1u8; 600]);
        wire.extend(server_frame(true, OP_CONTINUATION, &[1u8; 600]));
        wire.extend(server_frame(true, OP_TEXT, &[2u8; 2000]));
        wire.extend(server_frame(true, OP_TEXT, b"ok"));
        let events = read_all(wire, 1000).await;
        assert_eq!(
            events[..3],
            [
                Ok(WsEvent::Oversize(1200)),
                Ok(WsEvent::Oversize(2000)),
                Ok(WsEvent::Message(Bytes::from_static(b"ok"))),
            ]
        );
    }

    #[tokio::test]
    async fn protocol_violations_end_the_connection() {
        for (wire, why) in [
            (vec![0x81, 0x81, 0, 0, 0, 0, b'x'], "masked frame"),
            (vec![0xC1, 0x00], "reserved bits"),
            (
                server_frame(true, OP_CONTINUATION, b"x"),
                "continuation frame outside",
            ),
            (server_frame(false, OP_PING, b"x"), "control frame"),
            (server_frame(true, 0x3, b"x"), "unknown opcode"),
            (
                [
                    server_frame(false, OP_TEXT, b"a"),
                    server_frame(true, OP_TEXT, b"b"),
                ]
                .concat(),
                "new message inside",
            ),
        ] {
            let events = read_all(wire, 1000).await;
            let last = events.last().unwrap().clone().unwrap_err();
            assert!(last.contains(why), "{last} lacks {why}");
        }
    }

    #[test]
    fn client_frames_are_masked() {
        for len in [0usize, 5, 125, 126, 65_535, 65_536] {
            let payload: Vec<u8> = (0..len).map(|i| i as u8).collect();
            let mut out = BytesMut::new();
            encode_frame(OP_TEXT, &payload, &mut out);
            assert_eq!(out[0], 0x81);
            assert_eq!(out[1] & 0x80, 0x80, "mask bit");
            let (len_bytes, field) = match len {
                n if n < 126 => (0, n as u8),
                n if n <= 0xffff => (2, 126),
                _ => (8, 127),
            };
            assert_eq!(out[1] & 0x7f, field);
            let mask_at = 2 + len_bytes;
            let mask = [
                out[mask_at],
                out[mask_at + 1],
                out[mask_at + 2],
                out[mask_at + 3],
            ];
            let unmasked: Vec<u8> = out[mask_at + 4..]
                .iter()
                .enumerate()
                .map(|(i, b)| b ^ mask[i & 3])
                .collect();
            assert_eq!(unmasked, payload);
        }
    }

    #[tokio::test]
    async fn handshake_checks_the_accept_key() {
        let (mut client, mut server) = tokio::io::duplex(64 * 1024);
        let server_side = tokio::spawn(async move {
            let mut buf = BytesMut::new();
            while find(&buf, b"\r\n\r\n").is_none() {
                server.read_buf(&mut buf).await.unwrap();
            }
            let head = String::from_utf8(buf.to_vec()).unwrap();
            let key = head
                .lines()
                .find_map(|l| l.strip_prefix("Sec-WebSocket-Key: "))
                .unwrap()
                .to_owned();
            let accept = tungstenite::handshake::derive_accept_key(key.as_bytes());
            let mut answer = format!(
                "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\
                 Connection: Upgrade\r\nSec-WebSocket-Accept: {accept}\r\n\r\n"
            )
            .into_bytes();
            answer.extend(server_frame(true, OP_TEXT, b"early"));
            server.write_all(&answer).await.unwrap();
            head
        });
        let rest = handshake(
            &mut client,
            "127.0.0.1:10004",
            "/v1/kubeedge/connect",
            &[("Sessionhostnameoverride", "edge-1")],
        )
        .await
        .unwrap();
        let head = server_side.await.unwrap();
        assert!(head.starts_with("GET /v1/kubeedge/connect HTTP/1.1\r\nHost: 127.0.0.1:10004\r\n"));
        assert!(head.contains("\r\nSessionhostnameoverride: edge-1\r\n"));
        let mut reader = FrameReader::new(client, rest, 1024);
        assert_eq!(
            reader.next().await.unwrap(),
            WsEvent::Message(Bytes::from_static(b"early"))
        );
    }

    #[tokio::test]
    async fn a_refused_upgrade_says_why() {
        let (mut client, mut server) = tokio::io::duplex(64 * 1024);
        tokio::spawn(async move {
            let mut buf = BytesMut::new();
            while find(&buf, b"\r\n\r\n").is_none() {
                server.read_buf(&mut buf).await.unwrap();
            }
            server
                .write_all(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 9\r\n\r\nno thanks")
                .await
                .unwrap();
        });
        let err = handshake(&mut client, "h", "/", &[]).await.unwrap_err();
        assert_eq!(
            err.to_string(),
            "websocket handshake: server answered 400 Bad Request: no thanks"
        );
    }
}
