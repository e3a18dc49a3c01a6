//! The session's dispatch and bounds, with the test playing the cloud's end of the WebSocket
//! (frames as KubeEdge's format has them) and a small local "kubelet". What CloudCore itself
//! does is checked against the real one in `tests/realcloud/`.

use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

use super::*;
use crate::config::Credentials;
use crate::ws::testing::{read_client_frame, server_frame};
use crate::ws::{OP_CLOSE, OP_PING, OP_PONG, OP_TEXT};

/// The cloud's end.
struct Cloud {
    io: DuplexStream,
    /// Answer the edge's pings.
    pong: bool,
}

impl Cloud {
    async fn send(&mut self, m: TunnelMessage) {
        self.io
            .write_all(&server_frame(true, OP_TEXT, &m.encode()))
            .await
            .unwrap();
    }

    /// The next tunnel message from the edge (pings answered or skipped), within 5 s.
    async fn recv(&mut self) -> TunnelMessage {
        tokio::time::timeout(Duration::from_secs(5), async {
            loop {
                let (op, payload) = read_client_frame(&mut self.io).await.unwrap();
                match op {
                    OP_TEXT => return TunnelMessage::decode(payload.into()).unwrap(),
                    OP_PING if self.pong => self
                        .io
                        .write_all(&server_frame(true, OP_PONG, &payload))
                        .await
                        .unwrap(),
                    _ => {}
                }
            }
        })
        .await
        .expect("a message from the edge within 5 s")
    }
}

struct Bed {
    cloud: Cloud,
    session: JoinHandle<SessionEnd>,
    stats: Arc<Stats>,
    shutdown: CancellationToken,
}

fn config(local: std::net::SocketAddr) -> TunnelConfig {
    let mut c = TunnelConfig::new(
        "127.0.0.1:1",
        Credentials::Pem {
            ca: vec![],
            cert: vec![],
            key: vec![],
        },
        "edge-1",
    );
    c.local_addr = local;
    c
}

fn start(config: TunnelConfig) -> Bed {
    let (edge, cloud) = tokio::io::duplex(1 << 20);
    let stats = Arc::new(Stats::default());
    let shutdown = CancellationToken::new();
    let (s, t) = (stats.clone(), shutdown.clone());
    let session =
        tokio::spawn(async move { serve(edge, BytesMut::new(), Arc::new(config), s, &t).await });
    Bed {
        cloud: Cloud {
            io: cloud,
            pong: true,
        },
        session,
        stats,
        shutdown,
    }
}

fn connect(id: u64, kind: MessageType, path: &str) -> TunnelMessage {
    let (path, query) = path.split_once('?').unwrap_or((path, ""));
    let json = serde_json::json!({
        "MessID": id,
        "url": {"Scheme": "http", "Host": "127.0.0.1:10350", "Path": path, "RawQuery": query},
        "header": {"Connection": ["Upgrade"], "Upgrade": ["SPDY/3.1"]},
        "method": "POST",
    });
    TunnelMessage::new(id, kind, serde_json::to_vec(&json).unwrap())
}

/// A local "kubelet": `/hold` answers a chunked head and nothing more, `/exec/...` upgrades
/// and echoes upper-cased, anything else is `hello`.
async fn kubelet() -> std::net::SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let (mut tcp, _) = listener.accept().await.unwrap();
            tokio::spawn(async move {
                let mut head = Vec::new();
                while !head.ends_with(b"\r\n\r\n") {
                    let mut b = [0u8; 1];
                    if tcp.read(&mut b).await.unwrap_or(0) == 0 {
                        return;
                    }
                    head.push(b[0]);
                }
                let head = String::from_utf8_lossy(&head).into_owned();
                if head.contains(" /hold") {
                    let _ = tcp
                        .write_all(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
                        .await;
                    let mut b = [0u8; 16];
                    while tcp.read(&mut b).await.unwrap_or(0) > 0 {}
                } else if head.contains(" /exec/stuck/") {
                    // Upgrades, then never reads: the cloud's bytes pile up.
                    let _ = tcp
                        .write_all(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: SPDY/3.1\r\n\r\n")
                        .await;
                    tokio::time::sleep(Duration::from_secs(3600)).await;
                } else if head.contains(" /exec/") {
                    let _ = tcp
                        .write_all(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: SPDY/3.1\r\n\r\n")
                        .await;
                    let mut b = [0u8; 1024];
                    loop {
                        match tcp.read(&mut b).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => {
                                let _ = tcp.write_all(&b[..n].to_ascii_uppercase()).await;
                            }
                        }
                    }
                } else {
                    let _ = tcp
                        .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello")
                        .await;
                }
            });
        }
    });
    addr
}

#[tokio::test]
async fn close_connect_ends_the_session_with_the_clouds_reason() {
    let mut bed = start(config(kubelet().await));
    bed.cloud
        .send(TunnelMessage::new(
            0,
            MessageType::CloseConnect,
            "failed to Update KubeletEndpoint Port",
        ))
        .await;
    let end = tokio::time::timeout(Duration::from_secs(5), bed.session)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        end,
        SessionEnd::CloudRefused("failed to Update KubeletEndpoint Port".into())
    );
}

#[tokio::test]
async fn a_logs_body_goes_back_then_remove_connect() {
    let mut bed = start(config(kubelet().await));
    bed.cloud
        .send(connect(
            7,
            MessageType::LogsConnect,
            "/containerLogs/default/web/main",
        ))
        .await;
    assert_eq!(
        bed.cloud.recv().await,
        TunnelMessage::new(7, MessageType::Data, "hello")
    );
    assert_eq!(bed.cloud.recv().await, TunnelMessage::remove(7));
    assert_eq!(Stats::get(&bed.stats.opened[Kind::Logs.index()]), 1);
}

#[tokio::test]
async fn exec_pipes_both_ways_until_the_cloud_removes_it() {
    let mut bed = start(config(kubelet().await));
    bed.cloud
        .send(connect(
            300,
            MessageType::ExecConnect,
            "/exec/default/web/main?command=sh",
        ))
        .await;
    let head = bed.cloud.recv().await;
    assert_eq!(head.connect_id, 300);
    assert!(
        head.data
            .starts_with(b"HTTP/1.1 101 Switching Protocols\r\n")
    );
    bed.cloud
        .send(TunnelMessage::new(300, MessageType::Data, &b"abc\xff"[..]))
        .await;
    assert_eq!(
        bed.cloud.recv().await,
        TunnelMessage::new(300, MessageType::Data, &b"ABC\xff"[..])
    );
    bed.cloud.send(TunnelMessage::remove(300)).await;
    assert_eq!(bed.cloud.recv().await, TunnelMessage::remove(300));
}

#[tokio::test]
async fn what_cannot_be_served_is_refused_at_once_and_counted() {
    let mut c = config(kubelet().await);
    c.max_connections = 1;
    let mut bed = start(c);
    // Holds the only place.
    bed.cloud
        .send(connect(1, MessageType::LogsConnect, "/hold?follow=true"))
        .await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    // Over the limit: an exec gets an HTTP answer saying so, then REMOVE_CONNECT.
    bed.cloud
        .send(connect(2, MessageType::ExecConnect, "/exec/a/b/c"))
        .await;
    let answer = bed.cloud.recv().await;
    assert_eq!((answer.connect_id, answer.kind), (2, MessageType::Data));
    assert!(
        answer
            .data
            .starts_with(b"HTTP/1.1 503 Service Unavailable\r\n")
    );
    assert_eq!(bed.cloud.recv().await, TunnelMessage::remove(2));
    // A payload that is not KubeEdge's JSON.
    bed.cloud
        .send(TunnelMessage::new(
            3,
            MessageType::MetricConnect,
            "{not json",
        ))
        .await;
    assert_eq!(bed.cloud.recv().await, TunnelMessage::remove(3));
    // A type v1.23 does not have (edgecore panics on one): skipped.
    bed.cloud
        .send(TunnelMessage::new(4, MessageType::Unknown(9), "?"))
        .await;
    // Data for nobody: ignored.
    bed.cloud
        .send(TunnelMessage::new(99, MessageType::Data, "x"))
        .await;
    // The cloud ends the held one: the edge closes it and says so.
    bed.cloud.send(TunnelMessage::remove(1)).await;
    assert_eq!(bed.cloud.recv().await, TunnelMessage::remove(1));
    assert_eq!(Stats::get(&bed.stats.refused_connects), 2);
    assert_eq!(Stats::get(&bed.stats.bad_messages), 1);
    assert!(!bed.session.is_finished());
}

#[tokio::test]
async fn an_unreachable_kubelet_still_ends_the_request() {
    // A port nothing listens on.
    let closed = TcpListener::bind("127.0.0.1:0")
        .await
        .unwrap()
        .local_addr()
        .unwrap();
    let mut bed = start(config(closed));
    bed.cloud
        .send(connect(5, MessageType::LogsConnect, "/containerLogs/a/b/c"))
        .await;
    assert_eq!(bed.cloud.recv().await, TunnelMessage::remove(5));
    bed.cloud
        .send(connect(6, MessageType::AttachConnect, "/attach/a/b/c"))
        .await;
    let answer = bed.cloud.recv().await;
    assert!(answer.data.starts_with(b"HTTP/1.1 502 Bad Gateway\r\n"));
    assert_eq!(bed.cloud.recv().await, TunnelMessage::remove(6));
    assert_eq!(Stats::get(&bed.stats.local_failures[Kind::Logs.index()]), 1);
    assert_eq!(
        Stats::get(&bed.stats.local_failures[Kind::Attach.index()]),
        1
    );
}

#[tokio::test]
async fn a_cloud_that_answered_and_fell_silent_is_left() {
    let mut c = config(kubelet().await);
    c.ping_interval = Duration::from_millis(100);
    c.read_deadline = Duration::from_millis(400);
    let mut bed = start(c);
    bed.cloud.pong = false;
    // Never answered a ping (CloudCore before it reads the session): no deadline.
    tokio::time::sleep(Duration::from_millis(1000)).await;
    assert!(!bed.session.is_finished());
    // One answer, then silence.
    bed.cloud
        .io
        .write_all(&server_frame(true, OP_PONG, b"ping you"))
        .await
        .unwrap();
    let end = tokio::time::timeout(Duration::from_secs(5), async {
        // Keep reading what the edge writes (its pings) so that it is never blocked.
        let reader = async {
            loop {
                if read_client_frame(&mut bed.cloud.io).await.is_err() {
                    std::future::pending::<()>().await;
                }
            }
        };
        tokio::select! {
            end = &mut bed.session => end.unwrap(),
            _ = reader => unreachable!(),
        }
    })
    .await
    .unwrap();
    assert_eq!(end, SessionEnd::CloudSilent);
    assert_eq!(Stats::get(&bed.stats.silent_cloud), 1);
}

#[tokio::test]
async fn shutdown_closes_the_websocket() {
    let mut bed = start(config(kubelet().await));
    bed.cloud
        .send(connect(1, MessageType::LogsConnect, "/hold?follow=true"))
        .await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    bed.shutdown.cancel();
    let end = tokio::time::timeout(Duration::from_secs(5), bed.session)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(end, SessionEnd::Shutdown);
    // A close frame, no REMOVE_CONNECT (the session is going away).
    loop {
        let (op, payload) = read_client_frame(&mut bed.cloud.io).await.unwrap();
        if op == OP_CLOSE {
            assert_eq!(payload, 1000u16.to_be_bytes());
            break;
        }
        assert_eq!(op, OP_PING, "only pings before the close");
    }
}

#[tokio::test]
async fn a_connection_that_takes_no_data_is_closed_not_buffered() {
    let mut c = config(kubelet().await);
    c.inbound_queue = 2;
    c.write_deadline = Duration::from_millis(300);
    let mut bed = start(c);
    bed.cloud
        .send(connect(8, MessageType::ExecConnect, "/exec/stuck/a/b"))
        .await;
    let head = bed.cloud.recv().await;
    assert!(head.data.starts_with(b"HTTP/1.1 101"));
    // Far more than the socket buffers hold; the edge must give up on the connection (and say
    // so) instead of queueing it all.
    let (mut rd, mut wr) = tokio::io::split(bed.cloud.io);
    let chunk = TunnelMessage::new(8, MessageType::Data, vec![b'x'; 64 * 1024]).encode();
    let frame = server_frame(true, OP_TEXT, &chunk);
    let flood = async {
        for _ in 0..1600 {
            if wr.write_all(&frame).await.is_err() {
                break;
            }
        }
        std::future::pending::<()>().await
    };
    let removed = async {
        loop {
            let (op, payload) = read_client_frame(&mut rd).await.unwrap();
            if op == OP_TEXT {
                return TunnelMessage::decode(payload.into()).unwrap();
            }
        }
    };
    let got = tokio::time::timeout(Duration::from_secs(20), async {
        tokio::select! {
            m = removed => m,
            _ = flood => unreachable!(),
        }
    })
    .await
    .expect("REMOVE_CONNECT for the stalled connection");
    assert_eq!(got, TunnelMessage::remove(8));
    assert_eq!(Stats::get(&bed.stats.stalled), 1);
}
