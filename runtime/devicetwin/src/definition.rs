//! Device definitions: what a mapper needs to drive a device (protocol, property visitors,
//! collect cycles), from KubeEdge `Device`/`DeviceModel` objects (v1beta1) received from the
//! cloud (`<ns>/device/<name>` through metamanager) or read from local YAML files.

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
}
