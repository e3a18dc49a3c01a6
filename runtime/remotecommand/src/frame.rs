//! SPDY/3 framing: the frame types, their wire encoding and the zlib-compressed header blocks.
//!
//! This module is public only so that tests (and the integration test's minimal client) can
//! reuse it; it is not part of the supported API.
//!
//! Wire format (SPDY/3 draft, as spoken by Go's `moby/spdystream/spdy`):
//!
//! * control frame: `1 | version:15 | type:16`, `flags:8 | length:24`, then `length` bytes;
//! * data frame: `0 | stream-id:31`, `flags:8 | length:24`, then `length` bytes.
//!
//! SYN_STREAM, SYN_REPLY and HEADERS carry a header block (`count:32`, then per entry
//! `name-length:32 name value-length:32 value`, several values separated by NUL) compressed with
//! zlib. Each direction of a connection is one continuous zlib stream primed with the SPDY/3
//! dictionary, sync-flushed at the end of every block.

use bytes::{Buf, BufMut, Bytes, BytesMut};
use flate2::{Compress, Compression, Decompress, FlushCompress, FlushDecompress, Status};

use crate::dictionary::HEADER_DICTIONARY;

/// The SPDY version this module speaks.
pub const VERSION: u16 = 3;

/// Control frame type: SYN_STREAM (the peer opens a stream).
pub const TYPE_SYN_STREAM: u16 = 1;
/// Control frame type: SYN_REPLY (the receiver accepts a stream).
pub const TYPE_SYN_REPLY: u16 = 2;
/// Control frame type: RST_STREAM (abnormal termination of a stream).
pub const TYPE_RST_STREAM: u16 = 3;
/// Control frame type: SETTINGS.
pub const TYPE_SETTINGS: u16 = 4;
/// Control frame type: PING.
pub const TYPE_PING: u16 = 6;
/// Control frame type: GOAWAY (the sender will accept no new streams).
pub const TYPE_GOAWAY: u16 = 7;
/// Control frame type: HEADERS (more headers for an open stream).
pub const TYPE_HEADERS: u16 = 8;
/// Control frame type: WINDOW_UPDATE (flow control; spdystream ignores it, and so do we).
pub const TYPE_WINDOW_UPDATE: u16 = 9;

/// Flag FIN: the sender's half of the stream is closed after this frame.
pub const FLAG_FIN: u8 = 0x01;
/// Flag UNIDIRECTIONAL on SYN_STREAM: the receiver must not send on the stream.
pub const FLAG_UNIDIRECTIONAL: u8 = 0x02;

/// RST_STREAM status PROTOCOL_ERROR.
pub const RST_PROTOCOL_ERROR: u32 = 1;
/// RST_STREAM status INVALID_STREAM.
pub const RST_INVALID_STREAM: u32 = 2;
/// RST_STREAM status REFUSED_STREAM.
pub const RST_REFUSED_STREAM: u32 = 3;
/// RST_STREAM status CANCEL.
pub const RST_CANCEL: u32 = 5;

/// GOAWAY status OK.
pub const GOAWAY_OK: u32 = 0;
/// GOAWAY status PROTOCOL_ERROR.
pub const GOAWAY_PROTOCOL_ERROR: u32 = 1;

/// Largest stream id (31 bits).
pub const MAX_STREAM_ID: u32 = 0x7fff_ffff;
/// Largest payload the 24-bit length field can describe.
pub const MAX_FRAME_PAYLOAD: usize = (1 << 24) - 1;

/// Size of the common frame header.
const FRAME_HEADER_LEN: usize = 8;

/// Limits applied to what the peer sends, so that a hostile or broken peer cannot make us buffer
/// without bound.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Largest data frame payload accepted.
    pub max_data_payload: usize,
    /// Largest control frame payload accepted (this bounds compressed header blocks).
    pub max_control_payload: usize,
    /// Largest decompressed header block accepted.
    pub max_header_block: usize,
    /// Most header entries accepted in one block.
    pub max_header_entries: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_data_payload: 1 << 20,
            max_control_payload: 64 * 1024,
            max_header_block: 64 * 1024,
            max_header_entries: 128,
        }
    }
}

/// A malformed frame, a limit exceeded, or a header compression failure.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    /// A control frame of another SPDY version.
    #[error("unsupported SPDY version {0} (expected 3)")]
    UnsupportedVersion(u16),
    /// A frame longer than the limit for its kind.
    #[error("{kind} frame of {len} bytes exceeds the limit of {max} bytes")]
    TooLarge {
        /// The frame kind.
        kind: &'static str,
        /// The announced payload length.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// A frame whose length does not fit its type.
    #[error("{kind} frame with invalid length {len}")]
    BadLength {
        /// The frame kind.
        kind: &'static str,
        /// The announced payload length.
        len: usize,
    },
    /// A frame that must name a stream but names stream 0.
    #[error("{kind} frame with stream id 0")]
    ZeroStreamId {
        /// The frame kind.
        kind: &'static str,
    },
    /// A decompressed header block that does not parse.
    #[error("invalid header block: {0}")]
    HeaderBlock(&'static str),
    /// A header block that decompresses to more than the limit.
    #[error("header block decompresses to more than {max} bytes")]
    HeaderBlockTooLarge {
        /// The limit.
        max: usize,
    },
    /// The zlib stream of the header blocks is broken.
    #[error("header compression: {0}")]
    Compression(String),
    /// A frame we were asked to encode cannot be represented.
    #[error("cannot encode frame: {0}")]
    Encode(&'static str),
}

/// The headers of a SYN_STREAM, SYN_REPLY or HEADERS frame, in order; names are lower case.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HeaderBlock {
    entries: Vec<(String, Vec<String>)>,
}

impl HeaderBlock {
    /// An empty block.
    pub fn new() -> Self {
        HeaderBlock::default()
    }

    /// Adds a value to `name` (lower-cased), after any existing ones.
    pub fn add(&mut self, name: &str, value: &str) {
        let name = name.to_ascii_lowercase();
        match self.entries.iter_mut().find(|(n, _)| *n == name) {
            Some((_, values)) => values.push(value.to_owned()),
            None => self.entries.push((name, vec![value.to_owned()])),
        }
    }

    /// Builder form of [`HeaderBlock::add`].
    pub fn with(mut self, name: &str, value: &str) -> Self {
        self.add(name, value);
        self
    }

    /// The first value of `name` (case-insensitive), if any.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.entries
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .and_then(|(_, values)| values.first())
            .map(String::as_str)
    }

    /// All values of `name` (case-insensitive).
    pub fn get_all(&self, name: &str) -> &[String] {
        self.entries
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, values)| values.as_slice())
            .unwrap_or(&[])
    }

    /// Number of distinct names.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether the block has no entries.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The uncompressed wire form.
    fn to_raw(&self) -> Result<Vec<u8>, FrameError> {
        let mut raw = Vec::new();
        raw.put_u32(wire_len(self.entries.len())?);
        for (name, values) in &self.entries {
            raw.put_u32(wire_len(name.len())?);
            raw.extend_from_slice(name.as_bytes());
            let joined = values.join("\0");
            raw.put_u32(wire_len(joined.len())?);
            raw.extend_from_slice(joined.as_bytes());
        }
        Ok(raw)
    }

    /// Parses the uncompressed wire form. Names are lower-cased (Go's reader does the same) and
    /// repeated names merged.
    fn from_raw(mut raw: &[u8], max_entries: usize) -> Result<HeaderBlock, FrameError> {
        if raw.len() < 4 {
            return Err(FrameError::HeaderBlock("truncated entry count"));
        }
        let count = raw.get_u32() as usize;
        if count > max_entries {
            return Err(FrameError::HeaderBlock("too many entries"));
        }
        let mut block = HeaderBlock::new();
        for _ in 0..count {
            let name = take_string(&mut raw)?;
            let value = take_string(&mut raw)?;
            for v in value.split('\0') {
                block.add(&name, v);
            }
        }
        if !raw.is_empty() {
            return Err(FrameError::HeaderBlock(
                "trailing bytes after the last entry",
            ));
        }
        Ok(block)
    }
}

fn wire_len(len: usize) -> Result<u32, FrameError> {
    u32::try_from(len).map_err(|_| FrameError::Encode("header too long"))
}

fn take_string(raw: &mut &[u8]) -> Result<String, FrameError> {
    if raw.len() < 4 {
        return Err(FrameError::HeaderBlock("truncated length"));
    }
    let len = raw.get_u32() as usize;
    if raw.len() < len {
        return Err(FrameError::HeaderBlock("length past the end of the block"));
    }
    let (bytes, rest) = raw.split_at(len);
    *raw = rest;
    String::from_utf8(bytes.to_vec()).map_err(|_| FrameError::HeaderBlock("header is not UTF-8"))
}

/// One SPDY/3 frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Frame {
    /// The sender opens stream `stream_id`.
    SynStream {
        /// The new stream.
        stream_id: u32,
        /// The stream this one is associated to (0: none).
        associated_to: u32,
        /// Priority, 0 (highest) to 7.
        priority: u8,
        /// Control flags (FIN, UNIDIRECTIONAL).
        flags: u8,
        /// The stream's headers.
        headers: HeaderBlock,
    },
    /// The receiver of a SYN_STREAM accepts the stream.
    SynReply {
        /// The stream.
        stream_id: u32,
        /// Control flags (FIN).
        flags: u8,
        /// Reply headers.
        headers: HeaderBlock,
    },
    /// Abnormal termination of a stream.
    RstStream {
        /// The stream.
        stream_id: u32,
        /// The RST status code.
        status: u32,
    },
    /// Settings (ignored by this crate).
    Settings {
        /// The flags byte of the frame.
        flags: u8,
        /// `(flags, id, value)` triples.
        entries: Vec<(u8, u32, u32)>,
    },
    /// A ping, to be echoed by the receiver when the id has the sender's parity.
    Ping {
        /// The ping id (odd from clients, even from servers).
        id: u32,
    },
    /// The sender accepts no new streams.
    GoAway {
        /// Last stream the sender accepted.
        last_good_stream_id: u32,
        /// GOAWAY status code.
        status: u32,
    },
    /// More headers for a stream.
    Headers {
        /// The stream.
        stream_id: u32,
        /// Control flags (FIN).
        flags: u8,
        /// The headers.
        headers: HeaderBlock,
    },
    /// Flow control window update.
    WindowUpdate {
        /// The stream.
        stream_id: u32,
        /// The window increment.
        delta: u32,
    },
    /// Stream payload.
    Data {
        /// The stream.
        stream_id: u32,
        /// Data flags (FIN).
        flags: u8,
        /// The payload.
        data: Bytes,
    },
    /// A control frame of a type this module does not know; it is skipped.
    Unknown {
        /// The control frame type.
        frame_type: u16,
    },
}

impl Frame {
    /// Whether the frame carries the FIN flag.
    pub fn is_fin(&self) -> bool {
        match self {
            Frame::SynStream { flags, .. }
            | Frame::SynReply { flags, .. }
            | Frame::Headers { flags, .. }
            | Frame::Data { flags, .. } => flags & FLAG_FIN != 0,
            _ => false,
        }
    }
}

/// Writes frames, compressing header blocks with this direction's zlib stream.
pub struct FrameEncoder {
    deflate: Compress,
}

impl std::fmt::Debug for FrameEncoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FrameEncoder").finish_non_exhaustive()
    }
}

impl FrameEncoder {
    /// A fresh encoder: its zlib stream starts with the SPDY/3 dictionary, as Go's framer does.
    pub fn new() -> Result<FrameEncoder, FrameError> {
        let mut deflate = Compress::new(Compression::best(), true);
        deflate
            .set_dictionary(&HEADER_DICTIONARY)
            .map_err(|e| FrameError::Compression(e.to_string()))?;
        Ok(FrameEncoder { deflate })
    }

    /// Appends the wire form of `frame` to `out`.
    pub fn encode(&mut self, frame: &Frame, out: &mut BytesMut) -> Result<(), FrameError> {
        match frame {
            Frame::SynStream {
                stream_id,
                associated_to,
                priority,
                flags,
                headers,
            } => {
                check_stream_id(*stream_id, "SYN_STREAM")?;
                let block = self.compress(headers)?;
                control_header(out, TYPE_SYN_STREAM, *flags, 10 + block.len())?;
                out.put_u32(*stream_id);
                out.put_u32(*associated_to & MAX_STREAM_ID);
                out.put_u8((priority & 0x07) << 5);
                out.put_u8(0);
                out.extend_from_slice(&block);
            }
            Frame::SynReply {
                stream_id,
                flags,
                headers,
            } => {
                check_stream_id(*stream_id, "SYN_REPLY")?;
                let block = self.compress(headers)?;
                control_header(out, TYPE_SYN_REPLY, *flags, 4 + block.len())?;
                out.put_u32(*stream_id);
                out.extend_from_slice(&block);
            }
            Frame::Headers {
                stream_id,
                flags,
                headers,
            } => {
                check_stream_id(*stream_id, "HEADERS")?;
                let block = self.compress(headers)?;
                control_header(out, TYPE_HEADERS, *flags, 4 + block.len())?;
                out.put_u32(*stream_id);
                out.extend_from_slice(&block);
            }
            Frame::RstStream { stream_id, status } => {
                check_stream_id(*stream_id, "RST_STREAM")?;
                if *status == 0 {
                    return Err(FrameError::Encode("RST_STREAM status 0"));
                }
                control_header(out, TYPE_RST_STREAM, 0, 8)?;
                out.put_u32(*stream_id);
                out.put_u32(*status);
            }
            Frame::Settings { flags, entries } => {
                control_header(out, TYPE_SETTINGS, *flags, 4 + 8 * entries.len())?;
                out.put_u32(wire_len(entries.len())?);
                for (flag, id, value) in entries {
                    out.put_u32(u32::from(*flag) << 24 | (id & 0x00ff_ffff));
                    out.put_u32(*value);
                }
            }
            Frame::Ping { id } => {
                if *id == 0 {
                    return Err(FrameError::Encode("PING id 0"));
                }
                control_header(out, TYPE_PING, 0, 4)?;
                out.put_u32(*id);
            }
            Frame::GoAway {
                last_good_stream_id,
                status,
            } => {
                control_header(out, TYPE_GOAWAY, 0, 8)?;
                out.put_u32(last_good_stream_id & MAX_STREAM_ID);
                out.put_u32(*status);
            }
            Frame::WindowUpdate { stream_id, delta } => {
                control_header(out, TYPE_WINDOW_UPDATE, 0, 8)?;
                out.put_u32(stream_id & MAX_STREAM_ID);
                out.put_u32(delta & 0x7fff_ffff);
            }
            Frame::Data {
                stream_id,
                flags,
                data,
            } => {
                check_stream_id(*stream_id, "DATA")?;
                if data.len() > MAX_FRAME_PAYLOAD {
                    return Err(FrameError::Encode("data frame longer than 2^24-1 bytes"));
                }
                out.reserve(FRAME_HEADER_LEN + data.len());
                out.put_u32(*stream_id);
                out.put_u32(u32::from(*flags) << 24 | data.len() as u32);
                out.extend_from_slice(data);
            }
            Frame::Unknown { .. } => return Err(FrameError::Encode("unknown frame type")),
        }
        Ok(())
    }

    /// Compresses one header block into the continuous stream, ending with a sync flush so the
    /// peer can decode it from this frame alone.
    fn compress(&mut self, headers: &HeaderBlock) -> Result<Vec<u8>, FrameError> {
        let raw = headers.to_raw()?;
        let mut out = Vec::with_capacity(raw.len() + 64);
        let start = self.deflate.total_in();
        loop {
            if out.len() == out.capacity() {
                out.reserve(256);
            }
            let consumed = (self.deflate.total_in() - start) as usize;
            let input = raw.get(consumed..).unwrap_or(&[]);
            self.deflate
                .compress_vec(input, &mut out, FlushCompress::Sync)
                .map_err(|e| FrameError::Compression(e.to_string()))?;
            let consumed = (self.deflate.total_in() - start) as usize;
            // zlib's contract: a sync flush is complete once a call leaves output space unused.
            if consumed >= raw.len() && out.len() < out.capacity() {
                break;
            }
        }
        if out.len() > MAX_FRAME_PAYLOAD - 10 {
            return Err(FrameError::Encode("header block too large"));
        }
        Ok(out)
    }
}

fn check_stream_id(stream_id: u32, kind: &'static str) -> Result<(), FrameError> {
    if stream_id == 0 {
        return Err(FrameError::ZeroStreamId { kind });
    }
    if stream_id > MAX_STREAM_ID {
        return Err(FrameError::Encode("stream id above 2^31-1"));
    }
    Ok(())
}

fn control_header(
    out: &mut BytesMut,
    frame_type: u16,
    flags: u8,
    len: usize,
) -> Result<(), FrameError> {
    if len > MAX_FRAME_PAYLOAD {
        return Err(FrameError::Encode("control frame longer than 2^24-1 bytes"));
    }
    out.reserve(FRAME_HEADER_LEN + len);
    out.put_u16(0x8000 | VERSION);
    out.put_u16(frame_type);
    out.put_u32(u32::from(flags) << 24 | len as u32);
    Ok(())
}

/// Reads frames from a byte buffer, inflating header blocks with the peer's zlib stream.
pub struct FrameDecoder {
    inflate: Decompress,
    limits: Limits,
}

impl std::fmt::Debug for FrameDecoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FrameDecoder")
            .field("limits", &self.limits)
            .finish_non_exhaustive()
    }
}

impl FrameDecoder {
    /// A fresh decoder for one connection direction.
    pub fn new(limits: Limits) -> FrameDecoder {
        FrameDecoder {
            inflate: Decompress::new(true),
            limits,
        }
    }

    /// Takes one complete frame off the front of `buf`; `Ok(None)` when `buf` does not hold a
    /// whole frame yet (nothing is consumed then). Limits are checked as soon as the frame
    /// header is there, before its payload is buffered.
    pub fn decode(&mut self, buf: &mut BytesMut) -> Result<Option<Frame>, FrameError> {
        if buf.len() < FRAME_HEADER_LEN {
            return Ok(None);
        }
        let first = u32::from_be_bytes([buf[0], buf[1], buf[2], buf[3]]);
        let flags = buf[4];
        let len = u32::from_be_bytes([0, buf[5], buf[6], buf[7]]) as usize;
        let control = first & 0x8000_0000 != 0;
        let (kind, max) = if control {
            ("control", self.limits.max_control_payload)
        } else {
            ("data", self.limits.max_data_payload)
        };
        if len > max {
            return Err(FrameError::TooLarge { kind, len, max });
        }
        if control {
            let version = ((first >> 16) & 0x7fff) as u16;
            if version != VERSION {
                return Err(FrameError::UnsupportedVersion(version));
            }
        }
        if buf.len() < FRAME_HEADER_LEN + len {
            buf.reserve(FRAME_HEADER_LEN + len - buf.len());
            return Ok(None);
        }
        buf.advance(FRAME_HEADER_LEN);
        let payload = buf.split_to(len).freeze();
        if control {
            self.control((first & 0xffff) as u16, flags, payload)
                .map(Some)
        } else {
            let stream_id = first & MAX_STREAM_ID;
            if stream_id == 0 {
                return Err(FrameError::ZeroStreamId { kind: "DATA" });
            }
            Ok(Some(Frame::Data {
                stream_id,
                flags,
                data: payload,
            }))
        }
    }

    fn control(&mut self, frame_type: u16, flags: u8, mut p: Bytes) -> Result<Frame, FrameError> {
        let len = p.len();
        let frame = match frame_type {
            TYPE_SYN_STREAM => {
                if len < 10 {
                    return Err(FrameError::BadLength {
                        kind: "SYN_STREAM",
                        len,
                    });
                }
                let stream_id = p.get_u32() & MAX_STREAM_ID;
                let associated_to = p.get_u32() & MAX_STREAM_ID;
                let priority = p.get_u8() >> 5;
                let _slot = p.get_u8();
                // Inflate before validating the id so the zlib stream stays in step.
                let headers = self.headers(&p)?;
                nonzero(stream_id, "SYN_STREAM")?;
                Frame::SynStream {
                    stream_id,
                    associated_to,
                    priority,
                    flags,
                    headers,
                }
            }
            TYPE_SYN_REPLY | TYPE_HEADERS => {
                let kind = if frame_type == TYPE_HEADERS {
                    "HEADERS"
                } else {
                    "SYN_REPLY"
                };
                if len < 4 {
                    return Err(FrameError::BadLength { kind, len });
                }
                let stream_id = p.get_u32() & MAX_STREAM_ID;
                let headers = self.headers(&p)?;
                nonzero(stream_id, kind)?;
                if frame_type == TYPE_HEADERS {
                    Frame::Headers {
                        stream_id,
                        flags,
                        headers,
                    }
                } else {
                    Frame::SynReply {
                        stream_id,
                        flags,
                        headers,
                    }
                }
            }
            TYPE_RST_STREAM => {
                exact(len, 8, "RST_STREAM")?;
                let stream_id = p.get_u32() & MAX_STREAM_ID;
                let status = p.get_u32();
                nonzero(stream_id, "RST_STREAM")?;
                Frame::RstStream { stream_id, status }
            }
            TYPE_SETTINGS => {
                if len < 4 {
                    return Err(FrameError::BadLength {
                        kind: "SETTINGS",
                        len,
                    });
                }
                let count = p.get_u32() as usize;
                if count.checked_mul(8) != Some(len - 4) {
                    return Err(FrameError::BadLength {
                        kind: "SETTINGS",
                        len,
                    });
                }
                let entries = (0..count)
                    .map(|_| {
                        let word = p.get_u32();
                        ((word >> 24) as u8, word & 0x00ff_ffff, p.get_u32())
                    })
                    .collect();
                Frame::Settings { flags, entries }
            }
            TYPE_PING => {
                exact(len, 4, "PING")?;
                Frame::Ping { id: p.get_u32() }
            }
            TYPE_GOAWAY => {
                exact(len, 8, "GOAWAY")?;
                Frame::GoAway {
                    last_good_stream_id: p.get_u32() & MAX_STREAM_ID,
                    status: p.get_u32(),
                }
            }
            TYPE_WINDOW_UPDATE => {
                exact(len, 8, "WINDOW_UPDATE")?;
                Frame::WindowUpdate {
                    stream_id: p.get_u32() & MAX_STREAM_ID,
                    delta: p.get_u32() & 0x7fff_ffff,
                }
            }
            other => Frame::Unknown { frame_type: other },
        };
        Ok(frame)
    }

    fn headers(&mut self, compressed: &[u8]) -> Result<HeaderBlock, FrameError> {
        let raw = self.inflate_block(compressed)?;
        HeaderBlock::from_raw(&raw, self.limits.max_header_entries)
    }

    /// Inflates one frame's worth of the peer's header stream; all of `input` must be consumed.
    fn inflate_block(&mut self, input: &[u8]) -> Result<Vec<u8>, FrameError> {
        let max = self.limits.max_header_block;
        let mut out: Vec<u8> =
            Vec::with_capacity(input.len().saturating_mul(4).max(64).min(max + 1));
        let mut pos = 0usize;
        loop {
            if out.len() == out.capacity() {
                if out.len() >= max {
                    return Err(FrameError::HeaderBlockTooLarge { max });
                }
                let room = (max + 1).saturating_sub(out.len());
                out.reserve(out.len().max(64).min(room).max(1));
            }
            let in_before = self.inflate.total_in();
            let out_before = out.len();
            let result = self.inflate.decompress_vec(
                input.get(pos..).unwrap_or(&[]),
                &mut out,
                FlushDecompress::Sync,
            );
            pos += (self.inflate.total_in() - in_before) as usize;
            match result {
                Ok(Status::StreamEnd) => {
                    return Err(FrameError::Compression(
                        "the peer ended its header zlib stream".into(),
                    ));
                }
                Ok(Status::Ok | Status::BufError) => {}
                Err(e) => match e.needs_dictionary() {
                    Some(_) => {
                        // The peer primed its stream with a dictionary: it must be SPDY's
                        // (zlib checks the Adler-32 the peer announced when we set it).
                        self.inflate
                            .set_dictionary(&HEADER_DICTIONARY)
                            .map_err(|e| FrameError::Compression(e.to_string()))?;
                        continue;
                    }
                    None => return Err(FrameError::Compression(e.to_string())),
                },
            }
            if out.len() > max {
                return Err(FrameError::HeaderBlockTooLarge { max });
            }
            if pos >= input.len() && out.len() < out.capacity() {
                return Ok(out);
            }
            if self.inflate.total_in() == in_before && out.len() == out_before {
                return Err(FrameError::Compression(
                    "header block does not inflate".into(),
                ));
            }
        }
    }
}

fn nonzero(stream_id: u32, kind: &'static str) -> Result<(), FrameError> {
    if stream_id == 0 {
        Err(FrameError::ZeroStreamId { kind })
    } else {
        Ok(())
    }
}

fn exact(len: usize, want: usize, kind: &'static str) -> Result<(), FrameError> {
    if len == want {
        Ok(())
    } else {
        Err(FrameError::BadLength { kind, len })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(frames: &[Frame]) {
        let mut enc = FrameEncoder::new().expect("encoder");
        let mut dec = FrameDecoder::new(Limits::default());
        let mut wire = BytesMut::new();
        for f in frames {
            enc.encode(f, &mut wire).expect("encode");
        }
        for f in frames {
            let got = dec.decode(&mut wire).expect("decode").expect("complete");
            assert_eq!(&got, f);
        }
        assert!(wire.is_empty());
        assert_eq!(dec.decode(&mut wire).expect("decode"), None);
    }

    #[test]
    fn every_frame_type_round_trips_and_header_stream_is_continuous() {
        round_trip(&[
            Frame::SynStream {
                stream_id: 1,
                associated_to: 0,
                priority: 0,
                flags: 0,
                headers: HeaderBlock::new().with("streamtype", "error"),
            },
            Frame::SynStream {
                stream_id: 3,
                associated_to: 0,
                priority: 7,
                flags: FLAG_FIN,
                headers: HeaderBlock::new()
                    .with("streamtype", "stdin")
                    .with("x-multi", "a")
                    .with("x-multi", "b"),
            },
            Frame::SynReply {
                stream_id: 1,
                flags: 0,
                headers: HeaderBlock::new(),
            },
            Frame::Headers {
                stream_id: 3,
                flags: FLAG_FIN,
                headers: HeaderBlock::new().with("streamtype", "stdin"),
            },
            Frame::RstStream {
                stream_id: 5,
                status: RST_CANCEL,
            },
            Frame::Settings {
                flags: 0,
                entries: vec![(0, 4, 1000), (1, 7, 65536)],
            },
            Frame::Ping { id: 1 },
            Frame::GoAway {
                last_good_stream_id: 3,
                status: GOAWAY_OK,
            },
            Frame::WindowUpdate {
                stream_id: 1,
                delta: 4096,
            },
            Frame::Data {
                stream_id: 3,
                flags: FLAG_FIN,
                data: Bytes::from_static(b"hello"),
            },
            Frame::Data {
                stream_id: 3,
                flags: 0,
                data: Bytes::new(),
            },
        ]);
    }

    #[test]
    fn a_frame_arriving_in_pieces_is_decoded_once_complete() {
        let mut enc = FrameEncoder::new().expect("encoder");
        let mut wire = BytesMut::new();
        let frame = Frame::SynStream {
            stream_id: 1,
            associated_to: 0,
            priority: 0,
            flags: 0,
            headers: HeaderBlock::new().with("streamtype", "resize"),
        };
        enc.encode(&frame, &mut wire).expect("encode");
        let all = wire.freeze();
        let mut dec = FrameDecoder::new(Limits::default());
        let mut buf = BytesMut::new();
        for (i, byte) in all.iter().enumerate() {
            buf.put_u8(*byte);
            let got = dec.decode(&mut buf).expect("decode");
            if i + 1 < all.len() {
                assert_eq!(got, None, "decoded early at byte {i}");
            } else {
                assert_eq!(got, Some(frame.clone()));
            }
        }
    }

    /// Two consecutive SYN_STREAM header blocks produced by CPython's zlib (an independent zlib)
    /// with `zlib.compressobj(9, zlib.DEFLATED, 15, 8, zlib.Z_DEFAULT_STRATEGY, zdict=<SPDY/3
    /// dictionary>)`, each `compress(block) + flush(zlib.Z_SYNC_FLUSH)` from ONE compressor:
    /// block 1 = {streamtype: error}, block 2 = {streamtype: stdin, x-multi: "a\0b"}.
    const PY_BLOCK_1: [u8; 30] = [
        0x78, 0xf9, 0xe3, 0xc6, 0xa7, 0xc2, 0x02, 0xa6, 0x23, 0x46, 0x70, 0x3a, 0x2b, 0x29, 0x4a,
        0x4d, 0xcc, 0x85, 0x16, 0x25, 0xac, 0xa9, 0xa0, 0x80, 0x06, 0x00, 0x00, 0x00, 0xff, 0xff,
    ];
    const PY_BLOCK_2: [u8; 29] = [
        0x02, 0x65, 0x1c, 0x4c, 0xa9, 0xe2, 0x12, 0x60, 0x76, 0x01, 0xa5, 0xe0, 0x0a, 0xdd, 0xdc,
        0xd2, 0x9c, 0x92, 0x4c, 0x70, 0x39, 0xca, 0x90, 0x04, 0x00, 0x00, 0x00, 0xff, 0xff,
    ];

    fn syn_stream_wire(stream_id: u32, block: &[u8]) -> Vec<u8> {
        let mut w = Vec::new();
        w.put_u16(0x8003);
        w.put_u16(TYPE_SYN_STREAM);
        w.put_u32(10 + block.len() as u32);
        w.put_u32(stream_id);
        w.put_u32(0);
        w.put_u16(0);
        w.extend_from_slice(block);
        w
    }

    #[test]
    fn decodes_header_blocks_made_by_an_independent_zlib_with_the_dictionary() {
        // The stream header announces FDICT with the dictionary's Adler-32 (0xe3c6a7c2).
        assert_eq!(&PY_BLOCK_1[2..6], &[0xe3, 0xc6, 0xa7, 0xc2]);
        let mut buf = BytesMut::new();
        buf.extend_from_slice(&syn_stream_wire(1, &PY_BLOCK_1));
        buf.extend_from_slice(&syn_stream_wire(3, &PY_BLOCK_2));
        let mut dec = FrameDecoder::new(Limits::default());
        match dec.decode(&mut buf).expect("decode").expect("frame") {
            Frame::SynStream {
                stream_id, headers, ..
            } => {
                assert_eq!(stream_id, 1);
                assert_eq!(headers.get("streamtype"), Some("error"));
                assert_eq!(headers.len(), 1);
            }
            other => panic!("unexpected {other:?}"),
        }
        match dec.decode(&mut buf).expect("decode").expect("frame") {
            Frame::SynStream {
                stream_id, headers, ..
            } => {
                assert_eq!(stream_id, 3);
                assert_eq!(headers.get("StreamType"), Some("stdin"));
                assert_eq!(headers.get_all("x-multi"), ["a", "b"]);
            }
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn our_stream_starts_with_the_dictionary_header() {
        let mut enc = FrameEncoder::new().expect("encoder");
        let mut wire = BytesMut::new();
        enc.encode(
            &Frame::SynReply {
                stream_id: 1,
                flags: 0,
                headers: HeaderBlock::new(),
            },
            &mut wire,
        )
        .expect("encode");
        // 8-byte frame header, 4-byte stream id, then zlib: CMF 0x78, FLG with FDICT, DICTID.
        assert_eq!(wire[12], 0x78);
        assert_ne!(wire[13] & 0x20, 0);
        assert_eq!(&wire[14..18], &[0xe3, 0xc6, 0xa7, 0xc2]);
        // A sync flush ends the block.
        assert_eq!(&wire[wire.len() - 4..], &[0x00, 0x00, 0xff, 0xff]);
    }

    #[test]
    fn oversized_frames_are_refused_before_buffering() {
        let mut dec = FrameDecoder::new(Limits::default());
        let mut buf = BytesMut::new();
        buf.put_u32(1);
        buf.put_u32(0x00ff_ffff);
        assert!(matches!(
            dec.decode(&mut buf),
            Err(FrameError::TooLarge { kind: "data", .. })
        ));
        let mut buf = BytesMut::new();
        buf.put_u16(0x8003);
        buf.put_u16(TYPE_SYN_STREAM);
        buf.put_u32(0x0010_0000);
        assert!(matches!(
            dec.decode(&mut buf),
            Err(FrameError::TooLarge {
                kind: "control",
                ..
            })
        ));
    }

    #[test]
    fn malformed_frames_give_typed_errors() {
        let mut dec = FrameDecoder::new(Limits::default());
        let mut buf = BytesMut::new();
        buf.put_u16(0x8002);
        buf.put_u16(TYPE_PING);
        buf.put_u32(4);
        buf.put_u32(1);
        assert!(matches!(
            dec.decode(&mut buf),
            Err(FrameError::UnsupportedVersion(2))
        ));

        let mut buf = BytesMut::new();
        buf.put_u16(0x8003);
        buf.put_u16(TYPE_PING);
        buf.put_u32(3);
        buf.put_slice(&[0, 0, 1]);
        assert!(matches!(
            dec.decode(&mut buf),
            Err(FrameError::BadLength { kind: "PING", .. })
        ));

        let mut buf = BytesMut::new();
        buf.put_u32(0);
        buf.put_u32(1);
        buf.put_u8(0);
        assert!(matches!(
            dec.decode(&mut buf),
            Err(FrameError::ZeroStreamId { kind: "DATA" })
        ));

        // A header block that is not zlib at all.
        let mut dec = FrameDecoder::new(Limits::default());
        let mut buf = BytesMut::from(&syn_stream_wire(1, b"not zlib at all")[..]);
        assert!(matches!(
            dec.decode(&mut buf),
            Err(FrameError::Compression(_))
        ));

        // A well-compressed block whose content lies about its lengths.
        let mut dec = FrameDecoder::new(Limits::default());
        let mut c = Compress::new(Compression::best(), true);
        c.set_dictionary(&HEADER_DICTIONARY).expect("dict");
        let mut block = Vec::with_capacity(128);
        c.compress_vec(&[0, 0, 0, 1, 0, 0, 0, 99], &mut block, FlushCompress::Sync)
            .expect("compress");
        let mut buf = BytesMut::from(&syn_stream_wire(1, &block)[..]);
        assert!(matches!(
            dec.decode(&mut buf),
            Err(FrameError::HeaderBlock(_))
        ));
    }

    #[test]
    fn header_bombs_hit_the_limit() {
        let limits = Limits {
            max_header_block: 1024,
            ..Limits::default()
        };
        let mut enc = FrameEncoder::new().expect("encoder");
        let mut wire = BytesMut::new();
        let big = "x".repeat(10_000);
        enc.encode(
            &Frame::SynStream {
                stream_id: 1,
                associated_to: 0,
                priority: 0,
                flags: 0,
                headers: HeaderBlock::new().with("streamtype", &big),
            },
            &mut wire,
        )
        .expect("encode");
        assert!(wire.len() < 1024, "compresses well");
        let mut dec = FrameDecoder::new(limits);
        assert!(matches!(
            dec.decode(&mut wire),
            Err(FrameError::HeaderBlockTooLarge { max: 1024 })
        ));
    }

    #[test]
    fn corrupted_input_never_panics() {
        let mut enc = FrameEncoder::new().expect("encoder");
        let mut wire = BytesMut::new();
        for (i, kind) in ["error", "stdin", "stdout"].iter().enumerate() {
            enc.encode(
                &Frame::SynStream {
                    stream_id: 2 * i as u32 + 1,
                    associated_to: 0,
                    priority: 0,
                    flags: 0,
                    headers: HeaderBlock::new().with("streamtype", kind),
                },
                &mut wire,
            )
            .expect("encode");
        }
        enc.encode(&Frame::Ping { id: 1 }, &mut wire)
            .expect("encode");
        let wire = wire.freeze();
        for pos in 0..wire.len() {
            for flip in [0x01u8, 0x80, 0xff] {
                let mut bad = BytesMut::from(&wire[..]);
                bad[pos] ^= flip;
                let mut dec = FrameDecoder::new(Limits::default());
                while let Ok(Some(_)) = dec.decode(&mut bad) {}
                // Truncations as well.
                let mut cut = BytesMut::from(&wire[..pos]);
                let mut dec = FrameDecoder::new(Limits::default());
                while let Ok(Some(_)) = dec.decode(&mut cut) {}
            }
        }
    }

    #[test]
    fn unknown_control_frames_are_skipped() {
        let mut dec = FrameDecoder::new(Limits::default());
        let mut buf = BytesMut::new();
        buf.put_u16(0x8003);
        buf.put_u16(10);
        buf.put_u32(2);
        buf.put_slice(&[1, 2]);
        assert_eq!(
            dec.decode(&mut buf).expect("decode"),
            Some(Frame::Unknown { frame_type: 10 })
        );
        assert!(buf.is_empty());
    }
}
