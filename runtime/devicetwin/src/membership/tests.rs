//! Membership update, detail and get, with every publish compared byte for byte.

use super::*;
use crate::device::{DeviceRecord, StoredAttr};
use crate::effects::DesiredValue;
use crate::mapper_update::StoredTwin;
use crate::wire::{TwinValue, ValueMetadata, Version};

const NOW: i64 = 1700000000500;
const NODE: &str = "edge-1";
const THERMO: &str = "default/thermo-1";
const OLD: &str = "default/old";
const MEMBERSHIP_UPDATED: &str = "$hw/events/node/edge-1/membership/updated";

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

fn attr(value: &str) -> StoredAttr {
    StoredAttr {
        description: String::new(),
        value: value.into(),
        optional: true,
        attr_type: "string".into(),
    }
}

fn devices() -> Devices {
    let thermo = DeviceRecord {
        id: THERMO.into(),
        name: "thermo-1".into(),
        description: String::new(),
        state: "online".into(),
        last_online: "2023-11-14T22:13:20Z".into(),
        attributes: [
            ("serial".to_owned(), attr("s1")),
            ("unit".to_owned(), attr("celsius")),
        ]
        .into(),
        twins: [(
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
        .into(),
    };
    let old = DeviceRecord {
        id: OLD.into(),
        name: "old".into(),
        state: "unknown".into(),
        ..DeviceRecord::default()
    };
    [(THERMO.to_owned(), thermo), (OLD.to_owned(), old)].into()
}

fn published(effects: &Effects) -> Vec<(&str, &str)> {
    effects
        .publish
        .iter()
        .map(|p| (p.topic.as_str(), p.payload.as_str()))
        .collect()
}

#[test]
fn a_new_device_joins_with_its_twins_synced_and_is_announced_as_received() {
    let mut devices = devices();
    let effects = update(
        &mut devices,
        NODE,
        br#"{"event_id":"mem-1","timestamp":1700000000100,"added_devices":[{"id":"default/valve-1","name":"valve-1","description":"inlet","state":"unknown","attributes":{"model":{"value":"v2","optional":false,"metadata":{"type":"string"}}},"twin":{"open":{"expected":{"value":"true"},"optional":true,"metadata":{"type":"boolean"},"expected_version":{"cloud":1,"edge":0}},"old":{"metadata":{"type":"deleted"},"expected_version":{"cloud":2,"edge":0}}}}],"removed_devices":null}"#,
        NOW,
        &mut ids(),
    );
    assert_eq!(
        published(&effects),
        [
            (
                "$hw/events/device/default/valve-1/twin/update/document",
                r#"{"event_id":"","timestamp":1700000000500,"twin":{"old":{"last":null,"current":null},"open":{"last":null,"current":{"expected":{"value":"true","metadata":{"timestamp":1700000000500}},"optional":true,"metadata":{"type":"boolean"}}}}}"#
            ),
            (
                "$hw/events/device/default/valve-1/twin/update/delta",
                r#"{"event_id":"fresh-1","timestamp":1700000000500,"twin":{"open":{"expected":{"value":"true","metadata":{"timestamp":1700000000500}},"optional":true,"metadata":{"type":"boolean"}}},"delta":{"open":"true"}}"#
            ),
            (
                "$hw/events/device/default/valve-1/updated",
                r#"{"event_id":"","timestamp":1700000000500,"attributes":{"model":{"value":"v2","optional":false,"metadata":{"type":"string"}}}}"#
            ),
            (
                MEMBERSHIP_UPDATED,
                r#"{"event_id":"fresh-2","timestamp":1700000000500,"added_devices":[{"id":"default/valve-1","name":"valve-1","description":"inlet","state":"unknown","attributes":{"model":{"value":"v2","optional":false,"metadata":{"type":"string"}}},"twin":{"old":null,"open":{"expected":{"value":"true"},"optional":true,"metadata":{"type":"boolean"}}}}],"removed_devices":null}"#
            ),
        ]
    );
    let valve = &devices["default/valve-1"];
    assert_eq!(effects.rows, [RowChange::PutDevice(valve.clone())]);
    assert_eq!(
        (
            valve.name.as_str(),
            valve.description.as_str(),
            valve.state.as_str()
        ),
        ("valve-1", "inlet", "unknown")
    );
    assert_eq!(valve.last_online, "");
    assert_eq!(
        valve.attributes["model"],
        StoredAttr {
            description: String::new(),
            value: "v2".into(),
            optional: false,
            attr_type: "string".into(),
        }
    );
    assert_eq!(
        valve.twins["open"],
        StoredTwin {
            expected: value("true", NOW),
            expected_version: Some(Version { cloud: 1, edge: 0 }),
            optional: true,
            attr_type: "boolean".into(),
            ..StoredTwin::default()
        }
    );
    assert_eq!(valve.twins["old"].attr_type, "deleted");
    assert_eq!(
        effects.desired,
        [DesiredValue {
            device: "default/valve-1".into(),
            key: "open".into(),
            value: "true".into(),
            value_type: "boolean".into(),
        }]
    );
    assert!(effects.cloud.is_empty());
    assert!(removed_ids(&effects).is_empty());
}

#[test]
fn a_known_device_is_synced_not_announced() {
    let mut devices = devices();
    let effects = update(
        &mut devices,
        NODE,
        br#"{"event_id":"mem-2","timestamp":1,"added_devices":[{"id":"default/thermo-1","name":"renamed","attributes":{"unit":{"value":"fahrenheit"},"range":{"value":"0-100"}},"twin":{"temperature":{"expected":{"value":"77"},"expected_version":{"cloud":2,"edge":0},"actual":{"value":"68"}}}}]}"#,
        NOW,
        &mut ids(),
    );
    // The actual side comes without a version: rejected, and edge_updated says so.
    let current = r#"{"expected":{"value":"77","metadata":{"timestamp":1700000000500}},"actual":{"value":"20","metadata":{"timestamp":1700000000001}},"optional":true,"metadata":{"type":"int"}}"#;
    assert_eq!(
        published(&effects),
        [
            (
                "$hw/events/device/default/thermo-1/updated",
                r#"{"event_id":"","timestamp":1700000000500,"attributes":{"range":{"value":"0-100"},"serial":null,"unit":{"value":"fahrenheit"}}}"#
            ),
            (
                "$hw/events/device/default/thermo-1/twin/update/document",
                format!(
                    r#"{{"event_id":"","timestamp":1700000000500,"twin":{{"temperature":{{"last":{{"expected":{{"value":"25","metadata":{{"timestamp":1700000000000}}}},"actual":{{"value":"20","metadata":{{"timestamp":1700000000001}}}},"optional":true,"metadata":{{"type":"int"}}}},"current":{current}}}}}}}"#
                )
                .as_str()
            ),
            (
                "$hw/events/device/default/thermo-1/twin/update/delta",
                format!(
                    r#"{{"event_id":"fresh-1","timestamp":1700000000500,"twin":{{"temperature":{current}}},"delta":{{"temperature":"77"}}}}"#
                )
                .as_str()
            ),
        ]
    );
    assert_eq!(
        effects.cloud,
        [CloudMessage {
            operation: "update".into(),
            resource: "device/default/thermo-1/twin/edge_updated".into(),
            content: CloudContent::Json(
                r#"{"event_id":"fresh-2","timestamp":1700000000500,"twin":{"temperature":{"actual":{"value":"20","metadata":{"timestamp":1700000000001}},"optional":true,"metadata":{"type":"int"},"actual_version":{"cloud":0,"edge":3}}}}"#.into()
            ),
        }]
    );
    let thermo = &devices[THERMO];
    assert_eq!(thermo.name, "thermo-1", "a known device keeps its row");
    assert_eq!(
        effects.rows,
        [
            RowChange::PutAttr {
                device: THERMO.into(),
                name: "range".into(),
                attr: attr("0-100"),
            },
            RowChange::PutAttr {
                device: THERMO.into(),
                name: "unit".into(),
                attr: attr("fahrenheit"),
            },
            RowChange::DeleteAttr {
                device: THERMO.into(),
                name: "serial".into(),
            },
            RowChange::PutTwin {
                device: THERMO.into(),
                key: "temperature".into(),
                twin: thermo.twins["temperature"].clone(),
            },
        ]
    );
    assert_eq!(
        thermo.attributes.keys().collect::<Vec<_>>(),
        ["range", "unit"]
    );
}

#[test]
fn a_changed_attribute_is_announced_with_only_what_changed() {
    let mut devices = devices();
    let effects = update(
        &mut devices,
        NODE,
        br#"{"added_devices":[{"id":"default/thermo-1","attributes":{"serial":{"value":"s1","optional":true},"unit":{"value":"celsius","optional":false,"metadata":{"type":"int"}}}}]}"#,
        NOW,
        &mut ids(),
    );
    assert_eq!(
        published(&effects)[0],
        (
            "$hw/events/device/default/thermo-1/updated",
            r#"{"event_id":"","timestamp":1700000000500,"attributes":{"unit":{"value":"","optional":false,"metadata":{"type":"int"}}}}"#
        )
    );
    let unit = StoredAttr {
        optional: false,
        attr_type: "int".into(),
        ..attr("celsius")
    };
    assert_eq!(devices[THERMO].attributes["unit"], unit);
    assert_eq!(
        effects.rows,
        [RowChange::PutAttr {
            device: THERMO.into(),
            name: "unit".into(),
            attr: unit,
        }],
        "no twin listed: no twin row"
    );
}

#[test]
fn removed_devices_lose_all_rows_and_are_announced_as_received() {
    let mut devices = devices();
    let effects = update(
        &mut devices,
        NODE,
        br#"{"event_id":"mem-3","timestamp":1,"added_devices":null,"removed_devices":[{"id":"default/old","name":"old"},{"id":"default/ghost"}]}"#,
        NOW,
        &mut ids(),
    );
    assert_eq!(
        published(&effects),
        [(
            MEMBERSHIP_UPDATED,
            r#"{"event_id":"fresh-1","timestamp":1700000000500,"added_devices":null,"removed_devices":[{"id":"default/old","name":"old"}]}"#
        )]
    );
    assert_eq!(
        effects.rows,
        [RowChange::DeleteDevice { device: OLD.into() }]
    );
    assert_eq!(removed_ids(&effects), [OLD]);
    assert!(!devices.contains_key(OLD));
    assert!(devices.contains_key(THERMO));
}

#[test]
fn detail_syncs_listed_devices_and_removes_the_others() {
    let mut devices = devices();
    let effects = detail_result(
        &mut devices,
        NODE,
        br#"{"event_id":"det-1","timestamp":1,"devices":[{"id":"default/thermo-1","name":"thermo-1","attributes":{"serial":{"value":"s1"},"unit":{"value":"celsius"}},"twin":{"temperature":{"actual":{"value":"21"},"actual_version":{"cloud":0,"edge":3}}}}]}"#,
        NOW,
        &mut ids(),
    );
    let current = r#"{"expected":{"value":"25","metadata":{"timestamp":1700000000000}},"actual":{"value":"21","metadata":{"timestamp":1700000000500}},"optional":true,"metadata":{"type":"int"}}"#;
    assert_eq!(
        published(&effects),
        [
            (
                "$hw/events/device/default/thermo-1/twin/update/document",
                format!(
                    r#"{{"event_id":"","timestamp":1700000000500,"twin":{{"temperature":{{"last":{{"expected":{{"value":"25","metadata":{{"timestamp":1700000000000}}}},"actual":{{"value":"20","metadata":{{"timestamp":1700000000001}}}},"optional":true,"metadata":{{"type":"int"}}}},"current":{current}}}}}}}"#
                )
                .as_str()
            ),
            (
                "$hw/events/device/default/thermo-1/twin/update/delta",
                format!(
                    r#"{{"event_id":"fresh-1","timestamp":1700000000500,"twin":{{"temperature":{current}}},"delta":{{"temperature":"25"}}}}"#
                )
                .as_str()
            ),
            (
                MEMBERSHIP_UPDATED,
                r#"{"event_id":"fresh-2","timestamp":1700000000500,"added_devices":null,"removed_devices":[{"id":"default/old"}]}"#
            ),
        ]
    );
    assert_eq!(removed_ids(&effects), [OLD]);
    assert_eq!(devices.len(), 1);
    assert_eq!(
        devices[THERMO].twins["temperature"].actual,
        value("21", NOW)
    );
}

#[test]
fn an_empty_detail_removes_every_device_in_id_order() {
    let mut devices = devices();
    let effects = detail_result(
        &mut devices,
        NODE,
        br#"{"event_id":"det-2","timestamp":1,"devices":null}"#,
        NOW,
        &mut ids(),
    );
    assert_eq!(removed_ids(&effects), [OLD, THERMO]);
    assert!(devices.is_empty());
    assert_eq!(
        published(&effects)[1],
        (
            MEMBERSHIP_UPDATED,
            r#"{"event_id":"fresh-2","timestamp":1700000000500,"added_devices":null,"removed_devices":[{"id":"default/thermo-1"}]}"#
        )
    );
}

#[test]
fn get_lists_devices_by_id_without_twins() {
    let effects = get(
        &devices(),
        NODE,
        br#"{"event_id":"g-1","timestamp":5}"#,
        NOW,
    );
    assert_eq!(
        published(&effects),
        [(
            "$hw/events/node/edge-1/membership/get/result",
            r#"{"event_id":"g-1","timestamp":1700000000500,"devices":[{"id":"default/old","name":"old","state":"unknown"},{"id":"default/thermo-1","name":"thermo-1","state":"online","last_online":"2023-11-14T22:13:20Z","attributes":{"serial":{"value":"s1","optional":true,"metadata":{"type":"string"}},"unit":{"value":"celsius","optional":true,"metadata":{"type":"string"}}}}]}"#
        )]
    );
    assert!(effects.rows.is_empty() && effects.cloud.is_empty());
    let empty = get(&Devices::new(), NODE, b"{}", NOW);
    assert_eq!(
        published(&empty),
        [(
            "$hw/events/node/edge-1/membership/get/result",
            r#"{"event_id":"","timestamp":1700000000500,"devices":[]}"#
        )]
    );
}

#[test]
fn an_unreadable_get_is_answered_with_a_400() {
    let effects = get(&devices(), NODE, br#"{"event_id":7}"#, NOW);
    assert_eq!(
        published(&effects),
        [(
            "$hw/events/node/edge-1/membership/get/result",
            r#"{"event_id":"","timestamp":1700000000500,"code":400,"reason":"Unmarshal get membership info {\"event_id\":7} failed , err: invalid type: integer `7`, expected a string"}"#
        )]
    );
    let array = get(&devices(), NODE, b"[]", NOW);
    assert!(array.publish[0].payload.contains(r#""code":400"#));
}

#[test]
fn bad_membership_messages_change_nothing() {
    for payload in [
        &b"not json"[..],
        b"[]",
        br#"{"added_devices":{}}"#,
        br#"{"added_devices":[{"id":"a/b/c"}]}"#,
        br#"{"added_devices":[{"id":""}]}"#,
        br#"{"added_devices":[{"id":"default/new"},{"id":"default/thermo-1","twin":{"bad key":{}}}]}"#,
        br#"{"added_devices":[{"id":"default/new","twin":{"k":{"actual":{"value":"a b"}}}}],"removed_devices":[{"id":"default/old"}]}"#,
    ] {
        let text = String::from_utf8_lossy(payload);
        let mut devices = devices();
        let effects = update(&mut devices, NODE, payload, NOW, &mut ids());
        assert_eq!(effects, Effects::default(), "{text}");
        assert_eq!(devices, self::devices(), "{text}");
    }
    for payload in [
        &b"not json"[..],
        b"[]",
        br#"{"devices":{}}"#,
        br#"{"devices":[{"id":"default/thermo-1"},{"id":"/x"}]}"#,
        br#"{"devices":[{"id":"default/thermo-1","twin":{"t":{"expected":{"value":"<b>"}}}}]}"#,
    ] {
        let text = String::from_utf8_lossy(payload);
        let mut devices = devices();
        let effects = detail_result(&mut devices, NODE, payload, NOW, &mut ids());
        assert_eq!(effects, Effects::default(), "{text}");
        assert_eq!(
            devices,
            self::devices(),
            "a refused detail removes nothing: {text}"
        );
    }
    let mut devices = devices();
    // `null` is an empty message, as for edgecore's decoder.
    assert_eq!(
        update(&mut devices, NODE, b"null", NOW, &mut ids()),
        Effects::default()
    );
}

#[test]
fn detail_request_is_a_json_string_for_the_cloud() {
    assert_eq!(
        detail_request(NODE, NOW, &mut ids()),
        CloudMessage {
            operation: "get".into(),
            resource: "membership/detail".into(),
            content: CloudContent::Text(
                r#"{"event_type":"group_membership_event","event_id":"fresh-1","group_id":"edge-1","operation":"detail","timestamp":1700000000500}"#.into()
            ),
        }
    );
}
