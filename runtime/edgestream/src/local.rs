//! The local side of a connection: the request replayed to the kubelet port, and its answer
//! streamed back to the cloud.
//!
//! What edgecore v1.23.1 sends back, by kind (CloudCore has already answered the apiserver
//! `200` with a chunked body for logs and metrics, so only the *body* goes back; for exec and
//! attach it hijacked the apiserver's connection, so *everything* goes back, the kubelet's
//! `101` head included):
//! - **logs**: the response body as it comes, whatever the status;
//! - **metrics**: the body line by line, each line ending in `\n` (a `\r` before it dropped, a
//!   last line without one given one), with `Accept-Encoding: identity` so that the body is
//!   not compressed: CloudCore does not pass the response headers on. We ask for identity for
//!   logs too, for the same reason (edgecore forwards the apiserver's `Accept-Encoding` there);
//! - **exec/attach**: the request head written on a plain TCP connection, then bytes piped
//!   both ways until either side ends.
//!
//! Unlike edgecore, a request that cannot reach the kubelet still ends with `REMOVE_CONNECT`
//! (edgecore sends nothing and the apiserver's request hangs until its client gives up), and an
//! exec/attach that cannot reach it is answered `502 Bad Gateway` with the reason, which
//! kubectl shows. Metrics lines longer than a chunk are passed in pieces where Go's scanner
//! would end the response at 64 KiB.

use bytes::{BufMut, BytesMut};
use http_body_util::BodyExt;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::connect::ConnectRequest;
use crate::session::{ConnContext, Kind};

/// Why the kubelet request failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum LocalError {
    /// The kubelet port did not accept the connection.
    #[error("kubelet port {addr} not reachable: {reason}")]
    Connect {
        /// The local address.
        addr: std::net::SocketAddr,
        /// Why.
        reason: String,
    },
    /// HTTP failed (the request, or the response while it was read).
    #[error("kubelet request {target}: {reason}")]
    Http {
        /// Path and query.
        target: String,
        /// Why.
        reason: String,
    },
    /// The upgraded connection failed.
    #[error("kubelet connection {target}: {reason}")]
    Pipe {
        /// Path and query.
        target: String,
        /// Why.
        reason: String,
    },
}

/// Serves one connection until its answer ends, the cloud removes it, or the session ends.
pub(crate) async fn serve(
    ctx: &mut ConnContext,
    request: ConnectRequest,
) -> Result<(), LocalError> {
    match ctx.kind {
        Kind::Logs => http(ctx, request, false).await,
        Kind::Metrics => http(ctx, request, true).await,
        Kind::Exec | Kind::Attach => upgrade(ctx, request).await,
    }
}

/// A connection to the kubelet: in-process when edged runs in this process
/// ([`crate::TunnelConfig::kubelet_link`]), else TCP to [`crate::TunnelConfig::local_addr`].
pub(crate) trait KubeletIo: AsyncRead + AsyncWrite + Send + Unpin + 'static {}

impl<T: AsyncRead + AsyncWrite + Send + Unpin + 'static> KubeletIo for T {}

async fn connect(ctx: &ConnContext) -> Result<Box<dyn KubeletIo>, LocalError> {
    let addr = ctx.config.local_addr;
    let failed = |reason: String| LocalError::Connect { addr, reason };
    let timeout = ctx.config.local_connect_timeout;
    let late = |_| failed(format!("no answer within {timeout:?}"));
    if let Some(link) = &ctx.config.kubelet_link {
        let conn = tokio::time::timeout(timeout, link.connect())
            .await
            .map_err(late)?
            .map_err(|e| failed(e.to_string()))?;
        return Ok(Box::new(conn));
    }
    let tcp = tokio::time::timeout(timeout, TcpStream::connect(addr))
        .await
        .map_err(late)?
        .map_err(|e| failed(e.to_string()))?;
    let _ = tcp.set_nodelay(true);
    Ok(Box::new(tcp))
}

/// Logs and metrics: a `GET`, its body back to the cloud.
async fn http(
    ctx: &ConnContext,
    mut request: ConnectRequest,
    lines: bool,
) -> Result<(), LocalError> {
    let target = request.target.clone();
    let failed = |reason: String| LocalError::Http {
        target: target.clone(),
        reason,
    };
    request.set_header("accept-encoding", "identity");
    let host = ctx.config.local_addr.to_string();
    let http_request = request.to_http(&host).map_err(|e| failed(e.to_string()))?;
    let conn = connect(ctx).await?;
    let (mut sender, conn) = hyper::client::conn::http1::Builder::new()
        .title_case_headers(true)
        .handshake(TokioIo::new(conn))
        .await
        .map_err(|e| failed(e.to_string()))?;
    // The connection's driver; it ends when the response body and the sender are dropped.
    let driver = tokio::spawn(async move {
        let _ = conn.await;
    });
    let _abort = AbortOnDrop(driver);
    let response = tokio::select! {
        _ = ctx.cancel.cancelled() => return Ok(()),
        r = sender.send_request(http_request) => r.map_err(|e| failed(e.to_string()))?,
    };
    if !response.status().is_success() {
        tracing::debug!(
            "edgestream: kubelet answered {} to {target}; its body goes to the cloud as edgecore's does",
            response.status()
        );
    }
    let mut body = response.into_body();
    let mut splitter = LineSplitter::default();
    let mut out = BytesMut::new();
    loop {
        let frame = tokio::select! {
            _ = ctx.cancel.cancelled() => return Ok(()),
            frame = body.frame() => frame,
        };
        let data = match frame {
            None => break,
            Some(Err(e)) => return Err(failed(format!("response body: {e}"))),
            Some(Ok(frame)) => match frame.into_data() {
                Ok(data) => data,
                Err(_) => continue, // trailers
            },
        };
        let sent = if lines {
            out.clear();
            splitter.push(&data, &mut out);
            ctx.send_data(&out).await
        } else {
            ctx.send_data(&data).await
        };
        if !sent {
            return Ok(());
        }
    }
    if lines {
        out.clear();
        splitter.finish(&mut out);
        ctx.send_data(&out).await;
    }
    Ok(())
}

struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Go's `bufio.ScanLines` as edgecore's metrics connection uses it, as a byte stream: every
/// line comes out ending in `\n`, without a `\r` before it; a last line without `\n` gets one.
#[derive(Debug, Default)]
pub(crate) struct LineSplitter {
    /// The bytes so far end in `\r` (held back: it is dropped if `\n` follows).
    pending_cr: bool,
    /// Bytes were passed since the last `\n`.
    open_line: bool,
}

impl LineSplitter {
    pub(crate) fn push(&mut self, mut data: &[u8], out: &mut BytesMut) {
        while let Some(i) = data.iter().position(|&b| b == b'\n') {
            let line = &data[..i];
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            if self.pending_cr && !data[..i].is_empty() {
                out.put_u8(b'\r');
            }
            self.pending_cr = false;
            out.put_slice(line);
            out.put_u8(b'\n');
            self.open_line = false;
            data = &data[i + 1..];
        }
        if data.is_empty() {
            return;
        }
        if self.pending_cr {
            out.put_u8(b'\r');
        }
        let (body, cr) = match data.strip_suffix(b"\r") {
            Some(body) => (body, true),
            None => (data, false),
        };
        out.put_slice(body);
        self.pending_cr = cr;
        self.open_line = true;
    }

    pub(crate) fn finish(&mut self, out: &mut BytesMut) {
        if self.open_line {
            out.put_u8(b'\n');
        }
        self.pending_cr = false;
        self.open_line = false;
    }
}

/// An HTTP/1.1 error answer with `why` as its text body, in the kubelet's place (the apiserver
/// passes it on: kubectl prints `error: unable to upgrade connection: edge node: ...`).
pub(crate) fn error_response(status: &str, why: &str) -> Vec<u8> {
    let text = format!("edge node: {why}\n");
    format!(
        "HTTP/1.1 {status}\r\nContent-Type: text/plain; charset=utf-8\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{text}",
        text.len()
    )
    .into_bytes()
}

/// Exec and attach: the request head on a plain connection, then bytes both ways.
async fn upgrade(ctx: &mut ConnContext, request: ConnectRequest) -> Result<(), LocalError> {
    let inbound = ctx.data.take();
    let ctx = &*ctx;
    let target = request.target.clone();
    let failed = |reason: String| LocalError::Pipe {
        target: target.clone(),
        reason,
    };
    let conn = match connect(ctx).await {
        Ok(conn) => conn,
        Err(e) => {
            // CloudCore gives the apiserver whatever comes back as the kubelet's answer: say
            // why in an HTTP error rather than closing without a word.
            ctx.send_data(&error_response("502 Bad Gateway", &e.to_string()))
                .await;
            return Err(e);
        }
    };
    let (mut rd, mut wr) = tokio::io::split(conn);
    let head = request.head_bytes(&ctx.config.local_addr.to_string());
    tokio::time::timeout(ctx.config.write_deadline, wr.write_all(&head))
        .await
        .map_err(|_| failed("the request head was not taken".into()))?
        .map_err(|e| failed(format!("writing the request head: {e}")))?;

    // Kubelet → cloud.
    let up = async {
        let mut buf = vec![0u8; ctx.config.chunk_size.clamp(256, crate::message::MAX_DATA)];
        loop {
            match rd.read(&mut buf).await {
                Ok(0) => return Ok(()),
                Ok(n) => {
                    if !ctx.send_data(&buf[..n]).await {
                        return Ok(());
                    }
                }
                Err(e) => return Err(failed(format!("read: {e}"))),
            }
        }
    };
    // Cloud → kubelet. A failed write is logged and the rest dropped, as edgecore does: the
    // kubelet's side then ends the connection.
    let down = async {
        if let Some(mut rx) = inbound {
            while let Some(bytes) = rx.recv().await {
                if let Err(e) = wr.write_all(&bytes).await {
                    tracing::debug!("edgestream: connection {}: kubelet write: {e}", ctx.id);
                    break;
                }
            }
        }
        std::future::pending::<()>().await
    };
    tokio::select! {
        _ = ctx.cancel.cancelled() => Ok(()),
        r = up => r,
        _ = down => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The body through the splitter, fed in pieces cut at every `cuts` offset.
    fn split(body: &[u8], cuts: &[usize]) -> Vec<u8> {
        let mut s = LineSplitter::default();
        let mut out = BytesMut::new();
        let mut at = 0;
        for &cut in cuts.iter().chain(std::iter::once(&body.len())) {
            s.push(&body[at..cut], &mut out);
            at = cut;
        }
        s.finish(&mut out);
        out.to_vec()
    }

    #[test]
    fn lines_come_out_as_gos_scanner_makes_them() {
        for (body, want) in [
            (&b"a 1\nb 2\n"[..], &b"a 1\nb 2\n"[..]),
            (b"a 1\r\nb 2\r\n", b"a 1\nb 2\n"),
            (b"a 1\nb 2", b"a 1\nb 2\n"),
            (b"a 1\r\nlast\r", b"a 1\nlast\n"),
            (b"x\ry\n", b"x\ry\n"),
            (b"\n\n", b"\n\n"),
            (b"\r", b"\n"),
            (b"", b""),
        ] {
            for cut in 0..=body.len() {
                assert_eq!(
                    split(body, &[cut]),
                    want,
                    "{:?} cut at {cut}",
                    String::from_utf8_lossy(body)
                );
            }
        }
    }

    #[test]
    fn any_cuts_give_the_same_bytes() {
        let body = b"# HELP a x\r\na 1\r\n\r\nb\r\r\nc";
        let want = split(body, &[]);
        assert_eq!(want, b"# HELP a x\na 1\n\nb\r\nc\n");
        for i in 0..body.len() {
            for j in i..body.len() {
                assert_eq!(split(body, &[i, j]), want, "cuts {i} {j}");
            }
        }
    }

    #[test]
    fn error_answers_are_whole_http_responses() {
        let r = String::from_utf8(error_response("502 Bad Gateway", "kubelet down")).unwrap();
        assert_eq!(
            r,
            "HTTP/1.1 502 Bad Gateway\r\nContent-Type: text/plain; charset=utf-8\r\n\
             Content-Length: 24\r\nConnection: close\r\n\r\nedge node: kubelet down\n"
        );
    }
}
