//! Why the DMI module cannot serve: typed, so the daemon (and tests) can tell a bad setting
//! from a socket that cannot be made safe, and each message names the path or setting.

use std::path::PathBuf;

use wedge_core::StoreError;

/// Why the DMI module could not start or stopped serving.
#[derive(Debug, thiserror::Error)]
pub enum DmiError {
    /// A setting would disable a protection or cannot be carried by HTTP/2.
    #[error("DMI settings: {0}")]
    Settings(String),
    /// A filesystem or socket call on the DMI socket (or its directory) failed.
    #[error("DMI socket {path}: cannot {what}: {source}")]
    Socket {
        /// The path the call was made on.
        path: PathBuf,
        /// What was being done.
        what: &'static str,
        /// The system's answer.
        source: std::io::Error,
    },
    /// Something that is not a socket sits where the socket goes; it is not replaced, since
    /// the node would delete a file it does not own.
    #[error("DMI socket {0}: exists and is not a socket; refusing to replace it")]
    NotASocket(PathBuf),
    /// The registered mappers could not be read or updated.
    #[error("registered DMI mappers: {0}")]
    Store(#[from] StoreError),
    /// The gRPC server ended with an error.
    #[error("DMI server on {path}: {source}")]
    Serve {
        /// The socket served.
        path: PathBuf,
        /// tonic's error.
        source: tonic::transport::Error,
    },
}
