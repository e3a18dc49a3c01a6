//! DMI on a running `wedge run`, against the real KubeEdge mapper of `../shared/dmi/`
//! (`virtualdevice-mapper`, KubeEdge v1.23.1 mapper-framework, unchanged): it registers, its
//! readings reach the twin, a desired value reaches the device and comes back as reported,
//! a desired value set while the mapper is away is applied after the node restarts, and a
//! Wasm mapper drives its own devices on the same node.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use rusqlite::{Connection, OpenFlags};
use wedge_tests::dmi_mapper::{DmiMapper, example_devices};
use wedge_tests::guests::module;
use wedge_tests::mqtt::MqttClient;
use wedge_tests::node::{Broker, Extra, TwinNode};
use wedge_tests::twin_fixtures::THERMOMETERS;
use wedge_tests::wedge_cmd;

const WAIT: Duration = Duration::from_secs(20);
const VDEV: &str = "default/vdev-1";

/// `(expected, actual)` of a twin, `None` before the row exists.
fn twin(db: &Path, device: &str, key: &str) -> Option<(String, String)> {
    let db = Connection::open_with_flags(db, OpenFlags::SQLITE_OPEN_READ_ONLY).ok()?;
    db.query_row(
        "SELECT expected, actual FROM device_twin WHERE deviceid = ?1 AND name = ?2",
        [device, key],
        |r| Ok((r.get(0)?, r.get(1)?)),
    )
    .ok()
}

fn state(db: &Path, device: &str) -> Option<String> {
    let db = Connection::open_with_flags(db, OpenFlags::SQLITE_OPEN_READ_ONLY).ok()?;
    db.query_row("SELECT state FROM device WHERE id = ?1", [device], |r| {
        r.get(0)
    })
    .ok()
}

fn wait_twin(node: &TwinNode, device: &str, key: &str, expected: &str, actual: &str) {
    let deadline = Instant::now() + WAIT;
    let mut last = None;
    while Instant::now() < deadline {
        last = twin(&node.db, device, key);
        if let Some((e, a)) = &last
            && e == expected
            && a == actual
        {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!(
        "{device} {key}: want expected {expected:?} actual {actual:?}, have {last:?}\n{}",
        node.daemon.log()
    );
}

/// A node with state in `dir` serving DMI on `dir/dmi/dmi.sock`, defining `devices`; returns
/// it with its DMI socket and a directory for the mapper.
fn dmi_node(dir: &Path, devices: &str) -> (TwinNode, PathBuf, PathBuf) {
    let socket = dir.join("dmi").join("dmi.sock");
    let extra = Extra {
        modules: format!("  deviceTwin:\n    dmiSockPath: {}\n", socket.display()),
        ..Default::default()
    };
    let node = TwinNode::start_with(dir, Broker::Embedded, devices, &extra).unwrap();
    let mapper_dir = dir.join("mapper");
    std::fs::create_dir_all(&mapper_dir).unwrap();
    (node, socket, mapper_dir)
}

/// Waits until the example mapper's first reports are in: `setpoint` 30/30 (the desired
/// value written at registration), `temperature` 23, and the device state `ok`.
fn wait_reporting(node: &TwinNode) {
    wait_twin(node, VDEV, "setpoint", "30", "30");
    wait_twin(node, VDEV, "temperature", "", "23");
    let deadline = Instant::now() + WAIT;
    while state(&node.db, VDEV).as_deref() != Some("ok") {
        assert!(
            Instant::now() < deadline,
            "no device state from ReportDeviceStates"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A desired value from the cloud, as CloudCore's twin sync (`twin/cloud_updated`) carries it.
fn cloud_sets(mqtt: &MqttClient, key: &str, value: &str, cloud_version: u64) {
    let payload = format!(
        r#"{{"event_id":"sync-{cloud_version}","timestamp":1,"twin":{{"{key}":{{"expected":{{"value":"{value}"}},"expected_version":{{"cloud":{cloud_version},"edge":0}},"metadata":{{"type":"int"}}}}}}}}"#
    );
    mqtt.publish(
        "$hw/events/device/default/vdev-1/twin/cloud_updated",
        payload,
    )
    .unwrap();
}

#[test]
fn a_kubeedge_mapper_registers_reports_and_gets_desired_values_beside_a_wasm_mapper() {
    let dir = tempfile::tempdir().unwrap();
    let devices = format!("{}\n---\n{THERMOMETERS}", example_devices().unwrap());
    let (mut node, socket, mapper_dir) = dmi_node(dir.path(), &devices);

    // Registration: the mapper gets vdev-1 in the MapperRegister answer and writes its
    // desired value (30) at once; readings come back over ReportDeviceStatus.
    let mut mapper = DmiMapper::start(&mapper_dir, &socket).unwrap();
    mapper.wait_log("Mapper register finished", WAIT).unwrap();
    mapper
        .wait_log(
            "VIRTUALDEVICE WRITE device=vdev-1 key=setpoint value=30 via=desired",
            WAIT,
        )
        .unwrap();
    wait_reporting(&node);

    // A Wasm mapper on the same node drives the `virtual` devices.
    let path = module("virtual-thermometer");
    let data_dir = node.data_dir().to_str().unwrap().to_owned();
    let (ok, out, err) = wedge_cmd(&[
        "module",
        "deploy",
        path.to_str().unwrap(),
        "--data-dir",
        &data_dir,
    ])
    .unwrap();
    assert!(ok, "deploy: {out}{err}");
    // The Wasm mapper deployed after the node started gets the device's desired 25 (kept
    // while no mapper drove it) and reports it back.
    wait_twin(&node, "default/thermo-1", "temperature", "25", "25");

    // A desired value from the cloud reaches the device (UpdateDevice) and is reported back.
    let mqtt = MqttClient::connect(node.mqtt_port, "cloud").unwrap();
    cloud_sets(&mqtt, "setpoint", "35", 2);
    mapper
        .wait_log(
            "VIRTUALDEVICE WRITE device=vdev-1 key=setpoint value=35 via=desired",
            WAIT,
        )
        .unwrap();
    wait_twin(&node, VDEV, "setpoint", "35", "35");

    // Set while the mapper is away, then the node restarts: the value waits in the twin and
    // reaches the device when the mapper is back.
    mapper.stop();
    cloud_sets(&mqtt, "setpoint", "40", 3);
    wait_twin(&node, VDEV, "setpoint", "40", "35");
    node.daemon.stop(libc::SIGTERM, WAIT).unwrap();
    node.restart().unwrap();
    let mut mapper = DmiMapper::start(&mapper_dir, &socket).unwrap();
    mapper
        .wait_log(
            "VIRTUALDEVICE WRITE device=vdev-1 key=setpoint value=40 via=desired",
            WAIT,
        )
        .unwrap();
    wait_twin(&node, VDEV, "setpoint", "40", "40");
    // The Wasm mapper came back with the node and drives its device again. The simulated
    // device restarted with its signal (21): the desired 25 had been reported before the
    // restart, so it is not pending and not sent again (a desired value is sent when it
    // changes or is still pending at a start; the pending case is vdev-1's 40 above).
    wait_twin(&node, "default/thermo-1", "temperature", "25", "21");
}

#[test]
fn a_device_file_edited_or_removed_on_sighup_reaches_the_kubeedge_mapper() {
    let dir = tempfile::tempdir().unwrap();
    let devices = example_devices().unwrap();
    let (node, socket, mapper_dir) = dmi_node(dir.path(), &devices);
    let mut mapper = DmiMapper::start(&mapper_dir, &socket).unwrap();
    wait_twin(&node, VDEV, "setpoint", "30", "30");

    // The file's desired value changes: re-read on SIGHUP, it reaches the device.
    let file = dir.path().join("devices").join("devices.yaml");
    std::fs::write(&file, devices.replace("value: \"30\"", "value: \"45\"")).unwrap();
    node.daemon.signal(libc::SIGHUP).unwrap();
    mapper
        .wait_log(
            "VIRTUALDEVICE WRITE device=vdev-1 key=setpoint value=45 via=desired",
            WAIT,
        )
        .unwrap();
    wait_twin(&node, VDEV, "setpoint", "45", "45");

    // The Device leaves the file: the mapper lets go of it.
    let reading = "/api/v1/device/default/vdev-1/temperature";
    assert!(
        mapper
            .rest_get(reading)
            .unwrap()
            .contains("\"Value\":\"23\"")
    );
    let model_only = devices.split("\n---\n").next().unwrap().to_owned();
    std::fs::write(&file, model_only).unwrap();
    node.daemon.signal(libc::SIGHUP).unwrap();
    let deadline = Instant::now() + WAIT;
    loop {
        let body = mapper.rest_get(reading).unwrap();
        if body.contains("not found device default/vdev-1") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the mapper still drives vdev-1: {body}\n{}",
            node.daemon.log()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn wedge_device_and_twin_commands_read_twins_and_set_a_desired_value() {
    let dir = tempfile::tempdir().unwrap();
    let (node, socket, mapper_dir) = dmi_node(dir.path(), &example_devices().unwrap());
    let mut mapper = DmiMapper::start(&mapper_dir, &socket).unwrap();
    wait_reporting(&node);
    let data = node.data_dir().to_str().unwrap().to_owned();
    let wedge = |args: &[&str]| {
        let mut all = args.to_vec();
        all.extend(["--data-dir", &data]);
        wedge_cmd(&all).unwrap()
    };

    let (ok, out, err) = wedge(&["device", "list"]);
    assert!(ok, "{err}");
    assert!(out.starts_with("DEVICE"), "{out}");
    let row = out
        .lines()
        .find(|l| l.starts_with("default/vdev-1"))
        .unwrap();
    assert!(
        row.contains("virtualProtocol")
            && row.contains("dmi:virtualdevice-mapper")
            && row.contains(" ok "),
        "{out}"
    );

    let (ok, out, err) = wedge(&["device", "get", VDEV, "-o", "json"]);
    assert!(ok, "{err}");
    let view: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(view["twins"]["setpoint"]["expected"], "30");
    assert_eq!(view["twins"]["temperature"]["actual"], "23");
    assert_eq!(view["state"], "ok");
    assert_eq!(view["protocol"], "virtualProtocol");
    assert_eq!(view["mapper"], "dmi:virtualdevice-mapper");

    // A desired value set by the operator reaches the device like one from the cloud.
    let (ok, out, err) = wedge(&["twin", "set", VDEV, "setpoint=44"]);
    assert!(ok, "{err}");
    assert!(out.contains("desired 44"), "{out}");
    mapper
        .wait_log(
            "VIRTUALDEVICE WRITE device=vdev-1 key=setpoint value=44 via=desired",
            WAIT,
        )
        .unwrap();
    wait_twin(&node, VDEV, "setpoint", "44", "44");
    let (ok, out, _) = wedge(&["twin", "get", VDEV]);
    assert!(ok);
    assert!(
        out.lines()
            .any(|l| l.starts_with("setpoint") && l.contains("44")),
        "{out}"
    );

    // Bad input is a clear error and changes nothing.
    for (args, says) in [
        (
            vec!["twin", "set", VDEV, "setpoint=hot"],
            "not a valid int value: the value is not int or integer",
        ),
        (
            vec!["twin", "set", VDEV, "nope=1"],
            "has no property \"nope\" (its properties: setpoint, temperature)",
        ),
        (
            vec!["twin", "set", "default/nope", "x=1"],
            "no device \"default/nope\"",
        ),
        (
            vec!["twin", "set", VDEV, "setpoint"],
            "expected PROPERTY=VALUE",
        ),
        (
            vec!["device", "get", "vdev-1"],
            "a device is <namespace>/<name>",
        ),
    ] {
        let (ok, _, err) = wedge(&args);
        assert!(!ok, "{args:?} succeeded");
        assert!(err.contains(says), "{args:?}: {err}");
    }
    wait_twin(&node, VDEV, "setpoint", "44", "44");
}

#[test]
fn a_protocol_has_one_kind_of_mapper_on_a_node() {
    let dir = tempfile::tempdir().unwrap();
    // dmi_node's node, with a module directory loaded at start.
    let modules_dir = dir.path().join("wasm-modules");
    std::fs::create_dir_all(&modules_dir).unwrap();
    let socket = dir.path().join("dmi").join("dmi.sock");
    let extra = Extra {
        modules: format!("  deviceTwin:\n    dmiSockPath: {}\n", socket.display()),
        wedge: format!("  modules:\n    dir: {}\n", modules_dir.display()),
        ..Default::default()
    };
    let mut node = TwinNode::start_with(
        dir.path(),
        Broker::Embedded,
        &example_devices().unwrap(),
        &extra,
    )
    .unwrap();
    let mapper_dir = dir.path().join("mapper");
    std::fs::create_dir_all(&mapper_dir).unwrap();
    let data = node.data_dir().to_str().unwrap().to_owned();
    // A Wasm mapper of the KubeEdge mapper's protocol.
    let wasm = wedge_tests::hostile::repackage("virtual-thermometer", |m| {
        m.protocol = Some("virtualProtocol".into());
    })
    .unwrap();
    let file = dir.path().join("wasm-virtual.wasm");
    std::fs::write(&file, &wasm).unwrap();

    // While the KubeEdge mapper drives it, a Wasm mapper of the protocol is refused.
    let mut mapper = DmiMapper::start(&mapper_dir, &socket).unwrap();
    wait_twin(&node, VDEV, "setpoint", "30", "30");
    let (ok, _, err) = wedge_cmd(&[
        "module",
        "deploy",
        file.to_str().unwrap(),
        "--data-dir",
        &data,
    ])
    .unwrap();
    assert!(!ok, "deployed beside the KubeEdge mapper");
    assert!(
        err.contains("driven by the KubeEdge mapper \"virtualdevice-mapper\" over DMI")
            && err.contains("409"),
        "{err}"
    );
    mapper.stop();

    // The module appears in the module directory while the node is down: at the next start it
    // is loaded, and the KubeEdge mapper remembered from before is forgotten (the module the
    // operator deployed wins; one driver per protocol). Registering again, it is refused,
    // naming the module (mapper-framework then exits).
    node.daemon.stop(libc::SIGTERM, WAIT).unwrap();
    std::fs::write(modules_dir.join("wasm-virtual.wasm"), &wasm).unwrap();
    node.restart().unwrap();
    let log = node.daemon.log();
    assert!(
        log.contains("forgotten: the Wasm mapper virtual-thermometer drives the protocol now"),
        "{log}"
    );
    let mut refused = DmiMapper::start(&mapper_dir, &socket).unwrap();
    refused
        .wait_log(
            "protocol \"virtualProtocol\" is driven by the Wasm mapper \"virtual-thermometer\"",
            WAIT,
        )
        .unwrap();
}
