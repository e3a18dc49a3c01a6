//! The `device_object` table: Device and DeviceModel objects from the cloud, kept as they
//! came, so the definitions survive a restart. (Local YAML definitions are read again from
//! their directory instead.)

use rusqlite::{Connection, params};
use wedge_core::StoreError;

use crate::inbound::DefinitionKind;

fn kind_name(kind: DefinitionKind) -> &'static str {
    match kind {
        DefinitionKind::Device => "device",
        DefinitionKind::DeviceModel => "devicemodel",
    }
}

/// Stores (or replaces) object `id` of `kind` with its JSON `body`.
pub fn put(
    conn: &Connection,
    kind: DefinitionKind,
    id: &str,
    body: &str,
) -> Result<(), StoreError> {
    conn.execute(
        "INSERT OR REPLACE INTO device_object (kind, id, body) VALUES (?1, ?2, ?3)",
        params![kind_name(kind), id, body],
    )?;
    Ok(())
}

/// Forgets object `id` of `kind`.
pub fn delete(conn: &Connection, kind: DefinitionKind, id: &str) -> Result<(), StoreError> {
    conn.execute(
        "DELETE FROM device_object WHERE kind = ?1 AND id = ?2",
        params![kind_name(kind), id],
    )?;
    Ok(())
}

/// Every stored object as `(resource, body)`, models first, where resource is metamanager's
/// `<ns>/<kind>/<name>` (what [`crate::definition::object_from_message`] reads).
pub fn all(conn: &Connection) -> Result<Vec<(String, String)>, StoreError> {
    let mut statement =
        conn.prepare("SELECT kind, id, body FROM device_object ORDER BY kind = 'device', id")?;
    let rows = statement.query_map([], |r| {
        let kind: String = r.get(0)?;
        let id: String = r.get(1)?;
        let body: String = r.get(2)?;
        let resource = match id.split_once('/') {
            Some((namespace, name)) => format!("{namespace}/{kind}/{name}"),
            None => format!("default/{kind}/{id}"),
        };
        Ok((resource, body))
    })?;
    Ok(rows.collect::<Result<Vec<_>, _>>()?)
}
