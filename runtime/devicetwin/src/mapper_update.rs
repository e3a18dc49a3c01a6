//! A mapper's twin update (deal type 0): KubeEdge's rules, as a pure function.
//!
//! Everything that can refuse the request is checked before anything changes, so a refused
//! update leaves the device exactly as it was. Mapper writes are never rejected by versions:
//! each written side's `edge` version goes up by one.

use std::collections::BTreeMap;

use crate::validate::{self, BAD_REQUEST};
use crate::wire::{
    DeltaMessage, DocumentEntry, DocumentMessage, ErrorMessage, Twin, TwinMessage, TwinValue,
    TypeMetadata, ValueMetadata, Version,
};

/// `attr_type` of a deleted twin.
pub const DELETED: &str = "deleted";

/// One twin as stored (`device_twin` row).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StoredTwin {
    /// Desired side.
    pub expected: Option<TwinValue>,
    /// Reported side.
    pub actual: Option<TwinValue>,
    /// Version of the desired side.
    pub expected_version: Option<Version>,
    /// Version of the reported side.
    pub actual_version: Option<Version>,
    /// Whether a mapper may delete it.
    pub optional: bool,
    /// Its type, or `deleted`.
    pub attr_type: String,
}

impl StoredTwin {
    /// The wire form, with versions.
    pub fn to_wire(&self) -> Twin {
        Twin {
            expected: self.expected.clone(),
            actual: self.actual.clone(),
            optional: Some(self.optional),
            metadata: Some(TypeMetadata {
                kind: self.attr_type.clone(),
            }),
            expected_version: self.expected_version,
            actual_version: self.actual_version,
        }
    }

    fn is_deleted(&self) -> bool {
        self.attr_type == DELETED
    }
}

/// The twins of one device, by key.
pub type DeviceTwins = BTreeMap<String, StoredTwin>;

/// What an accepted update publishes, in KubeEdge's order.
#[derive(Debug, Clone, PartialEq)]
pub struct Outputs {
    /// `…/twin/update/result`, always.
    pub result: TwinMessage,
    /// `…/twin/update/document`, when anything changed.
    pub document: Option<DocumentMessage>,
    /// `…/twin/update/delta`, when the device-wide delta is not empty.
    pub delta: Option<DeltaMessage>,
    /// `device/<id>/twin/edge_updated` to the cloud, when anything changed.
    pub edge_updated: Option<TwinMessage>,
    /// Keys whose stored rows changed (to persist).
    pub changed: Vec<String>,
}

/// Why an update was refused; nothing changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejection {
    /// False when the error goes to the empty-id result topic (`$hw/events/device//…`), as
    /// KubeEdge sends key and value syntax errors.
    pub on_device_topic: bool,
    /// The error result.
    pub error: ErrorMessage,
}

fn reject(on_device_topic: bool, event_id: &str, now: i64, reason: &str) -> Rejection {
    Rejection {
        on_device_topic,
        error: ErrorMessage {
            event_id: event_id.to_owned(),
            timestamp: now,
            code: BAD_REQUEST,
            reason: reason.to_owned(),
        },
    }
}

/// Checks every key and side of `request` against `twins` without changing anything.
pub(crate) fn check(twins: &DeviceTwins, request: &TwinMessage, now: i64) -> Result<(), Rejection> {
    for (key, twin) in &request.twin {
        if !validate::valid_key(key) {
            return Err(reject(false, "", now, validate::BAD_KEY));
        }
        let Some(twin) = twin else { continue };
        for side in [&twin.expected, &twin.actual].into_iter().flatten() {
            if !validate::valid_value(side.value.as_deref().unwrap_or_default()) {
                return Err(reject(false, "", now, validate::BAD_VALUE));
            }
        }
        let stored = twins.get(key);
        // The type to check against: the stored one, or the request's for new or deleted twins.
        let twin_type = match stored {
            Some(s) if !s.is_deleted() => s.attr_type.clone(),
            _ => twin
                .metadata
                .as_ref()
                .map(|m| m.kind.clone())
                .unwrap_or_default(),
        };
        let mut checked = vec![&twin.actual];
        if stored.is_some_and(|s| s.expected.is_some()) {
            checked.push(&twin.expected);
        }
        for side in checked.into_iter().flatten() {
            if let Some(v) = side.value.as_deref() {
                validate::check_type(v, &twin_type)
                    .map_err(|reason| reject(true, &request.event_id, now, reason))?;
            }
        }
    }
    Ok(())
}

fn written(value: &TwinValue, now: i64) -> TwinValue {
    TwinValue {
        value: value.value.clone(),
        metadata: Some(ValueMetadata { timestamp: now }),
    }
}

/// A side a mapper writes: the value stamped `now`, its version's `edge` bumped — or started
/// at `{"cloud":0,"edge":1}` for a new twin.
fn write_side(
    side: &TwinValue,
    old_version: Option<Version>,
    is_new: bool,
    now: i64,
) -> (TwinValue, Version) {
    let version = if is_new {
        Version { cloud: 0, edge: 1 }
    } else {
        bump(old_version)
    };
    (written(side, now), version)
}

fn bump(version: Option<Version>) -> Version {
    let mut v = version.unwrap_or_default();
    v.edge += 1;
    v
}

/// Applies a mapper's update to `twins`. On success `twins` holds the new state and the outputs
/// say what to publish; on refusal `twins` is untouched. `fresh_id` makes the ids of the delta
/// and `edge_updated` messages.
pub fn apply(
    twins: &mut DeviceTwins,
    request: &TwinMessage,
    now: i64,
    fresh_id: &mut dyn FnMut() -> String,
) -> Result<Outputs, Rejection> {
    check(twins, request, now)?;
    let mut result = BTreeMap::new();
    let mut document = BTreeMap::new();
    let mut edge = BTreeMap::new();
    let mut changed = Vec::new();
    for (key, update) in &request.twin {
        let previous = twins.get(key).cloned();
        match (update, previous) {
            // Deletion: only of an optional, live twin with at least one written side (one
            // with a version). Each such side is cleared and its version bumped; a side that
            // never had a version keeps none (edgecore stores none for it either). A twin with
            // no version at all is left alone and nothing is reported, as on edgecore.
            (None, Some(old))
                if old.optional
                    && !old.is_deleted()
                    && (old.expected_version.is_some() || old.actual_version.is_some()) =>
            {
                let new = StoredTwin {
                    expected: None,
                    actual: None,
                    expected_version: old.expected_version.map(|v| bump(Some(v))),
                    actual_version: old.actual_version.map(|v| bump(Some(v))),
                    optional: old.optional,
                    attr_type: DELETED.to_owned(),
                };
                result.insert(key.clone(), None);
                document.insert(
                    key.clone(),
                    DocumentEntry {
                        last: Some(old.to_wire().without_versions()),
                        current: None,
                    },
                );
                edge.insert(key.clone(), Some(deletion_report(&new)));
                twins.insert(key.clone(), new);
                changed.push(key.clone());
            }
            (None, _) => {}
            (Some(update), previous) => {
                let old = previous.clone().unwrap_or_default();
                let mut new = old.clone();
                let mut result_twin = Twin::default();
                let mut edge_twin = Twin::default();
                let is_new = previous.is_none();
                if let Some(expected) = &update.expected {
                    let (v, version) = write_side(expected, old.expected_version, is_new, now);
                    new.expected = Some(v.clone());
                    new.expected_version = Some(version);
                    result_twin.expected = Some(v.clone());
                    edge_twin.expected = Some(v);
                    edge_twin.expected_version = Some(version);
                }
                if let Some(actual) = &update.actual {
                    let (v, version) = write_side(actual, old.actual_version, is_new, now);
                    new.actual = Some(v.clone());
                    new.actual_version = Some(version);
                    result_twin.actual = Some(v.clone());
                    edge_twin.actual = Some(v);
                    edge_twin.actual_version = Some(version);
                }
                match &previous {
                    None => {
                        new.optional = update.optional.unwrap_or(true);
                        new.attr_type = update
                            .metadata
                            .as_ref()
                            .map(|m| m.kind.clone())
                            .filter(|k| !k.is_empty())
                            .unwrap_or_else(|| "string".to_owned());
                    }
                    Some(old) => {
                        // `optional` only ever goes from true to false.
                        if old.optional && update.optional == Some(false) {
                            new.optional = false;
                        }
                        // A live twin keeps its type whatever the request says (KubeEdge
                        // rewrites only the metadata column); a deleted one takes the
                        // request's type, or `string`.
                        if old.is_deleted() {
                            new.attr_type = update
                                .metadata
                                .as_ref()
                                .map(|m| m.kind.clone())
                                .filter(|k| !k.is_empty())
                                .unwrap_or_else(|| "string".to_owned());
                        }
                    }
                }
                let meta = Some(TypeMetadata {
                    kind: new.attr_type.clone(),
                });
                result_twin.optional = Some(new.optional);
                result_twin.metadata = meta.clone();
                edge_twin.optional = Some(new.optional);
                edge_twin.metadata = meta;
                result.insert(key.clone(), Some(result_twin));
                document.insert(
                    key.clone(),
                    DocumentEntry {
                        last: previous.map(|p| p.to_wire().without_versions()),
                        current: Some(new.to_wire().without_versions()),
                    },
                );
                edge.insert(key.clone(), Some(edge_twin));
                twins.insert(key.clone(), new);
                changed.push(key.clone());
            }
        }
    }
    let anything = !changed.is_empty();
    let delta = device_delta(twins, now, fresh_id);
    Ok(Outputs {
        result: TwinMessage {
            event_id: request.event_id.clone(),
            timestamp: now,
            twin: result,
        },
        document: anything.then(|| DocumentMessage {
            event_id: request.event_id.clone(),
            timestamp: now,
            twin: document,
        }),
        delta,
        edge_updated: anything.then(|| TwinMessage {
            event_id: fresh_id(),
            timestamp: now,
            twin: edge,
        }),
        changed,
    })
}

/// The `edge_updated` entry of a twin a mapper deleted, as edgecore v1.23.1 sends it: `{}` for
/// each side that has a version, `optional`, type `deleted`, and the versions — the reported
/// side's only when it has one, the desired side's always once the reported side has one
/// (`{"cloud":0,"edge":0}` when the desired side never had a version).
fn deletion_report(deleted: &StoredTwin) -> Twin {
    let expected_version = match (deleted.expected_version, deleted.actual_version) {
        (Some(v), _) => Some(v),
        (None, Some(_)) => Some(Version::default()),
        (None, None) => None,
    };
    Twin {
        expected: deleted.expected_version.map(|_| TwinValue::default()),
        actual: deleted.actual_version.map(|_| TwinValue::default()),
        optional: Some(deleted.optional),
        metadata: Some(TypeMetadata {
            kind: DELETED.to_owned(),
        }),
        expected_version,
        actual_version: deleted.actual_version,
    }
}

/// The device-wide delta: every live twin with a desired value, and the keys whose desired value
/// differs from the reported one (an absent report counts as `""`). `None` when nothing differs.
pub fn device_delta(
    twins: &DeviceTwins,
    now: i64,
    fresh_id: &mut dyn FnMut() -> String,
) -> Option<DeltaMessage> {
    let mut twin = BTreeMap::new();
    let mut delta = BTreeMap::new();
    for (key, stored) in twins {
        let expected = stored
            .expected
            .as_ref()
            .and_then(|e| e.value.as_deref())
            .unwrap_or_default();
        if stored.is_deleted() || expected.is_empty() {
            continue;
        }
        let actual = stored
            .actual
            .as_ref()
            .and_then(|a| a.value.as_deref())
            .unwrap_or_default();
        if expected != actual {
            delta.insert(key.clone(), expected.to_owned());
        }
        twin.insert(key.clone(), stored.to_wire().without_versions());
    }
    (!delta.is_empty()).then(|| DeltaMessage {
        event_id: fresh_id(),
        timestamp: now,
        twin,
        delta,
    })
}

#[cfg(test)]
mod tests;
