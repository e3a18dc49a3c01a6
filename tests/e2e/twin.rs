//! The KubeEdge twin protocol through a running `wedge run`: real MQTT clients publish
//! mapper payloads on the embedded broker or on a mosquitto the test starts, and the results
//! are read back from MQTT and from the node's SQLite file.

use std::time::Duration;

use rusqlite::{Connection, OpenFlags};
use wedge_tests::mosquitto::Mosquitto;
use wedge_tests::mqtt::MqttClient;
use wedge_tests::node::{Broker, NODE, TwinNode};
use wedge_tests::twin_fixtures::{THERMOMETERS, blank_event_id, zero_timestamps};

const WAIT: Duration = Duration::from_secs(10);
const THERMO: &str = "$hw/events/device/default/thermo-1";

fn db(node: &TwinNode) -> Connection {
    Connection::open_with_flags(&node.db, OpenFlags::SQLITE_OPEN_READ_ONLY).unwrap()
}

/// (expected, actual, expected_version, actual_version, attr_type) of a twin row.
fn twin_row(node: &TwinNode, device: &str, key: &str) -> (String, String, String, String, String) {
    db(node)
        .query_row(
            "SELECT expected, actual, expected_version, actual_version, attr_type
             FROM device_twin WHERE deviceid = ?1 AND name = ?2",
            [device, key],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?)),
        )
        .unwrap()
}

fn client(node: &TwinNode, id: &str) -> MqttClient {
    let mut c = MqttClient::connect(node.mqtt_port, id).unwrap();
    c.subscribe("$hw/events/device/#").unwrap();
    c.subscribe("$hw/events/node/#").unwrap();
    c
}

/// The spec's S1 against a device defined locally with desired temperature 25: the mapper's
/// report gets result, document and delta in that order, and the row is committed before the
/// result is seen.
fn s1_flow(node: &TwinNode) {
    let mut mapper = client(node, "s1-mapper");
    mapper
        .publish(
            &format!("{THERMO}/twin/update"),
            r#"{"event_id":"evt-1","timestamp":1700000000100,"twin":{"temperature":{"actual":{"value":"22"},"metadata":{"type":"int"}}}}"#,
        )
        .unwrap();
    let result = mapper
        .expect(&format!("{THERMO}/twin/update/result"), WAIT)
        .unwrap();
    // Committed before the result was published.
    let (expected, actual, _, actual_version, attr_type) =
        twin_row(node, "default/thermo-1", "temperature");
    assert_eq!(
        (expected.as_str(), actual.as_str(), attr_type.as_str()),
        ("25", "22", "int")
    );
    assert_eq!(actual_version, r#"{"cloud":0,"edge":1}"#);
    assert_eq!(
        zero_timestamps(&result),
        r#"{"event_id":"evt-1","timestamp":0,"twin":{"temperature":{"actual":{"value":"22","metadata":{"timestamp":0}},"optional":false,"metadata":{"type":"int"}}}}"#
    );
    // The mapper's own publish comes back too (it subscribed to the whole tree).
    let all: Vec<(String, String)> = mapper
        .drain(Duration::from_millis(500))
        .into_iter()
        .filter(|(t, _)| !t.ends_with("/twin/update"))
        .collect();
    let topics: Vec<&str> = all.iter().map(|(t, _)| t.as_str()).collect();
    assert_eq!(
        topics,
        [
            format!("{THERMO}/twin/update/document"),
            format!("{THERMO}/twin/update/delta"),
        ],
        "result, then document, then delta: {all:?}"
    );
    assert_eq!(
        zero_timestamps(&all[0].1),
        r#"{"event_id":"evt-1","timestamp":0,"twin":{"temperature":{"last":{"expected":{"value":"25","metadata":{"timestamp":0}},"optional":false,"metadata":{"type":"int"}},"current":{"expected":{"value":"25","metadata":{"timestamp":0}},"actual":{"value":"22","metadata":{"timestamp":0}},"optional":false,"metadata":{"type":"int"}}}}}"#
    );
    assert_eq!(
        blank_event_id(&zero_timestamps(&all[1].1)),
        r#"{"event_id":"<id>","timestamp":0,"twin":{"temperature":{"expected":{"value":"25","metadata":{"timestamp":0}},"actual":{"value":"22","metadata":{"timestamp":0}},"optional":false,"metadata":{"type":"int"}}},"delta":{"temperature":"25"}}"#
    );
}

/// Every refused update gets its KubeEdge result and leaves SQLite as it was.
fn refusals(node: &TwinNode) {
    let mut mapper = client(node, "refusing-mapper");
    let before = twin_row(node, "default/thermo-1", "temperature");
    let oversized = format!(
        r#"{{"event_id":"big","twin":{{"temperature":{{"actual":{{"value":"{}"}}}}}}}}"#,
        "1".repeat(300 * 1024)
    );
    let cases: [(&str, String, &str, &str); 6] = [
        (
            "default/thermo-1",
            r#"{"event_id":"evt-2","timestamp":1700000000200,"twin":{"temperature":{"actual":{"value":"hot"}}}}"#.into(),
            "$hw/events/device/default/thermo-1/twin/update/result",
            r#"{"event_id":"evt-2","timestamp":0,"code":400,"reason":"the value is not int or integer"}"#,
        ),
        (
            "default/thermo-1",
            "{not json".into(),
            "$hw/events/device/default/thermo-1/twin/update/result",
            r#"{"event_id":"","timestamp":0,"code":400,"reason":"Unmarshal update request body failed, please check the request"}"#,
        ),
        (
            "default/no-such",
            r#"{"event_id":"evt-3","twin":{"temperature":{"actual":{"value":"1"}}}}"#.into(),
            "$hw/events/device/default/no-such/twin/update/result",
            r#"{"event_id":"evt-3","timestamp":0,"code":404,"reason":"update rejected due to the device is not existed"}"#,
        ),
        (
            "default/thermo-1",
            r#"{"event_id":"evt-4","twin":{"temperature":{"actual":{"value":"1;drop table"}}}}"#.into(),
            "$hw/events/device//twin/update/result",
            r#"{"event_id":"","timestamp":0,"code":400,"reason":"The value of twin must only include upper or lowercase letters, number, english, and special letter - _ . , : / @ # and the length of value should be less than 512 bytes"}"#,
        ),
        (
            "default/thermo-1",
            r#"{"event_id":"evt-5"}"#.into(),
            "$hw/events/device/default/thermo-1/twin/update/result",
            r#"{"event_id":"","timestamp":0,"code":400,"reason":"Update twin error, key:twin does not exist"}"#,
        ),
        (
            "default/thermo-1",
            oversized,
            "$hw/events/device/default/thermo-1/twin/update/result",
            r#"{"event_id":"","timestamp":0,"code":400,"reason":"the update request body is 307265 bytes; the limit is 262144 bytes"}"#,
        ),
    ];
    for (device, payload, topic, want) in cases {
        mapper
            .publish(&format!("$hw/events/device/{device}/twin/update"), payload)
            .unwrap();
        let got = mapper.expect(topic, WAIT).unwrap();
        assert_eq!(zero_timestamps(&got), want);
    }
    let rest: Vec<(String, String)> = mapper
        .drain(Duration::from_millis(300))
        .into_iter()
        .filter(|(t, _)| !t.ends_with("/twin/update"))
        .collect();
    assert!(rest.is_empty(), "nothing but the results: {rest:?}");
    assert_eq!(twin_row(node, "default/thermo-1", "temperature"), before);
    let unknown: i64 = db(node)
        .query_row(
            "SELECT count(*) FROM device WHERE id = 'default/no-such'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(unknown, 0);
}

/// Twin get and membership get answer from the committed state.
fn reads(node: &TwinNode) {
    let mut app = client(node, "reader");
    app.publish(&format!("{THERMO}/twin/get"), r#"{"event_id":"get-1"}"#)
        .unwrap();
    let got = app
        .expect(&format!("{THERMO}/twin/get/result"), WAIT)
        .unwrap();
    assert_eq!(
        zero_timestamps(&got),
        r#"{"event_id":"get-1","timestamp":0,"twin":{"humidity":{"optional":false,"metadata":{"type":"float"}},"temperature":{"expected":{"value":"25","metadata":{"timestamp":0}},"actual":{"value":"22","metadata":{"timestamp":0}},"optional":false,"metadata":{"type":"int"}}}}"#
    );
    app.publish(
        &format!("$hw/events/node/{NODE}/membership/get"),
        r#"{"event_id":"m-1"}"#,
    )
    .unwrap();
    let members = app
        .expect(
            &format!("$hw/events/node/{NODE}/membership/get/result"),
            WAIT,
        )
        .unwrap();
    let v: serde_json::Value = serde_json::from_str(&members).unwrap();
    assert_eq!(v["event_id"], "m-1");
    let ids: Vec<&str> = v["devices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["default/thermo-1", "default/thermo-2"]);
}

#[test]
fn twin_protocol_on_the_embedded_broker() {
    let dir = tempfile::tempdir().unwrap();
    let node = TwinNode::start(dir.path(), Broker::Embedded, THERMOMETERS).unwrap();
    s1_flow(&node);
    refusals(&node);
    reads(&node);
}

#[test]
fn twin_protocol_through_mosquitto() {
    let broker = Mosquitto::start().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let node = TwinNode::start(dir.path(), Broker::External(broker.port), THERMOMETERS).unwrap();
    // The node subscribes right after it connects; give the subscription a moment to land.
    std::thread::sleep(Duration::from_millis(300));
    s1_flow(&node);
    refusals(&node);
    reads(&node);
}

#[test]
fn state_updates_are_stored_and_reported() {
    let dir = tempfile::tempdir().unwrap();
    let node = TwinNode::start(dir.path(), Broker::Embedded, THERMOMETERS).unwrap();
    let mut mapper = client(&node, "state-mapper");
    mapper
        .publish(
            &format!("{THERMO}/state/update"),
            r#"{"event_id":"s-1","timestamp":1,"state":"online"}"#,
        )
        .unwrap();
    let result = mapper
        .expect(&format!("{THERMO}/state/update/result"), WAIT)
        .unwrap();
    let v: serde_json::Value = serde_json::from_str(&result).unwrap();
    assert_eq!(v["device"]["state"], "online");
    let (state, last_online): (String, String) = db(&node)
        .query_row(
            "SELECT state, last_online FROM device WHERE id = 'default/thermo-1'",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    assert_eq!(state, "online");
    assert!(last_online.ends_with('Z'), "RFC 3339 UTC: {last_online}");
}
