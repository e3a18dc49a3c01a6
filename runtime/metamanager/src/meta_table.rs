//! The `meta` table: KubeEdge's metadata store, one row per resource.
//!
//! Columns are edgecore's (`key`, `type`, `value`), so tools that read an edgecore database read
//! ours. `key` is the edge resource (`default/pod/nginx`), `type` its resource type, `value` the
//! object's JSON text.

use rusqlite::{Connection, OptionalExtension};
use wedge_core::StoreError;

/// Migrations of the metamanager's schema, in order.
pub const MIGRATIONS: &[&str] = &[
    // v1: KubeEdge's meta table (v1.22 column sizes), plus an index for queries by type.
    "CREATE TABLE IF NOT EXISTS meta (
        key VARCHAR(256) PRIMARY KEY NOT NULL,
        type VARCHAR(32) NOT NULL DEFAULT '',
        value TEXT
    );
    CREATE INDEX IF NOT EXISTS meta_type ON meta (type);",
];

/// Inserts or replaces one row.
pub fn upsert(conn: &Connection, key: &str, kind: &str, value: &str) -> Result<(), StoreError> {
    conn.prepare_cached("INSERT OR REPLACE INTO meta (key, type, value) VALUES (?1, ?2, ?3)")?
        .execute([key, kind, value])?;
    Ok(())
}

/// Deletes a row; returns whether it existed.
pub fn delete(conn: &Connection, key: &str) -> Result<bool, StoreError> {
    Ok(conn
        .prepare_cached("DELETE FROM meta WHERE key = ?1")?
        .execute([key])?
        > 0)
}

/// The value stored under `key`.
pub fn get(conn: &Connection, key: &str) -> Result<Option<String>, StoreError> {
    Ok(conn
        .prepare_cached("SELECT value FROM meta WHERE key = ?1")?
        .query_row([key], |r| r.get::<_, Option<String>>(0))
        .optional()?
        .flatten())
}

/// Every value of a type, in key order.
pub fn values_of_type(conn: &Connection, kind: &str) -> Result<Vec<String>, StoreError> {
    let mut stmt = conn.prepare_cached("SELECT value FROM meta WHERE type = ?1 ORDER BY key")?;
    let rows = stmt.query_map([kind], |r| r.get::<_, Option<String>>(0))?;
    let mut values = Vec::new();
    for row in rows {
        values.push(row?.unwrap_or_default());
    }
    Ok(values)
}
