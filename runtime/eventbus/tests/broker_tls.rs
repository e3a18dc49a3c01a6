//! The embedded broker's TLS listener (`wedge.broker.tls`), driven by rumqttc over rustls: it
//! shares routing with the plain listener, asks for a client certificate when a client CA is
//! configured, and closes (and counts) every connection whose handshake fails.

mod common;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use common::pki::{self, Pki};
use common::{Seen, TestClient, free_port, url};
use rumqttc::{MqttOptions, TlsConfiguration, Transport};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_util::sync::CancellationToken;
use wedge_eventbus::Stats;
use wedge_eventbus::broker::{BrokerOptions, EmbeddedBroker, TlsListener};

async fn broker(pki: &Pki, client_ca: Option<&Path>) -> (EmbeddedBroker, Arc<Stats>, u16, u16) {
    broker_with(pki, client_ca, None).await
}

async fn broker_with(
    pki: &Pki,
    client_ca: Option<&Path>,
    max_packet: Option<usize>,
) -> (EmbeddedBroker, Arc<Stats>, u16, u16) {
    let port = free_port();
    let mut tls =
        TlsListener::from_files("127.0.0.1:0", &pki.server_cert, &pki.server_key, client_ca)
            .expect("the test PKI is usable");
    tls.max_packet = max_packet;
    let stats = Arc::new(Stats::default());
    let b = EmbeddedBroker::start(
        &url(port),
        BrokerOptions {
            tls: Some(tls),
            ..BrokerOptions::default()
        },
        stats.clone(),
        &CancellationToken::new(),
    )
    .await
    .expect("broker listens");
    let tls_port = b.tls_local_addr().expect("TLS listener").port();
    (b, stats, port, tls_port)
}

/// Client options over TLS to `port`, trusting `ca` and presenting `identity` (cert, key).
fn tls_options(id: &str, port: u16, ca: &Path, identity: Option<(&Path, &Path)>) -> MqttOptions {
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(ca).unwrap() {
        roots.add(cert.unwrap()).unwrap();
    }
    let builder = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots);
    let config = match identity {
        Some((cert, key)) => builder
            .with_client_auth_cert(
                CertificateDer::pem_file_iter(cert)
                    .unwrap()
                    .map(Result::unwrap)
                    .collect(),
                PrivateKeyDer::from_pem_file(key).unwrap(),
            )
            .unwrap(),
        None => builder.with_no_client_auth(),
    };
    let mut options = MqttOptions::new(id, "127.0.0.1", port);
    options.set_transport(Transport::tls_with_config(TlsConfiguration::Rustls(
        Arc::new(config),
    )));
    options
}

/// Waits for the client's first event and says whether it was a CONNACK.
async fn connects(options: MqttOptions) -> bool {
    let mut client = TestClient::spawn(options);
    let seen = tokio::time::timeout(Duration::from_secs(10), client.next_event()).await;
    matches!(seen, Ok(Seen::ConnAck))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutual_tls_clients_share_topics_with_plain_ones_and_others_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let pki = pki::make(dir.path(), "", "wedge test CA");
    let stranger = pki::make(dir.path(), "other-", "someone else's CA");
    let (b, stats, plain, tls) = broker(&pki, Some(&pki.ca)).await;

    // A client with a certificate from the configured CA talks to a plain client.
    let mut secure = TestClient::connect_with(tls_options(
        "secure",
        tls,
        &pki.ca,
        Some((&pki.client_cert, &pki.client_key)),
    ))
    .await;
    secure
        .subscribe("$hw/events/device/default/thermo-1/twin/update/result")
        .await;
    let mut local = TestClient::connect(plain, "local").await;
    local.subscribe("$hw/events/device/+/+/twin/update").await;
    local
        .publish(
            "$hw/events/device/default/thermo-1/twin/update/result",
            "ok",
        )
        .await;
    assert_eq!(&secure.next_publish().await.payload[..], b"ok");
    secure
        .publish("$hw/events/device/default/thermo-1/twin/update", "21")
        .await;
    assert_eq!(&local.next_publish().await.payload[..], b"21");

    // Refused, each counted as a failed handshake: no certificate, a certificate from another
    // CA, and plain MQTT on the TLS port.
    assert!(!connects(tls_options("anonymous", tls, &pki.ca, None)).await);
    assert!(
        !connects(tls_options(
            "stranger",
            tls,
            &pki.ca,
            Some((&stranger.client_cert, &stranger.client_key)),
        ))
        .await
    );
    assert!(!connects(MqttOptions::new("plain-on-tls", "127.0.0.1", tls)).await);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while stats.broker().closed_count("tls_handshake") < 3 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "failed handshakes counted: {}",
            stats.broker().closed_count("tls_handshake")
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // A client that does not trust the broker's CA gives up on its own.
    assert!(
        !connects(tls_options(
            "distrustful",
            tls,
            &stranger.ca,
            Some((&pki.client_cert, &pki.client_key)),
        ))
        .await
    );
    b.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_client_ca_any_tls_client_may_connect() {
    let dir = tempfile::tempdir().unwrap();
    let pki = pki::make(dir.path(), "", "wedge test CA");
    let (b, stats, _plain, tls) = broker(&pki, None).await;
    assert!(connects(tls_options("anonymous", tls, &pki.ca, None)).await);
    assert_eq!(stats.broker().closed_count("tls_handshake"), 0);
    b.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_listener_keeps_its_own_packet_limit() {
    let dir = tempfile::tempdir().unwrap();
    let pki = pki::make(dir.path(), "", "wedge test CA");
    let (b, stats, plain, tls) = broker_with(&pki, None, Some(8192)).await;
    let mut secure = TestClient::connect_with(tls_options("secure", tls, &pki.ca, None)).await;
    secure.subscribe("big/#").await;
    let mut local = TestClient::connect(plain, "local").await;
    local.subscribe("big/#").await;

    // 20 KB fits the plain listener's limit, not the TLS one's: the plain subscriber gets it,
    // the TLS subscriber's copy is skipped and counted, and its connection stays up.
    local.publish("big/one", vec![b'x'; 20_000]).await;
    assert_eq!(local.next_publish().await.payload.len(), 20_000);
    secure.no_publish(Duration::from_millis(300)).await;
    assert_eq!(stats.broker().undeliverable(), 1);
    local.publish("big/two", "small").await;
    assert_eq!(&secure.next_publish().await.payload[..], b"small");

    // The same 20 KB sent on the TLS listener closes that connection.
    secure.publish("big/three", vec![b'x'; 20_000]).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while stats.broker().closed_count("packet_too_large") < 1 {
        assert!(tokio::time::Instant::now() < deadline, "not closed");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    b.stop().await;
}
