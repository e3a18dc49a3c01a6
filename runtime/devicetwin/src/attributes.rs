//! Device attribute updates (`$hw/events/device/<id>/updated` from MQTT, or the cloud's op
//! `updated` on `device/<id>`), and the body they share with state updates.
//!
//! KubeEdge's merge rules, per attribute in the request:
//! * `null` deletes an existing attribute when it is optional (else nothing happens);
//! * an existing attribute takes the sent `value` when it differs (an absent `value` is `""`, as
//!   in KubeEdge, where the field is a plain string), the sent `metadata.type` when it differs,
//!   and `optional` only from true to false;
//! * a new attribute is added with type `metadata.type` (default `string`) and `optional`
//!   (default true).
//!
//! Only changes are published, on the device's `…/updated` topic, as `{Base,"attributes"}` with
//! the request's `event_id`: a changed attribute lists just what changed (`value` is always
//! written, `""` when it did not change), a new one is echoed as received, a deleted one is
//! `null`. A request that changes nothing, names an unknown device, or cannot be read publishes
//! nothing.

use std::collections::BTreeMap;

use serde::{Deserialize, Deserializer, Serialize};

use crate::device::{Devices, StoredAttr};
use crate::effects::{Effects, RowChange};
use crate::topics::device_topic;
use crate::twin_get::go_lossy_utf8;
use crate::wire::to_json;

/// `{"type": "..."}` of an attribute.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AttrMetadata {
    /// `string`, `int`...; omitted when empty, `null` read as empty.
    #[serde(
        rename = "type",
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "String::is_empty"
    )]
    pub kind: String,
}

/// An attribute on the wire: `{"value","optional","metadata"}`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WireAttr {
    /// The value; always written, `""` when absent or `null`.
    #[serde(default, deserialize_with = "null_as_default")]
    pub value: String,
    /// Whether it may be deleted; omitted when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub optional: Option<bool>,
    /// Its type; omitted when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<AttrMetadata>,
}

/// The body of a state or attribute update: `{Base,"state","attributes"}`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub struct DeviceUpdate {
    /// Echoed in the attribute notice.
    #[serde(default, deserialize_with = "null_as_default")]
    pub event_id: String,
    /// Unix ms of the sender (unused, but must be an integer as in KubeEdge).
    #[serde(default, deserialize_with = "null_as_default")]
    pub timestamp: i64,
    /// Reported state (state updates).
    #[serde(default, deserialize_with = "null_as_default")]
    pub state: String,
    /// Attributes by name, `null` marking a deletion (attribute updates).
    #[serde(default)]
    pub attributes: Option<BTreeMap<String, Option<WireAttr>>>,
}

/// Reads a state or attribute update the way KubeEdge's Go decoder would accept it: `null`
/// anywhere means "absent", wrong types refuse the whole body, and bytes that are not UTF-8 are
/// replaced (one U+FFFD each) instead of refusing the body.
pub fn parse_device_update(payload: &[u8]) -> Result<DeviceUpdate, serde_json::Error> {
    serde_json::from_str(&go_lossy_utf8(payload))
}

/// Go leaves a field alone when the JSON says `null`; serde would refuse it.
fn null_as_default<'de, D, T>(deserializer: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Default + Deserialize<'de>,
{
    Ok(Option::<T>::deserialize(deserializer)?.unwrap_or_default())
}

/// `{Base,"attributes"}` published on `…/updated`.
#[derive(Serialize)]
struct AttrNotice<'a> {
    event_id: &'a str,
    timestamp: i64,
    attributes: &'a BTreeMap<String, Option<WireAttr>>,
}

/// Applies an attribute update of `device_id` to `devices`.
///
/// `_fresh_id` is not used: the notice echoes the request's `event_id`, as KubeEdge does. It is
/// taken so that every device handler is called the same way.
pub fn update(
    devices: &mut Devices,
    device_id: &str,
    payload: &[u8],
    now: i64,
    _fresh_id: &mut dyn FnMut() -> String,
) -> Effects {
    let request = match parse_device_update(payload) {
        Ok(request) => request,
        Err(err) => {
            tracing::debug!(
                device = device_id,
                "attribute update ignored, unreadable body: {err}"
            );
            return Effects::default();
        }
    };
    let Some(device) = devices.get_mut(device_id) else {
        tracing::debug!(
            device = device_id,
            "attribute update ignored, unknown device"
        );
        return Effects::default();
    };
    let mut effects = Effects::default();
    let mut notice = BTreeMap::new();
    for (name, sent) in request.attributes.unwrap_or_default() {
        let change = match (device.attributes.get_mut(&name), sent) {
            (Some(stored), None) => {
                if !stored.optional {
                    continue;
                }
                device.attributes.remove(&name);
                effects.rows.push(RowChange::DeleteAttr {
                    device: device_id.to_owned(),
                    name: name.clone(),
                });
                None
            }
            (Some(stored), Some(sent)) => {
                let Some(change) = merge(stored, sent) else {
                    continue;
                };
                effects.rows.push(put(device_id, &name, stored));
                Some(change)
            }
            (None, Some(sent)) => {
                let stored = StoredAttr {
                    description: String::new(),
                    value: sent.value.clone(),
                    optional: sent.optional.unwrap_or(true),
                    attr_type: sent
                        .metadata
                        .as_ref()
                        .map_or_else(|| "string".to_owned(), |m| m.kind.clone()),
                };
                effects.rows.push(put(device_id, &name, &stored));
                device.attributes.insert(name.clone(), stored);
                Some(sent)
            }
            // Deleting what does not exist (KubeEdge would dereference nil here).
            (None, None) => continue,
        };
        notice.insert(name, change);
    }
    if !notice.is_empty() {
        let payload = to_json(&AttrNotice {
            event_id: &request.event_id,
            timestamp: now,
            attributes: &notice,
        });
        effects.publish(device_topic(device_id, "updated"), payload);
    }
    effects
}

/// Merges `sent` into an existing attribute; returns what changed, or `None` if nothing did.
fn merge(stored: &mut StoredAttr, sent: WireAttr) -> Option<WireAttr> {
    let mut change = WireAttr::default();
    let mut changed = false;
    if stored.value != sent.value {
        stored.value.clone_from(&sent.value);
        change.value = sent.value;
        changed = true;
    }
    // KubeEdge compares the metadata objects; they hold only the type.
    if let Some(metadata) = sent.metadata
        && metadata.kind != stored.attr_type
    {
        stored.attr_type.clone_from(&metadata.kind);
        change.metadata = Some(metadata);
        changed = true;
    }
    if sent.optional == Some(false) && stored.optional {
        stored.optional = false;
        change.optional = Some(false);
        changed = true;
    }
    changed.then_some(change)
}

fn put(device: &str, name: &str, attr: &StoredAttr) -> RowChange {
    RowChange::PutAttr {
        device: device.to_owned(),
        name: name.to_owned(),
        attr: attr.clone(),
    }
}

#[cfg(test)]
mod tests;
