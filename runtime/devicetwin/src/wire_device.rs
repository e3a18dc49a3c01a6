//! Wire JSON of devices, attributes and membership messages (`spec` §5.2, §5.6, §5.7).
//!
//! Same conventions as [`crate::wire`]: declaration order is field order, maps are `BTreeMap`s.
//! Every `Device` field is left out when empty (cloudcore and mappers read absent and empty
//! alike), while `added_devices`/`removed_devices` are always written — `null` when absent — and
//! `devices` is always an array.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::device::{DeviceRecord, StoredAttr};
use crate::mapper_update::DELETED;
use crate::wire::{Twin, TypeMetadata};

/// `{"value": "...", "optional": bool, "metadata": {"type": "..."}}`: one device attribute.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Attr {
    /// The value; always written.
    #[serde(default)]
    pub value: String,
    /// Whether the attribute may be removed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub optional: Option<bool>,
    /// Its type.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<TypeMetadata>,
}

impl Attr {
    /// The wire form of a stored attribute: `optional` and `metadata` always set, as edgecore
    /// loads them from its table.
    pub fn from_stored(stored: &StoredAttr) -> Attr {
        Attr {
            value: stored.value.clone(),
            optional: Some(stored.optional),
            metadata: Some(TypeMetadata {
                kind: stored.attr_type.clone(),
            }),
        }
    }

    /// The stored form of a received attribute: `optional` defaults to true and the type to
    /// `string` when no metadata came, as KubeEdge stores them.
    pub fn to_stored(&self) -> StoredAttr {
        StoredAttr {
            description: String::new(),
            value: self.value.clone(),
            optional: self.optional.unwrap_or(true),
            attr_type: self
                .metadata
                .as_ref()
                .map_or_else(|| "string".to_owned(), |m| m.kind.clone()),
        }
    }
}

/// A device as membership messages carry it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Device {
    /// `<namespace>/<name>` or a legacy single segment.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub id: String,
    /// Display name.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    /// Free text.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub description: String,
    /// Last reported state.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub state: String,
    /// RFC 3339 time of the last `online`/`ok` state.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub last_online: String,
    /// Attributes by name (`null` entries are tolerated on input).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub attributes: BTreeMap<String, Option<Attr>>,
    /// Twins by key (`null` marks a deleted twin in published membership messages).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub twin: BTreeMap<String, Option<Twin>>,
}

impl Device {
    /// A stored device without its twins: the form of a membership get result.
    pub fn summary(record: &DeviceRecord) -> Device {
        Device {
            id: record.id.clone(),
            name: record.name.clone(),
            description: record.description.clone(),
            state: record.state.clone(),
            last_online: record.last_online.clone(),
            attributes: record
                .attributes
                .iter()
                .map(|(name, attr)| (name.clone(), Some(Attr::from_stored(attr))))
                .collect(),
            twin: BTreeMap::new(),
        }
    }

    /// A stored device with its twins as stored (versions included, deleted twins as their
    /// `deleted` rows); [`Device::for_membership`] turns it into the published form.
    pub fn with_twins(record: &DeviceRecord) -> Device {
        Device {
            twin: record
                .twins
                .iter()
                .map(|(key, twin)| (key.clone(), Some(twin.to_wire())))
                .collect(),
            ..Device::summary(record)
        }
    }

    /// The `device` row of a device joining the node: id, name, description and state as
    /// received, no `last_online`, attributes as [`Attr::to_stored`] makes them, no twins yet
    /// (they arrive through a sync, which applies the version rules).
    pub fn new_record(&self) -> DeviceRecord {
        DeviceRecord {
            id: self.id.clone(),
            name: self.name.clone(),
            description: self.description.clone(),
            state: self.state.clone(),
            last_online: String::new(),
            attributes: self
                .attributes
                .iter()
                .filter_map(|(name, attr)| Some((name.clone(), attr.as_ref()?.to_stored())))
                .collect(),
            twins: BTreeMap::new(),
        }
    }

    /// The device as `…/membership/updated` publishes it: twin versions stripped and deleted
    /// twins (`metadata.type` `deleted`) written as `null`, everything else as received.
    pub fn for_membership(&self) -> Device {
        let twin = self
            .twin
            .iter()
            .map(|(key, twin)| {
                let published = twin
                    .as_ref()
                    .filter(|t| t.metadata.as_ref().is_none_or(|m| m.kind != DELETED))
                    .map(Twin::without_versions);
                (key.clone(), published)
            })
            .collect();
        Device {
            twin,
            ..self.clone()
        }
    }
}

/// `…/membership/updated`, and a membership update from the cloud.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MembershipMessage {
    /// Fresh for published messages.
    #[serde(default)]
    pub event_id: String,
    /// Unix ms.
    #[serde(default)]
    pub timestamp: i64,
    /// Devices joining the node; `null` when none.
    #[serde(default)]
    pub added_devices: Option<Vec<Device>>,
    /// Devices leaving the node; `null` when none.
    #[serde(default)]
    pub removed_devices: Option<Vec<Device>>,
}

/// The cloud's answer to a membership detail request: every device of the node.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MembershipDetail {
    /// The cloud's event id.
    #[serde(default)]
    pub event_id: String,
    /// Unix ms.
    #[serde(default)]
    pub timestamp: i64,
    /// The node's devices; absent or `null` means none.
    #[serde(default)]
    pub devices: Option<Vec<Device>>,
}

/// `…/membership/get/result`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MembershipGetResult {
    /// The request's `event_id`.
    pub event_id: String,
    /// Unix ms.
    pub timestamp: i64,
    /// Every device of the node, without twins; `[]` when there are none.
    pub devices: Vec<Device>,
}

/// `…/updated`: attributes that changed (`null` for removed ones).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AttributesMessage {
    /// `""` for changes made by a membership sync.
    #[serde(default)]
    pub event_id: String,
    /// Unix ms.
    #[serde(default)]
    pub timestamp: i64,
    /// Changed attributes.
    #[serde(default)]
    pub attributes: BTreeMap<String, Option<Attr>>,
}

/// The content of the `membership/detail` request to the cloud (sent as a JSON string).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DetailRequest {
    /// Always `group_membership_event`.
    pub event_type: String,
    /// A fresh id.
    pub event_id: String,
    /// The node name.
    pub group_id: String,
    /// Always `detail`.
    pub operation: String,
    /// Unix ms.
    pub timestamp: i64,
}

impl DetailRequest {
    /// A request for every device of `node`.
    pub fn new(node: &str, event_id: String, now: i64) -> DetailRequest {
        DetailRequest {
            event_type: "group_membership_event".to_owned(),
            event_id,
            group_id: node.to_owned(),
            operation: "detail".to_owned(),
            timestamp: now,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mapper_update::StoredTwin;
    use crate::wire::{TwinValue, ValueMetadata, Version, to_json};

    fn record() -> DeviceRecord {
        DeviceRecord {
            id: "default/thermo-1".into(),
            name: "thermo-1".into(),
            description: String::new(),
            state: "online".into(),
            last_online: "2023-11-14T22:13:20Z".into(),
            attributes: [(
                "unit".to_owned(),
                StoredAttr {
                    description: "ignored on the wire".into(),
                    value: "celsius".into(),
                    optional: false,
                    attr_type: "string".into(),
                },
            )]
            .into(),
            twins: [
                (
                    "gone".to_owned(),
                    StoredTwin {
                        expected_version: Some(Version { cloud: 2, edge: 0 }),
                        optional: true,
                        attr_type: DELETED.into(),
                        ..StoredTwin::default()
                    },
                ),
                (
                    "temperature".to_owned(),
                    StoredTwin {
                        actual: Some(TwinValue {
                            value: Some("20".into()),
                            metadata: Some(ValueMetadata { timestamp: 5 }),
                        }),
                        actual_version: Some(Version { cloud: 0, edge: 3 }),
                        optional: true,
                        attr_type: "int".into(),
                        ..StoredTwin::default()
                    },
                ),
            ]
            .into(),
        }
    }

    #[test]
    fn summary_omits_empty_fields_and_twins() {
        assert_eq!(
            to_json(&Device::summary(&record())),
            r#"{"id":"default/thermo-1","name":"thermo-1","state":"online","last_online":"2023-11-14T22:13:20Z","attributes":{"unit":{"value":"celsius","optional":false,"metadata":{"type":"string"}}}}"#
        );
        assert_eq!(to_json(&Device::default()), "{}");
    }

    #[test]
    fn membership_form_strips_versions_and_nulls_deleted_twins() {
        let device = Device::with_twins(&record());
        assert_eq!(
            to_json(&device.twin),
            r#"{"gone":{"optional":true,"metadata":{"type":"deleted"},"expected_version":{"cloud":2,"edge":0}},"temperature":{"actual":{"value":"20","metadata":{"timestamp":5}},"optional":true,"metadata":{"type":"int"},"actual_version":{"cloud":0,"edge":3}}}"#
        );
        assert_eq!(
            to_json(&device.for_membership().twin),
            r#"{"gone":null,"temperature":{"actual":{"value":"20","metadata":{"timestamp":5}},"optional":true,"metadata":{"type":"int"}}}"#
        );
    }

    #[test]
    fn membership_lists_are_null_when_absent_and_devices_always_written() {
        let message = MembershipMessage {
            event_id: "e".into(),
            timestamp: 7,
            added_devices: None,
            removed_devices: Some(vec![Device {
                id: "d".into(),
                ..Device::default()
            }]),
        };
        assert_eq!(
            to_json(&message),
            r#"{"event_id":"e","timestamp":7,"added_devices":null,"removed_devices":[{"id":"d"}]}"#
        );
        let result = MembershipGetResult {
            event_id: "g".into(),
            timestamp: 7,
            devices: Vec::new(),
        };
        assert_eq!(
            to_json(&result),
            r#"{"event_id":"g","timestamp":7,"devices":[]}"#
        );
    }

    #[test]
    fn received_attributes_get_kubeedge_defaults() {
        let device: Device = serde_json::from_str(
            r#"{"id":"d","attributes":{"a":{"value":"1"},"b":{"value":"x","optional":false,"metadata":{"type":"int"}},"c":null}}"#,
        )
        .unwrap();
        let record = device.new_record();
        assert_eq!(record.attributes.len(), 2, "null attributes are skipped");
        assert_eq!(
            record.attributes["a"],
            StoredAttr {
                description: String::new(),
                value: "1".into(),
                optional: true,
                attr_type: "string".into(),
            }
        );
        assert!(!record.attributes["b"].optional);
        assert_eq!(record.attributes["b"].attr_type, "int");
    }

    #[test]
    fn detail_request_field_order() {
        assert_eq!(
            to_json(&DetailRequest::new("edge-1", "id-1".into(), 1700000000500)),
            r#"{"event_type":"group_membership_event","event_id":"id-1","group_id":"edge-1","operation":"detail","timestamp":1700000000500}"#
        );
    }
}
