//! The eventbus in mode 0: its embedded broker, real MQTT clients.

mod common;

use common::scenarios;
use common::{Node, free_port, settings};

fn embedded(port: u16) -> wedge_eventbus::EventBusSettings {
    let mut s = settings(0, port, free_port());
    // mqttQOS 1 so the subscriber sees QoS 1 (the external broker always gets QoS 1).
    s.qos = 1;
    s
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twin_update_reaches_twin() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let mut node = Node::start(dir.path(), embedded(port)).await;
    scenarios::twin_update_reaches_twin(&mut node, port).await;
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn user_topic_reaches_cloud() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let mut node = Node::start(dir.path(), embedded(port)).await;
    scenarios::user_topic_reaches_cloud(&mut node, port).await;
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bus_publish_reaches_subscriber() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let mut node = Node::start(dir.path(), embedded(port)).await;
    scenarios::bus_publish_reaches_subscriber(&mut node, port).await;
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn message_and_get_result() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let mut node = Node::start(dir.path(), embedded(port)).await;
    scenarios::message_and_get_result(&mut node, port).await;
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_payload_dropped() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let mut s = embedded(port);
    s.max_payload = 1024;
    let mut node = Node::start(dir.path(), s).await;
    scenarios::oversized_payload_dropped(&mut node, port).await;
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subscriptions_are_durable_across_restarts() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let mut node = Node::start(dir.path(), embedded(port)).await;
    scenarios::subscribe_adds_durable_topic(&mut node, port).await;
    node.stop().await;

    // A new module instance over the same database, on the same port.
    let mut node = Node::start(dir.path(), embedded(port)).await;
    assert_eq!(
        node.stored_topics().await,
        vec![scenarios::EXTRA_FILTER.to_owned()]
    );
    scenarios::stored_topic_flows(&mut node, port).await;
    scenarios::unsubscribe_removes_topic(&mut node, port).await;
    node.stop().await;

    let node = Node::start(dir.path(), embedded(port)).await;
    assert!(node.stored_topics().await.is_empty());
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_for_a_missing_module_are_dropped() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let mut node = Node::start(dir.path(), embedded(port)).await;
    let client = common::TestClient::connect(port, "dev").await;
    scenarios::until_flowing(&mut node, &client).await;
    // No twin module on the bus: twin-bound messages are dropped, others still flow.
    node.bus.unregister("twin");
    client.publish(scenarios::TWIN_TOPIC, "lost").await;
    client.publish("factory/user/after", "kept").await;
    let msg = common::next(&mut node.cloud).await;
    assert_eq!(msg.route.resource, "factory/user/after");
    assert_eq!(
        node.eventbus
            .stats()
            .dropped(wedge_eventbus::DropReason::NoDestination),
        1
    );
    node.stop().await;
}
