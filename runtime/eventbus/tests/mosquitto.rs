//! The eventbus in mode 2 against a real mosquitto the test starts (and kills), and in mode 1
//! with both brokers.

mod common;

use std::time::{Duration, Instant};

use common::scenarios::{self, TWIN_RESOURCE, TWIN_TOPIC};
use common::{Mosquitto, Node, TestClient, WAIT, free_port, publish_until, settings};
use wedge_core::Content;

fn external(broker: &Mosquitto) -> wedge_eventbus::EventBusSettings {
    settings(2, free_port(), broker.port)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twin_update_reaches_twin() {
    let broker = Mosquitto::start();
    let dir = tempfile::tempdir().unwrap();
    let mut node = Node::start(dir.path(), external(&broker)).await;
    scenarios::twin_update_reaches_twin(&mut node, broker.port).await;
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn user_topic_reaches_cloud() {
    let broker = Mosquitto::start();
    let dir = tempfile::tempdir().unwrap();
    let mut node = Node::start(dir.path(), external(&broker)).await;
    scenarios::user_topic_reaches_cloud(&mut node, broker.port).await;
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bus_publish_reaches_subscriber() {
    let broker = Mosquitto::start();
    let dir = tempfile::tempdir().unwrap();
    let mut node = Node::start(dir.path(), external(&broker)).await;
    scenarios::bus_publish_reaches_subscriber(&mut node, broker.port).await;
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn message_and_get_result() {
    let broker = Mosquitto::start();
    let dir = tempfile::tempdir().unwrap();
    let mut node = Node::start(dir.path(), external(&broker)).await;
    scenarios::message_and_get_result(&mut node, broker.port).await;
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_payload_dropped() {
    let broker = Mosquitto::start();
    let dir = tempfile::tempdir().unwrap();
    let mut s = external(&broker);
    s.max_payload = 1024;
    let mut node = Node::start(dir.path(), s).await;
    scenarios::oversized_payload_dropped(&mut node, broker.port).await;
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subscriptions_are_durable_across_restarts() {
    let broker = Mosquitto::start();
    let dir = tempfile::tempdir().unwrap();
    let s = external(&broker);
    let mut node = Node::start(dir.path(), s.clone()).await;
    scenarios::subscribe_adds_durable_topic(&mut node, broker.port).await;
    node.stop().await;

    let mut node = Node::start(dir.path(), s).await;
    scenarios::stored_topic_flows(&mut node, broker.port).await;
    scenarios::unsubscribe_removes_topic(&mut node, broker.port).await;
    node.stop().await;
}

/// Sends `publish` to the eventbus until `sub` receives it (the publishing connection may be
/// redialling).
async fn bus_publish_until(node: &Node, sub: &mut TestClient, topic: &str) {
    let deadline = Instant::now() + WAIT;
    loop {
        node.to_eventbus("wasm", "publish", topic, Content::string("ping"))
            .await;
        while let Some(p) = sub.publish_within(Duration::from_millis(300)).await {
            if p.topic == topic {
                return;
            }
        }
        assert!(
            Instant::now() < deadline,
            "bus publish on {topic} never arrived"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reconnects_and_resubscribes_after_broker_restart() {
    let mut broker = Mosquitto::start();
    let dir = tempfile::tempdir().unwrap();
    let mut node = Node::start(dir.path(), external(&broker)).await;
    node.to_eventbus(
        "edgecontroller",
        "subscribe",
        scenarios::EXTRA_FILTER,
        Content::null(),
    )
    .await;
    {
        let client = TestClient::connect(broker.port, "before-restart").await;
        publish_until(&client, TWIN_TOPIC, "1", &mut node.twin, TWIN_RESOURCE).await;
        publish_until(
            &client,
            scenarios::EXTRA_TOPIC,
            "1",
            &mut node.cloud,
            scenarios::EXTRA_TOPIC,
        )
        .await;
    }
    assert!(node.eventbus.stats().external_connected());

    broker.kill();
    let deadline = Instant::now() + WAIT;
    while node.eventbus.stats().external_connected() {
        assert!(Instant::now() < deadline, "loss of the broker not noticed");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    broker.restart();

    // Both the default subscriptions and the stored one are back, without any bus message.
    let client = TestClient::connect(broker.port, "after-restart").await;
    let msg = publish_until(&client, TWIN_TOPIC, "2", &mut node.twin, TWIN_RESOURCE).await;
    assert_eq!(msg.route.operation, "response");
    publish_until(
        &client,
        scenarios::EXTRA_TOPIC,
        "2",
        &mut node.cloud,
        scenarios::EXTRA_TOPIC,
    )
    .await;
    assert!(node.eventbus.stats().external_connected());

    // And the publishing connection is back too.
    let mut sub = TestClient::connect(broker.port, "after-restart-sub").await;
    sub.subscribe("wedge/out/#").await;
    bus_publish_until(&node, &mut sub, "wedge/out/after").await;
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mode_both_uses_both_brokers() {
    let broker = Mosquitto::start();
    let internal = free_port();
    let dir = tempfile::tempdir().unwrap();
    let mut s = settings(1, internal, broker.port);
    s.qos = 1;
    let mut node = Node::start(dir.path(), s).await;

    // MQTT → bus from either broker.
    let on_internal = TestClient::connect(internal, "dev-internal").await;
    let on_external = TestClient::connect(broker.port, "dev-external").await;
    publish_until(&on_internal, TWIN_TOPIC, "i", &mut node.twin, TWIN_RESOURCE).await;
    publish_until(&on_external, TWIN_TOPIC, "e", &mut node.twin, TWIN_RESOURCE).await;

    // Bus → MQTT to both.
    let mut sub_internal = TestClient::connect(internal, "sub-internal").await;
    let mut sub_external = TestClient::connect(broker.port, "sub-external").await;
    sub_internal.subscribe("wedge/out/#").await;
    sub_external.subscribe("wedge/out/#").await;
    node.to_eventbus(
        "wasm",
        "publish",
        "wedge/out/both",
        Content::string("twice"),
    )
    .await;
    for sub in [&mut sub_internal, &mut sub_external] {
        let p = sub.next_publish().await;
        assert_eq!(p.topic, "wedge/out/both");
        assert_eq!(&p.payload[..], b"twice");
        assert!(!p.retain);
    }
    node.stop().await;
}
