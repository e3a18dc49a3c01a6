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
        rfc3339_utc(now)
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

/// Unix ms as UTC RFC 3339 with whole seconds, as Go's `time.RFC3339` writes it
/// (`2023-11-14T22:13:20Z`). Milliseconds are dropped (rounded down, also before 1970).
pub fn rfc3339_utc(unix_ms: i64) -> String {
    let secs = unix_ms.div_euclid(1000);
    let (days, day_secs) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let (year, month, day) = civil_from_days(days);
    // Go pads the year's magnitude to four digits and puts the sign in front.
    let year = if year < 0 {
        format!("-{:04}", -year)
    } else {
        format!("{year:04}")
    };
    format!(
        "{year}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        day_secs / 3600,
        day_secs % 3600 / 60,
        day_secs % 60
    )
}

/// Proleptic Gregorian `(year, month, day)` of a day count since 1970-01-01, computed over
/// 400-year eras (146 097 days each) with years starting in March, so that the leap day falls
/// at the end of a year.
fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468; // days since 0000-03-01
    let era = z.div_euclid(146_097);
    let day_of_era = z.rem_euclid(146_097);
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_from_march = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * month_from_march + 2) / 5 + 1;
    let month = if month_from_march < 10 {
        month_from_march + 3
    } else {
        month_from_march - 9
    };
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests;
