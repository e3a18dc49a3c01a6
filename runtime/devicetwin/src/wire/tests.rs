//! The spec's worked examples (§5.5), rebuilt from the wire types and compared byte for byte
//! (with `<now_ms>` = 1700000000500 and a fixed fresh id).

use super::*;

const NOW: i64 = 1700000000500;

fn value(v: &str, ts: i64) -> Option<TwinValue> {
    Some(TwinValue {
        value: Some(v.to_owned()),
        metadata: Some(ValueMetadata { timestamp: ts }),
    })
}

fn int_meta() -> Option<TypeMetadata> {
    Some(TypeMetadata { kind: "int".into() })
}

/// The stored twin of `default/thermo-1` before S1.
fn stored() -> Twin {
    Twin {
        expected: value("25", 1700000000000),
        actual: value("20", 1700000000001),
        optional: Some(true),
        metadata: int_meta(),
        expected_version: Some(Version { cloud: 1, edge: 0 }),
        actual_version: Some(Version { cloud: 0, edge: 3 }),
    }
}

#[test]
fn stored_twin_has_the_spec_layout() {
    assert_eq!(
        to_json(&stored()),
        r#"{"expected":{"value":"25","metadata":{"timestamp":1700000000000}},"actual":{"value":"20","metadata":{"timestamp":1700000000001}},"optional":true,"metadata":{"type":"int"},"expected_version":{"cloud":1,"edge":0},"actual_version":{"cloud":0,"edge":3}}"#
    );
}

#[test]
fn s1_request_parses() {
    let req = parse_mapper_update(
        br#"{"event_id":"evt-1","timestamp":1700000000100,"twin":{"temperature":{"actual":{"value":"22"},"metadata":{"type":"int"}}}}"#,
    )
    .unwrap();
    assert_eq!(req.event_id, "evt-1");
    let t = req.twin["temperature"].clone().unwrap();
    assert_eq!(t.actual.unwrap().value.as_deref(), Some("22"));
    assert_eq!(t.metadata.unwrap().kind, "int");
}

#[test]
fn s1_outputs_byte_for_byte() {
    let after = Twin {
        actual: value("22", NOW),
        actual_version: Some(Version { cloud: 0, edge: 4 }),
        ..stored()
    };
    let result = TwinMessage {
        event_id: "evt-1".into(),
        timestamp: NOW,
        twin: [(
            "temperature".to_owned(),
            Some(Twin {
                actual: value("22", NOW),
                optional: Some(true),
                metadata: int_meta(),
                ..Twin::default()
            }),
        )]
        .into(),
    };
    assert_eq!(
        to_json(&result),
        r#"{"event_id":"evt-1","timestamp":1700000000500,"twin":{"temperature":{"actual":{"value":"22","metadata":{"timestamp":1700000000500}},"optional":true,"metadata":{"type":"int"}}}}"#
    );
    let document = DocumentMessage {
        event_id: "evt-1".into(),
        timestamp: NOW,
        twin: [(
            "temperature".to_owned(),
            DocumentEntry {
                last: Some(stored().without_versions()),
                current: Some(after.without_versions()),
            },
        )]
        .into(),
    };
    assert_eq!(
        to_json(&document),
        r#"{"event_id":"evt-1","timestamp":1700000000500,"twin":{"temperature":{"last":{"expected":{"value":"25","metadata":{"timestamp":1700000000000}},"actual":{"value":"20","metadata":{"timestamp":1700000000001}},"optional":true,"metadata":{"type":"int"}},"current":{"expected":{"value":"25","metadata":{"timestamp":1700000000000}},"actual":{"value":"22","metadata":{"timestamp":1700000000500}},"optional":true,"metadata":{"type":"int"}}}}}"#
    );
    let delta = DeltaMessage {
        event_id: "0b3f7c1e-1111-4222-8333-444455556666".into(),
        timestamp: NOW,
        twin: [("temperature".to_owned(), after.without_versions())].into(),
        delta: [("temperature".to_owned(), "25".to_owned())].into(),
    };
    assert_eq!(
        to_json(&delta),
        r#"{"event_id":"0b3f7c1e-1111-4222-8333-444455556666","timestamp":1700000000500,"twin":{"temperature":{"expected":{"value":"25","metadata":{"timestamp":1700000000000}},"actual":{"value":"22","metadata":{"timestamp":1700000000500}},"optional":true,"metadata":{"type":"int"}}},"delta":{"temperature":"25"}}"#
    );
    let edge_updated = TwinMessage {
        event_id: "0b3f7c1e-1111-4222-8333-444455556666".into(),
        timestamp: NOW,
        twin: [(
            "temperature".to_owned(),
            Some(Twin {
                actual: value("22", NOW),
                optional: Some(true),
                metadata: int_meta(),
                actual_version: Some(Version { cloud: 0, edge: 4 }),
                ..Twin::default()
            }),
        )]
        .into(),
    };
    assert_eq!(
        to_json(&edge_updated),
        r#"{"event_id":"0b3f7c1e-1111-4222-8333-444455556666","timestamp":1700000000500,"twin":{"temperature":{"actual":{"value":"22","metadata":{"timestamp":1700000000500}},"optional":true,"metadata":{"type":"int"},"actual_version":{"cloud":0,"edge":4}}}}"#
    );
}

#[test]
fn s2_error_result_byte_for_byte() {
    let error = ErrorMessage {
        event_id: "evt-2".into(),
        timestamp: NOW,
        code: 400,
        reason: "the value is not int or integer".into(),
    };
    assert_eq!(
        to_json(&error),
        r#"{"event_id":"evt-2","timestamp":1700000000500,"code":400,"reason":"the value is not int or integer"}"#
    );
}

#[test]
fn deletions_and_empty_results() {
    let result = TwinMessage {
        event_id: "e".into(),
        timestamp: NOW,
        twin: [("gone".to_owned(), None)].into(),
    };
    assert_eq!(
        to_json(&result),
        r#"{"event_id":"e","timestamp":1700000000500,"twin":{"gone":null}}"#
    );
    let nothing = TwinMessage {
        event_id: "e".into(),
        timestamp: NOW,
        twin: BTreeMap::new(),
    };
    assert_eq!(
        to_json(&nothing),
        r#"{"event_id":"e","timestamp":1700000000500,"twin":{}}"#
    );
    let doc = DocumentMessage {
        event_id: String::new(),
        timestamp: NOW,
        twin: [("k".to_owned(), DocumentEntry::default())].into(),
    };
    assert_eq!(
        to_json(&doc),
        r#"{"event_id":"","timestamp":1700000000500,"twin":{"k":{"last":null,"current":null}}}"#
    );
}

#[test]
fn refused_bodies_get_kubeedge_reasons() {
    for bad in [
        &b"not json"[..],
        br#"{"twin":{"t":{"actual":{"value":22}}}}"#,
        br#"{"event_id":5,"twin":{}}"#,
    ] {
        assert_eq!(
            parse_mapper_update(bad),
            Err(crate::validate::UNMARSHAL_MAPPER)
        );
        assert_eq!(
            parse_cloud_update(bad),
            Err(crate::validate::UNMARSHAL_CLOUD)
        );
    }
    for missing in [
        &br#"{"event_id":"x"}"#[..],
        br#"{"event_id":"x","twin":null}"#,
    ] {
        assert_eq!(
            parse_mapper_update(missing),
            Err(crate::validate::TWIN_MISSING)
        );
    }
    let deletion = parse_mapper_update(br#"{"event_id":"x","twin":{"t":null}}"#).unwrap();
    assert_eq!(deletion.twin["t"], None);
}
