//! Tests of the cloud-hub simulator itself, with a real TLS WebSocket client holding a
//! CA-issued certificate, and real HTTPS requests to the bootstrap endpoints.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::{SinkExt, StreamExt};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_tungstenite::tungstenite::Message as Frame;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use wedge_core::Message;
use wedge_core::message::Content;
use wedge_tests::cloudhub::{CloudCa, CloudHub, CloudHubOptions, IssuedCert};

type Ws =
    tokio_tungstenite::WebSocketStream<tokio_rustls::client::TlsStream<tokio::net::TcpStream>>;

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

fn client_config(ca: &CloudCa, cert: Option<&IssuedCert>) -> Arc<rustls::ClientConfig> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    roots.add(CertificateDer::from(ca.ca_der())).unwrap();
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots);
    Arc::new(match cert {
        Some(c) => builder
            .with_client_auth_cert(
                vec![CertificateDer::from(c.cert_der.clone())],
                PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(c.key_der.clone())),
            )
            .unwrap(),
        None => builder.with_no_client_auth(),
    })
}

async fn tls(
    addr: SocketAddr,
    config: Arc<rustls::ClientConfig>,
) -> std::io::Result<tokio_rustls::client::TlsStream<tokio::net::TcpStream>> {
    let tcp = tokio::net::TcpStream::connect(addr).await?;
    let name = ServerName::try_from("127.0.0.1").unwrap();
    tokio_rustls::TlsConnector::from(config)
        .connect(name, tcp)
        .await
}

/// Connects as edgecore does (its header spelling), with `headers` overriding the defaults.
async fn connect(
    hub_addr: SocketAddr,
    config: Arc<rustls::ClientConfig>,
    connection_use: &str,
) -> anyhow::Result<Ws> {
    let stream = tls(hub_addr, config).await?;
    let mut req = format!("wss://{hub_addr}/e632aba927ea4ac2b575ec1603d56f10/node-a/events")
        .into_client_request()?;
    let h = req.headers_mut();
    h.insert("Node_id", "node-a".parse()?);
    h.insert("Project_id", "e632aba927ea4ac2b575ec1603d56f10".parse()?);
    h.insert("Connectionuse", connection_use.parse()?);
    let (ws, _) = tokio_tungstenite::client_async(req, stream).await?;
    Ok(ws)
}

fn keepalive() -> Message {
    Message::build(
        "websocket",
        "resource",
        "keepalive",
        "node",
        Content::string("ping"),
    )
}

async fn send(ws: &mut Ws, msg: &Message) {
    let mut text = String::from_utf8(msg.to_cloud_vec()).unwrap();
    text.push('\n');
    ws.send(Frame::text(text)).await.unwrap();
}

async fn next_message(ws: &mut Ws) -> Message {
    loop {
        match ws.next().await.unwrap().unwrap() {
            Frame::Text(t) => return Message::from_slice(t.as_bytes()).unwrap(),
            _ => continue,
        }
    }
}

#[test]
fn records_messages_and_the_connection_of_a_node_with_a_ca_cert() {
    let hub = CloudHub::start(CloudHubOptions {
        require_node_cn: true,
        ..CloudHubOptions::default()
    })
    .unwrap();
    let cert = hub.ca().client_cert("system:node:node-a").unwrap();
    let rt = runtime();
    let mut ws = rt
        .block_on(connect(
            hub.ws_addr(),
            client_config(hub.ca(), Some(&cert)),
            "msg",
        ))
        .unwrap();
    let ping = keepalive();
    rt.block_on(send(&mut ws, &ping));
    let got = hub
        .wait_for(
            |m| {
                m.message
                    .as_ref()
                    .is_some_and(|m| m.route.operation == "keepalive")
            },
            Duration::from_secs(5),
        )
        .unwrap();
    assert_eq!(got.message.unwrap(), ping);
    assert_eq!(
        got.raw,
        format!("{}\n", String::from_utf8(ping.to_vec()).unwrap())
    );
    let conns = hub.connections();
    assert_eq!(conns.len(), 1);
    assert_eq!(conns[0].node, "node-a");
    assert_eq!(conns[0].cn, "system:node:node-a");
    assert_eq!(
        conns[0].path,
        "/e632aba927ea4ac2b575ec1603d56f10/node-a/events"
    );
    assert!(conns[0].closed.is_none());
    assert_eq!(hub.dedup_count_by_msg_id().get(&ping.header.id), Some(&1));

    // The cloud's messages reach the client as one compact JSON text frame each.
    let down = Message::build(
        "edgecontroller",
        "resource",
        "insert",
        "default/pod/nginx",
        Content::ok(),
    );
    hub.send(down.clone()).unwrap();
    assert_eq!(rt.block_on(next_message(&mut ws)), down);
}

#[test]
fn wrong_headers_a_wrong_cn_and_a_missing_client_cert_are_refused() {
    let hub = CloudHub::start(CloudHubOptions {
        require_node_cn: true,
        ..CloudHubOptions::default()
    })
    .unwrap();
    let rt = runtime();
    let good = hub.ca().client_cert("system:node:node-a").unwrap();
    let err = rt
        .block_on(connect(
            hub.ws_addr(),
            client_config(hub.ca(), Some(&good)),
            "stream",
        ))
        .unwrap_err();
    assert!(err.to_string().contains("400"), "{err:#}");

    let wrong_cn = hub.ca().client_cert("system:node:node-b").unwrap();
    assert!(
        rt.block_on(connect(
            hub.ws_addr(),
            client_config(hub.ca(), Some(&wrong_cn)),
            "msg"
        ))
        .is_err()
    );
    // Without a certificate the TLS handshake itself fails (server side), so the WebSocket
    // upgrade never succeeds.
    assert!(
        rt.block_on(connect(hub.ws_addr(), client_config(hub.ca(), None), "msg"))
            .is_err()
    );
    // A certificate from another CA is refused as well.
    let other = CloudCa::new()
        .unwrap()
        .client_cert("system:node:node-a")
        .unwrap();
    assert!(
        rt.block_on(connect(
            hub.ws_addr(),
            client_config(hub.ca(), Some(&other)),
            "msg"
        ))
        .is_err()
    );
    let deadline = Instant::now() + Duration::from_secs(5);
    while hub.rejections().len() < 4 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    let rejections = hub.rejections();
    assert_eq!(rejections.len(), 4, "{rejections:?}");
    assert!(
        rejections.iter().any(|r| r.contains("ConnectionUse")),
        "{rejections:?}"
    );
    assert!(
        rejections.iter().any(|r| r.contains("node-b")),
        "{rejections:?}"
    );
    assert!(hub.connections().is_empty());
}

#[test]
fn send_acked_resends_each_period_until_the_node_acks() {
    let period = Duration::from_millis(300);
    let hub = CloudHub::start(CloudHubOptions {
        ack_resend_period: period,
        ..CloudHubOptions::default()
    })
    .unwrap();
    let cert = hub.ca().client_cert("system:node:node-a").unwrap();
    let rt = runtime();
    let mut ws = rt
        .block_on(connect(
            hub.ws_addr(),
            client_config(hub.ca(), Some(&cert)),
            "msg",
        ))
        .unwrap();
    hub.wait_connected(Duration::from_secs(5)).unwrap();
    let mut pod = Message::build(
        "edgecontroller",
        "resource",
        "insert",
        "default/pod/nginx",
        Content::ok(),
    );
    pod.header.resource_version = "7".into();
    hub.send_acked(pod.clone()).unwrap();
    let mut arrivals = Vec::new();
    for _ in 0..3 {
        assert_eq!(rt.block_on(next_message(&mut ws)), pod);
        arrivals.push(Instant::now());
    }
    for pair in arrivals.windows(2) {
        let gap = pair[1] - pair[0];
        assert!(
            gap >= period - Duration::from_millis(50),
            "resent after {gap:?}"
        );
    }
    rt.block_on(send(&mut ws, &pod.response(Content::ok())));
    hub.wait_for(
        |m| {
            m.message
                .as_ref()
                .is_some_and(|m| m.header.parent_id == pod.header.id)
        },
        Duration::from_secs(5),
    )
    .unwrap();
    std::thread::sleep(period * 3);
    assert_eq!(hub.sent().len(), 3, "no resend after the ACK");
    assert_eq!(hub.acked(), vec![pod.header.id.clone()]);
}

#[test]
fn send_acked_gives_up_after_four_resends() {
    let period = Duration::from_millis(100);
    let hub = CloudHub::start(CloudHubOptions {
        ack_resend_period: period,
        ..CloudHubOptions::default()
    })
    .unwrap();
    let cert = hub.ca().client_cert("system:node:node-a").unwrap();
    let rt = runtime();
    let _ws = rt
        .block_on(connect(
            hub.ws_addr(),
            client_config(hub.ca(), Some(&cert)),
            "msg",
        ))
        .unwrap();
    hub.wait_connected(Duration::from_secs(5)).unwrap();
    hub.send_acked(keepalive()).unwrap();
    std::thread::sleep(period * 10);
    assert_eq!(hub.sent().len(), 5);
}

#[test]
fn a_session_without_keepalive_is_closed_after_the_timeout() {
    let hub = CloudHub::start(CloudHubOptions {
        keepalive_timeout: Duration::from_millis(400),
        ..CloudHubOptions::default()
    })
    .unwrap();
    let cert = hub.ca().client_cert("system:node:node-a").unwrap();
    let rt = runtime();
    let mut ws = rt
        .block_on(connect(
            hub.ws_addr(),
            client_config(hub.ca(), Some(&cert)),
            "msg",
        ))
        .unwrap();
    let start = Instant::now();
    // Keepalives hold the session open past the timeout...
    for _ in 0..4 {
        rt.block_on(send(&mut ws, &keepalive()));
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(hub.connections()[0].closed.is_none());
    // ...and silence ends it, a timeout after the last one (sent at about 600 ms).
    let end = rt.block_on(async {
        loop {
            match ws.next().await {
                Some(Ok(Frame::Close(_))) | None | Some(Err(_)) => return Instant::now(),
                _ => {}
            }
        }
    });
    assert!(
        end - start >= Duration::from_millis(950),
        "{:?}",
        end - start
    );
    std::thread::sleep(Duration::from_millis(100));
    assert!(hub.connections()[0].closed.is_some());
}

async fn https_get(
    addr: SocketAddr,
    config: Arc<rustls::ClientConfig>,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> (u16, Vec<u8>) {
    let mut stream = tls(addr, config).await.unwrap();
    let mut head = format!(
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    stream.write_all(head.as_bytes()).await.unwrap();
    stream.write_all(body).await.unwrap();
    let mut response = Vec::new();
    let _ = stream.read_to_end(&mut response).await;
    let split = response.windows(4).position(|w| w == b"\r\n\r\n").unwrap();
    let status = std::str::from_utf8(&response[9..12])
        .unwrap()
        .parse()
        .unwrap();
    (status, response[split + 4..].to_vec())
}

fn csr(node: &str) -> Vec<u8> {
    let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    params.distinguished_name = rcgen::DistinguishedName::new();
    params
        .distinguished_name
        .push(rcgen::DnType::CountryName, "CN");
    params
        .distinguished_name
        .push(rcgen::DnType::OrganizationName, "system:nodes");
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, format!("system:node:{node}"));
    params.serialize_request(&key).unwrap().der().to_vec()
}

#[test]
fn bootstrap_endpoints_serve_the_ca_and_sign_csrs_for_valid_tokens_only() {
    let hub = CloudHub::start(CloudHubOptions::default()).unwrap();
    let rt = runtime();
    let anon = client_config(hub.ca(), None);
    let (status, body) = rt.block_on(https_get(
        hub.https_addr(),
        anon.clone(),
        "/ca.crt",
        &[],
        b"",
    ));
    assert_eq!(status, 200);
    assert_eq!(body, hub.ca().ca_der());

    let exp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        + 3600;
    let token = hub.ca().token("node-a", exp);
    let parts: Vec<&str> = token.splitn(2, '.').collect();
    assert_eq!(parts[0].len(), 64, "hex sha256 of the CA DER");
    assert_eq!(token.split('.').count(), 4);
    let bearer = format!("Bearer {}", parts[1]);
    let (status, cert) = rt.block_on(https_get(
        hub.https_addr(),
        anon.clone(),
        "/edge.crt",
        &[("Authorization", &bearer), ("NodeName", "node-a")],
        &csr("node-a"),
    ));
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&cert));
    let (_, parsed) = x509_parser::parse_x509_certificate(&cert).unwrap();
    let ca_der = hub.ca().ca_der();
    let (_, ca) = x509_parser::parse_x509_certificate(&ca_der).unwrap();
    assert_eq!(parsed.issuer(), ca.subject());
    assert_eq!(
        parsed
            .subject()
            .iter_common_name()
            .next()
            .unwrap()
            .as_str()
            .unwrap(),
        "system:node:node-a"
    );

    let expired = hub.ca().expired_token("node-a");
    let bearer = format!("Bearer {}", expired.split_once('.').unwrap().1);
    let (status, body) = rt.block_on(https_get(
        hub.https_addr(),
        anon.clone(),
        "/edge.crt",
        &[("Authorization", &bearer), ("NodeName", "node-a")],
        &csr("node-a"),
    ));
    assert_eq!(
        (status, String::from_utf8(body).unwrap()),
        (401, "token is expired".to_owned())
    );

    let forged = CloudCa::new().unwrap().token("node-a", exp);
    let bearer = format!("Bearer {}", forged.split_once('.').unwrap().1);
    let (status, body) = rt.block_on(https_get(
        hub.https_addr(),
        anon,
        "/edge.crt",
        &[("Authorization", &bearer), ("NodeName", "node-a")],
        &csr("node-a"),
    ));
    assert_eq!(
        (status, String::from_utf8(body).unwrap()),
        (401, "token signature is invalid".to_owned())
    );
    assert_eq!(
        hub.bootstrap_requests(),
        vec![
            "/ca.crt 200",
            "/edge.crt 200",
            "/edge.crt 401",
            "/edge.crt 401"
        ]
    );
}

#[test]
fn stop_closes_sessions_and_restart_listens_on_the_same_ports() {
    let mut hub = CloudHub::start(CloudHubOptions::default()).unwrap();
    let (ws_addr, https_addr) = (hub.ws_addr(), hub.https_addr());
    let cert = hub.ca().client_cert("system:node:node-a").unwrap();
    let rt = runtime();
    let mut ws = rt
        .block_on(connect(
            ws_addr,
            client_config(hub.ca(), Some(&cert)),
            "msg",
        ))
        .unwrap();
    hub.wait_connected(Duration::from_secs(5)).unwrap();
    hub.stop();
    let ended = rt.block_on(async {
        tokio::time::timeout(Duration::from_secs(5), async {
            loop {
                match ws.next().await {
                    Some(Ok(Frame::Close(_))) | None | Some(Err(_)) => return,
                    _ => {}
                }
            }
        })
        .await
    });
    assert!(ended.is_ok(), "session still open after stop");
    assert!(
        std::net::TcpStream::connect(ws_addr).is_err(),
        "listener closed"
    );
    assert!(hub.connections()[0].closed.is_some());

    hub.restart().unwrap();
    assert_eq!((hub.ws_addr(), hub.https_addr()), (ws_addr, https_addr));
    let mut ws = rt
        .block_on(connect(
            ws_addr,
            client_config(hub.ca(), Some(&cert)),
            "msg",
        ))
        .unwrap();
    rt.block_on(send(&mut ws, &keepalive()));
    hub.wait_for(|m| m.message.is_some(), Duration::from_secs(5))
        .unwrap();
    assert_eq!(hub.connections().len(), 2);
}
