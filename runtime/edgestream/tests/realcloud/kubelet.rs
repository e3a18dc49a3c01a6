//! The test's "kubelet": a plain HTTP/1.1 server on a free loopback port that answers what a
//! kubelet's port answers the tunnel with known content, and records every request it gets.
//!
//! - `GET /containerLogs/{ns}/{pod}/{container}`: [`LOG_TEXT`]; with `follow=true` the same,
//!   then a line `follow line N` every 200 ms (chunked) until the connection is closed;
//! - `GET /stats/summary`: [`SUMMARY`]; `GET /metrics`: [`METRICS`] (CRLF line ends, no final
//!   newline: edgecore's line rule shows in what comes back);
//! - `/exec/...` and `/attach/...` with `Upgrade`: `101 Switching Protocols`, then every byte
//!   read is written back upper-cased; a read containing `bye` makes it close the connection.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;

/// What `/containerLogs` answers.
pub const LOG_TEXT: &str = "first log line\nsecond log line: ünïcode ✓\n";
/// What `/stats/summary` answers.
pub const SUMMARY: &str = "{\n  \"node\": {\"nodeName\": \"edgestream-test\", \"cpu\": {\"usageNanoCores\": 1234}},\n  \"pods\": []\n}\n";
/// What `/metrics` answers.
pub const METRICS: &str = "# TYPE a counter\r\na 1\r\nb 2\r\nc 3";
/// What the tunnel makes of [`METRICS`]: each line ends in `\n`, `\r` dropped, the last line
/// given its newline (edgecore's `bufio.Scanner` lines).
pub const METRICS_AS_RELAYED: &str = "# TYPE a counter\na 1\nb 2\nc 3\n";
/// The kubelet's `101` head.
pub const UPGRADED: &str = "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\nX-Stream-Protocol-Version: v4.channel.k8s.io\r\n\r\n";

/// One request as the kubelet saw it.
#[derive(Debug, Clone)]
pub struct Seen {
    /// Method.
    pub method: String,
    /// Path and query.
    pub target: String,
    /// Header lines, names as sent.
    pub headers: Vec<(String, String)>,
}

impl Seen {
    /// The first value of header `name` (any case).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// What happened at the kubelet.
#[derive(Debug, Default)]
pub struct Record {
    /// Every request.
    pub seen: Mutex<Vec<Seen>>,
    /// `follow=true` logs connections the other side closed.
    pub follows_closed: AtomicUsize,
    /// Upgraded connections the other side closed.
    pub upgrades_closed: AtomicUsize,
}

impl Record {
    /// The requests whose target starts with `prefix`.
    pub fn requests(&self, prefix: &str) -> Vec<Seen> {
        self.seen
            .lock()
            .unwrap()
            .iter()
            .filter(|s| s.target.starts_with(prefix))
            .cloned()
            .collect()
    }
}

/// A running kubelet; stopped (listener closed, connections cut) by [`Kubelet::stop`] or drop.
pub struct Kubelet {
    /// Where it listens.
    pub addr: std::net::SocketAddr,
    /// What it saw.
    pub record: Arc<Record>,
    stop: CancellationToken,
}

impl Kubelet {
    /// Listens on a free loopback port.
    pub async fn start() -> std::io::Result<Kubelet> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let record = Arc::new(Record::default());
        let stop = CancellationToken::new();
        let (r, s) = (record.clone(), stop.clone());
        tokio::spawn(async move {
            loop {
                let conn = tokio::select! {
                    _ = s.cancelled() => return,
                    c = listener.accept() => c,
                };
                if let Ok((tcp, _)) = conn {
                    let (r, s) = (r.clone(), s.clone());
                    tokio::spawn(async move {
                        tokio::select! {
                            _ = s.cancelled() => {}
                            _ = serve(tcp, r) => {}
                        }
                    });
                }
            }
        });
        Ok(Kubelet { addr, record, stop })
    }

    /// Closes the port and every connection.
    pub fn stop(&self) {
        self.stop.cancel();
    }
}

impl Drop for Kubelet {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

async fn serve(mut tcp: TcpStream, record: Arc<Record>) {
    let mut buf = Vec::new();
    let head_len = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        let mut chunk = [0u8; 4096];
        match tcp.read(&mut chunk).await {
            Ok(0) | Err(_) => return,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
        if buf.len() > 64 * 1024 {
            return;
        }
    };
    let mut headers = [httparse::EMPTY_HEADER; 64];
    let mut req = httparse::Request::new(&mut headers);
    if req.parse(&buf[..head_len]).is_err() {
        return;
    }
    let seen = Seen {
        method: req.method.unwrap_or("").to_owned(),
        target: req.path.unwrap_or("").to_owned(),
        headers: req
            .headers
            .iter()
            .map(|h| {
                (
                    h.name.to_owned(),
                    String::from_utf8_lossy(h.value).into_owned(),
                )
            })
            .collect(),
    };
    record.seen.lock().unwrap().push(seen.clone());
    let rest = buf[head_len..].to_vec();
    let path = seen.target.split('?').next().unwrap_or("");
    let query = seen.target.split_once('?').map_or("", |(_, q)| q);
    if path.starts_with("/exec/") || path.starts_with("/attach/") {
        if seen.header("upgrade").is_none() {
            let _ = reply(&mut tcp, "400 Bad Request", "not an upgrade\n").await;
            return;
        }
        echo(tcp, rest, &record).await;
    } else if path.starts_with("/containerLogs/") {
        if query.split('&').any(|kv| kv == "follow=true") {
            follow(tcp, &record).await;
        } else {
            let _ = reply(&mut tcp, "200 OK", LOG_TEXT).await;
        }
    } else if path == "/stats/summary" {
        let _ = reply(&mut tcp, "200 OK", SUMMARY).await;
    } else if path == "/metrics" {
        let _ = reply(&mut tcp, "200 OK", METRICS).await;
    } else {
        let _ = reply(&mut tcp, "404 Not Found", "no such kubelet path\n").await;
    }
}

async fn reply(tcp: &mut TcpStream, status: &str, body: &str) -> std::io::Result<()> {
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    tcp.write_all(head.as_bytes()).await?;
    tcp.write_all(body.as_bytes()).await?;
    tcp.shutdown().await
}

async fn follow(mut tcp: TcpStream, record: &Record) {
    let chunk = |text: &str| format!("{:x}\r\n{text}\r\n", text.len());
    let head = "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\n\r\n";
    if tcp.write_all(head.as_bytes()).await.is_err()
        || tcp.write_all(chunk(LOG_TEXT).as_bytes()).await.is_err()
    {
        return;
    }
    let (mut rd, mut wr) = tcp.into_split();
    let closed = async {
        // The other side closing shows as end of stream on the read half.
        let mut b = [0u8; 64];
        while matches!(rd.read(&mut b).await, Ok(n) if n > 0) {}
    };
    let lines = async {
        for n in 1.. {
            tokio::time::sleep(Duration::from_millis(200)).await;
            if wr
                .write_all(chunk(&format!("follow line {n}\n")).as_bytes())
                .await
                .is_err()
            {
                return;
            }
        }
    };
    tokio::select! {
        _ = closed => {}
        _ = lines => {}
    }
    record.follows_closed.fetch_add(1, Ordering::SeqCst);
}

async fn echo(mut tcp: TcpStream, already: Vec<u8>, record: &Record) {
    if tcp.write_all(UPGRADED.as_bytes()).await.is_err() {
        return;
    }
    let mut pending = already;
    let mut buf = [0u8; 4096];
    loop {
        if !pending.is_empty() {
            let bye = String::from_utf8_lossy(&pending).contains("bye");
            if tcp.write_all(&pending.to_ascii_uppercase()).await.is_err() {
                break;
            }
            pending.clear();
            if bye {
                // The kubelet ends the stream (the command exited).
                let _ = tcp.shutdown().await;
                return;
            }
        }
        match tcp.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => pending.extend_from_slice(&buf[..n]),
        }
    }
    record.upgrades_closed.fetch_add(1, Ordering::SeqCst);
}
