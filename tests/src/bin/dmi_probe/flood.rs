//! Row 7: many raw HTTP/2 connections, each announcing one huge DATA frame.
//!
//! Each connection sends what a gRPC client sends to start a `ReportDeviceStatus` (the client
//! preface, an empty SETTINGS frame, a HEADERS frame with the request's headers as HPACK
//! literals without indexing), then a DATA frame header on the same stream announcing
//! `--frame-mib` MiB (at most HTTP/2's 2^24-1 bytes) with a gRPC message prefix announcing a
//! message as long, followed by up to 1 MiB of that frame, and stays open. A server that
//! buffers a frame (or a gRPC message) by its announced length before reading it holds that
//! much per connection; one that bounds frames closes the connection (GOAWAY FRAME_SIZE_ERROR,
//! or an EOF). The node's RSS is read before, 3 s after, and 5 s after closing them all.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Result;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixStream;
use tokio::net::unix::OwnedWriteHalf;
use tokio::task::JoinSet;

/// The client connection preface (RFC 9113 §3.4).
const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
const DATA: u8 = 0x0;
const HEADERS: u8 = 0x1;
const SETTINGS: u8 = 0x4;
const GOAWAY: u8 = 0x7;
const END_HEADERS: u8 = 0x4;
/// Largest length a frame header can carry (24 bits).
const MAX_FRAME_LENGTH: usize = 0xFF_FFFF;
/// How much of the announced frame is actually sent.
const SENT_PAYLOAD: usize = 1 << 20;
/// How long connecting, and then writing, may take per connection.
const IO_WAIT: Duration = Duration::from_secs(5);

/// What to flood.
pub struct Flood {
    /// The node's DMI socket.
    pub socket: PathBuf,
    /// Connections to open.
    pub connections: usize,
    /// Announced DATA frame length, in MiB.
    pub frame_mib: usize,
    /// The node's pid, for its RSS.
    pub pid: Option<u32>,
}

/// What one connection saw, kept up to date by its reader task.
#[derive(Default)]
struct Seen {
    /// Bytes the node sent.
    received: Vec<u8>,
    /// The node closed the connection (EOF) or it failed (reset).
    closed: Option<String>,
}

/// One connection of the flood.
struct Conn {
    /// `Err`: it could not be opened.
    writer: Result<OwnedWriteHalf, String>,
    /// Bytes of the request written before the node stopped taking them.
    written: usize,
    /// The write ended with an error (the node closed the connection).
    write_error: Option<String>,
    seen: Arc<Mutex<Seen>>,
}

/// An HTTP/2 frame header.
fn frame_header(length: usize, kind: u8, flags: u8, stream: u32) -> Vec<u8> {
    let length = length.min(MAX_FRAME_LENGTH);
    let mut out = Vec::with_capacity(9);
    out.extend_from_slice(&[(length >> 16) as u8, (length >> 8) as u8, length as u8]);
    out.push(kind);
    out.push(flags);
    out.extend_from_slice(&(stream & 0x7FFF_FFFF).to_be_bytes());
    out
}

/// The request's header block: each header a literal without indexing, new name, no Huffman
/// (RFC 7541 §6.2.2); every name and value here is shorter than 127 bytes.
fn header_block() -> Vec<u8> {
    let headers: [(&str, &str); 6] = [
        (":method", "POST"),
        (":scheme", "http"),
        (":path", "/v1beta1.DeviceManagerService/ReportDeviceStatus"),
        (":authority", "localhost"),
        ("content-type", "application/grpc"),
        ("te", "trailers"),
    ];
    let mut block = Vec::new();
    for (name, value) in headers {
        block.push(0x00);
        block.push(name.len() as u8);
        block.extend_from_slice(name.as_bytes());
        block.push(value.len() as u8);
        block.extend_from_slice(value.as_bytes());
    }
    block
}

/// Everything one connection writes: preface, SETTINGS, HEADERS, the DATA frame header
/// announcing `frame` bytes, a gRPC prefix announcing a message filling it, and the first
/// [`SENT_PAYLOAD`] bytes of the frame.
fn request_bytes(frame: usize) -> Vec<u8> {
    let frame = frame.min(MAX_FRAME_LENGTH);
    let block = header_block();
    let mut out = PREFACE.to_vec();
    out.extend(frame_header(0, SETTINGS, 0, 0));
    out.extend(frame_header(block.len(), HEADERS, END_HEADERS, 1));
    out.extend(block);
    out.extend(frame_header(frame, DATA, 0, 1));
    // The gRPC length-prefixed message: not compressed, then its 4-byte length.
    let message = u32::try_from(frame.saturating_sub(5)).unwrap_or(u32::MAX);
    out.push(0);
    out.extend_from_slice(&message.to_be_bytes());
    let sent = frame.min(SENT_PAYLOAD).saturating_sub(5);
    out.resize(out.len() + sent, 0x42);
    out
}

/// `VmRSS` of `pid` in KiB.
pub fn rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// The node's RSS as text.
fn rss(pid: Option<u32>) -> String {
    match pid {
        None => "n/a (no --pid)".to_owned(),
        Some(pid) => rss_kib(pid).map_or_else(
            || format!("? (cannot read /proc/{pid}/status)"),
            |k| format!("{:.1} MiB", k as f64 / 1024.0),
        ),
    }
}

/// The error codes of the GOAWAY frames in what the node sent.
fn goaways(received: &[u8]) -> Vec<u32> {
    let mut codes = Vec::new();
    let mut rest = received;
    while rest.len() >= 9 {
        let length =
            (usize::from(rest[0]) << 16) | (usize::from(rest[1]) << 8) | usize::from(rest[2]);
        let kind = rest[3];
        let Some(payload) = rest.get(9..9 + length) else {
            break;
        };
        if kind == GOAWAY
            && let Some(code) = payload.get(4..8).and_then(|c| c.try_into().ok())
        {
            codes.push(u32::from_be_bytes(code));
        }
        rest = &rest[9 + length..];
    }
    codes
}

/// Opens one connection, starts reading what the node sends, and writes `bytes` (for at most
/// [`IO_WAIT`]).
async fn open(socket: PathBuf, bytes: Arc<Vec<u8>>) -> Conn {
    let seen = Arc::new(Mutex::new(Seen::default()));
    let stream = match tokio::time::timeout(IO_WAIT, UnixStream::connect(&socket)).await {
        Ok(Ok(stream)) => stream,
        Ok(Err(e)) => {
            return Conn {
                writer: Err(e.to_string()),
                written: 0,
                write_error: None,
                seen,
            };
        }
        Err(_) => {
            return Conn {
                writer: Err("connect timeout".to_owned()),
                written: 0,
                write_error: None,
                seen,
            };
        }
    };
    let (mut reader, mut writer) = stream.into_split();
    let record = seen.clone();
    tokio::spawn(async move {
        let mut buf = vec![0u8; 16 * 1024];
        loop {
            let read = reader.read(&mut buf).await;
            let mut seen = record.lock().unwrap_or_else(|e| e.into_inner());
            match read {
                Ok(0) => {
                    seen.closed = Some("EOF".to_owned());
                    return;
                }
                Ok(n) => {
                    // Keep the start: GOAWAY comes early, and the memory is bounded.
                    if seen.received.len() < 1 << 20 {
                        seen.received.extend_from_slice(&buf[..n]);
                    }
                }
                Err(e) => {
                    seen.closed = Some(e.to_string());
                    return;
                }
            }
        }
    });
    let mut written = 0;
    let mut write_error = None;
    let deadline = tokio::time::Instant::now() + IO_WAIT;
    while written < bytes.len() {
        match tokio::time::timeout_at(deadline, writer.write(&bytes[written..])).await {
            Ok(Ok(0)) => break,
            Ok(Ok(n)) => written += n,
            Ok(Err(e)) => {
                write_error = Some(e.to_string());
                break;
            }
            // The node stopped reading: the rest stays unsent, the connection open.
            Err(_) => break,
        }
    }
    Conn {
        writer: Ok(writer),
        written,
        write_error,
        seen,
    }
}

/// Counts of `items` as `text×n, …`.
fn tally(items: impl IntoIterator<Item = String>) -> String {
    let mut counts = std::collections::BTreeMap::<String, usize>::new();
    for item in items {
        *counts.entry(item).or_default() += 1;
    }
    counts
        .iter()
        .map(|(text, n)| format!("{text}×{n}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Runs the flood; the row's result text.
pub async fn run(flood: &Flood) -> Result<String> {
    let frame = flood
        .frame_mib
        .saturating_mul(1 << 20)
        .min(MAX_FRAME_LENGTH);
    let bytes = Arc::new(request_bytes(frame));
    let before = rss(flood.pid);
    let mut opening = JoinSet::new();
    for _ in 0..flood.connections {
        opening.spawn(open(flood.socket.clone(), bytes.clone()));
    }
    let mut conns = Vec::with_capacity(flood.connections);
    while let Some(conn) = opening.join_next().await {
        if let Ok(conn) = conn {
            conns.push(conn);
        }
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    let after = rss(flood.pid);

    let n = flood.connections;
    let connect_errors: Vec<String> = conns
        .iter()
        .filter_map(|c| c.writer.as_ref().err().cloned())
        .collect();
    let mut open_now = 0;
    let mut closed = Vec::new();
    let mut goaway_codes = Vec::new();
    let mut stalled = 0;
    let mut written = Vec::new();
    for conn in conns.iter().filter(|c| c.writer.is_ok()) {
        let seen = conn.seen.lock().unwrap_or_else(|e| e.into_inner());
        goaway_codes.extend(goaways(&seen.received).into_iter().map(goaway_name));
        written.push(conn.written);
        if conn.written < bytes.len() && conn.write_error.is_none() {
            stalled += 1;
        }
        match (&seen.closed, &conn.write_error) {
            (None, None) => open_now += 1,
            (Some(why), _) => closed.push(why.clone()),
            (None, Some(why)) => closed.push(format!("write: {why}")),
        }
    }
    let max_written = written.iter().copied().max().unwrap_or(0);
    let mut text = format!(
        "announced {:.1} MiB DATA frames; RSS before {before}, after {after}, connections still \
         open {open_now} of {n}",
        frame as f64 / f64::from(1 << 20)
    );
    if !connect_errors.is_empty() {
        text.push_str(&format!("; connect failed: {}", tally(connect_errors)));
    }
    if !closed.is_empty() {
        text.push_str(&format!("; closed by the node: {}", tally(closed)));
    }
    if !goaway_codes.is_empty() {
        text.push_str(&format!("; GOAWAY: {}", tally(goaway_codes)));
    }
    if !written.is_empty() {
        text.push_str(&format!(
            "; the node took up to {:.2} MiB of {:.2} MiB sent per connection ({stalled} stalled)",
            max_written as f64 / f64::from(1 << 20),
            bytes.len() as f64 / f64::from(1 << 20)
        ));
    }
    drop(conns);
    tokio::time::sleep(Duration::from_secs(5)).await;
    text.push_str(&format!("; 5 s after closing them: RSS {}", rss(flood.pid)));
    Ok(text)
}

/// An HTTP/2 error code's name (RFC 9113 §7).
fn goaway_name(code: u32) -> String {
    let name = match code {
        0x0 => "NO_ERROR",
        0x1 => "PROTOCOL_ERROR",
        0x2 => "INTERNAL_ERROR",
        0x3 => "FLOW_CONTROL_ERROR",
        0x4 => "SETTINGS_TIMEOUT",
        0x5 => "STREAM_CLOSED",
        0x6 => "FRAME_SIZE_ERROR",
        0x7 => "REFUSED_STREAM",
        0x8 => "CANCEL",
        0x9 => "COMPRESSION_ERROR",
        0xa => "CONNECT_ERROR",
        0xb => "ENHANCE_YOUR_CALM",
        0xc => "INADEQUATE_SECURITY",
        0xd => "HTTP_1_1_REQUIRED",
        _ => return format!("0x{code:x}"),
    };
    name.to_owned()
}

/// Whether `socket` accepts a connection from this process, and what the node does with it
/// in the first second: the result text of row 1's connect part.
pub async fn try_connect(socket: &Path) -> String {
    let stream = match tokio::time::timeout(IO_WAIT, UnixStream::connect(socket)).await {
        Err(_) => return "connect: timeout".to_owned(),
        Ok(Err(e)) => return format!("connect: refused ({e})"),
        Ok(Ok(stream)) => stream,
    };
    let mut stream = stream;
    let mut buf = [0u8; 1024];
    match tokio::time::timeout(Duration::from_secs(1), stream.read(&mut buf)).await {
        Err(_) => "connect: ok (held open)".to_owned(),
        Ok(Ok(0)) => "connect: ok, then closed by the node at once (EOF)".to_owned(),
        Ok(Ok(n)) => format!("connect: ok (the node sent {n} bytes)"),
        Ok(Err(e)) => format!("connect: ok, then {e}"),
    }
}
