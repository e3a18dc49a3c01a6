//! The one HTTP/1.1 exchange a bootstrap step needs: send a GET with a body over an established
//! (TLS) stream, read one response. Two requests in a node's life do not justify an HTTP client
//! stack; `httparse` reads the response head, and the body is taken by `Content-Length`,
//! chunked encoding or end of stream.

use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWrite, AsyncWriteExt as _};

/// The most a response may hold (a certificate is a few KiB).
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
    let mut req = format!("GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n");
    for (name, value) in headers {
        if value.contains(['\r', '\n']) {
            return Err(format!("header {name} holds a line break"));
        }
        req.push_str(&format!("{name}: {value}\r\n"));
    }
    if !body.is_empty() {
        req.push_str(&format!("Content-Length: {}\r\n", body.len()));
    }
    req.push_str("\r\n");
    let mut bytes = req.into_bytes();
    bytes.extend_from_slice(body);
    stream
        .write_all(&bytes)
        .await
        .map_err(|e| format!("sending request: {e}"))?;
    stream
        .flush()
        .await
        .map_err(|e| format!("sending request: {e}"))?;

    let mut buf = Vec::with_capacity(4096);
    let mut chunk = [0u8; 4096];
    loop {
        let n = match stream.read(&mut chunk).await {
            Ok(n) => n,
            // A peer that closes without TLS close_notify: judge what we have.
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => 0,
            Err(e) => return Err(format!("reading response: {e}")),
        };
        buf.extend_from_slice(&chunk[..n]);
        if buf.len() > MAX_RESPONSE {
            return Err(format!("response larger than {MAX_RESPONSE} bytes"));
        }
        let eof = n == 0;
        if let Some(response) = parse(&buf, eof)? {
            return Ok(response);
        }
        if eof {
            return Err("connection closed before a complete response".to_owned());
        }
    }
}

/// Parses a complete response from `buf`; `None` when more bytes are needed.
fn parse(buf: &[u8], eof: bool) -> Result<Option<Response>, String> {
    let mut headers = [httparse::EMPTY_HEADER; 64];
    let mut head = httparse::Response::new(&mut headers);
    let start = match head.parse(buf) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(e) => return Err(format!("malformed response: {e}")),
    };
    let status = head.code.unwrap_or_default();
    let header = |name: &str| {
        head.headers
            .iter()
            .find(|h| h.name.eq_ignore_ascii_case(name))
            .map(|h| String::from_utf8_lossy(h.value).trim().to_owned())
    };
    let rest = &buf[start..];
    if header("transfer-encoding").is_some_and(|te| te.eq_ignore_ascii_case("chunked")) {
        return dechunk(rest).map(|body| body.map(|body| Response { status, body }));
    }
    if let Some(len) = header("content-length") {
        let len: usize = len
            .parse()
            .map_err(|_| format!("bad Content-Length {len:?}"))?;
        return Ok((rest.len() >= len).then(|| Response {
            status,
            body: rest[..len].to_vec(),
        }));
    }
    Ok(eof.then(|| Response {
        status,
        body: rest.to_vec(),
    }))
}

/// Decodes a chunked body; `None` until the last chunk has arrived.
fn dechunk(mut rest: &[u8]) -> Result<Option<Vec<u8>>, String> {
    let mut body = Vec::new();
    loop {
        let Some(eol) = rest.windows(2).position(|w| w == b"\r\n") else {
            return Ok(None);
        };
        let line = String::from_utf8_lossy(&rest[..eol]);
        let size_text = line.split(';').next().unwrap_or_default().trim();
        let size = usize::from_str_radix(size_text, 16)
            .map_err(|_| format!("bad chunk size {size_text:?}"))?;
        rest = &rest[eol + 2..];
        if size == 0 {
            return Ok(Some(body));
        }
        if rest.len() < size + 2 {
            return Ok(None);
        }
        body.extend_from_slice(&rest[..size]);
        rest = &rest[size + 2..];
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_length_chunked_and_eof_bodies() {
        let r = parse(b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nabcdef", false)
            .unwrap()
            .unwrap();
        assert_eq!((r.status, r.body.as_slice()), (200, &b"abc"[..]));
        assert!(
            parse(b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nab", false)
                .unwrap()
                .is_none()
        );
        let chunked = b"HTTP/1.1 401 Unauthorized\r\nTransfer-Encoding: chunked\r\n\r\n4\r\nbad \r\n5;x=1\r\ntoken\r\n0\r\n\r\n";
        let r = parse(chunked, false).unwrap().unwrap();
        assert_eq!((r.status, r.body.as_slice()), (401, &b"bad token"[..]));
        assert!(parse(&chunked[..60], false).unwrap().is_none());
        assert!(
            parse(b"HTTP/1.1 200 OK\r\n\r\nall", false)
                .unwrap()
                .is_none()
        );
        let r = parse(b"HTTP/1.1 200 OK\r\n\r\nall", true).unwrap().unwrap();
        assert_eq!(r.body, b"all");
        assert_eq!(
            parse(b"HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n", false).unwrap_err(),
            "bad Content-Length \"x\""
        );
        assert!(parse(b"SMTP ready\r\n\r\n", false).is_err());
    }
}
