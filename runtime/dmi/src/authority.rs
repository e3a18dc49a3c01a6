//! Lets Go gRPC clients on a unix socket reach a tonic server.
//!
//! A mapper built with KubeEdge's mapper-framework dials the node's socket by its path, and
//! grpc-go then sends that path as the HTTP/2 `:authority` (`/etc/kubeedge/dmi.sock`). That is
//! not a valid authority (RFC 9113 §8.3.1), and the HTTP/2 layer under tonic (h2) refuses the
//! stream with `PROTOCOL_ERROR` (hyperium/h2#487, open) — the mapper then exits. edgecore,
//! being Go too, accepts it.
//!
//! So each DMI connection passes through this shim before tonic sees it: frames from the
//! mapper are read one by one; a header block (HEADERS and its CONTINUATIONs) is decoded with
//! HPACK, an `:authority` that is not a valid one is replaced by `localhost` (what gRPC itself
//! uses for unix sockets), and the block is encoded again, with its own HPACK state toward the
//! server. Every other frame, and everything the server sends, passes unchanged.

use std::io;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, DuplexStream};

/// The client connection preface (RFC 9113 §3.4).
const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
const HEADERS: u8 = 0x1;
const CONTINUATION: u8 = 0x9;
const END_STREAM: u8 = 0x1;
const END_HEADERS: u8 = 0x4;
const PADDED: u8 = 0x8;
const PRIORITY: u8 = 0x20;
/// The frame size every HTTP/2 peer accepts (SETTINGS_MAX_FRAME_SIZE's initial value).
const MAX_FRAME: usize = 16_384;
/// Largest header block accepted from a mapper.
const MAX_BLOCK: usize = 256 * 1024;

/// What replaces an invalid authority.
const LOCALHOST: &[u8] = b"localhost";

/// Whether `authority` is a valid `host[:port]` (what h2 accepts), roughly: no path
/// separators, spaces or percent signs, and not empty.
fn valid_authority(authority: &[u8]) -> bool {
    !authority.is_empty()
        && authority
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || b"-._~:[]@!$&'()*+,;=".contains(b))
}

/// Serves one connection: `client` is the mapper's socket, `server` the end tonic reads.
pub(crate) async fn relay<C>(client: C, server: DuplexStream)
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
        if let Err(e) = rewrite(&mut client_read, &mut server_write).await {
            tracing::debug!("DMI connection closed: {e}");
        }
        let _ = server_write.shutdown().await;
    };
    tokio::join!(down, up);
}

fn bad(reason: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, reason.to_owned())
}

/// Copies what a client sends (`from`: the connection preface, then frames) to `to`, with
/// every header block's invalid `:authority` replaced by `localhost`. Ends at the client's
/// end of stream; malformed input (no preface, bad padding, a CONTINUATION out of place, a
/// header block HPACK cannot decode or over 256 KiB) ends it with an error.
pub async fn rewrite<R, W>(from: &mut R, to: &mut W) -> io::Result<()>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut preface = [0u8; PREFACE.len()];
    from.read_exact(&mut preface).await?;
    if preface != PREFACE {
        return Err(bad("not an HTTP/2 client"));
    }
    to.write_all(&preface).await?;
    let mut decoder = loona_hpack::Decoder::new();
    let mut encoder = loona_hpack::Encoder::new();
    // A header block being collected: (stream id, END_STREAM, priority bytes, fragment).
    let mut block: Option<(u32, bool, Vec<u8>, Vec<u8>)> = None;
    loop {
        let mut head = [0u8; 9];
        match from.read_exact(&mut head).await {
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(()),
            Err(e) => return Err(e),
        }
        let length = u32::from_be_bytes([0, head[0], head[1], head[2]]) as usize;
        let (kind, flags) = (head[3], head[4]);
        let stream = u32::from_be_bytes([head[5], head[6], head[7], head[8]]) & 0x7fff_ffff;
        let mut payload = vec![0u8; length];
        from.read_exact(&mut payload).await?;
        match kind {
            HEADERS => {
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
                block = Some((stream, flags & END_STREAM != 0, priority, body.to_vec()));
            }
            CONTINUATION => {
                let Some((_, _, _, fragment)) = block.as_mut() else {
                    return Err(bad("CONTINUATION without HEADERS"));
                };
                fragment.extend_from_slice(&payload);
                if fragment.len() > MAX_BLOCK {
                    return Err(bad("header block too large"));
                }
            }
            _ => {
                to.write_all(&head).await?;
                to.write_all(&payload).await?;
                continue;
            }
        }
        if flags & END_HEADERS == 0 {
            continue;
        }
        let Some((stream, end_stream, priority, fragment)) = block.take() else {
            continue;
        };
        let mut headers = decoder
            .decode(&fragment)
            .map_err(|e| bad(&format!("HPACK: {e}")))?;
        for (name, value) in headers.iter_mut() {
            if name.as_slice() == b":authority" && !valid_authority(value) {
                *value = LOCALHOST.to_vec();
            }
        }
        let encoded = encoder.encode(headers.iter().map(|(n, v)| (n.as_slice(), v.as_slice())));
        let had_priority = !priority.is_empty();
        let mut first = priority;
        let room = MAX_FRAME - first.len();
        let split = encoded.len().min(room);
        first.extend_from_slice(&encoded[..split]);
        let mut rest = &encoded[split..];
        let mut flags_out = if end_stream { END_STREAM } else { 0 };
        if had_priority {
            flags_out |= PRIORITY;
        }
        if rest.is_empty() {
            flags_out |= END_HEADERS;
        }
        write_frame(to, HEADERS, flags_out, stream, &first).await?;
        while !rest.is_empty() {
            let take = rest.len().min(MAX_FRAME);
            let last = take == rest.len();
            let flags = if last { END_HEADERS } else { 0 };
            write_frame(to, CONTINUATION, flags, stream, &rest[..take]).await?;
            rest = &rest[take..];
        }
    }
}

async fn write_frame<W: AsyncWrite + Unpin>(
    to: &mut W,
    kind: u8,
    flags: u8,
    stream: u32,
    payload: &[u8],
) -> io::Result<()> {
    let length = (payload.len() as u32).to_be_bytes();
    let id = stream.to_be_bytes();
    let head = [
        length[1], length[2], length[3], kind, flags, id[0], id[1], id[2], id[3],
    ];
    to.write_all(&head).await?;
    to.write_all(payload).await
}
