//! Attributes of devices listed by a membership message: the cloud's list is the whole truth
//! (KubeEdge's non-mapper attribute merge), and changes are announced on `…/updated`.

use std::collections::BTreeMap;

use crate::device::DeviceRecord;
use crate::effects::{Effects, RowChange};
use crate::topics::device_topic;
use crate::wire::to_json;
use crate::wire_device::{Attr, AttributesMessage};

/// What changed, by attribute name: the new fields, or `None` for a removed attribute.
pub(super) type Changes = BTreeMap<String, Option<Attr>>;

/// The attributes of a device joining the node, announced as received.
pub(super) fn joined(attributes: &BTreeMap<String, Option<Attr>>) -> Changes {
    attributes
        .iter()
        .filter(|(_, attr)| attr.is_some())
        .map(|(name, attr)| (name.clone(), attr.clone()))
        .collect()
}

/// Brings the attributes of a known device to `listed`: new ones are added, changed ones
/// rewritten (`optional` only from true to false), unlisted (or `null`) ones removed. Returns
/// the rows to write and the changes to announce; a changed attribute is announced with only
/// the fields that changed (`value` always written, `""` when it did not change).
pub(super) fn sync(
    record: &mut DeviceRecord,
    listed: &BTreeMap<String, Option<Attr>>,
) -> (Vec<RowChange>, Changes) {
    let mut rows = Vec::new();
    let mut changes = Changes::new();
    for (name, attr) in listed {
        let Some(attr) = attr else { continue };
        let Some(old) = record.attributes.get(name) else {
            let new = attr.to_stored();
            rows.push(put(&record.id, name, &new));
            changes.insert(name.clone(), Some(attr.clone()));
            record.attributes.insert(name.clone(), new);
            continue;
        };
        let mut new = old.clone();
        let mut announced = Attr::default();
        if old.value != attr.value {
            new.value = attr.value.clone();
            announced.value = attr.value.clone();
        }
        if let Some(meta) = attr.metadata.as_ref().filter(|m| m.kind != old.attr_type) {
            new.attr_type = meta.kind.clone();
            announced.metadata = Some(meta.clone());
        }
        if old.optional && attr.optional == Some(false) {
            new.optional = false;
            announced.optional = Some(false);
        }
        if new != *old {
            rows.push(put(&record.id, name, &new));
            changes.insert(name.clone(), Some(announced));
            record.attributes.insert(name.clone(), new);
        }
    }
    let unlisted: Vec<String> = record
        .attributes
        .keys()
        .filter(|name| !matches!(listed.get(*name), Some(Some(_))))
        .cloned()
        .collect();
    for name in unlisted {
        record.attributes.remove(&name);
        rows.push(RowChange::DeleteAttr {
            device: record.id.clone(),
            name: name.clone(),
        });
        changes.insert(name, None);
    }
    (rows, changes)
}

fn put(device: &str, name: &str, attr: &crate::device::StoredAttr) -> RowChange {
    RowChange::PutAttr {
        device: device.to_owned(),
        name: name.to_owned(),
        attr: attr.clone(),
    }
}

/// Publishes `changes` on the device's `…/updated` topic (`event_id` `""`, as for every
/// membership-driven change), when there are any.
pub(super) fn announce(effects: &mut Effects, device: &str, changes: Changes, now: i64) {
    if changes.is_empty() {
        return;
    }
    let message = AttributesMessage {
        event_id: String::new(),
        timestamp: now,
        attributes: changes,
    };
    effects.publish(device_topic(device, "updated"), to_json(&message));
}
