//! A full exec over an in-memory connection, driven by a minimal SPDY client that behaves like
//! client-go's (stream creation order, waiting for each SYN_REPLY, JSON resize messages).

use std::collections::HashMap;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};
use wedge_remotecommand::frame::{
    FLAG_FIN, Frame, FrameDecoder, FrameEncoder, HeaderBlock, Limits, TYPE_PING,
};
use wedge_remotecommand::{
    ExitOutcome, Protocol, RemoteCommandError, Session, StreamOptions, accept,
};

const WAIT: Duration = Duration::from_secs(10);

struct Client {
    io: DuplexStream,
    enc: FrameEncoder,
    dec: FrameDecoder,
    buf: BytesMut,
    next_id: u32,
}

impl Client {
    fn new(io: DuplexStream) -> Client {
        Client {
            io,
            enc: FrameEncoder::new().expect("encoder"),
            dec: FrameDecoder::new(Limits::default()),
            buf: BytesMut::new(),
            next_id: 1,
        }
    }

    async fn send(&mut self, frame: Frame) {
        let mut out = BytesMut::new();
        self.enc.encode(&frame, &mut out).expect("encode");
        self.io.write_all(&out).await.expect("write");
    }

    /// The next frame from the server; `None` once it closed the connection.
    async fn next(&mut self) -> Option<Frame> {
        loop {
            if let Some(frame) = self.dec.decode(&mut self.buf).expect("server frame") {
                return Some(frame);
            }
            let n = tokio::time::timeout(WAIT, self.io.read_buf(&mut self.buf))
                .await
                .expect("server went silent")
                .expect("read");
            if n == 0 {
                return None;
            }
        }
    }

    /// Opens a stream and waits for its SYN_REPLY, as client-go's `CreateStream` does.
    async fn create_stream(&mut self, streamtype: &str) -> u32 {
        let stream_id = self.next_id;
        self.next_id += 2;
        self.send(Frame::SynStream {
            stream_id,
            associated_to: 0,
            priority: 0,
            flags: 0,
            headers: HeaderBlock::new().with("streamtype", streamtype),
        })
        .await;
        match self.next().await {
            Some(Frame::SynReply {
                stream_id: id,
                flags: 0,
                ..
            }) if id == stream_id => stream_id,
            other => panic!("expected SYN_REPLY for {stream_id}, got {other:?}"),
        }
    }

    async fn data(&mut self, stream_id: u32, data: &[u8], fin: bool) {
        self.send(Frame::Data {
            stream_id,
            flags: if fin { FLAG_FIN } else { 0 },
            data: Bytes::copy_from_slice(data),
        })
        .await;
    }

    /// Reads until `want` bytes arrived on `stream_id` (other data is not expected meanwhile).
    async fn expect_data(&mut self, stream_id: u32, want: &[u8]) {
        let mut got = Vec::new();
        while got.len() < want.len() {
            match self.next().await {
                Some(Frame::Data {
                    stream_id: id,
                    data,
                    flags: 0,
                }) if id == stream_id => got.extend_from_slice(&data),
                other => panic!("expected data on {stream_id}, got {other:?}"),
            }
        }
        assert_eq!(got, want);
    }

    /// Reads everything up to GOAWAY: per-stream payloads, and which streams got FIN.
    async fn drain_until_goaway(&mut self) -> (HashMap<u32, Vec<u8>>, Vec<u32>, u32) {
        let mut payloads: HashMap<u32, Vec<u8>> = HashMap::new();
        let mut fins = Vec::new();
        loop {
            match self.next().await {
                Some(Frame::Data {
                    stream_id,
                    flags,
                    data,
                }) => {
                    assert!(!fins.contains(&stream_id), "data after FIN on {stream_id}");
                    payloads
                        .entry(stream_id)
                        .or_default()
                        .extend_from_slice(&data);
                    if flags & FLAG_FIN != 0 {
                        fins.push(stream_id);
                    }
                }
                Some(Frame::GoAway {
                    last_good_stream_id,
                    status,
                }) => {
                    assert_eq!(status, 0);
                    return (payloads, fins, last_good_stream_id);
                }
                other => panic!("unexpected {other:?}"),
            }
        }
    }
}

/// The test's "command": echoes stdin to stdout, reports resizes on stdout, exits 3 at EOF.
async fn echo_command(
    mut session: Session,
) -> Result<wedge_remotecommand::SessionStats, RemoteCommandError> {
    let mut stdin = session.stdin.take().expect("stdin");
    let stdout = session.stdout.take().expect("stdout");
    let mut resize = session.resize.take().expect("resize");
    assert!(session.stderr.is_none(), "tty has no stderr");
    let mut resize_open = true;
    loop {
        tokio::select! {
            chunk = stdin.recv() => match chunk {
                Some(chunk) => stdout.send(chunk).await?,
                None => break,
            },
            size = resize.recv(), if resize_open => match size {
                Some(size) => {
                    let line = format!("[resize {}x{}]", size.width, size.height);
                    stdout.send(Bytes::from(line)).await?;
                }
                None => resize_open = false,
            },
        }
    }
    session.finish(ExitOutcome::ExitCode(3)).await
}

#[tokio::test]
async fn kubectl_exec_it_on_v4() {
    let (client_io, server_io) = tokio::io::duplex(1 << 20);
    let options = StreamOptions::from_query("command=sh&input=1&output=1&tty=1").expect("options");
    let server = tokio::spawn(async move {
        let session = accept(server_io, Protocol::V4, options, WAIT).await?;
        assert_eq!(session.protocol(), Protocol::V4);
        echo_command(session).await
    });

    let mut client = Client::new(client_io);
    // Frames spdystream may send that carry nothing for us.
    client
        .send(Frame::Settings {
            flags: 0,
            entries: vec![(0, 7, 65536)],
        })
        .await;
    client
        .send(Frame::WindowUpdate {
            stream_id: 0,
            delta: 1,
        })
        .await;
    // client-go v4 order: error, stdin, stdout, (stderr unless tty), resize.
    let error = client.create_stream("error").await;
    let stdin = client.create_stream("stdin").await;
    let stdout = client.create_stream("stdout").await;
    let resize = client.create_stream("resize").await;

    // A resize object split across two frames, then a second one.
    client.data(resize, br#"{"Width":100,"#, false).await;
    client
        .data(
            resize,
            b"\"Height\":40}\n{\"Width\":120,\"Height\":50}\n",
            false,
        )
        .await;
    client.expect_data(stdout, b"[resize 100x40]").await;
    client.expect_data(stdout, b"[resize 120x50]").await;

    client.data(stdin, b"hello\n", false).await;
    client.expect_data(stdout, b"hello\n").await;

    client.send(Frame::Ping { id: 1 }).await;
    assert_eq!(client.next().await, Some(Frame::Ping { id: 1 }));

    // Data the server must refuse (and count): the client writing on stdout.
    client.data(stdout, b"nope", false).await;
    // End of input: the command exits 3.
    client.data(stdin, b"", true).await;

    let (payloads, fins, last_good) = client.drain_until_goaway().await;
    assert_eq!(last_good, resize);
    for stream in [error, stdin, stdout, resize] {
        assert!(
            fins.contains(&stream),
            "no FIN on stream {stream}: {fins:?}"
        );
    }
    let status: serde_json::Value = serde_json::from_slice(&payloads[&error]).expect("status JSON");
    assert_eq!(status["status"], "Failure");
    assert_eq!(status["reason"], "NonZeroExitCode");
    assert_eq!(status["details"]["causes"][0]["reason"], "ExitCode");
    assert_eq!(status["details"]["causes"][0]["message"], "3");
    assert_eq!(status["metadata"], serde_json::json!({}));
    // The server shuts its side after GOAWAY; the client then closes.
    assert_eq!(client.next().await, None);
    drop(client);

    let stats = tokio::time::timeout(WAIT, server)
        .await
        .expect("server finished")
        .expect("join")
        .expect("session");
    assert_eq!(stats.stdin_bytes, 6);
    assert_eq!(stats.resize_events, 2);
    assert_eq!(stats.stdout_bytes, 6 + 2 * 15);
    assert_eq!(stats.refused_frames, 1);
    assert_eq!(stats.refused_bytes, 4);
}

#[tokio::test]
async fn v2_stdout_stderr_and_plain_text_error() {
    let (client_io, server_io) = tokio::io::duplex(1 << 20);
    let options = StreamOptions::from_query("output=1&error=1").expect("options");
    let big = vec![b'x'; 200 * 1024];
    let big_out = big.clone();
    let server = tokio::spawn(async move {
        let mut session = accept(server_io, Protocol::V2, options, WAIT).await?;
        assert!(session.stdin.is_none() && session.resize.is_none());
        let stdout = session.stdout.take().expect("stdout");
        let stderr = session.stderr.take().expect("stderr");
        stdout.send(Bytes::from(big_out)).await?;
        stderr.send(Bytes::from_static(b"oops")).await?;
        session.finish(ExitOutcome::Error("boom".into())).await
    });

    let mut client = Client::new(client_io);
    let error = client.create_stream("error").await;
    let stdout = client.create_stream("stdout").await;
    let stderr = client.create_stream("stderr").await;
    let (payloads, fins, _) = client.drain_until_goaway().await;
    assert_eq!(payloads[&stdout], big);
    assert_eq!(payloads[&stderr], b"oops");
    assert_eq!(
        String::from_utf8_lossy(&payloads[&error]),
        "Internal error occurred: error executing command in container: boom"
    );
    assert_eq!(fins.len(), 3);
    drop(client);
    let stats = server.await.expect("join").expect("session");
    assert_eq!(stats.stdout_bytes, 200 * 1024);
    assert_eq!(stats.stderr_bytes, 4);
}

#[tokio::test]
async fn v4_success_writes_success_status() {
    let (client_io, server_io) = tokio::io::duplex(1 << 16);
    let options = StreamOptions::from_query("output=1").expect("options");
    let server = tokio::spawn(async move {
        let session = accept(server_io, Protocol::V5, options, WAIT).await?;
        session.finish(ExitOutcome::Success).await
    });
    let mut client = Client::new(client_io);
    let error = client.create_stream("error").await;
    client.create_stream("stdout").await;
    let (payloads, _, _) = client.drain_until_goaway().await;
    assert_eq!(payloads[&error], br#"{"metadata":{},"status":"Success"}"#);
    drop(client);
    server.await.expect("join").expect("session");
}

#[tokio::test]
async fn missing_streams_time_out() {
    let (client_io, server_io) = tokio::io::duplex(1 << 16);
    let options = StreamOptions::from_query("input=1&output=1").expect("options");
    let server = tokio::spawn(async move {
        accept(server_io, Protocol::V4, options, Duration::from_millis(200)).await
    });
    let mut client = Client::new(client_io);
    client.create_stream("error").await;
    client.create_stream("stdout").await;
    match server.await.expect("join") {
        Err(RemoteCommandError::StreamCreationTimeout { missing }) => assert_eq!(missing, "stdin"),
        other => panic!("expected a timeout, got {other:?}"),
    }
    // The server dropped the connection.
    assert_eq!(client.next().await, None);
}

#[tokio::test]
async fn a_client_that_vanishes_ends_the_session() {
    let (client_io, server_io) = tokio::io::duplex(1 << 16);
    let options = StreamOptions::from_query("input=1&output=1").expect("options");
    let (ready_tx, ready_rx) = tokio::sync::oneshot::channel();
    let server = tokio::spawn(async move {
        let mut session = accept(server_io, Protocol::V4, options, WAIT).await?;
        let _ = ready_tx.send(());
        let gone = session.peer_gone();
        let mut stdin = session.stdin.take().expect("stdin");
        let stdout = session.stdout.take().expect("stdout");
        tokio::time::timeout(WAIT, gone.wait())
            .await
            .expect("peer gone seen");
        assert!(gone.is_gone());
        assert_eq!(stdin.recv().await, None);
        assert!(matches!(
            stdout.send(Bytes::from_static(b"late")).await,
            Err(RemoteCommandError::ConnectionClosed)
        ));
        let finished = tokio::time::timeout(WAIT, session.finish(ExitOutcome::Success))
            .await
            .expect("finish does not hang");
        Ok::<_, RemoteCommandError>(finished.is_ok())
    });
    let mut client = Client::new(client_io);
    client.create_stream("error").await;
    client.create_stream("stdin").await;
    client.create_stream("stdout").await;
    ready_rx.await.expect("session up");
    drop(client);
    server.await.expect("join").expect("session");
}

#[tokio::test]
async fn a_bad_frame_is_a_typed_error() {
    let (mut client_io, server_io) = tokio::io::duplex(1 << 16);
    let options = StreamOptions::from_query("output=1").expect("options");
    let server = tokio::spawn(async move { accept(server_io, Protocol::V4, options, WAIT).await });
    // A PING of SPDY version 2.
    let mut bad = vec![0x80, 0x02];
    bad.extend_from_slice(&TYPE_PING.to_be_bytes());
    bad.extend_from_slice(&[0, 0, 0, 4, 0, 0, 0, 1]);
    client_io.write_all(&bad).await.expect("write");
    match server.await.expect("join") {
        Err(RemoteCommandError::Frame(e)) => {
            assert!(e.to_string().contains("version 2"), "{e}")
        }
        other => panic!("expected a frame error, got {other:?}"),
    }
}
