//! Device definitions: what a mapper needs to drive a device (protocol, property visitors,
//! collect cycles), from KubeEdge `Device`/`DeviceModel` objects (v1beta1) received from the
//! cloud (`<ns>/device/<name>` through metamanager) or read from local YAML files.
//!
//! * [`kube`]: the two object kinds as Wedge reads them, from the cloud's JSON or from YAML.
//! * [`files`]: local YAML files and directories.
//! * [`catalog`]: models and devices by id; a device is *defined* once its model is known.

use std::path::PathBuf;

pub mod catalog;
mod fields;
pub mod files;
pub mod kube;

pub use catalog::Catalog;
pub use files::{DirectoryLoad, load_directory, load_file, read_file, yaml_files};
pub use kube::{
    KubeDevice, KubeDeviceProperty, KubeModel, KubeModelProperty, KubeObject, PushMqtt,
    object_from_message, parse_device_json, parse_model_json, parse_yaml, twin_type,
};

/// One property of a defined device.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PropertyDefinition {
    /// Name (twin key).
    pub name: String,
    /// `int`, `float`, `boolean` or `string` (from the device model; default `string`).
    pub value_type: String,
    /// Protocol-specific visitor config, JSON text (`{}` when none).
    pub visitor: String,
    /// Collect cycle in ms (0 = the mapper's default).
    pub collect_cycle_ms: u32,
    /// Desired value the definition carries, if any.
    pub desired: Option<String>,
    /// `reportToCloud`: whether a mapper reports the property's values (KubeEdge's mappers
    /// report none of a property without it; Wasm mappers follow).
    pub report_to_cloud: bool,
    /// `reportCycle` in ms (0 = not set): how often values are pushed to `push_mqtt`.
    pub report_cycle_ms: u32,
    /// `pushMethod.mqtt`, when set.
    pub push_mqtt: Option<PushMqtt>,
    /// The other push methods set (`http`, `otel`, `dbMethod`), by name.
    pub push_other: Vec<String>,
}

/// A device a mapper should drive.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DeviceDefinition {
    /// `<namespace>/<name>`.
    pub id: String,
    /// Protocol name; chooses the mapper.
    pub protocol: String,
    /// Protocol configuration, JSON text (`{}` when none).
    pub protocol_config: String,
    /// Properties.
    pub properties: Vec<PropertyDefinition>,
    /// `metadata.name` (the devicetwin row's `name`, as KubeEdge's device controller sets it).
    pub name: String,
    /// The `description` label, or `""` (KubeEdge's device description).
    pub description: String,
    /// `<namespace>/<model name>` of the `DeviceModel` that typed the properties.
    pub model: String,
    /// The Device object this definition resolves.
    pub device: KubeDevice,
    /// The DeviceModel object that typed it.
    pub device_model: KubeModel,
}

/// Why a definition could not be read. Names where it came from when known.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}{reason}", location(.file, .document))]
pub struct DefinitionError {
    /// The file it was read from (local definitions).
    pub file: Option<PathBuf>,
    /// The YAML document of that file, counted from 1.
    pub document: Option<usize>,
    /// What is wrong, with the field's path where one is at fault.
    pub reason: String,
}

impl DefinitionError {
    /// An error with only a reason.
    pub fn new(reason: impl Into<String>) -> DefinitionError {
        DefinitionError {
            file: None,
            document: None,
            reason: reason.into(),
        }
    }

    /// The same error, located in `document` (counted from 1).
    pub(crate) fn in_document(mut self, document: usize) -> DefinitionError {
        self.document = Some(document);
        self
    }

    /// The same error, located in `file`.
    pub(crate) fn in_file(mut self, file: PathBuf) -> DefinitionError {
        self.file = Some(file);
        self
    }
}

/// `"<file>: document <n>: "`, the parts that are known.
fn location(file: &Option<PathBuf>, document: &Option<usize>) -> String {
    let mut at = String::new();
    if let Some(file) = file {
        at.push_str(&format!("{}: ", file.display()));
    }
    if let Some(document) = document {
        at.push_str(&format!("document {document}: "));
    }
    at
}

#[cfg(test)]
mod tests;
