//! Device state updates (`$hw/events/device/<id>/state/update`).
//!
//! A mapper reports `{Base,"state"}`. Accepted states (compared lower-cased) are `online`,
//! `offline`, `ok`, `unknown` and `unhealthy`; anything else, an unknown device or an unreadable
//! body is ignored without an answer, as in KubeEdge. An accepted state is stored as sent, with
//! `last_online` = now (UTC RFC 3339) for `online`/`ok` and `""` otherwise, then published on
//! `…/state/update/result` as `{Base,"device":{"name","state","lastOnlineTime"}}` (fresh
//! `event_id`) and sent to the cloud as the same JSON carried in a string.

use serde::Serialize;

use crate::attributes::parse_device_update;
use crate::device::Devices;
use crate::effects::{CloudContent, CloudMessage, Effects, RowChange};
use crate::topics::device_topic;
use crate::wire::to_json;

/// States a mapper may report (lower-cased).
pub const STATES: [&str; 5] = ["online", "offline", "ok", "unknown", "unhealthy"];

/// `{Base,"device":CloudDev}`: the state message.
#[derive(Serialize)]
struct StateMessage<'a> {
    event_id: String,
    timestamp: i64,
    device: StateDevice<'a>,
}

/// The fields of KubeEdge's cloud device a state message fills; empty ones are omitted.
#[derive(Serialize)]
struct StateDevice<'a> {
    #[serde(skip_serializing_if = "str::is_empty")]
    name: &'a str,
    #[serde(skip_serializing_if = "str::is_empty")]
    state: &'a str,
    #[serde(rename = "lastOnlineTime", skip_serializing_if = "str::is_empty")]
    last_online_time: &'a str,
}

/// Applies a state update of `device_id`. `fresh_id` makes the state message's `event_id`.
pub fn update(
    devices: &mut Devices,
    device_id: &str,
    payload: &[u8],
    now: i64,
    fresh_id: &mut dyn FnMut() -> String,
) -> Effects {
    let request = match parse_device_update(payload) {
        Ok(request) => request,
        Err(err) => {
            tracing::debug!(
                device = device_id,
                "state update ignored, unreadable body: {err}"
            );
            return Effects::default();
        }
    };
    let Some(device) = devices.get_mut(device_id) else {
        tracing::debug!(device = device_id, "state update ignored, unknown device");
        return Effects::default();
    };
    let lower = request.state.to_lowercase();
    if !STATES.contains(&lower.as_str()) {
        let state = &request.state;
        tracing::debug!(
            device = device_id,
            state,
            "state update ignored, unknown state"
        );
        return Effects::default();
    }
    device.state = request.state;
    device.last_online = if lower == "online" || lower == "ok" {
        wedge_core::time::rfc3339_utc(now)
    } else {
        String::new()
    };
    let message = to_json(&StateMessage {
        event_id: fresh_id(),
        timestamp: now,
        device: StateDevice {
            name: &device.name,
            state: &device.state,
            last_online_time: &device.last_online,
        },
    });
    let mut effects = Effects {
        rows: vec![RowChange::PutState {
            device: device_id.to_owned(),
            state: device.state.clone(),
            last_online: device.last_online.clone(),
        }],
        ..Effects::default()
    };
    effects.publish(
        device_topic(device_id, "state/update/result"),
        message.clone(),
    );
    effects.cloud.push(CloudMessage {
        operation: "update".to_owned(),
        resource: format!("device/{device_id}/state/update"),
        content: CloudContent::Text(message),
    });
    effects
}

#[cfg(test)]
mod tests;
