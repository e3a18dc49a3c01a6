//! The `outbox` table: cloud-bound messages, in the order they were queued, until the cloud has
//! them. Only SQL lives here; counting and the cap are the [`super::Outbox`]'s job.

use crate::StoreError;
use rusqlite::Connection;
use rusqlite::types::ValueRef;

/// Migrations of the outbox's schema, in order.
pub const MIGRATIONS: &[&str] = &[
    // v1: one row per queued message. AUTOINCREMENT so a seq is never reused, even after the
    // newest rows were removed: a seq the link holds then always names the same message.
    "CREATE TABLE IF NOT EXISTS outbox (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        msg_id TEXT NOT NULL,
        resource TEXT NOT NULL,
        body TEXT NOT NULL,
        queued_ms INTEGER NOT NULL
    );
    CREATE INDEX IF NOT EXISTS outbox_msg_id ON outbox (msg_id);",
    // v2: whether a row was relayed for a local client (an MQTT upload), so the quota those
    // rows may take is counted again after a restart.
    "ALTER TABLE outbox ADD COLUMN relayed INTEGER NOT NULL DEFAULT 0;",
];

/// One stored row as read back, before its body is checked.
pub(crate) struct RawRow {
    /// The row's seq as SQLite holds it (checked for sign by the caller).
    pub(crate) seq: i64,
    /// The `msg_id` column.
    pub(crate) msg_id: Option<String>,
    /// The `body` column's bytes, `None` when it is not text or blob.
    pub(crate) body: Option<Vec<u8>>,
}

/// Appends a row; returns its seq.
pub(crate) fn insert(
    conn: &Connection,
    msg_id: &str,
    resource: &str,
    body: &str,
    queued_ms: i64,
    relayed: bool,
) -> Result<i64, StoreError> {
    conn.prepare_cached(
        "INSERT INTO outbox (msg_id, resource, body, queued_ms, relayed) VALUES (?1, ?2, ?3, ?4, ?5)",
    )?
    .execute(rusqlite::params![msg_id, resource, body, queued_ms, relayed])?;
    Ok(conn.last_insert_rowid())
}

/// Rows, all and relayed ones, with seq <= `upto`.
pub(crate) fn count_upto(conn: &Connection, upto: i64) -> Result<Counts, StoreError> {
    let (all, relayed): (i64, i64) = conn
        .prepare_cached(
            "SELECT count(*), coalesce(sum(relayed != 0), 0) FROM outbox WHERE seq <= ?1",
        )?
        .query_row([upto], |r| Ok((r.get(0)?, r.get(1)?)))?;
    Ok(Counts {
        all: usize::try_from(all).unwrap_or(0),
        relayed: usize::try_from(relayed).unwrap_or(0),
    })
}

/// Numbers of rows: all of them, and those relayed for local clients.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Counts {
    /// Every row.
    pub(crate) all: usize,
    /// Rows with `relayed` set.
    pub(crate) relayed: usize,
}

/// Number of rows, all and relayed.
pub(crate) fn count(conn: &Connection) -> Result<Counts, StoreError> {
    count_upto(conn, i64::MAX)
}

/// Up to `limit` rows with seq > `after`, in seq order. Columns are read leniently (a damaged
/// row must come back to be reported, not fail the whole read).
pub(crate) fn oldest(conn: &Connection, after: i64, limit: i64) -> Result<Vec<RawRow>, StoreError> {
    let mut stmt = conn.prepare_cached(
        "SELECT seq, msg_id, body FROM outbox WHERE seq > ?1 ORDER BY seq LIMIT ?2",
    )?;
    let rows = stmt.query_map([after, limit], |r| {
        let text = |v: ValueRef<'_>| match v {
            ValueRef::Text(b) | ValueRef::Blob(b) => Some(b.to_vec()),
            _ => None,
        };
        Ok(RawRow {
            seq: r.get(0)?,
            msg_id: text(r.get_ref(1)?).map(|b| String::from_utf8_lossy(&b).into_owned()),
            body: text(r.get_ref(2)?),
        })
    })?;
    let mut out = Vec::new();
    for row in rows {
        out.push(row?);
    }
    Ok(out)
}

/// Deletes every row with seq <= `seq`; returns how many, and how many of them were relayed.
pub(crate) fn delete_upto(conn: &Connection, seq: i64) -> Result<Counts, StoreError> {
    let counts = count_upto(conn, seq)?;
    conn.prepare_cached("DELETE FROM outbox WHERE seq <= ?1")?
        .execute([seq])?;
    Ok(counts)
}

/// Deletes the row `seq`; what it removed (nothing when it was not there).
pub(crate) fn delete(conn: &Connection, seq: i64) -> Result<Counts, StoreError> {
    let relayed: Option<i64> = conn
        .prepare_cached("DELETE FROM outbox WHERE seq = ?1 RETURNING relayed")?
        .query_row([seq], |r| r.get(0))
        .map(Some)
        .or_else(|e| match e {
            rusqlite::Error::QueryReturnedNoRows => Ok(None),
            e => Err(e),
        })?;
    Ok(match relayed {
        None => Counts::default(),
        Some(r) => Counts {
            all: 1,
            relayed: usize::from(r != 0),
        },
    })
}
