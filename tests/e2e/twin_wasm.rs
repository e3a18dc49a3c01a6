//! Wasm modules in the twin update path of a running `wedge run`: a `virtual-thermometer`
//! mapper deployed on the node reports through devicetwin (visible on MQTT and in SQLite),
//! a `threshold` handler rejects out-of-range values, and a desired value published on MQTT
//! reaches the mapper, which then reports it back.

use std::time::{Duration, Instant};

use rusqlite::{Connection, OpenFlags};
use wedge_tests::guests::module;
use wedge_tests::mqtt::MqttClient;
use wedge_tests::node::{Broker, TwinNode};
use wedge_tests::twin_fixtures::{THERMOMETERS, zero_timestamps};
use wedge_tests::wedge_cmd;

const THERMO: &str = "$hw/events/device/default/thermo-1";
const WAIT: Duration = Duration::from_secs(10);

fn deploy(node: &TwinNode, name: &str) {
    let path = module(name);
    let data_dir = node.data_dir().to_str().unwrap().to_owned();
    let (ok, out, err) = wedge_cmd(&[
        "module",
        "deploy",
        path.to_str().unwrap(),
        "--data-dir",
        &data_dir,
    ])
    .unwrap();
    assert!(ok, "deploy {name}: {out}{err}\n{}", node.daemon.log());
}

fn actual(node: &TwinNode, key: &str) -> String {
    let db = Connection::open_with_flags(&node.db, OpenFlags::SQLITE_OPEN_READ_ONLY).unwrap();
    db.query_row(
        "SELECT actual FROM device_twin WHERE deviceid = 'default/thermo-1' AND name = ?1",
        [key],
        |r| r.get(0),
    )
    .unwrap()
}

/// Waits for a document on thermo-1 whose current `key` actual value is `want`.
fn document_with(mqtt: &mut MqttClient, key: &str, want: &str) -> String {
    let deadline = Instant::now() + WAIT;
    while Instant::now() < deadline {
        let doc = mqtt
            .expect(&format!("{THERMO}/twin/update/document"), WAIT)
            .unwrap();
        let v: serde_json::Value = serde_json::from_str(&doc).unwrap();
        if v["twin"][key]["current"]["actual"]["value"] == want {
            return doc;
        }
    }
    panic!("no document with {key} = {want}");
}

#[test]
fn mapper_reports_handlers_and_desired_values_on_a_running_node() {
    let dir = tempfile::tempdir().unwrap();
    let node = TwinNode::start(dir.path(), Broker::Embedded, THERMOMETERS).unwrap();
    let mut mqtt = MqttClient::connect(node.mqtt_port, "observer").unwrap();
    mqtt.subscribe("$hw/events/device/#").unwrap();

    // The mapper gets thermo-1 (protocol `virtual`, constant signal at 21) from the local
    // definitions and reports it: documents on MQTT, rows in SQLite.
    deploy(&node, "virtual-thermometer");
    let doc = document_with(&mut mqtt, "temperature", "21");
    assert!(
        zero_timestamps(&doc).contains(r#""current":{"expected":{"value":"25","metadata":{"timestamp":0}},"actual":{"value":"21","metadata":{"timestamp":0}}"#),
        "{doc}"
    );
    assert_eq!(actual(&node, "temperature"), "21");

    // threshold (temperature must stay within -40..85) rejects an out-of-range report with a
    // 400 result carrying its reason, and SQLite keeps the last accepted value.
    deploy(&node, "threshold");
    mqtt.publish(
        &format!("{THERMO}/twin/update"),
        r#"{"event_id":"hot-1","timestamp":1,"twin":{"temperature":{"actual":{"value":"120"}}}}"#,
    )
    .unwrap();
    let result = loop {
        let r = mqtt
            .expect(&format!("{THERMO}/twin/update/result"), WAIT)
            .unwrap();
        if r.contains("\"hot-1\"") {
            break r;
        }
    };
    let v: serde_json::Value = serde_json::from_str(&result).unwrap();
    assert_eq!(v["code"], 400, "{result}");
    assert!(v["reason"].as_str().unwrap().contains("85"), "{result}");
    assert_ne!(actual(&node, "temperature"), "120");

    // A desired value published from MQTT reaches the mapper's write-property; the mapper then
    // reports it as the actual value.
    mqtt.publish(
        &format!("{THERMO}/twin/update"),
        r#"{"event_id":"want-30","timestamp":1,"twin":{"temperature":{"expected":{"value":"30"}}}}"#,
    )
    .unwrap();
    document_with(&mut mqtt, "temperature", "30");
    assert_eq!(actual(&node, "temperature"), "30");
}
