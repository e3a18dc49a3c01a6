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
