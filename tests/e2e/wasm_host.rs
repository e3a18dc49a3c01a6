//! The Wasm host with real components built from `modules/`: reference modules, a real Modbus
//! TCP server, a real HTTP device, hostile guests, refused deploys, upgrades and restarts.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::json;
use wedge_tests::guests::{module, module_bytes};
use wedge_tests::http_device::{HttpDevice, Seen};
use wedge_tests::modbus_server::{ModbusServer, Registers};
use wedge_tests::wasm_node::{Node, eventually, handler, mapper, node, node_in, repackage};
use wedge_wasm::package;
use wedge_wasm::{
    Device, Property, RunState, TwinUpdate, TwinValue, UpdateSource, Verdict, WasmEngine, WasmError,
};

fn update(property: &str, value: TwinValue) -> TwinUpdate {
    TwinUpdate {
        device: "default/thermo-1".into(),
        property: property.into(),
        desired: false,
        value,
        previous: None,
        source: UpdateSource::Mapper,
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn threshold_handler_rejects_clamps_and_converts() {
    let node = node().await;
    let status = node.host.deploy(module_bytes("threshold")).await.unwrap();
    assert_eq!(
        (status.name.as_str(), status.state),
        ("threshold", RunState::Running)
    );
    let threshold = handler(&node, "threshold");
    assert!(threshold.binds("default/thermo-1"));

    let hot = threshold
        .on_update(update("temperature", TwinValue::Float(120.0)), None)
        .await
        .unwrap();
    let Verdict::Reject(reason) = hot else {
        panic!("120 °C accepted: {hot:?}")
    };
    assert!(
        reason.contains("temperature") && reason.contains("85"),
        "{reason}"
    );
    assert_eq!(
        threshold
            .on_update(update("temperature", TwinValue::Float(21.5)), None)
            .await
            .unwrap(),
        Verdict::Accept
    );
    assert_eq!(
        threshold
            .on_update(update("humidity", TwinValue::Float(130.0)), None)
            .await
            .unwrap(),
        Verdict::Replace(TwinValue::Float(100.0))
    );
    let Verdict::Replace(TwinValue::Float(kpa)) = threshold
        .on_update(update("pressure", TwinValue::Float(10.0)), None)
        .await
        .unwrap()
    else {
        panic!("pressure not converted")
    };
    assert!((kpa - 68.95).abs() < 0.01, "10 psi = {kpa} kPa");
    assert_eq!(
        threshold
            .on_update(update("colour", TwinValue::Text("red".into())), None)
            .await
            .unwrap(),
        Verdict::Accept
    );
    assert!(matches!(
        threshold
            .on_update(update("temperature", TwinValue::Text("hot".into())), None)
            .await
            .unwrap(),
        Verdict::Reject(_)
    ));
}

#[tokio::test(flavor = "multi_thread")]
async fn virtual_thermometer_reports_and_receives_desired_values() {
    let node = node().await;
    node.host
        .deploy(module_bytes("virtual-thermometer"))
        .await
        .unwrap();
    let thermo = mapper(&node, "virtual-thermometer");
    thermo
        .add_device(Device {
            id: "default/thermo-1".into(),
            protocol: "virtual".into(),
            protocol_config: "{}".into(),
            properties: vec![
                Property {
                    name: "temperature".into(),
                    value_type: "float".into(),
                    visitor: "{}".into(),
                    collect_cycle_ms: 50,
                    report_to_cloud: true,
                    ..Default::default()
                },
                Property {
                    name: "setpoint".into(),
                    value_type: "float".into(),
                    visitor: "{}".into(),
                    collect_cycle_ms: 50,
                    report_to_cloud: true,
                    ..Default::default()
                },
            ],
        })
        .await
        .unwrap();
    let rec = node.recorder.clone();
    eventually("a temperature report", || {
        matches!(rec.last_report("default/thermo-1", "temperature"), Some(TwinValue::Float(t)) if (15.0..=25.0).contains(&t))
    })
    .await;
    thermo
        .write_property("default/thermo-1", "setpoint", TwinValue::Float(30.0))
        .await
        .unwrap();
    eventually("the desired setpoint reported back", || {
        rec.last_report("default/thermo-1", "setpoint") == Some(TwinValue::Float(30.0))
    })
    .await;
    assert_eq!(thermo.devices(), ["default/thermo-1"]);
    // A device of another protocol is refused by the host.
    let err = thermo
        .add_device(Device {
            id: "x".into(),
            protocol: "modbus-tcp".into(),
            protocol_config: "{}".into(),
            properties: vec![],
        })
        .await
        .unwrap_err();
    assert!(err.to_string().contains("modbus-tcp"), "{err}");
}

#[tokio::test(flavor = "multi_thread")]
async fn modbus_mapper_reads_and_writes_a_real_modbus_server() {
    let server = ModbusServer::start(Registers {
        holding: [(0, 215), (1, 7), (2, 0x0001), (3, 0x86A0)].into(),
        input: [(5, 42)].into(),
        coils: [(3, true)].into(),
        discrete: [(4, true)].into(),
        requests: 0,
    })
    .await;
    let node = node().await;
    let addr = server.addr.to_string();
    node.host
        .deploy(repackage("modbus-tcp", |m| {
            m.capabilities.endpoints = vec![addr.clone()]
        }))
        .await
        .unwrap();
    let modbus = mapper(&node, "modbus-tcp");
    let property = |name: &str, ty: &str, visitor: serde_json::Value| Property {
        name: name.into(),
        value_type: ty.into(),
        visitor: visitor.to_string(),
        collect_cycle_ms: 50,
        report_to_cloud: true,
        ..Default::default()
    };
    modbus
        .add_device(Device {
            id: "default/plc-1".into(),
            protocol: "modbus-tcp".into(),
            protocol_config: serde_json::json!({"address": addr, "slave_id": 1, "timeout_ms": 1000}).to_string(),
            properties: vec![
                property("temperature", "float", serde_json::json!({"register": "HoldingRegister", "offset": 0, "limit": 1, "scale": 0.1})),
                property("mode", "int", serde_json::json!({"register": "HoldingRegister", "offset": 1, "limit": 1})),
                property("total", "int", serde_json::json!({"register": "HoldingRegister", "offset": 2, "limit": 2})),
                property("count", "int", serde_json::json!({"register": "InputRegister", "offset": 5, "limit": 1})),
                property("pump", "boolean", serde_json::json!({"register": "Coil", "offset": 3, "limit": 1})),
                property("door", "boolean", serde_json::json!({"register": "DiscreteInput", "offset": 4, "limit": 1})),
            ],
        })
        .await
        .unwrap();
    let rec = node.recorder.clone();
    eventually("every property read", || {
        ["temperature", "mode", "total", "count", "pump", "door"]
            .iter()
            .all(|p| rec.last_report("default/plc-1", p).is_some())
    })
    .await;
    let got = |p: &str| rec.last_report("default/plc-1", p);
    assert!(
        matches!(got("temperature"), Some(TwinValue::Float(t)) if (t - 21.5).abs() < 1e-9),
        "{:?}",
        got("temperature")
    );
    assert_eq!(got("mode"), Some(TwinValue::Integer(7)));
    assert_eq!(got("total"), Some(TwinValue::Integer(100_000)));
    assert_eq!(got("count"), Some(TwinValue::Integer(42)));
    assert_eq!(got("pump"), Some(TwinValue::Boolean(true)));
    assert_eq!(got("door"), Some(TwinValue::Boolean(true)));

    modbus
        .write_property("default/plc-1", "temperature", TwinValue::Float(25.0))
        .await
        .unwrap();
    modbus
        .write_property("default/plc-1", "pump", TwinValue::Boolean(false))
        .await
        .unwrap();
    modbus
        .write_property("default/plc-1", "total", TwinValue::Integer(70_000))
        .await
        .unwrap();
    server.with(|r| {
        assert_eq!(r.holding[&0], 250);
        assert!(!r.coils[&3]);
        assert_eq!((r.holding[&2], r.holding[&3]), (0x0001, 0x1170));
    });
    let err = modbus
        .write_property("default/plc-1", "count", TwinValue::Integer(1))
        .await
        .unwrap_err();
    assert!(matches!(err, WasmError::Guest(_)), "{err}");
    // An exception from the device is an error for that call, not a crash.
    server.with(|r| r.holding.remove(&1));
    tokio::time::sleep(Duration::from_millis(60)).await;
    let err = modbus.poll("default/plc-1").await.unwrap_err();
    assert!(err.to_string().contains("mode"), "{err}");
    assert_eq!(modbus.status().traps, 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_mapper_reaches_a_granted_host_name_and_is_refused_outside_its_grants() {
    let server = ModbusServer::start(Registers {
        holding: [(1, 7)].into(),
        ..Registers::default()
    })
    .await;
    let other = ModbusServer::start(Registers {
        holding: [(1, 9)].into(),
        ..Registers::default()
    })
    .await;
    let node = node().await;
    let port = server.addr.port();
    // The grant names a host, not an address: `localhost` on the server's port.
    node.host
        .deploy(repackage("modbus-tcp", |m| {
            m.capabilities.endpoints = vec![format!("localhost:{port}")]
        }))
        .await
        .unwrap();
    let modbus = mapper(&node, "modbus-tcp");
    let device = |id: &str, address: String| Device {
        id: id.into(),
        protocol: "modbus-tcp".into(),
        protocol_config: serde_json::json!({"address": address, "timeout_ms": 1000}).to_string(),
        properties: vec![Property {
            name: "mode".into(),
            value_type: "int".into(),
            visitor: serde_json::json!({"register": "HoldingRegister", "offset": 1}).to_string(),
            collect_cycle_ms: 50,
            report_to_cloud: true,
            ..Default::default()
        }],
    };
    // A device addressed by the granted name: resolved by the guest, connected, read.
    modbus
        .add_device(device("default/by-name", format!("localhost:{port}")))
        .await
        .unwrap();
    let rec = node.recorder.clone();
    eventually("the device at localhost read", || {
        rec.last_report("default/by-name", "mode") == Some(TwinValue::Integer(7))
    })
    .await;
    // A device outside the grant (another port): its poll fails with the host's refusal,
    // named as such; nothing traps and the granted device goes on.
    modbus
        .add_device(device("default/outside", other.addr.to_string()))
        .await
        .unwrap();
    let err = modbus
        .poll("default/outside")
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("access denied by the host"), "{err}");
    assert!(err.contains("capabilities.endpoints"), "{err}");
    assert_eq!(modbus.status().traps, 0);
    other.with(|r| assert_eq!(r.requests, 0, "the refused device was never reached"));
    modbus.poll("default/by-name").await.unwrap();
}

fn rest_property(
    name: &str,
    value_type: &str,
    visitor: serde_json::Value,
    cycle_ms: u32,
) -> Property {
    Property {
        name: name.into(),
        value_type: value_type.into(),
        visitor: visitor.to_string(),
        collect_cycle_ms: cycle_ms,
        report_to_cloud: true,
        ..Default::default()
    }
}

fn rest_device(id: &str, base_url: &str, properties: Vec<Property>) -> Device {
    Device {
        id: id.into(),
        protocol: "http-json".into(),
        protocol_config: json!({"base_url": base_url, "timeout_ms": 1000}).to_string(),
        properties,
    }
}

fn gets(device: &HttpDevice, path: &str) -> usize {
    device
        .seen()
        .iter()
        .filter(|s| s.method == "GET" && s.path == path)
        .count()
}

#[tokio::test(flavor = "multi_thread")]
async fn http_json_mapper_reads_and_writes_a_real_http_device_and_is_refused_outside_its_grants() {
    let meter = HttpDevice::start(vec![
        (
            "/state",
            json!({"temperature": 21.5, "setpoint": 30, "on": true}),
        ),
        ("/info", json!({"firmware": "1.4.2"})),
    ])
    .await
    .unwrap();
    let other = HttpDevice::start(vec![("/state", json!({"temperature": 9}))])
        .await
        .unwrap();
    let node = node().await;
    let port = meter.addr.port();
    node.host
        .deploy(repackage("http-json", |m| {
            m.capabilities.endpoints = vec![format!("127.0.0.1:{port}")]
        }))
        .await
        .unwrap();
    let rest = mapper(&node, "http-json");
    let state = |pointer: &str| json!({"path": "/state", "pointer": pointer});
    rest.add_device(rest_device(
        "default/meter-1",
        &meter.base_url(),
        vec![
            rest_property("temperature", "float", state("/temperature"), 50),
            rest_property(
                "setpoint",
                "int",
                json!({"path": "/state", "pointer": "/setpoint",
                       "write": {"method": "PUT", "path": "/state", "pointer": "/setpoint"}}),
                50,
            ),
            rest_property("on", "boolean", state("/on"), 50),
            // Its own collect cycle (a minute): read once, at the start, whatever the others do.
            rest_property(
                "firmware",
                "string",
                json!({"path": "/info", "pointer": "/firmware"}),
                60_000,
            ),
        ],
    ))
    .await
    .unwrap();
    let rec = node.recorder.clone();
    eventually("the meter's values reported, typed", || {
        rec.last_report("default/meter-1", "temperature") == Some(TwinValue::Float(21.5))
            && rec.last_report("default/meter-1", "setpoint") == Some(TwinValue::Integer(30))
            && rec.last_report("default/meter-1", "on") == Some(TwinValue::Boolean(true))
            && rec.last_report("default/meter-1", "firmware")
                == Some(TwinValue::Text("1.4.2".into()))
    })
    .await;
    // Per-property collect cycles are the host's: /state is read every 50 ms, with one GET for
    // its three properties, /info once.
    eventually("ten polls of /state", || gets(&meter, "/state") >= 10).await;
    assert_eq!(gets(&meter, "/info"), 1, "{:?}", meter.seen());

    // A desired value becomes a PUT of {"setpoint": 44}; the device's answer comes back.
    rest.write_property("default/meter-1", "setpoint", TwinValue::Integer(44))
        .await
        .unwrap();
    assert!(meter.seen().contains(&Seen {
        method: "PUT".into(),
        path: "/state".into(),
        body: json!({"setpoint": 44}),
    }));
    eventually("the written setpoint read back", || {
        rec.last_report("default/meter-1", "setpoint") == Some(TwinValue::Integer(44))
    })
    .await;
    let err = rest
        .write_property("default/meter-1", "temperature", TwinValue::Float(1.0))
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("read-only"), "{err}");

    // A device outside the grant: the host refuses the request before anything is sent, the
    // guest gets an error (no trap), and the granted device goes on.
    rest.add_device(rest_device(
        "default/outside",
        &other.base_url(),
        vec![rest_property(
            "temperature",
            "float",
            state("/temperature"),
            50,
        )],
    ))
    .await
    .unwrap();
    let err = rest.poll("default/outside").await.unwrap_err().to_string();
    assert!(err.contains("capabilities.endpoints"), "{err}");
    assert!(other.seen().is_empty(), "the refused device was reached");
    assert_eq!(rest.status().traps, 0);
    rest.poll("default/meter-1").await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_mapper_waiting_on_a_silent_http_device_is_stopped_at_its_deadline() {
    // Accepts connections (the backlog does) and never answers.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = silent.local_addr().unwrap().port();
    let node = node().await;
    node.host
        .deploy(repackage("http-json", |m| {
            m.capabilities.endpoints = vec![format!("127.0.0.1:{port}")];
            m.limits.call_timeout_ms = 300;
        }))
        .await
        .unwrap();
    let rest = mapper(&node, "http-json");
    let mut device = rest_device(
        "default/silent",
        &format!("http://127.0.0.1:{port}"),
        vec![rest_property(
            "temperature",
            "float",
            json!({"path": "/state", "pointer": "/temperature"}),
            60_000,
        )],
    );
    // The guest itself would wait a minute.
    device.protocol_config =
        json!({"base_url": format!("http://127.0.0.1:{port}"), "timeout_ms": 60_000}).to_string();
    rest.add_device(device).await.unwrap();
    let started = Instant::now();
    let err = rest.poll("default/silent").await.unwrap_err().to_string();
    let waited = started.elapsed();
    assert!(err.contains("time limit of 300 ms"), "{err}");
    assert!(waited < Duration::from_secs(2), "stopped after {waited:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_mapper_exchanges_datagrams_with_a_granted_udp_device_only() {
    // A UDP device: answers each datagram naming a property with that property's value.
    let device = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let port = device.local_addr().unwrap().port();
    let served = Arc::new(Mutex::new(0usize));
    let count = served.clone();
    tokio::spawn(async move {
        let mut buf = [0u8; 512];
        while let Ok((n, from)) = device.recv_from(&mut buf).await {
            let answer = match &buf[..n] {
                b"firmware" => "2.1.0",
                _ => "unknown",
            };
            *count.lock().unwrap() += 1;
            let _ = device.send_to(answer.as_bytes(), from).await;
        }
    });
    let node = node().await;
    node.host
        .deploy(repackage("test-guests/udp-query", |m| {
            m.capabilities.endpoints = vec![format!("127.0.0.1:{port}")]
        }))
        .await
        .unwrap();
    let udp = mapper(&node, "test-udp-query");
    let device = |id: &str, port: u16| Device {
        id: id.into(),
        protocol: "udp-query".into(),
        protocol_config: json!({"address": format!("127.0.0.1:{port}")}).to_string(),
        properties: vec![Property {
            name: "firmware".into(),
            value_type: "string".into(),
            visitor: "{}".into(),
            collect_cycle_ms: 60_000,
            report_to_cloud: true,
            ..Default::default()
        }],
    };
    udp.add_device(device("default/udp-1", port)).await.unwrap();
    udp.poll("default/udp-1").await.unwrap();
    assert_eq!(
        node.recorder.last_report("default/udp-1", "firmware"),
        Some(TwinValue::Text("2.1.0".into()))
    );
    // Another port: the host refuses the peer as the guest connects its socket; the guest gets
    // the error (and refuses the device), nothing is sent.
    let other = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let other_port = other.local_addr().unwrap().port();
    let err = udp
        .add_device(device("default/udp-2", other_port))
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("capabilities.endpoints"), "{err}");
    other.set_nonblocking(true).unwrap();
    assert!(
        other.recv(&mut [0u8; 16]).is_err(),
        "the refused datagram arrived"
    );
    assert_eq!(udp.status().traps, 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn hostile_guests_fail_only_their_own_calls() {
    let node = node().await;
    node.host.deploy(module_bytes("threshold")).await.unwrap();
    for hostile in [
        "spin",
        "memory-bomb",
        "panic",
        "forbidden-publish",
        "forbidden-socket",
    ] {
        node.host
            .deploy(module_bytes(&format!("test-guests/{hostile}")))
            .await
            .unwrap_or_else(|e| panic!("{hostile} not deployed: {e}"));
    }
    let threshold = handler(&node, "threshold");
    let normal = || update("temperature", TwinValue::Float(20.0));

    for (name, trigger, expected) in [
        ("test-spin", "spin", "time limit of 100 ms"),
        ("test-memory-bomb", "bomb", "memory limit of 16 MiB"),
        ("test-panic", "panic", "panicked"),
    ] {
        let guest = handler(&node, name);
        let started = Instant::now();
        let err = guest
            .on_update(update("temperature", TwinValue::Text(trigger.into())), None)
            .await
            .unwrap_err();
        let WasmError::Trap { reason, .. } = &err else {
            panic!("{name}: expected a trap, got {err}")
        };
        assert!(reason.contains(expected), "{name}: {reason}");
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "{name} took {:?}",
            started.elapsed()
        );
        // Other modules are untouched.
        assert_eq!(
            threshold.on_update(normal(), None).await.unwrap(),
            Verdict::Accept
        );
        // The failed module backs off, then comes back with a fresh instance.
        assert!(matches!(
            guest.on_update(normal(), None).await,
            Err(WasmError::Restarting { .. })
        ));
        assert_eq!(guest.status().state, RunState::Restarting);
        tokio::time::sleep(Duration::from_millis(80)).await;
        assert_eq!(
            guest.on_update(normal(), None).await.unwrap(),
            Verdict::Accept,
            "{name}"
        );
        let status = guest.status();
        assert_eq!(
            (status.state, status.restarts, status.traps),
            (RunState::Running, 1, 1),
            "{name}"
        );
    }

    // A publish outside the manifest is refused host-side; the guest sees the error.
    let publisher = handler(&node, "test-forbidden-publish");
    let Verdict::Reject(text) = publisher.on_update(normal(), None).await.unwrap() else {
        panic!("forbidden publish was not refused")
    };
    assert!(
        text.contains("refused") && text.contains("wedge/forbidden"),
        "{text}"
    );
    assert!(node.recorder.published.lock().unwrap().is_empty());

    // A socket to an endpoint outside the manifest is refused; the call fails, nothing traps.
    let socket = mapper(&node, "test-forbidden-socket");
    socket
        .add_device(Device {
            id: "d".into(),
            protocol: "forbidden".into(),
            protocol_config: "{}".into(),
            properties: vec![],
        })
        .await
        .unwrap();
    let err = socket.poll("d").await.unwrap_err();
    assert!(matches!(err, WasmError::Guest(_)), "{err}");
    assert_eq!(socket.status().traps, 0);

    // A module that keeps trapping is reported as crash-looping, and still retried.
    let spin = handler(&node, "test-spin");
    let mut failures = 0;
    let deadline = Instant::now() + Duration::from_secs(20);
    while spin.status().state != RunState::CrashLoop && Instant::now() < deadline {
        match spin
            .on_update(update("t", TwinValue::Text("spin".into())), None)
            .await
        {
            Err(WasmError::Trap { .. }) => failures += 1,
            Err(WasmError::Restarting { retry_in_ms, .. }) => {
                tokio::time::sleep(Duration::from_millis(retry_in_ms + 5)).await
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(
        spin.status().state,
        RunState::CrashLoop,
        "after {failures} traps"
    );
    assert_eq!(
        threshold.on_update(normal(), None).await.unwrap(),
        Verdict::Accept
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn bad_modules_are_refused_and_change_nothing() {
    let node = node().await;
    let good = node.host.deploy(module_bytes("threshold")).await.unwrap();
    let raw_component = package::without_manifest(&module_bytes("threshold")).unwrap();
    let mut bad_version = module_bytes("threshold");
    let at = bad_version
        .windows(17)
        .rposition(|w| w == br#""version":"0.1.0""#)
        .expect("embedded manifest");
    bad_version[at..at + 17].copy_from_slice(br#""version":"x.y.z""#);

    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        (
            "garbage",
            b"definitely not wasm".to_vec(),
            "not a WebAssembly component: the file does not start with Wasm's magic bytes",
        ),
        (
            "native executable",
            b"\x7fELF\x02\x01\x01\0\0\0\0\0".to_vec(),
            "a native (ELF) executable",
        ),
        (
            "core module",
            b"\0asm\x01\0\0\0".to_vec(),
            "core Wasm module",
        ),
        ("no manifest", raw_component, "wedge module build"),
        ("bad manifest", bad_version, "version"),
        (
            "wrong world",
            repackage("threshold", |m| {
                m.kind = wedge_wasm::ModuleKind::Mapper;
                m.protocol = Some("virtual".into());
            }),
            "the component is a twin-handler (it exports `on-update`), but its manifest says mapper: \
             set `kind = \"twin-handler\"`",
        ),
        (
            "refused config",
            repackage("threshold", |m| {
                m.config = serde_json::json!({"rules": "nonsense"});
            }),
            "init failed",
        ),
    ];
    for (what, bytes, expected) in cases {
        let err = node.host.deploy(bytes).await.unwrap_err().to_string();
        assert!(err.contains(expected), "{what}: {err}");
    }
    let list = node.host.list();
    assert_eq!(list.len(), 1);
    assert_eq!(
        (list[0].name.as_str(), list[0].sha256.as_str()),
        ("threshold", good.sha256.as_str())
    );
    assert_eq!(list[0].state, RunState::Running);
    let files: Vec<_> = std::fs::read_dir(node.dir.path().join("modules"))
        .unwrap()
        .flatten()
        .filter(|e| e.path().extension().is_some_and(|x| x == "wasm"))
        .collect();
    assert_eq!(files.len(), 1, "only the good module's file is kept");
}

#[tokio::test(flavor = "multi_thread")]
async fn upgrades_swap_atomically_and_modules_survive_a_restart() {
    let node = node().await;
    node.host.deploy(module_bytes("threshold")).await.unwrap();
    let v2 = repackage("threshold", |m| {
        m.version = "0.2.0".into();
        m.config = serde_json::json!({"rules": [{"property": "temperature", "min": -40.0, "max": 100.0, "action": "reject"}]});
    });

    // A caller hammers the handler bound to the device while the upgrade happens.
    let host = Arc::new(node);
    let caller = {
        let host = host.clone();
        tokio::spawn(async move {
            let mut verdicts = Vec::new();
            let deadline = Instant::now() + Duration::from_secs(60);
            while Instant::now() < deadline {
                let handlers = host.host.handlers_for("default/thermo-1");
                assert_eq!(handlers.len(), 1);
                let verdict = handlers[0]
                    .on_update(update("temperature", TwinValue::Float(90.0)), None)
                    .await
                    .expect("no call fails during an upgrade");
                verdicts.push(matches!(verdict, Verdict::Accept));
                if verdicts.len() > 50
                    && verdicts.last() == Some(&true)
                    && verdicts.iter().rev().take(50).all(|v| *v)
                {
                    break;
                }
            }
            verdicts
        })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    let upgraded = host.host.deploy(v2).await.unwrap();
    assert_eq!(upgraded.version, "0.2.0");
    let verdicts = caller.await.unwrap();
    let first_new = verdicts
        .iter()
        .position(|v| *v)
        .expect("the new version answered");
    assert!(first_new > 0, "the old version answered first");
    assert!(
        verdicts[first_new..].iter().all(|v| *v),
        "an old instance answered after the swap"
    );

    // A mapper upgrade keeps its devices.
    host.host
        .deploy(module_bytes("virtual-thermometer"))
        .await
        .unwrap();
    mapper(&host, "virtual-thermometer")
        .add_device(Device {
            id: "default/thermo-9".into(),
            protocol: "virtual".into(),
            protocol_config: "{}".into(),
            properties: vec![],
        })
        .await
        .unwrap();
    host.host
        .deploy(repackage("virtual-thermometer", |m| {
            m.version = "0.1.1".into()
        }))
        .await
        .unwrap();
    let thermo = mapper(&host, "virtual-thermometer");
    assert_eq!(thermo.manifest().version, "0.1.1");
    assert_eq!(thermo.devices(), ["default/thermo-9"]);

    // Restart: a new host over the same directory and database.
    let Ok(node) = Arc::try_unwrap(host) else {
        panic!("host still shared")
    };
    node.host.shutdown();
    let Node { dir, store, .. } = node;
    drop(store);
    let node = node_in(dir).await;
    let reloaded = node.host.load_persisted().await;
    assert!(reloaded.iter().all(|(_, r)| r.is_ok()), "{reloaded:?}");
    let names: Vec<(String, String)> = node
        .host
        .list()
        .into_iter()
        .map(|s| (s.name, s.version))
        .collect();
    assert_eq!(
        names,
        [
            ("threshold".into(), "0.2.0".into()),
            ("virtual-thermometer".into(), "0.1.1".into())
        ]
    );

    node.host.remove("threshold").await.unwrap();
    assert!(matches!(
        node.host.remove("threshold").await,
        Err(WasmError::NotFound(_))
    ));
    assert!(node.host.handlers_for("default/thermo-1").is_empty());
    let files = std::fs::read_dir(node.dir.path().join("modules"))
        .unwrap()
        .flatten()
        .filter(|e| e.path().extension().is_some_and(|x| x == "wasm"))
        .count();
    assert_eq!(files, 1, "the removed module's file is deleted");
}

#[tokio::test(flavor = "multi_thread")]
async fn compiled_modules_are_cached() {
    let dir = tempfile::tempdir().unwrap();
    let engine = WasmEngine::new(dir.path(), &Default::default()).unwrap();
    let bytes = std::fs::read(module("threshold")).unwrap();
    let (_, first) = engine.component(&bytes).unwrap();
    let (_, second) = engine.component(&bytes).unwrap();
    assert_eq!(first, wedge_wasm::CompileSource::Compiled);
    assert_eq!(second, wedge_wasm::CompileSource::Cached);
}
