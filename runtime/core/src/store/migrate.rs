//! Per-component schema versions.
//!
//! Each module owns its tables and ships an ordered list of SQL scripts. The version applied for
//! each component is kept in `wedge_schema`, so modules evolve their schemas independently and a
//! module that is disabled never creates its tables (as v1.23 edgecore does).

use rusqlite::{Connection, OptionalExtension};

use super::error::StoreError;

pub(crate) fn apply(
    conn: &Connection,
    component: &str,
    migrations: &[&str],
) -> Result<(), StoreError> {
    conn.execute_batch(
        "CREATE TABLE IF NOT EXISTS wedge_schema (
            component TEXT PRIMARY KEY NOT NULL,
            version INTEGER NOT NULL
        )",
    )?;
    let current: usize = conn
        .query_row(
            "SELECT version FROM wedge_schema WHERE component = ?1",
            [component],
            |r| r.get::<_, i64>(0),
        )
        .optional()?
        .map(|v| v.max(0) as usize)
        .unwrap_or(0);
    if current > migrations.len() {
        return Err(StoreError::Migration {
            component: component.to_owned(),
            version: current,
            source: rusqlite::Error::InvalidParameterName(format!(
                "the database has {component} schema v{current}, newer than this build knows \
                 (v{}); refusing to run an older wedge on it",
                migrations.len()
            )),
        });
    }
    for (index, script) in migrations.iter().enumerate().skip(current) {
        let version = index + 1;
        conn.execute_batch(script)
            .map_err(|source| StoreError::Migration {
                component: component.to_owned(),
                version,
                source,
            })?;
        conn.execute(
            "INSERT INTO wedge_schema (component, version) VALUES (?1, ?2)
             ON CONFLICT(component) DO UPDATE SET version = excluded.version",
            rusqlite::params![component, version as i64],
        )?;
    }
    Ok(())
}
