//! A plain HTTP/1.1 client for Kubernetes API servers on loopback (MetaServer, Wedge's or
//! edgecore's): requests with a chunked or sized answer, and watches read event by event on a
//! thread, each line stamped with when it arrived. What it sends is what client-go sends; it
//! exists so tests and benchmarks can time and count without a client library in between.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

/// Reads a chunked or sized HTTP/1.1 body after the head.
fn body(
    reader: &mut BufReader<TcpStream>,
    chunked: bool,
    length: Option<usize>,
) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    if chunked {
        loop {
            let mut size = String::new();
            reader.read_line(&mut size)?;
            let size = usize::from_str_radix(size.trim(), 16).context("bad chunk size")?;
            if size == 0 {
                return Ok(out);
            }
            let mut chunk = vec![0; size + 2];
            reader.read_exact(&mut chunk)?;
            out.extend_from_slice(&chunk[..size]);
        }
    }
    match length {
        Some(n) => {
            out.resize(n, 0);
            reader.read_exact(&mut out)?;
        }
        None => {
            reader.read_to_end(&mut out)?;
        }
    }
    Ok(out)
}

/// The status and headers of an answer (lowercase names).
fn head(reader: &mut BufReader<TcpStream>) -> Result<(u16, Vec<(String, String)>)> {
    let mut line = String::new();
    reader.read_line(&mut line)?;
    let status = line
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .with_context(|| format!("not an HTTP answer: {line:?}"))?;
    let mut headers = Vec::new();
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line)? == 0 || line == "\r\n" {
            break;
        }
        if let Some((k, v)) = line.split_once(':') {
            headers.push((k.trim().to_ascii_lowercase(), v.trim().to_owned()));
        }
    }
    Ok((status, headers))
}

fn send(
    addr: SocketAddr,
    method: &str,
    path: &str,
    accept: &str,
    body: &[u8],
) -> Result<TcpStream> {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(5))?;
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nAccept: {accept}\r\nUser-Agent: wedge-tests\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    stream.write_all(request.as_bytes())?;
    stream.write_all(body)?;
    Ok(stream)
}

/// One request; the status and the body.
pub fn request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    accept: &str,
    payload: &[u8],
) -> Result<(u16, Vec<u8>)> {
    let stream = send(addr, method, path, accept, payload)?;
    stream.set_read_timeout(Some(Duration::from_secs(60)))?;
    let mut reader = BufReader::new(stream);
    let (status, headers) = head(&mut reader)?;
    let get = |name: &str| {
        headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    };
    let chunked = get("transfer-encoding").is_some_and(|v| v.contains("chunked"));
    let length = get("content-length").and_then(|v| v.parse().ok());
    Ok((status, body(&mut reader, chunked, length)?))
}

/// A GET with `Accept: application/json`; the status and the body.
pub fn get(addr: SocketAddr, path: &str) -> Result<(u16, Vec<u8>)> {
    request(addr, "GET", path, "application/json", b"")
}

/// An open watch: its status and its event lines as they arrive.
pub struct Watch {
    /// The HTTP status.
    pub status: u16,
    /// Each event line with the time it was read; ends when the server ends the stream.
    pub lines: mpsc::Receiver<(Instant, String)>,
    stream: TcpStream,
}

impl Watch {
    /// Opens a watch on `path` (which carries `watch=true`).
    pub fn open(addr: SocketAddr, path: &str) -> Result<Watch> {
        let stream = send(addr, "GET", path, "application/json", b"")?;
        let mut reader = BufReader::new(stream.try_clone()?);
        let (status, headers) = head(&mut reader)?;
        let chunked = headers
            .iter()
            .any(|(k, v)| k == "transfer-encoding" && v.contains("chunked"));
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            let mut pending = Vec::new();
            loop {
                let data = if chunked {
                    let mut size = String::new();
                    if reader.read_line(&mut size).unwrap_or(0) == 0 {
                        return;
                    }
                    let Ok(size) = usize::from_str_radix(size.trim(), 16) else {
                        return;
                    };
                    if size == 0 {
                        return;
                    }
                    let mut chunk = vec![0; size + 2];
                    if reader.read_exact(&mut chunk).is_err() {
                        return;
                    }
                    chunk.truncate(size);
                    chunk
                } else {
                    let mut buf = vec![0; 65536];
                    match reader.read(&mut buf) {
                        Ok(0) | Err(_) => return,
                        Ok(n) => {
                            buf.truncate(n);
                            buf
                        }
                    }
                };
                let at = Instant::now();
                pending.extend_from_slice(&data);
                while let Some(end) = pending.iter().position(|b| *b == b'\n') {
                    let line: Vec<u8> = pending.drain(..=end).collect();
                    let text = String::from_utf8_lossy(&line).trim().to_owned();
                    if !text.is_empty() && tx.send((at, text)).is_err() {
                        return;
                    }
                }
            }
        });
        Ok(Watch {
            status,
            lines,
            stream,
        })
    }

    /// Waits up to `within` for a line that `want` accepts; when it arrived and the line.
    pub fn until(
        &self,
        within: Duration,
        want: impl Fn(&str) -> bool,
    ) -> Result<(Instant, String)> {
        let deadline = Instant::now() + within;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok((at, line)) if want(&line) => return Ok((at, line)),
                Ok(_) => {}
                Err(mpsc::RecvTimeoutError::Timeout) => bail!("no such event within {within:?}"),
                Err(mpsc::RecvTimeoutError::Disconnected) => bail!("the watch ended"),
            }
        }
    }

    /// Stops reading: the connection is shut down.
    pub fn close(self) {
        let _ = self.stream.shutdown(std::net::Shutdown::Both);
    }
}
