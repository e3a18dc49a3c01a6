//! Lets Go gRPC clients on a unix socket reach a tonic server.
//!
//! A mapper built with KubeEdge's mapper-framework dials the node's socket by its path, and
//! grpc-go then sends that path as the HTTP/2 `:authority` (`/etc/kubeedge/dmi.sock`). That is
//! not a valid authority (RFC 9113 §8.3.1), and the HTTP/2 layer under tonic (h2) refuses the
//! stream with `PROTOCOL_ERROR` (hyperium/h2#487, open) — the mapper then exits. edgecore,
//! being Go too, accepts it.
//!
//! So each DMI connection passes through this shim before tonic sees it. Frames from the
//! mapper are read one by one; every frame but a header block (HEADERS and its CONTINUATIONs)
//! passes unchanged, and so does everything the server sends.
//!
//! A header block is *scanned*, not decoded: the shim walks the HPACK representations
//! (RFC 7541 §6) by their lengths and looks only at literals named `:authority`. An invalid
//! authority is replaced by one **of the same length** (each byte that may not appear in a
//! host name becomes `-`: `/etc/kubeedge/dmi.sock` → `-etc-kubeedge-dmi.sock`). Because HPACK
//! sizes dynamic-table entries by their decoded length, the server's table then stays
//! entry-for-entry the client's, so the shim never has to track it: indexed references (how
//! grpc-go sends the authority after the first request) already point at the rewritten
//! value, and a block without a literal authority — nearly all of them — is forwarded as
//! read. Only an authority literal is Huffman-decoded. Decoding every block instead cost a
//! third of the node's CPU at 10,000 DMI reports/s.
//!
//! Left as sent: an authority named through the dynamic table (a literal whose name index is
//! above the static table; grpc-go names `:authority` by its static index) and an empty one
//! (no same-length replacement exists). h2 refuses such a stream; the connection goes on.
//!
//! The shim is also the first to read what a client announces, so it enforces the sizes the
//! node's HTTP/2 server announces before anything is allocated for them: a frame longer than
//! [`MAX_FRAME`] (SETTINGS_MAX_FRAME_SIZE, which the server leaves at HTTP/2's 16 KiB) or a
//! header block longer than [`MAX_BLOCK`] ends the connection ([`Oversized`]). Without it a
//! client announcing 16 MiB DATA frames made the node allocate 16 MiB per connection.

use std::io;

use tokio::io::{AsyncBufRead, AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::io::{AsyncBufReadExt, DuplexStream};

/// The client connection preface (RFC 9113 §3.4).
const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
const HEADERS: u8 = 0x1;
const CONTINUATION: u8 = 0x9;
const END_STREAM: u8 = 0x1;
const END_HEADERS: u8 = 0x4;
const PADDED: u8 = 0x8;
const PRIORITY: u8 = 0x20;
/// The frame size every HTTP/2 peer accepts (SETTINGS_MAX_FRAME_SIZE's initial value), and the
/// largest the node's server announces: a longer frame from a client is a protocol error.
pub const MAX_FRAME: usize = 16_384;
/// Largest header block accepted from a mapper (its HPACK encoding; the server's header-list
/// limit, 16 KiB by default, applies to the decoded block after the shim).
pub const MAX_BLOCK: usize = 64 * 1024;
/// How much of the mapper's stream is read at once, and how much output is gathered before
/// it is handed to tonic: one read and one write carry many small gRPC frames.
const CHUNK: usize = 64 * 1024;
/// `:authority`'s index in HPACK's static table (RFC 7541 Appendix A).
const AUTHORITY_INDEX: usize = 1;
const AUTHORITY: &[u8] = b":authority";

/// Whether `authority` is a valid `host[:port]` (what h2 accepts), roughly: no path
/// separators, spaces or percent signs, and not empty.
fn valid_authority(authority: &[u8]) -> bool {
    !authority.is_empty()
        && authority
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || b"-._~:[]@!$&'()*+,;=".contains(b))
}

/// The authority that replaces an invalid one: the same length, each byte that is not
/// unreserved in a host name (RFC 3986 §2.3) made `-`. The length is what keeps the two ends'
/// HPACK dynamic tables alike (see the module docs).
pub fn same_length_authority(authority: &[u8]) -> Vec<u8> {
    authority
        .iter()
        .map(|&b| {
            if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                b
            } else {
                b'-'
            }
        })
        .collect()
}

/// A frame or header block over the limits the node announces; the connection is closed
/// before the bytes announced are read or allocated.
#[derive(Debug, thiserror::Error)]
#[error("{what} of {size} bytes from a DMI client, over the {limit}-byte limit")]
pub struct Oversized {
    /// What was too large ("frame", "header block").
    pub what: &'static str,
    /// The size announced (or reached).
    pub size: usize,
    /// The limit.
    pub limit: usize,
}

fn oversized(what: &'static str, size: usize, limit: usize) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, Oversized { what, size, limit })
}

/// Whether `e` is an [`Oversized`] refusal (to count it apart from other broken connections).
pub(crate) fn is_oversized(e: &io::Error) -> bool {
    e.get_ref().is_some_and(|inner| inner.is::<Oversized>())
}

/// Serves one connection: `client` is the mapper's socket, `server` the end tonic reads. Ends
/// when the server is done (after the client's end of stream, or when the server closes the
/// connection); the error is what ended the client's direction, if anything did besides its
/// end of stream.
pub(crate) async fn relay<C>(client: C, server: DuplexStream) -> io::Result<()>
where
    C: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (mut client_read, mut client_write) = tokio::io::split(client);
    let (mut server_read, mut server_write) = tokio::io::split(server);
    let down = async move {
        let _ = tokio::io::copy(&mut server_read, &mut client_write).await;
        let _ = client_write.shutdown().await;
    };
    let up = async move {
        let result = rewrite(&mut client_read, &mut server_write).await;
        if let Err(e) = &result {
            tracing::debug!("DMI connection closed: {e}");
        }
        let _ = server_write.shutdown().await;
        result
    };
    tokio::pin!(down, up);
    tokio::select! {
        result = &mut up => {
            // The client is done sending; the server's answers still go back to it.
            (&mut down).await;
            result
        }
        // The server closed the connection (its GOAWAY is delivered): what the client still
        // sends has nowhere to go, and a client that never closes must not hold the
        // connection (and its slot) open.
        () = &mut down => Ok(()),
    }
}

fn bad(reason: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, reason.to_owned())
}

/// A header block being collected: its frames as read, and the block's fragment.
struct Block {
    stream: u32,
    end_stream: bool,
    /// The HEADERS frame's priority fields (empty without PRIORITY).
    priority: Vec<u8>,
    fragment: Vec<u8>,
    /// The frames exactly as read, forwarded when nothing needs rewriting.
    raw: Vec<u8>,
}

/// Copies what a client sends (`from`: the connection preface, then frames) to `to`, with
/// every header block's invalid literal `:authority` replaced by one of the same length
/// ([`same_length_authority`]). Ends at the client's end of stream; malformed input (no
/// preface, bad padding, a CONTINUATION out of place, a header block that is not HPACK) ends
/// it with an error, and so does a frame over [`MAX_FRAME`] or a header block over
/// [`MAX_BLOCK`] ([`Oversized`], before its bytes are read).
pub async fn rewrite<R, W>(from: R, to: &mut W) -> io::Result<()>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut from = BufReader::with_capacity(CHUNK, from);
    let mut preface = [0u8; PREFACE.len()];
    from.read_exact(&mut preface).await?;
    if preface != PREFACE {
        return Err(bad("not an HTTP/2 client"));
    }
    let mut out = Vec::with_capacity(CHUNK);
    out.extend_from_slice(&preface);
    let mut block: Option<Block> = None;
    let result = loop {
        // Hand over what is gathered before any read that may wait on the socket (the next
        // frame is not whole in the buffer), so nothing read is held back.
        if !out.is_empty() && (!whole_frame(from.buffer()) || out.len() >= CHUNK) {
            to.write_all(&out).await?;
            out.clear();
        }
        match frame(&mut from, &mut block, &mut out).await {
            Ok(true) => {}
            Ok(false) => break Ok(()),
            Err(e) => break Err(e),
        }
    };
    to.write_all(&out).await?;
    result
}

/// Whether `buffered` starts with a whole frame (its 9-byte head and the payload it announces).
fn whole_frame(buffered: &[u8]) -> bool {
    buffered.len() >= 9
        && buffered.len() - 9
            >= u32::from_be_bytes([0, buffered[0], buffered[1], buffered[2]]) as usize
}

/// Reads one frame and appends what goes on to `out`; `false` at the client's end of stream.
async fn frame<R: AsyncBufRead + Unpin>(
    from: &mut R,
    block: &mut Option<Block>,
    out: &mut Vec<u8>,
) -> io::Result<bool> {
    if from.fill_buf().await?.is_empty() {
        return Ok(false);
    }
    let mut head = [0u8; 9];
    from.read_exact(&mut head).await?;
    let length = u32::from_be_bytes([0, head[0], head[1], head[2]]) as usize;
    let (kind, flags) = (head[3], head[4]);
    let stream = u32::from_be_bytes([head[5], head[6], head[7], head[8]]) & 0x7fff_ffff;
    if length > MAX_FRAME {
        return Err(oversized("frame", length, MAX_FRAME));
    }
    if kind != HEADERS && kind != CONTINUATION {
        out.extend_from_slice(&head);
        let start = out.len();
        out.resize(start + length, 0);
        from.read_exact(&mut out[start..]).await?;
        return Ok(true);
    }
    let mut payload = vec![0u8; length];
    from.read_exact(&mut payload).await?;
    if kind == HEADERS {
        let mut body = payload.as_slice();
        if flags & PADDED != 0 {
            let (&pad, rest) = body.split_first().ok_or_else(|| bad("short HEADERS"))?;
            body = rest
                .get(..rest.len().saturating_sub(pad as usize))
                .filter(|_| (pad as usize) <= rest.len())
                .ok_or_else(|| bad("bad padding"))?;
        }
        let mut priority = Vec::new();
        if flags & PRIORITY != 0 {
            if body.len() < 5 {
                return Err(bad("short HEADERS priority"));
            }
            priority = body[..5].to_vec();
            body = &body[5..];
        }
        let fragment = body.to_vec();
        let mut raw = head.to_vec();
        raw.extend_from_slice(&payload);
        *block = Some(Block {
            stream,
            end_stream: flags & END_STREAM != 0,
            priority,
            fragment,
            raw,
        });
    } else {
        let Some(open) = block.as_mut() else {
            return Err(bad("CONTINUATION without HEADERS"));
        };
        open.fragment.extend_from_slice(&payload);
        open.raw.extend_from_slice(&head);
        open.raw.extend_from_slice(&payload);
        if open.fragment.len() > MAX_BLOCK {
            return Err(oversized("header block", open.fragment.len(), MAX_BLOCK));
        }
    }
    if flags & END_HEADERS == 0 {
        return Ok(true);
    }
    let Some(done) = block.take() else {
        return Ok(true);
    };
    match scan(&done.fragment)? {
        None => out.extend_from_slice(&done.raw),
        Some(fragment) => put_block(out, &done, &fragment),
    }
    Ok(true)
}

/// Appends `fragment` as the header block of `block`'s stream: a HEADERS frame (with the
/// original END_STREAM and priority, without padding) and CONTINUATIONs as needed.
fn put_block(out: &mut Vec<u8>, block: &Block, fragment: &[u8]) {
    let mut first = block.priority.clone();
    let split = fragment.len().min(MAX_FRAME - first.len());
    first.extend_from_slice(&fragment[..split]);
    let mut rest = &fragment[split..];
    let mut flags = if block.end_stream { END_STREAM } else { 0 };
    if !block.priority.is_empty() {
        flags |= PRIORITY;
    }
    if rest.is_empty() {
        flags |= END_HEADERS;
    }
    put_frame(out, HEADERS, flags, block.stream, &first);
    while !rest.is_empty() {
        let take = rest.len().min(MAX_FRAME);
        let flags = if take == rest.len() { END_HEADERS } else { 0 };
        put_frame(out, CONTINUATION, flags, block.stream, &rest[..take]);
        rest = &rest[take..];
    }
}

fn put_frame(out: &mut Vec<u8>, kind: u8, flags: u8, stream: u32, payload: &[u8]) {
    let length = (payload.len() as u32).to_be_bytes();
    let id = stream.to_be_bytes();
    out.extend_from_slice(&[
        length[1], length[2], length[3], kind, flags, id[0], id[1], id[2], id[3],
    ]);
    out.extend_from_slice(payload);
}

/// Walks one header block's representations; `Some(block)` when an invalid literal
/// `:authority` was rewritten, `None` when the block may go on as it is.
fn scan(block: &[u8]) -> io::Result<Option<Vec<u8>>> {
    let mut rest = block;
    let mut copied = 0;
    let mut rewritten: Option<Vec<u8>> = None;
    while let Some(&first) = rest.first() {
        let start = block.len() - rest.len();
        // The prefix width of the representation's integer (RFC 7541 §6).
        let (prefix, literal) = match first {
            0x80.. => (7, false),      // indexed field
            0x40..=0x7f => (6, true),  // literal, incremental indexing
            0x20..=0x3f => (5, false), // dynamic table size update
            _ => (4, true),            // literal without / never indexed
        };
        let (index, after) = integer(rest, prefix)?;
        rest = after;
        if !literal {
            continue;
        }
        let named_authority = match index {
            0 => {
                let (name, huffman, after) = string(rest)?;
                rest = after;
                plain(name, huffman)? == AUTHORITY
            }
            i => i == AUTHORITY_INDEX,
        };
        let (value, huffman, after) = string(rest)?;
        rest = after;
        if !named_authority {
            continue;
        }
        let value = plain(value, huffman)?;
        if value.is_empty() || valid_authority(&value) {
            continue;
        }
        // Same representation kind, named by static index, value as a raw string.
        let out = rewritten.get_or_insert_with(|| Vec::with_capacity(block.len() + 16));
        out.extend_from_slice(&block[copied..start]);
        let kind = first & !((1u8 << prefix) - 1);
        put_integer(out, kind, prefix, AUTHORITY_INDEX);
        put_integer(out, 0, 7, value.len());
        out.extend_from_slice(&same_length_authority(&value));
        copied = block.len() - rest.len();
    }
    Ok(rewritten.map(|mut out| {
        out.extend_from_slice(&block[copied..]);
        out
    }))
}

/// An HPACK integer with an `prefix`-bit prefix (RFC 7541 §5.1), and what follows it.
fn integer(bytes: &[u8], prefix: u32) -> io::Result<(usize, &[u8])> {
    let (&first, mut rest) = bytes.split_first().ok_or_else(|| bad("HPACK: short"))?;
    let max = (1usize << prefix) - 1;
    let mut value = usize::from(first) & max;
    if value < max {
        return Ok((value, rest));
    }
    let mut shift = 0u32;
    loop {
        let (&b, after) = rest
            .split_first()
            .ok_or_else(|| bad("HPACK: short integer"))?;
        rest = after;
        if shift > 28 {
            return Err(bad("HPACK: integer too large"));
        }
        value += usize::from(b & 0x7f) << shift;
        shift += 7;
        if b & 0x80 == 0 {
            return Ok((value, rest));
        }
    }
}

/// An HPACK string literal (RFC 7541 §5.2): its octets, whether they are Huffman-coded, and
/// what follows.
fn string(bytes: &[u8]) -> io::Result<(&[u8], bool, &[u8])> {
    let huffman = bytes.first().is_some_and(|b| b & 0x80 != 0);
    let (length, rest) = integer(bytes, 7)?;
    if length > rest.len() {
        return Err(bad("HPACK: string past the block"));
    }
    let (octets, rest) = rest.split_at(length);
    Ok((octets, huffman, rest))
}

/// A string literal's plain octets.
fn plain(octets: &[u8], huffman: bool) -> io::Result<Vec<u8>> {
    if !huffman {
        return Ok(octets.to_vec());
    }
    loona_hpack::huffman::HuffmanDecoder::new()
        .decode(octets)
        .map_err(|e| bad(&format!("HPACK: Huffman: {e:?}")))
}

/// Appends an HPACK integer: `kind` holds the representation's high bits.
fn put_integer(out: &mut Vec<u8>, kind: u8, prefix: u32, value: usize) {
    let max = (1usize << prefix) - 1;
    if value < max {
        out.push(kind | value as u8);
        return;
    }
    out.push(kind | max as u8);
    let mut rest = value - max;
    while rest >= 0x80 {
        out.push((rest as u8 & 0x7f) | 0x80);
        rest >>= 7;
    }
    out.push(rest as u8);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `:authority: /etc/kubeedge/dmi.sock` as grpc-go sends it first: a literal with
    /// incremental indexing, named by static index 1, value raw.
    fn grpc_go_first_authority() -> Vec<u8> {
        let path = b"/etc/kubeedge/dmi.sock";
        let mut block = vec![0x41, path.len() as u8];
        block.extend_from_slice(path);
        block
    }

    fn pass(input: &[u8]) -> Vec<u8> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("a runtime");
        runtime.block_on(async {
            let mut out = Vec::new();
            rewrite(input, &mut out)
                .await
                .expect("a well-formed connection");
            out
        })
    }

    fn connection(blocks: &[(u32, &[u8])]) -> Vec<u8> {
        let mut input = PREFACE.to_vec();
        for (stream, block) in blocks {
            put_frame(&mut input, HEADERS, END_HEADERS, *stream, block);
            put_frame(&mut input, 0x0, END_STREAM, *stream, b"body");
        }
        input
    }

    /// Header blocks of `bytes` (after the preface), in order.
    fn blocks(bytes: &[u8]) -> Vec<Vec<u8>> {
        let mut rest = &bytes[PREFACE.len()..];
        let mut out = Vec::new();
        while rest.len() >= 9 {
            let length = u32::from_be_bytes([0, rest[0], rest[1], rest[2]]) as usize;
            if rest[3] == HEADERS {
                out.push(rest[9..9 + length].to_vec());
            }
            rest = &rest[9 + length..];
        }
        out
    }

    #[test]
    fn an_authority_indexed_after_its_first_literal_reads_as_the_rewritten_value() {
        let mut first = vec![0x83]; // :method POST
        first.extend(grpc_go_first_authority());
        let second = [0x83, 0xbe]; // :method POST, then dynamic entry 62: the authority
        let out = pass(&connection(&[(1, &first), (3, &second)]));
        let out_blocks = blocks(&out);
        assert_eq!(
            out_blocks[1], second,
            "a block with no literal authority goes as read"
        );
        let mut decoder = loona_hpack::Decoder::new();
        let want = vec![
            (b":method".to_vec(), b"POST".to_vec()),
            (b":authority".to_vec(), b"-etc-kubeedge-dmi.sock".to_vec()),
        ];
        for block in &out_blocks {
            assert_eq!(decoder.decode(block).expect("decodes"), want);
        }
    }

    #[test]
    fn a_huffman_coded_or_literally_named_authority_is_rewritten() {
        // RFC 7541 C.6.1: "Mon, 21 Oct 2013 20:13:21 GMT", Huffman-coded.
        let huffman = [
            0xd0, 0x7a, 0xbe, 0x94, 0x10, 0x54, 0xd4, 0x44, 0xa8, 0x20, 0x05, 0x95, 0x04, 0x0b,
            0x81, 0x66, 0xe0, 0x82, 0xa6, 0x2d, 0x1b, 0xff,
        ];
        assert_eq!(
            plain(&huffman, true).expect("valid Huffman"),
            b"Mon, 21 Oct 2013 20:13:21 GMT"
        );
        let mut first = vec![0x11, 0x80 | huffman.len() as u8]; // never indexed, name 1
        first.extend_from_slice(&huffman);
        let mut second = vec![0x00, AUTHORITY.len() as u8]; // without indexing, literal name
        second.extend_from_slice(AUTHORITY);
        second.extend_from_slice(&[3, b'a', b'/', b'b']);
        let out = pass(&connection(&[(1, &first), (3, &second)]));
        let out_blocks = blocks(&out);
        assert_eq!(out_blocks[0][0] & 0xf0, 0x10, "still never indexed");
        let mut decoder = loona_hpack::Decoder::new();
        assert_eq!(
            decoder.decode(&out_blocks[0]).expect("decodes"),
            vec![(
                AUTHORITY.to_vec(),
                b"Mon--21-Oct-2013-20-13-21-GMT".to_vec()
            )]
        );
        assert_eq!(
            decoder.decode(&out_blocks[1]).expect("decodes"),
            vec![(AUTHORITY.to_vec(), b"a-b".to_vec())]
        );
    }

    #[test]
    fn a_valid_authority_leaves_the_connection_byte_for_byte() {
        let mut block = vec![0x41, 14];
        block.extend_from_slice(b"localhost:8080");
        let input = connection(&[(1, &block), (3, &[0xbe])]);
        assert_eq!(pass(&input), input);
    }

    #[test]
    fn a_truncated_block_is_an_error_not_a_panic() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("a runtime");
        for block in [
            &[0x41, 0x7f][..],
            &[0x41, 30, b'/'],
            &[0xff, 0xff, 0xff, 0xff, 0xff, 0xff],
        ] {
            let input = connection(&[(1, block)]);
            let result = runtime.block_on(rewrite(input.as_slice(), &mut Vec::new()));
            assert!(result.is_err(), "{block:?} passed");
        }
    }

    #[test]
    fn a_frame_over_the_announced_size_ends_the_connection_before_it_is_read() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("a runtime");
        // A DATA frame head announcing 16 MiB, and none of its payload.
        let mut input = PREFACE.to_vec();
        input.extend_from_slice(&[0xff, 0xff, 0xff, 0x0, 0x0, 0, 0, 0, 1]);
        let error = runtime
            .block_on(rewrite(input.as_slice(), &mut Vec::new()))
            .expect_err("refused");
        assert!(is_oversized(&error), "{error}");
        // At the limit it is a frame like any other.
        let mut input = PREFACE.to_vec();
        put_frame(&mut input, 0x0, 0, 1, &vec![7u8; MAX_FRAME]);
        let mut out = Vec::new();
        runtime
            .block_on(rewrite(input.as_slice(), &mut out))
            .expect("passes");
        assert_eq!(out, input);
    }

    #[test]
    fn a_header_block_over_the_limit_is_refused_as_oversized() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("a runtime");
        let mut input = PREFACE.to_vec();
        put_frame(&mut input, HEADERS, 0, 1, &vec![0x82; MAX_FRAME]);
        for _ in 0..MAX_BLOCK / MAX_FRAME {
            put_frame(&mut input, CONTINUATION, 0, 1, &vec![0x82; MAX_FRAME]);
        }
        let error = runtime
            .block_on(rewrite(input.as_slice(), &mut Vec::new()))
            .expect_err("refused");
        assert!(is_oversized(&error), "{error}");
    }

    #[test]
    fn a_frame_is_whole_only_with_its_payload() {
        let mut frame = Vec::new();
        put_frame(&mut frame, 0x0, 0, 1, b"body");
        assert!(whole_frame(&frame));
        assert!(!whole_frame(&frame[..frame.len() - 1]));
        assert!(!whole_frame(&frame[..5]));
        assert!(!whole_frame(&[]));
    }

    #[test]
    fn integers_round_trip_across_the_prefix() {
        for prefix in [4, 5, 6, 7] {
            for value in [
                0,
                1,
                14,
                15,
                30,
                31,
                62,
                63,
                126,
                127,
                128,
                300,
                16_384,
                1 << 20,
            ] {
                let mut out = Vec::new();
                put_integer(&mut out, 0, prefix, value);
                let (back, rest) = integer(&out, prefix).expect("decodes");
                assert_eq!(
                    (back, rest.len()),
                    (value, 0),
                    "{value} with prefix {prefix}"
                );
            }
        }
    }
}
