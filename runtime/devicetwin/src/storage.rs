//! The `device`, `device_attr` and `device_twin` tables (KubeEdge's columns) and the device
//! cache's load and write-back.
//!
//! Absent values are stored as `""`, as edgecore stores them; `*_meta` and `*_version` columns
//! hold JSON. A side of a twin exists when its `*_meta` column is not empty (every written side
//! carries a timestamp), so an empty value stays distinguishable from no value.

use rusqlite::{Connection, OptionalExtension, params};
use wedge_core::StoreError;

use crate::device::{DeviceRecord, Devices, StoredAttr};
use crate::effects::RowChange;
use crate::mapper_update::StoredTwin;
use crate::wire::{TwinValue, ValueMetadata, Version};

/// The component name the migrations are recorded under.
pub const COMPONENT: &str = "devicetwin";

/// Migrations of devicetwin's schema, in order.
pub const MIGRATIONS: &[&str] = &[
    // v1: KubeEdge's three tables. The unique (deviceid, name) indexes are Wedge's: they make
    // a twin or attribute write one upsert, and they hold no data edgecore would miss.
    "CREATE TABLE IF NOT EXISTS device (
        id VARCHAR(64) PRIMARY KEY NOT NULL,
        name VARCHAR(32) NOT NULL DEFAULT '',
        description VARCHAR(256) NOT NULL DEFAULT '',
        state VARCHAR(32) NOT NULL DEFAULT '',
        last_online VARCHAR(32) NOT NULL DEFAULT ''
    );
    CREATE TABLE IF NOT EXISTS device_attr (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        deviceid VARCHAR(64) NOT NULL,
        name VARCHAR(32) NOT NULL,
        description VARCHAR(256) NOT NULL DEFAULT '',
        value VARCHAR(256) NOT NULL DEFAULT '',
        optional BOOLEAN NOT NULL DEFAULT 0,
        attr_type VARCHAR(32) NOT NULL DEFAULT '',
        metadata VARCHAR(256) NOT NULL DEFAULT ''
    );
    CREATE UNIQUE INDEX IF NOT EXISTS device_attr_key ON device_attr (deviceid, name);
    CREATE TABLE IF NOT EXISTS device_twin (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        deviceid VARCHAR(64) NOT NULL,
        name VARCHAR(32) NOT NULL,
        description VARCHAR(256) NOT NULL DEFAULT '',
        expected VARCHAR(256) NOT NULL DEFAULT '',
        actual VARCHAR(256) NOT NULL DEFAULT '',
        expected_meta VARCHAR(256) NOT NULL DEFAULT '',
        actual_meta VARCHAR(256) NOT NULL DEFAULT '',
        expected_version VARCHAR(256) NOT NULL DEFAULT '',
        actual_version VARCHAR(256) NOT NULL DEFAULT '',
        optional BOOLEAN NOT NULL DEFAULT 0,
        attr_type VARCHAR(32) NOT NULL DEFAULT '',
        metadata VARCHAR(256) NOT NULL DEFAULT ''
    );
    CREATE UNIQUE INDEX IF NOT EXISTS device_twin_key ON device_twin (deviceid, name);",
    // v2: the Device and DeviceModel objects the cloud sent, so a restarted node still knows
    // its devices' definitions (CloudCore does not send them again): see `objects.rs`.
    "CREATE TABLE IF NOT EXISTS device_object (
        kind TEXT NOT NULL,
        id TEXT NOT NULL,
        body TEXT NOT NULL,
        PRIMARY KEY (kind, id)
    );",
];

/// `metadata` column: KubeEdge keeps the metadata map minus `type`; Wedge's twins carry no
/// other metadata, so it is the empty object.
const EMPTY_METADATA: &str = "{}";

/// Reads every device with its attributes and twins.
pub fn load_all(conn: &Connection) -> Result<Devices, StoreError> {
    let mut devices = Devices::new();
    let mut stmt = conn.prepare("SELECT id, name, description, state, last_online FROM device")?;
    let rows = stmt.query_map([], |r| {
        Ok(DeviceRecord {
            id: r.get(0)?,
            name: r.get(1)?,
            description: r.get(2)?,
            state: r.get(3)?,
            last_online: r.get(4)?,
            ..DeviceRecord::default()
        })
    })?;
    for row in rows {
        let device = row?;
        devices.insert(device.id.clone(), device);
    }
    let mut stmt = conn.prepare(
        "SELECT deviceid, name, description, value, optional, attr_type FROM device_attr",
    )?;
    let rows = stmt.query_map([], |r| {
        Ok((
            r.get::<_, String>(0)?,
            r.get::<_, String>(1)?,
            StoredAttr {
                description: r.get(2)?,
                value: r.get(3)?,
                optional: r.get(4)?,
                attr_type: r.get(5)?,
            },
        ))
    })?;
    for row in rows {
        let (device, name, attr) = row?;
        if let Some(d) = devices.get_mut(&device) {
            d.attributes.insert(name, attr);
        }
    }
    let mut stmt = conn.prepare(
        "SELECT deviceid, name, expected, actual, expected_meta, actual_meta,
                expected_version, actual_version, optional, attr_type FROM device_twin",
    )?;
    let rows = stmt.query_map([], |r| {
        let side = |value: String, meta: String| -> Option<TwinValue> {
            (!meta.is_empty()).then(|| TwinValue {
                value: Some(value),
                metadata: serde_json::from_str::<ValueMetadata>(&meta).ok(),
            })
        };
        let version = |text: String| serde_json::from_str::<Version>(&text).ok();
        Ok((
            r.get::<_, String>(0)?,
            r.get::<_, String>(1)?,
            StoredTwin {
                expected: side(r.get(2)?, r.get(4)?),
                actual: side(r.get(3)?, r.get(5)?),
                expected_version: version(r.get(6)?),
                actual_version: version(r.get(7)?),
                optional: r.get(8)?,
                attr_type: r.get(9)?,
            },
        ))
    })?;
    for row in rows {
        let (device, key, twin) = row?;
        if let Some(d) = devices.get_mut(&device) {
            d.twins.insert(key, twin);
        }
    }
    Ok(devices)
}

/// Reads one device (after a failed write, to resynchronise the cache).
pub fn load_device(conn: &Connection, id: &str) -> Result<Option<DeviceRecord>, StoreError> {
    let exists = conn
        .prepare_cached("SELECT 1 FROM device WHERE id = ?1")?
        .query_row([id], |_| Ok(()))
        .optional()?;
    if exists.is_none() {
        return Ok(None);
    }
    // Devices are few and small; reading all keeps one code path for decoding rows.
    Ok(load_all(conn)?.remove(id))
}

/// Applies `changes` in order on `conn` (the caller's transaction makes them atomic).
pub fn apply(conn: &Connection, changes: &[RowChange]) -> Result<(), StoreError> {
    for change in changes {
        match change {
            RowChange::PutDevice(device) => put_device(conn, device)?,
            RowChange::DeleteDevice { device } => delete_device(conn, device)?,
            RowChange::PutState {
                device,
                state,
                last_online,
            } => {
                conn.prepare_cached(
                    "UPDATE device SET state = ?2, last_online = ?3 WHERE id = ?1",
                )?
                .execute(params![device, state, last_online])?;
            }
            RowChange::PutTwin { device, key, twin } => put_twin(conn, device, key, twin)?,
            RowChange::DeleteTwin { device, key } => {
                conn.prepare_cached("DELETE FROM device_twin WHERE deviceid = ?1 AND name = ?2")?
                    .execute(params![device, key])?;
            }
            RowChange::PutAttr { device, name, attr } => put_attr(conn, device, name, attr)?,
            RowChange::DeleteAttr { device, name } => {
                conn.prepare_cached("DELETE FROM device_attr WHERE deviceid = ?1 AND name = ?2")?
                    .execute(params![device, name])?;
            }
        }
    }
    Ok(())
}

fn put_device(conn: &Connection, device: &DeviceRecord) -> Result<(), StoreError> {
    delete_device(conn, &device.id)?;
    conn.prepare_cached(
        "INSERT INTO device (id, name, description, state, last_online) VALUES (?1, ?2, ?3, ?4, ?5)",
    )?
    .execute(params![
        device.id,
        device.name,
        device.description,
        device.state,
        device.last_online
    ])?;
    for (name, attr) in &device.attributes {
        put_attr(conn, &device.id, name, attr)?;
    }
    for (key, twin) in &device.twins {
        put_twin(conn, &device.id, key, twin)?;
    }
    Ok(())
}

fn delete_device(conn: &Connection, id: &str) -> Result<(), StoreError> {
    for sql in [
        "DELETE FROM device_twin WHERE deviceid = ?1",
        "DELETE FROM device_attr WHERE deviceid = ?1",
        "DELETE FROM device WHERE id = ?1",
    ] {
        conn.prepare_cached(sql)?.execute([id])?;
    }
    Ok(())
}

fn put_attr(
    conn: &Connection,
    device: &str,
    name: &str,
    attr: &StoredAttr,
) -> Result<(), StoreError> {
    conn.prepare_cached(
        "INSERT INTO device_attr (deviceid, name, description, value, optional, attr_type, metadata)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)
         ON CONFLICT (deviceid, name) DO UPDATE SET description = excluded.description,
           value = excluded.value, optional = excluded.optional, attr_type = excluded.attr_type,
           metadata = excluded.metadata",
    )?
    .execute(params![
        device,
        name,
        attr.description,
        attr.value,
        attr.optional,
        attr.attr_type,
        EMPTY_METADATA
    ])?;
    Ok(())
}

/// `(value, meta)` columns of one side.
fn side_columns(side: &Option<TwinValue>) -> (String, String) {
    match side {
        None => (String::new(), String::new()),
        Some(v) => (
            v.value.clone().unwrap_or_default(),
            serde_json::to_string(&v.metadata.clone().unwrap_or_default()).unwrap_or_default(),
        ),
    }
}

fn version_column(version: &Option<Version>) -> String {
    version
        .map(|v| serde_json::to_string(&v).unwrap_or_default())
        .unwrap_or_default()
}

fn put_twin(
    conn: &Connection,
    device: &str,
    key: &str,
    twin: &StoredTwin,
) -> Result<(), StoreError> {
    let (expected, expected_meta) = side_columns(&twin.expected);
    let (actual, actual_meta) = side_columns(&twin.actual);
    conn.prepare_cached(
        "INSERT INTO device_twin (deviceid, name, expected, actual, expected_meta, actual_meta,
           expected_version, actual_version, optional, attr_type, metadata)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)
         ON CONFLICT (deviceid, name) DO UPDATE SET expected = excluded.expected,
           actual = excluded.actual, expected_meta = excluded.expected_meta,
           actual_meta = excluded.actual_meta, expected_version = excluded.expected_version,
           actual_version = excluded.actual_version, optional = excluded.optional,
           attr_type = excluded.attr_type, metadata = excluded.metadata",
    )?
    .execute(params![
        device,
        key,
        expected,
        actual,
        expected_meta,
        actual_meta,
        version_column(&twin.expected_version),
        version_column(&twin.actual_version),
        twin.optional,
        twin.attr_type,
        EMPTY_METADATA
    ])?;
    Ok(())
}

#[cfg(test)]
mod tests;
