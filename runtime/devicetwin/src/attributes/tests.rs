//! Attribute merges and their notices (§5.6, KubeEdge's rules for deal type 0).

use super::*;
use crate::device::DeviceRecord;

const NOW: i64 = 1700000000123;
const ID: &str = "default/thermo-1";
const TOPIC: &str = "$hw/events/device/default/thermo-1/updated";

fn attr(value: &str, optional: bool, attr_type: &str) -> StoredAttr {
    StoredAttr {
        description: "about it".into(),
        value: value.into(),
        optional,
        attr_type: attr_type.into(),
    }
}

/// `unit` (optional string), `serial` (required string), `rate` (optional int).
fn devices() -> Devices {
    let device = DeviceRecord {
        id: ID.into(),
        name: "thermo-1".into(),
        attributes: [
            ("unit".to_owned(), attr("celsius", true, "string")),
            ("serial".to_owned(), attr("A-1", false, "string")),
            ("rate".to_owned(), attr("10", true, "int")),
        ]
        .into(),
        ..DeviceRecord::default()
    };
    [(ID.to_owned(), device)].into()
}

fn run(devices: &mut Devices, body: &str) -> Effects {
    let mut never = || -> String { unreachable!("attribute notices echo the request's event_id") };
    update(devices, ID, body.as_bytes(), NOW, &mut never)
}

fn put(name: &str, a: StoredAttr) -> RowChange {
    RowChange::PutAttr {
        device: ID.into(),
        name: name.into(),
        attr: a,
    }
}

#[test]
fn add_update_and_delete_in_one_request() {
    let mut devices = devices();
    let effects = run(
        &mut devices,
        r#"{"event_id":"e1","timestamp":1,"attributes":{"unit":{"value":"kelvin"},"unit2":null,"serial":null,"rate":null,"color":{"value":"red","metadata":{"type":"string"}}}}"#,
    );
    assert_eq!(
        effects.rows,
        vec![
            put(
                "color",
                StoredAttr {
                    description: String::new(),
                    value: "red".into(),
                    optional: true,
                    attr_type: "string".into()
                }
            ),
            RowChange::DeleteAttr {
                device: ID.into(),
                name: "rate".into()
            },
            put("unit", attr("kelvin", true, "string")),
        ]
    );
    assert_eq!(effects.publish.len(), 1);
    assert_eq!(effects.publish[0].topic, TOPIC);
    assert_eq!(
        effects.publish[0].payload,
        r#"{"event_id":"e1","timestamp":1700000000123,"attributes":{"color":{"value":"red","metadata":{"type":"string"}},"rate":null,"unit":{"value":"kelvin"}}}"#
    );
    assert!(effects.cloud.is_empty());
    let attrs = &devices[ID].attributes;
    assert_eq!(
        attrs.keys().collect::<Vec<_>>(),
        ["color", "serial", "unit"]
    );
    // The required attribute survived its `null`.
    assert_eq!(attrs["serial"], attr("A-1", false, "string"));
}

#[test]
fn changed_attribute_lists_only_what_changed_with_value_always_written() {
    let mut devices = devices();
    let effects = run(
        &mut devices,
        r#"{"event_id":"e2","attributes":{"rate":{"value":"10","optional":false,"metadata":{"type":"float"}}}}"#,
    );
    assert_eq!(effects.rows, vec![put("rate", attr("10", false, "float"))]);
    assert_eq!(
        effects.publish[0].payload,
        r#"{"event_id":"e2","timestamp":1700000000123,"attributes":{"rate":{"value":"","optional":false,"metadata":{"type":"float"}}}}"#
    );
}

#[test]
fn optional_only_goes_from_true_to_false() {
    let mut devices = devices();
    let effects = run(
        &mut devices,
        r#"{"attributes":{"serial":{"value":"A-1","optional":true},"unit":{"value":"celsius","optional":true}}}"#,
    );
    assert_eq!(effects, Effects::default());
    assert_eq!(devices, self::devices());
}

#[test]
fn nothing_changed_publishes_nothing() {
    let mut devices = devices();
    let effects = run(
        &mut devices,
        r#"{"event_id":"e3","attributes":{"unit":{"value":"celsius","metadata":{"type":"string"}}}}"#,
    );
    assert_eq!(effects, Effects::default());
}

#[test]
fn a_missing_value_is_the_empty_value_as_in_kubeedge() {
    let mut devices = devices();
    let effects = run(
        &mut devices,
        r#"{"attributes":{"unit":{"optional":false}}}"#,
    );
    assert_eq!(effects.rows, vec![put("unit", attr("", false, "string"))]);
    assert_eq!(
        effects.publish[0].payload,
        r#"{"event_id":"","timestamp":1700000000123,"attributes":{"unit":{"value":"","optional":false}}}"#
    );
}

#[test]
fn new_attribute_defaults_and_echo() {
    let mut devices = devices();
    let effects = run(
        &mut devices,
        r#"{"event_id":"e4","attributes":{"a":{"value":"1"},"b":{"value":"2","optional":false,"metadata":{}},"c":{"value":"3","metadata":{"type":"int"}}}}"#,
    );
    let new = |value: &str, optional, attr_type: &str| StoredAttr {
        description: String::new(),
        value: value.into(),
        optional,
        attr_type: attr_type.into(),
    };
    assert_eq!(
        effects.rows,
        vec![
            put("a", new("1", true, "string")),
            // Metadata without a type stores an empty type, as KubeEdge does.
            put("b", new("2", false, "")),
            put("c", new("3", true, "int")),
        ]
    );
    assert_eq!(
        effects.publish[0].payload,
        r#"{"event_id":"e4","timestamp":1700000000123,"attributes":{"a":{"value":"1"},"b":{"value":"2","optional":false,"metadata":{}},"c":{"value":"3","metadata":{"type":"int"}}}}"#
    );
}

#[test]
fn deleting_an_unknown_attribute_is_a_no_op() {
    let mut devices = devices();
    assert_eq!(
        run(&mut devices, r#"{"attributes":{"ghost":null}}"#),
        Effects::default()
    );
}

#[test]
fn unreadable_bodies_and_unknown_devices_change_nothing() {
    for body in [
        "",
        "{",
        "[]",
        r#"{"attributes":[]}"#,
        r#"{"attributes":{"unit":{"value":1}}}"#,
        r#"{"attributes":{"unit":{"value":"x","optional":"yes"}}}"#,
        r#"{"event_id":5,"attributes":{"unit":{"value":"x"}}}"#,
        r#"{"attributes":null}"#,
        r#"{}"#,
    ] {
        let mut devices = devices();
        assert_eq!(run(&mut devices, body), Effects::default(), "{body}");
        assert_eq!(devices, self::devices(), "{body}");
    }
    let mut devices = devices();
    let mut never = || -> String { unreachable!() };
    let effects = update(
        &mut devices,
        "default/ghost",
        br#"{"attributes":{"unit":{"value":"x"}}}"#,
        NOW,
        &mut never,
    );
    assert_eq!(effects, Effects::default());
    assert_eq!(devices, self::devices());
}

#[test]
fn nulls_inside_attributes_read_as_absent() {
    let mut devices = devices();
    let effects = run(
        &mut devices,
        r#"{"attributes":{"n":{"value":null,"optional":null,"metadata":{"type":null}}}}"#,
    );
    assert_eq!(
        effects.publish[0].payload,
        r#"{"event_id":"","timestamp":1700000000123,"attributes":{"n":{"value":"","metadata":{}}}}"#
    );
}

#[test]
fn bytes_that_are_not_utf8_are_replaced_one_by_one() {
    let mut devices = devices();
    let effects = update(
        &mut devices,
        ID,
        b"{\"attributes\":{\"unit\":{\"value\":\"a\xe2\x82b\"}}}",
        NOW,
        &mut || unreachable!(),
    );
    assert_eq!(devices[ID].attributes["unit"].value, "a\u{fffd}\u{fffd}b");
    assert_eq!(effects.rows.len(), 1);
}
