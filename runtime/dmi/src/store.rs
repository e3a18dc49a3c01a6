//! The `dmi_mapper` table: registered mappers survive a restart of the node, as in edgecore
//! (which keeps them in its meta table), so changes made while a mapper runs on reach it even
//! if the node restarted since it registered. Unlike edgecore, each row also records the
//! kernel's credentials of the process that registered (uid, gid, pid), so a remembered mapper
//! is re-verified before it is trusted again (see `owner.rs`).

use rusqlite::Connection;
use wedge_core::StoreError;

use crate::pb;
use crate::peer::Peer;

/// Schema owner name in `wedge_schema`.
pub const COMPONENT: &str = "dmi";

/// The table's migrations.
pub const MIGRATIONS: &[&str] = &[
    "CREATE TABLE dmi_mapper (
        protocol TEXT PRIMARY KEY NOT NULL,
        name TEXT NOT NULL,
        version TEXT NOT NULL,
        api_version TEXT NOT NULL,
        address BLOB NOT NULL,
        state TEXT NOT NULL
    )",
    // The registering process (NULL in rows from before: those are re-verified by who serves
    // their socket, or forgotten).
    "ALTER TABLE dmi_mapper ADD COLUMN owner_uid INTEGER;
     ALTER TABLE dmi_mapper ADD COLUMN owner_gid INTEGER;
     ALTER TABLE dmi_mapper ADD COLUMN owner_pid INTEGER;",
];

/// Stores (or replaces) the mapper of `info.protocol`, registered by `owner`.
pub(crate) fn put(
    conn: &Connection,
    info: &pb::MapperInfo,
    owner: &Peer,
) -> Result<(), StoreError> {
    conn.execute(
        "INSERT OR REPLACE INTO dmi_mapper
            (protocol, name, version, api_version, address, state, owner_uid, owner_gid, owner_pid)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
        rusqlite::params![
            info.protocol,
            info.name,
            info.version,
            info.api_version,
            info.address,
            info.state,
            owner.uid,
            owner.gid,
            owner.pid
        ],
    )?;
    Ok(())
}

/// Forgets the mapper of `protocol`.
pub(crate) fn remove(conn: &Connection, protocol: &str) -> Result<(), StoreError> {
    conn.execute("DELETE FROM dmi_mapper WHERE protocol = ?1", [protocol])?;
    Ok(())
}

/// Every stored mapper, with its owner when recorded.
pub(crate) fn all(conn: &Connection) -> Result<Vec<(pb::MapperInfo, Option<Peer>)>, StoreError> {
    let mut statement = conn.prepare(
        "SELECT protocol, name, version, api_version, address, state, owner_uid, owner_gid, owner_pid
         FROM dmi_mapper ORDER BY protocol",
    )?;
    let rows = statement.query_map([], |r| {
        let info = pb::MapperInfo {
            protocol: r.get(0)?,
            name: r.get(1)?,
            version: r.get(2)?,
            api_version: r.get(3)?,
            address: r.get(4)?,
            state: r.get(5)?,
        };
        let uid: Option<u32> = r.get(6)?;
        let gid: Option<u32> = r.get(7)?;
        let pid: Option<i32> = r.get(8)?;
        let owner = uid.map(|uid| Peer {
            uid,
            gid: gid.unwrap_or(uid),
            pid,
        });
        Ok((info, owner))
    })?;
    Ok(rows.collect::<Result<Vec<_>, _>>()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn db() -> Connection {
        let conn = Connection::open_in_memory().expect("an in-memory database");
        conn.execute_batch(MIGRATIONS[0]).expect("v1");
        conn
    }

    fn info(protocol: &str) -> pb::MapperInfo {
        pb::MapperInfo {
            name: format!("{protocol}-mapper"),
            protocol: protocol.into(),
            address: b"/tmp/m.sock".to_vec(),
            ..Default::default()
        }
    }

    #[test]
    fn rows_from_before_owner_records_read_without_an_owner() {
        let conn = db();
        conn.execute(
            "INSERT INTO dmi_mapper (protocol, name, version, api_version, address, state)
             VALUES ('old', 'old-mapper', '', '', x'2f', '')",
            [],
        )
        .expect("a v1 row");
        conn.execute_batch(MIGRATIONS[1]).expect("v2");
        let owner = Peer {
            uid: 1000,
            gid: 100,
            pid: Some(42),
        };
        put(&conn, &info("new"), &owner).expect("stored");
        let rows = all(&conn).expect("read");
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[0].0.protocol, "new");
        assert_eq!(rows[0].1, Some(owner));
        assert_eq!(rows[1].0.protocol, "old");
        assert_eq!(rows[1].1, None);
    }
}
