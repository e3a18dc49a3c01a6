//! The tunnel's message: what one WebSocket message between CloudCore's cloudstream and the
//! edge carries.
//!
//! Layout (KubeEdge v1.23.1 `pkg/stream`): the connection id as an unsigned LEB128 varint (Go's
//! `binary.PutUvarint`), the message type as another, then the payload, to the end of the
//! WebSocket message. No length field: the WebSocket message delimits it. Both ends send it in
//! *text* frames even though the bytes are not UTF-8 (a varint of 128 or more, exec's binary
//! streams); CloudCore closes a session whose frame is of any other type.
//!
//! CloudCore reads at most 1 MiB of payload ([`MAX_DATA`]) and silently drops the rest, so
//! nothing the edge sends may be longer.

use bytes::{BufMut, Bytes, BytesMut};

/// The most payload CloudCore reads from one message (KubeEdge's `MaxRespBodyLength`, 1 MiB);
/// the edge never sends more in one message.
pub const MAX_DATA: usize = 1 << 20;

/// The longest a varint of a `u64` is.
const MAX_VARINT: usize = 10;

/// The longest encoded message: two varints and [`MAX_DATA`].
pub const MAX_ENCODED: usize = MAX_DATA + 2 * MAX_VARINT;

/// What a message is about. The numbers are KubeEdge's (`iota` order in `pkg/stream`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MessageType {
    /// 0: cloud → edge, open a `GET /containerLogs/...` to the kubelet; the payload is the
    /// request as JSON (see `connect.rs`).
    LogsConnect,
    /// 1: cloud → edge, open an upgraded `/exec/...` connection to the kubelet.
    ExecConnect,
    /// 2: cloud → edge, open a `GET /stats/...` or `/metrics/...` to the kubelet.
    MetricConnect,
    /// 3: either way, bytes of one connection.
    Data,
    /// 4: either way, the sender is done with the connection: the cloud when the apiserver's
    /// request ended, the edge when the kubelet's answer ended (edgecore sends it however its
    /// side of the connection ended).
    RemoveConnect,
    /// 5: cloud → edge, connection id 0: the cloud refuses the tunnel (the payload says why,
    /// e.g. it could not record the node's kubelet port); the edge drops it and dials again.
    CloseConnect,
    /// 6: cloud → edge, open an upgraded `/attach/...` connection to the kubelet.
    AttachConnect,
    /// Any other number: not KubeEdge v1.23's (edgecore panics on one; we log and ignore it).
    Unknown(u64),
}

impl MessageType {
    /// The type's number on the wire.
    pub fn code(self) -> u64 {
        match self {
            MessageType::LogsConnect => 0,
            MessageType::ExecConnect => 1,
            MessageType::MetricConnect => 2,
            MessageType::Data => 3,
            MessageType::RemoveConnect => 4,
            MessageType::CloseConnect => 5,
            MessageType::AttachConnect => 6,
            MessageType::Unknown(n) => n,
        }
    }

    /// The type a number stands for.
    pub fn from_code(code: u64) -> MessageType {
        match code {
            0 => MessageType::LogsConnect,
            1 => MessageType::ExecConnect,
            2 => MessageType::MetricConnect,
            3 => MessageType::Data,
            4 => MessageType::RemoveConnect,
            5 => MessageType::CloseConnect,
            6 => MessageType::AttachConnect,
            n => MessageType::Unknown(n),
        }
    }

    /// KubeEdge's name of the type, for logs.
    pub fn name(self) -> &'static str {
        match self {
            MessageType::LogsConnect => "LOGS_CONNECT",
            MessageType::ExecConnect => "EXEC_CONNECT",
            MessageType::MetricConnect => "METRIC_CONNECT",
            MessageType::Data => "DATA",
            MessageType::RemoveConnect => "REMOVE_CONNECT",
            MessageType::CloseConnect => "CLOSE_CONNECT",
            MessageType::AttachConnect => "ATTACH_CONNECT",
            MessageType::Unknown(_) => "UNKNOWN",
        }
    }
}

/// One tunnel message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TunnelMessage {
    /// The apiserver connection it belongs to (CloudCore numbers them from 1, per CloudCore
    /// process; 0 for [`MessageType::CloseConnect`]).
    pub connect_id: u64,
    /// What it is.
    pub kind: MessageType,
    /// Its payload.
    pub data: Bytes,
}

/// Why bytes are not a tunnel message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// The message ends inside a varint.
    #[error("message ends inside its {0} varint")]
    Truncated(&'static str),
    /// A varint is longer than a `u64` allows.
    #[error("{0} varint overflows 64 bits")]
    Overflow(&'static str),
}

impl TunnelMessage {
    /// A message of `kind` for connection `connect_id`.
    pub fn new(connect_id: u64, kind: MessageType, data: impl Into<Bytes>) -> TunnelMessage {
        TunnelMessage {
            connect_id,
            kind,
            data: data.into(),
        }
    }

    /// The edge is done with connection `connect_id`.
    pub fn remove(connect_id: u64) -> TunnelMessage {
        TunnelMessage::new(connect_id, MessageType::RemoveConnect, Bytes::new())
    }

    /// The bytes on the wire (the payload of one WebSocket text message).
    pub fn encode(&self) -> Bytes {
        let mut out = BytesMut::with_capacity(2 * MAX_VARINT + self.data.len());
        put_uvarint(&mut out, self.connect_id);
        put_uvarint(&mut out, self.kind.code());
        out.put_slice(&self.data);
        out.freeze()
    }

    /// Reads a message from the payload of one WebSocket message. Like CloudCore, payload past
    /// [`MAX_DATA`] is dropped (the caller bounds what it buffers well before that).
    pub fn decode(mut bytes: Bytes) -> Result<TunnelMessage, DecodeError> {
        let connect_id = take_uvarint(&mut bytes, "connection id")?;
        let kind = MessageType::from_code(take_uvarint(&mut bytes, "message type")?);
        bytes.truncate(MAX_DATA);
        Ok(TunnelMessage {
            connect_id,
            kind,
            data: bytes,
        })
    }
}

impl std::fmt::Display for TunnelMessage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} of connection {} ({} bytes)",
            self.kind.name(),
            self.connect_id,
            self.data.len()
        )
    }
}

/// Appends `value` as an unsigned LEB128 varint: 7 bits per byte, least significant first,
/// the high bit set on every byte but the last (Go's `binary.PutUvarint`).
fn put_uvarint(out: &mut BytesMut, mut value: u64) {
    while value >= 0x80 {
        out.put_u8((value as u8) | 0x80);
        value >>= 7;
    }
    out.put_u8(value as u8);
}

/// Takes an unsigned varint off the front of `bytes`.
fn take_uvarint(bytes: &mut Bytes, what: &'static str) -> Result<u64, DecodeError> {
    let mut value = 0u64;
    for (i, &b) in bytes.iter().enumerate() {
        // The tenth byte may only carry the 64th bit (Go's `ReadUvarint` rule); a varint
        // cannot be longer, so the loop ends by then.
        if i == MAX_VARINT - 1 && b > 1 {
            return Err(DecodeError::Overflow(what));
        }
        value |= u64::from(b & 0x7f) << (7 * i);
        if b < 0x80 {
            let _ = bytes.split_to(i + 1);
            return Ok(value);
        }
    }
    Err(DecodeError::Truncated(what))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(id: u64, kind: MessageType, data: &'static [u8]) -> TunnelMessage {
        TunnelMessage::new(id, kind, Bytes::from_static(data))
    }

    /// Byte layouts as Go's `binary.PutUvarint` writes them for KubeEdge's `Message.Bytes()`.
    #[test]
    fn encodes_as_kubeedge() {
        // A REMOVE_CONNECT of connection 1: two one-byte varints, no payload.
        assert_eq!(&TunnelMessage::remove(1).encode()[..], &[0x01, 0x04][..]);
        // DATA of connection 300: 300 = 0b10_0101100 -> 0xAC 0x02.
        assert_eq!(
            &msg(300, MessageType::Data, b"hi\n").encode()[..],
            &[0xAC, 0x02, 0x03, b'h', b'i', b'\n'][..]
        );
        // The largest id takes ten bytes, the last one 0x01.
        let big = msg(u64::MAX, MessageType::AttachConnect, b"").encode();
        assert_eq!(big.len(), 11);
        assert_eq!(
            &big[..],
            &[
                0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01, 0x06
            ][..]
        );
    }

    #[test]
    fn decodes_what_cloudcore_sends() {
        // A LOGS_CONNECT of connection 128 (0x80 0x01: not UTF-8, though sent as text).
        let m = TunnelMessage::decode(Bytes::from_static(b"\x80\x01\x00{\"MessID\":128}")).unwrap();
        assert_eq!(m, msg(128, MessageType::LogsConnect, b"{\"MessID\":128}"));
        // CloudCore's refusal of a tunnel: CLOSE_CONNECT on connection 0 with the reason.
        let m = TunnelMessage::decode(Bytes::from_static(
            b"\x00\x05failed to Update KubeletEndpoint Port",
        ))
        .unwrap();
        assert_eq!(m.kind, MessageType::CloseConnect);
        assert_eq!(m.connect_id, 0);
        assert_eq!(&m.data[..], b"failed to Update KubeletEndpoint Port");
        assert_eq!(
            TunnelMessage::decode(Bytes::from_static(b"\x07\x09"))
                .unwrap()
                .kind,
            MessageType::Unknown(9)
        );
    }

    #[test]
    fn round_trips() {
        for id in [
            0,
            1,
            127,
            128,
            16_383,
            16_384,
            u64::from(u32::MAX),
            u64::MAX,
        ] {
            for code in 0..8 {
                let m = TunnelMessage::new(id, MessageType::from_code(code), vec![0xff, 0, 1]);
                assert_eq!(TunnelMessage::decode(m.encode()).unwrap(), m);
            }
        }
    }

    #[test]
    fn refuses_broken_varints() {
        assert_eq!(
            TunnelMessage::decode(Bytes::new()),
            Err(DecodeError::Truncated("connection id"))
        );
        assert_eq!(
            TunnelMessage::decode(Bytes::from_static(b"\x05\x80")),
            Err(DecodeError::Truncated("message type"))
        );
        assert_eq!(
            TunnelMessage::decode(Bytes::from_static(&[0xff; 11])),
            Err(DecodeError::Overflow("connection id"))
        );
        assert_eq!(
            TunnelMessage::decode(Bytes::from_static(&[
                0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02, 0x03
            ])),
            Err(DecodeError::Overflow("connection id"))
        );
    }

    #[test]
    fn payload_past_a_mebibyte_is_dropped_as_cloudcore_does() {
        let mut raw = vec![0x01, 0x03];
        raw.resize(2 + MAX_DATA + 10, b'x');
        let m = TunnelMessage::decode(Bytes::from(raw)).unwrap();
        assert_eq!(m.data.len(), MAX_DATA);
    }
}
