use wedge_core::{Content, Message};

use super::*;

fn msg(source: &str, op: &str, resource: &str) -> Message {
    Message::build(source, "user", op, resource, Content::string("{}"))
}

fn mqtt(topic: &str) -> Message {
    msg("bus", "response", &URL_SAFE.encode(topic))
}

#[test]
fn mqtt_topics_of_both_device_id_generations() {
    assert_eq!(
        classify(&mqtt("$hw/events/device/default/thermo-1/twin/update")),
        Request::Device {
            device: "default/thermo-1".into(),
            kind: DeviceTopic::TwinUpdate
        }
    );
    assert_eq!(
        classify(&mqtt("$hw/events/device/dev-1/state/update")),
        Request::Device {
            device: "dev-1".into(),
            kind: DeviceTopic::StateUpdate
        }
    );
    assert_eq!(
        classify(&mqtt("$hw/events/node/edge-1/membership/get")),
        Request::Node {
            node: "edge-1".into(),
            kind: NodeTopic::MembershipGet
        }
    );
    assert!(matches!(
        classify(&mqtt("$hw/events/device/a/b/c/twin/update")),
        Request::Ignored(_)
    ));
    assert!(matches!(
        classify(&msg("bus", "response", "not base64!")),
        Request::Ignored(_)
    ));
}

#[test]
fn wasm_reports_carry_the_plain_topic() {
    assert_eq!(
        classify(&msg(
            "wasm",
            "update",
            "$hw/events/device/default/t/twin/update"
        )),
        Request::Device {
            device: "default/t".into(),
            kind: DeviceTopic::TwinUpdate
        }
    );
}

#[test]
fn cloud_messages() {
    assert_eq!(
        classify(&msg("devicecontroller", "update", "node/edge-1/membership")),
        Request::MembershipUpdate
    );
    assert_eq!(
        classify(&msg("edgemgr", "response", "membership/detail")),
        Request::MembershipDetail
    );
    assert_eq!(
        classify(&msg(
            "devicecontroller",
            "update",
            "node/edge-1/device/default/thermo-1/twin/cloud_updated"
        )),
        Request::CloudSync {
            device: "default/thermo-1".into()
        }
    );
    assert_eq!(
        classify(&msg("devicecontroller", "updated", "device/dev-1")),
        Request::CloudAttributes {
            device: "dev-1".into()
        }
    );
    let mut confirm = msg("devicecontroller", "response", "twin");
    confirm.header.parent_id = "abc".into();
    assert_eq!(
        classify(&confirm),
        Request::Confirm {
            parent: "abc".into()
        }
    );
    let connected = Message::build(
        "edgehub",
        "twin",
        "connect",
        "node/connection",
        Content::string("cloud_connected"),
    );
    assert_eq!(classify(&connected), Request::Connection(true));
}

#[test]
fn device_objects_from_metamanager() {
    assert_eq!(
        classify(&msg("meta", "insert", "default/device/thermo-1")),
        Request::Definition {
            kind: DefinitionKind::Device,
            id: "default/thermo-1".into(),
            deleted: false,
            local: false,
        }
    );
    assert_eq!(
        classify(&msg(
            "metamanager",
            "delete",
            "node/edge-1/factory/devicemodel/thermo"
        )),
        Request::Definition {
            kind: DefinitionKind::DeviceModel,
            id: "factory/thermo".into(),
            deleted: true,
            local: false,
        }
    );
    assert_eq!(
        classify(&msg("devices-dir", "update", "default/device/thermo-1")),
        Request::Definition {
            kind: DefinitionKind::Device,
            id: "default/thermo-1".into(),
            deleted: false,
            local: true,
        }
    );
    assert!(matches!(
        classify(&msg("meta", "insert", "default/pod/p")),
        Request::Ignored(_)
    ));
}
