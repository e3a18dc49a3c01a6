//! The `sub_topics` table: topics subscribed through the bus (`subscribe` messages), kept so a
//! restarted node subscribes to them again. Same table and column as edgecore's.

use rusqlite::Connection;
use wedge_core::{Store, StoreError};

/// The component name the migrations are recorded under.
pub const COMPONENT: &str = "eventbus";

/// Migrations of the eventbus's schema, in order.
pub const MIGRATIONS: &[&str] = &[
    // v1: KubeEdge's table of extra subscriptions.
    "CREATE TABLE IF NOT EXISTS sub_topics (
        topic VARCHAR(256) PRIMARY KEY NOT NULL
    );",
];

/// Adds a topic (no-op when present) and waits for the commit.
pub async fn insert(store: &Store, topic: &str) -> Result<(), StoreError> {
    let topic = topic.to_owned();
    store
        .write(move |conn: &Connection| {
            conn.prepare_cached("INSERT OR IGNORE INTO sub_topics (topic) VALUES (?1)")?
                .execute([&topic])?;
            Ok(())
        })
        .await
}

/// Removes a topic and waits for the commit; true when it was there.
pub async fn delete(store: &Store, topic: &str) -> Result<bool, StoreError> {
    let topic = topic.to_owned();
    store
        .write(move |conn: &Connection| {
            Ok(conn
                .prepare_cached("DELETE FROM sub_topics WHERE topic = ?1")?
                .execute([&topic])?
                > 0)
        })
        .await
}

/// Every stored topic, in order.
pub async fn all(store: &Store) -> Result<Vec<String>, StoreError> {
    store
        .read(|conn: &Connection| {
            let mut stmt = conn.prepare_cached("SELECT topic FROM sub_topics ORDER BY topic")?;
            let rows = stmt.query_map([], |r| r.get::<_, String>(0))?;
            let mut topics = Vec::new();
            for row in rows {
                topics.push(row?);
            }
            Ok(topics)
        })
        .await
}
