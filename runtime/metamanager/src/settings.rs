//! What the metamanager needs from `edgecore.yaml`.

use std::time::Duration;

/// The metamanager's settings, taken from `modules.metaManager`.
#[derive(Debug, Clone)]
pub struct MetaManagerSettings {
    /// The module cloud-bound traffic is sent to (`contextSendModule`, `websocket`).
    pub cloud_module: String,
    /// How long a remote query waits for the cloud (`remoteQueryTimeout`, 60 s).
    pub remote_query_timeout: Duration,
    /// Writes and replies that may be in flight before receiving pauses (back-pressure).
    pub max_in_flight: usize,
}

impl Default for MetaManagerSettings {
    fn default() -> MetaManagerSettings {
        MetaManagerSettings {
            cloud_module: wedge_core::message::module::EDGEHUB.to_owned(),
            remote_query_timeout: Duration::from_secs(60),
            max_in_flight: 4096,
        }
    }
}
