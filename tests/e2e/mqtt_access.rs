//! Who may use the embedded broker, against `wedge run` with a users file (issue 15, row 11):
//! anonymous clients and wrong passwords are refused, each user publishes and subscribes only
//! within its topics (a mapper cannot read every device, answer mappers in devicetwin's name,
//! set desired values, or leave a will on another device's topic), and what is refused is
//! counted. The TLS listener (`wedge.broker.tls`) applies the same users file, after asking
//! for a client certificate.

use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

use wedge_eventbus::access::{MIN_ITERATIONS, PasswordHash};
use wedge_tests::cloud_node::{CloudNode, NodeOptions};
use wedge_tests::cloudhub::{CloudCa, CloudHub, CloudHubOptions};
use wedge_tests::mqtt::{MqttClient, tls_client_config};

const THERMO_1: &str = "$hw/events/device/default/thermo-1";
const THERMO_2: &str = "$hw/events/device/default/thermo-2";

/// `wedge mqtt hash-password` with `password` on its standard input.
fn cli_hash(password: &str) -> String {
    use std::io::Write;
    let mut child = std::process::Command::new(wedge_tests::wedge_bin())
        .args(["mqtt", "hash-password", "--iterations", "10000"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("wedge runs (cargo build --bins first)");
    writeln!(child.stdin.take().unwrap(), "{password}").unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{out:?}");
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

fn users_file(dir: &std::path::Path) -> std::path::PathBuf {
    let hash = |password: &str| {
        PasswordHash::derive(password.as_bytes(), b"test-salt", MIN_ITERATIONS * 10)
    };
    let path = dir.join("mqtt-users.yaml");
    std::fs::write(
        &path,
        format!(
            "users:
- name: thermo-mapper
  passwordHash: \"{mapper}\"
  publish: [\"{THERMO_1}/twin/update\", \"{THERMO_1}/twin/get\", \"{THERMO_1}/state/update\"]
  subscribe: [\"{THERMO_1}/#\"]
- name: operator
  passwordHash: \"{operator}\"
  publish: [\"#\"]
  subscribe: [\"#\"]
",
            mapper = hash("mapper-pw"),
            // Made the way an operator makes one.
            operator = cli_hash("operator-pw"),
        ),
    )
    .unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    path
}

/// `mapper` updates thermo-1's temperature to `value` and gets the result of `event`.
fn own_update_is_answered(mapper: &mut MqttClient, event: &str, value: &str) {
    let update = format!(
        r#"{{"event_id":"{event}","timestamp":1,"twin":{{"temperature":{{"actual":{{"value":"{value}"}},"metadata":{{"type":"int"}}}}}}}}"#
    );
    mapper
        .publish(&format!("{THERMO_1}/twin/update"), update)
        .unwrap();
    let result = mapper
        .expect(
            &format!("{THERMO_1}/twin/update/result"),
            Duration::from_secs(10),
        )
        .unwrap();
    assert!(
        result.contains(&format!("\"event_id\":\"{event}\"")),
        "{result}"
    );
}

/// A node of `hub` with `wedge_extra` in its `wedge:` section.
fn node_with(hub: &CloudHub, wedge_extra: &str) -> CloudNode {
    CloudNode::start_with(
        hub,
        NodeOptions {
            wedge_extra,
            ..NodeOptions::default()
        },
    )
    .unwrap()
}

#[test]
fn a_users_file_keeps_each_client_to_its_topics_and_refuses_anonymous_ones() {
    let files = tempfile::tempdir().unwrap();
    let users = users_file(files.path());
    let hub = CloudHub::start(CloudHubOptions::default()).unwrap();
    let node = node_with(
        &hub,
        &format!("  mqtt:\n    usersFile: {}\n", users.display()),
    );
    let port = node.mqtt_port;
    assert!(
        node.daemon.log().contains("log-in required"),
        "the broker says who may connect:\n{}",
        node.daemon.log()
    );

    // Anonymous and wrong passwords: refused at CONNECT.
    let anonymous = MqttClient::connect(port, "anon").err().expect("refused");
    assert!(
        anonymous.to_string().contains("BadUserNamePassword"),
        "{anonymous}"
    );
    let wrong = MqttClient::connect_with(port, "m", Some(("thermo-mapper", "guess")), None)
        .err()
        .expect("refused");
    assert!(wrong.to_string().contains("BadUserNamePassword"), "{wrong}");
    // A will on another device's topic would be taken as that device's twin update.
    let will = MqttClient::connect_with(
        port,
        "m",
        Some(("thermo-mapper", "mapper-pw")),
        Some((&format!("{THERMO_2}/twin/update"), r#"{"twin":{}}"#)),
    )
    .err()
    .expect("refused");
    assert!(will.to_string().contains("NotAuthorized"), "{will}");

    let mut operator =
        MqttClient::connect_with(port, "ops", Some(("operator", "operator-pw")), None).unwrap();
    operator.subscribe("$hw/#").unwrap();
    let mut mapper =
        MqttClient::connect_with(port, "m", Some(("thermo-mapper", "mapper-pw")), None).unwrap();
    assert!(
        !mapper.try_subscribe("$hw/#").unwrap(),
        "reads every device"
    );
    assert!(!mapper.try_subscribe(&format!("{THERMO_2}/#")).unwrap());
    mapper.subscribe(&format!("{THERMO_1}/twin/#")).unwrap();

    // Its own device works as before.
    own_update_is_answered(&mut mapper, "own", "30");

    // Another device's update, a spoofed result, a desired value: acknowledged, never routed.
    let refused = [
        (format!("{THERMO_2}/twin/update"), "other-device"),
        (format!("{THERMO_1}/twin/update/result"), "spoofed-result"),
        (format!("{THERMO_1}/twin/cloud_updated"), "desired-value"),
    ];
    for (topic, marker) in &refused {
        mapper
            .publish(topic, format!(r#"{{"event_id":"{marker}","twin":{{}}}}"#))
            .unwrap();
    }
    let seen = operator.drain(Duration::from_secs(1));
    for (_, marker) in &refused {
        assert!(
            !seen.iter().any(|(_, p)| p.contains(marker)),
            "{marker} was routed: {seen:?}"
        );
    }
    let denied = node
        .metric("wedge_eventbus_broker_access_denied_total")
        .unwrap();
    assert!(denied >= 5.0, "refusals counted: {denied}");
}

#[test]
fn without_a_users_file_the_broker_says_anyone_may_do_anything() {
    let hub = CloudHub::start(CloudHubOptions::default()).unwrap();
    let node = CloudNode::start(&hub, "").unwrap();
    assert!(
        node.daemon
            .log()
            .contains("anonymous clients may publish and subscribe to every topic"),
        "{}",
        node.daemon.log()
    );
    let mut anyone = MqttClient::connect(node.mqtt_port, "anyone").unwrap();
    assert!(anyone.try_subscribe("$hw/#").unwrap());
}

#[test]
fn the_tls_listener_asks_for_a_client_certificate_then_the_users_file_applies() {
    let files = tempfile::tempdir().unwrap();
    let users = users_file(files.path());
    let ca = CloudCa::new().unwrap();
    let server = ca.server_cert(&["127.0.0.1", "localhost"]).unwrap();
    let client = ca.client_cert("thermo-mapper").unwrap();
    let write = |name: &str, text: &str| {
        let path = files.path().join(name);
        std::fs::write(&path, text).unwrap();
        path.display().to_string()
    };
    let (ca_file, cert_file, key_file) = (
        write("ca.pem", &ca.ca_pem()),
        write("server.pem", &server.cert_pem),
        write("server.key", &server.key_pem),
    );
    let tls_port = wedge_tests::free_port();
    let extra = format!(
        "  mqtt:
    usersFile: {users}
  broker:
    tls:
      address: 127.0.0.1:{tls_port}
      certFile: {cert_file}
      keyFile: {key_file}
      clientCAFile: {ca_file}
",
        users = users.display()
    );
    let hub = CloudHub::start(CloudHubOptions::default()).unwrap();
    let node = node_with(&hub, &extra);
    assert!(
        node.daemon.log().contains("listening with TLS"),
        "{}",
        node.daemon.log()
    );
    let with_cert =
        || tls_client_config(&ca.ca_der(), Some((&client.cert_der, &client.key_der))).unwrap();

    // No client certificate: the handshake fails, counted.
    let no_cert = tls_client_config(&ca.ca_der(), None).unwrap();
    assert!(
        MqttClient::connect_tls(tls_port, "m", Some(("thermo-mapper", "mapper-pw")), no_cert)
            .is_err()
    );
    // A certificate, but no password: the users file still applies.
    let anonymous = MqttClient::connect_tls(tls_port, "m", None, with_cert())
        .err()
        .expect("refused");
    assert!(
        anonymous.to_string().contains("BadUserNamePassword"),
        "{anonymous}"
    );

    // Certificate and log-in: the mapper's own device works over TLS, and only its own.
    let mut mapper = MqttClient::connect_tls(
        tls_port,
        "m",
        Some(("thermo-mapper", "mapper-pw")),
        with_cert(),
    )
    .unwrap();
    assert!(
        !mapper.try_subscribe("$hw/#").unwrap(),
        "reads every device"
    );
    mapper.subscribe(&format!("{THERMO_1}/twin/#")).unwrap();
    own_update_is_answered(&mut mapper, "over-tls", "31");
    let handshakes = node
        .metric("wedge_eventbus_broker_closed_total{reason=\"tls_handshake\"}")
        .unwrap();
    assert!(handshakes >= 1.0, "failed handshake counted: {handshakes}");
}
