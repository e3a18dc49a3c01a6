//! Go's syntax limits, quoting and UTF-8 replacement (expected values produced with Go 1.19).

use super::*;

#[test]
fn nesting_limit_like_go() {
    let too_deep = "[".repeat(10_001);
    assert_eq!(
        read_event_id(too_deep.as_bytes()),
        Err(ReadError::Syntax {
            msg: "invalid character '[' exceeded max depth".into(),
            offset: 10_001
        })
    );
    let deep = "[".repeat(10_000);
    assert_eq!(
        read_event_id(deep.as_bytes()),
        Err(ReadError::Syntax {
            msg: "unexpected end of JSON input".into(),
            offset: 10_000
        })
    );
    // Deep values under other keys are skipped, whatever their depth.
    let body = format!(
        r#"{{"x":{}{},"event_id":"deep"}}"#,
        "[".repeat(5000),
        "]".repeat(5000)
    );
    assert_eq!(read_event_id(body.as_bytes()), Ok("deep".into()));
}

#[test]
fn go_quoting_of_scanner_messages() {
    assert_eq!(quote_char(b'a'), "'a'");
    assert_eq!(quote_char(b'\''), r"'\''");
    assert_eq!(quote_char(b'"'), r#"'"'"#);
    assert_eq!(quote_char(b'\\'), r"'\\'");
    assert_eq!(quote_char(b'\n'), r"'\n'");
    assert_eq!(quote_char(0x07), r"'\a'");
    assert_eq!(quote_char(0x7f), r"'\x7f'");
    assert_eq!(quote_char(0x9f), r"'\u009f'");
    assert_eq!(quote_char(0xa1), "'\u{a1}'");
    assert_eq!(go_quote(r"a'\x01'"), r#""a'\\x01'""#);
    assert_eq!(go_quote("'\"'"), r#""'\"'""#);
}

#[test]
fn go_lossy_replaces_each_bad_byte() {
    assert_eq!(go_lossy_utf8(b"ok"), "ok");
    assert_eq!(go_lossy_utf8(b"a\xe2\x82b"), "a\u{fffd}\u{fffd}b");
    assert_eq!(go_lossy_utf8(b"\xed\xa0\x80"), "\u{fffd}\u{fffd}\u{fffd}");
    assert_eq!(
        go_lossy_utf8("\u{e9}\u{1f600}".as_bytes()),
        "\u{e9}\u{1f600}"
    );
    assert_eq!(go_lossy_utf8(b"\xff"), "\u{fffd}");
}
