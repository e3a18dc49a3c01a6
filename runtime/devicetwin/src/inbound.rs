//! What an incoming bus message asks devicetwin to do (spec §5.1), decided from its route
//! alone so every source — eventbus (MQTT), the Wasm host, the cloud, metamanager, edgehub —
//! lands on the same handlers.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE;
use wedge_core::Message;
use wedge_core::message::{group, module, operation};

use crate::topics::{DeviceTopic, NodeTopic, parse_device_topic, parse_node_topic};

/// Source name of messages the node's Wasm host sends (resource = the plain topic).
pub const WASM_SOURCE: &str = "wasm";

/// Source name of the `Device`/`DeviceModel` objects a reload of `wedge.devices.dir` sends
/// (resource and operations as metamanager's). They are not kept in `device_object`: the
/// directory is read again at every start, so a file removed while the node was stopped
/// takes its devices with it.
pub const DEVICES_DIR_SOURCE: &str = "devices-dir";

/// A request, with the device or node it is about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    /// A confirmation of a message sent to the cloud.
    Confirm {
        /// The confirmed message's id.
        parent: String,
    },
    /// The cloud link came up (`true`) or went down.
    Connection(bool),
    /// A device topic.
    Device {
        /// Device id.
        device: String,
        /// What it asks.
        kind: DeviceTopic,
    },
    /// A node topic.
    Node {
        /// Node id.
        node: String,
        /// What it asks.
        kind: NodeTopic,
    },
    /// Membership update from the cloud.
    MembershipUpdate,
    /// Membership detail from the cloud.
    MembershipDetail,
    /// Attribute update of a device from the cloud.
    CloudAttributes {
        /// Device id.
        device: String,
    },
    /// A cloud twin sync of a device.
    CloudSync {
        /// Device id.
        device: String,
    },
    /// A `Device` or `DeviceModel` object stored (or deleted) by metamanager.
    Definition {
        /// `device` or `devicemodel`.
        kind: DefinitionKind,
        /// `<namespace>/<name>`.
        id: String,
        /// True for `delete`.
        deleted: bool,
        /// True when it comes from `wedge.devices.dir` rather than the cloud.
        local: bool,
    },
    /// Nothing devicetwin handles; the reason is for the debug log.
    Ignored(&'static str),
}

/// Kinds of definition objects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DefinitionKind {
    /// `devices.kubeedge.io` `Device`.
    Device,
    /// `devices.kubeedge.io` `DeviceModel`.
    DeviceModel,
}

/// Classifies `msg`.
pub fn classify(msg: &Message) -> Request {
    if let Some(parent) = msg.parent_id() {
        return Request::Confirm {
            parent: parent.to_owned(),
        };
    }
    let route = &msg.route;
    if route.operation == operation::CONNECT && route.resource == "node/connection" {
        let connected = msg.content.as_string().as_deref() == Some("cloud_connected");
        return Request::Connection(connected);
    }
    match route.source.as_str() {
        // Eventbus: MQTT device and node topics, base64 in the resource.
        group::BUS | module::EVENTBUS => match URL_SAFE.decode(route.resource.as_bytes()) {
            Ok(topic) => match String::from_utf8(topic) {
                Ok(topic) => classify_topic(&topic),
                Err(_) => Request::Ignored("resource is not a UTF-8 topic"),
            },
            Err(_) => Request::Ignored("resource is not URL-safe base64"),
        },
        // The node's Wasm host and DMI (reports of KubeEdge mappers): the plain topic.
        WASM_SOURCE | module::DMI => classify_topic(&route.resource),
        "edgemgr" | module::DEVICECONTROLLER => classify_cloud(msg),
        group::META | module::METAMANAGER => classify_definition(msg, false),
        DEVICES_DIR_SOURCE => classify_definition(msg, true),
        _ => Request::Ignored("unknown source"),
    }
}

fn classify_topic(topic: &str) -> Request {
    if let Some((device, kind)) = parse_device_topic(topic) {
        return Request::Device {
            device: device.to_owned(),
            kind,
        };
    }
    if let Some((node, kind)) = parse_node_topic(topic) {
        return Request::Node {
            node: node.to_owned(),
            kind,
        };
    }
    Request::Ignored("not a device or node topic devicetwin handles")
}

/// The device id in a cloud resource `[node/<node>/]device/<id>[/<suffix>]`.
fn cloud_device(resource: &str, suffix: &str) -> Option<String> {
    let start = resource.find("device/")? + "device/".len();
    let id = resource[start..].strip_suffix(suffix)?;
    crate::topics::valid_device_id(id).then(|| id.to_owned())
}

fn classify_cloud(msg: &Message) -> Request {
    let resource = msg.route.resource.as_str();
    if resource.contains("membership/detail") {
        return Request::MembershipDetail;
    }
    if resource.contains("membership") {
        return Request::MembershipUpdate;
    }
    if resource.contains("twin/cloud_updated") {
        return match cloud_device(resource, "/twin/cloud_updated") {
            Some(device) => Request::CloudSync { device },
            None => Request::Ignored("cloud sync without a device id"),
        };
    }
    if msg.route.operation == "updated" {
        return match cloud_device(resource, "") {
            Some(device) => Request::CloudAttributes { device },
            None => Request::Ignored("attribute update without a device id"),
        };
    }
    Request::Ignored("cloud resource devicetwin does not handle")
}

fn classify_definition(msg: &Message, local: bool) -> Request {
    let parts: Vec<&str> = msg.route.resource.split('/').collect();
    let (namespace, kind, name) = match parts.as_slice() {
        [ns, kind, name] => (*ns, *kind, *name),
        [.., ns, kind, name] if parts.len() > 3 => (*ns, *kind, *name),
        _ => return Request::Ignored("metamanager resource that is no device object"),
    };
    let kind = match kind {
        "device" => DefinitionKind::Device,
        "devicemodel" => DefinitionKind::DeviceModel,
        _ => return Request::Ignored("metamanager resource that is no device object"),
    };
    let deleted = msg.route.operation == operation::DELETE;
    if !deleted
        && msg.route.operation != operation::INSERT
        && msg.route.operation != operation::UPDATE
    {
        return Request::Ignored("operation on a device object devicetwin does not handle");
    }
    if namespace.is_empty() || name.is_empty() {
        return Request::Ignored("device object without namespace or name");
    }
    Request::Definition {
        kind,
        id: format!("{namespace}/{name}"),
        deleted,
        local,
    }
}

#[cfg(test)]
mod tests;
