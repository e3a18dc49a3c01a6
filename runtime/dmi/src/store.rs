//! The `dmi_mapper` table: registered mappers survive a restart of the node, as in edgecore
//! (which keeps them in its meta table), so changes made while a mapper runs on reach it even
//! if the node restarted since it registered.

use rusqlite::Connection;
use wedge_core::StoreError;

use crate::pb;

/// Schema owner name in `wedge_schema`.
pub const COMPONENT: &str = "dmi";

/// The table's migrations.
pub const MIGRATIONS: &[&str] = &["CREATE TABLE dmi_mapper (
        protocol TEXT PRIMARY KEY NOT NULL,
        name TEXT NOT NULL,
        version TEXT NOT NULL,
        api_version TEXT NOT NULL,
        address BLOB NOT NULL,
        state TEXT NOT NULL
    )"];

/// Stores (or replaces) the mapper of `info.protocol`.
pub(crate) fn put(conn: &Connection, info: &pb::MapperInfo) -> Result<(), StoreError> {
    conn.execute(
        "INSERT OR REPLACE INTO dmi_mapper (protocol, name, version, api_version, address, state)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
        rusqlite::params![
            info.protocol,
            info.name,
            info.version,
            info.api_version,
            info.address,
            info.state
        ],
    )?;
    Ok(())
}

/// Forgets the mapper of `protocol`.
pub(crate) fn remove(conn: &Connection, protocol: &str) -> Result<(), StoreError> {
    conn.execute("DELETE FROM dmi_mapper WHERE protocol = ?1", [protocol])?;
    Ok(())
}

/// Every stored mapper.
pub(crate) fn all(conn: &Connection) -> Result<Vec<pb::MapperInfo>, StoreError> {
    let mut statement = conn.prepare(
        "SELECT protocol, name, version, api_version, address, state FROM dmi_mapper ORDER BY protocol",
    )?;
    let rows = statement.query_map([], |r| {
        Ok(pb::MapperInfo {
            protocol: r.get(0)?,
            name: r.get(1)?,
            version: r.get(2)?,
            api_version: r.get(3)?,
            address: r.get(4)?,
            state: r.get(5)?,
        })
    })?;
    Ok(rows.collect::<Result<Vec<_>, _>>()?)
}
