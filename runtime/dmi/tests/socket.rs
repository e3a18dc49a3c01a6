//! The DMI socket against real clients: the module runs under a supervisor on a real unix
//! socket, and tonic clients (from this process, or from a child process when a second pid is
//! needed) call it as KubeEdge mappers do. Each test checks one protection of issue 32 and the
//! counter that records its refusals.

use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use hyper_util::rt::TokioIo;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tonic::Code;
use tonic::transport::{Channel, Endpoint};
use wedge_core::health::Health;
use wedge_core::message::{group, module};
use wedge_core::module::{SupervisionSettings, Supervisor};
use wedge_core::store::StoreOptions;
use wedge_core::{Bus, Mailbox, Store};
use wedge_device::definition::{Catalog, DeviceDefinition, KubeObject, parse_yaml};
use wedge_dmi::pb;
use wedge_dmi::pb::device_manager_service_client::DeviceManagerServiceClient;
use wedge_dmi::{COMPONENT, Dmi, DmiSettings, MIGRATIONS};

const PROTOCOL: &str = "virtualProtocol";

const OBJECTS: &str = r#"
apiVersion: devices.kubeedge.io/v1beta1
kind: DeviceModel
metadata: {name: sensor}
spec:
  protocol: virtualProtocol
  properties:
  - {name: setpoint, type: INT, accessMode: ReadWrite}
---
apiVersion: devices.kubeedge.io/v1beta1
kind: Device
metadata: {name: d1}
spec:
  deviceModelRef: {name: sensor}
  protocol: {protocolName: virtualProtocol}
  properties:
  - name: setpoint
    desired: {value: "30"}
    visitors: {protocolName: virtualProtocol, configData: {key: setpoint}}
"#;

fn definition() -> DeviceDefinition {
    let mut catalog = Catalog::new();
    let objects: Vec<KubeObject> = parse_yaml(OBJECTS).expect("valid objects");
    objects
        .into_iter()
        .flat_map(|o| catalog.put(o))
        .next()
        .expect("the device is defined")
}

/// A node running only the DMI module, with a mailbox standing in for devicetwin.
struct Node {
    dir: PathBuf,
    socket: PathBuf,
    store: Store,
    dmi: Arc<Dmi>,
    supervisor: Supervisor,
    twin: Mailbox,
}

impl Node {
    async fn start(dir: &Path, configure: impl FnOnce(&mut DmiSettings)) -> Node {
        let store = Store::open(&dir.join("edgecore.db"), StoreOptions::default())
            .expect("the store opens");
        store
            .migrate(COMPONENT, MIGRATIONS)
            .await
            .expect("the schema applies");
        Node::start_on(dir, store, configure).await
    }

    async fn start_on(dir: &Path, store: Store, configure: impl FnOnce(&mut DmiSettings)) -> Node {
        let socket = dir.join("run").join("dmi.sock");
        let _ = std::fs::remove_file(&socket);
        let mut settings = DmiSettings::new(socket.clone());
        configure(&mut settings);
        let dmi = Arc::new(Dmi::new(store.clone(), settings));
        let bus = Bus::new(4096);
        let twin = bus
            .register(module::TWIN, group::TWIN)
            .expect("a devicetwin mailbox");
        let mut supervisor =
            Supervisor::new(bus.clone(), Health::new(), SupervisionSettings::default());
        supervisor.spawn(dmi.clone()).expect("the module starts");
        let deadline = Instant::now() + Duration::from_secs(10);
        while !socket.exists() {
            assert!(
                Instant::now() < deadline,
                "no DMI socket at {}",
                socket.display()
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        Node {
            dir: dir.to_owned(),
            socket,
            store,
            dmi,
            supervisor,
            twin,
        }
    }

    async fn stop(self) -> (PathBuf, Store) {
        self.supervisor.shutdown().await;
        (self.dir, self.store)
    }

    async fn client(&self) -> DeviceManagerServiceClient<Channel> {
        client(&self.socket)
    }

    /// Reports handed to devicetwin so far.
    fn twin_reports(&mut self) -> usize {
        let mut n = 0;
        while self.twin.try_recv().is_some() {
            n += 1;
        }
        n
    }
}

/// A client of the node's socket; the connection is made at the first call.
fn client(socket: &Path) -> DeviceManagerServiceClient<Channel> {
    let socket = socket.to_owned();
    let channel = Endpoint::from_static("http://dmi.node")
        .connect_timeout(Duration::from_secs(5))
        .timeout(Duration::from_secs(10))
        .connect_with_connector_lazy(tower::service_fn(move |_| {
            let socket = socket.clone();
            async move {
                let stream = tokio::net::UnixStream::connect(&socket).await?;
                Ok::<_, std::io::Error>(TokioIo::new(stream))
            }
        }));
    DeviceManagerServiceClient::new(channel)
}

fn register_request(address: &Path) -> pb::MapperRegisterRequest {
    pb::MapperRegisterRequest {
        with_data: true,
        mapper: Some(pb::MapperInfo {
            name: "virtual-mapper".into(),
            protocol: PROTOCOL.into(),
            address: address.as_os_str().as_encoded_bytes().to_vec(),
            ..Default::default()
        }),
    }
}

fn report(value: &str) -> pb::ReportDeviceStatusRequest {
    pb::ReportDeviceStatusRequest {
        device_name: "d1".into(),
        device_namespace: "default".into(),
        reported_device: Some(pb::DeviceStatus {
            twins: vec![pb::Twin {
                property_name: "setpoint".into(),
                reported: Some(pb::TwinProperty {
                    value: value.into(),
                    ..Default::default()
                }),
                ..Default::default()
            }],
            ..Default::default()
        }),
    }
}

/// Code of a call's result (`Ok` for success).
fn code<T>(result: Result<tonic::Response<T>, tonic::Status>) -> Code {
    match result {
        Ok(_) => Code::Ok,
        Err(status) => status.code(),
    }
}

/// A mapper's own DMI socket, answering connections (the node probes it).
fn mapper_socket(path: &Path) -> std::os::unix::net::UnixListener {
    std::os::unix::net::UnixListener::bind(path).expect("the mapper socket binds")
}

const HELPER: &str = "WEDGE_DMI_TEST_HELPER";

/// Runs MapperRegister from another process (this test binary, running `helper_process`):
/// the registrant then has another pid, same uid. Returns the call's code.
async fn register_from_child(node_socket: &Path, address: &Path) -> Code {
    let exe = std::env::current_exe().expect("the test binary");
    let (node_socket, address) = (node_socket.to_owned(), address.to_owned());
    let output = tokio::task::spawn_blocking(move || {
        Command::new(exe)
            .args([
                "helper_process",
                "--exact",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(HELPER, "register")
            .env("WEDGE_DMI_TEST_SOCKET", node_socket)
            .env("WEDGE_DMI_TEST_ADDRESS", address)
            .output()
            .expect("the helper runs")
    })
    .await
    .expect("the helper is waited for");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let code = stdout
        .lines()
        .find_map(|l| l.split("helper-code=").nth(1))
        .and_then(|c| {
            let digits: String = c.chars().take_while(char::is_ascii_digit).collect();
            digits.parse::<i32>().ok()
        })
        .unwrap_or_else(|| panic!("no helper code in {stdout}"));
    Code::from_i32(code)
}

/// The child's side of [`register_from_child`]; does nothing in a normal test run.
#[tokio::test]
async fn helper_process() {
    if std::env::var(HELPER).as_deref() != Ok("register") {
        return;
    }
    let socket = PathBuf::from(std::env::var("WEDGE_DMI_TEST_SOCKET").expect("socket"));
    let address = PathBuf::from(std::env::var("WEDGE_DMI_TEST_ADDRESS").expect("address"));
    let result = client(&socket)
        .mapper_register(register_request(&address))
        .await;
    // The harness prints the test's name on the same line: the code is found inside it.
    println!("helper-code={}", code(result) as i32);
}

#[tokio::test]
async fn the_socket_is_0600_under_umask_0() {
    const CHILD: &str = "WEDGE_DMI_TEST_UMASK_CHILD";
    if std::env::var(CHILD).is_err() {
        // umask is per process: the check runs in a child started under `umask 000`.
        let exe = std::env::current_exe().expect("the test binary");
        let output = tokio::task::spawn_blocking(move || {
            Command::new("sh")
                .arg("-c")
                .arg("umask 000 && exec \"$0\" \"$@\"")
                .arg(exe)
                .args([
                    "the_socket_is_0600_under_umask_0",
                    "--exact",
                    "--nocapture",
                    "--test-threads=1",
                ])
                .env(CHILD, "1")
                .output()
                .expect("sh runs")
        })
        .await
        .expect("the child is waited for");
        assert!(
            output.status.success() && String::from_utf8_lossy(&output.stdout).contains("1 passed"),
            "the check under umask 000 failed:\n{}\n{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        return;
    }
    let dir = tempfile::tempdir().expect("a temp dir");
    // The umask really is 000 here: a file asked for 0666 gets 0666.
    let probe = dir.path().join("probe");
    std::fs::OpenOptions::new()
        .create_new(true)
        .write(true)
        .mode(0o666)
        .open(&probe)
        .expect("a probe file");
    let probe_mode = std::fs::metadata(&probe)
        .expect("probe")
        .permissions()
        .mode();
    assert_eq!(probe_mode & 0o777, 0o666, "the child runs under umask 000");
    let node = Node::start(dir.path(), |_| {}).await;
    let meta = std::fs::symlink_metadata(&node.socket).expect("the socket");
    assert_eq!(meta.mode() & 0o777, 0o600, "socket mode under umask 000");
    // And it serves: a report is answered (refused: no mapper), not a transport error.
    let answer = node.client().await.report_device_status(report("1")).await;
    assert_eq!(code(answer), Code::PermissionDenied);
    node.stop().await;
}

#[tokio::test]
async fn a_peer_whose_uid_is_not_allowed_is_closed_before_any_grpc() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let own_uid = std::fs::metadata(dir.path()).expect("the dir").uid();
    let other = if own_uid == 4242 { 4243 } else { 4242 };
    let node = Node::start(dir.path(), |s| {
        s.access.allowed_uids = Some(vec![other]);
    })
    .await;
    let answer = node.client().await.report_device_status(report("1")).await;
    let code = code(answer);
    assert!(
        code != Code::Ok && code != Code::PermissionDenied,
        "the connection must fail before gRPC, not answer: {code:?}"
    );
    let counters = node.dmi.counters();
    assert!(counters.refused_peer >= 1, "{counters:?}");
    assert_eq!(counters.connections, 0, "nothing reached the gRPC server");
    node.stop().await;
}

#[tokio::test]
async fn a_report_not_from_the_devices_registered_mapper_is_refused() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let mut node = Node::start(dir.path(), |_| {}).await;
    node.dmi.device_defined(definition());
    let mut client = node.client().await;
    // No mapper registered for the device's protocol.
    let answer = client.report_device_status(report("666")).await;
    assert_eq!(code(answer), Code::PermissionDenied);
    // A mapper registered by another process (then gone): this one still may not report.
    let address = dir.path().join("mapper.sock");
    let listener = mapper_socket(&address);
    assert_eq!(register_from_child(&node.socket, &address).await, Code::Ok);
    let answer = client.report_device_status(report("666")).await;
    let status = answer.expect_err("refused");
    assert_eq!(status.code(), Code::PermissionDenied);
    assert!(
        status.message().contains("another process"),
        "{}",
        status.message()
    );
    assert_eq!(node.twin_reports(), 0, "nothing reached devicetwin");
    assert_eq!(node.dmi.counters().refused_not_owner, 2);
    // Registered itself (the child is gone, and this process serves the mapper socket now),
    // it may.
    let answer = client.mapper_register(register_request(&address)).await;
    assert_eq!(code(answer), Code::Ok);
    assert_eq!(
        code(client.report_device_status(report("21")).await),
        Code::Ok
    );
    assert_eq!(node.twin_reports(), 1);
    drop(listener);
    node.stop().await;
}

#[tokio::test]
async fn a_second_registration_for_a_live_protocol_is_refused() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let node = Node::start(dir.path(), |_| {}).await;
    let mut client = node.client().await;
    let first = dir.path().join("first.sock");
    let listener = mapper_socket(&first);
    assert_eq!(
        code(client.mapper_register(register_request(&first)).await),
        Code::Ok
    );
    // The holder is live: another process may not take the protocol.
    let second = dir.path().join("second.sock");
    assert_eq!(
        register_from_child(&node.socket, &second).await,
        Code::AlreadyExists
    );
    assert_eq!(node.dmi.counters().refused_protocol_held, 1);
    assert_eq!(
        node.dmi.mappers(),
        vec![(PROTOCOL.to_owned(), "virtual-mapper".to_owned())]
    );
    // The same process registering again is the holder itself.
    assert_eq!(
        code(client.mapper_register(register_request(&first)).await),
        Code::Ok
    );
    // Once the holder is gone (its socket no longer answers), the same user may.
    drop(listener);
    std::fs::remove_file(&first).expect("the old socket is removed");
    assert_eq!(register_from_child(&node.socket, &second).await, Code::Ok);
    assert_eq!(node.dmi.counters().refused_protocol_held, 1);
    node.stop().await;
}

#[tokio::test]
async fn a_burst_above_the_report_rate_is_partly_refused_and_counted() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let mut node = Node::start(dir.path(), |s| {
        s.limits.reports = wedge_dmi::Rate {
            per_second: 5.0,
            burst: 10,
        };
    })
    .await;
    node.dmi.device_defined(definition());
    let mut client = node.client().await;
    let address = dir.path().join("mapper.sock");
    let _listener = mapper_socket(&address);
    assert_eq!(
        code(client.mapper_register(register_request(&address)).await),
        Code::Ok
    );
    let start = Instant::now();
    let (mut accepted, mut refused) = (0u64, 0u64);
    for i in 0..60 {
        match code(client.report_device_status(report(&i.to_string())).await) {
            Code::Ok => accepted += 1,
            Code::ResourceExhausted => refused += 1,
            other => panic!("report {i}: {other:?}"),
        }
    }
    let most = 10 + (start.elapsed().as_secs_f64() * 5.0).ceil() as u64;
    assert!(accepted >= 10, "the burst passes: {accepted}");
    assert!(accepted <= most, "{accepted} accepted, at most {most}");
    assert_eq!(accepted + refused, 60);
    let counters = node.dmi.counters();
    assert_eq!(counters.refused_rate, refused);
    assert_eq!(counters.reports, accepted);
    assert_eq!(node.twin_reports() as u64, accepted);
    node.stop().await;
}

#[tokio::test]
async fn a_message_over_the_decoding_limit_is_refused() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let node = Node::start(dir.path(), |s| {
        s.limits.max_message_size = 4096;
    })
    .await;
    let mut client = node.client().await;
    let answer = client.report_device_status(report(&"x".repeat(8192))).await;
    assert_eq!(code(answer), Code::OutOfRange);
    assert_eq!(node.dmi.counters().refused_oversized, 1);
    // The connection goes on: a small report is judged on its merits.
    let answer = client.report_device_status(report("1")).await;
    assert_eq!(code(answer), Code::PermissionDenied);
    node.stop().await;
}

#[tokio::test]
async fn a_frame_over_the_announced_size_closes_the_connection_before_it_is_held() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let node = Node::start(dir.path(), |_| {}).await;
    let mut raw = tokio::net::UnixStream::connect(&node.socket)
        .await
        .expect("connects");
    let mut bytes = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    // A DATA frame announcing 16 MiB (and a little of it).
    bytes.extend_from_slice(&[0xff, 0xff, 0xff, 0x0, 0x0, 0, 0, 0, 1]);
    bytes.extend_from_slice(&[0u8; 1024]);
    raw.write_all(&bytes).await.expect("sent");
    let mut sink = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), raw.read_to_end(&mut sink))
        .await
        .expect("the node closes the connection")
        .ok();
    assert_eq!(node.dmi.counters().refused_oversized, 1);
    node.stop().await;
}

#[tokio::test]
async fn connections_past_the_cap_are_closed_and_counted() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let node = Node::start(dir.path(), |s| {
        s.limits.max_connections = 2;
    })
    .await;
    let mut held = Vec::new();
    for _ in 0..2 {
        let mut raw = tokio::net::UnixStream::connect(&node.socket)
            .await
            .expect("connects");
        raw.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
            .await
            .expect("sent");
        held.push(raw);
    }
    let mut third = tokio::net::UnixStream::connect(&node.socket)
        .await
        .expect("the kernel queues it");
    let mut sink = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), third.read_to_end(&mut sink))
        .await
        .expect("the node closes the third connection")
        .ok();
    assert!(sink.is_empty(), "no HTTP/2 byte for a refused connection");
    let counters = node.dmi.counters();
    assert_eq!(counters.refused_connections, 1, "{counters:?}");
    assert_eq!(counters.connections, 2);
    // A slot freed is taken again.
    held.clear();
    let answer = node.client().await.report_device_status(report("1")).await;
    assert_eq!(code(answer), Code::PermissionDenied);
    node.stop().await;
}

#[tokio::test]
async fn remembered_mappers_are_reverified_at_restart() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let node = Node::start(dir.path(), |_| {}).await;
    let mut client = node.client().await;
    let address = dir.path().join("mapper.sock");
    let _listener = mapper_socket(&address);
    assert_eq!(
        code(client.mapper_register(register_request(&address)).await),
        Code::Ok
    );
    drop(client);
    let (dir_path, store) = node.stop().await;
    // A row from before owners were recorded, whose mapper does not answer.
    store
        .write(|conn| {
            conn.execute(
                "INSERT INTO dmi_mapper (protocol, name, version, api_version, address, state)
                 VALUES ('oldProtocol', 'old-mapper', '', '', x'2f6e6f6e65', '')",
                [],
            )?;
            Ok(())
        })
        .await
        .expect("a legacy row");
    let mut node = Node::start_on(&dir_path, store, |_| {}).await;
    assert_eq!(
        node.dmi.mappers(),
        vec![(PROTOCOL.to_owned(), "virtual-mapper".to_owned())],
        "the verified mapper is kept, the unverifiable one forgotten"
    );
    assert_eq!(node.dmi.counters().forgotten_unverified, 1);
    // Its registrant's reports still count after the restart.
    node.dmi.device_defined(definition());
    let answer = node.client().await.report_device_status(report("3")).await;
    assert_eq!(code(answer), Code::Ok);
    assert_eq!(node.twin_reports(), 1);
    node.stop().await;
}
