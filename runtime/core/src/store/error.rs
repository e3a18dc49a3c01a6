//! Store errors.

use std::path::PathBuf;

/// Why a store operation failed.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The database could not be opened or is not usable (corrupt, wrong format, locked).
    #[error("cannot open database {path}: {reason}")]
    Open {
        /// The database file.
        path: PathBuf,
        /// What went wrong, in words.
        reason: String,
    },
    /// The database file or its directory is not writable.
    #[error("database {path} is not writable: {reason}")]
    ReadOnly {
        /// The database file.
        path: PathBuf,
        /// What went wrong, in words.
        reason: String,
    },
    /// A migration could not be applied.
    #[error("schema migration {component} v{version} failed: {source}")]
    Migration {
        /// The component whose schema it is.
        component: String,
        /// The migration's version number.
        version: usize,
        /// The SQLite error.
        source: rusqlite::Error,
    },
    /// An SQL statement failed.
    #[error("database error: {0}")]
    Sql(#[from] rusqlite::Error),
    /// The batch this write belonged to failed to commit; nothing of it is stored.
    #[error("commit failed: {0}")]
    Commit(String),
    /// Content could not be (de)serialised for storage.
    #[error("stored value is not valid JSON: {0}")]
    Json(#[from] serde_json::Error),
    /// A write closure panicked; its changes were rolled back.
    #[error("write operation panicked: {0}")]
    Panicked(String),
    /// The store is shutting down.
    #[error("store is closed")]
    Closed,
}
