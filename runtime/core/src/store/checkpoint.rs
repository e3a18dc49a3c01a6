//! The background checkpointer.
//!
//! With SQLite's automatic checkpoints, every ~1000 WAL pages one unlucky commit also copies the
//! WAL into the database file and fsyncs it — a stall of milliseconds to tens of milliseconds on
//! the commit path that every queued caller waits behind. Instead the writer's automatic
//! checkpoints are off and this thread, on its own connection, runs a PASSIVE checkpoint a few
//! times a second. PASSIVE never blocks the writer or readers; the WAL is reused from its start
//! once a checkpoint has copied everything.

use std::path::Path;
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::Duration;

use rusqlite::{Connection, OpenFlags};

/// Time between checkpoints.
pub(crate) const PERIOD: Duration = Duration::from_millis(200);

/// Opens the checkpointer's connection (same durability as the writer).
pub(crate) fn open(path: &Path, synchronous: &str) -> rusqlite::Result<Connection> {
    let conn = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )?;
    conn.execute_batch(&format!(
        "PRAGMA synchronous={synchronous}; PRAGMA busy_timeout=5000; PRAGMA wal_autocheckpoint=0;"
    ))?;
    Ok(conn)
}

/// Checkpoints every [`PERIOD`] until `stop` is signalled or dropped.
pub(crate) fn run(conn: Connection, stop: Receiver<()>) {
    loop {
        match stop.recv_timeout(PERIOD) {
            Err(RecvTimeoutError::Timeout) => {}
            Ok(()) | Err(RecvTimeoutError::Disconnected) => return,
        }
        if let Err(e) = conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(())) {
            tracing::debug!("background checkpoint skipped: {e}");
        }
    }
}
