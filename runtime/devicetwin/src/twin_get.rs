//! Twin get (`$hw/events/device/<id>/twin/get`): every live twin of the device, without
//! versions, on `…/twin/get/result`, with the request's `event_id`.
//!
//! Errors go to the same topic: an unreadable body gets 400 with `event_id` `""`, an unknown
//! device 404 `Device <id> not found while getting twin` with the request's `event_id` (the body
//! is read first, so a bad body to an unknown device is a 400).
//!
//! KubeEdge reads the body with Go's `encoding/json` and writes Go's error into the 400 reason,
//! `Unmarshal twin info <body> failed , err: <error>`; the private `go_json` module reads bodies
//! the same way so that the reason matches.

use crate::device::Devices;
use crate::effects::Effects;
use crate::mapper_update::DELETED;
use crate::topics::device_topic;
use crate::validate::BAD_REQUEST;
use crate::wire::{ErrorMessage, TwinMessage, to_json};

mod go_json;

pub(crate) use go_json::go_lossy_utf8;
use go_json::read_event_id;

/// Code of a get for an unknown device.
pub const NOT_FOUND: i32 = 404;

/// Answers a twin get of `device_id`.
pub fn get(devices: &Devices, device_id: &str, payload: &[u8], now: i64) -> Effects {
    let topic = device_topic(device_id, "twin/get/result");
    let error = |event_id: String, code: i32, reason: String| {
        let message = ErrorMessage {
            event_id,
            timestamp: now,
            code,
            reason,
        };
        Effects::publish_only(topic.clone(), to_json(&message))
    };
    let event_id = match read_event_id(payload) {
        Ok(event_id) => event_id,
        Err(err) => {
            let body = go_lossy_utf8(payload);
            let reason = format!("Unmarshal twin info {body} failed , err: {err}");
            return error(String::new(), BAD_REQUEST, reason);
        }
    };
    let Some(device) = devices.get(device_id) else {
        let reason = format!("Device {device_id} not found while getting twin");
        return error(event_id, NOT_FOUND, reason);
    };
    let twin = device
        .twins
        .iter()
        .filter(|(_, stored)| stored.attr_type != DELETED)
        .map(|(key, stored)| (key.clone(), Some(stored.to_wire().without_versions())))
        .collect();
    let result = TwinMessage {
        event_id,
        timestamp: now,
        twin,
    };
    Effects::publish_only(topic, to_json(&result))
}

#[cfg(test)]
mod tests;
