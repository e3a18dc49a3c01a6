//! The eventbus's errors, each with the context an operator needs to act on it.

use std::path::PathBuf;

use wedge_core::StoreError;

/// A `modules.eventBus` value the eventbus cannot run with.
#[derive(Debug, thiserror::Error)]
pub enum SettingsError {
    /// `mqttMode` is not 0, 1 or 2.
    #[error("modules.eventBus.mqttMode: {0} is not 0 (internal), 1 (both) or 2 (external)")]
    Mode(u8),
    /// `mqttQOS` is not 0, 1 or 2.
    #[error("modules.eventBus.mqttQOS: {0} is not 0, 1 or 2")]
    Qos(u8),
    /// A broker URL that cannot be used.
    #[error("modules.eventBus.{key}: {url:?}: {reason}")]
    Url {
        /// The setting's key.
        key: &'static str,
        /// The value given.
        url: String,
        /// What is wrong with it.
        reason: String,
    },
    /// Inconsistent `eventBusTLS` settings.
    #[error("modules.eventBus.eventBusTLS: {0}")]
    Tls(String),
}

/// Why the eventbus could not start or keep running.
#[derive(Debug, thiserror::Error)]
pub enum EventBusError {
    /// The embedded broker's users file cannot be used.
    #[error(transparent)]
    Access(#[from] crate::access::AccessError),
    /// The embedded broker could not listen.
    #[error("embedded MQTT broker cannot listen on {addr}: {source}")]
    Listen {
        /// The address asked for.
        addr: String,
        /// The socket error.
        source: std::io::Error,
    },
    /// A TLS file could not be read or used.
    #[error("MQTT TLS: {path}: {reason}")]
    TlsFile {
        /// The file.
        path: PathBuf,
        /// What went wrong.
        reason: String,
    },
    /// The TLS configuration could not be built.
    #[error("MQTT TLS: {0}")]
    Tls(String),
    /// Reading or writing the `sub_topics` table failed.
    #[error("sub_topics table: {0}")]
    Store(#[from] StoreError),
}
