//! The embedded broker on its own, driven by real MQTT clients: rumqttc, and mosquitto's own
//! `mosquitto_pub` / `mosquitto_sub` as an independent implementation.

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use common::{Seen, TestClient, WAIT, free_port, url};
use rumqttc::{LastWill, MqttOptions, QoS};
use tokio_util::sync::CancellationToken;
use wedge_eventbus::Credentials;
use wedge_eventbus::broker::{BrokerOptions, Delivery, EmbeddedBroker};

async fn broker(options: BrokerOptions) -> (EmbeddedBroker, u16) {
    let port = free_port();
    let b = EmbeddedBroker::start(
        &url(port),
        options,
        Arc::default(),
        &CancellationToken::new(),
    )
    .await
    .expect("broker listens");
    (b, port)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dollar_topics_need_an_explicit_first_level() {
    let (b, port) = broker(BrokerOptions::default()).await;
    let mut all = TestClient::connect(port, "all").await;
    all.subscribe("#").await;
    let mut hw = TestClient::connect(port, "hw").await;
    hw.subscribe("$hw/events/device/+/+/twin/+").await;
    let publisher = TestClient::connect(port, "pub").await;

    publisher
        .publish("$hw/events/device/default/thermo-1/twin/update", "t")
        .await;
    let p = hw.next_publish().await;
    assert_eq!(p.topic, "$hw/events/device/default/thermo-1/twin/update");
    all.no_publish(Duration::from_millis(300)).await;

    publisher.publish("plain/topic", "p").await;
    assert_eq!(all.next_publish().await.topic, "plain/topic");
    hw.no_publish(Duration::from_millis(100)).await;
    b.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn qos1_delivery_and_retained_messages() {
    let (b, port) = broker(BrokerOptions::default()).await;
    let publisher = TestClient::connect(port, "pub").await;
    let mut witness = TestClient::connect(port, "witness").await;
    witness.subscribe("state/lamp").await;
    publisher
        .client
        .publish("state/lamp", QoS::AtLeastOnce, true, "on")
        .await
        .unwrap();
    // Once the witness has it, the broker holds it as retained.
    assert!(!witness.next_publish().await.retain);
    let mut live = TestClient::connect(port, "live").await;
    live.subscribe("state/+").await;
    // Retained for a subscriber that comes later: flagged retain.
    let p = live.next_publish().await;
    assert_eq!(
        (p.topic.as_str(), &p.payload[..], p.retain),
        ("state/lamp", &b"on"[..], true)
    );
    assert_eq!(p.qos, QoS::AtLeastOnce);
    assert_ne!(p.pkid, 0);
    // Live delivery to an existing subscription: not flagged retain.
    publisher.publish("state/fan", "off").await;
    let p = live.next_publish().await;
    assert_eq!((p.topic.as_str(), p.retain), ("state/fan", false));
    // QoS is the lower of the publish and the subscription.
    publisher
        .client
        .publish("state/fan", QoS::AtMostOnce, false, "x")
        .await
        .unwrap();
    assert_eq!(live.next_publish().await.qos, QoS::AtMostOnce);
    // An empty retained publish clears the retained message.
    publisher
        .client
        .publish("state/lamp", QoS::AtLeastOnce, true, "")
        .await
        .unwrap();
    let _cleared = live.next_publish().await;
    let mut later = TestClient::connect(port, "later").await;
    later.subscribe("state/#").await;
    later.no_publish(Duration::from_millis(300)).await;
    b.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn credentials_are_required_when_configured() {
    let kubeedge = Credentials {
        username: "mapper".to_owned(),
        password: "s3cret".to_owned(),
    };
    let options = BrokerOptions {
        access: wedge_eventbus::access::AccessPolicy::build(Some(&kubeedge), None).unwrap(),
        ..BrokerOptions::default()
    };
    let (b, port) = broker(options).await;
    for login in [None, Some(("mapper", "wrong"))] {
        let mut o = MqttOptions::new("intruder", "127.0.0.1", port);
        if let Some((u, p)) = login {
            o.set_credentials(u, p);
        }
        let mut c = TestClient::spawn(o);
        match c.next_event().await {
            Seen::Error(e) => assert!(e.contains("BadUserNamePassword"), "{e}"),
            other => panic!("expected a refusal, got {other:?}"),
        }
    }
    let mut o = MqttOptions::new("mapper-1", "127.0.0.1", port);
    o.set_credentials("mapper", "s3cret");
    let _ok = TestClient::connect_with(o).await;
    b.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn will_is_published_when_a_client_vanishes() {
    let (b, port) = broker(BrokerOptions::default()).await;
    let mut watcher = TestClient::connect(port, "watcher").await;
    watcher.subscribe("devices/+/status").await;
    let mut o = MqttOptions::new("dev-7", "127.0.0.1", port);
    o.set_last_will(LastWill::new(
        "devices/dev-7/status",
        "gone",
        QoS::AtLeastOnce,
        false,
    ));
    let doomed = TestClient::connect_with(o).await;
    // Dropping the client aborts its event loop: the socket closes without DISCONNECT.
    drop(doomed);
    let p = watcher.next_publish().await;
    assert_eq!(
        (p.topic.as_str(), &p.payload[..]),
        ("devices/dev-7/status", &b"gone"[..])
    );
    b.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_connection_takes_the_client_id_over() {
    let (b, port) = broker(BrokerOptions::default()).await;
    let mut first = TestClient::connect(port, "same-id").await;
    let mut o = MqttOptions::new("same-id", "127.0.0.1", port);
    o.set_keep_alive(Duration::from_secs(60));
    let mut second = TestClient::connect_with(o).await;
    match first.next_event().await {
        Seen::Error(_) => {}
        other => panic!("first connection should be closed, got {other:?}"),
    }
    // The first client redials and takes the id back in turn; stop it doing so.
    first.client.disconnect().await.ok();
    drop(first);
    second.subscribe("x").await;
    b.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_link_and_stop_frees_the_port() {
    let (b, port) = broker(BrokerOptions::default()).await;
    let (tx, mut rx) = tokio::sync::mpsc::channel::<Delivery>(8);
    let link = b.local_link(tx);
    link.subscribe("$hw/events/upload/#");
    let mut sub = TestClient::connect(port, "sub").await;
    sub.subscribe("to/devices").await;
    let device = TestClient::connect(port, "dev").await;
    device.publish("$hw/events/upload/a", "up").await;
    let d = tokio::time::timeout(WAIT, rx.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (&*d.topic, &d.payload[..]),
        ("$hw/events/upload/a", &b"up"[..])
    );
    link.publish(
        "to/devices",
        Bytes::from_static(b"down"),
        QoS::AtLeastOnce,
        false,
    );
    assert_eq!(&sub.next_publish().await.payload[..], b"down");
    drop((sub, device, link));
    b.stop().await;
    // Stopped means the port is free again at once.
    let again = EmbeddedBroker::start(
        &url(port),
        BrokerOptions::default(),
        Arc::default(),
        &CancellationToken::new(),
    )
    .await
    .expect("port free after stop");
    again.stop().await;
}

/// A `mosquitto_sub` process, killed when dropped; its output lines arrive on a channel.
struct MosquittoSub {
    child: Child,
    lines: std::sync::mpsc::Receiver<String>,
}

fn client_binary(name: &str) -> String {
    let found = Command::new("sh")
        .arg("-c")
        .arg(format!("command -v {name}"))
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    assert!(
        found,
        "{name} is not installed: apt-get install mosquitto-clients (.ci/setup installs it)"
    );
    name.to_owned()
}

impl MosquittoSub {
    fn start(port: u16, topic: &str) -> MosquittoSub {
        let mut child = Command::new(client_binary("mosquitto_sub"))
            .args(["-h", "127.0.0.1", "-p", &port.to_string(), "-q", "1", "-v"])
            .args(["-i", "mosquitto-sub-test", "-t", topic])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("start mosquitto_sub");
        let stdout = child.stdout.take().expect("stdout");
        let (tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        MosquittoSub { child, lines }
    }

    /// The next output line, if one comes within `wait` (blocks: call off the runtime).
    fn line_within(&self, wait: Duration) -> Option<String> {
        self.lines.recv_timeout(wait).ok()
    }
}

impl Drop for MosquittoSub {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs `mosquitto_pub` once with QoS 1.
fn mosquitto_pub(port: u16, topic: &str, payload: &str) -> bool {
    Command::new(client_binary("mosquitto_pub"))
        .args(["-h", "127.0.0.1", "-p", &port.to_string(), "-q", "1"])
        .args(["-t", topic, "-m", payload])
        .status()
        .map(|s| s.success())
        .unwrap_or(false)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mosquitto_clients_interoperate() {
    let (b, port) = broker(BrokerOptions::default()).await;
    let sub = MosquittoSub::start(port, "$hw/events/node/+/membership/get");
    let topic = "$hw/events/node/edge-1/membership/get";
    // mosquitto_sub says nothing when its subscription is in place: publish until it prints.
    let line = tokio::task::spawn_blocking(move || {
        let deadline = std::time::Instant::now() + WAIT;
        loop {
            assert!(mosquitto_pub(port, topic, "{}"), "mosquitto_pub failed");
            if let Some(line) = sub.line_within(Duration::from_millis(300)) {
                return line;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "mosquitto_sub received nothing"
            );
        }
    })
    .await
    .unwrap();
    assert_eq!(line, "$hw/events/node/edge-1/membership/get {}");
    b.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_clients_are_dropped_after_one_and_a_half_keep_alives() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    let (b, port) = broker(BrokerOptions::default()).await;
    let mut watcher = TestClient::connect(port, "watcher").await;
    watcher.subscribe("devices/+/status").await;
    // A raw client: CONNECT with a 1 s keep-alive and a will, then silence.
    let mut connect = rumqttc::Connect::new("silent");
    connect.keep_alive = 1;
    connect.last_will = Some(LastWill::new(
        "devices/silent/status",
        "timed out",
        QoS::AtMostOnce,
        false,
    ));
    let mut bytes = bytes::BytesMut::new();
    connect.write(&mut bytes).unwrap();
    let mut socket = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .unwrap();
    socket.write_all(&bytes).await.unwrap();
    let mut connack = [0u8; 4];
    socket.read_exact(&mut connack).await.unwrap();
    assert_eq!(connack, [0x20, 2, 0, 0], "CONNACK accepted");
    // The broker closes the socket (EOF) and publishes the will.
    let mut rest = Vec::new();
    let read = tokio::time::timeout(WAIT, socket.read_to_end(&mut rest)).await;
    assert!(matches!(read, Ok(Ok(0))), "socket not closed: {read:?}");
    let p = watcher.next_publish().await;
    assert_eq!(&p.payload[..], b"timed out");
    b.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn other_protocol_versions_are_refused() {
    let (b, port) = broker(BrokerOptions::default()).await;
    for version in ["mqttv31", "mqttv5"] {
        let status = tokio::task::spawn_blocking(move || {
            Command::new(client_binary("mosquitto_pub"))
                .args(["-h", "127.0.0.1", "-p", &port.to_string(), "-V", version])
                .args(["-t", "a/b", "-m", "x"])
                .stderr(Stdio::null())
                .status()
                .expect("run mosquitto_pub")
        })
        .await
        .unwrap();
        assert!(!status.success(), "{version} accepted");
    }
    // MQTT 3.1.1 from the same tool is accepted.
    assert!(
        tokio::task::spawn_blocking(move || mosquitto_pub(port, "a/b", "x"))
            .await
            .unwrap()
    );
    b.stop().await;
}
