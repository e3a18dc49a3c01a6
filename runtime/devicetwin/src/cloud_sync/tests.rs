//! Cloud syncs against the version rules of `spec` §5.4, outputs compared byte for byte.

use super::*;
use crate::wire::{TwinValue, ValueMetadata, Version};

const NOW: i64 = 1700000000500;
const ID: &str = "default/thermo-1";
const DOCUMENT: &str = "$hw/events/device/default/thermo-1/twin/update/document";
const DELTA: &str = "$hw/events/device/default/thermo-1/twin/update/delta";
const EDGE_UPDATED: &str = "device/default/thermo-1/twin/edge_updated";

/// The stored `temperature` twin of the spec's worked examples, without versions.
const STORED_TEMPERATURE: &str = r#"{"expected":{"value":"25","metadata":{"timestamp":1700000000000}},"actual":{"value":"20","metadata":{"timestamp":1700000000001}},"optional":true,"metadata":{"type":"int"}}"#;

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

fn temperature() -> StoredTwin {
    StoredTwin {
        expected: value("25", 1700000000000),
        actual: value("20", 1700000000001),
        expected_version: Some(Version { cloud: 1, edge: 0 }),
        actual_version: Some(Version { cloud: 0, edge: 3 }),
        optional: true,
        attr_type: "int".into(),
    }
}

fn devices() -> Devices {
    let record = DeviceRecord {
        id: ID.into(),
        name: "thermo-1".into(),
        twins: [("temperature".to_owned(), temperature())].into(),
        ..DeviceRecord::default()
    };
    [(ID.to_owned(), record)].into()
}

fn sync(devices: &mut Devices, payload: &str) -> Effects {
    handle(devices, ID, payload.as_bytes(), NOW, &mut ids())
}

fn published(effects: &Effects) -> Vec<(&str, &str)> {
    effects
        .publish
        .iter()
        .map(|p| (p.topic.as_str(), p.payload.as_str()))
        .collect()
}

fn edge_updated(json: &str) -> Vec<CloudMessage> {
    vec![CloudMessage {
        operation: "update".into(),
        resource: EDGE_UPDATED.into(),
        content: CloudContent::Json(json.into()),
    }]
}

/// The delta of the untouched device (fresh id 1).
fn untouched_delta() -> String {
    format!(
        r#"{{"event_id":"fresh-1","timestamp":1700000000500,"twin":{{"temperature":{STORED_TEMPERATURE}}},"delta":{{"temperature":"25"}}}}"#
    )
}

#[test]
fn accepted_sync_adopts_the_cloud_version_and_sends_no_edge_updated() {
    let mut devices = devices();
    let effects = sync(
        &mut devices,
        r#"{"event_id":"sync-1","timestamp":1700000000300,"twin":{"temperature":{"expected":{"value":"26"},"expected_version":{"cloud":2,"edge":0}}}}"#,
    );
    let current = r#"{"expected":{"value":"26","metadata":{"timestamp":1700000000500}},"actual":{"value":"20","metadata":{"timestamp":1700000000001}},"optional":true,"metadata":{"type":"int"}}"#;
    assert_eq!(
        published(&effects),
        [
            (
                DOCUMENT,
                format!(
                    r#"{{"event_id":"sync-1","timestamp":1700000000500,"twin":{{"temperature":{{"last":{STORED_TEMPERATURE},"current":{current}}}}}}}"#
                )
                .as_str()
            ),
            (
                DELTA,
                format!(
                    r#"{{"event_id":"fresh-1","timestamp":1700000000500,"twin":{{"temperature":{current}}},"delta":{{"temperature":"26"}}}}"#
                )
                .as_str()
            ),
        ]
    );
    assert!(effects.cloud.is_empty());
    let expected = StoredTwin {
        expected: value("26", NOW),
        expected_version: Some(Version { cloud: 2, edge: 0 }),
        ..temperature()
    };
    assert_eq!(
        effects.rows,
        [RowChange::PutTwin {
            device: ID.into(),
            key: "temperature".into(),
            twin: expected.clone(),
        }]
    );
    assert_eq!(devices[ID].twins["temperature"], expected);
    assert_eq!(
        effects.desired,
        [DesiredValue {
            device: ID.into(),
            key: "temperature".into(),
            value: "26".into(),
            value_type: "int".into(),
        }]
    );
}

#[test]
fn cloud_older_is_rejected_with_the_edge_side_and_the_rest_of_the_key_is_not_applied() {
    let mut devices = devices();
    let effects = sync(
        &mut devices,
        r#"{"event_id":"sync-2","twin":{"temperature":{"expected":{"value":"30"},"expected_version":{"cloud":0,"edge":0},"actual":{"value":"31"},"actual_version":{"cloud":0,"edge":9},"optional":false}}}"#,
    );
    // No document (nothing accepted); the delta still goes out, then edge_updated.
    assert_eq!(published(&effects), [(DELTA, untouched_delta().as_str())]);
    assert_eq!(
        effects.cloud,
        edge_updated(
            r#"{"event_id":"fresh-2","timestamp":1700000000500,"twin":{"temperature":{"expected":{"value":"25","metadata":{"timestamp":1700000000000}},"optional":true,"metadata":{"type":"int"},"expected_version":{"cloud":1,"edge":0}}}}"#
        )
    );
    assert!(effects.rows.is_empty() && effects.desired.is_empty());
    assert_eq!(devices, self::devices());
}

#[test]
fn edge_newer_rejects_that_side_only_after_an_accepted_one() {
    let mut devices = devices();
    let effects = sync(
        &mut devices,
        r#"{"event_id":"sync-3","twin":{"temperature":{"expected":{"value":"24"},"expected_version":{"cloud":1,"edge":0},"actual":{"value":"19"},"actual_version":{"cloud":5,"edge":2}}}}"#,
    );
    let current = r#"{"expected":{"value":"24","metadata":{"timestamp":1700000000500}},"actual":{"value":"20","metadata":{"timestamp":1700000000001}},"optional":true,"metadata":{"type":"int"}}"#;
    assert_eq!(
        published(&effects),
        [
            (
                DOCUMENT,
                format!(
                    r#"{{"event_id":"sync-3","timestamp":1700000000500,"twin":{{"temperature":{{"last":{STORED_TEMPERATURE},"current":{current}}}}}}}"#
                )
                .as_str()
            ),
            (
                DELTA,
                format!(
                    r#"{{"event_id":"fresh-1","timestamp":1700000000500,"twin":{{"temperature":{current}}},"delta":{{"temperature":"24"}}}}"#
                )
                .as_str()
            ),
        ]
    );
    assert_eq!(
        effects.cloud,
        edge_updated(
            r#"{"event_id":"fresh-2","timestamp":1700000000500,"twin":{"temperature":{"actual":{"value":"20","metadata":{"timestamp":1700000000001}},"optional":true,"metadata":{"type":"int"},"actual_version":{"cloud":0,"edge":3}}}}"#
        )
    );
    let twin = &devices[ID].twins["temperature"];
    assert_eq!(twin.expected, value("24", NOW));
    assert_eq!(twin.actual, value("20", 1700000000001));
    assert_eq!(twin.actual_version, Some(Version { cloud: 0, edge: 3 }));
}

#[test]
fn sync_delete_clears_both_sides_keeping_versions_the_request_leaves_out() {
    let mut devices = devices();
    let effects = sync(
        &mut devices,
        r#"{"event_id":"sync-4","twin":{"temperature":{"metadata":{"type":"deleted"},"expected_version":{"cloud":2,"edge":0}}}}"#,
    );
    assert_eq!(
        published(&effects),
        [(
            DOCUMENT,
            format!(
                r#"{{"event_id":"sync-4","timestamp":1700000000500,"twin":{{"temperature":{{"last":{STORED_TEMPERATURE},"current":null}}}}}}"#
            )
            .as_str()
        )],
        "a deleted twin leaves the delta, which is now empty"
    );
    assert!(effects.cloud.is_empty() && effects.desired.is_empty());
    let deleted = StoredTwin {
        expected: None,
        actual: None,
        expected_version: Some(Version { cloud: 2, edge: 0 }),
        actual_version: Some(Version { cloud: 0, edge: 3 }),
        optional: true,
        attr_type: DELETED.into(),
    };
    assert_eq!(devices[ID].twins["temperature"], deleted);
    assert_eq!(
        effects.rows,
        [RowChange::PutTwin {
            device: ID.into(),
            key: "temperature".into(),
            twin: deleted,
        }]
    );
    // Deleting it again changes nothing and says nothing.
    let again = sync(
        &mut devices,
        r#"{"event_id":"sync-5","twin":{"temperature":{"metadata":{"type":"deleted"}}}}"#,
    );
    assert_eq!(again, Effects::default());
}

#[test]
fn stale_sync_delete_is_refused_whole_and_the_edge_twin_goes_back() {
    let mut devices = devices();
    let effects = sync(
        &mut devices,
        r#"{"event_id":"sync-6","twin":{"temperature":{"metadata":{"type":"deleted"},"expected_version":{"cloud":1,"edge":0},"actual_version":{"cloud":0,"edge":2}}}}"#,
    );
    assert_eq!(published(&effects), [(DELTA, untouched_delta().as_str())]);
    assert_eq!(
        effects.cloud,
        edge_updated(
            r#"{"event_id":"fresh-2","timestamp":1700000000500,"twin":{"temperature":{"expected":{"value":"25","metadata":{"timestamp":1700000000000}},"actual":{"value":"20","metadata":{"timestamp":1700000000001}},"optional":true,"metadata":{"type":"int"},"expected_version":{"cloud":1,"edge":0},"actual_version":{"cloud":0,"edge":3}}}}"#
        )
    );
    assert_eq!(
        devices,
        self::devices(),
        "the accepted side was not cleared either"
    );
}

#[test]
fn adding_a_key_without_version_is_rejected_yet_reported() {
    let mut devices = devices();
    let effects = sync(
        &mut devices,
        r#"{"event_id":"sync-7","twin":{"humidity":{"actual":{"value":"40"},"metadata":{"type":"int"}}}}"#,
    );
    assert_eq!(
        published(&effects),
        [
            (
                DOCUMENT,
                r#"{"event_id":"sync-7","timestamp":1700000000500,"twin":{"humidity":{"last":null,"current":null}}}"#
            ),
            (DELTA, untouched_delta().as_str()),
        ]
    );
    assert_eq!(
        effects.cloud,
        edge_updated(r#"{"event_id":"fresh-2","timestamp":1700000000500,"twin":{"humidity":{}}}"#)
    );
    assert!(effects.rows.is_empty());
    assert_eq!(devices, self::devices());
}

#[test]
fn adding_a_key_with_versions_stores_them() {
    let mut devices = devices();
    let effects = sync(
        &mut devices,
        r#"{"event_id":"sync-8","twin":{"humidity":{"expected":{"value":"45"},"expected_version":{"cloud":1,"edge":0},"optional":false,"metadata":{"type":"int"}}}}"#,
    );
    let humidity = r#"{"expected":{"value":"45","metadata":{"timestamp":1700000000500}},"optional":false,"metadata":{"type":"int"}}"#;
    assert_eq!(
        published(&effects),
        [
            (
                DOCUMENT,
                format!(
                    r#"{{"event_id":"sync-8","timestamp":1700000000500,"twin":{{"humidity":{{"last":null,"current":{humidity}}}}}}}"#
                )
                .as_str()
            ),
            (
                DELTA,
                format!(
                    r#"{{"event_id":"fresh-1","timestamp":1700000000500,"twin":{{"humidity":{humidity},"temperature":{STORED_TEMPERATURE}}},"delta":{{"humidity":"45","temperature":"25"}}}}"#
                )
                .as_str()
            ),
        ]
    );
    assert!(effects.cloud.is_empty());
    let stored = &devices[ID].twins["humidity"];
    assert_eq!(stored.expected_version, Some(Version { cloud: 1, edge: 0 }));
    assert_eq!(stored.actual_version, None);
    assert!(!stored.optional);
    assert_eq!(effects.desired.len(), 1);
    assert_eq!(effects.desired[0].value, "45");
}

#[test]
fn a_value_of_the_wrong_type_is_skipped_silently() {
    let mut devices = devices();
    let effects = sync(
        &mut devices,
        r#"{"event_id":"sync-9","twin":{"temperature":{"actual":{"value":"hot"},"actual_version":{"cloud":0,"edge":9}},"count":{"actual":{"value":"x"},"actual_version":{"cloud":0,"edge":1},"metadata":{"type":"int"}}}}"#,
    );
    assert_eq!(published(&effects), [(DELTA, untouched_delta().as_str())]);
    assert!(effects.cloud.is_empty() && effects.rows.is_empty());
    assert_eq!(devices, self::devices());
}

#[test]
fn optional_only_goes_to_false_and_a_live_twin_keeps_its_type() {
    let mut devices = devices();
    let effects = sync(
        &mut devices,
        r#"{"event_id":"o","twin":{"temperature":{"optional":false,"metadata":{"type":"float"}}}}"#,
    );
    let twin = &devices[ID].twins["temperature"];
    assert!(!twin.optional);
    assert_eq!(
        twin.attr_type, "int",
        "only a deleted twin takes a new type"
    );
    assert_eq!(effects.rows.len(), 1);
    sync(
        &mut devices,
        r#"{"event_id":"o","twin":{"temperature":{"optional":true}}}"#,
    );
    assert!(!devices[ID].twins["temperature"].optional);
}

#[test]
fn a_deleted_twin_comes_back_with_the_requested_type_and_no_last_state() {
    let mut devices = devices();
    sync(
        &mut devices,
        r#"{"event_id":"d","twin":{"temperature":{"metadata":{"type":"deleted"}}}}"#,
    );
    let effects = sync(
        &mut devices,
        r#"{"event_id":"r","twin":{"temperature":{"actual":{"value":"1.5"},"actual_version":{"cloud":0,"edge":3},"metadata":{"type":"float"}}}}"#,
    );
    assert_eq!(
        published(&effects),
        [(
            DOCUMENT,
            r#"{"event_id":"r","timestamp":1700000000500,"twin":{"temperature":{"last":null,"current":{"actual":{"value":"1.5","metadata":{"timestamp":1700000000500}},"optional":true,"metadata":{"type":"float"}}}}}"#
        )]
    );
    assert_eq!(devices[ID].twins["temperature"].attr_type, "float");
}

#[test]
fn deleting_an_unknown_key_keeps_a_tombstone_with_the_cloud_versions() {
    let mut devices = devices();
    let effects = sync(
        &mut devices,
        r#"{"event_id":"t","twin":{"old":{"metadata":{"type":"deleted"},"actual_version":{"cloud":3,"edge":1}}}}"#,
    );
    assert_eq!(
        published(&effects)[0],
        (
            DOCUMENT,
            r#"{"event_id":"t","timestamp":1700000000500,"twin":{"old":{"last":null,"current":null}}}"#
        )
    );
    let tomb = &devices[ID].twins["old"];
    assert_eq!(tomb.attr_type, DELETED);
    assert_eq!(tomb.actual_version, Some(Version { cloud: 3, edge: 1 }));
    // A stale sync of the old twin is now rejected.
    let stale = sync(
        &mut devices,
        r#"{"event_id":"s","twin":{"old":{"actual":{"value":"1"},"actual_version":{"cloud":2,"edge":1}}}}"#,
    );
    assert!(stale.rows.is_empty());
    assert_eq!(stale.cloud.len(), 1);
}

#[test]
fn null_entries_and_empty_syncs_change_nothing() {
    let mut devices = devices();
    let effects = sync(
        &mut devices,
        r#"{"event_id":"n","twin":{"temperature":null}}"#,
    );
    assert_eq!(published(&effects), [(DELTA, untouched_delta().as_str())]);
    assert!(effects.rows.is_empty() && effects.cloud.is_empty());
    assert_eq!(devices, self::devices());
}

#[test]
fn refused_syncs_change_nothing_and_answer_on_the_empty_id_topic() {
    let refusal = [(
        "$hw/events/device//twin/update/result",
        r#"{"event_id":"","timestamp":1700000000500,"code":400,"reason":"unmarshal update request body failed, Please check the request"}"#,
    )];
    for payload in [
        "not json",
        r#"{"event_id":"x"}"#,
        r#"{"event_id":"x","twin":null}"#,
        r#"{"event_id":"x","twin":{"temperature":{"expected":{"value":5}}}}"#,
        r#"{"event_id":"x","twin":{"temperature":{"expected":{"value":"26"},"expected_version":{"cloud":2,"edge":0}},"bad key":{}}}"#,
        r#"{"event_id":"x","twin":{"temperature":{"expected":{"value":"2;6"},"expected_version":{"cloud":2,"edge":0}}}}"#,
    ] {
        let mut devices = devices();
        let effects = sync(&mut devices, payload);
        assert_eq!(published(&effects), refusal, "{payload}");
        assert!(
            effects.rows.is_empty() && effects.cloud.is_empty(),
            "{payload}"
        );
        assert_eq!(devices, self::devices(), "{payload}");
    }
}

#[test]
fn unknown_devices_are_ignored() {
    let mut devices = devices();
    let effects = handle(
        &mut devices,
        "default/other",
        br#"{"event_id":"u","twin":{"a":{"actual":{"value":"1"},"actual_version":{"cloud":0,"edge":1}}}}"#,
        NOW,
        &mut ids(),
    );
    assert_eq!(effects, Effects::default());
    assert_eq!(devices, self::devices());
}

#[test]
fn detail_syncs_follow_the_same_version_rule() {
    let mut devices = devices();
    let record = devices.get_mut(ID).unwrap();
    let twins: BTreeMap<String, Option<Twin>> = serde_json::from_str(
        r#"{"temperature":{"actual":{"value":"21"},"actual_version":{"cloud":0,"edge":3}},"fresh":{"actual":{"value":"1"}}}"#,
    )
    .unwrap();
    let effects = sync_twins(record, &twins, DealType::Detail, "", NOW, &mut ids()).unwrap();
    assert_eq!(record.twins["temperature"].actual, value("21", NOW));
    assert!(!record.twins.contains_key("fresh"));
    assert_eq!(
        effects.cloud,
        edge_updated(r#"{"event_id":"fresh-2","timestamp":1700000000500,"twin":{"fresh":{}}}"#)
    );
    assert_eq!(
        sync_twins(
            record,
            &[("no space".to_owned(), None)].into(),
            DealType::Sync,
            "",
            NOW,
            &mut ids()
        ),
        Err(SyncRefused::BadKey("no space".into()))
    );
}
