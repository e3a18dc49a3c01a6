//! MQTT: socket bytes into packets the way the embedded broker reads them, then what the
//! eventbus does with them (topic rules, filter matching, the bus message for a PUBLISH).
//!
//! The broker's connection reads into a buffer and calls rumqttc's `Packet::read(buf, max)`
//! (after `rumqttc::check` on the fixed header) until it says it needs more bytes. The targets
//! feed the same calls arbitrary bytes in arbitrary chunks and check:
//! - nothing panics, and the input is consumed or refused in finitely many steps;
//! - chunking does not matter: the packets (and the error) are those of the whole input;
//! - a packet takes exactly the bytes its fixed header announced, never more than the limit;
//! - a decoded packet re-encodes and decodes to itself;
//! - every PUBLISH the broker would route becomes a bus message that serialises and parses
//!   back, goes to `twin` exactly for KubeEdge's device and node topics, carries the payload
//!   as devicetwin reads it, and whose base64 resource devicetwin decodes to the topic;
//! - filter matching keeps MQTT's rules (`$` topics, exact filters, `#`).
//!
//! `broker_sessions` drives the same packets through the embedded broker itself (its framing
//! limits, sessions, routing and access to the eventbus), over in-memory streams.

use bolero::{TypeGenerator, check};
use bytes::BytesMut;
use rumqttc::mqttbytes::Error as CodecError;
use rumqttc::{
    LastWill, Login, Packet, PubAck, PubComp, PubRec, PubRel, Publish, QoS, Subscribe,
    SubscribeFilter, Unsubscribe,
};
use wedge_core::Message;
use wedge_devicetwin::inbound::{Request, classify};
use wedge_devicetwin::topics::{parse_device_topic, parse_node_topic};
use wedge_eventbus::inbound::to_message;
use wedge_eventbus::topics::{
    DEFAULT_TOPICS, is_twin_topic, matches, twin_resource, valid_filter, valid_topic,
};
use wedge_fuzz::{CI_BUDGET, Payload, SHRINK_TIME, Word};

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_util::sync::CancellationToken;
use wedge_eventbus::broker::{BrokerOptions, EmbeddedBroker, LocalLink};
use wedge_eventbus::{BrokerUrl, Stats};

/// Topic levels KubeEdge and the broker care about.
const LEVELS: &[&str] = &[
    "$hw",
    "events",
    "device",
    "node",
    "upload",
    "twin",
    "update",
    "get",
    "result",
    "state",
    "membership",
    "detail",
    "document",
    "delta",
    "cloud_updated",
    "default",
    "thermo-1",
    "edge-1",
    "user",
    "SYS",
    "dis",
    "upload_records",
    "+",
    "#",
    "",
    "$SYS",
    "a+",
    "b#",
];

/// Keys of twin payloads, so PUBLISH payloads look like what mappers send.
const KEYS: &[&str] = &[
    "event_id",
    "timestamp",
    "twin",
    "expected",
    "actual",
    "value",
    "metadata",
    "type",
];

/// Packet size limits the broker may run with: mostly roomy, sometimes tiny.
const LIMITS: &[usize] = &[
    16,
    256,
    4096,
    64 * 1024,
    1024 * 1024,
    16 * 1024 * 1024,
    16 * 1024 * 1024,
    16 * 1024 * 1024,
];

/// The outcome of reading a whole input.
#[derive(Debug, PartialEq)]
struct Read {
    packets: Vec<Packet>,
    /// The error that ended the stream, as text (the codec's error is not `PartialEq`).
    error: Option<String>,
    /// Bytes left over waiting for more (none when an error ended the stream: the broker
    /// drops the connection with whatever had arrived).
    pending: usize,
}

/// What the broker's read loop does with the bytes of `chunks`, one socket read each.
fn read_stream<'a>(chunks: impl IntoIterator<Item = &'a [u8]>, max: usize) -> Read {
    let mut buf = BytesMut::new();
    let mut packets = Vec::new();
    for chunk in chunks {
        buf.extend_from_slice(chunk);
        loop {
            match next_packet(&mut buf, max) {
                Ok(Some(packet)) => packets.push(packet),
                Ok(None) => break,
                Err(e) => {
                    return Read {
                        packets,
                        error: Some(e),
                        pending: 0,
                    };
                }
            }
        }
    }
    Read {
        packets,
        error: None,
        pending: buf.len(),
    }
}

/// One step of the broker's read loop: a packet, `None` for "read more", or the error that
/// closes the connection. Checks what the broker relies on about each call.
fn next_packet(buf: &mut BytesMut, max: usize) -> Result<Option<Packet>, String> {
    let before = buf.len();
    let header = rumqttc::check(buf.iter(), max);
    let mut plain = buf.clone();
    let result = Packet::read(buf, max);
    // The broker without the header check (main's loop) sees the same thing.
    let plain_result = Packet::read(&mut plain, max);
    assert_eq!(
        format!("{result:?}"),
        format!("{plain_result:?}"),
        "Packet::read is deterministic"
    );
    match (header, result) {
        (Ok(header), Ok(packet)) => {
            let frame = header.frame_length();
            assert!(frame <= max.saturating_add(5), "frame {frame} over {max}");
            assert_eq!(before - buf.len(), frame, "a packet takes its frame");
            check_reencode(&packet);
            Ok(Some(packet))
        }
        (Err(CodecError::InsufficientBytes(_)), Err(CodecError::InsufficientBytes(n))) => {
            assert_eq!(buf.len(), before, "a partial packet stays buffered");
            assert!(n > 0, "asks for at least one byte");
            Ok(None)
        }
        (Ok(_), Err(CodecError::InsufficientBytes(_))) => {
            panic!("the fixed header says the frame is here but the packet wants more")
        }
        (_, Err(e)) => Err(format!("{e:?}")),
        (Err(e), Ok(packet)) => panic!("check refused ({e:?}) what read accepted: {packet:?}"),
    }
}

/// A decoded packet written again (as the broker writes packets) reads back as itself.
fn check_reencode(packet: &Packet) {
    let mut out = BytesMut::new();
    // Some packets the codec reads, it will not write (a QoS 1 publish with packet id 0):
    // the broker never writes a client's packet back, so that is no finding.
    if packet.write(&mut out, usize::MAX).is_err() {
        return;
    }
    match Packet::read(&mut out, usize::MAX) {
        Ok(again) => assert_eq!(&again, packet, "re-encoded packet differs"),
        Err(e) => panic!("re-encoded {packet:?} does not read back: {e:?}"),
    }
}

/// The eventbus side of every packet, as the broker's session handles it.
fn broker_side(packets: &[Packet]) {
    let mut topics: Vec<&str> = Vec::new();
    let mut filters: Vec<&str> = DEFAULT_TOPICS.to_vec();
    for packet in packets {
        match packet {
            Packet::Publish(p) if valid_topic(&p.topic) => {
                check_publish(&p.topic, &p.payload);
                topics.push(&p.topic);
            }
            Packet::Connect(c) => {
                if let Some(will) = &c.last_will
                    && valid_topic(&will.topic)
                {
                    check_publish(&will.topic, &will.message);
                    topics.push(&will.topic);
                }
            }
            Packet::Subscribe(s) => {
                for f in &s.filters {
                    if valid_filter(&f.path) {
                        filters.push(&f.path);
                    }
                }
            }
            Packet::Unsubscribe(u) => {
                for f in &u.topics {
                    let _ = valid_filter(f);
                }
            }
            _ => {}
        }
    }
    for t in &topics {
        assert!(matches(t, t), "a topic matches itself: {t:?}");
        for f in &filters {
            let m = matches(t, f);
            if !f.contains(['+', '#']) {
                assert_eq!(m, t == f, "exact filter {f:?} on {t:?}");
            }
            if *f == "#" {
                assert_eq!(m, !t.starts_with('$'), "# on {t:?}");
            }
            if t.starts_with('$') && (f.starts_with('+') || f.starts_with('#')) {
                assert!(!m, "wildcard first level matched $ topic {t:?} with {f:?}");
            }
        }
    }
}

/// What the eventbus sends on the bus for one routed PUBLISH.
fn check_publish(topic: &str, payload: &[u8]) {
    let (destination, msg) = to_message(topic, payload);
    assert_eq!(destination == "twin", is_twin_topic(topic), "{topic:?}");
    let text = String::from_utf8_lossy(payload);
    assert_eq!(
        msg.content.to_bytes(),
        text.as_bytes(),
        "payload as devicetwin reads it"
    );
    let wire = msg.to_vec();
    let back = Message::from_slice(&wire).expect("a bus message parses back");
    assert_eq!(back, msg, "bus message round trip");
    if destination == "twin" {
        assert_eq!(msg.route.resource, twin_resource(topic));
        let request = classify(&msg);
        match &request {
            Request::Ignored(why) => {
                assert!(
                    parse_device_topic(topic).is_none() && parse_node_topic(topic).is_none(),
                    "devicetwin ignored a topic it parses ({why}): {topic:?}"
                );
                assert!(!why.contains("base64") && !why.contains("UTF-8"), "{why}");
            }
            Request::Device { device, kind } => {
                assert_eq!(parse_device_topic(topic), Some((device.as_str(), *kind)));
            }
            Request::Node { node, kind } => {
                assert_eq!(parse_node_topic(topic), Some((node.as_str(), *kind)));
            }
            other => panic!("an MQTT message classified as {other:?}"),
        }
    } else {
        assert_eq!(msg.route.resource, topic);
    }
}

/// Splits `bytes` at the given chunk sizes (each at least 1), the rest in one piece.
fn chunks<'a>(bytes: &'a [u8], sizes: &[u8]) -> Vec<&'a [u8]> {
    let mut out = Vec::new();
    let mut rest = bytes;
    for size in sizes {
        if rest.is_empty() {
            break;
        }
        let n = usize::from(*size).clamp(1, rest.len());
        let (head, tail) = rest.split_at(n);
        out.push(head);
        rest = tail;
    }
    if !rest.is_empty() {
        out.push(rest);
    }
    out
}

/// Reads `bytes` whole and in chunks, checks they agree, then runs the eventbus side.
fn check_stream(bytes: &[u8], sizes: &[u8], limit: u8) {
    let max = LIMITS[usize::from(limit) % LIMITS.len()];
    let whole = read_stream([bytes], max);
    let split = read_stream(chunks(bytes, sizes), max);
    assert_eq!(whole, split, "chunking changed what was read");
    broker_side(&whole.packets);
}

/// Raw socket bytes: whatever a client may send.
#[test]
fn mqtt_raw_bytes() {
    check!()
        .with_type::<(u8, Vec<u8>, Vec<u8>)>()
        .with_test_time(CI_BUDGET)
        .with_shrink_time(SHRINK_TIME)
        .for_each(|(limit, sizes, bytes)| {
            check_stream(bytes, sizes, *limit);
        });
}

/// KubeEdge's topics, `{}` standing for an id of one or two levels.
const TEMPLATES: &[&str] = &[
    "$hw/events/device/{}/twin/update",
    "$hw/events/device/{}/twin/get",
    "$hw/events/device/{}/twin/cloud_updated",
    "$hw/events/device/{}/state/update",
    "$hw/events/device/{}/state/get",
    "$hw/events/device/{}/updated",
    "$hw/events/device/{}/twin/update/result",
    "$hw/events/node/{}/membership/get",
    "$hw/events/node/{}/membership/updated",
    "$hw/events/node/{}/membership/detail/result",
    "$hw/events/upload/{}",
    "{}/user/telemetry",
    "$hw/events/device/+/{}/twin/+",
];

/// A topic or filter: a KubeEdge topic around an id, or levels.
#[derive(Debug, Clone, TypeGenerator)]
enum Topic {
    /// A template with an id (one level, or namespace/name).
    Kube(u8, Word, Option<Word>),
    /// The same, drawn more often.
    Kube2(u8, Word, Option<Word>),
    /// Any levels.
    Levels(Vec<Word>),
}

impl Topic {
    fn text(&self) -> String {
        match self {
            Topic::Kube(t, id, ns) | Topic::Kube2(t, id, ns) => {
                let template = TEMPLATES[usize::from(*t) % TEMPLATES.len()];
                let id = match ns {
                    Some(ns) => format!("{}/{}", ns.text(LEVELS), id.text(LEVELS)),
                    None => id.text(LEVELS),
                };
                template.replace("{}", &id)
            }
            Topic::Levels(levels) => {
                let levels: Vec<String> = levels.iter().take(8).map(|w| w.text(LEVELS)).collect();
                levels.join("/")
            }
        }
    }
}

/// A packet a client could send, built from its fields.
#[derive(Debug, Clone, TypeGenerator)]
enum ClientPacket {
    Publish {
        topic: Topic,
        payload: Payload,
        qos: u8,
        retain: bool,
        dup: bool,
        pkid: u16,
    },
    Subscribe {
        pkid: u16,
        filters: Vec<(Topic, u8)>,
    },
    /// Another PUBLISH: the packet that matters most, drawn more often.
    Publish2 {
        topic: Topic,
        payload: Payload,
        qos: u8,
    },
    Connect {
        client_id: Word,
        keep_alive: u16,
        clean: bool,
        login: Option<(Word, Word)>,
        will: Option<(Topic, Payload, u8, bool)>,
    },
    Unsubscribe {
        pkid: u16,
        filters: Vec<Topic>,
    },
    PubAck(u16),
    PubRec(u16),
    PubRel(u16),
    PubComp(u16),
    PingReq,
    Disconnect,
    /// Bytes that are not a packet the codec would write.
    Garbage(Vec<u8>),
}

fn qos(n: u8) -> QoS {
    match n % 3 {
        0 => QoS::AtMostOnce,
        1 => QoS::AtLeastOnce,
        _ => QoS::ExactlyOnce,
    }
}

impl ClientPacket {
    /// The packet's bytes as rumqttc (a client) writes them; `Garbage` as is.
    fn encode(&self, out: &mut BytesMut) {
        let packet = match self {
            ClientPacket::Connect {
                client_id,
                keep_alive,
                clean,
                login,
                will,
            } => {
                let mut c = rumqttc::Connect::new(client_id.text(LEVELS));
                c.keep_alive = *keep_alive;
                c.clean_session = *clean;
                let login = login
                    .as_ref()
                    .map(|(u, p)| Login::new(u.text(LEVELS), p.text(LEVELS)));
                let will = will.as_ref().map(|(t, p, q, r)| {
                    LastWill::new(t.text(), p.bytes(KEYS, LEVELS), qos(*q), *r)
                });
                c.login = login;
                c.last_will = will;
                Packet::Connect(c)
            }
            ClientPacket::Publish {
                topic,
                payload,
                qos: q,
                retain,
                dup,
                pkid,
            } => {
                let mut p = Publish::new(topic.text(), qos(*q), payload.bytes(KEYS, LEVELS));
                p.retain = *retain;
                p.dup = *dup;
                p.pkid = *pkid;
                Packet::Publish(p)
            }
            ClientPacket::Publish2 {
                topic,
                payload,
                qos: q,
            } => {
                let mut p = Publish::new(topic.text(), qos(*q), payload.bytes(KEYS, LEVELS));
                p.pkid = 1;
                Packet::Publish(p)
            }
            ClientPacket::Subscribe { pkid, filters } => {
                let filters = filters
                    .iter()
                    .map(|(t, q)| SubscribeFilter::new(t.text(), qos(*q)))
                    .collect::<Vec<_>>();
                let mut s = Subscribe::new_many(filters);
                s.pkid = *pkid;
                Packet::Subscribe(s)
            }
            ClientPacket::Unsubscribe { pkid, filters } => {
                let mut u = Unsubscribe::new("");
                u.topics = filters.iter().map(Topic::text).collect();
                u.pkid = *pkid;
                Packet::Unsubscribe(u)
            }
            ClientPacket::PubAck(id) => Packet::PubAck(PubAck::new(*id)),
            ClientPacket::PubRec(id) => Packet::PubRec(PubRec::new(*id)),
            ClientPacket::PubRel(id) => Packet::PubRel(PubRel::new(*id)),
            ClientPacket::PubComp(id) => Packet::PubComp(PubComp::new(*id)),
            ClientPacket::PingReq => Packet::PingReq,
            ClientPacket::Disconnect => Packet::Disconnect,
            ClientPacket::Garbage(bytes) => {
                out.extend_from_slice(bytes);
                return;
            }
        };
        // The client codec refuses some field combinations (packet id 0 with QoS 1): then
        // the packet is simply not sent.
        let _ = packet.write(out, usize::MAX);
    }
}

/// Sessions of well-formed (and some broken) packets: deep into topics and payloads.
#[test]
fn mqtt_client_sessions() {
    check!()
        .with_type::<(u8, Vec<u8>, Vec<ClientPacket>)>()
        .with_test_time(CI_BUDGET)
        .with_shrink_time(SHRINK_TIME)
        .with_max_len(8 * 1024)
        .for_each(|(limit, sizes, packets)| {
            let mut bytes = BytesMut::new();
            // Short sessions: long ones are mostly what the generator pads with once its
            // input bytes run out.
            for p in packets.iter().take(8) {
                p.encode(&mut bytes);
            }
            check_stream(&bytes, sizes, *limit);
        });
}

/// One embedded broker serving every session of [`broker_sessions`]: its runtime, and the
/// eventbus's in-process link subscribed to KubeEdge's topics and drained, so QoS 1 twin
/// traffic goes through the acknowledge-after-accept path.
struct LiveBroker {
    runtime: tokio::runtime::Runtime,
    broker: EmbeddedBroker,
    _link: LocalLink,
}

/// Two brokers: default limits, and limits so small the inputs hit them (packet size,
/// partial-packet budget and deadline, filters, retained topics and bytes, queues).
fn live_brokers() -> &'static [LiveBroker; 2] {
    static LIVE: OnceLock<[LiveBroker; 2]> = OnceLock::new();
    LIVE.get_or_init(|| {
        let tight = BrokerOptions {
            queue: 4,
            max_packet: 4096,
            max_pending_bytes: 8192,
            packet_timeout: Duration::from_millis(200),
            max_inflight: 2,
            max_filters: 8,
            max_retained: 16,
            max_retained_bytes: 4096,
            connect_timeout: Duration::from_millis(300),
            idle_timeout: Duration::from_secs(1),
            ..BrokerOptions::default()
        };
        [BrokerOptions::default(), tight].map(|options| {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .enable_all()
                .build()
                .expect("a tokio runtime");
            let (broker, link) = runtime.block_on(async {
                let url = BrokerUrl {
                    host: "127.0.0.1".to_owned(),
                    port: 0,
                    tls: false,
                };
                let broker = EmbeddedBroker::start(
                    &url,
                    options,
                    Arc::new(Stats::default()),
                    &CancellationToken::new(),
                )
                .await
                .expect("the broker starts");
                let (tx, mut rx) = tokio::sync::mpsc::channel(8);
                let link = broker.local_link(tx);
                for topic in DEFAULT_TOPICS {
                    link.subscribe(topic);
                }
                tokio::spawn(async move { while rx.recv().await.is_some() {} });
                (broker, link)
            });
            LiveBroker {
                runtime,
                broker,
                _link: link,
            }
        })
    })
}

/// Runs one client session of `chunks` against `live` and returns what the broker wrote.
/// The session must end once the client has sent everything and closed its side.
fn run_session(live: &'static LiveBroker, chunks: Vec<Vec<u8>>) -> Vec<u8> {
    let broker: &'static EmbeddedBroker = &live.broker;
    live.runtime.block_on(async move {
        let (client, server) = tokio::io::duplex(64 * 1024);
        let peer = std::net::SocketAddr::from(([127, 0, 0, 1], 1));
        let session = tokio::spawn(broker.serve_stream(server, peer));
        let (mut from_broker, mut to_broker) = tokio::io::split(client);
        let reader = tokio::spawn(async move {
            let mut out = Vec::new();
            let _ = from_broker.read_to_end(&mut out).await;
            out
        });
        for chunk in &chunks {
            // The broker may have closed the connection already: then writes fail.
            if to_broker.write_all(chunk).await.is_err() {
                break;
            }
        }
        let _ = to_broker.shutdown().await;
        tokio::time::timeout(Duration::from_secs(5), session)
            .await
            .expect("the session ends once the client has closed")
            .expect("the session task does not panic");
        drop(to_broker);
        tokio::time::timeout(Duration::from_secs(5), reader)
            .await
            .expect("the broker closes its side when the session ends")
            .expect("reader task")
    })
}

/// What the broker wrote is whole MQTT packets a client can read: a CONNACK first, then
/// only packets a broker sends, nothing over the client's limit, nothing cut short.
fn check_broker_output(out: &[u8], max_packet: usize) {
    let mut buf = BytesMut::from(out);
    let mut first = true;
    while !buf.is_empty() {
        let packet = match Packet::read(&mut buf, usize::MAX) {
            Ok(p) => p,
            Err(e) => panic!("the broker wrote an unreadable packet ({e:?}): {out:?}"),
        };
        if first {
            assert!(
                matches!(packet, Packet::ConnAck(_)),
                "the first packet is CONNACK, not {packet:?}"
            );
            first = false;
            continue;
        }
        match &packet {
            Packet::Publish(p) => {
                let size = p.size();
                assert!(
                    size <= max_packet,
                    "delivery of {size} bytes over the limit"
                );
            }
            Packet::PubAck(_)
            | Packet::PubRec(_)
            | Packet::PubRel(_)
            | Packet::PubComp(_)
            | Packet::SubAck(_)
            | Packet::UnsubAck(_)
            | Packet::PingResp => {}
            other => panic!("a broker does not send {other:?}"),
        }
    }
}

/// Live sessions: client packets (a CONNECT first, mostly) in arbitrary chunks through the
/// real broker's connection code, over an in-memory stream. Nothing panics or hangs, the
/// session ends when the client closes, the broker writes only well-formed packets, and a
/// fresh client is served afterwards (no state left broken).
#[test]
fn broker_sessions() {
    check!()
        .with_type::<(bool, bool, Vec<u8>, Vec<ClientPacket>)>()
        .with_test_time(CI_BUDGET)
        .with_shrink_time(SHRINK_TIME)
        .with_max_len(8 * 1024)
        .for_each(|(tight, connect_first, sizes, packets)| {
            let live = &live_brokers()[usize::from(*tight)];
            let max_packet = if *tight { 4096 } else { usize::MAX };
            let mut bytes = BytesMut::new();
            if *connect_first {
                let _ = Packet::Connect(rumqttc::Connect::new("fuzz")).write(&mut bytes, 1024);
            }
            for p in packets.iter().take(8) {
                p.encode(&mut bytes);
            }
            let pieces = chunks(&bytes, sizes)
                .into_iter()
                .map(<[u8]>::to_vec)
                .collect();
            check_broker_output(&run_session(live, pieces), max_packet);

            // The broker still serves a well-behaved client.
            let mut hello = BytesMut::new();
            let _ = Packet::Connect(rumqttc::Connect::new("canary")).write(&mut hello, 1024);
            let _ = Packet::PingReq.write(&mut hello, 1024);
            let mut reply = BytesMut::from(&run_session(live, vec![hello.to_vec()])[..]);
            assert!(matches!(
                Packet::read(&mut reply, 1024),
                Ok(Packet::ConnAck(_))
            ));
            assert!(matches!(
                Packet::read(&mut reply, 1024),
                Ok(Packet::PingResp)
            ));
        });
}
