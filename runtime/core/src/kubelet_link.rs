//! The in-process connection from edgeStream to edged's kubelet server.
//!
//! edgecore's edgeStream replays the cloud's `kubectl logs/exec/attach` requests to edged over
//! TCP (`127.0.0.1:10350`, the kubelet read-only port), so that port has to serve exec and
//! attach with no credentials, and any local user who reaches it runs commands as root in the
//! node's containers. Here both ends live in one process: edgeStream opens an in-memory
//! byte stream ([`KubeletLink::connect`]) and edged serves HTTP on it
//! ([`KubeletListener::accept`]) exactly as it would on a socket, so the TCP port only needs
//! what a kubelet's read-only port serves.
//!
//! The backlog is bounded: when edged takes no new connection, [`KubeletLink::connect`] waits
//! (the caller bounds the wait with its own connect timeout) rather than queueing without end.

use std::sync::Arc;

use tokio::io::DuplexStream;
use tokio::sync::{Mutex, mpsc};

/// Bytes in flight each way on one in-process connection before the writer waits: enough
/// for a 32 KiB tunnel chunk and its HTTP framing, small enough that a slow reader holds
/// little.
pub const LINK_BUFFER: usize = 64 * 1024;

/// One in-process connection, as either end sees it.
pub type KubeletConnection = DuplexStream;

/// Why a connection could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum LinkError {
    /// No kubelet server takes connections: edged is disabled, or has stopped for good.
    #[error("edged's kubelet server is not running on this node")]
    Closed,
}

/// The dialling end, held by edgeStream. Cheap to clone.
#[derive(Debug, Clone)]
pub struct KubeletLink {
    tx: mpsc::Sender<KubeletConnection>,
}

impl KubeletLink {
    /// Opens a connection to the kubelet server; waits while its backlog is full.
    pub async fn connect(&self) -> Result<KubeletConnection, LinkError> {
        let (ours, theirs) = tokio::io::duplex(LINK_BUFFER);
        self.tx.send(theirs).await.map_err(|_| LinkError::Closed)?;
        Ok(ours)
    }
}

/// The accepting end, held by edged. Clones share one queue, so a restarted edged picks up
/// where the previous incarnation stopped (only one accepts at a time).
#[derive(Debug, Clone)]
pub struct KubeletListener {
    rx: Arc<Mutex<mpsc::Receiver<KubeletConnection>>>,
}

impl KubeletListener {
    /// The next connection; `None` once every [`KubeletLink`] is gone.
    pub async fn accept(&self) -> Option<KubeletConnection> {
        self.rx.lock().await.recv().await
    }
}

/// A link and its listener, with at most `backlog` connections opened but not yet accepted.
pub fn kubelet_link(backlog: usize) -> (KubeletLink, KubeletListener) {
    let (tx, rx) = mpsc::channel(backlog.max(1));
    (
        KubeletLink { tx },
        KubeletListener {
            rx: Arc::new(Mutex::new(rx)),
        },
    )
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    #[tokio::test]
    async fn bytes_cross_both_ways() {
        let (link, listener) = kubelet_link(4);
        let server = tokio::spawn(async move {
            let mut conn = listener.accept().await.expect("a connection");
            let mut buf = [0u8; 4];
            conn.read_exact(&mut buf).await.expect("read");
            conn.write_all(b"pong").await.expect("write");
            buf
        });
        let mut conn = link.connect().await.expect("connect");
        conn.write_all(b"ping").await.expect("write");
        let mut answer = [0u8; 4];
        conn.read_exact(&mut answer).await.expect("read");
        assert_eq!(&answer, b"pong");
        assert_eq!(&server.await.expect("server"), b"ping");
    }

    #[tokio::test]
    async fn a_link_without_a_listener_says_so() {
        let (link, listener) = kubelet_link(1);
        drop(listener);
        let err = link.connect().await.expect_err("no listener");
        assert!(err.to_string().contains("not running"), "{err}");
    }

    #[tokio::test]
    async fn a_full_backlog_makes_the_dialler_wait() {
        let (link, listener) = kubelet_link(1);
        let _first = link.connect().await.expect("first");
        let second = tokio::time::timeout(std::time::Duration::from_millis(50), link.connect());
        assert!(second.await.is_err(), "the second connect waits");
        assert!(listener.accept().await.is_some());
        let _third = link.connect().await.expect("room again");
    }
}
