//! The message envelope (`wedge_core::Message`, `Content`): what every bus and cloud message
//! is read and written as.
//!
//! - whatever parses re-serialises, parses to the same message, and serialises to the same
//!   bytes again (so forwarding never changes a message); the cloud form differs only in
//!   `sync`;
//! - the content accessors (`to_bytes`, `as_string`, `parse`, `CloudAnswer::of`) never panic,
//!   and a string content built with `Content::string` reads back as that string;
//! - a response names its request.

use bolero::check;
use serde_json::Value;
use wedge_core::message::CloudAnswer;
use wedge_core::{Content, Message};
use wedge_fuzz::envelope::{Envelope, KEYS, WORDS};
use wedge_fuzz::{CI_BUDGET, Json, SHRINK_TIME, Word};

/// Everything the envelope promises about bytes that parse.
fn check_bytes(bytes: &[u8]) {
    let Ok(msg) = Message::from_slice(bytes) else {
        return;
    };
    let wire = msg.to_vec();
    assert!(!wire.is_empty(), "a parsed message serialises");
    let again = Message::from_slice(&wire).expect("serialised message parses");
    assert_eq!(again, msg, "round trip");
    assert_eq!(again.to_vec(), wire, "serialisation is stable");

    let cloud = Message::from_slice(&msg.to_cloud_vec()).expect("cloud form parses");
    assert!(!cloud.header.sync, "sync cleared for the cloud");
    let mut same = cloud.clone();
    same.header.sync = msg.header.sync;
    assert_eq!(same, msg, "the cloud form differs only in sync");

    check_content(&msg.content);
    let _ = CloudAnswer::of(&msg.content);

    let reply = msg.response(Content::ok());
    assert_eq!(reply.header.parent_id, msg.header.id);
    assert_eq!(reply.parent_id().is_some(), !msg.header.id.is_empty());
    assert_eq!(reply.route.resource, msg.route.resource);
}

fn check_content(content: &Content) {
    assert_eq!(content.is_null(), content.raw() == "null");
    let bytes = content.to_bytes();
    let _ = content.parse::<Value>();
    if let Some(text) = content.as_string() {
        assert_eq!(bytes, text.as_bytes(), "a string content is its text");
        let rebuilt = Content::string(&text);
        assert_eq!(rebuilt.as_string().as_deref(), Some(text.as_str()));
    }
}

/// Raw bytes (mostly not JSON): never a panic.
#[test]
fn envelope_raw_bytes() {
    check!()
        .with_test_time(CI_BUDGET / 2)
        .with_shrink_time(SHRINK_TIME)
        .for_each(|bytes: &[u8]| check_bytes(bytes));
}

/// Envelopes with missing, mistyped, extra and damaged parts.
#[test]
fn envelope_structured() {
    check!()
        .with_type::<Envelope>()
        .with_test_time(CI_BUDGET)
        .with_shrink_time(SHRINK_TIME)
        .for_each(|envelope| check_bytes(&envelope.bytes()));
}

/// Strings and JSON values through `Content`, and messages built by modules.
#[test]
fn envelope_content_values() {
    check!()
        .with_type::<(String, Json, Word, Word)>()
        .with_test_time(CI_BUDGET / 2)
        .with_shrink_time(SHRINK_TIME)
        .for_each(|(text, json, group, resource)| {
            let string = Content::string(text);
            assert_eq!(string.as_string().as_deref(), Some(text.as_str()));
            assert_eq!(string.to_bytes(), text.as_bytes());
            let value = json.value(KEYS, WORDS);
            let content = Content::json(&value).expect("a Value serialises");
            // Equal up to float rounding (serde_json parses floats fast, not exactly).
            assert!(content.parse::<Value>().is_ok(), "own JSON parses");
            let raw = Content::from_raw(content.raw().to_owned()).expect("its own text is JSON");
            assert_eq!(raw, content);
            for content in [string, content] {
                check_content(&content);
                let msg = Message::build(
                    "fuzz",
                    &group.text(WORDS),
                    "update",
                    &resource.text(WORDS),
                    content,
                );
                check_bytes(&msg.to_vec());
            }
        });
}
