//! The external broker with a password (`mqttUsername` / `mqttPassword`) and over TLS with a
//! client certificate (`ssl://` + `eventBusTLS`), against mosquitto configured by the test.

mod common;

use std::process::Command;

use common::scenarios::{TWIN_RESOURCE, TWIN_TOPIC};
use common::{Mosquitto, Node, TestClient, free_port, publish_until, settings};
use rumqttc::MqttOptions;
use wedge_core::Content;
use wedge_eventbus::{Credentials, TlsFiles};

/// Checks both directions through the module: a device publish reaches `twin`, a bus publish
/// reaches a subscriber. `client` connects where the test clients may.
async fn traffic_flows(node: &mut Node, client: MqttOptions, mut sub_options: MqttOptions) {
    let device = TestClient::connect_with(client).await;
    publish_until(&device, TWIN_TOPIC, "{}", &mut node.twin, TWIN_RESOURCE).await;
    sub_options.set_clean_session(true);
    let mut sub = TestClient::connect_with(sub_options).await;
    sub.subscribe("wedge/secure/#").await;
    node.to_eventbus("wasm", "publish", "wedge/secure/1", Content::string("s"))
        .await;
    let p = sub.next_publish().await;
    assert_eq!(&p.payload[..], b"s");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn password_protected_external_broker() {
    let dir = tempfile::tempdir().unwrap();
    let passwords = dir.path().join("passwords");
    let status = Command::new("mosquitto_passwd")
        .arg("-c")
        .arg("-b")
        .arg(&passwords)
        .args(["edge", "p4ss"])
        .status()
        .expect("mosquitto_passwd is installed with mosquitto");
    assert!(status.success());
    let port = free_port();
    let broker = Mosquitto::start_with(
        port,
        &format!(
            "password_file {}\nallow_anonymous false",
            passwords.display()
        ),
    );
    // The broker really refuses anonymous clients.
    let mut anonymous = TestClient::spawn(MqttOptions::new("anon", "127.0.0.1", port));
    match anonymous.next_event().await {
        common::Seen::Error(e) => assert!(e.contains("refused"), "{e}"),
        other => panic!("anonymous client not refused: {other:?}"),
    }
    drop(anonymous);
    let mut s = settings(2, free_port(), broker.port);
    s.credentials = Some(Credentials {
        username: "edge".to_owned(),
        password: "p4ss".to_owned(),
    });
    let mut node = Node::start(dir.path(), s).await;
    let login = |id: &str| {
        let mut o = MqttOptions::new(id, "127.0.0.1", port);
        o.set_credentials("edge", "p4ss");
        o
    };
    traffic_flows(&mut node, login("dev"), login("sub")).await;
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_with_client_certificate() {
    let dir = tempfile::tempdir().unwrap();
    let pki = common::pki::make(dir.path(), "", "wedge test CA");
    let (ca, server, server_key, client, client_key) = (
        pki.ca,
        pki.server_cert,
        pki.server_key,
        pki.client_cert,
        pki.client_key,
    );

    // Plain listener for the test's clients, TLS listener (client certificate required) for
    // the module.
    let plain = free_port();
    let tls_port = free_port();
    let broker = Mosquitto::start_with(
        plain,
        &format!(
            "listener {tls_port} 127.0.0.1\ncafile {}\ncertfile {}\nkeyfile {}\nrequire_certificate true",
            ca.display(),
            server.display(),
            server_key.display()
        ),
    );
    let mut s = settings(2, free_port(), tls_port);
    s.external.tls = true;
    s.tls = Some(TlsFiles {
        ca_file: Some(ca),
        cert_file: Some(client),
        key_file: Some(client_key),
    });
    let mut node = Node::start(dir.path(), s).await;
    traffic_flows(
        &mut node,
        MqttOptions::new("dev", "127.0.0.1", broker.port),
        MqttOptions::new("sub", "127.0.0.1", broker.port),
    )
    .await;
    node.stop().await;
}
