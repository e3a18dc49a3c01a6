//! The devicetwin module driven through the real bus, over a real SQLite file, under the real
//! supervisor. The test plays the modules around it: requests come in as eventbus, the cloud,
//! metamanager and edgehub send them, and what devicetwin sends arrives in `eventbus` and
//! `websocket` mailboxes registered on the same bus. Payloads are compared byte for byte
//! (`spec/kubeedge-compat.md` §5), with the module's clock and fresh ids read back from them.

mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use common::{HookCall, NODE, Node, Published, TwinRow, fill, mqtt_message, next, nothing};
use wedge_core::Message;
use wedge_devicetwin::definition::{DeviceDefinition, PropertyDefinition};
use wedge_devicetwin::effects::DesiredValue;
use wedge_devicetwin::settings::DeviceTwinSettings;

const THERMO: &str = "default/thermo-1";
const UPDATE: &str = "$hw/events/device/default/thermo-1/twin/update";
const RESULT: &str = "$hw/events/device/default/thermo-1/twin/update/result";
const DOCUMENT: &str = "$hw/events/device/default/thermo-1/twin/update/document";
const DELTA: &str = "$hw/events/device/default/thermo-1/twin/update/delta";
const GET: &str = "$hw/events/device/default/thermo-1/twin/get";
const GET_RESULT: &str = "$hw/events/device/default/thermo-1/twin/get/result";
const ATTRIBUTES: &str = "$hw/events/device/default/thermo-1/updated";
const MEMBERSHIP_UPDATED: &str = "$hw/events/node/edge-1/membership/updated";
const EDGE_UPDATED: &str = "device/default/thermo-1/twin/edge_updated";
const CLOUD_SYNC: &str = "device/default/thermo-1/twin/cloud_updated";

/// The stored twin of the spec's worked examples (§5.5), as edgecore's tables hold it.
const SEED_THERMO: &str = r#"
INSERT INTO device (id, name, description, state, last_online)
    VALUES ('default/thermo-1', 'thermo-1', '', 'online', '');
INSERT INTO device_twin (deviceid, name, description, expected, actual, expected_meta,
        actual_meta, expected_version, actual_version, optional, attr_type, metadata)
    VALUES ('default/thermo-1', 'temperature', '', '25', '20', '{"timestamp":1700000000000}',
        '{"timestamp":1700000000001}', '{"cloud":1,"edge":0}', '{"cloud":0,"edge":3}', 1,
        'int', '{}');
"#;

/// The spec's S1: a mapper reports `actual` 22.
const S1: &str = r#"{"event_id":"evt-1","timestamp":1700000000100,"twin":{"temperature":{"actual":{"value":"22"},"metadata":{"type":"int"}}}}"#;

fn settings() -> DeviceTwinSettings {
    DeviceTwinSettings::new(NODE)
}

/// Asserts `published` is `(topic, payload)` with `payload` = `template` filled in with `vars`.
fn assert_published(published: &Published, topic: &str, template: &str, vars: &[(&str, String)]) {
    assert_eq!(published.topic, topic, "{published:?}");
    assert_eq!(published.payload, fill(template, vars), "on {topic}");
}

/// A fresh id: a lowercase UUIDv4.
fn assert_fresh_id(id: &str) {
    assert_eq!(id.len(), 36, "{id:?}");
    assert_eq!(id.as_bytes()[14], b'4', "{id:?} is not a v4 UUID");
    assert!(
        id.chars()
            .all(|c| c == '-' || c.is_ascii_digit() || ('a'..='f').contains(&c)),
        "{id:?}"
    );
}

fn now_ms() -> i64 {
    wedge_core::time::now_ms()
}

/// Asserts a message to the cloud is routed as §5.7 says.
fn assert_cloud_route(msg: &Message, operation: &str, resource: &str) {
    assert_eq!(
        (
            msg.route.source.as_str(),
            msg.route.group.as_str(),
            msg.route.operation.as_str(),
            msg.route.resource.as_str()
        ),
        ("twin", "resource", operation, resource),
        "{msg:?}"
    );
    assert!(msg.header.parent_id.is_empty(), "{msg:?}");
    assert_fresh_id(&msg.header.id);
}

/// Connects the cloud and returns the membership detail request that follows, checked.
async fn connect(node: &mut Node) -> Message {
    node.connection(true).await;
    let ask = next(&mut node.cloud).await;
    assert_cloud_route(&ask, "get", "membership/detail");
    let text = ask
        .content
        .as_string()
        .expect("the detail request is carried as a string");
    let value: serde_json::Value = serde_json::from_str(&text).unwrap();
    let event_id = value["event_id"].as_str().unwrap().to_owned();
    assert_fresh_id(&event_id);
    let vars = [
        ("id", event_id),
        ("now", value["timestamp"].as_i64().unwrap().to_string()),
    ];
    assert_eq!(
        text,
        fill(
            r#"{"event_type":"group_membership_event","event_id":"{id}","group_id":"edge-1","operation":"detail","timestamp":{now}}"#,
            &vars
        )
    );
    ask
}

const MEMBERSHIP_ADD: &str = r#"{"event_id":"mem-1","timestamp":1700000000100,"added_devices":[{"id":"default/thermo-1","name":"thermo-1","description":"boiler","state":"unknown","attributes":{"unit":{"value":"celsius","optional":false,"metadata":{"type":"string"}}},"twin":{"temperature":{"expected":{"value":"25"},"actual":{"value":"20"},"optional":true,"metadata":{"type":"int"},"expected_version":{"cloud":1,"edge":0},"actual_version":{"cloud":0,"edge":3}}}}],"removed_devices":null}"#;

/// Receives and checks the four publishes of [`MEMBERSHIP_ADD`]; returns the module's clock.
async fn membership_added(node: &mut Node) -> i64 {
    let out = node.publishes(4).await;
    let now = out[0].timestamp();
    let (delta_id, announce_id) = (out[1].event_id(), out[3].event_id());
    assert_fresh_id(&delta_id);
    assert_fresh_id(&announce_id);
    assert_ne!(delta_id, announce_id);
    let current = r#"{"expected":{"value":"25","metadata":{"timestamp":{now}}},"actual":{"value":"20","metadata":{"timestamp":{now}}},"optional":true,"metadata":{"type":"int"}}"#;
    let vars = [("now", now.to_string())];
    let current = fill(current, &vars);
    assert_published(
        &out[0],
        DOCUMENT,
        &format!(
            r#"{{"event_id":"","timestamp":{{now}},"twin":{{"temperature":{{"last":null,"current":{current}}}}}}}"#
        ),
        &vars,
    );
    assert_published(
        &out[1],
        DELTA,
        &format!(
            r#"{{"event_id":"{{id}}","timestamp":{{now}},"twin":{{"temperature":{current}}},"delta":{{"temperature":"25"}}}}"#
        ),
        &[("now", now.to_string()), ("id", delta_id)],
    );
    assert_published(
        &out[2],
        ATTRIBUTES,
        r#"{"event_id":"","timestamp":{now},"attributes":{"unit":{"value":"celsius","optional":false,"metadata":{"type":"string"}}}}"#,
        &vars,
    );
    assert_published(
        &out[3],
        MEMBERSHIP_UPDATED,
        r#"{"event_id":"{id}","timestamp":{now},"added_devices":[{"id":"default/thermo-1","name":"thermo-1","description":"boiler","state":"unknown","attributes":{"unit":{"value":"celsius","optional":false,"metadata":{"type":"string"}}},"twin":{"temperature":{"expected":{"value":"25"},"actual":{"value":"20"},"optional":true,"metadata":{"type":"int"}}}}],"removed_devices":null}"#,
        &[("now", now.to_string()), ("id", announce_id)],
    );
    now
}

#[tokio::test]
async fn membership_update_adds_a_device_with_all_its_rows_then_removes_it() {
    let dir = tempfile::tempdir().unwrap();
    let mut node = Node::start(dir.path(), settings(), "").await;

    node.cloud_sends("update", "membership", MEMBERSHIP_ADD)
        .await;
    let now = membership_added(&mut node).await;
    // Published only after the commit: another connection sees every row now.
    let device: (String, String, String, String, String) = node
        .db()
        .query_row(
            "SELECT id, name, description, state, last_online FROM device",
            [],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?)),
        )
        .unwrap();
    assert_eq!(
        device,
        (
            THERMO.into(),
            "thermo-1".into(),
            "boiler".into(),
            "unknown".into(),
            String::new()
        )
    );
    let attr: (String, String, String, String, bool, String, String) = node
        .db()
        .query_row(
            "SELECT deviceid, name, description, value, optional, attr_type, metadata
             FROM device_attr",
            [],
            |r| {
                Ok((
                    r.get(0)?,
                    r.get(1)?,
                    r.get(2)?,
                    r.get(3)?,
                    r.get(4)?,
                    r.get(5)?,
                    r.get(6)?,
                ))
            },
        )
        .unwrap();
    assert_eq!(
        attr,
        (
            THERMO.into(),
            "unit".into(),
            String::new(),
            "celsius".into(),
            false,
            "string".into(),
            "{}".into()
        )
    );
    assert_eq!(node.rows("device_twin", THERMO), 1);
    let meta = format!(r#"{{"timestamp":{now}}}"#);
    assert_eq!(
        node.twin_row(THERMO, "temperature").unwrap(),
        TwinRow {
            expected: "25".into(),
            actual: "20".into(),
            expected_meta: meta.clone(),
            actual_meta: meta,
            expected_version: r#"{"cloud":1,"edge":0}"#.into(),
            actual_version: r#"{"cloud":0,"edge":3}"#.into(),
            optional: true,
            attr_type: "int".into(),
            metadata: "{}".into(),
        }
    );
    // The desired value differs from the reported one: the mapper hears it, after the commit.
    let desired = HookCall::Desired {
        value: DesiredValue {
            device: THERMO.into(),
            key: "temperature".into(),
            value: "25".into(),
            value_type: "int".into(),
        },
        stored_expected: Some("25".into()),
    };
    assert_eq!(node.hooks.calls(), std::slice::from_ref(&desired));

    node.cloud_sends(
        "update",
        "membership",
        r#"{"event_id":"mem-2","timestamp":1700000000200,"added_devices":null,"removed_devices":[{"id":"default/thermo-1","name":"thermo-1"}]}"#,
    )
    .await;
    let removed = node.next_publish().await;
    let removal_id = removed.event_id();
    assert_fresh_id(&removal_id);
    assert_published(
        &removed,
        MEMBERSHIP_UPDATED,
        r#"{"event_id":"{id}","timestamp":{now},"added_devices":null,"removed_devices":[{"id":"default/thermo-1","name":"thermo-1"}]}"#,
        &[("id", removal_id), ("now", removed.timestamp().to_string())],
    );
    for table in ["device", "device_attr", "device_twin"] {
        assert_eq!(node.rows(table, THERMO), 0, "{table}");
    }
    let calls = node.hooks.calls();
    assert!(
        matches!(calls.as_slice(), [d, HookCall::Removed { device, .. }] if *d == desired && device == THERMO),
        "{calls:?}"
    );
    assert!(node.twin.cache().device(THERMO).is_none());
    assert!(node.probe().await.is_empty());
    node.stop().await;
}

/// `membership.rs` promises "the caller tells the mappers after the commit"; a mapper told
/// earlier stops driving a device whose removal may still fail (and be undone by the reload).
#[tokio::test]
async fn membership_removal_tells_the_hooks_after_the_commit() {
    let dir = tempfile::tempdir().unwrap();
    let mut node = Node::start(dir.path(), settings(), "").await;
    node.cloud_sends("update", "membership", MEMBERSHIP_ADD)
        .await;
    membership_added(&mut node).await;
    node.cloud_sends(
        "update",
        "membership",
        r#"{"event_id":"mem-2","timestamp":1,"removed_devices":[{"id":"default/thermo-1"}]}"#,
    )
    .await;
    assert_eq!(node.next_publish().await.topic, MEMBERSHIP_UPDATED);
    assert_eq!(
        node.hooks.calls().last(),
        Some(&HookCall::Removed {
            device: THERMO.into(),
            rows_then: 0
        }),
        "the device row still existed when the hook was told"
    );
    node.stop().await;
}

#[tokio::test]
async fn mapper_update_publishes_result_document_delta_and_edge_updated_only_while_connected() {
    let dir = tempfile::tempdir().unwrap();
    let mut node = Node::start(dir.path(), settings(), SEED_THERMO).await;
    connect(&mut node).await;

    node.mqtt(UPDATE, S1).await;
    let out = node.publishes(3).await;
    let now = out[0].timestamp().to_string();
    let delta_id = out[2].event_id();
    assert_fresh_id(&delta_id);
    let vars = [("now", now.clone()), ("id", delta_id)];
    assert_published(
        &out[0],
        RESULT,
        r#"{"event_id":"evt-1","timestamp":{now},"twin":{"temperature":{"actual":{"value":"22","metadata":{"timestamp":{now}}},"optional":true,"metadata":{"type":"int"}}}}"#,
        &vars,
    );
    assert_published(
        &out[1],
        DOCUMENT,
        r#"{"event_id":"evt-1","timestamp":{now},"twin":{"temperature":{"last":{"expected":{"value":"25","metadata":{"timestamp":1700000000000}},"actual":{"value":"20","metadata":{"timestamp":1700000000001}},"optional":true,"metadata":{"type":"int"}},"current":{"expected":{"value":"25","metadata":{"timestamp":1700000000000}},"actual":{"value":"22","metadata":{"timestamp":{now}}},"optional":true,"metadata":{"type":"int"}}}}}"#,
        &vars,
    );
    assert_published(
        &out[2],
        DELTA,
        r#"{"event_id":"{id}","timestamp":{now},"twin":{"temperature":{"expected":{"value":"25","metadata":{"timestamp":1700000000000}},"actual":{"value":"22","metadata":{"timestamp":{now}}},"optional":true,"metadata":{"type":"int"}}},"delta":{"temperature":"25"}}"#,
        &vars,
    );

    let edge_updated = next(&mut node.cloud).await;
    assert_cloud_route(&edge_updated, "update", EDGE_UPDATED);
    let content: serde_json::Value = serde_json::from_str(edge_updated.content.raw()).unwrap();
    let event_id = content["event_id"].as_str().unwrap().to_owned();
    assert_fresh_id(&event_id);
    assert_ne!(
        event_id, vars[1].1,
        "delta and edge_updated have their own ids"
    );
    assert_eq!(
        edge_updated.content.raw(),
        fill(
            r#"{"event_id":"{id}","timestamp":{now},"twin":{"temperature":{"actual":{"value":"22","metadata":{"timestamp":{now}}},"optional":true,"metadata":{"type":"int"},"actual_version":{"cloud":0,"edge":4}}}}"#,
            &[("now", now.clone()), ("id", event_id)]
        ),
        "edge_updated is a JSON object, not a string"
    );
    let row = node.twin_row(THERMO, "temperature").unwrap();
    assert_eq!(
        (row.actual.as_str(), row.actual_version.as_str()),
        ("22", r#"{"cloud":0,"edge":4}"#)
    );
    assert_eq!(row.actual_meta, format!(r#"{{"timestamp":{now}}}"#));
    assert_eq!(
        (row.expected_version.as_str(), row.expected_meta.as_str()),
        (r#"{"cloud":1,"edge":0}"#, r#"{"timestamp":1700000000000}"#),
        "the desired side is untouched"
    );

    node.connection(false).await;
    node.mqtt(
        UPDATE,
        r#"{"event_id":"evt-2","timestamp":1700000000200,"twin":{"temperature":{"actual":{"value":"23"}}}}"#,
    )
    .await;
    let out = node.publishes(3).await;
    let topics: Vec<&str> = out.iter().map(|p| p.topic.as_str()).collect();
    assert_eq!(topics, [RESULT, DOCUMENT, DELTA]);
    assert_eq!(out[0].event_id(), "evt-2");
    assert!(node.probe().await.is_empty());
    // The probe's result left after every output of evt-2: nothing went to the cloud.
    assert!(node.cloud.try_recv().is_none());
    assert_eq!(node.metric("wedge_devicetwin_cloud_dropped_total"), 1.0);
    let row = node.twin_row(THERMO, "temperature").unwrap();
    assert_eq!(
        (row.actual.as_str(), row.actual_version.as_str()),
        ("23", r#"{"cloud":0,"edge":5}"#),
        "edge versions count on while disconnected"
    );
    node.stop().await;
}

/// A mapper deletes a twin it created with a report: the cloud gets what edgecore v1.23.1 sends
/// (seen against CloudCore v1.23.1), and the desired side, which never had a version, gets none.
#[tokio::test]
async fn a_mapper_deletion_reports_only_the_sides_that_had_versions() {
    let dir = tempfile::tempdir().unwrap();
    let mut node = Node::start(dir.path(), settings(), SEED_THERMO).await;
    connect(&mut node).await;

    node.mqtt(
        UPDATE,
        r#"{"event_id":"add","timestamp":0,"twin":{"humidity":{"actual":{"value":"40"},"metadata":{"type":"int"}}}}"#,
    )
    .await;
    node.publishes(3).await;
    let added = next(&mut node.cloud).await;
    assert_cloud_route(&added, "update", EDGE_UPDATED);

    node.mqtt(
        UPDATE,
        r#"{"event_id":"del","timestamp":0,"twin":{"humidity":null}}"#,
    )
    .await;
    let out = node.publishes(3).await;
    assert_eq!(out[0].topic, RESULT);
    let now = out[0].timestamp().to_string();
    let deleted = next(&mut node.cloud).await;
    assert_cloud_route(&deleted, "update", EDGE_UPDATED);
    let content: serde_json::Value = serde_json::from_str(deleted.content.raw()).unwrap();
    let event_id = content["event_id"].as_str().unwrap().to_owned();
    assert_fresh_id(&event_id);
    assert_eq!(
        deleted.content.raw(),
        fill(
            r#"{"event_id":"{id}","timestamp":{now},"twin":{"humidity":{"actual":{},"optional":true,"metadata":{"type":"deleted"},"expected_version":{"cloud":0,"edge":0},"actual_version":{"cloud":0,"edge":2}}}}"#,
            &[("now", now), ("id", event_id)]
        )
    );
    let row = node.twin_row(THERMO, "humidity").unwrap();
    assert_eq!(
        (
            row.attr_type.as_str(),
            row.expected_version.as_str(),
            row.actual_version.as_str()
        ),
        ("deleted", "", r#"{"cloud":0,"edge":2}"#)
    );

    // A twin with both sides: both come back empty, both versions bumped.
    node.mqtt(
        UPDATE,
        r#"{"event_id":"del2","timestamp":0,"twin":{"temperature":null}}"#,
    )
    .await;
    node.publishes(2).await;
    let deleted = next(&mut node.cloud).await;
    let content: serde_json::Value = serde_json::from_str(deleted.content.raw()).unwrap();
    assert_eq!(
        content["twin"].to_string(),
        r#"{"temperature":{"actual":{},"actual_version":{"cloud":0,"edge":4},"expected":{},"expected_version":{"cloud":1,"edge":1},"metadata":{"type":"deleted"},"optional":true}}"#
    );
    node.stop().await;
}

#[tokio::test]
async fn with_an_outbox_cloud_messages_are_stored_with_their_twin_change_even_while_disconnected() {
    let dir = tempfile::tempdir().unwrap();
    let mut node = Node::start_with_outbox(dir.path(), settings(), SEED_THERMO).await;

    // Offline: edgecore would drop the edge_updated; here it is stored with the twin row.
    node.mqtt(UPDATE, S1).await;
    let out = node.publishes(3).await;
    assert_eq!(out[0].topic, RESULT);
    let rows = node.outbox_rows();
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(rows[0].0, EDGE_UPDATED);
    let stored = Message::from_slice(rows[0].1.as_bytes()).unwrap();
    assert_cloud_route(&stored, "update", EDGE_UPDATED);
    assert!(
        stored.content.raw().contains(r#""actual":{"value":"22","#),
        "{}",
        stored.content.raw()
    );
    assert!(
        stored
            .content
            .raw()
            .contains(r#""actual_version":{"cloud":0,"edge":4}"#)
    );
    assert_eq!(
        node.twin_row(THERMO, "temperature").unwrap().actual,
        "22",
        "the row and its cloud message are in the same commit"
    );
    assert_eq!(node.metric("wedge_devicetwin_cloud_dropped_total"), 0.0);
    assert_eq!(node.metric("wedge_devicetwin_cloud_pending"), 0.0);

    // Online: the membership detail request and the next edge_updated go to the outbox too
    // (the link sends from there), in order, and are pending until the cloud confirms them.
    node.connection(true).await;
    node.mqtt(
        UPDATE,
        r#"{"event_id":"evt-2","timestamp":1700000000200,"twin":{"temperature":{"actual":{"value":"23"}}}}"#,
    )
    .await;
    node.publishes(3).await;
    assert!(node.probe().await.is_empty());
    let resources: Vec<String> = node.outbox_rows().into_iter().map(|(r, _)| r).collect();
    assert_eq!(resources, [EDGE_UPDATED, "membership/detail", EDGE_UPDATED]);
    assert!(
        node.cloud.try_recv().is_none(),
        "nothing bypasses the outbox"
    );
    assert_eq!(node.metric("wedge_devicetwin_cloud_pending"), 2.0);
    node.stop().await;
}

#[tokio::test]
async fn unconfirmed_cloud_messages_are_resent_unchanged_until_confirmed_and_dropped_on_disconnect()
{
    let dir = tempfile::tempdir().unwrap();
    let settings = DeviceTwinSettings {
        resend_after: Duration::from_millis(300),
        ..settings()
    };
    let mut node = Node::start(dir.path(), settings, SEED_THERMO).await;
    let ask = connect(&mut node).await;
    node.mqtt(UPDATE, S1).await;
    node.publishes(3).await;
    let edge_updated = next(&mut node.cloud).await;
    assert_cloud_route(&edge_updated, "update", EDGE_UPDATED);
    let sent_at = Instant::now();
    assert_eq!(node.metric("wedge_devicetwin_cloud_pending"), 2.0);

    // Nothing confirmed: after an idle period both come again, in sending order, unchanged
    // (same msg_id, same timestamp, same content).
    let first = next(&mut node.cloud).await;
    let second = next(&mut node.cloud).await;
    assert!(sent_at.elapsed() >= Duration::from_millis(300));
    assert_eq!(first, ask);
    assert_eq!(second, edge_updated);
    assert_eq!(node.metric("wedge_devicetwin_cloud_resent_total"), 2.0);

    // The cloud confirms the detail request: only edge_updated keeps coming back.
    node.confirm(&ask.header.id).await;
    let mut again = Vec::new();
    let window = Instant::now() + Duration::from_secs(6);
    while let Ok(Some(msg)) = tokio::time::timeout_at(window.into(), node.cloud.recv()).await {
        again.push(msg);
    }
    assert!(!again.is_empty(), "edge_updated was not re-sent");
    assert!(
        again.iter().all(|m| *m == edge_updated),
        "only the unconfirmed message is re-sent: {again:?}"
    );
    assert_eq!(node.metric("wedge_devicetwin_cloud_pending"), 1.0);

    // Disconnected: everything pending is dropped and never re-sent.
    node.connection(false).await;
    assert!(node.probe().await.is_empty());
    assert_eq!(node.metric("wedge_devicetwin_cloud_pending"), 0.0);
    // A resend may have left between the end of the window above and the disconnect; once
    // the probe is answered the disconnect is handled, so anything later would be a bug.
    while let Some(msg) = node.cloud.try_recv() {
        assert_eq!(msg, edge_updated, "only resends from before the disconnect");
    }
    nothing(&mut node.cloud, Duration::from_millis(5500)).await;

    // A new connection asks for the detail again, as a new message.
    let ask_again = connect(&mut node).await;
    assert_ne!(ask_again.header.id, ask.header.id);
    assert_eq!(node.metric("wedge_devicetwin_cloud_pending"), 1.0);
    node.stop().await;
}

#[tokio::test]
async fn cloud_sync_applies_a_newer_version_and_sends_back_a_rejected_older_one() {
    let dir = tempfile::tempdir().unwrap();
    let mut node = Node::start(dir.path(), settings(), SEED_THERMO).await;
    connect(&mut node).await;

    node.cloud_sends(
        "update",
        CLOUD_SYNC,
        r#"{"event_id":"sync-1","timestamp":1700000000300,"twin":{"temperature":{"expected":{"value":"30"},"optional":true,"metadata":{"type":"int"},"expected_version":{"cloud":2,"edge":0}}}}"#,
    )
    .await;
    let out = node.publishes(2).await;
    let now = out[0].timestamp().to_string();
    let delta_id = out[1].event_id();
    assert_fresh_id(&delta_id);
    let vars = [("now", now.clone()), ("id", delta_id)];
    assert_published(
        &out[0],
        DOCUMENT,
        r#"{"event_id":"sync-1","timestamp":{now},"twin":{"temperature":{"last":{"expected":{"value":"25","metadata":{"timestamp":1700000000000}},"actual":{"value":"20","metadata":{"timestamp":1700000000001}},"optional":true,"metadata":{"type":"int"}},"current":{"expected":{"value":"30","metadata":{"timestamp":{now}}},"actual":{"value":"20","metadata":{"timestamp":1700000000001}},"optional":true,"metadata":{"type":"int"}}}}}"#,
        &vars,
    );
    assert_published(
        &out[1],
        DELTA,
        r#"{"event_id":"{id}","timestamp":{now},"twin":{"temperature":{"expected":{"value":"30","metadata":{"timestamp":{now}}},"actual":{"value":"20","metadata":{"timestamp":1700000000001}},"optional":true,"metadata":{"type":"int"}}},"delta":{"temperature":"30"}}"#,
        &vars,
    );
    assert!(node.probe().await.is_empty(), "a sync has no result");
    assert!(
        node.cloud.try_recv().is_none(),
        "an accepted sync sends no edge_updated"
    );
    assert_eq!(
        node.hooks.calls(),
        [
            // At start: the stored desired value the device never reported goes out again.
            HookCall::Desired {
                value: DesiredValue {
                    device: THERMO.into(),
                    key: "temperature".into(),
                    value: "25".into(),
                    value_type: "int".into(),
                },
                stored_expected: Some("25".into()),
            },
            HookCall::Desired {
                value: DesiredValue {
                    device: THERMO.into(),
                    key: "temperature".into(),
                    value: "30".into(),
                    value_type: "int".into(),
                },
                stored_expected: Some("30".into()),
            }
        ],
        "the hook hears the desired value, after its commit"
    );
    let accepted = node.twin_row(THERMO, "temperature").unwrap();
    assert_eq!(
        (
            accepted.expected.as_str(),
            accepted.expected_version.as_str(),
            accepted.expected_meta.clone()
        ),
        (
            "30",
            r#"{"cloud":2,"edge":0}"#,
            format!(r#"{{"timestamp":{now}}}"#)
        )
    );

    // The cloud is behind (cloud 1 < 2): rejected, the edge's side goes back to it.
    node.cloud_sends(
        "update",
        CLOUD_SYNC,
        r#"{"event_id":"sync-2","timestamp":1700000000400,"twin":{"temperature":{"expected":{"value":"27"},"expected_version":{"cloud":1,"edge":0}}}}"#,
    )
    .await;
    let delta = node.next_publish().await;
    let later = delta.timestamp().to_string();
    let delta_id = delta.event_id();
    assert_fresh_id(&delta_id);
    assert_published(
        &delta,
        DELTA,
        r#"{"event_id":"{id}","timestamp":{later},"twin":{"temperature":{"expected":{"value":"30","metadata":{"timestamp":{now}}},"actual":{"value":"20","metadata":{"timestamp":1700000000001}},"optional":true,"metadata":{"type":"int"}}},"delta":{"temperature":"30"}}"#,
        &[
            ("id", delta_id),
            ("later", later.clone()),
            ("now", now.clone()),
        ],
    );
    assert!(node.probe().await.is_empty(), "no document for a rejection");
    let back = next(&mut node.cloud).await;
    assert_cloud_route(&back, "update", EDGE_UPDATED);
    let content: serde_json::Value = serde_json::from_str(back.content.raw()).unwrap();
    let back_id = content["event_id"].as_str().unwrap().to_owned();
    assert_fresh_id(&back_id);
    assert_eq!(
        back.content.raw(),
        fill(
            r#"{"event_id":"{id}","timestamp":{later},"twin":{"temperature":{"expected":{"value":"30","metadata":{"timestamp":{now}}},"optional":true,"metadata":{"type":"int"},"expected_version":{"cloud":2,"edge":0}}}}"#,
            &[("id", back_id), ("later", later), ("now", now)]
        )
    );
    assert_eq!(node.hooks.calls().len(), 2, "{:?}", node.hooks.calls());
    assert_eq!(node.twin_row(THERMO, "temperature").unwrap(), accepted);
    node.stop().await;
}

const DEVICE_OBJECT: &str = r#"{"apiVersion":"devices.kubeedge.io/v1beta1","kind":"Device","metadata":{"labels":{"description":"boiler-room"},"name":"thermo-2","namespace":"default"},"spec":{"deviceModelRef":{"name":"thermo-model"},"nodeName":"edge-1","properties":[{"collectCycle":1000,"name":"temperature","reportCycle":5000,"reportToCloud":true,"visitors":{"configData":{"offset":0,"register":"HoldingRegister"},"protocolName":"modbus-tcp"}},{"desired":{"metadata":{"timestamp":"1700000000000"},"value":"25"},"name":"setpoint","visitors":{"configData":{"offset":1},"protocolName":"modbus-tcp"}}],"protocol":{"configData":{"address":"192.168.1.20:502","slave_id":1},"protocolName":"modbus-tcp"}}}"#;

const MODEL_OBJECT: &str = r#"{"apiVersion":"devices.kubeedge.io/v1beta1","kind":"DeviceModel","metadata":{"name":"thermo-model","namespace":"default"},"spec":{"properties":[{"accessMode":"ReadOnly","maximum":"85","minimum":"-40","name":"temperature","type":"FLOAT","unit":"celsius"},{"accessMode":"ReadWrite","name":"setpoint","type":"INT"}],"protocol":"modbus-tcp"}}"#;

#[tokio::test]
async fn device_objects_from_metamanager_define_devices_for_the_hooks() {
    let dir = tempfile::tempdir().unwrap();
    let mut node = Node::start(dir.path(), settings(), "").await;
    let id = "default/thermo-2";

    // The device comes before its model: it waits.
    node.meta_sends("insert", "default/device/thermo-2", DEVICE_OBJECT)
        .await;
    assert!(node.probe().await.is_empty());
    assert!(node.hooks.calls().is_empty(), "{:?}", node.hooks.calls());
    assert_eq!(node.rows("device", id), 0);

    let before = now_ms();
    node.meta_sends("insert", "default/devicemodel/thermo-model", MODEL_OBJECT)
        .await;
    assert!(
        node.probe().await.is_empty(),
        "a definition publishes nothing"
    );
    let after = now_ms();
    let expected = DeviceDefinition {
        id: id.into(),
        protocol: "modbus-tcp".into(),
        protocol_config: r#"{"address":"192.168.1.20:502","slave_id":1}"#.into(),
        properties: vec![
            PropertyDefinition {
                name: "temperature".into(),
                value_type: "float".into(),
                visitor: r#"{"offset":0,"register":"HoldingRegister"}"#.into(),
                collect_cycle_ms: 1000,
                desired: None,
                report_to_cloud: true,
                report_cycle_ms: 5000,
                ..Default::default()
            },
            PropertyDefinition {
                name: "setpoint".into(),
                value_type: "int".into(),
                visitor: r#"{"offset":1}"#.into(),
                collect_cycle_ms: 0,
                desired: Some("25".into()),
                ..Default::default()
            },
        ],
        name: "thermo-2".into(),
        description: "boiler-room".into(),
        model: "default/thermo-model".into(),
        device: wedge_devicetwin::definition::parse_device_json(DEVICE_OBJECT.as_bytes()).unwrap(),
        device_model: wedge_devicetwin::definition::parse_model_json(MODEL_OBJECT.as_bytes())
            .unwrap(),
    };
    let desired = HookCall::Desired {
        value: DesiredValue {
            device: id.into(),
            key: "setpoint".into(),
            value: "25".into(),
            value_type: "int".into(),
        },
        stored_expected: Some("25".into()),
    };
    assert_eq!(
        node.hooks.calls(),
        [HookCall::Defined(expected.clone()), desired.clone()],
        "the mappers hear the definition, then (after the commit) its desired value"
    );

    // Its rows: one twin per property, typed by the model, the desired value as a cloud write.
    let device: (String, String, String, String) = node
        .db()
        .query_row(
            "SELECT name, description, state, last_online FROM device WHERE id = ?1",
            [id],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
        )
        .unwrap();
    assert_eq!(
        device,
        (
            "thermo-2".into(),
            "boiler-room".into(),
            String::new(),
            String::new()
        )
    );
    assert_eq!(node.rows("device_attr", id), 0);
    assert_eq!(
        node.twin_row(id, "temperature").unwrap(),
        TwinRow {
            expected: String::new(),
            actual: String::new(),
            expected_meta: String::new(),
            actual_meta: String::new(),
            expected_version: String::new(),
            actual_version: String::new(),
            optional: false,
            attr_type: "float".into(),
            metadata: "{}".into(),
        }
    );
    let setpoint = node.twin_row(id, "setpoint").unwrap();
    let stamped: serde_json::Value = serde_json::from_str(&setpoint.expected_meta).unwrap();
    let stamped = stamped["timestamp"].as_i64().unwrap();
    assert!((before..=after).contains(&stamped), "{stamped}");
    assert_eq!(
        setpoint,
        TwinRow {
            expected: "25".into(),
            actual: String::new(),
            expected_meta: format!(r#"{{"timestamp":{stamped}}}"#),
            actual_meta: String::new(),
            expected_version: r#"{"cloud":1,"edge":0}"#.into(),
            actual_version: String::new(),
            optional: false,
            attr_type: "int".into(),
            metadata: "{}".into(),
        }
    );

    // The new device answers a twin get like any other.
    node.mqtt(
        "$hw/events/device/default/thermo-2/twin/get",
        r#"{"event_id":"get-1"}"#,
    )
    .await;
    let got = node.next_publish().await;
    assert_published(
        &got,
        "$hw/events/device/default/thermo-2/twin/get/result",
        r#"{"event_id":"get-1","timestamp":{now},"twin":{"setpoint":{"expected":{"value":"25","metadata":{"timestamp":{stamped}}},"optional":false,"metadata":{"type":"int"}},"temperature":{"optional":false,"metadata":{"type":"float"}}}}"#,
        &[
            ("now", got.timestamp().to_string()),
            ("stamped", stamped.to_string()),
        ],
    );

    // The same object again changes nothing.
    node.meta_sends("update", "default/device/thermo-2", DEVICE_OBJECT)
        .await;
    assert!(node.probe().await.is_empty());
    assert_eq!(node.hooks.calls().len(), 2);

    // Deleted: the mapper stops driving it; its rows wait for the cloud's membership removal.
    node.meta_sends("delete", "default/device/thermo-2", "")
        .await;
    assert!(node.probe().await.is_empty());
    assert_eq!(
        node.hooks.calls(),
        [
            HookCall::Defined(expected),
            desired,
            HookCall::Removed {
                device: id.into(),
                rows_then: 1
            }
        ]
    );
    assert_eq!(node.rows("device", id), 1);
    assert_eq!(node.rows("device_twin", id), 2);
    node.stop().await;
}

#[tokio::test]
async fn a_restarted_module_answers_from_what_sqlite_holds() {
    let dir = tempfile::tempdir().unwrap();
    let mut node = Node::start(dir.path(), settings(), "").await;
    node.cloud_sends("update", "membership", MEMBERSHIP_ADD)
        .await;
    let joined = membership_added(&mut node).await;
    node.mqtt(UPDATE, S1).await;
    let updated = node.publishes(3).await[0].timestamp();
    node.mqtt(GET, r#"{"event_id":"get-1"}"#).await;
    let before = node.next_publish().await;
    assert_eq!(before.topic, GET_RESULT);
    let twin_before = before.field("twin");
    assert_eq!(
        serde_json::to_string(&twin_before).unwrap(),
        format!(
            r#"{{"temperature":{{"actual":{{"metadata":{{"timestamp":{updated}}},"value":"22"}},"expected":{{"metadata":{{"timestamp":{joined}}},"value":"25"}},"metadata":{{"type":"int"}},"optional":true}}}}"#
        )
    );
    node.stop().await;

    // A new process: new store handle, new bus, new module, same file.
    let mut node = Node::start(dir.path(), settings(), "").await;
    assert_eq!(node.twin.cache().len(), 1);
    node.mqtt(GET, r#"{"event_id":"get-2"}"#).await;
    let after = node.next_publish().await;
    assert_eq!(after.topic, GET_RESULT);
    assert_eq!(
        after.payload,
        before
            .payload
            .replace(r#""event_id":"get-1""#, r#""event_id":"get-2""#)
            .replace(
                &format!(r#""timestamp":{},"twin""#, before.timestamp()),
                &format!(r#""timestamp":{},"twin""#, after.timestamp())
            ),
        "the same twins, byte for byte"
    );

    // Versions came back too: the next mapper write counts on from edge 4.
    node.mqtt(
        UPDATE,
        r#"{"event_id":"evt-3","timestamp":1,"twin":{"temperature":{"actual":{"value":"24"}}}}"#,
    )
    .await;
    let out = node.publishes(3).await;
    assert_eq!(out[0].topic, RESULT);
    assert_eq!(out[0].event_id(), "evt-3");
    let row = node.twin_row(THERMO, "temperature").unwrap();
    assert_eq!(
        (row.actual.as_str(), row.actual_version.as_str()),
        ("24", r#"{"cloud":0,"edge":5}"#)
    );
    node.stop().await;
}

/// Ten devices with one `int` twin each, reported by a mapper.
fn seed_load(devices: usize) -> String {
    let mut sql = String::new();
    for d in 0..devices {
        sql.push_str(&format!(
            "INSERT INTO device (id, name) VALUES ('default/load-{d}', 'load-{d}');
             INSERT INTO device_twin (deviceid, name, actual, actual_meta, actual_version,
                 optional, attr_type, metadata)
             VALUES ('default/load-{d}', 'seq', '0', '{{\"timestamp\":1}}',
                 '{{\"cloud\":0,\"edge\":0}}', 1, 'int', '{{}}');\n"
        ));
    }
    sql
}

#[tokio::test]
async fn back_to_back_updates_are_answered_in_order_after_group_commits() {
    const DEVICES: usize = 10;
    const UPDATES: usize = 2000;
    let dir = tempfile::tempdir().unwrap();
    let mut node = Node::start(dir.path(), settings(), &seed_load(DEVICES)).await;
    let (batches_before, writes_before) = node.store.commit_counts();

    // Update k is the (k / DEVICES + 1)-th of device k % DEVICES, sent without waiting.
    let bus = node.bus.clone();
    let sender = tokio::spawn(async move {
        for k in 0..UPDATES {
            let (d, seq) = (k % DEVICES, k / DEVICES + 1);
            let payload = format!(
                r#"{{"event_id":"u-{d}-{seq}","timestamp":1,"twin":{{"seq":{{"actual":{{"value":"{seq}"}}}}}}}}"#
            );
            let topic = format!("$hw/events/device/default/load-{d}/twin/update");
            bus.send("twin", mqtt_message(&topic, &payload))
                .await
                .unwrap();
        }
    });

    let reader = node.db();
    let mut stored = reader
        .prepare("SELECT actual FROM device_twin WHERE deviceid = ?1 AND name = 'seq'")
        .unwrap();
    let mut last_seen: BTreeMap<usize, usize> = BTreeMap::new();
    for k in 0..UPDATES {
        let (d, seq) = (k % DEVICES, k / DEVICES + 1);
        let device = format!("default/load-{d}");
        // Overall and per device, outputs leave in the order the updates came in.
        let result = node.next_publish().await;
        assert_eq!(
            result.topic,
            format!("$hw/events/device/{device}/twin/update/result")
        );
        assert_eq!(result.event_id(), format!("u-{d}-{seq}"));
        assert_eq!(
            result.field("twin")["seq"]["actual"]["value"],
            seq.to_string()
        );
        let previous = last_seen.insert(d, seq).unwrap_or(0);
        assert_eq!(previous + 1, seq, "device {d}");
        // The result left after the commit: the row holds this update or a later one.
        let actual: String = stored.query_row([&device], |r| r.get(0)).unwrap();
        let actual: usize = actual.parse().unwrap();
        assert!(
            actual >= seq,
            "result of {device} #{seq} published before its commit (row holds #{actual})"
        );
        let document = node.next_publish().await;
        assert_eq!(
            document.topic,
            format!("$hw/events/device/{device}/twin/update/document")
        );
        assert_eq!(document.event_id(), format!("u-{d}-{seq}"));
    }
    sender.await.unwrap();
    assert!(node.probe().await.is_empty());

    let (batches, writes) = node.store.commit_counts();
    let (batches, writes) = (batches - batches_before, writes - writes_before);
    assert_eq!(writes, UPDATES as u64, "one write per update");
    assert!(
        batches < writes,
        "updates share commits: {batches} commits for {writes} writes"
    );
    for d in 0..DEVICES {
        let row = node.twin_row(&format!("default/load-{d}"), "seq").unwrap();
        let per_device = UPDATES / DEVICES;
        assert_eq!(row.actual, per_device.to_string());
        assert_eq!(
            row.actual_version,
            format!(r#"{{"cloud":0,"edge":{per_device}}}"#)
        );
    }
    node.stop().await;
}

#[tokio::test]
async fn a_changed_device_desired_value_is_reviewed_stored_and_handed_to_the_mappers() {
    let dir = tempfile::tempdir().unwrap();
    let mut node = Node::start(dir.path(), settings(), "").await;
    let id = "default/thermo-2";
    node.meta_sends("insert", "default/devicemodel/thermo-model", MODEL_OBJECT)
        .await;
    node.meta_sends("insert", "default/device/thermo-2", DEVICE_OBJECT)
        .await;
    assert!(node.probe().await.is_empty());

    // The cloud raises the setpoint to 90; a safety handler clamps desired values from the
    // cloud to 60.
    node.hooks.clamp_cloud_desired(id, 60);
    let raised = DEVICE_OBJECT.replace(r#""value":"25""#, r#""value":"90""#);
    node.meta_sends("update", "default/device/thermo-2", &raised)
        .await;
    let out = node.publishes(2).await;
    assert!(out[0].topic.ends_with("/twin/update/document"), "{out:?}");
    assert!(out[1].topic.ends_with("/twin/update/delta"), "{out:?}");
    assert!(
        out[1].payload.contains(r#""delta":{"setpoint":"60"}"#),
        "{out:?}"
    );
    let row = node.twin_row(id, "setpoint").unwrap();
    assert_eq!(row.expected, "60");
    assert_eq!(row.expected_version, r#"{"cloud":2,"edge":0}"#);
    let calls = node.hooks.calls();
    let Some(HookCall::Defined(defined)) = calls
        .iter()
        .rev()
        .find(|c| matches!(c, HookCall::Defined(_)))
    else {
        panic!("{calls:?}");
    };
    assert_eq!(
        defined.properties[1].desired.as_deref(),
        Some("60"),
        "mappers get the twin's (clamped) value, not the object's"
    );
    assert!(calls.contains(&HookCall::Desired {
        value: DesiredValue {
            device: id.into(),
            key: "setpoint".into(),
            value: "60".into(),
            value_type: "int".into(),
        },
        stored_expected: Some("60".into()),
    }));
    node.stop().await;
}

#[tokio::test]
async fn a_cloud_sync_is_reviewed_by_the_twin_handlers() {
    let dir = tempfile::tempdir().unwrap();
    let mut node = Node::start(dir.path(), settings(), SEED_THERMO).await;
    connect(&mut node).await;
    // A safety handler clamps desired temperatures from the cloud to 28.
    node.hooks.clamp_cloud_desired(THERMO, 28);
    node.cloud_sends(
        "update",
        CLOUD_SYNC,
        r#"{"event_id":"sync-1","timestamp":1700000000300,"twin":{"temperature":{"expected":{"value":"30"},"optional":true,"metadata":{"type":"int"},"expected_version":{"cloud":2,"edge":0}}}}"#,
    )
    .await;
    let out = node.publishes(2).await;
    assert!(
        out[1].payload.contains(r#""delta":{"temperature":"28"}"#),
        "{out:?}"
    );
    let row = node.twin_row(THERMO, "temperature").unwrap();
    assert_eq!(row.expected, "28");
    assert_eq!(row.expected_version, r#"{"cloud":2,"edge":0}"#);
    assert!(
        node.hooks.calls().iter().any(|c| matches!(
            c,
            HookCall::Desired { value, .. } if value.value == "28"
        )),
        "the mappers hear the clamped value: {:?}",
        node.hooks.calls()
    );
    node.stop().await;
}
