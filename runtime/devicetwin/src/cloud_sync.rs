//! Cloud syncs of twins (deal types 1-3) with KubeEdge's version rules (`spec` §5.4).
//!
//! A sync writes a side only when its version is not behind the edge's: the request's version
//! is then adopted. Rejected sides go back to the cloud in `edge_updated` with the edge's value
//! and version, so the cloud can catch up; accepted ones produce a document and the device-wide
//! delta but no `edge_updated`. Syncs have no result message.
//!
//! Everything that can refuse a sync (body, keys, values) is checked before anything changes.

use std::collections::BTreeMap;

use crate::device::{DeviceRecord, Devices};
use crate::effects::{CloudContent, CloudMessage, DesiredValue, Effects, RowChange};
use crate::mapper_update::{DELETED, StoredTwin, device_delta};
use crate::topics::device_topic;
use crate::validate::{self, BAD_REQUEST};
use crate::wire::{DocumentMessage, ErrorMessage, Twin, TwinMessage, parse_cloud_update, to_json};

mod rules;

/// Which kind of cloud sync is applied (KubeEdge's deal types; 0, the mapper's, lives in
/// [`crate::mapper_update`]). All three share the version rule; they differ in where the
/// request comes from and in whether a side may come without a version.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DealType {
    /// 1: `twin/cloud_updated`, or a membership update.
    Sync,
    /// 2: a membership detail result.
    Detail,
    /// 3: a sync delete — a side without a request version keeps its stored version.
    SyncDelete,
}

/// Why a sync was refused before anything changed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SyncRefused {
    /// A key outside `^[a-zA-Z0-9-_.,:/@#]{1,128}$`.
    #[error("twin key {0:?} is not allowed")]
    BadKey(String),
    /// A non-empty value outside `^[a-zA-Z0-9-_.,:/@#]{1,512}$`.
    #[error("a value of twin {0:?} is not allowed")]
    BadValue(String),
}

impl SyncRefused {
    /// The reason edgecore publishes: on the sync path every refusal reads as an unreadable
    /// body, whatever the check that failed.
    pub fn reason(&self) -> &'static str {
        validate::UNMARSHAL_CLOUD
    }
}

/// Checks every key and value of a sync without changing anything.
pub fn check_twins(twins: &BTreeMap<String, Option<Twin>>) -> Result<(), SyncRefused> {
    for (key, twin) in twins {
        if !validate::valid_key(key) {
            return Err(SyncRefused::BadKey(key.clone()));
        }
        let Some(twin) = twin else { continue };
        for side in [&twin.expected, &twin.actual].into_iter().flatten() {
            if !validate::valid_value(side.value.as_deref().unwrap_or_default()) {
                return Err(SyncRefused::BadValue(key.clone()));
            }
        }
    }
    Ok(())
}

/// Handles a `twin/cloud_updated` message (deal type 1) for `device_id`.
///
/// An unreadable body, a missing `twin`, a bad key or a bad value changes nothing and publishes
/// a 400 with the cloud path's reason (`unmarshal update request body failed, Please check the
/// request`) on `$hw/events/device//twin/update/result` with `event_id` `""`, as edgecore does
/// (it reports every sync refusal that way, before looking the device up). A sync for a device
/// the node does not have does nothing.
pub fn handle(
    devices: &mut Devices,
    device_id: &str,
    payload: &[u8],
    now: i64,
    fresh_id: &mut dyn FnMut() -> String,
) -> Effects {
    let request = match parse_cloud_update(payload) {
        Ok(request) => request,
        Err(reason) => {
            tracing::warn!(device = device_id, reason, "cloud twin sync refused");
            return refused(now);
        }
    };
    if let Err(error) = check_twins(&request.twin) {
        tracing::warn!(device = device_id, %error, "cloud twin sync refused");
        return refused(now);
    }
    let Some(record) = devices.get_mut(device_id) else {
        tracing::debug!(
            device = device_id,
            "cloud twin sync for an unknown device ignored"
        );
        return Effects::default();
    };
    sync_twins(
        record,
        &request.twin,
        DealType::Sync,
        &request.event_id,
        now,
        fresh_id,
    )
    .unwrap_or_else(|_| refused(now))
}

/// The error result of a refused sync.
fn refused(now: i64) -> Effects {
    let error = ErrorMessage {
        event_id: String::new(),
        timestamp: now,
        code: BAD_REQUEST,
        reason: validate::UNMARSHAL_CLOUD.to_owned(),
    };
    Effects::publish_only(device_topic("", "twin/update/result"), to_json(&error))
}

/// Applies a sync of `twins` to one device and says what to write, publish and send.
///
/// `null` entries are skipped (syncs delete with `metadata.type` `deleted`). The effects hold a
/// `PutTwin` row per changed key; `…/twin/update/document` (with `event_id`) when a key changed
/// or an add was refused; `…/twin/update/delta` whenever the device-wide delta is not empty;
/// `edge_updated` to the cloud only when something was rejected; and a desired value for every
/// written desired side that now differs from the reported one.
pub fn sync_twins(
    record: &mut DeviceRecord,
    twins: &BTreeMap<String, Option<Twin>>,
    deal: DealType,
    event_id: &str,
    now: i64,
    fresh_id: &mut dyn FnMut() -> String,
) -> Result<Effects, SyncRefused> {
    check_twins(twins)?;
    let mut effects = Effects::default();
    let mut document = BTreeMap::new();
    let mut rejected = BTreeMap::new();
    for (key, request) in twins {
        let Some(request) = request else { continue };
        let outcome = rules::sync_key(record.twins.get(key), request, deal, now);
        if let Some(entry) = outcome.document {
            document.insert(key.clone(), entry);
        }
        if let Some(entry) = outcome.rejected {
            rejected.insert(key.clone(), Some(entry));
        }
        if let Some(new) = outcome.stored {
            if outcome.expected_written {
                effects.desired.extend(desired(&record.id, key, &new));
            }
            effects.rows.push(RowChange::PutTwin {
                device: record.id.clone(),
                key: key.clone(),
                twin: new.clone(),
            });
            record.twins.insert(key.clone(), new);
        }
    }
    if !document.is_empty() {
        let message = DocumentMessage {
            event_id: event_id.to_owned(),
            timestamp: now,
            twin: document,
        };
        effects.publish(
            device_topic(&record.id, "twin/update/document"),
            to_json(&message),
        );
    }
    if let Some(delta) = device_delta(&record.twins, now, fresh_id) {
        effects.publish(
            device_topic(&record.id, "twin/update/delta"),
            to_json(&delta),
        );
    }
    if !rejected.is_empty() {
        let message = TwinMessage {
            event_id: fresh_id(),
            timestamp: now,
            twin: rejected,
        };
        effects.cloud.push(CloudMessage {
            operation: "update".to_owned(),
            resource: format!("device/{}/twin/edge_updated", record.id),
            content: CloudContent::Json(to_json(&message)),
        });
    }
    Ok(effects)
}

/// Writes `value` as the desired side of twin `key` of `record` as one cloud change (its cloud
/// version one past the stored one): a Device object's desired value takes the path of a
/// cloud sync — document, delta, and the mappers told after the commit.
pub fn desired_write(
    record: &mut DeviceRecord,
    key: &str,
    value: &str,
    now: i64,
    fresh_id: &mut dyn FnMut() -> String,
) -> Effects {
    let stored = record.twins.get(key);
    let version = stored.and_then(|t| t.expected_version).unwrap_or_default();
    let twin = Twin {
        expected: Some(crate::wire::TwinValue {
            value: Some(value.to_owned()),
            metadata: None,
        }),
        metadata: stored.map(|t| crate::wire::TypeMetadata {
            kind: t.attr_type.clone(),
        }),
        expected_version: Some(crate::wire::Version {
            cloud: version.cloud + 1,
            edge: version.edge,
        }),
        ..Twin::default()
    };
    let twins = BTreeMap::from([(key.to_owned(), Some(twin))]);
    let event_id = fresh_id();
    sync_twins(record, &twins, DealType::Sync, &event_id, now, fresh_id).unwrap_or_default()
}

/// A desired value for the mappers, when the twin's desired value differs from its reported one.
fn desired(device: &str, key: &str, twin: &StoredTwin) -> Option<DesiredValue> {
    let expected = twin.expected.as_ref()?.value.as_deref().unwrap_or_default();
    let actual = twin
        .actual
        .as_ref()
        .and_then(|a| a.value.as_deref())
        .unwrap_or_default();
    (twin.attr_type != DELETED && !expected.is_empty() && expected != actual).then(|| {
        DesiredValue {
            device: device.to_owned(),
            key: key.to_owned(),
            value: expected.to_owned(),
            value_type: twin.attr_type.clone(),
        }
    })
}

#[cfg(test)]
mod tests;
