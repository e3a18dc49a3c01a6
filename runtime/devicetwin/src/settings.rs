//! What the devicetwin module runs with.

use std::path::PathBuf;
use std::time::Duration;

/// Largest twin update body devicetwin reads (256 KiB). KubeEdge caps keys at 128 bytes and
/// values at 512, so a real update is a few KiB at most; a bigger body is a broken or hostile
/// client, answered with a 400 result instead of being parsed.
pub const DEFAULT_MAX_PAYLOAD: usize = 256 * 1024;

/// Settings of the devicetwin module.
#[derive(Debug, Clone)]
pub struct DeviceTwinSettings {
    /// This node's name (membership topics and the cloud's `group_id`).
    pub node_name: String,
    /// Largest request body read.
    pub max_payload: usize,
    /// Directory of local `Device` / `DeviceModel` YAML files loaded at start.
    pub devices_dir: Option<PathBuf>,
    /// Cloud-bound messages are re-sent after this long without twin traffic (60 s).
    pub resend_after: Duration,
    /// Requests whose outputs may wait for their commit at once; past it, reading the
    /// mailbox waits (back-pressure towards the broker).
    pub max_in_flight: usize,
    /// Twins per device and devices per node (see [`crate::limits`]).
    pub limits: crate::limits::Limits,
}

impl DeviceTwinSettings {
    /// KubeEdge's defaults for node `node_name`.
    pub fn new(node_name: impl Into<String>) -> DeviceTwinSettings {
        DeviceTwinSettings {
            node_name: node_name.into(),
            max_payload: DEFAULT_MAX_PAYLOAD,
            devices_dir: None,
            resend_after: crate::cloud_pending::RESEND_AFTER,
            max_in_flight: 4096,
            limits: crate::limits::Limits::default(),
        }
    }
}
