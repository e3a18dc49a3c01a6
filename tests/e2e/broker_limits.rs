//! The embedded MQTT broker under hostile and bursty clients (issue 15, rows 1, 3, 4, 5, 6, 9),
//! against the real `wedge run`: real sockets, real MQTT clients, the node's own `/metrics` and
//! `/proc/<pid>/status`. Timing is never asserted beyond generous deadlines; the figures are
//! measured by `twin-load`.

use std::collections::HashSet;
use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use rumqttc::{
    AsyncClient, Connect, Event, MqttOptions, Packet, QoS, SubscribeFilter, SubscribeReasonCode,
};
use wedge_tests::http_get;
use wedge_tests::node::{Broker, Extra, TwinNode};
use wedge_tests::twin_fixtures::THERMOMETERS;

const MIB: usize = 1024 * 1024;
/// `wedge.broker.maxPacketBytes`'s default.
const MAX_PACKET: usize = MIB + 64 * 1024;

fn node(dir: &std::path::Path, event_bus: &str, broker: &str) -> TwinNode {
    let extra = Extra {
        modules: String::new(),
        event_bus: event_bus.to_owned(),
        wedge: if broker.is_empty() {
            String::new()
        } else {
            format!("  broker:\n{broker}")
        },
    };
    TwinNode::start_with(dir, Broker::Embedded, THERMOMETERS, &extra).expect("node starts")
}

/// Resident memory of `pid` in bytes (`VmRSS`).
fn rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("proc status");
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS line");
    kb * 1024
}

/// The value of the sample `name` (labels included, e.g. `x{reason="idle"}`) on `/metrics`.
fn metric(node: &TwinNode, name: &str) -> f64 {
    metric_opt(node, name).unwrap_or_else(|| panic!("no sample {name} on /metrics"))
}

fn metric_opt(node: &TwinNode, name: &str) -> Option<f64> {
    let (code, page) = http_get(node.admin, "/metrics").expect("GET /metrics");
    assert_eq!(code, 200);
    page.lines()
        .find_map(|l| l.strip_prefix(name).and_then(|v| v.strip_prefix(' ')))
        .and_then(|v| v.trim().parse().ok())
}

fn encode(packet: Packet) -> Vec<u8> {
    let mut buf = BytesMut::new();
    packet.write(&mut buf, usize::MAX).expect("encode");
    buf.to_vec()
}

/// A raw TCP client that sent CONNECT with `keep_alive` seconds and got CONNACK 0.
fn raw_connect(port: u16, id: &str, keep_alive: u16) -> TcpStream {
    try_raw_connect(port, id, keep_alive).unwrap_or_else(|e| panic!("{e}"))
}

fn try_raw_connect(port: u16, id: &str, keep_alive: u16) -> Result<TcpStream, String> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).map_err(|e| format!("connect: {e}"))?;
    let mut connect = Connect::new(id);
    connect.keep_alive = keep_alive;
    s.write_all(&encode(Packet::Connect(connect)))
        .map_err(|e| format!("CONNECT: {e}"))?;
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut connack = [0u8; 4];
    s.read_exact(&mut connack)
        .map_err(|e| format!("no CONNACK for {id}: {e}"))?;
    if connack != [0x20, 2, 0, 0] {
        return Err(format!("CONNACK for {id}: {connack:?}"));
    }
    Ok(s)
}

/// True when the broker closed `s` within `within` (EOF or reset); false while it stays open.
fn closed_within(s: &mut TcpStream, within: Duration) -> bool {
    let deadline = Instant::now() + within;
    let mut buf = [0u8; 4096];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return false;
        }
        s.set_read_timeout(Some(left)).unwrap();
        match s.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => continue,
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                return false;
            }
            Err(_) => return true,
        }
    }
}

/// A PUBLISH fixed header announcing `remaining` bytes, its topic and QoS 0 (no packet id).
fn publish_header(topic: &str, remaining: usize) -> Vec<u8> {
    let mut out = vec![0x30];
    let mut len = remaining;
    loop {
        let mut byte = (len % 128) as u8;
        len /= 128;
        if len > 0 {
            byte |= 0x80;
        }
        out.push(byte);
        if len == 0 {
            break;
        }
    }
    out.extend_from_slice(&(topic.len() as u16).to_be_bytes());
    out.extend_from_slice(topic.as_bytes());
    out
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

fn options(id: &str, port: u16) -> MqttOptions {
    let mut o = MqttOptions::new(id, "127.0.0.1", port);
    o.set_keep_alive(Duration::from_secs(30));
    o.set_max_packet_size(4 * MIB, 4 * MIB);
    o
}

/// Row 1: 20,000 QoS 1 twin updates in one burst on one connection. Before, the broker
/// acknowledged each at once and dropped what did not fit the eventbus's queue (20,000 →
/// 10,501 lost). Now each PUBACK waits until the eventbus took the message: every
/// acknowledged update gets its result from devicetwin.
#[test]
fn qos1_burst_every_acknowledged_update_reaches_devicetwin() {
    const N: usize = 20_000;
    let dir = tempfile::tempdir().unwrap();
    // Results go to the test's subscriber through its own session queue: deep enough that
    // none is dropped there, so a missing result can only mean a lost update.
    let node = node(dir.path(), "    mqttSessionQueueSize: 100000\n", "");
    let port = node.mqtt_port;
    let device = "$hw/events/device/default/thermo-2";
    let (acked, results) = runtime().block_on(async move {
        let (sub, mut sub_loop) = AsyncClient::new(options("burst-results", port), 16);
        sub.subscribe(format!("{device}/twin/update/result"), QoS::AtMostOnce)
            .await
            .unwrap();
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let subscribed = tokio::sync::Notify::new();
        let subscribed = std::sync::Arc::new(subscribed);
        let ready = subscribed.clone();
        tokio::spawn(async move {
            loop {
                match sub_loop.poll().await {
                    Ok(Event::Incoming(Packet::SubAck(_))) => ready.notify_one(),
                    Ok(Event::Incoming(Packet::Publish(p))) => {
                        let v: serde_json::Value =
                            serde_json::from_slice(&p.payload).unwrap_or_default();
                        if let Some(id) = v["event_id"].as_str()
                            && tx.send(id.to_owned()).is_err()
                        {
                            return;
                        }
                    }
                    Ok(_) => {}
                    Err(e) => panic!("result subscriber lost its connection: {e}"),
                }
            }
        });
        tokio::time::timeout(Duration::from_secs(10), subscribed.notified())
            .await
            .expect("SUBACK for the result subscriber");

        let mut o = options("burst-mapper", port);
        o.set_inflight(1000);
        let (publ, mut pub_loop) = AsyncClient::new(o, N + 10);
        for i in 0..N {
            let payload = format!(
                r#"{{"event_id":"b-{i}","timestamp":1700000000000,"twin":{{"temperature":{{"actual":{{"value":"{v}"}},"metadata":{{"type":"int"}}}}}}}}"#,
                v = i % 100
            );
            publ.try_publish(format!("{device}/twin/update"), QoS::AtLeastOnce, false, payload)
                .unwrap();
        }
        let mut acked = 0usize;
        let deadline = tokio::time::Instant::now() + Duration::from_secs(300);
        while acked < N {
            match tokio::time::timeout_at(deadline, pub_loop.poll()).await {
                Ok(Ok(Event::Incoming(Packet::PubAck(_)))) => acked += 1,
                Ok(Ok(_)) => {}
                Ok(Err(e)) => panic!("publisher lost its connection after {acked} PUBACKs: {e}"),
                Err(_) => break,
            }
        }
        // Every acknowledged update must come back with a result; given up after 20 s
        // without one.
        let mut results = HashSet::new();
        while results.len() < acked {
            match tokio::time::timeout(Duration::from_secs(20), rx.recv()).await {
                Ok(Some(id)) => {
                    results.insert(id);
                }
                _ => break,
            }
        }
        (acked, results)
    });
    assert_eq!(
        acked,
        N,
        "every update acknowledged:\n{}",
        node.daemon.log()
    );
    let missing: Vec<usize> = (0..N)
        .filter(|i| !results.contains(&format!("b-{i}")))
        .collect();
    let waits = metric_opt(&node, "wedge_eventbus_broker_backpressure_waits_total");
    eprintln!(
        "row 1: {N} QoS 1 updates, {acked} PUBACKs, {} without a result; PUBACKs that waited for the eventbus: {waits:?}",
        missing.len()
    );
    assert!(
        missing.is_empty(),
        "{} acknowledged updates never reached devicetwin (first: {:?})",
        missing.len(),
        &missing[..missing.len().min(10)],
    );
}

/// Row 3: connections that announce a big PUBLISH, send most of it and stop. Before, 40 × 15 MiB
/// of a 16 MiB packet stayed buffered for good (RSS 19 → 651 MB). Now a packet over
/// `maxPacketBytes` closes its connection at the header, a stalled partial packet closes it
/// at `packetTimeoutMs`, and all partial packets together hold at most `maxPendingBytes`.
/// Bound asserted: RSS stays under the starting RSS + 64 MiB (the budget) + 48 MiB.
#[test]
fn partial_packets_are_bounded_and_dropped() {
    let dir = tempfile::tempdir().unwrap();
    let node = node(dir.path(), "", "    packetTimeoutMs: 2000\n");
    let pid = node.daemon.pid();
    let base = rss(pid);
    let bound = base + 64 * MIB as u64 + 48 * MIB as u64;

    // 40 connections announce 16 MiB and try to send 15 MiB: closed at the header.
    let chunk = vec![0u8; MIB];
    let mut conns: Vec<TcpStream> = (0..40)
        .map(|i| raw_connect(node.mqtt_port, &format!("big-{i}"), 0))
        .collect();
    for c in &mut conns {
        c.write_all(&publish_header("big/t", 16 * MIB)).unwrap();
        c.set_write_timeout(Some(Duration::from_secs(5))).unwrap();
        for _ in 0..15 {
            if c.write_all(&chunk).is_err() {
                break;
            }
        }
    }
    for (i, c) in conns.iter_mut().enumerate() {
        assert!(
            closed_within(c, Duration::from_secs(5)),
            "connection {i} announcing 16 MiB is still open"
        );
    }
    let after_big = rss(pid);
    assert!(
        after_big < bound,
        "RSS {after_big} after 40 × 16 MiB announcements, bound {bound}"
    );

    // Twice: 100 connections send 1 MB of a packet just under the limit and stop. They hold
    // at most the 64 MiB budget together, and are closed 2 s after their packet started.
    for round in 0..2 {
        let mut conns: Vec<TcpStream> = (0..100)
            .map(|i| raw_connect(node.mqtt_port, &format!("part-{round}-{i}"), 0))
            .collect();
        let body = vec![0u8; 1_000_000];
        for c in &mut conns {
            c.write_all(&publish_header("part/t", MAX_PACKET - 8))
                .unwrap();
            // The broker may stop reading this one (budget spent): do not block on it.
            c.set_nonblocking(true).unwrap();
            let mut sent = 0;
            let started = Instant::now();
            while sent < body.len() && started.elapsed() < Duration::from_millis(20) {
                match c.write(&body[sent..]) {
                    Ok(n) => sent += n,
                    Err(e) if e.kind() == ErrorKind::WouldBlock => {
                        std::thread::sleep(Duration::from_millis(1))
                    }
                    Err(_) => break,
                }
            }
            c.set_nonblocking(false).unwrap();
        }
        let peak = rss(pid);
        assert!(
            peak < bound,
            "round {round}: RSS {peak} with 100 stalled partial packets, bound {bound}"
        );
        for (i, c) in conns.iter_mut().enumerate() {
            assert!(
                closed_within(c, Duration::from_secs(10)),
                "round {round}: stalled connection {i} still open"
            );
        }
        let after = rss(pid);
        assert!(
            after < bound,
            "round {round}: RSS {after} after, bound {bound}"
        );
        eprintln!(
            "row 3 round {round}: RSS base {} MB, peak {} MB, after {} MB, bound {} MB",
            base / MIB as u64,
            peak / MIB as u64,
            after / MIB as u64,
            bound / MIB as u64
        );
    }
    assert!(
        metric(
            &node,
            "wedge_eventbus_broker_closed_total{reason=\"packet_too_large\"}"
        ) >= 40.0
    );
    assert!(
        metric(
            &node,
            "wedge_eventbus_broker_closed_total{reason=\"packet_timeout\"}"
        ) >= 100.0
    );
    // The broker still serves.
    raw_connect(node.mqtt_port, "after", 30);
}

/// Row 4: a retained publish at the packet limit that no QoS 1 subscriber could receive (its
/// copy carries a 2-byte packet id). Before, it was kept and cost every QoS 1 subscriber of the
/// topic its connection after each SUBACK. Now it is refused when published (the publisher's
/// connection is closed, counted), and subscribers are unaffected.
#[test]
fn undeliverable_retained_publish_is_refused_at_ingress() {
    let dir = tempfile::tempdir().unwrap();
    let node = node(dir.path(), "", "");
    let topic = "$hw/events/device/default/thermo-2/twin/update/delta";
    // (a) QoS 1 whose remaining length is under the limit but the whole packet is not;
    // (b) QoS 0 of exactly the limit, which would be 2 bytes over as a QoS 1 delivery.
    let qos1 = {
        let mut out = vec![0x33]; // PUBLISH, QoS 1, retain
        let remaining = MAX_PACKET - 2;
        let mut len = remaining;
        loop {
            let mut b = (len % 128) as u8;
            len /= 128;
            if len > 0 {
                b |= 0x80;
            }
            out.push(b);
            if len == 0 {
                break;
            }
        }
        out.extend_from_slice(&(topic.len() as u16).to_be_bytes());
        out.extend_from_slice(topic.as_bytes());
        out.extend_from_slice(&1u16.to_be_bytes());
        out.resize(out.len() + remaining - 2 - topic.len() - 2, b'x');
        out
    };
    let qos0 = {
        let header = publish_header(topic, 0);
        // Whole packet = 1 + 3 (remaining length bytes) + remaining = MAX_PACKET.
        let remaining = MAX_PACKET - 4;
        let mut out = publish_header(topic, remaining);
        out[0] |= 0x01; // retain
        out.resize(out.len() + remaining - (header.len() - 2), b'y');
        assert_eq!(out.len(), MAX_PACKET);
        out
    };
    for (what, packet) in [("QoS 1", qos1), ("QoS 0", qos0)] {
        let mut c = raw_connect(node.mqtt_port, "big-retainer", 0);
        let _ = c.write_all(&packet);
        assert!(
            closed_within(&mut c, Duration::from_secs(5)),
            "{what} publisher of an undeliverable message not refused"
        );
    }
    assert!(
        metric(
            &node,
            "wedge_eventbus_broker_closed_total{reason=\"packet_too_large\"}"
        ) >= 2.0
    );

    // QoS 1 subscribers of the topic keep their connection across SUBACKs.
    runtime().block_on(async {
        for round in 0..3 {
            let (c, mut ev) =
                AsyncClient::new(options(&format!("delta-sub-{round}"), node.mqtt_port), 10);
            c.subscribe(topic, QoS::AtLeastOnce).await.unwrap();
            c.publish(topic, QoS::AtLeastOnce, false, "small")
                .await
                .unwrap();
            let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
            let mut got_small = false;
            while !got_small {
                match tokio::time::timeout_at(deadline, ev.poll()).await {
                    Ok(Ok(Event::Incoming(Packet::Publish(p)))) => {
                        assert!(!p.retain, "no retained message was kept");
                        got_small = p.payload.as_ref() == b"small";
                    }
                    Ok(Ok(_)) => {}
                    Ok(Err(e)) => panic!("QoS 1 subscriber {round} disconnected: {e}"),
                    Err(_) => panic!("subscriber {round} got nothing back"),
                }
            }
            let _ = c.disconnect().await;
        }
    });
}

/// Row 5 (the cap; the routing figures are `twin-load --foreign-filters`): past
/// `maxFiltersPerClient`, a filter gets SUBACK failure 0x80 and the rest of the SUBSCRIBE is
/// still answered; the refusals are counted.
#[test]
fn filters_past_the_per_client_cap_get_suback_failure() {
    let dir = tempfile::tempdir().unwrap();
    let node = node(dir.path(), "", "    maxFiltersPerClient: 50\n");
    let codes = runtime().block_on(async {
        let (c, mut ev) = AsyncClient::new(options("many-filters", node.mqtt_port), 10);
        let filters: Vec<SubscribeFilter> = (0..55)
            .map(|i| SubscribeFilter::new(format!("f/{i}/+"), QoS::AtLeastOnce))
            .collect();
        c.subscribe_many(filters).await.unwrap();
        loop {
            match tokio::time::timeout(Duration::from_secs(10), ev.poll()).await {
                Ok(Ok(Event::Incoming(Packet::SubAck(ack)))) => return ack.return_codes,
                Ok(Ok(_)) => {}
                other => panic!("no SUBACK: {other:?}"),
            }
        }
    });
    assert_eq!(codes.len(), 55);
    assert!(
        codes[..50]
            .iter()
            .all(|c| matches!(c, SubscribeReasonCode::Success(_))),
        "{codes:?}"
    );
    assert!(
        codes[50..]
            .iter()
            .all(|c| matches!(c, SubscribeReasonCode::Failure)),
        "{codes:?}"
    );
    assert_eq!(
        metric(&node, "wedge_eventbus_broker_filters_refused_total"),
        5.0
    );
}

/// Row 6: 2,000 retained topics × 256 KiB. Before, all were kept (RSS 40 → 791 MB). Now
/// retained payloads stop at `maxRetainedBytes` (64 MiB by default): past it a retained
/// publish reaches current subscribers but is not kept, and is counted. Bound asserted: RSS
/// under the starting RSS + 64 MiB + 64 MiB.
#[test]
fn retained_bytes_are_capped() {
    const TOPICS: usize = 2000;
    let dir = tempfile::tempdir().unwrap();
    let node = node(dir.path(), "", "");
    let pid = node.daemon.pid();
    let base = rss(pid);
    let bound = base + 128 * MIB as u64;
    let port = node.mqtt_port;
    runtime().block_on(async move {
        let mut o = options("retainer", port);
        o.set_inflight(100);
        let (c, mut ev) = AsyncClient::new(o, 64);
        let pump = tokio::spawn(async move {
            let mut acked = 0;
            while acked < TOPICS {
                match ev.poll().await {
                    Ok(Event::Incoming(Packet::PubAck(_))) => acked += 1,
                    Ok(_) => {}
                    Err(e) => panic!("retaining publisher lost its connection: {e}"),
                }
            }
        });
        let payload = vec![b'r'; 256 * 1024];
        for i in 0..TOPICS {
            c.publish(
                format!("retained/{i}"),
                QoS::AtLeastOnce,
                true,
                payload.clone(),
            )
            .await
            .unwrap();
        }
        tokio::time::timeout(Duration::from_secs(120), pump)
            .await
            .expect("every retained publish acknowledged")
            .unwrap();
    });
    let after = rss(pid);
    eprintln!(
        "row 6: RSS base {} MB, after {} MB, bound {} MB",
        base / MIB as u64,
        after / MIB as u64,
        bound / MIB as u64
    );
    let kept = metric(&node, "wedge_eventbus_broker_retained_bytes");
    let refused = metric(&node, "wedge_eventbus_broker_retained_refused_total");
    eprintln!("row 6: retained {kept} bytes kept, {refused} publishes not retained");
    assert!(kept <= (64 * MIB) as f64, "retained bytes {kept}");
    assert_eq!(refused, (TOPICS - 256) as f64, "64 MiB hold 256 of them");
    assert!(
        after < bound,
        "RSS {after} after 2,000 × 256 KiB retained, bound {bound}"
    );
}

/// Row 9: clients that CONNECT with keep-alive 0 and then stay silent, and sockets that never
/// send CONNECT. Before, 1,024 such clients held every slot for good. Now the idle timeout
/// closes them, so a legitimate client gets its CONNACK; the connection cap closes extra
/// sockets at once, and every close is counted.
#[test]
fn idle_keep_alive_zero_clients_are_dropped_and_slots_come_back() {
    let dir = tempfile::tempdir().unwrap();
    let node = node(
        dir.path(),
        "",
        "    idleTimeoutSeconds: 2\n    connectTimeoutMs: 1000\n    maxConnections: 20\n",
    );
    let port = node.mqtt_port;
    let mut idle: Vec<TcpStream> = (0..19)
        .map(|i| raw_connect(port, &format!("idle-{i}"), 0))
        .collect();
    // The 20th slot: a socket that never sends CONNECT.
    let mut silent = TcpStream::connect(("127.0.0.1", port)).unwrap();
    std::thread::sleep(Duration::from_millis(200));
    // Every slot is taken: the next socket is closed at once, without a CONNACK.
    let mut extra = TcpStream::connect(("127.0.0.1", port)).unwrap();
    let _ = extra.write_all(&encode(Packet::Connect(Connect::new("legit-early"))));
    assert!(
        closed_within(&mut extra, Duration::from_secs(2)),
        "a connection past maxConnections was kept"
    );
    assert!(
        closed_within(&mut silent, Duration::from_secs(3)),
        "a socket without CONNECT outlived connectTimeoutMs"
    );
    for (i, c) in idle.iter_mut().enumerate() {
        assert!(
            closed_within(c, Duration::from_secs(5)),
            "idle keep-alive-0 client {i} outlived idleTimeoutSeconds"
        );
    }
    // A legitimate client gets its CONNACK now.
    raw_connect(port, "legit", 30);
    assert!(metric(&node, "wedge_eventbus_broker_closed_total{reason=\"idle\"}") >= 19.0);
    assert!(
        metric(
            &node,
            "wedge_eventbus_broker_closed_total{reason=\"connect_timeout\"}"
        ) >= 1.0
    );
    assert!(
        metric(
            &node,
            "wedge_eventbus_broker_closed_total{reason=\"connection_limit\"}"
        ) >= 1.0
    );
    assert_eq!(metric(&node, "wedge_eventbus_broker_max_connections"), 20.0);
}

/// The daemon started with its own open-files limit (soft = hard = `nofile`), killed on drop.
struct Limited {
    child: std::process::Child,
    log: std::path::PathBuf,
}

impl Drop for Limited {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Out of file descriptors (EMFILE) the accept loop backs off and goes on: once descriptors
/// are free again a client gets its CONNACK, and the failures are counted.
#[test]
fn accept_survives_running_out_of_file_descriptors() {
    use std::os::unix::process::CommandExt;
    let dir = tempfile::tempdir().unwrap();
    let extra = Extra {
        modules: String::new(),
        event_bus: String::new(),
        // The cap above the descriptor limit, so that accept(2) is what fails.
        wedge: "  broker:\n    maxConnections: 5000\n".to_owned(),
    };
    let (config, port) =
        wedge_tests::node::write_config_with(dir.path(), Broker::Embedded, THERMOMETERS, &extra)
            .unwrap();
    let admin = std::net::SocketAddr::from(([127, 0, 0, 1], wedge_tests::free_port()));
    let log = dir.path().join("wedge.log");
    let mut cmd = std::process::Command::new(wedge_tests::wedge_bin());
    cmd.arg("run")
        .arg("--config")
        .arg(&config)
        .arg("--data-dir")
        .arg(dir.path())
        .arg("--admin-addr")
        .arg(admin.to_string())
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap());
    // SAFETY: setrlimit is async-signal-safe; it only changes the child's own limit.
    unsafe {
        cmd.pre_exec(|| {
            let limit = libc::rlimit {
                rlim_cur: 160,
                rlim_max: 160,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &limit) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let child = cmd.spawn().expect("start wedge");
    let daemon = Limited { child, log };
    let deadline = Instant::now() + Duration::from_secs(20);
    while !matches!(http_get(admin, "/healthz"), Ok((200, _))) {
        assert!(
            Instant::now() < deadline,
            "not healthy:\n{}",
            std::fs::read_to_string(&daemon.log).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    // More connections than descriptors: the kernel queues them, accept(2) fails with EMFILE.
    let mut held = Vec::new();
    for i in 0..220 {
        match TcpStream::connect(("127.0.0.1", port)) {
            Ok(s) => held.push(s),
            Err(e) => panic!("connection {i} refused by the kernel: {e}"),
        }
    }
    std::thread::sleep(Duration::from_millis(1500));
    drop(held);
    // Descriptors come back as the closed sockets are accepted and end.
    let deadline = Instant::now() + Duration::from_secs(20);
    let connected = loop {
        match try_raw_connect(port, "after-emfile", 30) {
            Ok(_) => break true,
            Err(_) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(200)),
            Err(_) => break false,
        }
    };
    let log = std::fs::read_to_string(&daemon.log).unwrap_or_default();
    assert!(
        connected,
        "no CONNACK once descriptors were free again:\n{log}"
    );
    assert!(
        log.contains("embedded broker cannot accept"),
        "accept never failed: the test did not exhaust descriptors"
    );
    let (code, page) = http_get(admin, "/metrics").expect("GET /metrics");
    assert_eq!(code, 200);
    let errors: f64 = page
        .lines()
        .find_map(|l| l.strip_prefix("wedge_eventbus_broker_accept_errors_total "))
        .and_then(|v| v.trim().parse().ok())
        .expect("accept errors metric");
    assert!(errors >= 1.0, "accept errors counted: {errors}");
}

/// Issue 29, part 1: a client that publishes to its own subscription and reads at about a
/// tenth of that pace, with `mqttSessionQueueSize: 10`. Before, its queue filled and the
/// broker dropped what did not fit (counted in `wedge_eventbus_broker_dropped_total`), although
/// the client was reading. Now its own publishes wait while it is behind (flow control), and
/// every message arrives, once; a second client's round trips on the same broker all arrive
/// meanwhile (their latencies are printed, not asserted).
#[test]
fn a_slow_reader_loses_nothing_and_only_slows_itself() {
    const N: usize = 400;
    const ROUND_TRIPS: usize = 100;
    let dir = tempfile::tempdir().unwrap();
    let node = node(dir.path(), "    mqttSessionQueueSize: 10\n", "");
    let port = node.mqtt_port;
    let (received, duplicates, slow_took, latencies) = runtime().block_on(async move {
        // The slow client: subscribed to its own topic, N QoS 1 publishes queued at once.
        let mut o = options("slow-reader", port);
        o.set_inflight(100);
        let (slow, mut slow_loop) = AsyncClient::new(o, N + 10);
        slow.subscribe("slow/t", QoS::AtLeastOnce).await.unwrap();
        loop {
            if let Event::Incoming(Packet::SubAck(_)) = slow_loop.poll().await.unwrap() {
                break;
            }
        }
        // The other client, measuring round trips through the broker meanwhile.
        let (fast, mut fast_loop) = AsyncClient::new(options("bystander", port), 16);
        fast.subscribe("fast/t", QoS::AtLeastOnce).await.unwrap();
        loop {
            if let Event::Incoming(Packet::SubAck(_)) = fast_loop.poll().await.unwrap() {
                break;
            }
        }
        let bystander = tokio::spawn(async move {
            let mut latencies = Vec::new();
            for i in 0..ROUND_TRIPS {
                let sent = Instant::now();
                fast.publish("fast/t", QoS::AtLeastOnce, false, format!("{i}"))
                    .await
                    .unwrap();
                loop {
                    match tokio::time::timeout(Duration::from_secs(30), fast_loop.poll()).await {
                        Ok(Ok(Event::Incoming(Packet::Publish(p))))
                            if p.payload == format!("{i}") =>
                        {
                            latencies.push(sent.elapsed());
                            break;
                        }
                        Ok(Ok(_)) => {}
                        Ok(Err(e)) => panic!("the bystander lost its connection: {e}"),
                        Err(_) => panic!("round trip {i} of the bystander never came back"),
                    }
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            latencies
        });
        let started = Instant::now();
        for i in 0..N {
            slow.try_publish("slow/t", QoS::AtLeastOnce, false, format!("{i}"))
                .unwrap();
        }
        let mut seen = HashSet::new();
        let mut duplicates = 0usize;
        let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
        while seen.len() < N {
            match tokio::time::timeout_at(deadline, slow_loop.poll()).await {
                Ok(Ok(Event::Incoming(Packet::Publish(p)))) => {
                    if !seen.insert(p.payload.to_vec()) {
                        duplicates += 1;
                    }
                    // Reading slowly: ~5 ms per message it gets.
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
                Ok(Ok(_)) => {}
                Ok(Err(e)) => panic!(
                    "the slow reader lost its connection after {}: {e}",
                    seen.len()
                ),
                Err(_) => break,
            }
        }
        let took = started.elapsed();
        (seen.len(), duplicates, took, bystander.await.unwrap())
    });
    let dropped = metric(&node, "wedge_eventbus_broker_dropped_total");
    let cut = metric_opt(
        &node,
        "wedge_eventbus_broker_closed_total{reason=\"slow_reader\"}",
    )
    .unwrap_or(0.0);
    let mut sorted = latencies.clone();
    sorted.sort();
    let pct = |p: f64| sorted[((sorted.len() as f64 * p).ceil() as usize).saturating_sub(1)];
    eprintln!(
        "slow reader: {received}/{N} received ({duplicates} duplicates) in {slow_took:?}; \
         broker dropped {dropped}, cut {cut}; bystander round trips p50 {:?} p99 {:?} max {:?}",
        pct(0.5),
        pct(0.99),
        sorted.last().unwrap()
    );
    assert_eq!(received, N, "every message reached the slow reader");
    assert_eq!(latencies.len(), ROUND_TRIPS);
    assert_eq!(dropped, 0.0, "nothing dropped");
    assert_eq!(cut, 0.0, "a client that reads is never cut off");
}

/// Issue 29, part 2: a client with CleanSession=0 keeps its session across connections, as
/// KubeEdge's broker and mosquitto keep it. It subscribes, gets one QoS 1 message it does not
/// acknowledge, and goes away; two QoS 1 and one QoS 0 message are published meanwhile. Back
/// with CleanSession=0 it is told `session present`, gets the unacknowledged message again
/// flagged DUP, then the two it missed, without subscribing again; the QoS 0 one is not kept
/// ([MQTT-3.1.2-4], [MQTT-3.1.2-5], [MQTT-3.2.2-2], [MQTT-4.4.0-1]).
#[test]
fn a_persistent_session_keeps_subscriptions_and_messages_while_the_client_is_away() {
    let dir = tempfile::tempdir().unwrap();
    let node = node(dir.path(), "", "");
    let port = node.mqtt_port;
    let persistent = |id: &str| {
        let mut o = options(id, port);
        o.set_clean_session(false);
        o.set_manual_acks(true);
        o
    };
    let (present, got) = runtime().block_on(async move {
        let (keeper, mut keeper_loop) = AsyncClient::new(persistent("keeper"), 16);
        keeper.subscribe("keep/t", QoS::AtLeastOnce).await.unwrap();
        loop {
            if let Event::Incoming(Packet::SubAck(_)) = keeper_loop.poll().await.unwrap() {
                break;
            }
        }
        let (publisher, mut publisher_loop) = AsyncClient::new(options("keep-publisher", port), 16);
        tokio::spawn(async move { while publisher_loop.poll().await.is_ok() {} });
        publisher
            .publish("keep/t", QoS::AtLeastOnce, false, "m1")
            .await
            .unwrap();
        loop {
            let event = tokio::time::timeout(Duration::from_secs(10), keeper_loop.poll())
                .await
                .expect("m1 arrives")
                .unwrap();
            if let Event::Incoming(Packet::Publish(p)) = event {
                assert_eq!(p.payload, "m1");
                break;
            }
        }
        // Away without acknowledging m1.
        drop(keeper_loop);
        drop(keeper);
        tokio::time::sleep(Duration::from_millis(300)).await;
        for (payload, qos) in [
            ("m2", QoS::AtLeastOnce),
            ("q0", QoS::AtMostOnce),
            ("m3", QoS::AtLeastOnce),
        ] {
            publisher
                .publish("keep/t", qos, false, payload)
                .await
                .unwrap();
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
        let (keeper, mut keeper_loop) = AsyncClient::new(persistent("keeper"), 16);
        let mut present = None;
        let mut got = Vec::new();
        while got.len() < 3 {
            match tokio::time::timeout(Duration::from_secs(10), keeper_loop.poll()).await {
                Ok(Ok(Event::Incoming(Packet::ConnAck(ack)))) => {
                    present = Some(ack.session_present)
                }
                Ok(Ok(Event::Incoming(Packet::Publish(p)))) => {
                    got.push((String::from_utf8_lossy(&p.payload).into_owned(), p.dup));
                    keeper.ack(&p).await.unwrap();
                }
                Ok(Ok(_)) => {}
                Ok(Err(e)) => panic!("the returning client lost its connection: {e}"),
                Err(_) => break,
            }
        }
        // Nothing else comes (q0 was not kept).
        if let Ok(Ok(Event::Incoming(Packet::Publish(p)))) =
            tokio::time::timeout(Duration::from_millis(500), keeper_loop.poll()).await
        {
            got.push((String::from_utf8_lossy(&p.payload).into_owned(), p.dup));
        }
        (present, got)
    });
    assert_eq!(present, Some(true), "session present on return");
    assert_eq!(
        got,
        [
            ("m1".to_owned(), true),
            ("m2".to_owned(), false),
            ("m3".to_owned(), false)
        ],
        "m1 again (DUP), then what was missed; no QoS 0"
    );
}
