//! Device and node topics of KubeEdge's MQTT protocol.
//!
//! A device id is one segment (KubeEdge <= 1.16, `dev-1`) or two (`<namespace>/<name>`, since
//! 1.17). The id is found by stripping the prefix and the known suffix the topic ends with —
//! never by splitting at a fixed index, which would break one generation or the other.

/// Prefix of device topics.
pub const DEVICE_PREFIX: &str = "$hw/events/device/";
/// Prefix of node topics.
pub const NODE_PREFIX: &str = "$hw/events/node/";

/// What a device topic asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeviceTopic {
    /// `/twin/update`: a mapper reports values.
    TwinUpdate,
    /// `/twin/get`: read the twins.
    TwinGet,
    /// `/state/update`: a mapper reports the device state.
    StateUpdate,
    /// `/updated`: attributes changed.
    AttributesUpdated,
    /// `/state/get`: read the state (no handler in KubeEdge).
    StateGet,
    /// `/twin/cloud_updated`: a cloud sync (cloudcore <= v1.14).
    TwinCloudUpdated,
}

/// Suffixes in matching order: longer suffixes that end like shorter ones come first.
const DEVICE_SUFFIXES: &[(&str, DeviceTopic)] = &[
    ("/twin/cloud_updated", DeviceTopic::TwinCloudUpdated),
    ("/twin/update", DeviceTopic::TwinUpdate),
    ("/twin/get", DeviceTopic::TwinGet),
    ("/state/update", DeviceTopic::StateUpdate),
    ("/state/get", DeviceTopic::StateGet),
    ("/updated", DeviceTopic::AttributesUpdated),
];

/// Splits a device topic into its device id and kind; `None` for anything that is not an
/// inbound device topic with a 1- or 2-segment id.
pub fn parse_device_topic(topic: &str) -> Option<(&str, DeviceTopic)> {
    let rest = topic.strip_prefix(DEVICE_PREFIX)?;
    let (id, kind) = DEVICE_SUFFIXES
        .iter()
        .find_map(|(suffix, kind)| rest.strip_suffix(suffix).map(|id| (id, *kind)))?;
    valid_device_id(id).then_some((id, kind))
}

/// True for a 1- or 2-segment id with no empty segment, usable in a topic name: no MQTT
/// wildcard (`+`, `#`) nor NUL, or every result for the device would go to a topic no broker
/// takes (found by fuzzing: a Wasm guest's plain topic or a cloud resource could carry one).
pub fn valid_device_id(id: &str) -> bool {
    let segments: Vec<&str> = id.split('/').collect();
    (1..=2).contains(&segments.len())
        && segments.iter().all(|s| !s.is_empty())
        && !id.contains(['+', '#', '\0'])
}

/// What a node topic asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeTopic {
    /// `/membership/get`.
    MembershipGet,
    /// `/membership/detail/result`.
    MembershipDetailResult,
    /// `/membership/updated`.
    MembershipUpdated,
}

/// Splits a node topic into the node id (its 4th segment) and kind.
pub fn parse_node_topic(topic: &str) -> Option<(&str, NodeTopic)> {
    let rest = topic.strip_prefix(NODE_PREFIX)?;
    let (node, suffix) = rest.split_once('/')?;
    if node.is_empty() {
        return None;
    }
    let kind = match suffix {
        "membership/get" => NodeTopic::MembershipGet,
        "membership/detail/result" => NodeTopic::MembershipDetailResult,
        "membership/updated" => NodeTopic::MembershipUpdated,
        _ => return None,
    };
    Some((node, kind))
}

/// An outbound device topic: the id echoed verbatim.
pub fn device_topic(id: &str, suffix: &str) -> String {
    format!("{DEVICE_PREFIX}{id}/{suffix}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_id_generations_by_suffix() {
        assert_eq!(
            parse_device_topic("$hw/events/device/default/thermo-1/twin/update"),
            Some(("default/thermo-1", DeviceTopic::TwinUpdate))
        );
        assert_eq!(
            parse_device_topic("$hw/events/device/dev-1/twin/update"),
            Some(("dev-1", DeviceTopic::TwinUpdate))
        );
        assert_eq!(
            parse_device_topic("$hw/events/device/ns/d/twin/cloud_updated"),
            Some(("ns/d", DeviceTopic::TwinCloudUpdated))
        );
        assert_eq!(
            parse_device_topic("$hw/events/device/ns/d/updated"),
            Some(("ns/d", DeviceTopic::AttributesUpdated))
        );
        assert_eq!(
            parse_device_topic("$hw/events/device/d/state/get"),
            Some(("d", DeviceTopic::StateGet))
        );
    }

    #[test]
    fn malformed_ids_are_dropped() {
        for topic in [
            "$hw/events/device//twin/update",
            "$hw/events/device/a/b/c/twin/update",
            "$hw/events/device/a//twin/update",
            "$hw/events/device/twin/update",
            "$hw/events/device/a/twin/unknown",
            "other/a/twin/update",
            // Fuzzing regression: ids that cannot be part of a topic name.
            "$hw/events/device/#/twin/update",
            "$hw/events/device/default/a+b/twin/update",
            "$hw/events/device/a\0/twin/update",
        ] {
            assert_eq!(parse_device_topic(topic), None, "{topic}");
        }
        for id in ["#", "a+b", "default/#", "x\0"] {
            assert!(!valid_device_id(id), "{id:?}");
        }
    }

    #[test]
    fn node_topics() {
        assert_eq!(
            parse_node_topic("$hw/events/node/edge-1/membership/get"),
            Some(("edge-1", NodeTopic::MembershipGet))
        );
        assert_eq!(
            parse_node_topic("$hw/events/node/edge-1/membership/detail/result"),
            Some(("edge-1", NodeTopic::MembershipDetailResult))
        );
        assert_eq!(
            parse_node_topic("$hw/events/node/edge-1/membership/detail"),
            None
        );
        assert_eq!(
            device_topic("default/thermo-1", "twin/update/result"),
            "$hw/events/device/default/thermo-1/twin/update/result"
        );
    }
}
