//! The background checkpointer.
//!
//! With SQLite's automatic checkpoints, every ~1000 WAL pages one unlucky commit also copies the
//! WAL into the database file and fsyncs it — a stall of milliseconds to tens of milliseconds on
//! the commit path that every queued caller waits behind. Instead the writer's automatic
//! checkpoints are off and this thread, on its own connection, runs a PASSIVE checkpoint after
//! commits, at most every [`PERIOD`] (commits in between are folded into one). It sleeps while
//! nothing is written, so an idle node's store wakes nobody. PASSIVE never blocks the writer or
//! readers; the WAL is reused from its start once a checkpoint has copied everything.

use std::path::Path;
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use rusqlite::{Connection, OpenFlags};

/// Least time between checkpoints.
pub(crate) const PERIOD: Duration = Duration::from_millis(200);

/// What wakes the checkpointer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Wake {
    /// The writer committed a batch.
    Committed,
    /// The store is closing.
    Stop,
}

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

/// Checkpoints after commits, at most every [`PERIOD`], until [`Wake::Stop`] (or every sender
/// is gone).
pub(crate) fn run(conn: Connection, wake: Receiver<Wake>) {
    let mut last: Option<Instant> = None;
    loop {
        match wake.recv() {
            Ok(Wake::Committed) => {}
            Ok(Wake::Stop) | Err(_) => return,
        }
        if let Some(at) = last {
            let due = at + PERIOD;
            loop {
                let left = due.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    break;
                }
                match wake.recv_timeout(left) {
                    Ok(Wake::Committed) | Err(RecvTimeoutError::Timeout) => {}
                    Ok(Wake::Stop) | Err(RecvTimeoutError::Disconnected) => return,
                }
            }
        }
        if let Err(e) = conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(())) {
            tracing::debug!("background checkpoint skipped: {e}");
        }
        last = Some(Instant::now());
    }
}
