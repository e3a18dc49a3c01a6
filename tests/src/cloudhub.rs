//! A cloud-hub simulator: the cloud side of KubeEdge's edge link (spec §2) over real TLS
//! WebSockets with mutual TLS, plus the bootstrap HTTPS endpoints `/ca.crt` and `/edge.crt`.
//!
//! It answers nothing on its own except what cloudcore does by protocol: it drops a session
//! that sends no keepalive within the keepalive timeout, and resends messages sent with
//! [`CloudHub::send_acked`] until the node ACKs them. Everything is recorded so tests can check
//! what the node said and when.

mod ca;
mod http;
mod tls;
mod ws;

use std::net::{SocketAddr, TcpListener};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use tokio::sync::mpsc;
use wedge_core::Message;

pub use ca::{CloudCa, IssuedCert, Issuing};

/// How the simulator behaves.
#[derive(Debug, Clone)]
pub struct CloudHubOptions {
    /// A session without a keepalive for this long is closed (cloudcore: 30 s).
    pub keepalive_timeout: Duration,
    /// Period between resends of an unACKed [`CloudHub::send_acked`] message (cloudcore: 5 s).
    pub ack_resend_period: Duration,
    /// How many times an unACKed message is re-sent after the first send (cloudcore: 4).
    pub ack_max_resends: u32,
    /// When set, a client certificate must carry CN `system:node:<node_id header>`.
    pub require_node_cn: bool,
    /// How `/edge.crt` issues certificates (short-lived ones, another CN).
    pub issuing: Issuing,
    /// The bootstrap HTTPS endpoint presents a certificate from another CA than the one it
    /// serves at `/ca.crt`, as an impostor would.
    pub foreign_bootstrap_cert: bool,
    /// Answer every device message (twin `edge_updated`, state updates) as CloudCore's device
    /// controller does: a `response` from `devicecontroller`, group `twin`, content `"OK"`,
    /// whose `parent_msg_id` is the message's id.
    pub answer_device_messages: bool,
}

impl Default for CloudHubOptions {
    fn default() -> Self {
        CloudHubOptions {
            keepalive_timeout: Duration::from_secs(30),
            ack_resend_period: Duration::from_secs(5),
            ack_max_resends: 4,
            require_node_cn: false,
            issuing: Issuing::default(),
            foreign_bootstrap_cert: false,
            answer_device_messages: true,
        }
    }
}

/// One message the node sent.
#[derive(Debug, Clone)]
pub struct RecordedMessage {
    /// The parsed envelope, or `None` when the text was not a message.
    pub message: Option<Message>,
    /// The frame's text as received.
    pub raw: String,
    /// When it arrived.
    pub at: Instant,
}

/// One accepted WebSocket session.
#[derive(Debug, Clone)]
pub struct Connection {
    /// The `node_id` header.
    pub node: String,
    /// The client certificate's common name.
    pub cn: String,
    /// The client certificate's SHA-256 fingerprint (hex of its DER), to tell certificates
    /// with the same CN apart.
    pub cert_sha256: String,
    /// The request path.
    pub path: String,
    /// When the handshake finished.
    pub opened: Instant,
    /// When the session ended, if it has.
    pub closed: Option<Instant>,
}

/// One message the simulator wrote to the node.
#[derive(Debug, Clone)]
pub struct SentMessage {
    /// The message.
    pub message: Message,
    /// When it was written (resends are recorded once per write).
    pub at: Instant,
}

#[derive(Default)]
struct Record {
    received: Vec<RecordedMessage>,
    sent: Vec<SentMessage>,
    connections: Vec<Connection>,
    rejections: Vec<String>,
    acked: Vec<String>,
    bootstrap: Vec<String>,
}

/// What the open session writes to the node.
enum Outgoing {
    /// A message, written as cloudcore writes one and recorded in `sent` (boxed: the channel
    /// carries raw text too, and a message is ten times its size).
    Message(Box<Message>),
    /// Text written verbatim as one text frame (for malformed-frame tests); not recorded in
    /// `sent`, which holds messages only.
    Raw(String),
}

struct Shared {
    record: Mutex<Record>,
    changed: Condvar,
    session: Mutex<Option<mpsc::UnboundedSender<Outgoing>>>,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Record> {
        self.record.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn update(&self, f: impl FnOnce(&mut Record)) {
        f(&mut self.lock());
        self.changed.notify_all();
    }
}

/// A running simulator; stops its listeners and sessions when dropped.
pub struct CloudHub {
    ca: Arc<CloudCa>,
    options: CloudHubOptions,
    shared: Arc<Shared>,
    ws_addr: SocketAddr,
    https_addr: SocketAddr,
    rt: Option<tokio::runtime::Runtime>,
}

impl CloudHub {
    /// Starts on two free loopback ports (WebSocket and bootstrap HTTPS) with a fresh CA.
    pub fn start(options: CloudHubOptions) -> Result<CloudHub> {
        let ca = Arc::new(CloudCa::new()?);
        let mut hub = CloudHub {
            ca,
            options,
            shared: Arc::new(Shared {
                record: Mutex::new(Record::default()),
                changed: Condvar::new(),
                session: Mutex::new(None),
            }),
            ws_addr: SocketAddr::from(([127, 0, 0, 1], 0)),
            https_addr: SocketAddr::from(([127, 0, 0, 1], 0)),
            rt: None,
        };
        hub.listen()?;
        Ok(hub)
    }

    fn listen(&mut self) -> Result<()> {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()?;
        let ws = bind(self.ws_addr)?;
        let https = bind(self.https_addr)?;
        self.ws_addr = ws.local_addr()?;
        self.https_addr = https.local_addr()?;
        let server = self.ca.server_cert(&["127.0.0.1", "localhost"])?;
        let ws_tls = tls::server_config(&self.ca, &server, true)?;
        let https_tls = if self.options.foreign_bootstrap_cert {
            let impostor = CloudCa::new()?.server_cert(&["127.0.0.1", "localhost"])?;
            tls::server_config(&self.ca, &impostor, false)?
        } else {
            tls::server_config(&self.ca, &server, false)?
        };
        let _guard = rt.enter();
        let ws = tokio::net::TcpListener::from_std(ws)?;
        let https = tokio::net::TcpListener::from_std(https)?;
        rt.spawn(ws::serve(
            ws,
            ws_tls,
            self.shared.clone(),
            self.options.clone(),
        ));
        rt.spawn(http::serve(
            https,
            https_tls,
            self.ca.clone(),
            self.shared.clone(),
            self.options.issuing.clone(),
        ));
        self.rt = Some(rt);
        Ok(())
    }

    /// The CA behind every certificate the simulator uses or issues.
    pub fn ca(&self) -> &CloudCa {
        &self.ca
    }

    /// The WebSocket address (`websocket.server` in edgecore.yaml is its `ip:port`).
    pub fn ws_addr(&self) -> SocketAddr {
        self.ws_addr
    }

    /// The bootstrap HTTPS address (`httpServer` is `https://<this>`).
    pub fn https_addr(&self) -> SocketAddr {
        self.https_addr
    }

    /// Writes `msg` to the connected node once.
    pub fn send(&self, msg: Message) -> Result<()> {
        self.write(Outgoing::Message(Box::new(msg)))
    }

    /// Writes `text` verbatim as one text frame to the connected node: how tests send what no
    /// [`Message`] can express (not JSON, no `header`, oversize). Not recorded in
    /// [`CloudHub::sent`].
    pub fn send_raw(&self, text: impl Into<String>) -> Result<()> {
        self.write(Outgoing::Raw(text.into()))
    }

    fn write(&self, out: Outgoing) -> Result<()> {
        let session = self
            .shared
            .session
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let tx = session.as_ref().context("no node is connected")?;
        tx.send(out).ok().context("the node's session has ended")
    }

    /// Writes `msg` and re-sends it every `ack_resend_period` (at most `ack_max_resends` times)
    /// until the node answers with op `response` and `parent_msg_id` = its id.
    pub fn send_acked(&self, msg: Message) -> Result<()> {
        self.send(msg.clone())?;
        let rt = self.rt.as_ref().context("the simulator is stopped")?;
        let shared = self.shared.clone();
        let period = self.options.ack_resend_period;
        let max = self.options.ack_max_resends;
        rt.spawn(async move {
            for _ in 0..max {
                tokio::time::sleep(period).await;
                if shared.lock().acked.contains(&msg.header.id) {
                    return;
                }
                let session = shared
                    .session
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .clone();
                if let Some(tx) = session {
                    let _ = tx.send(Outgoing::Message(Box::new(msg.clone())));
                }
            }
        });
        Ok(())
    }

    /// Waits until a received message satisfies `predicate`; returns the first that does.
    pub fn wait_for(
        &self,
        predicate: impl Fn(&RecordedMessage) -> bool,
        timeout: Duration,
    ) -> Result<RecordedMessage> {
        let deadline = Instant::now() + timeout;
        let mut record = self.shared.lock();
        loop {
            if let Some(found) = record.received.iter().find(|m| predicate(m)) {
                return Ok(found.clone());
            }
            let now = Instant::now();
            if now >= deadline {
                bail!(
                    "no matching message from the node within {timeout:?}; received:\n{}",
                    record
                        .received
                        .iter()
                        .map(|m| m.raw.trim_end())
                        .collect::<Vec<_>>()
                        .join("\n")
                );
            }
            record = self
                .shared
                .changed
                .wait_timeout(record, deadline - now)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }

    /// Waits until at least `count` distinct `msg_id`s among received messages satisfy
    /// `predicate`; returns how many there are. Each message is looked at once, however long
    /// the wait, so it stays cheap with hundreds of thousands of messages (load generators).
    pub fn wait_for_distinct(
        &self,
        predicate: impl Fn(&Message) -> bool,
        count: usize,
        timeout: Duration,
    ) -> Result<usize> {
        let deadline = Instant::now() + timeout;
        let mut ids = std::collections::HashSet::new();
        let mut scanned = 0;
        let mut record = self.shared.lock();
        loop {
            for m in record.received[scanned..]
                .iter()
                .filter_map(|m| m.message.as_ref())
            {
                if predicate(m) {
                    ids.insert(m.header.id.clone());
                }
            }
            scanned = record.received.len();
            if ids.len() >= count {
                return Ok(ids.len());
            }
            let now = Instant::now();
            if now >= deadline {
                bail!(
                    "{} of {count} distinct messages from the node within {timeout:?}",
                    ids.len()
                );
            }
            record = self
                .shared
                .changed
                .wait_timeout(record, deadline - now)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }

    /// Waits until a node is connected (a session is open).
    pub fn wait_connected(&self, timeout: Duration) -> Result<Connection> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(c) = self
                .connections()
                .into_iter()
                .rev()
                .find(|c| c.closed.is_none())
            {
                return Ok(c);
            }
            if Instant::now() >= deadline {
                bail!(
                    "no node connected within {timeout:?}; refused: {:?}",
                    self.rejections()
                );
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Every message the node sent, in arrival order.
    pub fn received(&self) -> Vec<RecordedMessage> {
        self.shared.lock().received.clone()
    }

    /// Every write to the node, resends included.
    pub fn sent(&self) -> Vec<SentMessage> {
        self.shared.lock().sent.clone()
    }

    /// Every accepted session.
    pub fn connections(&self) -> Vec<Connection> {
        self.shared.lock().connections.clone()
    }

    /// Why each refused connection attempt was refused.
    pub fn rejections(&self) -> Vec<String> {
        self.shared.lock().rejections.clone()
    }

    /// Ids of sent messages the node ACKed.
    pub fn acked(&self) -> Vec<String> {
        self.shared.lock().acked.clone()
    }

    /// One line per `/ca.crt` and `/edge.crt` request: `<path> <status>`.
    pub fn bootstrap_requests(&self) -> Vec<String> {
        self.shared.lock().bootstrap.clone()
    }

    /// How many received messages carry each `msg_id` (for duplicate checks).
    pub fn dedup_count_by_msg_id(&self) -> std::collections::BTreeMap<String, usize> {
        let mut counts = std::collections::BTreeMap::new();
        for m in self.shared.lock().received.iter() {
            if let Some(msg) = &m.message {
                *counts.entry(msg.header.id.clone()).or_insert(0) += 1;
            }
        }
        counts
    }

    /// Closes the listeners and every session; the ports are kept for [`CloudHub::restart`].
    pub fn stop(&mut self) {
        if let Some(rt) = self.rt.take() {
            rt.shutdown_background();
        }
        *self
            .shared
            .session
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = None;
        let now = Instant::now();
        self.shared.update(|r| {
            for c in r.connections.iter_mut().filter(|c| c.closed.is_none()) {
                c.closed = Some(now);
            }
        });
    }

    /// Listens again on the same two ports, with the same CA and records.
    pub fn restart(&mut self) -> Result<()> {
        self.stop();
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            match self.listen() {
                Ok(()) => return Ok(()),
                Err(e) if Instant::now() < deadline => {
                    let _ = e;
                    std::thread::sleep(Duration::from_millis(50));
                }
                Err(e) => return Err(e.context("cannot listen on the same ports again")),
            }
        }
    }
}

impl Drop for CloudHub {
    fn drop(&mut self) {
        self.stop();
    }
}

fn bind(addr: SocketAddr) -> Result<TcpListener> {
    let listener = TcpListener::bind(addr).with_context(|| format!("cannot listen on {addr}"))?;
    listener.set_nonblocking(true)?;
    Ok(listener)
}
