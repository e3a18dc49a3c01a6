//! Behaviour checks run the same way against the embedded broker and against mosquitto: `port`
//! is the broker the test's own MQTT clients use.

use std::time::{Duration, Instant};

use rumqttc::QoS;
use wedge_core::Content;
use wedge_eventbus::DropReason;

use super::{Node, TestClient, WAIT, drain, nothing, publish_until};

/// The twin topic of the acceptance criteria and its KubeEdge resource.
pub const TWIN_TOPIC: &str = "$hw/events/device/default/thermo-1/twin/update";
/// Padded URL-safe base64 of [`TWIN_TOPIC`].
pub const TWIN_RESOURCE: &str = "JGh3L2V2ZW50cy9kZXZpY2UvZGVmYXVsdC90aGVybW8tMS90d2luL3VwZGF0ZQ==";

/// Waits until the module hears the broker at all (its subscriptions may still be on their way
/// to an external broker), then empties the mailboxes.
pub async fn until_flowing(node: &mut Node, client: &TestClient) {
    publish_until(client, TWIN_TOPIC, "{}", &mut node.twin, TWIN_RESOURCE).await;
    // Let any earlier probe still in flight land before emptying the mailboxes.
    tokio::time::sleep(Duration::from_millis(300)).await;
    drain(&mut node.twin);
    drain(&mut node.cloud);
}

/// A device's twin update reaches `twin` as a `response` with the base64 resource.
pub async fn twin_update_reaches_twin(node: &mut Node, port: u16) {
    let client = TestClient::connect(port, "thermo-1").await;
    until_flowing(node, &client).await;
    let payload = r#"{"event_id":"e-1","twin":{"temperature":{"actual":{"value":"21.5"}}}}"#;
    client.publish(TWIN_TOPIC, payload).await;
    let msg = super::next(&mut node.twin).await;
    assert_eq!(msg.route.source, "bus");
    assert_eq!(msg.route.group, "user");
    assert_eq!(msg.route.operation, "response");
    assert_eq!(msg.route.resource, TWIN_RESOURCE);
    assert_eq!(msg.content.as_string().as_deref(), Some(payload));
    assert!(!msg.header.id.is_empty());
    // The legacy (≤ v1.16) device topic is heard too.
    let legacy = "$hw/events/device/thermo-1/twin/get";
    client.publish(legacy, "{}").await;
    let msg = super::next(&mut node.twin).await;
    assert_eq!(
        msg.route.resource,
        wedge_eventbus::topics::twin_resource(legacy)
    );
    nothing(&mut node.cloud, Duration::from_millis(300)).await;
}

/// A user topic (matched by `+/user/#`) reaches the cloud module as an `upload`.
pub async fn user_topic_reaches_cloud(node: &mut Node, port: u16) {
    let client = TestClient::connect(port, "line-app").await;
    until_flowing(node, &client).await;
    client.publish("factory/user/line1", "count=7").await;
    let msg = super::next(&mut node.cloud).await;
    assert_eq!(msg.route.source, "bus");
    assert_eq!(msg.route.group, "user");
    assert_eq!(msg.route.operation, "upload");
    assert_eq!(msg.route.resource, "factory/user/line1");
    assert_eq!(msg.content.as_string().as_deref(), Some("count=7"));
    // A topic nobody subscribed to goes nowhere.
    client.publish("factory/line1/user/x", "x").await;
    nothing(&mut node.cloud, Duration::from_millis(300)).await;
    nothing(&mut node.twin, Duration::from_millis(10)).await;
}

/// A bus `publish` reaches a real subscriber: QoS 1, not retained; string content as its text,
/// other JSON as sorted-key JSON. Also what the Wasm host sends (source `wasm`).
pub async fn bus_publish_reaches_subscriber(node: &mut Node, port: u16) {
    let mut sub = TestClient::connect(port, "app-sub").await;
    sub.subscribe("wedge/out/#").await;
    node.to_eventbus("wasm", "publish", "wedge/out/1", Content::string("hello"))
        .await;
    let p = sub.next_publish().await;
    assert_eq!(p.topic, "wedge/out/1");
    assert_eq!(&p.payload[..], b"hello");
    assert_eq!(p.qos, QoS::AtLeastOnce);
    assert!(!p.retain);
    let json = Content::from_raw(r#"{"z":true,"a":[1,2]}"#).unwrap();
    node.to_eventbus("twin", "publish", "wedge/out/2", json)
        .await;
    let p = sub.next_publish().await;
    assert_eq!(p.topic, "wedge/out/2");
    assert_eq!(&p.payload[..], br#"{"a":[1,2],"z":true}"#);
    // Null content is not published.
    node.to_eventbus("twin", "publish", "wedge/out/3", Content::null())
        .await;
    sub.no_publish(Duration::from_millis(300)).await;
    // A late subscriber gets nothing: the message was not retained.
    let mut late = TestClient::connect(port, "app-late").await;
    late.subscribe("wedge/out/#").await;
    late.no_publish(Duration::from_millis(300)).await;
}

/// `message` publishes the inner object as JSON on its topic; `get_result` for `auth_info`
/// publishes the content on the node's auth-info topic; unknown operations publish nothing.
pub async fn message_and_get_result(node: &mut Node, port: u16) {
    let mut sub = TestClient::connect(port, "ops-sub").await;
    sub.subscribe("wedge/msg/#").await;
    sub.subscribe("$hw/events/node/edge-test/authInfo/get/result")
        .await;
    let content =
        Content::from_raw(r#"{"message":{"topic":"wedge/msg/1","value":"42","a":1}}"#).unwrap();
    node.to_eventbus("twin", "message", "whatever", content)
        .await;
    let p = sub.next_publish().await;
    assert_eq!(p.topic, "wedge/msg/1");
    assert_eq!(
        &p.payload[..],
        br#"{"a":1,"topic":"wedge/msg/1","value":"42"}"#
    );

    let auth = Content::from_raw(r#"{"user":"u","token":"t"}"#).unwrap();
    node.to_eventbus("metamanager", "get_result", "auth_info", auth.clone())
        .await;
    let p = sub.next_publish().await;
    assert_eq!(p.topic, "$hw/events/node/edge-test/authInfo/get/result");
    assert_eq!(&p.payload[..], br#"{"token":"t","user":"u"}"#);

    let before = node.eventbus.stats().dropped(DropReason::Unpublishable);
    node.to_eventbus("metamanager", "get_result", "not_auth", auth)
        .await;
    node.to_eventbus("x", "frobnicate", "wedge/msg/2", Content::string("no"))
        .await;
    sub.no_publish(Duration::from_millis(400)).await;
    assert_eq!(
        node.eventbus.stats().dropped(DropReason::Unpublishable),
        before + 2
    );
}

/// A payload over the cap (the test node's is 1 KiB) is dropped; a small one after it arrives.
pub async fn oversized_payload_dropped(node: &mut Node, port: u16) {
    let client = TestClient::connect(port, "big-talker").await;
    until_flowing(node, &client).await;
    client.publish(TWIN_TOPIC, vec![b'x'; 4096]).await;
    client.publish(TWIN_TOPIC, "small").await;
    let msg = super::next(&mut node.twin).await;
    assert_eq!(msg.content.as_string().as_deref(), Some("small"));
    assert_eq!(node.eventbus.stats().dropped(DropReason::Oversized), 1);
}

/// The filter and topic used by the subscription scenarios.
pub const EXTRA_FILTER: &str = "plant/+/temp";
pub const EXTRA_TOPIC: &str = "plant/boiler/temp";

/// `subscribe` stores the filter in `sub_topics` and traffic on it arrives (as an upload).
pub async fn subscribe_adds_durable_topic(node: &mut Node, port: u16) {
    let client = TestClient::connect(port, "plant-sensor").await;
    until_flowing(node, &client).await;
    client.publish(EXTRA_TOPIC, "before").await;
    nothing(&mut node.cloud, Duration::from_millis(300)).await;
    node.to_eventbus("edgecontroller", "subscribe", EXTRA_FILTER, Content::null())
        .await;
    let msg = publish_until(&client, EXTRA_TOPIC, "80", &mut node.cloud, EXTRA_TOPIC).await;
    assert_eq!(msg.route.operation, "upload");
    assert_eq!(node.stored_topics().await, vec![EXTRA_FILTER.to_owned()]);
}

/// Traffic on the stored filter arrives (after a restart: the new instance subscribed from the
/// table).
pub async fn stored_topic_flows(node: &mut Node, port: u16) {
    let client = TestClient::connect(port, "plant-sensor-2").await;
    let msg = publish_until(&client, EXTRA_TOPIC, "81", &mut node.cloud, EXTRA_TOPIC).await;
    assert_eq!(msg.content.as_string().as_deref(), Some("81"));
}

/// `unsubscribe` removes the row and the traffic stops.
pub async fn unsubscribe_removes_topic(node: &mut Node, port: u16) {
    let client = TestClient::connect(port, "plant-sensor-3").await;
    node.to_eventbus(
        "edgecontroller",
        "unsubscribe",
        EXTRA_FILTER,
        Content::null(),
    )
    .await;
    let deadline = Instant::now() + WAIT;
    while !node.stored_topics().await.is_empty() {
        assert!(Instant::now() < deadline, "sub_topics row not removed");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // The unsubscribe may still be travelling to an external broker: publish the topic and then
    // a probe until a probe arrives with nothing of the topic before it.
    loop {
        drain(&mut node.cloud);
        client.publish(EXTRA_TOPIC, "after").await;
        client.publish("probe/user/x", "probe").await;
        let mut saw_topic = false;
        loop {
            let msg = super::next(&mut node.cloud).await;
            if msg.route.resource == EXTRA_TOPIC {
                saw_topic = true;
            } else if msg.route.resource == "probe/user/x" {
                break;
            }
        }
        if !saw_topic {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "traffic on {EXTRA_FILTER} did not stop"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
