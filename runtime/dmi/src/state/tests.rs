use wedge_device::definition::{Catalog, KubeObject, parse_yaml};

use super::*;

const OBJECTS: &str = r#"
apiVersion: devices.kubeedge.io/v1beta1
kind: DeviceModel
metadata: {name: sensor}
spec:
  protocol: virtualProtocol
  properties:
  - {name: setpoint, type: INT, accessMode: ReadWrite}
---
apiVersion: devices.kubeedge.io/v1beta1
kind: Device
metadata: {name: d1}
spec:
  deviceModelRef: {name: sensor}
  protocol: {protocolName: virtualProtocol}
  properties:
  - name: setpoint
    desired: {value: "30"}
    visitors: {protocolName: virtualProtocol, configData: {key: setpoint}}
"#;

fn definition() -> DeviceDefinition {
    let mut catalog = Catalog::new();
    let objects: Vec<KubeObject> = parse_yaml(OBJECTS).unwrap();
    objects
        .into_iter()
        .flat_map(|o| catalog.put(o))
        .next()
        .unwrap()
}

fn info() -> pb::MapperInfo {
    pb::MapperInfo {
        name: "m".into(),
        protocol: "virtualProtocol".into(),
        address: b"/tmp/m.sock".to_vec(),
        ..Default::default()
    }
}

const RATE: crate::settings::Rate = crate::settings::Rate {
    per_second: 100.0,
    burst: 200,
};

fn owner() -> crate::peer::Peer {
    crate::peer::Peer {
        uid: 1000,
        gid: 1000,
        pid: Some(1),
    }
}

fn desired_of(call: &DeviceCall) -> String {
    let (DeviceCall::Register(d) | DeviceCall::Update(d)) = call else {
        panic!("{call:?}");
    };
    d.spec.as_ref().unwrap().properties[0]
        .desired
        .as_ref()
        .unwrap()
        .value
        .clone()
}

#[test]
fn a_new_device_goes_with_its_model_then_changes_are_updates_and_removal_removes() {
    let mut state = State::default();
    state.mappers.insert(
        "virtualProtocol".into(),
        MapperLink::new(info(), owner(), RATE, 1, false),
    );
    state.define(definition());
    let step = state.next_step("virtualProtocol", 1).unwrap();
    assert!(matches!(step.model, Some((_, ModelCall::Create(_)))));
    assert!(matches!(step.call, DeviceCall::Register(_)));
    assert_eq!(desired_of(&step.call), "30");
    state.done("virtualProtocol", 1, step);
    assert_eq!(state.next_step("virtualProtocol", 1), None);

    // The same definition again: nothing to send.
    state.define(definition());
    assert_eq!(state.next_step("virtualProtocol", 1), None);

    // A desired value: an update carrying it; a failed call is tried again.
    state.desire("default/d1", "setpoint", "35");
    let step = state.next_step("virtualProtocol", 1).unwrap();
    assert_eq!(step.model, None);
    assert_eq!(desired_of(&step.call), "35");
    state.retry("virtualProtocol", 1, &step);
    let again = state.next_step("virtualProtocol", 1).unwrap();
    assert_eq!(again, step);
    state.done("virtualProtocol", 1, again);
    assert_eq!(state.next_step("virtualProtocol", 1), None);

    // A replaced registration's worker gets nothing more.
    state.remove("default/d1");
    assert_eq!(state.next_step("virtualProtocol", 0), None);
    let step = state.next_step("virtualProtocol", 1).unwrap();
    assert_eq!(
        step.call,
        DeviceCall::Remove {
            namespace: "default".into(),
            name: "d1".into()
        }
    );
}

#[test]
fn after_a_restart_held_devices_are_adopted_and_only_pending_desired_values_are_sent() {
    let mut state = State::default();
    state.mappers.insert(
        "virtualProtocol".into(),
        MapperLink::new(info(), owner(), RATE, 1, true),
    );
    state.define(definition());
    assert_eq!(
        state.next_step("virtualProtocol", 1),
        None,
        "adopted as held"
    );
    state.desire("default/d1", "setpoint", "30");
    let step = state.next_step("virtualProtocol", 1).unwrap();
    assert_eq!(step.model, None, "the mapper kept its model");
    assert!(matches!(step.call, DeviceCall::Update(_)));
    assert_eq!(desired_of(&step.call), "30");
}

#[test]
fn the_register_answer_holds_the_twins_desired_values_not_the_objects() {
    let mut state = State::default();
    let mut definition = definition();
    // devicetwin hands definitions over with the twins' (reviewed) desired values.
    definition.properties[0].desired = Some("25".into());
    state.define(definition);
    let answer = state.register_answer("virtualProtocol");
    assert_eq!(answer.model_list.len(), 1);
    assert_eq!(
        desired_of(&DeviceCall::Register(answer.device_list[0].clone())),
        "25"
    );
    assert!(state.register_answer("other").device_list.is_empty());
}
