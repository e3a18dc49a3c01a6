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
) -> Result<i64, StoreError> {
    conn.prepare_cached(
        "INSERT INTO outbox (msg_id, resource, body, queued_ms) VALUES (?1, ?2, ?3, ?4)",
    )?
    .execute(rusqlite::params![msg_id, resource, body, queued_ms])?;
    Ok(conn.last_insert_rowid())
}

/// Number of rows.
pub(crate) fn count(conn: &Connection) -> Result<usize, StoreError> {
    let n: i64 = conn
        .prepare_cached("SELECT count(*) FROM outbox")?
        .query_row([], |r| r.get(0))?;
    Ok(usize::try_from(n).unwrap_or(0))
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

/// Deletes every row with seq <= `seq`; returns how many.
pub(crate) fn delete_upto(conn: &Connection, seq: i64) -> Result<usize, StoreError> {
    Ok(conn
        .prepare_cached("DELETE FROM outbox WHERE seq <= ?1")?
        .execute([seq])?)
}

/// Deletes the row `seq`; true when it was there.
pub(crate) fn delete(conn: &Connection, seq: i64) -> Result<bool, StoreError> {
    Ok(conn
        .prepare_cached("DELETE FROM outbox WHERE seq = ?1")?
        .execute([seq])?
        > 0)
}
