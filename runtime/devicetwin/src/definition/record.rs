//! The devicetwin rows of a device that a definition introduces to the node.

use super::DeviceDefinition;
use crate::device::DeviceRecord;
use crate::mapper_update::StoredTwin;
use crate::wire::{TwinValue, ValueMetadata, Version};

/// Version of a desired value that comes with a definition: `{"cloud":1,"edge":0}`.
///
/// A definition's desired value is the cloud's word (a Device object, or a local file standing
/// in for the cloud), so it is versioned as one cloud change and no edge change — the shape of
/// a desired value the cloud has set once (the spec's worked example stores exactly this).
/// `edge` 0 means a later cloud sync is never refused for edge changes that did not happen, and
/// `cloud` 1 means a sync carrying any real cloud version (≥ 1) supersedes it, while a mapper
/// write on that side still counts up from here.
pub const DEFINED_VERSION: Version = Version { cloud: 1, edge: 0 };

/// The device row set for a device devicetwin does not know yet: `name` and `description`
/// from the definition, no state yet, no attributes (v1beta1 Devices have none), and one twin
/// per property — typed by the model, not `optional` (the definition declares it, so a mapper
/// may not delete it), with an `expected` side stamped `now_ms` and versioned
/// [`DEFINED_VERSION`] when the property has a desired value, and no `actual` side until a
/// mapper reports one.
pub fn new_record(definition: &DeviceDefinition, now_ms: i64) -> DeviceRecord {
    let twins = definition
        .properties
        .iter()
        .map(|p| {
            let expected = p.desired.as_ref().map(|value| TwinValue {
                value: Some(value.clone()),
                metadata: Some(ValueMetadata { timestamp: now_ms }),
            });
            let twin = StoredTwin {
                expected_version: expected.as_ref().map(|_| DEFINED_VERSION),
                expected,
                actual: None,
                actual_version: None,
                optional: false,
                attr_type: p.value_type.clone(),
            };
            (p.name.clone(), twin)
        })
        .collect();
    DeviceRecord {
        id: definition.id.clone(),
        name: definition.name.clone(),
        description: definition.description.clone(),
        state: String::new(),
        last_online: String::new(),
        attributes: Default::default(),
        twins,
    }
}
