//! State updates (§5.6) and the RFC 3339 formatter.

use super::*;
use crate::device::DeviceRecord;
use crate::effects::Publish;

const NOW: i64 = 1700000000123;
const ID: &str = "default/thermo-1";

fn ids() -> impl FnMut() -> String {
    let mut n = 0;
    move || {
        n += 1;
        format!("fresh-{n}")
    }
}

fn devices() -> Devices {
    let device = DeviceRecord {
        id: ID.into(),
        name: "thermo-1".into(),
        state: "offline".into(),
        ..DeviceRecord::default()
    };
    [(ID.to_owned(), device)].into()
}

fn run(devices: &mut Devices, body: &str) -> Effects {
    update(devices, ID, body.as_bytes(), NOW, &mut ids())
}

#[test]
fn online_is_stored_published_and_sent_as_a_string() {
    let mut devices = devices();
    let effects = run(
        &mut devices,
        r#"{"event_id":"e1","timestamp":1700000000000,"state":"online"}"#,
    );
    let json = r#"{"event_id":"fresh-1","timestamp":1700000000123,"device":{"name":"thermo-1","state":"online","lastOnlineTime":"2023-11-14T22:13:20Z"}}"#;
    assert_eq!(
        effects,
        Effects {
            rows: vec![RowChange::PutState {
                device: ID.into(),
                state: "online".into(),
                last_online: "2023-11-14T22:13:20Z".into(),
            }],
            publish: vec![Publish {
                topic: "$hw/events/device/default/thermo-1/state/update/result".into(),
                payload: json.into(),
            }],
            cloud: vec![CloudMessage {
                operation: "update".into(),
                resource: "device/default/thermo-1/state/update".into(),
                content: CloudContent::Text(json.into()),
            }],
            desired: vec![],
            removed: vec![],
        }
    );
    let device = &devices[ID];
    assert_eq!(device.state, "online");
    assert_eq!(device.last_online, "2023-11-14T22:13:20Z");
}

#[test]
fn state_is_checked_lower_cased_but_stored_as_sent() {
    let mut devices = devices();
    let effects = run(&mut devices, r#"{"state":"OK"}"#);
    assert_eq!(
        effects.publish[0].payload,
        r#"{"event_id":"fresh-1","timestamp":1700000000123,"device":{"name":"thermo-1","state":"OK","lastOnlineTime":"2023-11-14T22:13:20Z"}}"#
    );
    assert_eq!(devices[ID].state, "OK");
    assert_eq!(devices[ID].last_online, "2023-11-14T22:13:20Z");
}

#[test]
fn other_states_clear_last_online_which_is_then_omitted() {
    for state in ["offline", "unknown", "Unhealthy"] {
        let mut devices = devices();
        devices.get_mut(ID).unwrap().last_online = "2023-01-01T00:00:00Z".into();
        let effects = run(&mut devices, &format!(r#"{{"state":"{state}"}}"#));
        let json = format!(
            r#"{{"event_id":"fresh-1","timestamp":1700000000123,"device":{{"name":"thermo-1","state":"{state}"}}}}"#
        );
        assert_eq!(effects.publish[0].payload, json);
        assert_eq!(effects.cloud[0].content, CloudContent::Text(json));
        assert_eq!(
            effects.rows,
            vec![RowChange::PutState {
                device: ID.into(),
                state: state.into(),
                last_online: String::new(),
            }]
        );
        assert_eq!(devices[ID].last_online, "");
    }
}

#[test]
fn a_device_without_name_omits_it() {
    let mut devices = devices();
    devices.get_mut(ID).unwrap().name.clear();
    let effects = run(&mut devices, r#"{"state":"offline"}"#);
    assert_eq!(
        effects.publish[0].payload,
        r#"{"event_id":"fresh-1","timestamp":1700000000123,"device":{"state":"offline"}}"#
    );
}

#[test]
fn ignored_without_any_effect() {
    for body in [
        r#"{"state":"broken"}"#,
        r#"{"state":""}"#,
        r#"{"state":null}"#,
        r#"{}"#,
        r#"{"state":"online","timestamp":"soon"}"#,
        r#"{"state":"online","attributes":5}"#,
        r#"{"state":1}"#,
        "not json",
        "",
    ] {
        let mut devices = devices();
        let before = devices.clone();
        assert_eq!(run(&mut devices, body), Effects::default(), "{body}");
        assert_eq!(devices, before, "{body}");
    }
}

#[test]
fn unknown_devices_are_ignored() {
    let mut devices = devices();
    let effects = update(
        &mut devices,
        "default/other",
        br#"{"state":"online"}"#,
        NOW,
        &mut ids(),
    );
    assert_eq!(effects, Effects::default());
}

#[test]
fn nulls_read_as_absent_like_go() {
    let mut devices = devices();
    let effects = run(
        &mut devices,
        r#"{"event_id":null,"timestamp":null,"state":"online","attributes":null}"#,
    );
    assert_eq!(effects.rows.len(), 1);
}
