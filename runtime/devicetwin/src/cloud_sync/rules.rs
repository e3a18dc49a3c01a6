//! What a cloud sync does to one twin key (`spec` §5.4), as a pure function of the stored twin
//! and the requested one. The caller assembles the outputs of all keys.

use crate::mapper_update::{DELETED, StoredTwin};
use crate::validate;
use crate::wire::{DocumentEntry, Twin, TwinValue, TypeMetadata, ValueMetadata, Version};

use super::DealType;

/// The outcome of one key.
#[derive(Debug, Default)]
pub(super) struct KeyOutcome {
    /// The new stored twin, when the row changes.
    pub stored: Option<StoredTwin>,
    /// The document entry, when anything changed (or for a refused add, `{null, null}`).
    pub document: Option<DocumentEntry>,
    /// The `edge_updated` entry of a rejected key: the edge's current side(s) with versions.
    pub rejected: Option<Twin>,
    /// True when the desired side was written.
    pub expected_written: bool,
}

/// KubeEdge's sync version rule: the request's version is adopted unless the stored one is
/// ahead on either counter. A side without a request version is rejected — except in a sync
/// delete, where the stored version is kept. `None` means rejected.
fn sync_version(
    stored: Option<Version>,
    requested: Option<Version>,
    deal: DealType,
) -> Option<Version> {
    let current = stored.unwrap_or_default();
    match requested {
        None if deal == DealType::SyncDelete => Some(current),
        None => None,
        Some(r) if current.cloud > r.cloud || current.edge > r.edge => None,
        Some(r) => Some(r),
    }
}

/// A side written by a sync: the requested value, stamped now.
fn written(side: &TwinValue, now: i64) -> TwinValue {
    TwinValue {
        value: side.value.clone(),
        metadata: Some(ValueMetadata { timestamp: now }),
    }
}

/// True when `side`'s value (if any) is valid for `twin_type`.
fn type_ok(side: &TwinValue, twin_type: &str) -> bool {
    side.value
        .as_deref()
        .is_none_or(|v| validate::check_type(v, twin_type).is_ok())
}

fn requested_type(request: &Twin) -> Option<&str> {
    request.metadata.as_ref().map(|m| m.kind.as_str())
}

/// One key of a sync. `request` is never a deletion by `null` (syncs delete with
/// `metadata.type` `deleted`; `null` entries are skipped by the caller).
pub(super) fn sync_key(
    stored: Option<&StoredTwin>,
    request: &Twin,
    deal: DealType,
    now: i64,
) -> KeyOutcome {
    let deleting = requested_type(request) == Some(DELETED);
    match stored {
        Some(old) if deleting => delete(old, request),
        Some(old) => compare(old, request, deal, now),
        None if deleting => tombstone(request),
        None => add(request, deal, now),
    }
}

/// The edge's view of a twin, sent back for a rejected sync delete.
fn whole(old: &StoredTwin) -> Twin {
    old.to_wire()
}

/// A sync delete (deal type 3): each side that has a version is checked (a missing request
/// version is accepted) and cleared. A rejected side refuses the whole delete — nothing changes
/// and the stored twin goes back with its versions — so the cache never holds a half-deleted
/// twin. edgecore v1.23.1 differs when the desired side is accepted and the reported side
/// refused: it reports the desired side already cleared and the type `deleted`, a state it
/// keeps only in memory and never stores; Wedge reports the twin it still has.
fn delete(old: &StoredTwin, request: &Twin) -> KeyOutcome {
    if old.attr_type == DELETED {
        return KeyOutcome::default();
    }
    let mut versions = [None, None];
    for (slot, (stored, requested)) in versions.iter_mut().zip([
        (old.expected_version, request.expected_version),
        (old.actual_version, request.actual_version),
    ]) {
        if stored.is_some() {
            match sync_version(stored, requested, DealType::SyncDelete) {
                Some(v) => *slot = Some(v),
                None => {
                    return KeyOutcome {
                        rejected: Some(whole(old)),
                        ..KeyOutcome::default()
                    };
                }
            }
        }
    }
    let [expected_version, actual_version] = versions;
    let new = StoredTwin {
        expected: None,
        actual: None,
        expected_version,
        actual_version,
        optional: old.optional,
        attr_type: DELETED.to_owned(),
    };
    KeyOutcome {
        document: Some(DocumentEntry {
            last: Some(old.to_wire().without_versions()),
            current: None,
        }),
        stored: Some(new),
        ..KeyOutcome::default()
    }
}

/// A sync deleting a key the edge does not have: a `deleted` row keeps the cloud's versions, so
/// a stale sync of the old twin is rejected later.
fn tombstone(request: &Twin) -> KeyOutcome {
    KeyOutcome {
        stored: Some(StoredTwin {
            expected: None,
            actual: None,
            expected_version: request.expected_version,
            actual_version: request.actual_version,
            optional: request.optional.unwrap_or(true),
            attr_type: DELETED.to_owned(),
        }),
        document: Some(DocumentEntry::default()),
        ..KeyOutcome::default()
    }
}

/// A sync of a key the edge does not have. Each sent side needs a version (else the add is
/// refused, yet reported: document `{null, null}`, `edge_updated` `{}`) and a value valid for
/// the requested type (else the key is dropped without a word, as edgecore does).
fn add(request: &Twin, deal: DealType, now: i64) -> KeyOutcome {
    let twin_type = match requested_type(request) {
        Some(kind) if !kind.is_empty() => kind.to_owned(),
        _ => "string".to_owned(),
    };
    let mut new = StoredTwin {
        optional: request.optional.unwrap_or(true),
        attr_type: twin_type.clone(),
        ..StoredTwin::default()
    };
    for (side, requested, value, version) in [
        (
            &request.expected,
            request.expected_version,
            &mut new.expected,
            &mut new.expected_version,
        ),
        (
            &request.actual,
            request.actual_version,
            &mut new.actual,
            &mut new.actual_version,
        ),
    ] {
        let Some(side) = side else { continue };
        let Some(v) = sync_version(None, requested, deal) else {
            return KeyOutcome {
                document: Some(DocumentEntry::default()),
                rejected: Some(Twin::default()),
                ..KeyOutcome::default()
            };
        };
        if !type_ok(side, &twin_type) {
            return KeyOutcome::default();
        }
        *value = Some(written(side, now));
        *version = Some(v);
    }
    KeyOutcome {
        document: Some(DocumentEntry {
            last: None,
            current: Some(new.to_wire().without_versions()),
        }),
        expected_written: new.expected.is_some(),
        stored: Some(new),
        rejected: None,
    }
}

/// The edge's current side, sent back when the cloud's write of it is rejected.
fn rejected_side(old: &StoredTwin, expected: bool) -> Twin {
    let meta = Some(TypeMetadata {
        kind: old.attr_type.clone(),
    });
    let version = Some(if expected {
        old.expected_version.unwrap_or_default()
    } else {
        old.actual_version.unwrap_or_default()
    });
    let base = Twin {
        optional: Some(old.optional),
        metadata: meta,
        ..Twin::default()
    };
    if expected {
        Twin {
            expected: old.expected.clone(),
            expected_version: version,
            ..base
        }
    } else {
        Twin {
            actual: old.actual.clone(),
            actual_version: version,
            ..base
        }
    }
}

/// A sync of an existing key. Sides are taken in order, desired then reported: a side whose
/// value does not fit the type is skipped; a side whose version is behind is rejected, and then
/// nothing after it (the other side, `optional`, `metadata`) is applied, as in edgecore.
fn compare(old: &StoredTwin, request: &Twin, deal: DealType, now: i64) -> KeyOutcome {
    let was_deleted = old.attr_type == DELETED;
    let twin_type = if was_deleted {
        requested_type(request).unwrap_or_default().to_owned()
    } else {
        old.attr_type.clone()
    };
    let mut new = old.clone();
    let mut changed = false;
    let mut expected_written = false;
    let mut rejected = None;

    if let Some(side) = &request.expected {
        // The desired side is type-checked only when one is stored.
        if old.expected.is_none() || type_ok(side, &twin_type) {
            match sync_version(old.expected_version, request.expected_version, deal) {
                Some(v) => {
                    new.expected = Some(written(side, now));
                    new.expected_version = Some(v);
                    changed = true;
                    expected_written = true;
                }
                None => rejected = Some(rejected_side(old, true)),
            }
        }
    }
    // The reported side is always type-checked.
    if rejected.is_none()
        && let Some(side) = request.actual.as_ref().filter(|s| type_ok(s, &twin_type))
    {
        match sync_version(old.actual_version, request.actual_version, deal) {
            Some(v) => {
                new.actual = Some(written(side, now));
                new.actual_version = Some(v);
                changed = true;
            }
            None => rejected = Some(rejected_side(old, false)),
        }
    }
    if rejected.is_none() {
        // `optional` only ever goes from true to false.
        if old.optional && request.optional == Some(false) {
            new.optional = false;
            changed = true;
        }
        match requested_type(request) {
            // A different type rewrites the metadata column; only a deleted twin takes it.
            Some(kind) if kind != old.attr_type => {
                changed = true;
                if was_deleted {
                    new.attr_type = if kind.is_empty() { "string" } else { kind }.to_owned();
                }
            }
            None if was_deleted => {
                new.attr_type = "string".to_owned();
                changed = true;
            }
            _ => {}
        }
    }
    if !changed {
        return KeyOutcome {
            rejected,
            ..KeyOutcome::default()
        };
    }
    KeyOutcome {
        document: Some(DocumentEntry {
            // A deleted twin has no previous state to show.
            last: (!was_deleted).then(|| old.to_wire().without_versions()),
            current: Some(new.to_wire().without_versions()),
        }),
        stored: Some(new),
        rejected,
        expected_written,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const D: DealType = DealType::Sync;

    fn v(cloud: i64, edge: i64) -> Option<Version> {
        Some(Version { cloud, edge })
    }

    #[test]
    fn version_rule() {
        assert_eq!(sync_version(v(1, 0), v(2, 0), D), v(2, 0));
        assert_eq!(
            sync_version(v(1, 3), v(1, 3), D),
            v(1, 3),
            "equal is accepted"
        );
        assert_eq!(sync_version(v(2, 0), v(1, 5), D), None, "cloud older");
        assert_eq!(sync_version(v(0, 4), v(9, 3), D), None, "edge newer");
        assert_eq!(sync_version(v(1, 1), None, D), None);
        assert_eq!(sync_version(v(1, 1), None, DealType::Detail), None);
        assert_eq!(sync_version(v(1, 1), None, DealType::SyncDelete), v(1, 1));
        assert_eq!(sync_version(None, v(0, 0), D), v(0, 0));
        assert_eq!(sync_version(None, v(-1, 0), D), None);
    }
}
