//! `wedge run` joined to the cloud-hub simulator through the real link (WebSocket over mutual
//! TLS): a cloud pod insert is stored and ACKed after its commit, a mapper's twin update
//! reaches the cloud as `edge_updated` and stays pending until the cloud confirms it, and a
//! join token bootstraps the node certificate.

use std::time::Duration;

use rusqlite::{Connection, OpenFlags};
use wedge_core::{Content, Message};
use wedge_tests::Daemon;
use wedge_tests::cloud_node::{CloudNode, bootstrap_config};
use wedge_tests::cloudhub::{CloudHub, CloudHubOptions};
use wedge_tests::mqtt::MqttClient;

const NODE: &str = "edge-1";
const WAIT: Duration = Duration::from_secs(15);

#[test]
fn pod_inserts_are_acked_after_commit_and_twin_updates_reach_the_cloud() {
    let hub = CloudHub::start(CloudHubOptions {
        require_node_cn: true,
        // This test confirms the twin message itself, to see it pending until then.
        answer_device_messages: false,
        ..CloudHubOptions::default()
    })
    .unwrap();
    let mut node = CloudNode::start(&hub, "    heartbeat: 2\n").unwrap();
    let session = hub.wait_connected(WAIT).unwrap();
    assert_eq!(session.node, NODE);
    assert_eq!(session.cn, format!("system:node:{NODE}"));

    // A cloud pod insert: stored, then ACKed with the pod's msg_id as parent.
    let mut pod = Message::build(
        "edgecontroller",
        "resource",
        "insert",
        "default/pod/nginx",
        Content::from_raw(
            r#"{"metadata":{"name":"nginx","namespace":"default","uid":"u-1"},"spec":{"nodeName":"edge-1"}}"#,
        )
        .unwrap(),
    );
    pod.header.resource_version = "7".into();
    hub.send_acked(pod.clone()).unwrap();
    let ack = hub
        .wait_for(
            |m| {
                m.message.as_ref().is_some_and(|m| {
                    m.route.operation == "response" && m.header.parent_id == pod.header.id
                })
            },
            WAIT,
        )
        .unwrap_or_else(|e| panic!("{e}\n{}", node.daemon.log()));
    let ack = ack.message.unwrap();
    assert_eq!(ack.content.as_string().as_deref(), Some("OK"));
    let db = Connection::open_with_flags(
        node.data.join("edgecore.db"),
        OpenFlags::SQLITE_OPEN_READ_ONLY,
    )
    .unwrap();
    let stored: String = db
        .query_row(
            "SELECT value FROM meta WHERE key = 'default/pod/nginx'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert!(stored.contains("\"uid\":\"u-1\""), "{stored}");

    // Devicetwin asks for its membership detail on connect and keeps the request pending until
    // the cloud confirms it; confirm it so the pending count below is edge_updated's alone.
    let detail = hub
        .wait_for(
            |m| {
                m.message
                    .as_ref()
                    .is_some_and(|m| m.route.resource == "membership/detail")
            },
            WAIT,
        )
        .unwrap_or_else(|e| panic!("{e}\n{}", node.daemon.log()))
        .message
        .unwrap();
    hub.send(twin_confirmation(&detail)).unwrap();
    wait_for_metric(&node, "wedge_devicetwin_cloud_pending", 0.0);

    // A mapper's twin update goes to the cloud as edge_updated through the link.
    let mapper = MqttClient::connect(node.mqtt_port, "cloud-link-mapper").unwrap();
    mapper
        .publish(
            "$hw/events/device/default/thermo-1/twin/update",
            r#"{"event_id":"e-1","timestamp":1,"twin":{"temperature":{"actual":{"value":"23"},"metadata":{"type":"int"}}}}"#,
        )
        .unwrap();
    let edge_updated = hub
        .wait_for(
            |m| {
                m.message.as_ref().is_some_and(|m| {
                    m.route.resource == "device/default/thermo-1/twin/edge_updated"
                })
            },
            WAIT,
        )
        .unwrap_or_else(|e| panic!("{e}\n{}", node.daemon.log()));
    let edge_updated = edge_updated.message.unwrap();
    assert_eq!(edge_updated.route.source, "twin");
    assert_eq!(edge_updated.route.operation, "update");
    assert!(
        edge_updated
            .content
            .raw()
            .contains(r#""actual":{"value":"23""#),
        "{}",
        edge_updated.content.raw()
    );

    // It stays pending until the cloud confirms it (spec §5.7), then it is forgotten.
    // Devicetwin tracks it before handing it to the link, so it is pending by now.
    assert_eq!(
        metric(&node, "wedge_devicetwin_cloud_pending"),
        Some(1.0),
        "{}",
        node.daemon.log()
    );
    hub.send(twin_confirmation(&edge_updated)).unwrap();
    wait_for_metric(&node, "wedge_devicetwin_cloud_pending", 0.0);
    node.daemon
        .stop(libc::SIGTERM, Duration::from_secs(10))
        .unwrap();
}

/// The cloud's confirmation of a twin message (spec §5.7): devicecontroller's `"OK"` response
/// in group `twin`, resource `twin`, with the confirmed message's id as `parent_msg_id`.
fn twin_confirmation(confirmed: &Message) -> Message {
    let mut ok = Message::build(
        "devicecontroller",
        "twin",
        "response",
        "twin",
        Content::string("OK"),
    );
    ok.header.parent_id = confirmed.header.id.clone();
    ok
}

/// An unlabelled sample from the node's `/metrics`, or `None` when it is absent.
fn metric(node: &CloudNode, name: &str) -> Option<f64> {
    node.metric(name).ok()
}

/// Polls `/metrics` until `name` reads `want` (confirmations reach devicetwin asynchronously).
fn wait_for_metric(node: &CloudNode, name: &str, want: f64) {
    let deadline = std::time::Instant::now() + WAIT;
    loop {
        let value = metric(node, name);
        if value == Some(want) {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{name} is {value:?}, not {want}, after {WAIT:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_join_token_bootstraps_the_node_certificate_and_a_bad_one_changes_nothing() {
    let hub = CloudHub::start(CloudHubOptions {
        require_node_cn: true,
        ..CloudHubOptions::default()
    })
    .unwrap();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();

    // A token whose hash names another CA: refused before anything is written.
    let other = wedge_tests::cloudhub::CloudCa::new().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let config = bootstrap_config(dir.path(), &hub, &other.token(NODE, now + 3600));
    let (mut node, _) = Daemon::run_local(
        &dir.path().join("data"),
        &["--config", config.to_str().unwrap()],
    )
    .unwrap();
    let status = node.wait_exit(WAIT).unwrap();
    assert!(!status.success());
    assert!(
        node.log().contains("certificate bootstrap"),
        "{}",
        node.log()
    );
    assert!(!dir.path().join("certs/server.crt").exists());
    assert!(!dir.path().join("certs/server.key").exists());

    // An expired token: refused too.
    let config = bootstrap_config(dir.path(), &hub, &hub.ca().expired_token(NODE));
    let (mut node, _) = Daemon::run_local(
        &dir.path().join("data"),
        &["--config", config.to_str().unwrap()],
    )
    .unwrap();
    assert!(!node.wait_exit(WAIT).unwrap().success());
    assert!(!dir.path().join("certs/server.crt").exists());

    // The cloud's own token: CA checked, key and CSR made, certificate issued, files written
    // (key 0600), and the node joins over mutual TLS with CN system:node:<node>.
    let config = bootstrap_config(dir.path(), &hub, &hub.ca().token(NODE, now + 3600));
    let (mut node, admin) = Daemon::run_local(
        &dir.path().join("data"),
        &["--config", config.to_str().unwrap()],
    )
    .unwrap();
    node.wait_healthy(admin, WAIT).unwrap();
    let session = hub
        .wait_connected(WAIT)
        .unwrap_or_else(|e| panic!("{e}\n{}", node.log()));
    assert_eq!(session.cn, format!("system:node:{NODE}"));
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(dir.path().join("certs/server.key"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
    node.stop(libc::SIGTERM, Duration::from_secs(10)).unwrap();
}
