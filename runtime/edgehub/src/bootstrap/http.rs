//! The one HTTP/1.1 exchange a bootstrap step needs: send a GET with a body over an established
//! (TLS) stream, read one response. The protocol is hyper's client connection (hyper is already
//! linked for the admin API and module downloads), driven on the caller's task over the borrowed
//! stream; this file builds the request and bounds what the response may hold.

use std::error::Error as StdError;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use http_body_util::{BodyExt as _, Full, LengthLimitError, Limited};
use hyper::body::Bytes;
use hyper::header::{CONNECTION, CONTENT_LENGTH, HOST, HeaderName, HeaderValue};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// The most a response body may hold (a certificate is a few KiB).
const MAX_RESPONSE: usize = 1 << 20;

/// A response: status and body.
#[derive(Debug)]
pub(crate) struct Response {
    pub(crate) status: u16,
    pub(crate) body: Vec<u8>,
}

/// Sends `GET <path>` with `headers` and `body`, then reads the response (the connection is
/// closed after it).
pub(crate) async fn get<S: AsyncRead + AsyncWrite + Unpin>(
    stream: &mut S,
    host: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Result<Response, String> {
    // Built before anything is written, so a bad header sends nothing.
    let request = request(host, path, headers, body)?;
    // Title case, as Go's net/http (and so edgecore) writes header names.
    let (mut sender, connection) = hyper::client::conn::http1::Builder::new()
        .title_case_headers(true)
        .handshake::<_, Full<Bytes>>(TokioIo::new(CloseIsEof(stream)))
        .await
        .map_err(|e| format!("sending request: {}", chain(&e)))?;
    let exchange = async move {
        let response = sender
            .send_request(request)
            .await
            .map_err(|e| response_error(&e))?;
        let status = response.status().as_u16();
        let body = Limited::new(response.into_body(), MAX_RESPONSE)
            .collect()
            .await
            .map_err(|e| {
                if e.is::<LengthLimitError>() {
                    format!("response larger than {MAX_RESPONSE} bytes")
                } else {
                    match e.downcast_ref::<hyper::Error>() {
                        Some(e) => response_error(e),
                        None => format!("reading response: {}", chain(&*e)),
                    }
                }
            })?
            .to_bytes()
            .to_vec();
        Ok(Response { status, body })
    };
    // The connection does the reading and writing; it runs here until the response is in. Its
    // failures reach `exchange` (hyper hands them to the pending request or body), and once it
    // has ended without one the response is complete or `exchange` fails as closed.
    tokio::pin!(connection, exchange);
    let mut connection_ended = false;
    loop {
        tokio::select! {
            result = &mut exchange => return result,
            _ = &mut connection, if !connection_ended => connection_ended = true,
        }
    }
}

/// The request: `Host`, `Connection: close`, the caller's headers (values with a line break
/// refused) and, for a non-empty body, `Content-Length`.
fn request(
    host: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Result<hyper::Request<Full<Bytes>>, String> {
    let value = |name: &str, value: &str| {
        if value.contains(['\r', '\n']) {
            return Err(format!("header {name} holds a line break"));
        }
        HeaderValue::from_str(value).map_err(|e| format!("header {name}: {e}"))
    };
    let mut builder = hyper::Request::get(path)
        .header(HOST, value("Host", host)?)
        .header(CONNECTION, HeaderValue::from_static("close"));
    for (name, v) in headers {
        let header = HeaderName::from_bytes(name.as_bytes())
            .map_err(|e| format!("header name {name:?}: {e}"))?;
        builder = builder.header(header, value(name, v)?);
    }
    if !body.is_empty() {
        builder = builder.header(CONTENT_LENGTH, body.len());
    }
    builder
        .body(Full::new(Bytes::copy_from_slice(body)))
        .map_err(|e| format!("bad request for {path:?}: {e}"))
}

/// A failed exchange, in words.
fn response_error(e: &hyper::Error) -> String {
    if e.is_parse() {
        format!("malformed response: {}", chain(e))
    } else if e.is_incomplete_message() {
        "connection closed before a complete response".to_owned()
    } else {
        format!("reading response: {}", chain(e))
    }
}

/// `e` and its causes, `: `-separated (hyper's own text is terse; the cause says what the
/// stream did).
fn chain(e: &(dyn StdError + 'static)) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// The stream with a TLS peer that closes without `close_notify` (rustls' `UnexpectedEof`)
/// read as a plain end of stream: a response delimited by the close is judged on what
/// arrived, and a `Content-Length` or chunked one that is cut short is still an error.
struct CloseIsEof<S>(S);

impl<S: AsyncRead + Unpin> AsyncRead for CloseIsEof<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match Pin::new(&mut self.0).poll_read(cx, buf) {
            Poll::Ready(Err(e)) if e.kind() == io::ErrorKind::UnexpectedEof => Poll::Ready(Ok(())),
            other => other,
        }
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for CloseIsEof<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.0).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.0).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.0.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _, DuplexStream, duplex};

    /// Reads one request (head and `body_len` bytes of body) from `peer`, as text.
    async fn read_request(peer: &mut DuplexStream, body_len: usize) -> String {
        let mut buf = Vec::new();
        let mut chunk = [0u8; 1024];
        loop {
            let head_end = buf.windows(4).position(|w| w == b"\r\n\r\n");
            if head_end.is_some_and(|end| buf.len() >= end + 4 + body_len) {
                return String::from_utf8(buf).unwrap();
            }
            let n = peer.read(&mut chunk).await.unwrap();
            assert_ne!(n, 0, "client closed mid-request: {buf:?}");
            buf.extend_from_slice(&chunk[..n]);
        }
    }

    /// Runs `get` against a peer that answers with `response` and then closes.
    async fn exchange(response: Vec<u8>) -> Result<Response, String> {
        let (mut client, mut peer) = duplex(64 * 1024);
        let server = tokio::spawn(async move {
            read_request(&mut peer, 0).await;
            // The client may stop reading (an oversized body): ignore write failures.
            let _ = peer.write_all(&response).await;
            let _ = peer.shutdown().await;
        });
        let result = get(&mut client, "cloud:10002", "/ca.crt", &[], b"").await;
        drop(client);
        server.await.unwrap();
        result
    }

    #[tokio::test]
    async fn sends_host_close_headers_and_body() {
        let (mut client, mut peer) = duplex(64 * 1024);
        let server = tokio::spawn(async move {
            let request = read_request(&mut peer, 3).await;
            peer.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
                .await
                .unwrap();
            request
        });
        let headers = [("Authorization", "Bearer t"), ("NodeName", "n1")];
        let r = get(&mut client, "cloud:10002", "/edge.crt", &headers, b"csr")
            .await
            .unwrap();
        assert_eq!((r.status, r.body.as_slice()), (200, &b"ok"[..]));
        let request = server.await.unwrap();
        let (head, body) = request.split_once("\r\n\r\n").unwrap();
        let mut lines = head.split("\r\n");
        assert_eq!(lines.next(), Some("GET /edge.crt HTTP/1.1"));
        let mut lines: Vec<&str> = lines.collect();
        lines.sort_unstable();
        assert_eq!(
            lines,
            [
                "Authorization: Bearer t",
                "Connection: close",
                "Content-Length: 3",
                "Host: cloud:10002",
                "Nodename: n1",
            ]
        );
        assert_eq!(body, "csr");
    }

    #[tokio::test]
    async fn an_empty_body_has_no_length() {
        let (mut client, mut peer) = duplex(64 * 1024);
        let server = tokio::spawn(async move {
            let request = read_request(&mut peer, 0).await;
            peer.write_all(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")
                .await
                .unwrap();
            request
        });
        let r = get(&mut client, "cloud:10002", "/ca.crt", &[], b"")
            .await
            .unwrap();
        assert_eq!((r.status, r.body.len()), (404, 0));
        let request = server.await.unwrap();
        assert!(request.ends_with("\r\n\r\n"), "{request:?}");
        assert!(!request.to_ascii_lowercase().contains("content-length"));
    }

    #[tokio::test]
    async fn reads_length_chunked_and_close_delimited_bodies() {
        let r = exchange(b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nabcdef".to_vec())
            .await
            .unwrap();
        assert_eq!((r.status, r.body.as_slice()), (200, &b"abc"[..]));
        let chunked = b"HTTP/1.1 401 Unauthorized\r\nTransfer-Encoding: chunked\r\n\r\n4\r\nbad \r\n5;x=1\r\ntoken\r\n0\r\n\r\n";
        let r = exchange(chunked.to_vec()).await.unwrap();
        assert_eq!((r.status, r.body.as_slice()), (401, &b"bad token"[..]));
        let r = exchange(b"HTTP/1.1 200 OK\r\n\r\nall".to_vec())
            .await
            .unwrap();
        assert_eq!((r.status, r.body.as_slice()), (200, &b"all"[..]));
    }

    #[tokio::test]
    async fn cut_short_or_malformed_is_an_error() {
        let cut = exchange(b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nab".to_vec()).await;
        let cut = cut.unwrap_err();
        assert!(cut.starts_with("reading response: "), "{cut}");
        let cut = exchange(
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n4\r\nbad \r\n".to_vec(),
        )
        .await
        .unwrap_err();
        assert!(cut.starts_with("reading response: "), "{cut}");
        assert_eq!(
            exchange(b"HTTP/1.1 200 OK\r\nContent-Le".to_vec())
                .await
                .unwrap_err(),
            "connection closed before a complete response"
        );
        assert_eq!(
            exchange(Vec::new()).await.unwrap_err(),
            "connection closed before a complete response"
        );
        let bad = exchange(b"HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n".to_vec())
            .await
            .unwrap_err();
        assert!(bad.starts_with("malformed response: "), "{bad}");
        let bad = exchange(b"SMTP ready\r\n\r\n".to_vec()).await.unwrap_err();
        assert!(bad.starts_with("malformed response: "), "{bad}");
    }

    #[tokio::test]
    async fn an_oversized_body_is_refused() {
        let mut sized = format!(
            "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n",
            MAX_RESPONSE + 1
        )
        .into_bytes();
        sized.resize(sized.len() + MAX_RESPONSE + 1, b'x');
        assert_eq!(
            exchange(sized).await.unwrap_err(),
            "response larger than 1048576 bytes"
        );
        let mut by_close = b"HTTP/1.1 200 OK\r\n\r\n".to_vec();
        by_close.resize(by_close.len() + 2 * MAX_RESPONSE, b'x');
        assert_eq!(
            exchange(by_close).await.unwrap_err(),
            "response larger than 1048576 bytes"
        );
        // Exactly the limit is fine.
        let mut full =
            format!("HTTP/1.1 200 OK\r\nContent-Length: {MAX_RESPONSE}\r\n\r\n").into_bytes();
        full.resize(full.len() + MAX_RESPONSE, b'x');
        assert_eq!(exchange(full).await.unwrap().body.len(), MAX_RESPONSE);
    }

    #[tokio::test]
    async fn a_line_break_in_a_header_is_refused_before_sending() {
        let (mut client, mut peer) = duplex(1024);
        let headers = [("Authorization", "Bearer t\r\nX-Evil: 1")];
        assert_eq!(
            get(&mut client, "cloud:10002", "/edge.crt", &headers, b"")
                .await
                .unwrap_err(),
            "header Authorization holds a line break"
        );
        assert_eq!(
            get(&mut client, "cloud\n:1", "/edge.crt", &[], b"")
                .await
                .unwrap_err(),
            "header Host holds a line break"
        );
        drop(client);
        let mut sent = Vec::new();
        peer.read_to_end(&mut sent).await.unwrap();
        assert!(sent.is_empty(), "{sent:?}");
    }

    /// A TLS stream whose peer closed without `close_notify`: the end reads as `UnexpectedEof`.
    struct NoCloseNotify(DuplexStream);

    impl AsyncRead for NoCloseNotify {
        fn poll_read(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
            buf: &mut ReadBuf<'_>,
        ) -> Poll<io::Result<()>> {
            let before = buf.filled().len();
            match Pin::new(&mut self.0).poll_read(cx, buf) {
                Poll::Ready(Ok(())) if buf.filled().len() == before && buf.remaining() > 0 => {
                    Poll::Ready(Err(io::ErrorKind::UnexpectedEof.into()))
                }
                other => other,
            }
        }
    }

    impl AsyncWrite for NoCloseNotify {
        fn poll_write(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
            buf: &[u8],
        ) -> Poll<io::Result<usize>> {
            Pin::new(&mut self.0).poll_write(cx, buf)
        }

        fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
            Pin::new(&mut self.0).poll_flush(cx)
        }

        fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
            Pin::new(&mut self.0).poll_shutdown(cx)
        }
    }

    #[tokio::test]
    async fn a_close_without_close_notify_after_the_response_is_fine() {
        for (response, body) in [
            (&b"HTTP/1.1 200 OK\r\n\r\nall"[..], &b"all"[..]),
            (b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", b"ok"),
        ] {
            let (client, mut peer) = duplex(1024);
            let mut client = NoCloseNotify(client);
            let server = tokio::spawn(async move {
                read_request(&mut peer, 0).await;
                peer.write_all(response).await.unwrap();
            });
            let r = get(&mut client, "cloud:10002", "/ca.crt", &[], b"")
                .await
                .unwrap();
            assert_eq!(r.body, body);
            server.await.unwrap();
        }
        // Cut short, it is still an error.
        let (client, mut peer) = duplex(1024);
        let mut client = NoCloseNotify(client);
        tokio::spawn(async move {
            read_request(&mut peer, 0).await;
            peer.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nok")
                .await
                .unwrap();
        });
        let cut = get(&mut client, "cloud:10002", "/ca.crt", &[], b"")
            .await
            .unwrap_err();
        assert!(cut.starts_with("reading response: "), "{cut}");
    }
}
