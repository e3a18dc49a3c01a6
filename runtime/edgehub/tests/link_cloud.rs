//! The EdgeHub module against an in-test CloudCore stand-in: a WebSocket server over mutual TLS
//! (tokio-rustls + tokio-tungstenite) with certificates made by rcgen.

// tungstenite's handshake callback must return its (large) `ErrorResponse` type.
#![allow(clippy::result_large_err)]

use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::{SinkExt, StreamExt};
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, SanType};
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_tungstenite::tungstenite::Message as WsMessage;
use tokio_tungstenite::tungstenite::handshake::server::{Request, Response};
use wedge_core::config::EdgeHub as EdgeHubConfig;
use wedge_core::health::Health;
use wedge_core::metrics::{MetricsSource, PromWriter};
use wedge_core::module::SupervisionSettings;
use wedge_core::store::StoreOptions;
use wedge_core::{Bus, Content, Mailbox, Message, Store, Supervisor};
use wedge_edgehub::link::{EdgeHub, LinkSettings};
use wedge_edgehub::outbox::{COMPONENT, MIGRATIONS, Outbox};

const NODE: &str = "edge-1";
const WAIT: Duration = Duration::from_secs(5);

/// Test PKI: a CA, a server certificate for 127.0.0.1/localhost, a client certificate with CN
/// `system:node:edge-1`, all written as PEM into `dir`.
struct Pki {
    ca_file: PathBuf,
    client_cert_file: PathBuf,
    client_key_file: PathBuf,
    client_der: CertificateDer<'static>,
    server: Arc<rustls::ServerConfig>,
    ca_der: CertificateDer<'static>,
    server_der: CertificateDer<'static>,
    server_key_der: Vec<u8>,
}

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

fn pki(dir: &Path) -> Pki {
    let ca_key = KeyPair::generate().unwrap();
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "wedge test cloud CA");
    let ca_cert = ca_params.self_signed(&ca_key).unwrap();
    let issuer = Issuer::new(ca_params, ca_key);
    let server_key = KeyPair::generate().unwrap();
    let mut server_params = CertificateParams::new(vec!["localhost".to_owned()]).unwrap();
    server_params
        .subject_alt_names
        .push(SanType::IpAddress(IpAddr::V4(Ipv4Addr::LOCALHOST)));
    let server_cert = server_params.signed_by(&server_key, &issuer).unwrap();
    let client_key = KeyPair::generate().unwrap();
    let mut client_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    client_params
        .distinguished_name
        .push(DnType::CommonName, format!("system:node:{NODE}"));
    let client_cert = client_params.signed_by(&client_key, &issuer).unwrap();

    let server_der = server_cert.der().clone();
    let server_key_der = server_key.serialize_der();
    let ca_der = ca_cert.der().clone();
    let server = server_config(&ca_der, &server_der, &server_key_der);
    Pki {
        ca_file: write(dir, "ca.crt", &ca_cert.pem()),
        client_cert_file: write(dir, "node.crt", &client_cert.pem()),
        client_key_file: write(dir, "node.key", &client_key.serialize_pem()),
        client_der: client_cert.der().clone(),
        server,
        ca_der,
        server_der,
        server_key_der,
    }
}

/// A cloud TLS configuration presenting `cert`/`key` and requiring client certificates signed
/// by `client_ca`.
fn server_config(
    client_ca: &CertificateDer<'static>,
    cert: &CertificateDer<'static>,
    key: &[u8],
) -> Arc<rustls::ServerConfig> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    roots.add(client_ca.clone()).unwrap();
    let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone())
        .build()
        .unwrap();
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_client_cert_verifier(verifier)
        .with_single_cert(
            vec![cert.clone()],
            PrivateKeyDer::try_from(key.to_vec()).unwrap(),
        )
        .unwrap();
    Arc::new(config)
}

/// The request path and headers (lower-case name, value) of a WebSocket handshake.
type Handshake = (String, Vec<(String, String)>);

/// What the cloud stand-in saw.
#[derive(Debug)]
enum Seen {
    /// A session was established: request path, headers (lower-case name, value), and the
    /// client's certificate.
    Connected {
        path: String,
        headers: Vec<(String, String)>,
        peer: CertificateDer<'static>,
    },
    /// A text frame.
    Text(String),
    /// A binary frame (edgecore never writes one).
    Binary,
}

/// A CloudCore stand-in on a fixed port that can be stopped and started again.
struct Cloud {
    port: u16,
    tls: Arc<rustls::ServerConfig>,
    seen_tx: mpsc::UnboundedSender<Seen>,
    seen: mpsc::UnboundedReceiver<Seen>,
    to_node: Arc<Mutex<Option<mpsc::UnboundedSender<WsMessage>>>>,
    tasks: Arc<Mutex<Vec<JoinHandle<()>>>>,
}

impl Cloud {
    async fn start(tls: Arc<rustls::ServerConfig>) -> Cloud {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let (seen_tx, seen) = mpsc::unbounded_channel();
        let cloud = Cloud {
            port,
            tls,
            seen_tx,
            seen,
            to_node: Arc::default(),
            tasks: Arc::default(),
        };
        cloud.serve(listener);
        cloud
    }

    fn serve(&self, listener: TcpListener) {
        let acceptor = tokio_rustls::TlsAcceptor::from(self.tls.clone());
        let seen = self.seen_tx.clone();
        let to_node = self.to_node.clone();
        let tasks = self.tasks.clone();
        let accept = tokio::spawn(async move {
            loop {
                let Ok((tcp, _)) = listener.accept().await else {
                    return;
                };
                let acceptor = acceptor.clone();
                let seen = seen.clone();
                let to_node = to_node.clone();
                let session = tokio::spawn(async move {
                    let Ok(tls) = acceptor.accept(tcp).await else {
                        return;
                    };
                    let peer = tls.get_ref().1.peer_certificates().unwrap()[0].clone();
                    let request: Arc<Mutex<Option<Handshake>>> = Arc::default();
                    let captured = request.clone();
                    let callback = move |req: &Request, resp: Response| {
                        let headers = req
                            .headers()
                            .iter()
                            .map(|(k, v)| (k.as_str().to_owned(), v.to_str().unwrap().to_owned()))
                            .collect();
                        *captured.lock().unwrap() = Some((req.uri().path().to_owned(), headers));
                        Ok(resp)
                    };
                    let Ok(ws) = tokio_tungstenite::accept_hdr_async(tls, callback).await else {
                        return;
                    };
                    let (path, headers) = request.lock().unwrap().take().unwrap();
                    let (mut sink, mut stream) = ws.split();
                    let (tx, mut rx) = mpsc::unbounded_channel();
                    *to_node.lock().unwrap() = Some(tx);
                    let _ = seen.send(Seen::Connected {
                        path,
                        headers,
                        peer,
                    });
                    loop {
                        tokio::select! {
                            out = rx.recv() => match out {
                                Some(frame) => if sink.send(frame).await.is_err() { return },
                                None => return,
                            },
                            frame = stream.next() => match frame {
                                Some(Ok(WsMessage::Text(t))) => { let _ = seen.send(Seen::Text(t.to_string())); }
                                Some(Ok(WsMessage::Binary(_))) => { let _ = seen.send(Seen::Binary); }
                                Some(Ok(_)) => {}
                                _ => return,
                            },
                        }
                    }
                });
                tasks.lock().unwrap().push(session);
            }
        });
        self.tasks.lock().unwrap().push(accept);
    }

    /// Drops the listener and every session, as a crashed CloudCore would.
    async fn stop(&mut self) {
        let tasks: Vec<_> = self.tasks.lock().unwrap().drain(..).collect();
        for task in tasks {
            task.abort();
            let _ = task.await;
        }
        *self.to_node.lock().unwrap() = None;
        // Forget what the dead sessions carried.
        while self.seen.try_recv().is_ok() {}
    }

    /// Listens again on the same port.
    async fn restart(&self) {
        let listener = TcpListener::bind(("127.0.0.1", self.port)).await.unwrap();
        self.serve(listener);
    }

    async fn next(&mut self) -> Seen {
        tokio::time::timeout(WAIT, self.seen.recv())
            .await
            .expect("the cloud saw nothing in time")
            .expect("cloud channel open")
    }

    /// The next text frame that is not a keepalive, as a message (checking the framing).
    async fn next_message(&mut self) -> Message {
        loop {
            match self.next().await {
                Seen::Text(text) => {
                    assert!(
                        text.ends_with('\n'),
                        "frame without trailing newline: {text:?}"
                    );
                    let msg = Message::from_slice(text.as_bytes()).unwrap();
                    if msg.route.operation != "keepalive" {
                        return msg;
                    }
                }
                other => panic!("expected a text frame, saw {other:?}"),
            }
        }
    }

    /// Waits for a new session and returns what it carried.
    async fn connected(&mut self) -> (String, Vec<(String, String)>, CertificateDer<'static>) {
        match self.next().await {
            Seen::Connected {
                path,
                headers,
                peer,
            } => (path, headers, peer),
            other => panic!("expected a connection, saw {other:?}"),
        }
    }

    fn send_raw(&self, frame: WsMessage) {
        let guard = self.to_node.lock().unwrap();
        guard
            .as_ref()
            .expect("a node is connected")
            .send(frame)
            .unwrap();
    }

    fn send(&self, msg: &Message) {
        let mut text = String::from_utf8(msg.to_cloud_vec()).unwrap();
        text.push('\n');
        self.send_raw(WsMessage::Text(text.into()));
    }
}

/// A node with the EdgeHub module and stand-ins for `metamanager` (group `meta`) and `twin`.
struct Node {
    hub: Arc<EdgeHub>,
    bus: Bus,
    outbox: Outbox,
    meta: Mailbox,
    twin: Mailbox,
    supervisor: Supervisor,
}

impl Node {
    async fn start(dir: &Path, pki: &Pki, port: u16) -> Node {
        Node::start_with(dir, pki, port, 1000, |_| {}).await
    }

    async fn start_with(
        dir: &Path,
        pki: &Pki,
        port: u16,
        cap: usize,
        tweak: impl FnOnce(&mut LinkSettings),
    ) -> Node {
        let store = Store::open(&dir.join("wedge.db"), StoreOptions::default()).unwrap();
        store.migrate(COMPONENT, MIGRATIONS).await.unwrap();
        let outbox = Outbox::open(store, cap).await.unwrap();
        let mut config = EdgeHubConfig::default();
        config.websocket.server = format!("127.0.0.1:{port}");
        config.tls_ca_file = pki.ca_file.display().to_string();
        config.tls_cert_file = pki.client_cert_file.display().to_string();
        config.tls_private_key_file = pki.client_key_file.display().to_string();
        let mut settings = LinkSettings::from_config(&config, NODE).unwrap();
        tweak(&mut settings);
        let bus = Bus::new(64);
        let meta = bus.register("metamanager", "meta").unwrap();
        let twin = bus.register("twin", "twin").unwrap();
        let mut supervisor =
            Supervisor::new(bus.clone(), Health::new(), SupervisionSettings::default());
        let hub = Arc::new(EdgeHub::new(settings, outbox.clone()));
        supervisor.spawn(hub.clone()).unwrap();
        Node {
            hub,
            bus,
            outbox,
            meta,
            twin,
            supervisor,
        }
    }

    fn metrics(&self) -> String {
        let mut w = PromWriter::new();
        self.hub.write_metrics(&mut w);
        w.finish()
    }

    async fn to_cloud(&self, msg: Message) {
        self.bus.send("websocket", msg).await.unwrap();
    }
}

async fn recv(mailbox: &mut Mailbox) -> Message {
    tokio::time::timeout(WAIT, mailbox.recv())
        .await
        .expect("nothing arrived in time")
        .expect("mailbox open")
}

fn header<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.as_str())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_handshake_keepalive_control_dispatch_and_replies() {
    let dir = tempfile::tempdir().unwrap();
    let pki = pki(dir.path());
    let mut cloud = Cloud::start(pki.server.clone()).await;
    let mut node = Node::start_with(dir.path(), &pki, cloud.port, 1000, |s| {
        s.max_frame = 64 * 1024;
    })
    .await;

    // Handshake: path, headers, and the node's certificate (CN system:node:edge-1).
    let (path, headers, peer) = cloud.connected().await;
    assert_eq!(
        path,
        format!("/e632aba927ea4ac2b575ec1603d56f10/{NODE}/events")
    );
    assert_eq!(header(&headers, "node_id"), Some(NODE));
    assert_eq!(
        header(&headers, "project_id"),
        Some("e632aba927ea4ac2b575ec1603d56f10")
    );
    assert_eq!(header(&headers, "connectionuse"), Some("msg"));
    assert!(header(&headers, "sec-websocket-protocol").is_none());
    assert!(header(&headers, "sec-websocket-extensions").is_none());
    assert_eq!(peer, pki.client_der);

    // The keepalive comes first, byte for byte as edgecore writes it.
    let Seen::Text(first) = cloud.next().await else {
        panic!("no keepalive")
    };
    let k = Message::from_slice(first.as_bytes()).unwrap();
    assert_eq!(
        first,
        format!(
            "{{\"header\":{{\"msg_id\":\"{}\",\"timestamp\":{}}},\"route\":{{\"source\":\"websocket\",\"group\":\"resource\",\"operation\":\"keepalive\",\"resource\":\"node\"}},\"content\":\"ping\"}}\n",
            k.header.id, k.header.timestamp
        )
    );

    // Modules hear that the cloud is connected.
    for mailbox in [&mut node.meta, &mut node.twin] {
        let m = recv(mailbox).await;
        assert_eq!(m.route.source, "edgehub");
        assert_eq!(m.route.operation, "connect");
        assert_eq!(m.route.resource, "node/connection");
        assert_eq!(m.content.as_string().as_deref(), Some("cloud_connected"));
    }

    // A control ping is acked at once.
    let ping = Message::build("cloudhub", "resource", "ping", "node", Content::null());
    cloud.send(&ping);
    let ack = cloud.next_message().await;
    assert_eq!(ack.header.parent_id, ping.header.id);
    assert_eq!(ack.route.operation, "response");
    assert_eq!(ack.route.source, "cloudhub");
    assert_eq!(ack.route.resource, "node");
    assert_eq!(ack.content.raw(), "\"ack\"");

    // Text that is not JSON, a binary frame that is not JSON, a headerless message and a frame
    // over `max_frame` are all skipped and the link stays up: the next resource message
    // (sent as a binary frame, which is read too) reaches metamanager.
    cloud.send_raw(WsMessage::Text("not json\n".into()));
    cloud.send_raw(WsMessage::Binary(b"\x00\x01".to_vec().into()));
    cloud.send_raw(WsMessage::Text(
        "{\"route\":{\"group\":\"resource\"}}".into(),
    ));
    let mut big = Message::build(
        "edgecontroller",
        "resource",
        "insert",
        "default/configmap/big",
        Content::string("x".repeat(100 * 1024)),
    );
    cloud.send(&big);
    let pod = Message::build(
        "edgecontroller",
        "resource",
        "insert",
        "default/pod/nginx",
        Content::json(&serde_json::json!({"metadata": {"name": "nginx"}})).unwrap(),
    );
    cloud.send_raw(WsMessage::Binary(pod.to_vec().into()));
    assert_eq!(recv(&mut node.meta).await, pod);
    // The oversized one was skipped, not delivered; a smaller copy goes through.
    big.content = Content::string("x");
    cloud.send(&big);
    assert_eq!(recv(&mut node.meta).await, big);
    assert!(node.hub.is_connected());
    let metrics = node.metrics();
    assert!(metrics.contains("wedge_edgehub_connected 1\n"), "{metrics}");
    assert!(
        metrics.contains("wedge_edgehub_connects_total 1\n"),
        "{metrics}"
    );
    assert!(
        metrics.contains("wedge_edgehub_frames_malformed_total 4\n"),
        "{metrics}"
    );

    // A node request paired by parent_msg_id gets the cloud's reply through the bus.
    let bus = node.bus.clone();
    let query = Message::build(
        "metamanager",
        "meta",
        "query",
        "default/configmap/c",
        Content::null(),
    );
    let query_id = query.header.id.clone();
    let waiting = tokio::spawn(async move { bus.send_sync("websocket", query, WAIT).await });
    let asked = cloud.next_message().await;
    assert_eq!(asked.header.id, query_id);
    assert!(!asked.header.sync, "sync is cleared on the cloud link");
    let reply = asked.response(Content::string("answer"));
    let mut reply_cloud = reply.clone();
    reply_cloud.route.group = "resource".into();
    cloud.send(&reply_cloud);
    let got = waiting.await.unwrap().unwrap();
    assert_eq!(got.header.parent_id, query_id);
    assert_eq!(got.content.as_string().as_deref(), Some("answer"));

    // A cloud message for a group nobody serves is dropped without harm.
    cloud.send(&Message::build(
        "x",
        "nobody",
        "update",
        "a/b/c",
        Content::null(),
    ));
    let twin = Message::build(
        "devicecontroller",
        "twin",
        "update",
        "default/device/d",
        Content::null(),
    );
    cloud.send(&twin);
    assert_eq!(recv(&mut node.twin).await, twin);

    // A requested reconnect (certificate rotation) ends the session and dials again.
    node.hub.reconnect();
    let (_, reheaders, _) = cloud.connected().await;
    assert_eq!(header(&reheaders, "node_id"), Some(NODE));
    assert_eq!(
        recv(&mut node.twin).await.content.as_string().as_deref(),
        Some("cloud_disconnected")
    );
    assert_eq!(
        recv(&mut node.twin).await.content.as_string().as_deref(),
        Some("cloud_connected")
    );

    // Delivered messages leave the outbox once the link has stayed up a second.
    let deadline = Instant::now() + WAIT;
    while !node.outbox.is_empty() {
        assert!(
            Instant::now() < deadline,
            "outbox still holds {}",
            node.outbox.len()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    node.supervisor.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_sent_while_offline_arrive_in_order_after_reconnect() {
    let dir = tempfile::tempdir().unwrap();
    let pki = pki(dir.path());
    let mut cloud = Cloud::start(pki.server.clone()).await;
    let mut node = Node::start(dir.path(), &pki, cloud.port).await;
    cloud.connected().await;
    assert_eq!(
        recv(&mut node.twin).await.content.as_string().as_deref(),
        Some("cloud_connected")
    );

    cloud.stop().await;
    assert_eq!(
        recv(&mut node.twin).await.content.as_string().as_deref(),
        Some("cloud_disconnected")
    );
    let offline: Vec<Message> = (0..5)
        .map(|i| {
            Message::build(
                "edged",
                "resource",
                "update",
                &format!("default/podstatus/p{i}"),
                Content::string(format!("s{i}")),
            )
        })
        .collect();
    for m in &offline {
        node.to_cloud(m.clone()).await;
    }
    let deadline = Instant::now() + WAIT;
    while node.outbox.len() < offline.len() {
        assert!(
            Instant::now() < deadline,
            "messages not queued in the outbox"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;

    let back = Instant::now();
    cloud.restart().await;
    cloud.connected().await;
    let took = back.elapsed();
    assert!(took < Duration::from_secs(1), "reconnected after {took:?}");

    // The keepalive, then the backlog in order with the same ids and bytes, then new traffic.
    let Seen::Text(first) = cloud.next().await else {
        panic!("no keepalive")
    };
    assert!(first.contains("\"operation\":\"keepalive\""), "{first}");
    let live = Message::build(
        "edged",
        "resource",
        "update",
        "default/podstatus/live",
        Content::null(),
    );
    node.to_cloud(live.clone()).await;
    for m in &offline {
        assert_eq!(&cloud.next_message().await, m);
    }
    assert_eq!(cloud.next_message().await, live);
    node.supervisor.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keepalive_every_heartbeat_and_a_full_outbox_refuses() {
    let dir = tempfile::tempdir().unwrap();
    let pki = pki(dir.path());
    let mut cloud = Cloud::start(pki.server.clone()).await;
    let mut node = Node::start_with(dir.path(), &pki, cloud.port, 2, |s| {
        s.heartbeat = Duration::from_secs(1);
    })
    .await;
    cloud.connected().await;
    // One keepalive on connect, then one per heartbeat.
    let started = Instant::now();
    for _ in 0..3 {
        let Seen::Text(text) = cloud.next().await else {
            panic!("expected a keepalive")
        };
        assert!(text.contains("\"operation\":\"keepalive\""), "{text}");
    }
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(1900) && took < Duration::from_millis(3000),
        "{took:?}"
    );

    cloud.stop().await;
    assert_eq!(
        recv(&mut node.twin).await.content.as_string().as_deref(),
        Some("cloud_connected")
    );
    assert_eq!(
        recv(&mut node.twin).await.content.as_string().as_deref(),
        Some("cloud_disconnected")
    );
    for i in 0..3 {
        let m = Message::build(
            "edged",
            "resource",
            "update",
            &format!("a/b/{i}"),
            Content::null(),
        );
        node.to_cloud(m).await;
    }
    let deadline = Instant::now() + WAIT;
    while !node
        .metrics()
        .contains("wedge_edgehub_outbound_refused_total 1\n")
    {
        assert!(Instant::now() < deadline, "{}", node.metrics());
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(node.outbox.len(), 2);
    assert!(!node.hub.is_connected());
    assert!(node.metrics().contains("wedge_edgehub_connected 0\n"));
    node.supervisor.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_not_signed_by_the_configured_ca_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let ours = pki(&dir.path().join("ours").tap_create());
    let theirs = pki(&dir.path().join("theirs").tap_create());
    // The cloud presents a certificate from another CA but trusts our client certificate's
    // CA, so only the node's verification of the server can refuse it.
    let tls = server_config(&ours.ca_der, &theirs.server_der, &theirs.server_key_der);
    let mut cloud = Cloud::start(tls).await;
    let node = Node::start(dir.path(), &ours, cloud.port).await;
    let deadline = Instant::now() + WAIT;
    while !node
        .metrics()
        .lines()
        .any(|l| l.starts_with("wedge_edgehub_dial_failures_total ") && !l.ends_with(" 0"))
    {
        assert!(Instant::now() < deadline, "{}", node.metrics());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(!node.hub.is_connected());
    assert!(
        cloud.seen.try_recv().is_err(),
        "no session may be established"
    );
    node.supervisor.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backlog_left_by_a_previous_run_is_sent_first() {
    let dir = tempfile::tempdir().unwrap();
    let pki = pki(dir.path());
    // A previous run queued two messages and stopped before sending them.
    let earlier: Vec<Message> = (0..2)
        .map(|i| {
            Message::build(
                "edged",
                "resource",
                "update",
                &format!("a/b/{i}"),
                Content::null(),
            )
        })
        .collect();
    {
        let store = Store::open(&dir.path().join("wedge.db"), StoreOptions::default()).unwrap();
        store.migrate(COMPONENT, MIGRATIONS).await.unwrap();
        let outbox = Outbox::open(store, 10).await.unwrap();
        for m in &earlier {
            outbox.push(m).await.unwrap();
        }
    }
    let mut cloud = Cloud::start(pki.server.clone()).await;
    let node = Node::start(dir.path(), &pki, cloud.port).await;
    cloud.connected().await;
    for m in &earlier {
        assert_eq!(&cloud.next_message().await, m);
    }
    node.supervisor.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outbound_messages_are_rate_limited() {
    let dir = tempfile::tempdir().unwrap();
    let pki = pki(dir.path());
    let mut cloud = Cloud::start(pki.server.clone()).await;
    let node = Node::start_with(dir.path(), &pki, cloud.port, 100, |s| {
        s.message_qps = 4;
        s.message_burst = 2;
    })
    .await;
    cloud.connected().await;
    let started = Instant::now();
    for i in 0..6 {
        let m = Message::build(
            "edged",
            "resource",
            "update",
            &format!("a/b/{i}"),
            Content::null(),
        );
        node.to_cloud(m).await;
    }
    for _ in 0..6 {
        cloud.next_message().await;
    }
    // A burst of 2, then 4 more at 4 per second: at least ~1 s.
    let took = started.elapsed();
    assert!(took >= Duration::from_millis(950), "{took:?}");
    assert!(took < Duration::from_secs(3), "{took:?}");
    node.supervisor.shutdown().await;
}

/// Creates a directory in place (test helper).
trait TapCreate {
    fn tap_create(self) -> Self;
}

impl TapCreate for PathBuf {
    fn tap_create(self) -> PathBuf {
        std::fs::create_dir_all(&self).unwrap();
        self
    }
}
