//! A mapper's twin update from payload to [`Effects`]: size and JSON checks, the unknown-device
//! answer, KubeEdge's validation, the Wasm hooks' review, and the version rules of
//! [`mapper_update`](crate::mapper_update).
//!
//! Hooks are async (a Wasm handler runs inside the update path), so the path is split: [`prepare`]
//! refuses what KubeEdge refuses and lists the proposed changes, the caller asks the hooks, then
//! [`reviewed`] folds each verdict into the request and [`commit`] applies it to the cache.

use crate::device::Devices;
use crate::effects::{CloudContent, CloudMessage, DesiredValue, Effects, RowChange};
use crate::hooks::{HookVerdict, ProposedChange, Proposer};
use crate::mapper_update::{self, DELETED, Rejection};
use crate::topics::device_topic;
use crate::validate::BAD_REQUEST;
use crate::wire::{self, ErrorMessage, TwinMessage};

/// Code of an update refused for a device this node does not know.
pub const NOT_FOUND: i32 = 404;
/// Code of an update that could not be stored or whose handler failed.
pub const INTERNAL_ERROR: i32 = 500;
/// KubeEdge's reason for an update of an unknown device.
pub const DEVICE_NOT_EXISTED: &str = "update rejected due to the device is not existed";

/// Suffix of the result topic.
pub const RESULT_SUFFIX: &str = "twin/update/result";

/// The error result of an update of `device` (`""` for KubeEdge's empty-id topic).
pub fn error_result(device: &str, event_id: &str, now: i64, code: i32, reason: &str) -> Effects {
    Effects::publish_only(
        device_topic(device, RESULT_SUFFIX),
        wire::to_json(&ErrorMessage {
            event_id: event_id.to_owned(),
            timestamp: now,
            code,
            reason: reason.to_owned(),
        }),
    )
}

fn rejection(device: &str, r: Rejection) -> Effects {
    let topic_id = if r.on_device_topic { device } else { "" };
    Effects::publish_only(
        device_topic(topic_id, RESULT_SUFFIX),
        wire::to_json(&r.error),
    )
}

/// Reads and checks an update of `device`; `Err` holds the error result to publish.
pub fn prepare(
    devices: &Devices,
    device: &str,
    payload: &[u8],
    max_payload: usize,
    now: i64,
) -> Result<TwinMessage, Effects> {
    if payload.len() > max_payload {
        let reason = format!(
            "the update request body is {} bytes; the limit is {max_payload} bytes",
            payload.len()
        );
        return Err(error_result(device, "", now, BAD_REQUEST, &reason));
    }
    let request = wire::parse_mapper_update(payload)
        .map_err(|reason| error_result(device, "", now, BAD_REQUEST, reason))?;
    let Some(record) = devices.get(device) else {
        return Err(error_result(
            device,
            &request.event_id,
            now,
            NOT_FOUND,
            DEVICE_NOT_EXISTED,
        ));
    };
    mapper_update::check(&record.twins, &request, now).map_err(|r| rejection(device, r))?;
    Ok(request)
}

/// The sides `request` writes, for the hooks to review (deletions are not reviewed).
pub fn proposals(devices: &Devices, device: &str, request: &TwinMessage) -> Vec<ProposedChange> {
    let twins = devices.get(device).map(|d| &d.twins);
    let mut changes = Vec::new();
    for (key, twin) in &request.twin {
        let Some(twin) = twin else { continue };
        let stored = twins.and_then(|t| t.get(key));
        let value_type = match stored {
            Some(s) if s.attr_type != DELETED => s.attr_type.clone(),
            _ => twin
                .metadata
                .as_ref()
                .map(|m| m.kind.clone())
                .filter(|k| !k.is_empty())
                .unwrap_or_else(|| "string".to_owned()),
        };
        for (desired, side) in [(true, &twin.expected), (false, &twin.actual)] {
            let Some(value) = side.as_ref().and_then(|s| s.value.clone()) else {
                continue;
            };
            let previous = stored
                .and_then(|s| if desired { &s.expected } else { &s.actual }.as_ref())
                .and_then(|v| v.value.clone());
            changes.push(ProposedChange {
                device: device.to_owned(),
                key: key.clone(),
                desired,
                value,
                value_type: value_type.clone(),
                previous,
                proposer: Proposer::Mapper,
            });
        }
    }
    changes
}

/// Folds one hook verdict into `request`; `Err` holds the error result that ends the update.
pub fn reviewed(
    request: &mut TwinMessage,
    change: &ProposedChange,
    verdict: HookVerdict,
    now: i64,
) -> Result<(), Effects> {
    match verdict {
        HookVerdict::Accept => Ok(()),
        HookVerdict::Replace(value) => {
            let side = request
                .twin
                .get_mut(&change.key)
                .and_then(|t| t.as_mut())
                .and_then(|t| {
                    if change.desired {
                        t.expected.as_mut()
                    } else {
                        t.actual.as_mut()
                    }
                });
            if let Some(side) = side {
                side.value = Some(value);
            }
            Ok(())
        }
        HookVerdict::Reject(reason) => Err(error_result(
            &change.device,
            &request.event_id,
            now,
            BAD_REQUEST,
            &reason,
        )),
        HookVerdict::Failed(reason) => Err(error_result(
            &change.device,
            &request.event_id,
            now,
            INTERNAL_ERROR,
            &reason,
        )),
    }
}

/// Applies a checked (and reviewed) update to the cache and returns what to write and send.
pub fn commit(
    devices: &mut Devices,
    device: &str,
    request: &TwinMessage,
    now: i64,
    fresh_id: &mut dyn FnMut() -> String,
) -> Effects {
    let Some(record) = devices.get_mut(device) else {
        return error_result(
            device,
            &request.event_id,
            now,
            NOT_FOUND,
            DEVICE_NOT_EXISTED,
        );
    };
    let outputs = match mapper_update::apply(&mut record.twins, request, now, fresh_id) {
        Ok(outputs) => outputs,
        // A hook's replacement may not fit the twin's type.
        Err(r) => return rejection(device, r),
    };
    let mut effects = Effects::default();
    for key in &outputs.changed {
        if let Some(twin) = record.twins.get(key) {
            effects.rows.push(RowChange::PutTwin {
                device: device.to_owned(),
                key: key.clone(),
                twin: twin.clone(),
            });
            let wrote_expected = request
                .twin
                .get(key)
                .and_then(|t| t.as_ref())
                .is_some_and(|t| t.expected.is_some());
            let expected = twin.expected.as_ref().and_then(|v| v.value.as_deref());
            let actual = twin.actual.as_ref().and_then(|v| v.value.as_deref());
            if let Some(value) =
                expected.filter(|e| wrote_expected && !e.is_empty() && Some(*e) != actual)
            {
                effects.desired.push(DesiredValue {
                    device: device.to_owned(),
                    key: key.clone(),
                    value: value.to_owned(),
                    value_type: twin.attr_type.clone(),
                });
            }
        }
    }
    effects.publish(
        device_topic(device, RESULT_SUFFIX),
        wire::to_json(&outputs.result),
    );
    if let Some(document) = &outputs.document {
        effects.publish(
            device_topic(device, "twin/update/document"),
            wire::to_json(document),
        );
    }
    if let Some(delta) = &outputs.delta {
        effects.publish(
            device_topic(device, "twin/update/delta"),
            wire::to_json(delta),
        );
    }
    if let Some(edge_updated) = &outputs.edge_updated {
        effects.cloud.push(CloudMessage {
            operation: "update".to_owned(),
            resource: format!("device/{device}/twin/edge_updated"),
            content: CloudContent::Json(wire::to_json(edge_updated)),
        });
    }
    effects
}

#[cfg(test)]
mod tests;
