//! One connection's packet framing under the broker's limits.
//!
//! Before, a client could announce a 16 MiB PUBLISH, send 15 MiB and stop: the bytes stayed
//! buffered for good (40 such connections held 630 MB). Now:
//! - a packet whose fixed header announces more than `maxPacketBytes` (whole packet) closes
//!   the connection before its body is read;
//! - a packet that started arriving must be complete within `packetTimeoutMs`, or the
//!   connection is closed and its buffer freed;
//! - a packet over 64 KiB first takes its size from a budget shared by all connections
//!   (`maxPendingBytes`), waiting (not reading) within the same deadline when it is spent, so
//!   many half-sent packets together cannot exceed it; its buffer is allocated at its exact
//!   size and dropped once the packet is parsed.

use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use rumqttc::Packet;
use rumqttc::mqttbytes::Error as CodecError;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

/// Packets larger than this take their bytes from the shared budget; buffers grown past it are
/// released once empty.
const LARGE: usize = 64 * 1024;

/// Largest CONNECT accepted (client id, credentials and will included).
pub(crate) const MAX_CONNECT: usize = LARGE;

/// Why a connection ended abnormally.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ConnError {
    #[error("socket: {0}")]
    Io(#[from] std::io::Error),
    #[error("malformed packet: {0}")]
    Codec(CodecError),
    #[error("packet of {0} bytes over the limit (wedge.broker.maxPacketBytes)")]
    TooLarge(usize),
    #[error("packet not complete in time (wedge.broker.packetTimeoutMs)")]
    PacketTimeout,
    #[error("silent past keep-alive (or wedge.broker.idleTimeoutSeconds)")]
    Idle,
    #[error("protocol violation: {0}")]
    Protocol(&'static str),
    #[error("closed by the client")]
    Eof,
    #[error("stopped reading: a write stalled past the slow-reader deadline")]
    SlowReader,
}

/// A client's byte stream: a TCP socket, or TLS over one.
pub(crate) trait Transport: AsyncRead + AsyncWrite + Unpin + Send {}

impl<T: AsyncRead + AsyncWrite + Unpin + Send> Transport for T {}

/// The framing limits every connection shares.
#[derive(Debug)]
pub(crate) struct WireLimits {
    /// Largest whole packet read or written.
    pub max_packet: usize,
    /// Time a started packet has to arrive whole.
    pub packet_timeout: Duration,
    /// Bytes of large partial packets all connections may hold (one permit per byte).
    pub pending: Arc<Semaphore>,
}

/// A connection's socket with its read and write buffers.
pub(crate) struct Wire {
    stream: Box<dyn Transport>,
    read_buf: BytesMut,
    write_buf: BytesMut,
    limits: Arc<WireLimits>,
    /// When the packet being received must be complete.
    deadline: Option<Instant>,
    /// Budget held for the large packet being received.
    held: Option<OwnedSemaphorePermit>,
}

impl Wire {
    /// Wraps an accepted (and, on the TLS listener, handshaken) socket.
    pub fn new(stream: Box<dyn Transport>, limits: Arc<WireLimits>) -> Wire {
        Wire {
            stream,
            read_buf: BytesMut::with_capacity(4096),
            write_buf: BytesMut::with_capacity(4096),
            limits,
            deadline: None,
            held: None,
        }
    }

    /// The largest whole packet allowed.
    pub fn max_packet(&self) -> usize {
        self.limits.max_packet
    }

    /// The first packet (CONNECT), at most [`MAX_CONNECT`] bytes: a client that has not
    /// logged in never takes from the shared budget.
    pub async fn read_first_packet(&mut self) -> Result<Packet, ConnError> {
        self.read_limited(self.limits.max_packet.min(MAX_CONNECT))
            .await
    }

    /// The next packet. Cancel-safe: partial input, its deadline and its budget stay with the
    /// wire.
    pub async fn read_packet(&mut self) -> Result<Packet, ConnError> {
        self.read_limited(self.limits.max_packet).await
    }

    async fn read_limited(&mut self, max: usize) -> Result<Packet, ConnError> {
        loop {
            match rumqttc::check(self.read_buf.iter(), max) {
                Ok(header) if header.frame_length() > max => {
                    return Err(ConnError::TooLarge(header.frame_length()));
                }
                Ok(_) => {
                    let packet = Packet::read(&mut self.read_buf, max).map_err(ConnError::Codec)?;
                    self.packet_done();
                    return Ok(packet);
                }
                Err(CodecError::InsufficientBytes(_)) => {}
                Err(CodecError::PayloadSizeLimitExceeded(n)) => return Err(ConnError::TooLarge(n)),
                Err(e) => return Err(ConnError::Codec(e)),
            }
            if !self.read_buf.is_empty() && self.deadline.is_none() {
                self.deadline = Some(Instant::now() + self.limits.packet_timeout);
            }
            match frame_length(&self.read_buf) {
                Some(frame) if frame > LARGE => {
                    if frame > max {
                        return Err(ConnError::TooLarge(frame));
                    }
                    self.hold_budget(frame).await?;
                }
                _ => {
                    if self.read_buf.capacity() - self.read_buf.len() < 1024 {
                        self.read_buf.reserve(4096);
                    }
                }
            }
            let read = self.stream.read_buf(&mut self.read_buf);
            let n = match self.deadline {
                Some(deadline) => tokio::time::timeout_at(deadline, read)
                    .await
                    .map_err(|_| ConnError::PacketTimeout)??,
                None => read.await?,
            };
            if n == 0 {
                return Err(ConnError::Eof);
            }
        }
    }

    /// Takes `frame` bytes of the shared budget (once per packet) and sizes the buffer to it.
    async fn hold_budget(&mut self, frame: usize) -> Result<(), ConnError> {
        if self.held.is_some() {
            return Ok(());
        }
        let permits = u32::try_from(frame).map_err(|_| ConnError::TooLarge(frame))?;
        let acquire = self.limits.pending.clone().acquire_many_owned(permits);
        let permit = match self.deadline {
            Some(deadline) => tokio::time::timeout_at(deadline, acquire)
                .await
                .map_err(|_| ConnError::PacketTimeout)?,
            None => acquire.await,
        }
        .map_err(|_| ConnError::Protocol("broker stopping"))?;
        self.held = Some(permit);
        if self.read_buf.capacity() < frame {
            let mut exact = BytesMut::with_capacity(frame);
            exact.extend_from_slice(&self.read_buf);
            self.read_buf = exact;
        }
        Ok(())
    }

    /// A whole packet was taken: its deadline and budget end, a grown buffer is let go.
    fn packet_done(&mut self) {
        self.deadline = None;
        self.held = None;
        if self.read_buf.is_empty() && self.read_buf.capacity() > LARGE {
            self.read_buf = BytesMut::with_capacity(4096);
        }
    }

    /// Writes one packet (refused by the codec when over the packet limit).
    pub async fn write_packet(&mut self, packet: Packet) -> Result<(), ConnError> {
        self.write_buf.clear();
        packet
            .write(&mut self.write_buf, self.limits.max_packet)
            .map_err(ConnError::Codec)?;
        self.stream.write_all(&self.write_buf).await?;
        // A no-op on TCP; over TLS it pushes out records the session still holds, which would
        // otherwise wait for the next write when the socket was full.
        self.stream.flush().await?;
        if self.write_buf.capacity() > LARGE {
            self.write_buf = BytesMut::with_capacity(4096);
        }
        Ok(())
    }
}

/// The whole length of the packet starting `buf`, once its fixed header has arrived.
fn frame_length(buf: &[u8]) -> Option<usize> {
    let mut remaining = 0usize;
    for (i, byte) in buf.iter().skip(1).take(4).enumerate() {
        remaining |= usize::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            return Some(1 + (i + 1) + remaining);
        }
    }
    None
}

/// Size of a PUBLISH of `topic_len` + `payload_len` bytes as a QoS 1 subscriber receives it
/// (with its packet id): what must fit the packet limit for the message to be deliverable.
pub(crate) fn delivered_size(topic_len: usize, payload_len: usize) -> usize {
    let remaining = 2 + topic_len + 2 + payload_len;
    let len_len = match remaining {
        0..=127 => 1,
        128..=16_383 => 2,
        16_384..=2_097_151 => 3,
        _ => 4,
    };
    1 + len_len + remaining
}

#[cfg(test)]
mod tests {
    use super::*;
    use rumqttc::{Publish, QoS};

    #[test]
    fn frame_length_from_the_fixed_header() {
        assert_eq!(frame_length(&[0x30]), None);
        assert_eq!(frame_length(&[0x30, 0x05]), Some(7));
        assert_eq!(frame_length(&[0x30, 0x80]), None);
        assert_eq!(frame_length(&[0x30, 0x80, 0x01]), Some(1 + 2 + 128));
        assert_eq!(
            frame_length(&[0x30, 0xfc, 0xff, 0xff, 0x07]),
            Some(1 + 4 + 16 * 1024 * 1024 - 4)
        );
    }

    #[test]
    fn delivered_size_counts_the_packet_id() {
        for payload in [0usize, 100, 16_000, 2_000_000, 16 * 1024 * 1024 - 4] {
            let mut p = Publish::new("a/b/c", QoS::AtLeastOnce, vec![0u8; payload]);
            p.pkid = 7;
            assert_eq!(delivered_size(5, payload), p.size(), "payload {payload}");
        }
    }
}
