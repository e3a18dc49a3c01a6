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
    // definitions, with its desired value 25 that waited for a mapper; it writes 25 and
    // reports it back: documents on MQTT, rows in SQLite.
    deploy(&node, "virtual-thermometer");
    let doc = document_with(&mut mqtt, "temperature", "25");
    assert!(
        zero_timestamps(&doc).contains(r#""current":{"expected":{"value":"25","metadata":{"timestamp":0}},"actual":{"value":"25","metadata":{"timestamp":0}}"#),
        "{doc}"
    );
    assert_eq!(actual(&node, "temperature"), "25");

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

/// A Wasm-driven device whose properties use KubeEdge's reporting settings.
const REPORTING: &str = "apiVersion: devices.kubeedge.io/v1beta1
kind: DeviceModel
metadata:
  name: boiler
  namespace: default
spec:
  protocol: virtual
  properties:
  - name: temperature
    type: FLOAT
  - name: raw
    type: FLOAT
  - name: quiet
    type: FLOAT
---
apiVersion: devices.kubeedge.io/v1beta1
kind: Device
metadata:
  name: boiler-1
  namespace: default
spec:
  deviceModelRef:
    name: boiler
  nodeName: edge-1
  protocol:
    protocolName: virtual
    configData:
      signal: constant
      base: 60
  properties:
  - name: temperature
    collectCycle: 100
    reportCycle: 300
    reportToCloud: true
    pushMethod:
      mqtt:
        address: tcp://127.0.0.1:1883
        topic: plant/boiler-1/temperature
        qos: 1
    visitors:
      protocolName: virtual
      configData: {}
  - name: raw
    collectCycle: 100
    pushMethod:
      mqtt:
        topic: plant/boiler-1/raw
    visitors:
      protocolName: virtual
      configData: {}
  - name: quiet
    collectCycle: 100
    visitors:
      protocolName: virtual
      configData: {}
";

#[test]
fn report_to_cloud_and_push_method_decide_where_a_wasm_mappers_values_go() {
    let dir = tempfile::tempdir().unwrap();
    let node = TwinNode::start(dir.path(), Broker::Embedded, REPORTING).unwrap();
    let mut mqtt = MqttClient::connect(node.mqtt_port, "observer").unwrap();
    mqtt.subscribe("plant/#").unwrap();
    mqtt.subscribe("$hw/events/device/default/boiler-1/twin/update/document")
        .unwrap();
    deploy(&node, "virtual-thermometer");

    // Pushed: both pushMethod properties, as data-model documents on the node's broker.
    let first = mqtt.expect("plant/boiler-1/temperature", WAIT).unwrap();
    let window = Duration::from_secs(2);
    let mut pushes: Vec<(String, serde_json::Value)> = Vec::new();
    let mut documents = Vec::new();
    for (topic, payload) in mqtt.drain(window) {
        if topic.starts_with("plant/") {
            pushes.push((topic, serde_json::from_str(&payload).unwrap()));
        } else {
            documents.push(payload);
        }
    }
    let on = |topic: &str| pushes.iter().filter(|(t, _)| t == topic).count();
    let doc: serde_json::Value = serde_json::from_str(&first).unwrap();
    assert_eq!(doc["deviceName"], "boiler-1");
    assert_eq!(doc["namespace"], "default");
    assert_eq!(doc["propertyName"], "temperature");
    assert_eq!(doc["value"], "60");
    assert_eq!(doc["type"], "float");
    // Collected every 100 ms, pushed at most once per reportCycle: 300 ms for temperature, the
    // 1 s default for raw; in a 2 s window that is about 7 and 2 (never 20, one per collect).
    assert!(
        (3..=8).contains(&on("plant/boiler-1/temperature")),
        "{pushes:?}"
    );
    assert!((1..=3).contains(&on("plant/boiler-1/raw")), "{pushes:?}");
    assert_eq!(on("plant/boiler-1/quiet"), 0);

    // Reported: only temperature (reportToCloud: true) reaches the twin; raw and quiet never do.
    assert!(!documents.is_empty(), "no twin document");
    for doc in &documents {
        let v: serde_json::Value = serde_json::from_str(doc).unwrap();
        assert!(v["twin"]["raw"]["current"]["actual"].is_null(), "{doc}");
        assert!(v["twin"]["quiet"]["current"]["actual"].is_null(), "{doc}");
    }
    let db = Connection::open_with_flags(&node.db, OpenFlags::SQLITE_OPEN_READ_ONLY).unwrap();
    let actual = |key: &str| -> Option<String> {
        db.query_row(
            "SELECT actual FROM device_twin WHERE deviceid = 'default/boiler-1' AND name = ?1",
            [key],
            |r| r.get(0),
        )
        .unwrap()
    };
    assert_eq!(actual("temperature").as_deref(), Some("60"));
    // Their rows exist (the Device defines them) with no reported value.
    assert_eq!(actual("raw").unwrap_or_default(), "");
    assert_eq!(actual("quiet").unwrap_or_default(), "");
    let log = node.daemon.log();
    assert!(
        log.contains("without reportToCloud: true are not reported"),
        "{log}"
    );
    assert!(
        log.contains("address, qos and retained are not applied"),
        "{log}"
    );
}
