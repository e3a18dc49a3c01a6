//! Twin get (§5.6, §5.3): results, 404 and the Go-compatible 400 reasons.

use super::*;
use crate::device::DeviceRecord;
use crate::effects::Publish;
use crate::mapper_update::StoredTwin;
use crate::wire::{TwinValue, ValueMetadata, Version};

const NOW: i64 = 1700000000500;
const ID: &str = "default/thermo-1";
const TOPIC: &str = "$hw/events/device/default/thermo-1/twin/get/result";

fn value(v: &str, ts: i64) -> Option<TwinValue> {
    Some(TwinValue {
        value: Some(v.to_owned()),
        metadata: Some(ValueMetadata { timestamp: ts }),
    })
}

/// `temperature` (both sides, versioned), `mode` (reported only), `old` (deleted).
fn devices() -> Devices {
    let twins = [
        (
            "temperature".to_owned(),
            StoredTwin {
                expected: value("25", 1700000000000),
                actual: value("20", 1700000000001),
                expected_version: Some(Version { cloud: 1, edge: 0 }),
                actual_version: Some(Version { cloud: 0, edge: 3 }),
                optional: true,
                attr_type: "int".into(),
            },
        ),
        (
            "mode".to_owned(),
            StoredTwin {
                actual: value("eco", 1700000000002),
                actual_version: Some(Version { cloud: 0, edge: 1 }),
                optional: false,
                attr_type: "string".into(),
                ..StoredTwin::default()
            },
        ),
        (
            "old".to_owned(),
            StoredTwin {
                expected_version: Some(Version { cloud: 2, edge: 0 }),
                actual_version: Some(Version { cloud: 0, edge: 2 }),
                optional: true,
                attr_type: DELETED.into(),
                ..StoredTwin::default()
            },
        ),
    ]
    .into();
    let device = DeviceRecord {
        id: ID.into(),
        name: "thermo-1".into(),
        twins,
        ..DeviceRecord::default()
    };
    [(ID.to_owned(), device)].into()
}

fn only(payload: &str) -> Effects {
    Effects {
        publish: vec![Publish {
            topic: TOPIC.into(),
            payload: payload.into(),
        }],
        ..Effects::default()
    }
}

#[test]
fn live_twins_without_versions_and_the_event_id_echoed() {
    let effects = get(&devices(), ID, br#"{"event_id":"g-1","timestamp":1}"#, NOW);
    assert_eq!(
        effects,
        only(
            r#"{"event_id":"g-1","timestamp":1700000000500,"twin":{"mode":{"actual":{"value":"eco","metadata":{"timestamp":1700000000002}},"optional":false,"metadata":{"type":"string"}},"temperature":{"expected":{"value":"25","metadata":{"timestamp":1700000000000}},"actual":{"value":"20","metadata":{"timestamp":1700000000001}},"optional":true,"metadata":{"type":"int"}}}}"#
        )
    );
}

#[test]
fn a_device_without_twins_gets_an_empty_map() {
    let mut devices = devices();
    devices.get_mut(ID).unwrap().twins.clear();
    assert_eq!(
        get(&devices, ID, br#"{"event_id":"g-2"}"#, NOW),
        only(r#"{"event_id":"g-2","timestamp":1700000000500,"twin":{}}"#)
    );
}

#[test]
fn legacy_single_segment_ids_are_echoed() {
    let mut devices = devices();
    let record = devices.remove(ID).unwrap();
    devices.insert("dev-1".into(), record);
    let effects = get(&devices, "dev-1", b"{}", NOW);
    assert_eq!(
        effects.publish[0].topic,
        "$hw/events/device/dev-1/twin/get/result"
    );
}

#[test]
fn unknown_device_is_404_with_the_event_id() {
    assert_eq!(
        get(&devices(), "default/ghost", br#"{"event_id":"g-3"}"#, NOW),
        Effects::publish_only(
            "$hw/events/device/default/ghost/twin/get/result".into(),
            r#"{"event_id":"g-3","timestamp":1700000000500,"code":404,"reason":"Device default/ghost not found while getting twin"}"#.into()
        )
    );
}

#[test]
fn unreadable_body_is_400_without_event_id_even_for_unknown_devices() {
    assert_eq!(
        get(&devices(), ID, b"hello", NOW),
        only(
            r#"{"event_id":"","timestamp":1700000000500,"code":400,"reason":"Unmarshal twin info hello failed , err: &json.SyntaxError{msg:\"invalid character 'h' looking for beginning of value\", Offset:1}"}"#
        )
    );
    let effects = get(&devices(), "default/ghost", br#"{"event_id":7}"#, NOW);
    assert_eq!(
        effects.publish[0].payload,
        r#"{"event_id":"","timestamp":1700000000500,"code":400,"reason":"Unmarshal twin info {\"event_id\":7} failed , err: json: cannot unmarshal number into Go struct field BaseMessage.event_id of type string"}"#
    );
}

/// Bodies and what Go's `encoding/json` (1.19) makes of them, generated with Go itself:
/// `Ok(event_id)`, or `Err(reason)` with KubeEdge's wording around Go's error. Syntax errors
/// are Go's `%#v` verbatim; type errors are Go's `Error()` text (see the module docs).
const GO_CASES: &[(&[u8], Result<&str, &str>)] = &[
    (
        b"",
        Err(
            "Unmarshal twin info  failed , err: &json.SyntaxError{msg:\"unexpected end of JSON input\", Offset:0}",
        ),
    ),
    (
        b"hello",
        Err(
            "Unmarshal twin info hello failed , err: &json.SyntaxError{msg:\"invalid character 'h' looking for beginning of value\", Offset:1}",
        ),
    ),
    (
        b"{\"event_id\":\"e1\"",
        Err(
            "Unmarshal twin info {\"event_id\":\"e1\" failed , err: &json.SyntaxError{msg:\"unexpected end of JSON input\", Offset:16}",
        ),
    ),
    (
        b"{\"event_id\":\"e1\",}",
        Err(
            "Unmarshal twin info {\"event_id\":\"e1\",} failed , err: &json.SyntaxError{msg:\"invalid character '}' looking for beginning of object key string\", Offset:18}",
        ),
    ),
    (
        b"{\"a\":tru}",
        Err(
            "Unmarshal twin info {\"a\":tru} failed , err: &json.SyntaxError{msg:\"invalid character '}' in literal true (expecting 'e')\", Offset:9}",
        ),
    ),
    (
        b"tru",
        Err(
            "Unmarshal twin info tru failed , err: &json.SyntaxError{msg:\"invalid character ' ' in literal true (expecting 'e')\", Offset:3}",
        ),
    ),
    (
        b"1 2",
        Err(
            "Unmarshal twin info 1 2 failed , err: &json.SyntaxError{msg:\"invalid character '2' after top-level value\", Offset:3}",
        ),
    ),
    (
        b"-",
        Err(
            "Unmarshal twin info - failed , err: &json.SyntaxError{msg:\"invalid character ' ' in numeric literal\", Offset:1}",
        ),
    ),
    (
        b"01",
        Err(
            "Unmarshal twin info 01 failed , err: &json.SyntaxError{msg:\"invalid character '1' after top-level value\", Offset:2}",
        ),
    ),
    (
        b"[1,]",
        Err(
            "Unmarshal twin info [1,] failed , err: &json.SyntaxError{msg:\"invalid character ']' looking for beginning of value\", Offset:4}",
        ),
    ),
    (
        b"{\"a\" \"b\"}",
        Err(
            "Unmarshal twin info {\"a\" \"b\"} failed , err: &json.SyntaxError{msg:\"invalid character '\\\"' after object key\", Offset:6}",
        ),
    ),
    (
        b"\x01",
        Err(
            "Unmarshal twin info \u{1} failed , err: &json.SyntaxError{msg:\"invalid character '\\\\x01' looking for beginning of value\", Offset:1}",
        ),
    ),
    (
        b"\xe9",
        Err(
            "Unmarshal twin info \u{fffd} failed , err: &json.SyntaxError{msg:\"invalid character '\u{e9}' looking for beginning of value\", Offset:1}",
        ),
    ),
    (
        b"\x80",
        Err(
            "Unmarshal twin info \u{fffd} failed , err: &json.SyntaxError{msg:\"invalid character '\\\\u0080' looking for beginning of value\", Offset:1}",
        ),
    ),
    (
        b"\xa0",
        Err(
            "Unmarshal twin info \u{fffd} failed , err: &json.SyntaxError{msg:\"invalid character '\\\\u00a0' looking for beginning of value\", Offset:1}",
        ),
    ),
    (
        b"\xad",
        Err(
            "Unmarshal twin info \u{fffd} failed , err: &json.SyntaxError{msg:\"invalid character '\\\\u00ad' looking for beginning of value\", Offset:1}",
        ),
    ),
    (
        b"\xff",
        Err(
            "Unmarshal twin info \u{fffd} failed , err: &json.SyntaxError{msg:\"invalid character '\u{ff}' looking for beginning of value\", Offset:1}",
        ),
    ),
    (
        b"{\"a\":1}x",
        Err(
            "Unmarshal twin info {\"a\":1}x failed , err: &json.SyntaxError{msg:\"invalid character 'x' after top-level value\", Offset:8}",
        ),
    ),
    (
        b"{\"a\":\"\x1f\"}",
        Err(
            "Unmarshal twin info {\"a\":\"\u{1f}\"} failed , err: &json.SyntaxError{msg:\"invalid character '\\\\x1f' in string literal\", Offset:7}",
        ),
    ),
    (
        b"\"\\x\"",
        Err(
            "Unmarshal twin info \"\\x\" failed , err: &json.SyntaxError{msg:\"invalid character 'x' in string escape code\", Offset:3}",
        ),
    ),
    (
        b"\"\\u12g4\"",
        Err(
            "Unmarshal twin info \"\\u12g4\" failed , err: &json.SyntaxError{msg:\"invalid character 'g' in \\\\u hexadecimal character escape\", Offset:6}",
        ),
    ),
    (
        b"1.",
        Err(
            "Unmarshal twin info 1. failed , err: &json.SyntaxError{msg:\"invalid character ' ' after decimal point in numeric literal\", Offset:2}",
        ),
    ),
    (
        b"1e",
        Err(
            "Unmarshal twin info 1e failed , err: &json.SyntaxError{msg:\"invalid character ' ' in exponent of numeric literal\", Offset:2}",
        ),
    ),
    (
        b"1e+",
        Err(
            "Unmarshal twin info 1e+ failed , err: &json.SyntaxError{msg:\"invalid character ' ' in exponent of numeric literal\", Offset:3}",
        ),
    ),
    (
        b".5",
        Err(
            "Unmarshal twin info .5 failed , err: &json.SyntaxError{msg:\"invalid character '.' looking for beginning of value\", Offset:1}",
        ),
    ),
    (
        b"{\"event_id\":1}",
        Err(
            "Unmarshal twin info {\"event_id\":1} failed , err: json: cannot unmarshal number into Go struct field BaseMessage.event_id of type string",
        ),
    ),
    (
        b"[]",
        Err(
            "Unmarshal twin info [] failed , err: json: cannot unmarshal array into Go value of type dttype.BaseMessage",
        ),
    ),
    (
        b"{\"timestamp\":1.5}",
        Err(
            "Unmarshal twin info {\"timestamp\":1.5} failed , err: json: cannot unmarshal number 1.5 into Go struct field BaseMessage.timestamp of type int64",
        ),
    ),
    (
        b"\"str\"",
        Err(
            "Unmarshal twin info \"str\" failed , err: json: cannot unmarshal string into Go value of type dttype.BaseMessage",
        ),
    ),
    (
        b"true",
        Err(
            "Unmarshal twin info true failed , err: json: cannot unmarshal bool into Go value of type dttype.BaseMessage",
        ),
    ),
    (
        b"12",
        Err(
            "Unmarshal twin info 12 failed , err: json: cannot unmarshal number into Go value of type dttype.BaseMessage",
        ),
    ),
    (
        b"{\"timestamp\":\"x\"}",
        Err(
            "Unmarshal twin info {\"timestamp\":\"x\"} failed , err: json: cannot unmarshal string into Go struct field BaseMessage.timestamp of type int64",
        ),
    ),
    (
        b"{\"event_id\":{}}",
        Err(
            "Unmarshal twin info {\"event_id\":{}} failed , err: json: cannot unmarshal object into Go struct field BaseMessage.event_id of type string",
        ),
    ),
    (
        b"{\"event_id\":[1]}",
        Err(
            "Unmarshal twin info {\"event_id\":[1]} failed , err: json: cannot unmarshal array into Go struct field BaseMessage.event_id of type string",
        ),
    ),
    (
        b"{\"event_id\":true}",
        Err(
            "Unmarshal twin info {\"event_id\":true} failed , err: json: cannot unmarshal bool into Go struct field BaseMessage.event_id of type string",
        ),
    ),
    (
        b"{\"timestamp\":99999999999999999999}",
        Err(
            "Unmarshal twin info {\"timestamp\":99999999999999999999} failed , err: json: cannot unmarshal number 99999999999999999999 into Go struct field BaseMessage.timestamp of type int64",
        ),
    ),
    (
        b"{\"timestamp\":1e3}",
        Err(
            "Unmarshal twin info {\"timestamp\":1e3} failed , err: json: cannot unmarshal number 1e3 into Go struct field BaseMessage.timestamp of type int64",
        ),
    ),
    (b"{\"timestamp\":-0}", Ok("")),
    (b"null", Ok("")),
    (b"{\"EVENT_ID\":\"up\"}", Ok("up")),
    (b"{\"event_id\":\"a\",\"Event_Id\":\"b\"}", Ok("b")),
    (
        b"{\"event_id\":\"a\\u00e9\\ud83d\\ude00\\ud800x\\udc00\\ud800\\u0041\"}",
        Ok("a\u{e9}\u{1f600}\u{fffd}x\u{fffd}\u{fffd}A"),
    ),
    (b"{\"event_id\":\"a\xe2\x82b\"}", Ok("a\u{fffd}\u{fffd}b")),
    (
        b"{\"time\xc5\xbftamp\":\"x\"}",
        Err(
            "Unmarshal twin info {\"time\u{17f}tamp\":\"x\"} failed , err: json: cannot unmarshal string into Go struct field BaseMessage.timestamp of type int64",
        ),
    ),
    (b"{\"event_id\":null}", Ok("")),
    (b"{\"x\":[{\"event_id\":1}],\"event_id\":\"ok\"}", Ok("ok")),
    (
        b"{\"event_id\":\"q\\\"\\\\\\/\\b\\f\\n\\r\\t\"}",
        Ok("q\"\\/\u{8}\u{c}\u{a}\u{d}\u{9}"),
    ),
    (b"{}", Ok("")),
    (b" {\"event_id\" : \"s\" } ", Ok("s")),
    (
        b"{\"a\":fals}",
        Err(
            "Unmarshal twin info {\"a\":fals} failed , err: &json.SyntaxError{msg:\"invalid character '}' in literal false (expecting 'e')\", Offset:10}",
        ),
    ),
    (
        b"{\"a\":nul}",
        Err(
            "Unmarshal twin info {\"a\":nul} failed , err: &json.SyntaxError{msg:\"invalid character '}' in literal null (expecting 'l')\", Offset:9}",
        ),
    ),
    (
        b"{\"a\":n}",
        Err(
            "Unmarshal twin info {\"a\":n} failed , err: &json.SyntaxError{msg:\"invalid character '}' in literal null (expecting 'u')\", Offset:7}",
        ),
    ),
    (
        b"[1}",
        Err(
            "Unmarshal twin info [1} failed , err: &json.SyntaxError{msg:\"invalid character '}' after array element\", Offset:3}",
        ),
    ),
    (
        b"{\"a\":1]",
        Err(
            "Unmarshal twin info {\"a\":1] failed , err: &json.SyntaxError{msg:\"invalid character ']' after object key:value pair\", Offset:7}",
        ),
    ),
    (
        b"{1:2}",
        Err(
            "Unmarshal twin info {1:2} failed , err: &json.SyntaxError{msg:\"invalid character '1' looking for beginning of object key string\", Offset:2}",
        ),
    ),
    (
        b"\\",
        Err(
            "Unmarshal twin info \\ failed , err: &json.SyntaxError{msg:\"invalid character '\\\\\\\\' looking for beginning of value\", Offset:1}",
        ),
    ),
    (
        b"'",
        Err(
            "Unmarshal twin info ' failed , err: &json.SyntaxError{msg:\"invalid character '\\\\'' looking for beginning of value\", Offset:1}",
        ),
    ),
    (
        b"<&>",
        Err(
            "Unmarshal twin info <&> failed , err: &json.SyntaxError{msg:\"invalid character '<' looking for beginning of value\", Offset:1}",
        ),
    ),
];

#[test]
fn reasons_and_event_ids_match_go() {
    for (body, expected) in GO_CASES {
        let effects = get(&devices(), ID, body, NOW);
        let published: ErrorMessage = serde_json::from_str(&effects.publish[0].payload).unwrap();
        let shown = String::from_utf8_lossy(body);
        match expected {
            Ok(event_id) => assert_eq!(published.event_id, *event_id, "{shown}"),
            Err(reason) => {
                assert_eq!(published.code, 400, "{shown}");
                assert_eq!(published.event_id, "", "{shown}");
                assert_eq!(published.reason, *reason, "{shown}");
            }
        }
    }
}
