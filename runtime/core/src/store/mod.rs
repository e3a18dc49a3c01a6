//! The node's one SQLite database.
//!
//! One file in WAL mode, written by a single writer thread with group commit (see `writer`), read
//! through a small pool of read-only connections that never block the writer. Each module owns
//! its tables and brings its migrations ([`Store::migrate`]); the store only runs them.

mod checkpoint;
mod error;
mod migrate;
mod space;
mod writer;

pub use error::StoreError;

use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::thread::JoinHandle;

use rusqlite::{Connection, OpenFlags};
use tokio::sync::{mpsc, oneshot};

use crate::metrics::{Histogram, MetricsSource, PromWriter};
use writer::{Job, WriteJob};

/// How hard SQLite syncs each commit (`wedge.store.synchronous`).
pub use crate::config::Synchronous;

/// Tuning of an opened store.
#[derive(Debug, Clone)]
pub struct StoreOptions {
    /// Most writes committed together.
    pub max_batch: usize,
    /// Commit durability.
    pub synchronous: Synchronous,
    /// Writes that may wait for the writer before `submit` waits (back-pressure).
    pub queue_capacity: usize,
}

impl Default for StoreOptions {
    fn default() -> StoreOptions {
        StoreOptions {
            max_batch: 512,
            synchronous: Synchronous::Full,
            queue_capacity: 8192,
        }
    }
}

/// How long a failed commit alone keeps the store reported unwritable.
const COMMIT_FAILURE_REMEMBERED: std::time::Duration = std::time::Duration::from_secs(10);

/// Counters of the writer, exported as metrics.
#[derive(Debug)]
pub(crate) struct StoreStats {
    batches: AtomicU64,
    writes: AtomicU64,
    errors: AtomicU64,
    commit_latency: Histogram,
    /// When and why the last batch failed to commit; cleared by the next one that commits.
    commit_failure: Mutex<Option<(std::time::Instant, String)>>,
}

impl StoreStats {
    fn record_batch(&self, size: usize) {
        self.batches.fetch_add(1, Ordering::Relaxed);
        self.writes.fetch_add(size as u64, Ordering::Relaxed);
    }

    fn record_error(&self) {
        self.errors.fetch_add(1, Ordering::Relaxed);
    }

    fn record_commit(&self, failure: Option<&StoreError>) {
        *self
            .commit_failure
            .lock()
            .unwrap_or_else(|p| p.into_inner()) =
            failure.map(|e| (std::time::Instant::now(), e.to_string()));
    }
}

struct Inner {
    path: PathBuf,
    jobs: Option<mpsc::Sender<Box<dyn Job>>>,
    writer: Option<JoinHandle<()>>,
    checkpointer: Option<(
        std::sync::mpsc::SyncSender<checkpoint::Wake>,
        JoinHandle<()>,
    )>,
    readers: Mutex<Vec<Connection>>,
    stats: Arc<StoreStats>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        // The checkpointer stops first, so the writer's final checkpoint runs alone.
        if let Some((stop, thread)) = self.checkpointer.take() {
            let _ = stop.send(checkpoint::Wake::Stop);
            let _ = thread.join();
        }
        // Closing the queue lets the writer finish what is queued and exit; wait for it so the
        // process never ends with an unfinished commit.
        self.jobs.take();
        if let Some(writer) = self.writer.take() {
            let _ = writer.join();
        }
    }
}

/// A handle to the database; cheap to clone.
#[derive(Clone)]
pub struct Store {
    inner: Arc<Inner>,
}

/// A write that has been queued; resolves once its batch is committed.
pub struct PendingWrite<R> {
    reply: oneshot::Receiver<Result<R, StoreError>>,
}

impl<R> Future for PendingWrite<R> {
    type Output = Result<R, StoreError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        Pin::new(&mut self.reply)
            .poll(cx)
            .map(|r| r.unwrap_or(Err(StoreError::Closed)))
    }
}

impl Store {
    /// Opens (creating if needed) the database at `path` and starts its writer. A corrupt,
    /// foreign or unwritable file is reported here, with the path, rather than on first use.
    pub fn open(path: &Path, options: StoreOptions) -> Result<Store, StoreError> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|e| StoreError::ReadOnly {
                path: path.to_owned(),
                reason: format!("cannot create directory {}: {e}", dir.display()),
            })?;
        }
        let conn = open_writer(path, options.synchronous)?;
        let stats = Arc::new(StoreStats {
            batches: AtomicU64::new(0),
            writes: AtomicU64::new(0),
            errors: AtomicU64::new(0),
            commit_latency: Histogram::latency(),
            commit_failure: Mutex::new(None),
        });
        let checkpointer = start_checkpointer(path, options.synchronous)?;
        let committed = checkpointer.0.clone();
        let (tx, rx) = mpsc::channel(options.queue_capacity.max(1));
        let writer_stats = stats.clone();
        let max_batch = options.max_batch.max(1);
        let writer = std::thread::Builder::new()
            .name("wedge-store-writer".to_owned())
            .spawn(move || writer::run(conn, rx, max_batch, writer_stats, committed))
            .map_err(|e| StoreError::Open {
                path: path.to_owned(),
                reason: format!("cannot start writer thread: {e}"),
            })?;
        Ok(Store {
            inner: Arc::new(Inner {
                path: path.to_owned(),
                jobs: Some(tx),
                writer: Some(writer),
                checkpointer: Some(checkpointer),
                readers: Mutex::new(Vec::new()),
                stats,
            }),
        })
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// Queues a write and returns once it is queued (waiting if the queue is full). The returned
    /// future resolves after the batch holding the write has committed. Writes are applied in
    /// the order they are queued.
    pub async fn submit<R, F>(&self, op: F) -> Result<PendingWrite<R>, StoreError>
    where
        F: FnOnce(&Connection) -> Result<R, StoreError> + Send + 'static,
        R: Send + 'static,
    {
        let (reply, rx) = oneshot::channel();
        let job: Box<dyn Job> = Box::new(WriteJob {
            op: Some(op),
            result: None,
            reply,
        });
        let jobs = self.inner.jobs.as_ref().ok_or(StoreError::Closed)?;
        jobs.send(job).await.map_err(|_| StoreError::Closed)?;
        Ok(PendingWrite { reply: rx })
    }

    /// Runs a write and waits until it is committed.
    pub async fn write<R, F>(&self, op: F) -> Result<R, StoreError>
    where
        F: FnOnce(&Connection) -> Result<R, StoreError> + Send + 'static,
        R: Send + 'static,
    {
        self.submit(op).await?.await
    }

    /// Waits until every write queued before this call is committed.
    pub async fn barrier(&self) -> Result<(), StoreError> {
        self.write(|_| Ok(())).await
    }

    /// Runs a read on a pooled read-only connection off the async runtime. Sees every write
    /// committed before it starts (pair with [`Store::barrier`] for read-your-writes).
    pub async fn read<R, F>(&self, op: F) -> Result<R, StoreError>
    where
        F: FnOnce(&Connection) -> Result<R, StoreError> + Send + 'static,
        R: Send + 'static,
    {
        let store = self.clone();
        tokio::task::spawn_blocking(move || store.read_blocking(op))
            .await
            .unwrap_or_else(|e| {
                // A read cancelled because the runtime is shutting down did not panic.
                if e.is_cancelled() {
                    Err(StoreError::Closed)
                } else {
                    Err(StoreError::Panicked(e.to_string()))
                }
            })
    }

    /// [`Store::read`] for code already off the async runtime.
    pub fn read_blocking<R>(
        &self,
        op: impl FnOnce(&Connection) -> Result<R, StoreError>,
    ) -> Result<R, StoreError> {
        let pooled = self
            .inner
            .readers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .pop();
        let conn = match pooled {
            Some(conn) => conn,
            None => open_reader(&self.inner.path)?,
        };
        let result = op(&conn);
        self.inner
            .readers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(conn);
        result
    }

    /// Brings `component`'s schema up to date: applies, in one transaction each, the
    /// `migrations` (SQL scripts, version = position + 1) not applied yet.
    pub async fn migrate(
        &self,
        component: &'static str,
        migrations: &'static [&'static str],
    ) -> Result<(), StoreError> {
        self.write(move |conn| migrate::apply(conn, component, migrations))
            .await
    }

    /// Why the store cannot take writes now (`/healthz`), or `None`: a commit failed in the
    /// last 10 s and none has succeeded since, or the file system holding the database has less than [`space::MIN_FREE_BYTES`] left
    /// (checked now, so a full disk shows before the next write fails on it).
    pub fn unwritable(&self) -> Option<String> {
        let failed = self
            .inner
            .stats
            .commit_failure
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        // A failure no later commit cleared counts for a while: with nothing written since,
        // the free-space check below is what says whether it would work now.
        if let Some((at, reason)) = failed
            && at.elapsed() < COMMIT_FAILURE_REMEMBERED
        {
            return Some(format!("the last commit failed: {reason}"));
        }
        let dir = self
            .inner
            .path
            .parent()
            .filter(|d| !d.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        match space::free_bytes(dir) {
            Ok(free) if free < space::MIN_FREE_BYTES => Some(format!(
                "the file system of {} has {free} bytes free",
                self.inner.path.display()
            )),
            Ok(_) => None,
            Err(e) => Some(format!("cannot read free space of {}: {e}", dir.display())),
        }
    }

    /// (batches, writes) committed so far; lets tests and benchmarks see group commit at work.
    pub fn commit_counts(&self) -> (u64, u64) {
        let stats = &self.inner.stats;
        (
            stats.batches.load(Ordering::Relaxed),
            stats.writes.load(Ordering::Relaxed),
        )
    }
}

impl MetricsSource for Store {
    /// Writes commit counts and latency.
    fn write_metrics(&self, w: &mut PromWriter) {
        let stats = &self.inner.stats;
        w.family(
            "wedge_store_commit_batches_total",
            "Transactions committed by the store writer (each holds one or more writes).",
            "counter",
        );
        w.sample(
            "wedge_store_commit_batches_total",
            &[],
            stats.batches.load(Ordering::Relaxed) as f64,
        );
        w.family(
            "wedge_store_writes_total",
            "Writes processed by the store writer.",
            "counter",
        );
        w.sample(
            "wedge_store_writes_total",
            &[],
            stats.writes.load(Ordering::Relaxed) as f64,
        );
        w.family(
            "wedge_store_write_errors_total",
            "Writes that failed and were rolled back.",
            "counter",
        );
        w.sample(
            "wedge_store_write_errors_total",
            &[],
            stats.errors.load(Ordering::Relaxed) as f64,
        );
        w.histogram(
            "wedge_store_commit_seconds",
            "Time to run and commit one batch.",
            &stats.commit_latency,
        );
    }
}

fn open_writer(path: &Path, synchronous: Synchronous) -> Result<Connection, StoreError> {
    let open_err = |reason: String| StoreError::Open {
        path: path.to_owned(),
        reason,
    };
    let conn = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_WRITE
            | OpenFlags::SQLITE_OPEN_CREATE
            | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(|e| classify(path, e))?;
    if conn.is_readonly("main").unwrap_or(false) {
        return Err(StoreError::ReadOnly {
            path: path.to_owned(),
            reason: "the file is read-only for this user".to_owned(),
        });
    }
    // Reading the schema is what fails on a file that is not a database (or is encrypted).
    conn.query_row("SELECT count(*) FROM sqlite_master", [], |r| {
        r.get::<_, i64>(0)
    })
    .map_err(|e| classify(path, e))?;
    let mode: String = conn
        .query_row("PRAGMA journal_mode=WAL", [], |r| r.get(0))
        .map_err(|e| classify(path, e))?;
    if !mode.eq_ignore_ascii_case("wal") {
        return Err(open_err(format!(
            "cannot switch to WAL journal mode (got {mode})"
        )));
    }
    let sync = sync_pragma(synchronous);
    // Checkpoints run on their own thread (see `checkpoint.rs`), never inside a commit.
    conn.execute_batch(&format!(
        "PRAGMA synchronous={sync}; PRAGMA foreign_keys=ON; PRAGMA busy_timeout=5000; \
         PRAGMA wal_autocheckpoint=0;"
    ))
    .map_err(|e| classify(path, e))?;
    // Prove we can take the write lock now, not at the first message.
    conn.execute_batch("BEGIN IMMEDIATE; COMMIT;")
        .map_err(|e| classify(path, e))?;
    Ok(conn)
}

fn sync_pragma(synchronous: Synchronous) -> &'static str {
    match synchronous {
        Synchronous::Full => "FULL",
        Synchronous::Normal => "NORMAL",
    }
}

fn start_checkpointer(
    path: &Path,
    synchronous: Synchronous,
) -> Result<
    (
        std::sync::mpsc::SyncSender<checkpoint::Wake>,
        JoinHandle<()>,
    ),
    StoreError,
> {
    let conn = checkpoint::open(path, sync_pragma(synchronous)).map_err(|e| classify(path, e))?;
    // One pending wake-up is enough: commits meanwhile are folded into the next checkpoint.
    let (stop, stopped) = std::sync::mpsc::sync_channel(1);
    let thread = std::thread::Builder::new()
        .name("wedge-store-checkpoint".to_owned())
        .spawn(move || checkpoint::run(conn, stopped))
        .map_err(|e| StoreError::Open {
            path: path.to_owned(),
            reason: format!("cannot start checkpoint thread: {e}"),
        })?;
    Ok((stop, thread))
}

fn open_reader(path: &Path) -> Result<Connection, StoreError> {
    let conn = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(|e| classify(path, e))?;
    conn.execute_batch("PRAGMA busy_timeout=5000; PRAGMA query_only=ON;")
        .map_err(|e| classify(path, e))?;
    Ok(conn)
}

/// Turns SQLite's codes into the two errors an operator can act on.
fn classify(path: &Path, e: rusqlite::Error) -> StoreError {
    use rusqlite::ErrorCode::*;
    let reason = e.to_string();
    match e.sqlite_error_code() {
        Some(ReadOnly) | Some(CannotOpen) | Some(PermissionDenied) => StoreError::ReadOnly {
            path: path.to_owned(),
            reason,
        },
        Some(NotADatabase) => StoreError::Open {
            path: path.to_owned(),
            reason: format!("{reason} (the file is corrupt or not an SQLite database)"),
        },
        _ => StoreError::Open {
            path: path.to_owned(),
            reason,
        },
    }
}

#[cfg(test)]
mod tests;
