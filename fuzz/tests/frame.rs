//! The cloud link's inbound path: WebSocket bytes from CloudCore through tungstenite (with
//! the limits edgehub configures) into `wedge_edgehub::link::decode`, then what the session
//! does with a decoded message (control ack, dispatch).
//!
//! - nothing panics; a finite input ends in finitely many frames;
//! - a frame over `maxFrameBytes` is refused as too large, whatever it holds;
//! - a decoded message encodes (`\n`-terminated, `sync` cleared) and decodes to itself;
//! - a control message's ack answers it (`parent_msg_id` = its id) and is itself a frame that
//!   decodes;
//! - dispatch decides something for every message.

use std::io::{self, Cursor, Read, Write};

use bolero::{TypeGenerator, check};
use tokio_tungstenite::tungstenite::protocol::{Role, WebSocket, WebSocketConfig};
use tokio_tungstenite::tungstenite::{self, Message as WsMessage};
use wedge_edgehub::link::{
    Dispatch, FrameError, control_ack, decode, encode, is_control, route_inbound,
};
use wedge_fuzz::envelope::Envelope;
use wedge_fuzz::{CI_BUDGET, SHRINK_TIME};

/// Frame limits to decode under: tiny, small, and the default 4 MiB.
const LIMITS: &[usize] = &[64, 1024, 4 * 1024 * 1024, 4 * 1024 * 1024];

/// What the session does with one frame's payload.
fn check_payload(payload: &[u8], max: usize) {
    let msg = match decode(payload, max) {
        Ok(msg) => msg,
        Err(FrameError::TooLarge { len, max: limit }) => {
            assert!(len > limit && len == payload.len() && limit == max);
            return;
        }
        Err(FrameError::Malformed(_)) => {
            assert!(
                payload.len() <= max,
                "a frame over the limit is refused as too large"
            );
            return;
        }
    };
    assert!(payload.len() <= max);
    let text = encode(&msg);
    // One frame per message: a newline inside (whitespace kept in a content as received)
    // is harmless.
    assert!(text.ends_with('\n'));
    let back = decode(text.as_bytes(), usize::MAX).expect("an encoded message decodes");
    let mut expected = msg.clone();
    expected.header.sync = false;
    assert_eq!(back, expected, "frame round trip");
    if is_control(&msg) {
        let ack = control_ack(&msg);
        assert_eq!(ack.header.parent_id, msg.header.id);
        assert_eq!(ack.route.resource, msg.route.resource);
        let sent = decode(encode(&ack).as_bytes(), usize::MAX).expect("an ack decodes");
        assert_eq!(sent.header.parent_id, msg.header.id);
    } else {
        let to = route_inbound(&msg);
        if to == Dispatch::Reply {
            assert!(msg.parent_id().is_some(), "a reply names its request");
        }
    }
}

/// The socket: reads the input, swallows what is written (pongs, close frames).
struct Socket(Cursor<Vec<u8>>);

impl Read for Socket {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.0.read(buf)
    }
}

impl Write for Socket {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        Ok(buf.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Reads `bytes` as the server's side of an open WebSocket, with edgehub's limits (twice
/// `maxFrameBytes` for tungstenite), and handles every data frame as the session does.
fn check_socket(bytes: Vec<u8>, max: usize) {
    let len = bytes.len();
    let limit = max.saturating_mul(2);
    let config = WebSocketConfig::default()
        .max_frame_size(Some(limit))
        .max_message_size(Some(limit))
        // Smaller than the default 128 KiB, which a fresh socket per input would allocate and
        // clear each time; how much is read per call changes nothing else.
        .read_buffer_size(4096);
    let mut ws = WebSocket::from_raw_socket(Socket(Cursor::new(bytes)), Role::Client, Some(config));
    let mut frames = 0usize;
    loop {
        let msg = match ws.read() {
            Ok(msg) => msg,
            Err(tungstenite::Error::Io(e)) if e.kind() == io::ErrorKind::WouldBlock => break,
            Err(_) => break,
        };
        frames += 1;
        assert!(frames <= len / 2 + 2, "more frames than the input can hold");
        match msg {
            WsMessage::Text(text) => check_payload(text.as_bytes(), max),
            WsMessage::Binary(bytes) => check_payload(&bytes, max),
            _ => {}
        }
    }
}

/// Frame payloads as they come out of tungstenite: bytes, and envelopes.
#[test]
fn frame_payloads() {
    check!()
        .with_type::<(u8, Envelope, Vec<u8>)>()
        .with_test_time(CI_BUDGET)
        .with_shrink_time(SHRINK_TIME)
        .for_each(|(limit, envelope, raw)| {
            let max = LIMITS[usize::from(*limit) % LIMITS.len()];
            check_payload(&envelope.bytes(), max);
            check_payload(raw, max);
        });
}

/// One WebSocket frame as a server could write it.
#[derive(Debug, Clone, TypeGenerator)]
struct Frame {
    /// Not the last fragment.
    more: bool,
    /// 0 continuation, 1 text, 2 binary, 8 close, 9 ping, 10 pong, others reserved.
    opcode: u8,
    /// Servers must not mask; a masked frame is a protocol error for the client.
    mask: Option<[u8; 4]>,
    /// The payload: an envelope (mostly) or bytes.
    payload: FramePayload,
    /// Reserved bits set.
    rsv: u8,
}

#[derive(Debug, Clone, TypeGenerator)]
enum FramePayload {
    Envelope(Envelope),
    Envelope2(Envelope),
    Raw(Vec<u8>),
}

impl Frame {
    fn encode(&self, out: &mut Vec<u8>) {
        let payload = match &self.payload {
            FramePayload::Envelope(e) | FramePayload::Envelope2(e) => e.bytes(),
            FramePayload::Raw(b) => b.clone(),
        };
        let opcode = match self.opcode % 16 {
            // Data frames most of the time.
            11..=15 => 1,
            n => n,
        };
        let rsv = if self.rsv > 240 { self.rsv & 0x70 } else { 0 };
        out.push(if self.more { 0 } else { 0x80 } | rsv | opcode);
        let mask_bit = if self.mask.is_some() { 0x80 } else { 0 };
        match payload.len() {
            n @ 0..=125 => out.push(mask_bit | n as u8),
            n @ 126..=0xffff => {
                out.push(mask_bit | 126);
                out.extend_from_slice(&(n as u16).to_be_bytes());
            }
            n => {
                out.push(mask_bit | 127);
                out.extend_from_slice(&(n as u64).to_be_bytes());
            }
        }
        match self.mask {
            Some(key) => {
                out.extend_from_slice(&key);
                out.extend(payload.iter().enumerate().map(|(i, b)| b ^ key[i % 4]));
            }
            None => out.extend_from_slice(&payload),
        }
    }
}

/// A server's byte stream: well-formed frames (text, binary, fragments, control), some
/// masked or reserved, and then anything.
#[test]
fn frame_websocket_stream() {
    check!()
        .with_type::<(u8, Vec<Frame>, Vec<u8>)>()
        .with_test_time(CI_BUDGET)
        .with_shrink_time(SHRINK_TIME)
        .with_max_len(16 * 1024)
        .for_each(|(limit, frames, tail)| {
            let max = LIMITS[usize::from(*limit) % LIMITS.len()];
            let mut bytes = Vec::new();
            for f in frames.iter().take(8) {
                f.encode(&mut bytes);
            }
            bytes.extend_from_slice(tail);
            check_socket(bytes, max);
        });
}

/// Raw bytes as the server's stream.
#[test]
fn frame_websocket_raw() {
    check!()
        .with_type::<(u8, Vec<u8>)>()
        .with_test_time(CI_BUDGET / 2)
        .with_shrink_time(SHRINK_TIME)
        .for_each(|(limit, bytes)| {
            let max = LIMITS[usize::from(*limit) % LIMITS.len()];
            check_socket(bytes.clone(), max);
        });
}
