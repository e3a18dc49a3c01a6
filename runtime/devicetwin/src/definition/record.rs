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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::definition::PropertyDefinition;
    use crate::wire::to_json;

    fn thermo_definition() -> DeviceDefinition {
        let property = |name: &str, value_type: &str, desired: Option<&str>| PropertyDefinition {
            name: name.into(),
            value_type: value_type.into(),
            desired: desired.map(Into::into),
            ..PropertyDefinition::default()
        };
        DeviceDefinition {
            id: "default/thermo-1".into(),
            protocol: "modbus-tcp".into(),
            properties: vec![
                property("temperature", "float", None),
                property("setpoint", "int", Some("25")),
                property("enabled", "boolean", Some("true")),
            ],
            name: "thermo-1".into(),
            description: "boiler-room".into(),
            model: "default/thermo-model".into(),
            ..DeviceDefinition::default()
        }
    }

    #[test]
    fn a_new_record_has_a_typed_twin_per_property() {
        let record = new_record(&thermo_definition(), 1_700_000_000_500);
        assert_eq!(record.id, "default/thermo-1");
        assert_eq!(record.name, "thermo-1");
        assert_eq!(record.description, "boiler-room");
        assert_eq!(
            (record.state.as_str(), record.last_online.as_str()),
            ("", "")
        );
        assert!(record.attributes.is_empty());
        let twins: Vec<(String, String)> = record
            .twins
            .iter()
            .map(|(key, twin)| (key.clone(), to_json(&twin.to_wire())))
            .collect();
        assert_eq!(
            twins,
            [
                (
                    "enabled".to_owned(),
                    r#"{"expected":{"value":"true","metadata":{"timestamp":1700000000500}},"optional":false,"metadata":{"type":"boolean"},"expected_version":{"cloud":1,"edge":0}}"#.to_owned()
                ),
                (
                    "setpoint".to_owned(),
                    r#"{"expected":{"value":"25","metadata":{"timestamp":1700000000500}},"optional":false,"metadata":{"type":"int"},"expected_version":{"cloud":1,"edge":0}}"#.to_owned()
                ),
                (
                    "temperature".to_owned(),
                    r#"{"optional":false,"metadata":{"type":"float"}}"#.to_owned()
                ),
            ]
        );
    }
}
