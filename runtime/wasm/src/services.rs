//! What the node offers guests, as traits the embedding implements.
//!
//! The Wasm host depends on no other module: publishing, twin access and mapper reports are
//! provided by whoever embeds it (the daemon bridges them onto the bus; devicetwin passes its
//! twin cache when it calls handlers; tests pass recorders).

use std::sync::Arc;

use crate::value::TwinValue;

/// Device state as KubeEdge's state-update topic knows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeviceState {
    /// `online`.
    Online,
    /// `offline`.
    Offline,
    /// `ok`.
    Ok,
    /// `unknown`.
    Unknown,
    /// `unhealthy`.
    Unhealthy,
}

impl DeviceState {
    /// KubeEdge's spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            DeviceState::Online => "online",
            DeviceState::Offline => "offline",
            DeviceState::Ok => "ok",
            DeviceState::Unknown => "unknown",
            DeviceState::Unhealthy => "unhealthy",
        }
    }
}

/// Read access to twins, given to twin handlers for the duration of a call.
pub trait TwinReader: Send + Sync {
    /// The reported value of `device`'s `property`.
    fn actual(&self, device: &str, property: &str) -> Option<TwinValue>;
    /// The desired value of `device`'s `property`.
    fn desired(&self, device: &str, property: &str) -> Option<TwinValue>;
}

/// Publishing on the node's MQTT broker.
pub trait Publisher: Send + Sync {
    /// Publishes `payload` on `topic`; the topic has already been checked against the manifest.
    fn publish(&self, module: &str, topic: &str, payload: Vec<u8>) -> Result<(), String>;
}

/// Where mapper reports go: into the twin update path.
pub trait MapperSink: Send + Sync {
    /// A value read from a device.
    fn report_actual(
        &self,
        mapper: &str,
        device: &str,
        property: &str,
        value: TwinValue,
    ) -> Result<(), String>;
    /// A device's state.
    fn report_state(&self, mapper: &str, device: &str, state: DeviceState) -> Result<(), String>;
}

/// The services a node gives its guests.
#[derive(Clone)]
pub struct HostServices {
    /// MQTT publishing.
    pub publisher: Arc<dyn Publisher>,
    /// Mapper reports.
    pub mapper_sink: Arc<dyn MapperSink>,
}
