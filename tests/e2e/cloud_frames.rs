//! Malformed frames from the cloud through the real daemon: with `wedge.edgeHub.maxFrameBytes`
//! small, the simulator writes a non-JSON frame, a JSON frame without `header`, edgecore
//! v1.15's all-empty shutdown message and an oversize (otherwise valid) pod insert. Each is
//! skipped with a logged reason, the malformed ones are counted on `/metrics`, and the same
//! session carries a valid pod insert to its ACK afterwards.

use std::time::Duration;

use wedge_core::{Content, Message};
use wedge_tests::cloud_node::{CloudNode, NodeOptions};
use wedge_tests::cloudhub::{CloudHub, CloudHubOptions};

const NODE: &str = "edge-1";
const WAIT: Duration = Duration::from_secs(15);
const MAX_FRAME: usize = 64 * 1024;

fn pod_insert(name: &str, uid: &str, padding: usize) -> Message {
    let content = format!(
        r#"{{"metadata":{{"name":"{name}","namespace":"default","uid":"{uid}","annotations":{{"pad":"{}"}}}},"spec":{{"nodeName":"{NODE}"}}}}"#,
        "x".repeat(padding)
    );
    let mut pod = Message::build(
        "edgecontroller",
        "resource",
        "insert",
        &format!("default/pod/{name}"),
        Content::from_raw(&content).unwrap(),
    );
    pod.header.resource_version = "1".into();
    pod
}

#[test]
fn malformed_and_oversize_frames_are_skipped_and_counted_and_the_session_stays_up() {
    let hub = CloudHub::start(CloudHubOptions::default()).unwrap();
    let wedge_extra = format!("  edgeHub:\n    maxFrameBytes: {MAX_FRAME}\n");
    // Debug for the link: the all-empty message is dropped (no destination) at debug level,
    // and the test checks that the log says so.
    let mut node = CloudNode::start_with(
        &hub,
        NodeOptions {
            wedge_extra: &wedge_extra,
            log_filter: Some("info,wedge_edgehub=debug"),
            ..NodeOptions::default()
        },
    )
    .unwrap();
    let session = hub
        .wait_connected(WAIT)
        .unwrap_or_else(|e| panic!("{e}\n{}", node.daemon.log()));

    // 1. Not JSON. 2. JSON without `header`. 3. Edgecore v1.15's all-empty shutdown message.
    hub.send_raw("this is not json\n").unwrap();
    hub.send_raw(
        "{\"route\":{\"source\":\"edgecontroller\",\"group\":\"resource\",\"operation\":\"insert\",\"resource\":\"default/pod/headless\"},\"content\":null}\n",
    )
    .unwrap();
    hub.send_raw("{\"header\":{},\"route\":{},\"content\":null}\n")
        .unwrap();
    // 4. A valid pod insert, but larger than the limit (and below twice the limit, where the
    // WebSocket layer itself would refuse it and break the link).
    let big = pod_insert("big", "u-big", MAX_FRAME + 1024);
    let big_text = String::from_utf8(big.to_cloud_vec()).unwrap() + "\n";
    assert!(big_text.len() > MAX_FRAME && big_text.len() < 2 * MAX_FRAME);
    hub.send_raw(big_text.clone()).unwrap();

    // Then a valid one on the same session: stored and ACKed.
    let pod = pod_insert("nginx", "u-1", 16);
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
    assert_eq!(
        ack.message.unwrap().content.as_string().as_deref(),
        Some("OK")
    );

    // The same session carried everything: no redial.
    let connections = hub.connections();
    assert_eq!(
        connections.len(),
        1,
        "{connections:?}\n{}",
        node.daemon.log()
    );
    assert_eq!(connections[0].opened, session.opened);
    assert!(connections[0].closed.is_none());

    // Frames are handled in arrival order, so the ACK means all four were handled already.
    let metrics = node.metrics().unwrap();
    assert_eq!(
        node.metric("wedge_edgehub_frames_malformed_total").ok(),
        Some(3.0),
        "non-JSON, headerless and oversize are malformed; the empty message is not:\n{metrics}"
    );
    assert_eq!(node.metric("wedge_edgehub_connects_total").ok(), Some(1.0));
    assert!(
        node.metric("wedge_edgehub_inbound_undeliverable_total")
            .unwrap_or(0.0)
            >= 1.0,
        "the empty message has no destination:\n{metrics}"
    );

    // Nothing of the skipped frames reached the node's state or the cloud.
    assert!(
        !hub.received()
            .iter()
            .any(|m| m.message.as_ref().is_some_and(|m| {
                m.route.operation == "response" && m.header.parent_id == big.header.id
            })),
        "the oversize pod was ACKed"
    );
    let db = rusqlite::Connection::open_with_flags(
        node.data.join("edgecore.db"),
        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY,
    )
    .unwrap();
    let keys: Vec<String> = db
        .prepare("SELECT key FROM meta WHERE type = 'pod' ORDER BY key")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(keys, ["default/pod/nginx"]);

    // The log says why each one was skipped.
    let log = node.daemon.log();
    let skipped: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("cloud frame skipped"))
        .collect();
    assert_eq!(skipped.len(), 3, "{log}");
    assert!(skipped[0].contains("malformed message"), "{}", skipped[0]);
    assert!(
        skipped[1].contains("malformed message") && skipped[1].contains("header"),
        "{}",
        skipped[1]
    );
    assert!(
        skipped[2].contains(&format!(
            "frame of {} bytes exceeds the {MAX_FRAME}-byte limit",
            big_text.len()
        )),
        "{}",
        skipped[2]
    );
    assert!(
        log.lines()
            .any(|l| l.contains("cloud message has no destination; dropped")),
        "{log}"
    );
    node.daemon
        .stop(libc::SIGTERM, Duration::from_secs(10))
        .unwrap();
}
