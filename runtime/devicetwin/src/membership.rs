//! Membership: devices joining and leaving the node, the membership get, and the detail
//! request/result exchanged with the cloud on every connect (`spec` §5.6, §5.7).
//!
//! A membership message is checked whole (readable, device ids, twin keys and values) before
//! anything changes, so a bad one changes nothing; edgecore only logs such messages, and so do
//! we. Removed devices are the `DeleteDevice` rows of the returned effects ([`removed_ids`]):
//! the caller tells the mappers after the commit.

use std::collections::BTreeSet;

use serde::Deserialize;
use serde::de::DeserializeOwned;

use crate::cloud_sync::{self, DealType};
use crate::device::Devices;
use crate::effects::{CloudContent, CloudMessage, Effects, RowChange};
use crate::topics::{NODE_PREFIX, valid_device_id};
use crate::validate::BAD_REQUEST;
use crate::wire::{ErrorMessage, to_json};
use crate::wire_device::{
    DetailRequest, Device, MembershipDetail, MembershipGetResult, MembershipMessage,
};

mod attrs;

/// A membership update from the cloud (`{"event_id","timestamp","added_devices":[...],
/// "removed_devices":[...]}`): added devices join the node (or, if known, are synced), then the
/// removed ones leave it. Twins sync as deal type 1 with `event_id` `""`.
pub fn update(
    devices: &mut Devices,
    node: &str,
    payload: &[u8],
    now: i64,
    fresh_id: &mut dyn FnMut() -> String,
) -> Effects {
    let message: MembershipMessage = match parse(payload) {
        Ok(message) => message,
        Err(error) => {
            tracing::warn!(%error, "unreadable membership update ignored");
            return Effects::default();
        }
    };
    let added = message.added_devices.unwrap_or_default();
    let what = "membership update";
    let Some(mut effects) = join_all(devices, node, &added, DealType::Sync, what, now, fresh_id)
    else {
        return Effects::default();
    };
    for device in message.removed_devices.iter().flatten() {
        leave(devices, node, device, now, fresh_id, &mut effects);
    }
    effects
}

/// The cloud's membership detail (`{"event_id","timestamp","devices":[...]}`): every listed
/// device joins or is synced (deal type 2, `event_id` `""`), and local devices it does not list
/// leave the node (in id order, each announced as `{"id":"<id>"}`).
pub fn detail_result(
    devices: &mut Devices,
    node: &str,
    payload: &[u8],
    now: i64,
    fresh_id: &mut dyn FnMut() -> String,
) -> Effects {
    let detail: MembershipDetail = match parse(payload) {
        Ok(detail) => detail,
        Err(error) => {
            tracing::warn!(%error, "unreadable membership detail ignored");
            return Effects::default();
        }
    };
    let listed = detail.devices.unwrap_or_default();
    let what = "membership detail";
    let Some(mut effects) = join_all(
        devices,
        node,
        &listed,
        DealType::Detail,
        what,
        now,
        fresh_id,
    ) else {
        return Effects::default();
    };
    let keep: BTreeSet<&str> = listed.iter().map(|d| d.id.as_str()).collect();
    let gone: BTreeSet<String> = devices
        .keys()
        .filter(|id| !keep.contains(id.as_str()))
        .cloned()
        .collect();
    for id in gone {
        let device = Device {
            id,
            ..Device::default()
        };
        leave(devices, node, &device, now, fresh_id, &mut effects);
    }
    effects
}

/// Checks every device `listed` by a membership message, then has each join the node (or, if
/// known, sync its twins with `deal`). `None` (logged) when the checks fail: nothing changed.
fn join_all(
    devices: &mut Devices,
    node: &str,
    listed: &[Device],
    deal: DealType,
    what: &str,
    now: i64,
    fresh_id: &mut dyn FnMut() -> String,
) -> Option<Effects> {
    if let Err(error) = check(listed) {
        tracing::warn!(%error, "{what} refused");
        return None;
    }
    let mut effects = Effects::default();
    for device in listed {
        join(devices, node, device, deal, now, fresh_id, &mut effects);
    }
    Some(effects)
}

/// Answers a membership get (`{"event_id": ...}`) on `…/membership/get/result` with every
/// device of the node, by id, without twins. An unreadable request is answered there with a 400
/// and `event_id` `""`, as edgecore does (its reason quotes the payload).
pub fn get(devices: &Devices, node: &str, payload: &[u8], now: i64) -> Effects {
    #[derive(Deserialize, Default)]
    struct Base {
        #[serde(default)]
        event_id: String,
    }
    let topic = node_topic(node, "membership/get/result");
    let request: Base = match parse(payload) {
        Ok(request) => request,
        Err(error) => {
            let error = ErrorMessage {
                event_id: String::new(),
                timestamp: now,
                code: BAD_REQUEST,
                reason: format!(
                    "Unmarshal get membership info {} failed , err: {error}",
                    String::from_utf8_lossy(payload)
                ),
            };
            return Effects::publish_only(topic, to_json(&error));
        }
    };
    let mut listed: Vec<_> = devices.values().map(Device::summary).collect();
    listed.sort_by(|a, b| a.id.cmp(&b.id));
    let result = MembershipGetResult {
        event_id: request.event_id,
        timestamp: now,
        devices: listed,
    };
    Effects::publish_only(topic, to_json(&result))
}

/// The request for the node's full device list, sent to the cloud on every connect: op `get`,
/// resource `membership/detail`, the JSON carried as a string.
pub fn detail_request(node: &str, now: i64, fresh_id: &mut dyn FnMut() -> String) -> CloudMessage {
    CloudMessage {
        operation: "get".to_owned(),
        resource: "membership/detail".to_owned(),
        content: CloudContent::Text(to_json(&DetailRequest::new(node, fresh_id(), now))),
    }
}

/// The devices a membership message removed (its `DeleteDevice` rows), for the mappers.
pub fn removed_ids(effects: &Effects) -> Vec<String> {
    effects
        .rows
        .iter()
        .filter_map(|row| match row {
            RowChange::DeleteDevice { device } => Some(device.clone()),
            _ => None,
        })
        .collect()
}

/// Why a membership message was refused.
#[derive(Debug, thiserror::Error)]
enum Refused {
    #[error("device id {0:?} is not a 1- or 2-segment id")]
    BadId(String),
    #[error("device {device}: {error}")]
    Twin {
        device: String,
        error: cloud_sync::SyncRefused,
    },
}

/// Checks every listed device before anything changes.
fn check(devices: &[Device]) -> Result<(), Refused> {
    for device in devices {
        if !valid_device_id(&device.id) {
            return Err(Refused::BadId(device.id.clone()));
        }
        cloud_sync::check_twins(&device.twin).map_err(|error| Refused::Twin {
            device: device.id.clone(),
            error,
        })?;
    }
    Ok(())
}

/// A listed device: a new one gets its rows (twins synced first, then attributes, in
/// edgecore's order) and is announced on `…/membership/updated`; a known one has its attributes
/// brought to the list, then its twins synced, and is not announced.
fn join(
    devices: &mut Devices,
    node: &str,
    device: &Device,
    deal: DealType,
    now: i64,
    fresh_id: &mut dyn FnMut() -> String,
    effects: &mut Effects,
) {
    if let Some(record) = devices.get_mut(&device.id) {
        let (rows, changes) = attrs::sync(record, &device.attributes);
        effects.rows.extend(rows);
        attrs::announce(effects, &device.id, changes, now);
        // Checked by `check`: the sync cannot be refused here.
        if let Ok(synced) = cloud_sync::sync_twins(record, &device.twin, deal, "", now, fresh_id) {
            merge(effects, synced);
        }
        return;
    }
    let mut record = device.new_record();
    let synced = cloud_sync::sync_twins(&mut record, &device.twin, deal, "", now, fresh_id)
        .unwrap_or_default();
    // One `PutDevice` carries the device with all its attribute and twin rows.
    effects.rows.push(RowChange::PutDevice(record.clone()));
    effects.publish.extend(synced.publish);
    effects.cloud.extend(synced.cloud);
    effects.desired.extend(synced.desired);
    attrs::announce(effects, &device.id, attrs::joined(&device.attributes), now);
    let announcement = MembershipMessage {
        event_id: fresh_id(),
        timestamp: now,
        added_devices: Some(vec![device.for_membership()]),
        removed_devices: None,
    };
    effects.publish(
        node_topic(node, "membership/updated"),
        to_json(&announcement),
    );
    devices.insert(device.id.clone(), record);
}

/// A device leaving the node: all its rows go and it is announced as received. Unknown devices
/// are skipped.
fn leave(
    devices: &mut Devices,
    node: &str,
    device: &Device,
    now: i64,
    fresh_id: &mut dyn FnMut() -> String,
    effects: &mut Effects,
) {
    if devices.remove(&device.id).is_none() {
        tracing::debug!(device = %device.id, "removal of an unknown device ignored");
        return;
    }
    effects.rows.push(RowChange::DeleteDevice {
        device: device.id.clone(),
    });
    let announcement = MembershipMessage {
        event_id: fresh_id(),
        timestamp: now,
        added_devices: None,
        removed_devices: Some(vec![device.for_membership()]),
    };
    effects.publish(
        node_topic(node, "membership/updated"),
        to_json(&announcement),
    );
}

fn merge(effects: &mut Effects, more: Effects) {
    effects.rows.extend(more.rows);
    effects.publish.extend(more.publish);
    effects.cloud.extend(more.cloud);
    effects.desired.extend(more.desired);
}

fn node_topic(node: &str, suffix: &str) -> String {
    format!("{NODE_PREFIX}{node}/{suffix}")
}

/// Reads a JSON object the way edgecore's decoder does: `null` is an empty message, anything
/// but an object is an error.
fn parse<T: DeserializeOwned + Default>(payload: &[u8]) -> Result<T, serde_json::Error> {
    match serde_json::from_slice::<serde_json::Value>(payload)? {
        serde_json::Value::Null => Ok(T::default()),
        value @ serde_json::Value::Object(_) => serde_json::from_value(value),
        other => Err(serde::de::Error::invalid_type(
            unexpected(&other),
            &"a JSON object",
        )),
    }
}

fn unexpected(value: &serde_json::Value) -> serde::de::Unexpected<'_> {
    use serde::de::Unexpected;
    match value {
        serde_json::Value::Bool(b) => Unexpected::Bool(*b),
        serde_json::Value::Number(_) => Unexpected::Other("number"),
        serde_json::Value::String(s) => Unexpected::Str(s),
        serde_json::Value::Array(_) => Unexpected::Seq,
        serde_json::Value::Null | serde_json::Value::Object(_) => Unexpected::Other("value"),
    }
}

#[cfg(test)]
mod tests;
