//! Log-ins through a whole connection: CONNACK codes, refusals counted on `/metrics`, and
//! guessers that neither cost PBKDF2 work nor hold up other clients.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::os::unix::fs::PermissionsExt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use rumqttc::mqttbytes::Error as CodecError;
use rumqttc::{Connect, ConnectReturnCode, Packet};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_util::sync::CancellationToken;
use wedge_core::metrics::{MetricsSource, PromWriter};

use super::{BrokerOptions, EmbeddedBroker};
use crate::access::throttle::{ADDRESS_BURST, ADDRESS_REFILL};
use crate::access::{AccessPolicy, MIN_ITERATIONS, PasswordHash};
use crate::settings::BrokerUrl;
use crate::stats::Stats;

fn peer(last: u8) -> SocketAddr {
    SocketAddr::new(IpAddr::V4(Ipv4Addr::new(192, 0, 2, last)), 40_000)
}

/// A broker whose `device` user (password `pw`) owns `clients/%c/#` and whose `plain` user
/// (password `pw`) has fixed topics, both hashed with `iterations`.
async fn broker(iterations: u32) -> (Arc<EmbeddedBroker>, AccessPolicy, Arc<Stats>) {
    let dir = tempfile::tempdir().unwrap();
    let hash = PasswordHash::derive(b"pw", b"saltsalt", iterations);
    let path = dir.path().join("users.yaml");
    std::fs::write(
        &path,
        format!(
            "users:\n\
             - name: device\n  passwordHash: \"{hash}\"\n  publish: [\"clients/%c/#\"]\n\
             - name: plain\n  passwordHash: \"{hash}\"\n  subscribe: [\"public/#\"]\n"
        ),
    )
    .unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    let access = AccessPolicy::build(None, Some(&path)).unwrap();
    let stats = Arc::new(Stats::default());
    let url = BrokerUrl {
        host: "127.0.0.1".to_owned(),
        port: 0,
        tls: false,
    };
    let options = BrokerOptions {
        access: access.clone(),
        ..BrokerOptions::default()
    };
    let broker = EmbeddedBroker::start(&url, options, stats.clone(), &CancellationToken::new())
        .await
        .unwrap();
    (Arc::new(broker), access, stats)
}

/// Sends one CONNECT from `from` and returns the broker's answer; then closes the connection.
async fn connack(
    broker: &EmbeddedBroker,
    from: SocketAddr,
    client_id: &str,
    login: Option<(&str, &str)>,
) -> ConnectReturnCode {
    let (client, server) = tokio::io::duplex(4096);
    let (mut reader, mut writer) = tokio::io::split(client);
    let mut connect = Connect::new(client_id);
    if let Some((user, password)) = login {
        connect.set_login(user, password);
    }
    let mut out = BytesMut::new();
    Packet::Connect(connect)
        .write(&mut out, usize::MAX)
        .unwrap();
    let client = async move {
        writer.write_all(&out).await.unwrap();
        let mut got = BytesMut::new();
        let code = loop {
            match Packet::read(&mut got, usize::MAX) {
                Ok(Packet::ConnAck(ack)) => break ack.code,
                Ok(other) => panic!("expected CONNACK, got {other:?}"),
                Err(CodecError::InsufficientBytes(_)) => {}
                Err(e) => panic!("unreadable answer: {e:?}"),
            }
            let mut chunk = [0u8; 256];
            let n = reader.read(&mut chunk).await.unwrap();
            assert!(n > 0, "connection closed before CONNACK");
            got.extend_from_slice(&chunk[..n]);
        };
        let _ = writer.shutdown().await;
        code
    };
    let ((), code) = tokio::join!(broker.serve_stream(server, from), client);
    code
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wildcard_client_ids_are_refused_where_patterns_use_them() {
    let (broker, _, stats) = broker(MIN_ITERATIONS).await;
    let device = Some(("device", "pw"));
    for id in ["+", "#", "+/+", "m1/x"] {
        assert_eq!(
            connack(&broker, peer(1), id, device).await,
            ConnectReturnCode::BadClientId,
            "{id:?}"
        );
    }
    assert_eq!(stats.broker().logins_refused("client_id"), 4);
    // An empty id gets a generated one, which is a literal level.
    for id in ["m1", ""] {
        assert_eq!(
            connack(&broker, peer(1), id, device).await,
            ConnectReturnCode::Success,
            "{id:?}"
        );
    }
    // `plain`'s patterns do not use %c: its client id is no topic and is not checked.
    assert_eq!(
        connack(&broker, peer(1), "+", Some(("plain", "pw"))).await,
        ConnectReturnCode::Success
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn guessers_are_throttled_counted_and_hold_no_one_up() {
    let (broker, access, stats) = broker(MIN_ITERATIONS).await;
    let guesser = peer(1);
    for i in 0..ADDRESS_BURST {
        let name = format!("guess-{i}");
        assert_eq!(
            connack(&broker, guesser, "c", Some((&name, "x"))).await,
            ConnectReturnCode::BadUserNamePassword
        );
    }
    let checks = access.password_checks();
    assert_eq!(checks, u64::from(ADDRESS_BURST));
    // Its budget spent, the address is refused at once (retry later), with no PBKDF2 work,
    // even with a right password.
    for login in [("guess-x", "x"), ("plain", "pw")] {
        assert_eq!(
            connack(&broker, guesser, "c", Some(login)).await,
            ConnectReturnCode::ServiceUnavailable
        );
    }
    assert_eq!(access.password_checks(), checks);
    // Another address logs in at once.
    let started = Instant::now();
    assert_eq!(
        connack(&broker, peer(2), "c", Some(("plain", "pw"))).await,
        ConnectReturnCode::Success
    );
    assert!(started.elapsed() < Duration::from_secs(2));
    let broker_stats = stats.broker();
    assert_eq!(broker_stats.logins_refused("throttled"), 2);
    assert_eq!(
        broker_stats.logins_refused("bad_credentials"),
        u64::from(ADDRESS_BURST)
    );
    let mut w = PromWriter::new();
    stats.write_metrics(&mut w);
    let page = w.finish();
    assert!(
        page.contains("wedge_eventbus_broker_logins_refused_total{reason=\"throttled\"} 2"),
        "{page}"
    );
    assert!(
        page.contains("wedge_eventbus_broker_logins_refused_total{reason=\"client_id\"} 0"),
        "{page}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_storm_from_one_address_does_not_delay_a_log_in_from_another() {
    // Costly hashes, as a real users file has: each check takes milliseconds (tens to
    // hundreds in a debug build).
    let (broker, access, _) = broker(10_000).await;
    // What one check costs here, from an address of its own.
    let started = Instant::now();
    assert_eq!(
        connack(&broker, peer(3), "c", Some(("nobody", "x"))).await,
        ConnectReturnCode::BadUserNamePassword
    );
    let one_check = started.elapsed();
    // Fifty guessers at once from one address.
    let storm_started = Instant::now();
    let mut storm = tokio::task::JoinSet::new();
    for i in 0..50 {
        let broker = broker.clone();
        storm.spawn(async move {
            let name = format!("guess-{i}");
            connack(&broker, peer(1), "c", Some((&name, "x"))).await
        });
    }
    tokio::time::sleep(Duration::from_millis(20)).await;
    let started = Instant::now();
    assert_eq!(
        connack(&broker, peer(2), "c", Some(("plain", "pw"))).await,
        ConnectReturnCode::Success
    );
    let delayed = started.elapsed();
    let mut refused = Vec::new();
    while let Some(code) = storm.join_next().await {
        refused.push(code.unwrap());
    }
    let storm_took = storm_started.elapsed();
    let checked = refused
        .iter()
        .filter(|c| **c == ConnectReturnCode::BadUserNamePassword)
        .count() as u64;
    // Measured again, as other tests load the machine meanwhile; the larger is kept.
    let started = Instant::now();
    assert_eq!(
        connack(&broker, peer(4), "c", Some(("nobody", "x"))).await,
        ConnectReturnCode::BadUserNamePassword
    );
    let one_check = one_check.max(started.elapsed());
    eprintln!(
        "one check {one_check:?}; log-in during a 50-guesser storm {delayed:?}; \
         storm {storm_took:?}: {checked} guesses checked, {} throttled",
        50 - checked
    );
    // It waits for the guesser's check in progress and its own (about two checks), not for
    // the guesser's queue (twenty checks, the burst, without lanes).
    assert!(
        delayed < one_check * 10,
        "{delayed:?} vs one check {one_check:?}"
    );
    assert!(refused.iter().all(|c| matches!(
        c,
        ConnectReturnCode::BadUserNamePassword | ConnectReturnCode::ServiceUnavailable
    )));
    // The burst was checked, plus what the budget refilled while the storm lasted; the rest
    // were refused without work.
    let refilled = (storm_took.as_millis() / ADDRESS_REFILL.as_millis()) as u64;
    assert!(
        (u64::from(ADDRESS_BURST)..=u64::from(ADDRESS_BURST) + refilled).contains(&checked),
        "{checked} checked in {storm_took:?}"
    );
    // The storm cost those checks, plus the two lone guesses and the real log-in, no more.
    assert_eq!(access.password_checks(), checked + 3);
}
