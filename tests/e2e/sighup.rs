//! SIGHUP on the real binary (row 17 of issue 15): it reloads the devices directory and the
//! log level, survives a config file that no longer parses, and never stops the node.

use std::time::{Duration, Instant};

use wedge_tests::http_get;
use wedge_tests::mqtt::MqttClient;
use wedge_tests::node::{Broker, TwinNode};
use wedge_tests::twin_fixtures::THERMOMETERS;

const WAIT: Duration = Duration::from_secs(10);

/// A device of the fixtures' `thermometer` model, written after the node started.
const LATE_DEVICE: &str = "apiVersion: devices.kubeedge.io/v1beta1
kind: Device
metadata:
  name: late-1
  namespace: default
spec:
  deviceModelRef:
    name: thermometer
  nodeName: edge-1
  protocol:
    protocolName: other
  properties:
  - name: temperature
    desired:
      value: \"30\"
    visitors:
      protocolName: other
      configData: {}
";

fn hup(node: &TwinNode) {
    node.daemon.signal(libc::SIGHUP).unwrap();
}

/// Waits until the log holds `needle` `count` times.
fn wait_log(node: &TwinNode, needle: &str, count: usize) {
    let deadline = Instant::now() + WAIT;
    while node.daemon.log().matches(needle).count() < count {
        assert!(
            Instant::now() < deadline,
            "{needle:?} not logged {count} times:\n{}",
            node.daemon.log()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn twin_get(node: &TwinNode, device: &str, event: &str) -> Option<serde_json::Value> {
    let mut app = MqttClient::connect(node.mqtt_port, &format!("reader-{event}")).unwrap();
    let topic = format!("$hw/events/device/{device}/twin/get");
    app.subscribe(&format!("{topic}/result")).unwrap();
    app.publish(&topic, format!(r#"{{"event_id":"{event}"}}"#))
        .unwrap();
    let got = app.expect(&format!("{topic}/result"), WAIT).ok()?;
    serde_json::from_str(&got).ok()
}

#[test]
fn sighup_reloads_devices_and_log_level_and_never_stops_the_node() {
    let dir = tempfile::tempdir().unwrap();
    let mut node = TwinNode::start(dir.path(), Broker::Embedded, THERMOMETERS).unwrap();

    // Before: the late device is unknown (twin/get answers an error), nothing at debug.
    let before = twin_get(&node, "default/late-1", "before").expect("a twin/get answer");
    assert!(before["twin"].is_null(), "{before}");
    assert!(
        !node.daemon.log().contains(" DEBUG "),
        "{}",
        node.daemon.log()
    );

    // A device file added, the log level raised and a key that needs a restart changed in the
    // config file, then SIGHUP.
    std::fs::write(dir.path().join("devices/late.yaml"), LATE_DEVICE).unwrap();
    let config = dir.path().join("edgecore.yaml");
    let mut text = std::fs::read_to_string(&config).unwrap();
    text.push_str("  logLevel: debug\n  store:\n    maxBatch: 64\n");
    std::fs::write(&config, &text).unwrap();
    hup(&node);
    wait_log(&node, "devices directory reloaded", 1);

    assert!(
        node.daemon.wait_exit(Duration::from_millis(300)).is_err(),
        "the node stopped on SIGHUP:\n{}",
        node.daemon.log()
    );
    let (code, body) = http_get(node.admin, "/healthz").unwrap();
    assert_eq!(code, 200, "{body}");
    let after = twin_get(&node, "default/late-1", "after").expect("a twin/get answer");
    assert_eq!(
        after["twin"]["temperature"]["expected"]["value"], "30",
        "the device added before the SIGHUP is defined: {after}"
    );
    let log = node.daemon.log();
    assert!(
        log.contains(" DEBUG "),
        "logLevel: debug took effect:\n{log}"
    );
    assert!(
        log.contains("applied at the next restart: wedge.store.maxBatch"),
        "a key that cannot be reloaded is named:\n{log}"
    );

    // The file removed again: the device leaves the catalog (its rows stay, as when the cloud
    // deletes a Device).
    std::fs::remove_file(dir.path().join("devices/late.yaml")).unwrap();
    hup(&node);
    wait_log(&node, "removed=1", 1);

    // A config file that no longer parses: reported, the node keeps its settings and runs.
    std::fs::write(&config, "wedge:\n  logLevl: info\n").unwrap();
    hup(&node);
    wait_log(&node, "config not re-read", 1);
    wait_log(&node, "devices directory reloaded", 3);
    let log = node.daemon.log();
    assert!(
        log.contains("wedge.logLevl"),
        "the bad key is named:\n{log}"
    );
    let (code, _) = http_get(node.admin, "/healthz").unwrap();
    assert_eq!(code, 200);

    // More in a row change nothing either; SIGTERM still stops it cleanly.
    for round in 4..9 {
        hup(&node);
        wait_log(&node, "devices directory reloaded", round);
    }
    let (code, _) = http_get(node.admin, "/healthz").unwrap();
    assert_eq!(code, 200);
    node.daemon
        .stop(libc::SIGTERM, Duration::from_secs(5))
        .unwrap();
}

/// The protocol devicetwin's catalog holds for `device`, read through the admin socket: `""`
/// when no definition names it any more (its rows stay).
fn defined_protocol(node: &TwinNode, device: &str) -> String {
    let (code, body) =
        http_get(node.admin_socket(), &format!("/devices/default/{device}")).unwrap();
    assert_eq!(code, 200, "{body}");
    let view: serde_json::Value = serde_json::from_str(&body).unwrap();
    view["protocol"].as_str().unwrap_or_default().to_owned()
}

/// Rows of `device_object` (the cloud's Device objects kept for the next start) about `id`.
fn stored_objects(node: &TwinNode, id: &str) -> i64 {
    let db = rusqlite::Connection::open(&node.db).unwrap();
    db.query_row(
        "SELECT COUNT(*) FROM device_object WHERE id = ?1",
        [id],
        |r| r.get(0),
    )
    .unwrap()
}

#[test]
fn a_device_file_that_stops_parsing_keeps_its_devices_and_the_directory_is_the_truth_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let mut node = TwinNode::start(dir.path(), Broker::Embedded, THERMOMETERS).unwrap();
    let late = dir.path().join("devices/late.yaml");
    std::fs::write(&late, LATE_DEVICE).unwrap();
    hup(&node);
    wait_log(&node, "devices directory reloaded", 1);
    assert_eq!(defined_protocol(&node, "late-1"), "other");
    assert_eq!(
        stored_objects(&node, "default/late-1"),
        0,
        "a device of the directory is not kept with the cloud's objects"
    );

    // The file is broken while being edited: reported, and its device stays defined.
    std::fs::write(&late, "kind: Device\nmetadata: [name: late-1\n").unwrap();
    hup(&node);
    wait_log(&node, "devices directory reloaded", 2);
    let log = node.daemon.log();
    assert_eq!(log.matches("removed=0").count(), 2, "{log}");
    assert!(
        log.contains("kept as it was: its file no longer parses"),
        "{log}"
    );
    assert_eq!(defined_protocol(&node, "late-1"), "other");

    // Fixed again, then removed while the node is stopped: at the next start the directory
    // is what defines local devices, so late-1 is no longer defined; the start's own
    // devices still are.
    std::fs::write(&late, LATE_DEVICE).unwrap();
    hup(&node);
    wait_log(&node, "devices directory reloaded", 3);
    node.daemon
        .stop(libc::SIGTERM, Duration::from_secs(5))
        .unwrap();
    std::fs::remove_file(&late).unwrap();
    node.restart().unwrap();
    assert_eq!(defined_protocol(&node, "late-1"), "");
    assert_ne!(defined_protocol(&node, "thermo-1"), "");

    // A directory that cannot be read changes nothing either.
    let devices = dir.path().join("devices");
    let moved = dir.path().join("devices.away");
    std::fs::rename(&devices, &moved).unwrap();
    hup(&node);
    wait_log(&node, "devices directory not reloaded, its devices kept", 1);
    assert_ne!(defined_protocol(&node, "thermo-1"), "");
    std::fs::rename(&moved, &devices).unwrap();
    node.daemon
        .stop(libc::SIGTERM, Duration::from_secs(5))
        .unwrap();
}
