//! The algorithm against the spec's worked examples (§5.5) and KubeEdge's rules (§5.4).

use super::*;
use crate::wire::{parse_mapper_update, to_json};

const NOW: i64 = 1700000000500;

fn ids() -> impl FnMut() -> String {
    let mut n = 0;
    move || {
        n += 1;
        format!("fresh-{n}")
    }
}

fn value(v: &str, ts: i64) -> Option<TwinValue> {
    Some(TwinValue {
        value: Some(v.to_owned()),
        metadata: Some(ValueMetadata { timestamp: ts }),
    })
}

/// `default/thermo-1` before S1.
fn thermo() -> DeviceTwins {
    [(
        "temperature".to_owned(),
        StoredTwin {
            expected: value("25", 1700000000000),
            actual: value("20", 1700000000001),
            expected_version: Some(Version { cloud: 1, edge: 0 }),
            actual_version: Some(Version { cloud: 0, edge: 3 }),
            optional: true,
            attr_type: "int".into(),
        },
    )]
    .into()
}

fn request(json: &str) -> TwinMessage {
    parse_mapper_update(json.as_bytes()).unwrap()
}

#[test]
fn s1_produces_the_four_outputs_byte_for_byte() {
    let mut twins = thermo();
    let out = apply(
        &mut twins,
        &request(r#"{"event_id":"evt-1","timestamp":1700000000100,"twin":{"temperature":{"actual":{"value":"22"},"metadata":{"type":"int"}}}}"#),
        NOW,
        &mut ids(),
    )
    .unwrap();
    assert_eq!(
        to_json(&out.result),
        r#"{"event_id":"evt-1","timestamp":1700000000500,"twin":{"temperature":{"actual":{"value":"22","metadata":{"timestamp":1700000000500}},"optional":true,"metadata":{"type":"int"}}}}"#
    );
    assert_eq!(
        to_json(&out.document.unwrap()),
        r#"{"event_id":"evt-1","timestamp":1700000000500,"twin":{"temperature":{"last":{"expected":{"value":"25","metadata":{"timestamp":1700000000000}},"actual":{"value":"20","metadata":{"timestamp":1700000000001}},"optional":true,"metadata":{"type":"int"}},"current":{"expected":{"value":"25","metadata":{"timestamp":1700000000000}},"actual":{"value":"22","metadata":{"timestamp":1700000000500}},"optional":true,"metadata":{"type":"int"}}}}}"#
    );
    assert_eq!(
        to_json(&out.delta.unwrap()),
        r#"{"event_id":"fresh-1","timestamp":1700000000500,"twin":{"temperature":{"expected":{"value":"25","metadata":{"timestamp":1700000000000}},"actual":{"value":"22","metadata":{"timestamp":1700000000500}},"optional":true,"metadata":{"type":"int"}}},"delta":{"temperature":"25"}}"#
    );
    assert_eq!(
        to_json(&out.edge_updated.unwrap()),
        r#"{"event_id":"fresh-2","timestamp":1700000000500,"twin":{"temperature":{"actual":{"value":"22","metadata":{"timestamp":1700000000500}},"optional":true,"metadata":{"type":"int"},"actual_version":{"cloud":0,"edge":4}}}}"#
    );
    // Afterwards: actual 22, actual_version {0,4}, expected side untouched.
    let t = &twins["temperature"];
    assert_eq!(t.actual, value("22", NOW));
    assert_eq!(t.actual_version, Some(Version { cloud: 0, edge: 4 }));
    assert_eq!(t.expected, value("25", 1700000000000));
    assert_eq!(t.expected_version, Some(Version { cloud: 1, edge: 0 }));
    assert_eq!(out.changed, ["temperature"]);
}

#[test]
fn s2_wrong_type_is_refused_and_changes_nothing() {
    let mut twins = thermo();
    let rejection = apply(
        &mut twins,
        &request(r#"{"event_id":"evt-2","timestamp":1700000000200,"twin":{"temperature":{"actual":{"value":"hot"}}}}"#),
        NOW,
        &mut ids(),
    )
    .unwrap_err();
    assert!(rejection.on_device_topic);
    assert_eq!(
        to_json(&rejection.error),
        r#"{"event_id":"evt-2","timestamp":1700000000500,"code":400,"reason":"the value is not int or integer"}"#
    );
    assert_eq!(twins, thermo());
}

#[test]
fn one_bad_key_refuses_the_whole_update() {
    let mut twins = thermo();
    let rejection = apply(
        &mut twins,
        &request(r#"{"event_id":"e","twin":{"temperature":{"actual":{"value":"23"}},"bad key":{"actual":{"value":"1"}}}}"#),
        NOW,
        &mut ids(),
    )
    .unwrap_err();
    assert!(
        !rejection.on_device_topic,
        "syntax errors go to the empty-id topic"
    );
    assert_eq!(rejection.error.event_id, "");
    assert_eq!(rejection.error.reason, crate::validate::BAD_KEY);
    assert_eq!(twins, thermo());
    let rejection = apply(
        &mut twins,
        &request(r#"{"event_id":"e","twin":{"t":{"actual":{"value":"semi;colon"}}}}"#),
        NOW,
        &mut ids(),
    )
    .unwrap_err();
    assert_eq!(rejection.error.reason, crate::validate::BAD_VALUE);
}

#[test]
fn new_twins_start_at_edge_one_with_their_type() {
    let mut twins = DeviceTwins::new();
    let out = apply(
        &mut twins,
        &request(r#"{"event_id":"n","twin":{"humidity":{"actual":{"value":"40.5"},"metadata":{"type":"float"}},"label":{"actual":{"value":"west"}}}}"#),
        NOW,
        &mut ids(),
    )
    .unwrap();
    assert_eq!(twins["humidity"].attr_type, "float");
    assert_eq!(twins["label"].attr_type, "string");
    assert!(twins["label"].optional);
    assert_eq!(
        twins["humidity"].actual_version,
        Some(Version { cloud: 0, edge: 1 })
    );
    assert_eq!(twins["humidity"].expected_version, None);
    let doc = out.document.unwrap();
    assert_eq!(doc.twin["humidity"].last, None);
    // No desired values: no delta.
    assert!(out.delta.is_none());
    // A new twin's type comes from the request and is checked.
    let err = apply(
        &mut twins,
        &request(r#"{"event_id":"n","twin":{"count":{"actual":{"value":"x"},"metadata":{"type":"int"}}}}"#),
        NOW,
        &mut ids(),
    )
    .unwrap_err();
    assert_eq!(err.error.reason, "the value is not int or integer");
}

#[test]
fn deletion_needs_an_optional_twin_and_re_adding_resets_the_type() {
    let mut twins = thermo();
    twins.insert(
        "fixed".into(),
        StoredTwin {
            actual: value("1", 1),
            optional: false,
            attr_type: "int".into(),
            actual_version: Some(Version { cloud: 0, edge: 1 }),
            ..StoredTwin::default()
        },
    );
    let out = apply(
        &mut twins,
        &request(r#"{"event_id":"d","twin":{"temperature":null,"fixed":null}}"#),
        NOW,
        &mut ids(),
    )
    .unwrap();
    assert_eq!(
        to_json(&out.result),
        r#"{"event_id":"d","timestamp":1700000000500,"twin":{"temperature":null}}"#
    );
    let t = &twins["temperature"];
    assert_eq!(
        (t.attr_type.as_str(), &t.actual, &t.expected),
        (DELETED, &None, &None)
    );
    assert_eq!(t.actual_version, Some(Version { cloud: 0, edge: 4 }));
    assert_eq!(t.expected_version, Some(Version { cloud: 1, edge: 1 }));
    assert_eq!(
        to_json(&out.edge_updated.unwrap()),
        r#"{"event_id":"fresh-1","timestamp":1700000000500,"twin":{"temperature":{"expected":{},"actual":{},"optional":true,"metadata":{"type":"deleted"},"expected_version":{"cloud":1,"edge":1},"actual_version":{"cloud":0,"edge":4}}}}"#
    );
    assert!(out.document.unwrap().twin["temperature"].current.is_none());
    assert_eq!(
        twins["fixed"].attr_type, "int",
        "a non-optional twin is not deleted"
    );
    // Writing a deleted twin again without metadata makes it a string twin.
    apply(
        &mut twins,
        &request(r#"{"event_id":"r","twin":{"temperature":{"actual":{"value":"warm"}}}}"#),
        NOW,
        &mut ids(),
    )
    .unwrap();
    assert_eq!(twins["temperature"].attr_type, "string");
    // A live twin keeps its type when a request names another.
    apply(
        &mut twins,
        &request(r#"{"event_id":"t","twin":{"fixed":{"actual":{"value":"2"},"metadata":{"type":"string"}}}}"#),
        NOW,
        &mut ids(),
    )
    .unwrap();
    assert_eq!(twins["fixed"].attr_type, "int");
}

#[test]
fn deleting_a_reported_only_twin_leaves_its_desired_side_without_a_version() {
    // What edgecore v1.23.1 sends for this, seen against CloudCore v1.23.1: no `expected` key,
    // `expected_version` written as zeros, and no version stored for the desired side, so a
    // later desired write starts at edge 1.
    let mut twins = DeviceTwins::new();
    let report = r#"{"event_id":"a","twin":{"humidity":{"actual":{"value":"40"},"metadata":{"type":"int"}}}}"#;
    apply(&mut twins, &request(report), NOW, &mut ids()).unwrap();
    let out = apply(
        &mut twins,
        &request(r#"{"event_id":"d","twin":{"humidity":null}}"#),
        NOW,
        &mut ids(),
    )
    .unwrap();
    assert_eq!(
        to_json(&out.edge_updated.unwrap()),
        r#"{"event_id":"fresh-1","timestamp":1700000000500,"twin":{"humidity":{"actual":{},"optional":true,"metadata":{"type":"deleted"},"expected_version":{"cloud":0,"edge":0},"actual_version":{"cloud":0,"edge":2}}}}"#
    );
    let t = &twins["humidity"];
    assert_eq!(
        (t.expected_version, t.actual_version),
        (None, Some(Version { cloud: 0, edge: 2 }))
    );
    let out = apply(
        &mut twins,
        &request(r#"{"event_id":"e","twin":{"humidity":{"expected":{"value":"50"}}}}"#),
        NOW,
        &mut ids(),
    )
    .unwrap();
    assert_eq!(
        to_json(&out.edge_updated.unwrap()),
        r#"{"event_id":"fresh-2","timestamp":1700000000500,"twin":{"humidity":{"expected":{"value":"50","metadata":{"timestamp":1700000000500}},"optional":true,"metadata":{"type":"string"},"expected_version":{"cloud":0,"edge":1}}}}"#
    );
}

#[test]
fn deleting_a_desired_only_twin_reports_no_reported_version() {
    // edgecore v1.23.1 (seen against CloudCore v1.23.1) writes no `actual_version` here.
    let mut twins = DeviceTwins::new();
    let write =
        r#"{"event_id":"a","twin":{"flow":{"expected":{"value":"3"},"metadata":{"type":"int"}}}}"#;
    apply(&mut twins, &request(write), NOW, &mut ids()).unwrap();
    let out = apply(
        &mut twins,
        &request(r#"{"event_id":"d","twin":{"flow":null}}"#),
        NOW,
        &mut ids(),
    )
    .unwrap();
    assert_eq!(
        to_json(&out.edge_updated.unwrap()),
        r#"{"event_id":"fresh-1","timestamp":1700000000500,"twin":{"flow":{"expected":{},"optional":true,"metadata":{"type":"deleted"},"expected_version":{"cloud":0,"edge":2}}}}"#
    );
    assert_eq!(twins["flow"].actual_version, None);
}

#[test]
fn a_twin_without_any_version_is_not_deleted() {
    // Nothing was ever written to it: edgecore leaves it as it is and reports nothing.
    let mut twins: DeviceTwins = [(
        "spare".to_owned(),
        StoredTwin {
            optional: true,
            attr_type: "int".into(),
            ..StoredTwin::default()
        },
    )]
    .into();
    let before = twins.clone();
    let out = apply(
        &mut twins,
        &request(r#"{"event_id":"d","twin":{"spare":null}}"#),
        NOW,
        &mut ids(),
    )
    .unwrap();
    assert_eq!(
        to_json(&out.result),
        r#"{"event_id":"d","timestamp":1700000000500,"twin":{}}"#
    );
    assert!(out.edge_updated.is_none() && out.document.is_none());
    assert_eq!(twins, before);
}

#[test]
fn a_no_op_request_still_answers_and_publishes_the_delta() {
    let mut twins = thermo();
    let out = apply(
        &mut twins,
        &request(r#"{"event_id":"q","twin":{}}"#),
        NOW,
        &mut ids(),
    )
    .unwrap();
    assert_eq!(
        to_json(&out.result),
        r#"{"event_id":"q","timestamp":1700000000500,"twin":{}}"#
    );
    assert!(out.document.is_none() && out.edge_updated.is_none());
    assert_eq!(out.delta.unwrap().delta["temperature"], "25");
    assert_eq!(twins, thermo());
}

#[test]
fn optional_only_goes_from_true_to_false() {
    let mut twins = thermo();
    apply(
        &mut twins,
        &request(
            r#"{"event_id":"o","twin":{"temperature":{"actual":{"value":"21"},"optional":false}}}"#,
        ),
        NOW,
        &mut ids(),
    )
    .unwrap();
    assert!(!twins["temperature"].optional);
    apply(
        &mut twins,
        &request(
            r#"{"event_id":"o","twin":{"temperature":{"actual":{"value":"21"},"optional":true}}}"#,
        ),
        NOW,
        &mut ids(),
    )
    .unwrap();
    assert!(!twins["temperature"].optional);
}
