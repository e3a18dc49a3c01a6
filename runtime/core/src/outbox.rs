//! The durable outbox of cloud-bound messages.
//!
//! Every edge→cloud message that must reach the cloud is written here (SQLite, through the
//! node's group-committing [`Store`]) before the link sends it, and removed only once the cloud
//! has it. The stored body is the message's cloud JSON ([`Message::to_cloud_vec`]), so a resend
//! after a reconnect or a restart carries the same bytes and the same `msg_id`.
//!
//! The queue is bounded: beyond `cap` rows a push is refused ([`OutboxError::Full`]) rather than
//! letting a long outage fill the disk; the refusal is counted on `/metrics`. Messages relayed
//! for local clients (MQTT uploads, which any client of the broker can send) take at most
//! their own share of it ([`OutboxLimits::relayed_cap`], [`OutboxError::RelayedFull`]), so a
//! flood of them can never take the places the node's own messages — a twin change, a pod
//! status — need.
//!
//! It lives in `wedge-core`, not in edgehub, because a module whose cloud message follows from
//! a change it stores must write both in **one transaction** ([`Outbox::stage`]): then a crash
//! between its commit and the hand-over to the link can no longer lose the message (a
//! transactional outbox). Edgehub reads whatever is committed here, woken by
//! [`Outbox::changed`].

mod table;
#[cfg(test)]
mod tests;

pub use table::MIGRATIONS;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::task::{Context, Poll};

use crate::metrics::{MetricsSource, PromWriter};
use crate::store::PendingWrite;
use crate::{Message, Store, StoreError};

/// The component name the outbox's migrations are recorded under.
pub const COMPONENT: &str = "edgehub";

/// Why an outbox operation failed.
#[derive(Debug, thiserror::Error)]
pub enum OutboxError {
    /// `cap` messages are already queued; this one was not stored.
    #[error("outbox full ({cap} messages queued); message refused")]
    Full {
        /// The configured cap.
        cap: usize,
    },
    /// The share of the outbox for messages relayed from local clients is taken; this relayed
    /// message was not stored (the node's own messages still fit).
    #[error("outbox share for relayed messages full ({cap} queued); message refused")]
    RelayedFull {
        /// The relayed share's cap.
        cap: usize,
    },
    /// The database failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A stored row cannot be read back as the message it was; the caller should log it and
    /// [`Outbox::remove`] it, since it can never be sent.
    #[error("outbox row {seq} is corrupt: {reason}")]
    Corrupt {
        /// The row's seq.
        seq: u64,
        /// What is wrong with it.
        reason: String,
    },
}

/// How many messages the outbox holds at most.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OutboxLimits {
    /// Every message (0 refuses every push).
    pub cap: usize,
    /// Of those, messages relayed for local clients ([`Outbox::submit_relayed`]); at most
    /// `cap`.
    pub relayed_cap: usize,
}

impl OutboxLimits {
    /// `cap` messages, relayed ones no more than `relayed_percent` % of them (at least one
    /// when `cap` is not 0).
    pub fn with_relayed_percent(cap: usize, relayed_percent: u8) -> OutboxLimits {
        let share = cap.saturating_mul(usize::from(relayed_percent.min(100))) / 100;
        OutboxLimits {
            cap,
            relayed_cap: share.max(usize::from(cap > 0)),
        }
    }
}

/// Counters and the row count, shared by every clone and by pending pushes.
struct Shared {
    store: Store,
    cap: usize,
    relayed_cap: usize,
    /// Rows stored plus pushes queued but not yet resolved; a push reserves its place here
    /// before it is queued, so concurrent pushes can never overshoot the cap.
    queued: AtomicUsize,
    /// The relayed ones among `queued`.
    relayed: AtomicUsize,
    refused: AtomicU64,
    relayed_refused: AtomicU64,
    pushed: AtomicU64,
    removed: AtomicU64,
    /// Raised after every commit that added rows; the link waits on it.
    added: tokio::sync::Notify,
}

/// Takes `n` places in `count` under `cap`, all or none.
fn take(count: &AtomicUsize, n: usize, cap: usize) -> bool {
    count
        .fetch_update(Ordering::AcqRel, Ordering::Acquire, |q| {
            (q.saturating_add(n) <= cap).then_some(q + n)
        })
        .is_ok()
}

/// Gives back `n` places in `count`. Saturating: the count must never wrap, even if a row
/// was removed by hand.
fn give_back(count: &AtomicUsize, n: usize) {
    let _ = count.fetch_update(Ordering::AcqRel, Ordering::Acquire, |q| {
        Some(q.saturating_sub(n))
    });
}

impl Shared {
    /// Takes `n` places under the cap, all or none; relayed places also under the relayed cap.
    fn reserve(&self, n: usize, relayed: bool) -> Result<(), OutboxError> {
        if relayed && !take(&self.relayed, n, self.relayed_cap) {
            self.relayed_refused.fetch_add(n as u64, Ordering::Relaxed);
            return Err(OutboxError::RelayedFull {
                cap: self.relayed_cap,
            });
        }
        if !take(&self.queued, n, self.cap) {
            if relayed {
                give_back(&self.relayed, n);
            }
            self.refused.fetch_add(n as u64, Ordering::Relaxed);
            return Err(OutboxError::Full { cap: self.cap });
        }
        Ok(())
    }

    /// Gives back places (a failed push, or removed rows).
    fn release(&self, n: usize, relayed: usize) {
        give_back(&self.queued, n);
        give_back(&self.relayed, relayed);
    }

    /// Books the outcome of a push once its commit is known.
    fn settle(&self, outcome: &Result<u64, StoreError>, relayed: bool) {
        match outcome {
            Ok(_) => self.committed(1),
            Err(_) => self.release(1, usize::from(relayed)),
        }
    }

    /// Books `n` committed rows and wakes the link.
    fn committed(&self, n: usize) {
        self.pushed.fetch_add(n as u64, Ordering::Relaxed);
        self.added.notify_one();
    }
}

/// Messages serialised for the outbox, to be inserted by another component's write
/// ([`StagedRows::insert`]) so they commit, or roll back, with that component's own rows.
#[derive(Debug)]
pub struct StagedRows {
    rows: Vec<StagedRow>,
    queued_ms: i64,
}

#[derive(Debug)]
struct StagedRow {
    msg_id: String,
    resource: String,
    body: String,
}

impl StagedRows {
    /// Inserts the rows on `conn`, inside the caller's transaction (on the store's writer).
    pub fn insert(&self, conn: &rusqlite::Connection) -> Result<(), StoreError> {
        for row in &self.rows {
            table::insert(
                conn,
                &row.msg_id,
                &row.resource,
                &row.body,
                self.queued_ms,
                false,
            )?;
        }
        Ok(())
    }

    /// How many messages are staged.
    pub fn len(&self) -> usize {
        self.rows.len()
    }

    /// Whether nothing is staged.
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }
}

/// Places under the cap held for staged rows until their write's outcome is known: call
/// [`Reservation::committed`] after the commit; dropped without it (the write failed or was
/// never made), the places are given back.
#[must_use = "a reservation must be marked committed once its write has committed"]
pub struct Reservation {
    shared: Arc<Shared>,
    n: usize,
}

impl Reservation {
    /// The staged rows are committed: counts them and wakes the link to send them.
    pub fn committed(mut self) {
        let n = std::mem::take(&mut self.n);
        self.shared.committed(n);
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        if self.n > 0 {
            self.shared.release(self.n, 0);
        }
    }
}

impl std::fmt::Debug for Reservation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reservation").field("n", &self.n).finish()
    }
}

/// The durable, bounded queue of cloud-bound messages; cheap to clone.
#[derive(Clone)]
pub struct Outbox {
    shared: Arc<Shared>,
}

/// A push that has been queued for the store; resolves to its seq once committed.
///
/// Dropping it unresolved does not cancel the write (the row is stored all the same); its
/// outcome is then still booked in the background so the count stays right.
pub struct PendingPush {
    write: Option<PendingWrite<i64>>,
    shared: Arc<Shared>,
    /// Its place is in the relayed share.
    relayed: bool,
}

impl Future for PendingPush {
    type Output = Result<u64, OutboxError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let Some(write) = self.write.as_mut() else {
            return Poll::Ready(Err(OutboxError::Store(StoreError::Closed)));
        };
        let outcome = match Pin::new(write).poll(cx) {
            Poll::Pending => return Poll::Pending,
            Poll::Ready(r) => r.and_then(seq_from_sql),
        };
        self.write = None;
        self.shared.settle(&outcome, self.relayed);
        Poll::Ready(outcome.map_err(OutboxError::from))
    }
}

impl Drop for PendingPush {
    fn drop(&mut self) {
        let Some(write) = self.write.take() else {
            return;
        };
        // Without a runtime the place stays reserved: erring towards "fuller" never loses data.
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            let (shared, relayed) = (self.shared.clone(), self.relayed);
            rt.spawn(async move {
                let outcome = write.await.and_then(seq_from_sql);
                shared.settle(&outcome, relayed);
            });
        }
    }
}

impl StagedRow {
    /// The row of `msg`: its cloud JSON, so every send carries the same bytes and `msg_id`.
    fn of(msg: &Message) -> StagedRow {
        StagedRow {
            msg_id: msg.header.id.clone(),
            resource: msg.route.resource.clone(),
            body: String::from_utf8(msg.to_cloud_vec())
                .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned()),
        }
    }
}

/// A seq as SQLite returns it (always positive for an AUTOINCREMENT key).
fn seq_from_sql(seq: i64) -> Result<u64, StoreError> {
    u64::try_from(seq).map_err(|_| StoreError::Commit(format!("negative outbox seq {seq}")))
}

/// A seq as an SQL parameter; seqs beyond SQLite's range compare as its maximum.
fn seq_to_sql(seq: u64) -> i64 {
    i64::try_from(seq).unwrap_or(i64::MAX)
}

impl Outbox {
    /// Opens the outbox on an already migrated store ([`COMPONENT`], [`MIGRATIONS`]), counting
    /// the rows left from before a restart. At most `cap` messages are held at once (0 refuses
    /// every push); relayed messages may take all of it.
    pub async fn open(store: Store, cap: usize) -> Result<Outbox, OutboxError> {
        Outbox::open_with(
            store,
            OutboxLimits {
                cap,
                relayed_cap: cap,
            },
        )
        .await
    }

    /// Like [`Outbox::open`], with a share of its own for relayed messages.
    pub async fn open_with(store: Store, limits: OutboxLimits) -> Result<Outbox, OutboxError> {
        let counts = store.read(table::count).await?;
        Ok(Outbox {
            shared: Arc::new(Shared {
                store,
                cap: limits.cap,
                relayed_cap: limits.relayed_cap.min(limits.cap),
                queued: AtomicUsize::new(counts.all),
                relayed: AtomicUsize::new(counts.relayed),
                refused: AtomicU64::new(0),
                relayed_refused: AtomicU64::new(0),
                pushed: AtomicU64::new(0),
                removed: AtomicU64::new(0),
                added: tokio::sync::Notify::new(),
            }),
        })
    }

    /// Stores `msg` and waits until it is committed; returns its seq. Refused with
    /// [`OutboxError::Full`] (and not stored) when `cap` messages are queued.
    pub async fn push(&self, msg: &Message) -> Result<u64, OutboxError> {
        self.submit(msg).await?.await
    }

    /// Like [`Outbox::push`] but returns as soon as the row is queued for the store, so a caller
    /// can pipeline many pushes into shared commits; the returned future resolves after the
    /// commit. Rows get their seqs in the order they are submitted.
    pub async fn submit(&self, msg: &Message) -> Result<PendingPush, OutboxError> {
        self.submit_as(msg, false).await
    }

    /// Like [`Outbox::submit`] for a message relayed for a local client (an MQTT upload): it
    /// also takes a place in the relayed share, and is refused with
    /// [`OutboxError::RelayedFull`] when that share is taken.
    pub async fn submit_relayed(&self, msg: &Message) -> Result<PendingPush, OutboxError> {
        self.submit_as(msg, true).await
    }

    async fn submit_as(&self, msg: &Message, relayed: bool) -> Result<PendingPush, OutboxError> {
        let shared = &self.shared;
        shared.reserve(1, relayed)?;
        let row = StagedRow::of(msg);
        let now = crate::time::now_ms();
        let queued = shared
            .store
            .submit(move |conn| {
                table::insert(conn, &row.msg_id, &row.resource, &row.body, now, relayed)
            })
            .await;
        match queued {
            Ok(write) => Ok(PendingPush {
                write: Some(write),
                shared: shared.clone(),
                relayed,
            }),
            Err(e) => {
                shared.release(1, usize::from(relayed));
                Err(e.into())
            }
        }
    }

    /// Serialises `msgs` for the caller's own write and reserves their places: the caller
    /// inserts the [`StagedRows`] in the transaction that stores the change the messages
    /// report, and marks the [`Reservation`] committed after that commit. Refused whole with
    /// [`OutboxError::Full`] when they do not all fit under the cap.
    pub fn stage(&self, msgs: &[Message]) -> Result<(StagedRows, Reservation), OutboxError> {
        let shared = &self.shared;
        let n = msgs.len();
        shared.reserve(n, false)?;
        let rows = StagedRows {
            rows: msgs.iter().map(StagedRow::of).collect(),
            queued_ms: crate::time::now_ms(),
        };
        let reservation = Reservation {
            shared: shared.clone(),
            n,
        };
        Ok((rows, reservation))
    }

    /// Resolves once rows have been committed since the last call returned (a permit is kept,
    /// so a commit between two calls is never missed). Meant for the one reader, the link.
    pub async fn changed(&self) {
        self.shared.added.notified().await;
    }

    /// Up to `limit` queued messages with seq > `after` (all when `None`), oldest first, as
    /// committed so far.
    ///
    /// A row that cannot be read back (its body is not a message, or not the message its
    /// `msg_id` names) ends the list: the rows before it are returned, and when it is the first
    /// one the call fails with [`OutboxError::Corrupt`] naming its seq, so the caller can drop
    /// it and go on.
    pub async fn oldest(
        &self,
        after: Option<u64>,
        limit: usize,
    ) -> Result<Vec<(u64, Message)>, OutboxError> {
        let after = after.map(seq_to_sql).unwrap_or(-1);
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let rows = self
            .shared
            .store
            .read(move |conn| table::oldest(conn, after, limit))
            .await?;
        let mut out = Vec::with_capacity(rows.len());
        for row in rows {
            match decode(row) {
                Ok(item) => out.push(item),
                Err(corrupt) if out.is_empty() => return Err(corrupt),
                Err(_) => break,
            }
        }
        Ok(out)
    }

    /// Removes every message with seq <= `seq` (the link sends in order and the cloud confirms
    /// in order); returns how many were removed.
    pub async fn remove_upto(&self, seq: u64) -> Result<usize, OutboxError> {
        let seq = seq_to_sql(seq);
        let removed = self
            .shared
            .store
            .write(move |conn| table::delete_upto(conn, seq))
            .await?;
        self.removed_rows(removed);
        Ok(removed.all)
    }

    /// Removes the message `seq`; true when it was queued.
    pub async fn remove(&self, seq: u64) -> Result<bool, OutboxError> {
        let seq = seq_to_sql(seq);
        let removed = self
            .shared
            .store
            .write(move |conn| table::delete(conn, seq))
            .await?;
        self.removed_rows(removed);
        Ok(removed.all > 0)
    }

    fn removed_rows(&self, removed: table::Counts) {
        self.shared.release(removed.all, removed.relayed);
        self.shared
            .removed
            .fetch_add(removed.all as u64, Ordering::Relaxed);
    }

    /// Messages queued, counting pushes not yet committed.
    pub fn len(&self) -> usize {
        self.shared.queued.load(Ordering::Acquire)
    }

    /// Whether nothing is queued.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The most messages held at once.
    pub fn cap(&self) -> usize {
        self.shared.cap
    }

    /// Relayed messages queued, counting pushes not yet committed.
    pub fn relayed_len(&self) -> usize {
        self.shared.relayed.load(Ordering::Acquire)
    }
}

/// Checks a stored row and turns it back into its message.
fn decode(row: table::RawRow) -> Result<(u64, Message), OutboxError> {
    let seq = u64::try_from(row.seq).map_err(|_| OutboxError::Corrupt {
        seq: 0,
        reason: format!("negative seq {}", row.seq),
    })?;
    let corrupt = |reason: String| OutboxError::Corrupt { seq, reason };
    let body = row
        .body
        .ok_or_else(|| corrupt("body is not text".to_owned()))?;
    let msg = Message::from_slice(&body).map_err(|e| corrupt(e.to_string()))?;
    let msg_id = row.msg_id.unwrap_or_default();
    if msg.header.id != msg_id {
        return Err(corrupt(format!(
            "body holds msg_id {:?}, row says {msg_id:?}",
            msg.header.id
        )));
    }
    Ok((seq, msg))
}

impl MetricsSource for Outbox {
    /// Writes the queue's size, cap and traffic.
    fn write_metrics(&self, w: &mut PromWriter) {
        let s = &self.shared;
        let gauges = [
            (
                "wedge_edgehub_outbox_messages",
                "Cloud-bound messages queued in the durable outbox.",
                s.queued.load(Ordering::Relaxed) as f64,
            ),
            (
                "wedge_edgehub_outbox_cap",
                "Most messages the outbox holds before refusing more.",
                s.cap as f64,
            ),
            (
                "wedge_edgehub_outbox_relayed_messages",
                "Messages relayed for local clients (MQTT uploads) queued in the outbox.",
                s.relayed.load(Ordering::Relaxed) as f64,
            ),
            (
                "wedge_edgehub_outbox_relayed_cap",
                "Most relayed messages the outbox holds before refusing more of them.",
                s.relayed_cap as f64,
            ),
        ];
        for (name, help, value) in gauges {
            w.family(name, help, "gauge");
            w.sample(name, &[], value);
        }
        let counters = [
            (
                "wedge_edgehub_outbox_refused_total",
                "Messages refused because the outbox was full.",
                &s.refused,
            ),
            (
                "wedge_edgehub_outbox_relayed_refused_total",
                "Relayed messages refused because their share of the outbox was full.",
                &s.relayed_refused,
            ),
            (
                "wedge_edgehub_outbox_pushed_total",
                "Messages committed to the outbox.",
                &s.pushed,
            ),
            (
                "wedge_edgehub_outbox_removed_total",
                "Messages removed from the outbox once the cloud had them.",
                &s.removed,
            ),
        ];
        for (name, help, value) in counters {
            w.family(name, help, "counter");
            w.sample(name, &[], value.load(Ordering::Relaxed) as f64);
        }
    }
}
