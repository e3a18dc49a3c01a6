//! The single writer thread and its group commit.
//!
//! All writes go through one connection on one OS thread (SQLite allows one writer anyway, and a
//! thread keeps blocking I/O off the async runtime). The thread takes the first queued job, then
//! every job already waiting up to `max_batch`, runs each inside its own savepoint (a failing job
//! rolls back alone), commits once, and only then tells each caller its result. One fsync thus
//! covers a whole batch, and a caller never hears "done" for data that is not durable.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::time::Instant;

use rusqlite::Connection;
use tokio::sync::{mpsc, oneshot};

use super::StoreStats;
use super::error::StoreError;

/// A queued write, boxed so jobs with different result types share one queue.
pub(crate) trait Job: Send {
    /// Runs the write inside the open transaction; false when it failed (and must roll back).
    fn run(&mut self, conn: &Connection) -> bool;
    /// Tells the caller the outcome once the batch has committed (`None`) or failed (`Some`).
    fn complete(self: Box<Self>, batch_failure: Option<&StoreError>);
}

/// A write closure and the channel its caller waits on.
pub(crate) struct WriteJob<F, R> {
    pub(crate) op: Option<F>,
    pub(crate) result: Option<Result<R, StoreError>>,
    pub(crate) reply: oneshot::Sender<Result<R, StoreError>>,
}

impl<F, R> Job for WriteJob<F, R>
where
    F: FnOnce(&Connection) -> Result<R, StoreError> + Send,
    R: Send,
{
    fn run(&mut self, conn: &Connection) -> bool {
        let Some(op) = self.op.take() else {
            return false;
        };
        let result = op(conn);
        let ok = result.is_ok();
        self.result = Some(result);
        ok
    }

    fn complete(self: Box<Self>, batch_failure: Option<&StoreError>) {
        let this = *self;
        let outcome = match (batch_failure, this.result) {
            (Some(failure), _) => Err(StoreError::Commit(failure.to_string())),
            (None, Some(result)) => result,
            (None, None) => Err(StoreError::Panicked(
                "the write closure panicked; its changes were rolled back".to_owned(),
            )),
        };
        // The caller may have stopped waiting; the data is committed either way.
        let _ = this.reply.send(outcome);
    }
}

pub(crate) fn run(
    mut conn: Connection,
    mut jobs: mpsc::Receiver<Box<dyn Job>>,
    max_batch: usize,
    stats: Arc<StoreStats>,
    committed: std::sync::mpsc::SyncSender<super::checkpoint::Wake>,
) {
    let mut batch: Vec<Box<dyn Job>> = Vec::with_capacity(max_batch);
    while let Some(first) = jobs.blocking_recv() {
        batch.push(first);
        while batch.len() < max_batch {
            match jobs.try_recv() {
                Ok(job) => batch.push(job),
                Err(_) => break,
            }
        }
        let started = Instant::now();
        let outcome = run_batch(&mut conn, &mut batch, &stats);
        stats.commit_latency.observe(started.elapsed());
        stats.record_batch(batch.len());
        stats.record_commit(outcome.as_ref().err());
        if let Err(e) = &outcome {
            tracing::error!("store batch of {} writes failed: {e}", batch.len());
        }
        if outcome.is_ok() {
            // Full: a wake-up is already pending, which covers this commit too.
            let _ = committed.try_send(super::checkpoint::Wake::Committed);
        }
        let failure = outcome.err();
        for job in batch.drain(..) {
            job.complete(failure.as_ref());
        }
    }
    // Every handle is gone: fold the WAL back so the file is self-contained on disk.
    if let Err(e) = conn.execute_batch("PRAGMA wal_checkpoint(TRUNCATE);") {
        tracing::debug!("final checkpoint skipped: {e}");
    }
}

/// Runs every job of the batch in one transaction. On error nothing of the batch is stored.
fn run_batch(
    conn: &mut Connection,
    batch: &mut [Box<dyn Job>],
    stats: &StoreStats,
) -> Result<(), StoreError> {
    let mut tx = conn
        .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
        .map_err(|e| StoreError::Commit(format!("cannot begin transaction: {e}")))?;
    for job in batch.iter_mut() {
        let savepoint = tx
            .savepoint()
            .map_err(|e| StoreError::Commit(format!("cannot open savepoint: {e}")))?;
        let ok = catch_unwind(AssertUnwindSafe(|| job.run(&savepoint))).unwrap_or(false);
        if ok {
            savepoint
                .commit()
                .map_err(|e| StoreError::Commit(format!("cannot release savepoint: {e}")))?;
        } else {
            stats.record_error();
            // Dropping an uncommitted savepoint rolls back just this job.
            drop(savepoint);
        }
    }
    tx.commit().map_err(|e| StoreError::Commit(e.to_string()))
}
