//! The update path around the algorithm: what is published, written and sent, and in which
//! order, for the spec's worked examples and for everything refused before the algorithm runs.

use super::*;
use crate::device::DeviceRecord;
use crate::effects::Publish;
use crate::mapper_update::StoredTwin;
use crate::validate;
use crate::wire::{TwinValue, ValueMetadata, Version};

const NOW: i64 = 1700000000500;
const DEVICE: &str = "default/thermo-1";

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

fn devices() -> Devices {
    let twin = StoredTwin {
        expected: value("25", 1700000000000),
        actual: value("20", 1700000000001),
        expected_version: Some(Version { cloud: 1, edge: 0 }),
        actual_version: Some(Version { cloud: 0, edge: 3 }),
        optional: true,
        attr_type: "int".into(),
    };
    let record = DeviceRecord {
        id: DEVICE.into(),
        name: "thermo-1".into(),
        twins: [("temperature".to_owned(), twin)].into(),
        ..DeviceRecord::default()
    };
    [(DEVICE.to_owned(), record)].into()
}

fn run(devices: &mut Devices, device: &str, payload: &str) -> Effects {
    match prepare(devices, device, payload.as_bytes(), 1024, NOW) {
        Ok(request) => commit(devices, device, &request, NOW, &mut ids()),
        Err(effects) => effects,
    }
}

fn topics(effects: &Effects) -> Vec<&str> {
    effects.publish.iter().map(|p| p.topic.as_str()).collect()
}

const S1: &str = r#"{"event_id":"evt-1","timestamp":1700000000100,"twin":{"temperature":{"actual":{"value":"22"},"metadata":{"type":"int"}}}}"#;

#[test]
fn s1_publishes_result_document_delta_then_sends_edge_updated() {
    let mut devices = devices();
    let effects = run(&mut devices, DEVICE, S1);
    assert_eq!(
        topics(&effects),
        [
            "$hw/events/device/default/thermo-1/twin/update/result",
            "$hw/events/device/default/thermo-1/twin/update/document",
            "$hw/events/device/default/thermo-1/twin/update/delta",
        ]
    );
    assert_eq!(
        effects.publish[2].payload,
        r#"{"event_id":"fresh-1","timestamp":1700000000500,"twin":{"temperature":{"expected":{"value":"25","metadata":{"timestamp":1700000000000}},"actual":{"value":"22","metadata":{"timestamp":1700000000500}},"optional":true,"metadata":{"type":"int"}}},"delta":{"temperature":"25"}}"#
    );
    assert_eq!(
        effects.cloud,
        [CloudMessage {
            operation: "update".into(),
            resource: "device/default/thermo-1/twin/edge_updated".into(),
            content: CloudContent::Json(
                r#"{"event_id":"fresh-2","timestamp":1700000000500,"twin":{"temperature":{"actual":{"value":"22","metadata":{"timestamp":1700000000500}},"optional":true,"metadata":{"type":"int"},"actual_version":{"cloud":0,"edge":4}}}}"#.into()
            ),
        }]
    );
    let stored = devices[DEVICE].twins["temperature"].clone();
    assert_eq!(stored.actual_version, Some(Version { cloud: 0, edge: 4 }));
    assert_eq!(
        effects.rows,
        [RowChange::PutTwin {
            device: DEVICE.into(),
            key: "temperature".into(),
            twin: stored
        }]
    );
    assert!(
        effects.desired.is_empty(),
        "the mapper wrote no desired value"
    );
}

#[test]
fn s2_answers_only_the_400_result_and_changes_nothing() {
    let mut devices = devices();
    let before = devices.clone();
    let effects = run(
        &mut devices,
        DEVICE,
        r#"{"event_id":"evt-2","timestamp":1700000000200,"twin":{"temperature":{"actual":{"value":"hot"}}}}"#,
    );
    assert_eq!(
        effects,
        Effects::publish_only(
            "$hw/events/device/default/thermo-1/twin/update/result".into(),
            r#"{"event_id":"evt-2","timestamp":1700000000500,"code":400,"reason":"the value is not int or integer"}"#.into()
        )
    );
    assert_eq!(devices, before);
}

#[test]
fn unknown_devices_bad_json_oversized_bodies_and_bad_keys_get_their_results() {
    let mut devices = devices();
    let before = devices.clone();
    let cases = [
        (
            "default/nope",
            S1.to_owned(),
            "$hw/events/device/default/nope/twin/update/result",
            r#"{"event_id":"evt-1","timestamp":1700000000500,"code":404,"reason":"update rejected due to the device is not existed"}"#.to_owned(),
        ),
        (
            DEVICE,
            "{not json".to_owned(),
            "$hw/events/device/default/thermo-1/twin/update/result",
            r#"{"event_id":"","timestamp":1700000000500,"code":400,"reason":"Unmarshal update request body failed, please check the request"}"#.to_owned(),
        ),
        (
            DEVICE,
            r#"{"event_id":"e","twin":null}"#.to_owned(),
            "$hw/events/device/default/thermo-1/twin/update/result",
            r#"{"event_id":"","timestamp":1700000000500,"code":400,"reason":"Update twin error, key:twin does not exist"}"#.to_owned(),
        ),
        (
            DEVICE,
            format!(r#"{{"event_id":"e","twin":{{"t":{{"actual":{{"value":"{}"}}}}}}}}"#, "x".repeat(1100)),
            "$hw/events/device/default/thermo-1/twin/update/result",
            r#"{"event_id":"","timestamp":1700000000500,"code":400,"reason":"the update request body is 1153 bytes; the limit is 1024 bytes"}"#.to_owned(),
        ),
        (
            DEVICE,
            r#"{"event_id":"e","twin":{"bad key":{"actual":{"value":"1"}}}}"#.to_owned(),
            "$hw/events/device//twin/update/result",
            format!(r#"{{"event_id":"","timestamp":1700000000500,"code":400,"reason":"{}"}}"#, validate::BAD_KEY),
        ),
    ];
    for (device, payload, topic, json) in cases {
        let effects = run(&mut devices, device, &payload);
        assert_eq!(
            effects.publish,
            [Publish {
                topic: topic.into(),
                payload: json
            }],
            "payload {payload}"
        );
        assert!(effects.rows.is_empty() && effects.cloud.is_empty());
    }
    assert_eq!(devices, before);
}

#[test]
fn hooks_see_each_written_side_and_their_verdicts_shape_the_update() {
    let devices = devices();
    let payload = r#"{"event_id":"evt-3","twin":{"temperature":{"expected":{"value":"30"},"actual":{"value":"22"}},"humidity":{"actual":{"value":"40"},"metadata":{"type":"float"}}}}"#;
    let mut request = prepare(&devices, DEVICE, payload.as_bytes(), 4096, NOW).unwrap();
    let changes = proposals(&devices, DEVICE, &request);
    let seen: Vec<_> = changes
        .iter()
        .map(|c| {
            (
                c.key.as_str(),
                c.desired,
                c.value.as_str(),
                c.value_type.as_str(),
                c.previous.as_deref(),
            )
        })
        .collect();
    assert_eq!(
        seen,
        [
            ("humidity", false, "40", "float", None),
            ("temperature", true, "30", "int", Some("25")),
            ("temperature", false, "22", "int", Some("20")),
        ]
    );
    // A replacement is what gets stored; the desired value then differs from the reported one.
    reviewed(
        &mut request,
        &changes[2],
        HookVerdict::Replace("21".into()),
        NOW,
    )
    .unwrap();
    let mut devices = devices;
    let effects = commit(&mut devices, DEVICE, &request, NOW, &mut ids());
    let twin = &devices[DEVICE].twins["temperature"];
    assert_eq!(twin.actual.as_ref().unwrap().value.as_deref(), Some("21"));
    assert_eq!(
        effects.desired,
        [DesiredValue {
            device: DEVICE.into(),
            key: "temperature".into(),
            value: "30".into(),
            value_type: "int".into()
        }]
    );

    let fresh = self::devices();
    let mut request = prepare(&fresh, DEVICE, payload.as_bytes(), 4096, NOW).unwrap();
    let rejected = reviewed(
        &mut request,
        &changes[0],
        HookVerdict::Reject("above 35".into()),
        NOW,
    );
    assert_eq!(
        rejected.unwrap_err().publish[0].payload,
        r#"{"event_id":"evt-3","timestamp":1700000000500,"code":400,"reason":"above 35"}"#
    );
    let failed = reviewed(
        &mut request,
        &changes[0],
        HookVerdict::Failed("handler trapped".into()),
        NOW,
    );
    assert_eq!(
        failed.unwrap_err().publish[0].payload,
        r#"{"event_id":"evt-3","timestamp":1700000000500,"code":500,"reason":"handler trapped"}"#
    );
}

#[test]
fn a_replacement_that_breaks_the_type_is_refused_at_commit() {
    let mut devices = devices();
    let before = devices.clone();
    let mut request = prepare(&devices, DEVICE, S1.as_bytes(), 1024, NOW).unwrap();
    let changes = proposals(&devices, DEVICE, &request);
    reviewed(
        &mut request,
        &changes[0],
        HookVerdict::Replace("warm".into()),
        NOW,
    )
    .unwrap();
    let effects = commit(&mut devices, DEVICE, &request, NOW, &mut ids());
    assert_eq!(
        effects.publish[0].payload,
        r#"{"event_id":"evt-1","timestamp":1700000000500,"code":400,"reason":"the value is not int or integer"}"#
    );
    assert_eq!(devices, before);
}
