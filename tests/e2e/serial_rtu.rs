//! The Modbus RTU mapper (`modules/modbus-rtu`) on a serial line: a pseudo-terminal pair whose
//! master side is served by tokio-modbus's RTU server — framing and CRC independent of the
//! guest's — and whose slave side (`/dev/pts/N`) the guest opens through the host's `serial`
//! interface, granted by `capabilities.serial`. Two slave ids share the line, as on RS-485.

use std::time::Duration;

use serde_json::json;
use wedge_tests::modbus_rtu_server::RtuServer;
use wedge_tests::modbus_server::Registers;
use wedge_tests::wasm_node::{eventually, mapper, node, repackage};
use wedge_wasm::{Device, DeviceState, Property, TwinValue, WasmError};

fn property(name: &str, ty: &str, visitor: serde_json::Value) -> Property {
    Property {
        name: name.into(),
        value_type: ty.into(),
        visitor: visitor.to_string(),
        collect_cycle_ms: 50,
        report_to_cloud: true,
        ..Default::default()
    }
}

fn device(id: &str, protocol_config: serde_json::Value, properties: Vec<Property>) -> Device {
    Device {
        id: id.into(),
        protocol: "modbus-rtu".into(),
        protocol_config: protocol_config.to_string(),
        properties,
    }
}

/// The module with its serial grant narrowed to exactly the test's pty.
fn granted(path: &str) -> Vec<u8> {
    repackage("modbus-rtu", |m| {
        m.capabilities.serial = vec![path.to_owned()]
    })
}

#[tokio::test(flavor = "multi_thread")]
async fn two_slaves_on_one_line_are_read_and_written() {
    let line = RtuServer::start([
        (
            1,
            Registers {
                holding: [(0, 215), (2, 0x0001), (3, 0x86A0)].into(),
                input: [(5, 42)].into(),
                coils: [(3, true)].into(),
                ..Registers::default()
            },
        ),
        (
            2,
            Registers {
                holding: [(0, 0xFFFE), (7, 0)].into(),
                // 21.3 as an IEEE-754 f32, high word first.
                input: [(1, 0x41AA), (2, 0x6666)].into(),
                discrete: [(4, true)].into(),
                ..Registers::default()
            },
        ),
    ]);
    let node = node().await;
    node.host.deploy(granted(&line.path)).await.unwrap();
    let rtu = mapper(&node, "modbus-rtu");
    // KubeEdge's field names for one device, the snake-case aliases for the other: the same
    // line settings either way.
    rtu.add_device(device(
        "default/meter-1",
        json!({"serialPort": line.path, "baudRate": 19200, "dataBits": 8, "parity": "even",
               "stopBits": 1, "slaveID": 1, "timeout_ms": 1000}),
        vec![
            property(
                "temperature",
                "float",
                json!({"register": "HoldingRegister", "offset": 0, "scale": 0.1}),
            ),
            property(
                "total",
                "int",
                json!({"register": "HoldingRegister", "offset": 2, "limit": 2}),
            ),
            property(
                "count",
                "int",
                json!({"register": "InputRegister", "offset": 5}),
            ),
            property("pump", "boolean", json!({"register": "Coil", "offset": 3})),
        ],
    ))
    .await
    .unwrap();
    rtu.add_device(device(
        "default/meter-2",
        json!({"serial_port": line.path, "baud_rate": 19200, "data_bits": 8, "parity": "E",
               "stop_bits": 1, "slave_id": 2}),
        vec![
            property(
                "offset",
                "int",
                json!({"register": "HoldingRegister", "offset": 0, "format": "int"}),
            ),
            property(
                "setpoint",
                "int",
                json!({"register": "HoldingRegister", "offset": 7}),
            ),
            property(
                "flow",
                "float",
                json!({"register": "InputRegister", "offset": 1, "limit": 2}),
            ),
            property(
                "door",
                "boolean",
                json!({"register": "DiscreteInput", "offset": 4}),
            ),
        ],
    ))
    .await
    .unwrap();

    let rec = node.recorder.clone();
    eventually("every property of both slaves read", || {
        ["temperature", "total", "count", "pump"]
            .iter()
            .all(|p| rec.last_report("default/meter-1", p).is_some())
            && ["offset", "setpoint", "flow", "door"]
                .iter()
                .all(|p| rec.last_report("default/meter-2", p).is_some())
    })
    .await;
    let got = |d: &str, p: &str| rec.last_report(&format!("default/{d}"), p);
    assert_eq!(got("meter-1", "temperature"), Some(TwinValue::Float(21.5)));
    assert_eq!(got("meter-1", "total"), Some(TwinValue::Integer(100_000)));
    assert_eq!(got("meter-1", "count"), Some(TwinValue::Integer(42)));
    assert_eq!(got("meter-1", "pump"), Some(TwinValue::Boolean(true)));
    assert_eq!(got("meter-2", "offset"), Some(TwinValue::Integer(-2)));
    assert_eq!(got("meter-2", "setpoint"), Some(TwinValue::Integer(0)));
    assert_eq!(got("meter-2", "flow"), Some(TwinValue::Float(21.3)));
    assert_eq!(got("meter-2", "door"), Some(TwinValue::Boolean(true)));
    assert_eq!(rec.last_state("default/meter-1"), Some(DeviceState::Online));
    assert_eq!(rec.last_state("default/meter-2"), Some(DeviceState::Online));

    // Desired values reach the right slave's registers.
    rtu.write_property("default/meter-1", "temperature", TwinValue::Float(25.0))
        .await
        .unwrap();
    rtu.write_property("default/meter-1", "pump", TwinValue::Boolean(false))
        .await
        .unwrap();
    rtu.write_property("default/meter-1", "total", TwinValue::Integer(70_000))
        .await
        .unwrap();
    rtu.write_property("default/meter-2", "setpoint", TwinValue::Integer(30))
        .await
        .unwrap();
    line.with(1, |r| {
        assert_eq!(r.holding[&0], 250);
        assert!(!r.coils[&3]);
        assert_eq!((r.holding[&2], r.holding[&3]), (0x0001, 0x1170));
    });
    line.with(2, |r| {
        assert_eq!(r.holding[&7], 30);
        assert_eq!(r.holding[&0], 0xFFFE, "slave 1's writes stay on slave 1");
    });
    eventually("the written setpoint read back", || {
        got("meter-2", "setpoint") == Some(TwinValue::Integer(30))
    })
    .await;

    // Read-only tables refuse writes in the guest; an exception from the slave is an error for
    // that call only.
    let err = rtu
        .write_property("default/meter-1", "count", TwinValue::Integer(1))
        .await
        .unwrap_err();
    assert!(matches!(err, WasmError::Guest(_)), "{err}");
    line.with(2, |r| r.discrete.remove(&4));
    let err = rtu.poll("default/meter-2").await.unwrap_err().to_string();
    assert!(
        err.contains("door") && err.contains("illegal data address"),
        "{err}"
    );

    // One line, one setting: a device asking for another baud rate on it is refused.
    let err = rtu
        .add_device(device(
            "default/meter-3",
            json!({"serialPort": line.path, "baudRate": 9600, "slaveID": 3}),
            vec![],
        ))
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("19200 8E1"), "{err}");
    assert_eq!(rtu.status().traps, 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_silent_slave_goes_offline_while_the_line_goes_on() {
    let line = RtuServer::start([(
        1,
        Registers {
            holding: [(0, 7)].into(),
            ..Registers::default()
        },
    )]);
    let node = node().await;
    node.host.deploy(granted(&line.path)).await.unwrap();
    let rtu = mapper(&node, "modbus-rtu");
    let mode = || {
        vec![property(
            "mode",
            "int",
            json!({"register": "HoldingRegister", "offset": 0}),
        )]
    };
    rtu.add_device(device(
        "default/present",
        json!({"serialPort": line.path, "slaveID": 1}),
        mode(),
    ))
    .await
    .unwrap();
    // No slave 9 on the line: the server stays silent, as an absent RS-485 slave does.
    rtu.add_device(device(
        "default/absent",
        json!({"serialPort": line.path, "slaveID": 9, "timeout_ms": 200}),
        mode(),
    ))
    .await
    .unwrap();

    let rec = node.recorder.clone();
    eventually("the silent slave reported offline", || {
        rec.last_state("default/absent") == Some(DeviceState::Offline)
    })
    .await;
    let err = rtu.poll("default/absent").await.unwrap_err().to_string();
    assert!(err.contains("no answer from slave 9"), "{err}");
    assert!(
        line.unanswered() > 0,
        "the requests for slave 9 were on the line"
    );
    assert_eq!(rec.last_report("default/absent", "mode"), None);

    // The other slave on the line goes on being read.
    let before = rec.report_count("default/present", "mode");
    eventually("more reads of the slave that answers", || {
        rec.report_count("default/present", "mode") >= before + 3
    })
    .await;
    assert_eq!(
        rec.last_report("default/present", "mode"),
        Some(TwinValue::Integer(7))
    );
    assert_eq!(rec.last_state("default/present"), Some(DeviceState::Online));

    // Slave 9 comes on the line: online again, its value read.
    line.add_slave(
        9,
        Registers {
            holding: [(0, 9)].into(),
            ..Registers::default()
        },
    );
    eventually("the slave back online", || {
        rec.last_state("default/absent") == Some(DeviceState::Online)
            && rec.last_report("default/absent", "mode") == Some(TwinValue::Integer(9))
    })
    .await;
    assert_eq!(rtu.status().traps, 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_port_outside_the_grant_is_refused_without_a_trap() {
    let line = RtuServer::start([(
        1,
        Registers {
            holding: [(0, 7)].into(),
            ..Registers::default()
        },
    )]);
    let node = node().await;
    // The module as built: it grants /dev/ttyUSB* and /dev/serial/by-id/*, not /dev/pts/*.
    node.host
        .deploy(wedge_tests::guests::module_bytes("modbus-rtu"))
        .await
        .unwrap();
    let rtu = mapper(&node, "modbus-rtu");
    rtu.add_device(device(
        "default/pty",
        json!({"serialPort": line.path, "slaveID": 1}),
        vec![property(
            "mode",
            "int",
            json!({"register": "HoldingRegister", "offset": 0}),
        )],
    ))
    .await
    .unwrap();
    let err = rtu.poll("default/pty").await.unwrap_err().to_string();
    assert!(err.contains("refused"), "{err}");
    assert!(err.contains("capabilities.serial"), "{err}");
    assert!(err.contains(&line.path), "{err}");
    assert_eq!(rtu.status().traps, 0);
    let rec = node.recorder.clone();
    eventually("the refused device reported offline", || {
        rec.last_state("default/pty") == Some(DeviceState::Offline)
    })
    .await;
    line.with(1, |r| assert_eq!(r.requests, 0, "nothing reached the line"));
    // Never a trap, however often the host refuses.
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(rtu.status().traps, 0);
}
