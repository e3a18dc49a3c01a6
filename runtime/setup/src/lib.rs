//! Joining a Wedge node to a KubeEdge cloud, and undoing it.
//!
//! `wedge join` does for a Wedge node what `keadm join` does for edgecore: it checks the join
//! token, has the cloud sign the node's certificate (so a bad token or an unreachable cloud is
//! said at once, not in a service log later), writes `edgecore.yaml` in KubeEdge's layout, and
//! installs the systemd unit. `wedge reset` stops the unit and removes what join wrote and the
//! node's state. The binary only parses flags and prints; everything here is testable alone
//! (`tests/realcloud` joins every node it drives with `wedge join`).

#![warn(missing_docs)]

pub mod check;
pub mod edgecore_yaml;
pub mod join;
pub mod layout;
pub mod reset;
pub mod systemd;

pub use join::{JoinOptions, Joined, join};
pub use layout::Layout;
pub use reset::{ResetPlan, reset_plan};

use std::path::PathBuf;

/// Why joining or resetting failed. Nothing is left half-written: the certificate files and
/// the config are each replaced whole or not at all.
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    /// A flag or `--set` value is not usable.
    #[error("{0}")]
    Invalid(String),
    /// The node already has a config; joining again would replace its identity.
    #[error(
        "{} exists: this node is already joined; run `wedge reset` first, or pass --force to \
         overwrite it",
        .0.display()
    )]
    AlreadyJoined(PathBuf),
    /// The config join would write does not pass `wedge config check`.
    #[error("the config to write is invalid: {0}")]
    Config(#[from] wedge_core::config::ConfigError),
    /// The cloud refused the token or could not be reached.
    #[error("joining the cloud at {server} failed: {source}")]
    Bootstrap {
        /// CloudHub's HTTPS address.
        server: String,
        /// What went wrong.
        #[source]
        source: wedge_edgehub::bootstrap::BootstrapError,
    },
    /// A file could not be written or removed.
    #[error("{context} {}: {source}", .path.display())]
    Io {
        /// What was being done.
        context: &'static str,
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// A systemd step failed.
    #[error("systemd: {0}")]
    Systemd(String),
}

impl SetupError {
    pub(crate) fn io(
        context: &'static str,
        path: impl Into<PathBuf>,
        source: std::io::Error,
    ) -> Self {
        SetupError::Io {
            context,
            path: path.into(),
            source,
        }
    }
}
