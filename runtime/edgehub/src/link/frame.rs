//! One message per WebSocket frame: encoding, decoding, control messages and the keepalive.

use wedge_core::message::{DecodeError, group, module, operation};
use wedge_core::{Content, Message, Route};

/// Why an inbound frame carried no usable message. The frame is logged and skipped; the link
/// stays up.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    /// Larger than `max_frame`.
    #[error("frame of {len} bytes exceeds the {max}-byte limit")]
    TooLarge {
        /// The frame's size.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// Not one JSON message (not JSON, or `header`/`route` missing or mistyped).
    #[error(transparent)]
    Malformed(#[from] DecodeError),
}

/// Decodes one inbound frame (text or binary payload) into a message.
pub fn decode(payload: &[u8], max_frame: usize) -> Result<Message, FrameError> {
    if payload.len() > max_frame {
        return Err(FrameError::TooLarge {
            len: payload.len(),
            max: max_frame,
        });
    }
    // Trailing `\n` (edgecore's framing) is JSON whitespace, so it needs no stripping.
    Ok(Message::from_slice(payload)?)
}

/// The text of one outbound frame: compact JSON with `sync` cleared, then `\n`.
pub fn encode(msg: &Message) -> String {
    let mut bytes = msg.to_cloud_vec();
    bytes.push(b'\n');
    // `to_cloud_vec` writes JSON, which is UTF-8; the fallback is unreachable.
    String::from_utf8(bytes).unwrap_or_default()
}

/// True for the cloud's control messages (`ping`, `pong`, `config`): answered, not dispatched.
pub fn is_control(msg: &Message) -> bool {
    matches!(
        msg.route.operation.as_str(),
        operation::PING | operation::PONG | operation::CONFIG
    )
}

/// The immediate answer to a control message: a response (route copied, operation
/// `response`, `parent_msg_id` = its id) with content `"ack"`.
pub fn control_ack(msg: &Message) -> Message {
    msg.response(Content::string("ack"))
}

/// A new keepalive, exactly as edgecore writes it.
pub fn keepalive() -> Message {
    Message::new(
        Route {
            source: module::EDGEHUB.to_owned(),
            group: group::RESOURCE.to_owned(),
            operation: operation::KEEPALIVE.to_owned(),
            resource: "node".to_owned(),
            ..Route::default()
        },
        Content::string("ping"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keepalive_is_byte_exact() {
        let k = keepalive();
        let expected = format!(
            "{{\"header\":{{\"msg_id\":\"{}\",\"timestamp\":{}}},\"route\":{{\"source\":\"websocket\",\"group\":\"resource\",\"operation\":\"keepalive\",\"resource\":\"node\"}},\"content\":\"ping\"}}\n",
            k.header.id, k.header.timestamp
        );
        assert_eq!(encode(&k), expected);
        assert_eq!(k.header.id.len(), 36);
    }

    #[test]
    fn encode_clears_sync_and_ends_with_newline() {
        let mut m = Message::build(
            "metamanager",
            "meta",
            "query",
            "default/pod/a",
            Content::null(),
        );
        m.header.sync = true;
        let text = encode(&m);
        assert!(text.ends_with("}\n"));
        assert!(!text.contains("sync"));
        assert_eq!(
            decode(text.as_bytes(), 1 << 20).unwrap().header.id,
            m.header.id
        );
    }

    #[test]
    fn decode_rejects_oversize_non_json_and_headerless() {
        let ok = br#"{"header":{"msg_id":"a","timestamp":1},"route":{"group":"twin"},"content":1}"#;
        assert_eq!(decode(ok, ok.len()).unwrap().route.group, "twin");
        assert!(matches!(
            decode(ok, ok.len() - 1),
            Err(FrameError::TooLarge { len, max }) if len == ok.len() && max == ok.len() - 1
        ));
        assert!(matches!(
            decode(b"not json", 100),
            Err(FrameError::Malformed(_))
        ));
        assert!(matches!(
            decode(br#"{"route":{},"content":null}"#, 100),
            Err(FrameError::Malformed(_))
        ));
        // Edgecore v1.15's all-empty shutdown message decodes (and is dropped by dispatch).
        let empty = decode(br#"{"header":{},"route":{},"content":null}"#, 100).unwrap();
        assert!(empty.route.group.is_empty());
    }

    #[test]
    fn control_messages_are_acked_with_copied_route() {
        let raw = br#"{"header":{"msg_id":"c1","timestamp":5},"route":{"source":"cloudhub","group":"resource","operation":"ping","resource":"node"},"content":null}"#;
        let ping = decode(raw, 1000).unwrap();
        assert!(is_control(&ping));
        let ack = control_ack(&ping);
        let text = encode(&ack);
        let expected = format!(
            "{{\"header\":{{\"msg_id\":\"{}\",\"parent_msg_id\":\"c1\",\"timestamp\":{}}},\"route\":{{\"source\":\"cloudhub\",\"group\":\"resource\",\"operation\":\"response\",\"resource\":\"node\"}},\"content\":\"ack\"}}\n",
            ack.header.id, ack.header.timestamp
        );
        assert_eq!(text, expected);
        for op in ["pong", "config"] {
            let mut m = ping.clone();
            m.route.operation = op.into();
            assert!(is_control(&m));
        }
        let mut m = ping.clone();
        m.route.operation = "insert".into();
        assert!(!is_control(&m));
    }
}
