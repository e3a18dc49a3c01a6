//! The `target_urls` table: the cloud URLs that edge apps may call through the servicebus,
//! one per `servicebus → rest` rule the cloud started. Same table and column as edgecore's, so
//! the allow-list survives a restart and the HTTP server comes back with it.

use rusqlite::Connection;
use wedge_core::{Store, StoreError};

/// The component name the migrations are recorded under.
pub const COMPONENT: &str = "servicebus";

/// Migrations of the servicebus's schema, in order.
pub const MIGRATIONS: &[&str] = &[
    // v1: KubeEdge's table of allowed target URLs.
    "CREATE TABLE IF NOT EXISTS target_urls (
        url TEXT PRIMARY KEY NOT NULL
    );",
];

/// The form two spellings of one URL share: the cloud starts a rule with the URL as given
/// (`http://host/x`) but stops it with a `path.Join`ed one (`http:/host/x`), so URLs are
/// compared with runs of `/` collapsed. edgecore compares them as written and so never
/// forgets a stopped rule's URL.
pub fn same_url(a: &str, b: &str) -> bool {
    collapse(a) == collapse(b)
}

fn collapse(url: &str) -> String {
    let mut out = String::with_capacity(url.len());
    for c in url.trim_end_matches('/').chars() {
        if c == '/' && out.ends_with('/') {
            continue;
        }
        out.push(c);
    }
    out
}

/// Adds a URL (no-op when present) and waits for the commit.
pub async fn insert(store: &Store, url: &str) -> Result<(), StoreError> {
    let url = url.to_owned();
    store
        .write(move |conn: &Connection| {
            conn.prepare_cached("INSERT OR IGNORE INTO target_urls (url) VALUES (?1)")?
                .execute([&url])?;
            Ok(())
        })
        .await
}

/// Removes every stored URL that is [`same_url`] as `url`; returns how many went.
pub async fn delete(store: &Store, url: &str) -> Result<usize, StoreError> {
    let url = url.to_owned();
    store
        .write(move |conn: &Connection| {
            let stored = all_in(conn)?;
            let mut removed = 0;
            for s in stored.iter().filter(|s| same_url(s, &url)) {
                removed += conn
                    .prepare_cached("DELETE FROM target_urls WHERE url = ?1")?
                    .execute([s])?;
            }
            Ok(removed)
        })
        .await
}

/// Every stored URL, in order.
pub async fn all(store: &Store) -> Result<Vec<String>, StoreError> {
    store.read(|conn: &Connection| all_in(conn)).await
}

fn all_in(conn: &Connection) -> Result<Vec<String>, StoreError> {
    let mut stmt = conn.prepare_cached("SELECT url FROM target_urls ORDER BY url")?;
    let rows = stmt.query_map([], |r| r.get::<_, String>(0))?;
    let mut urls = Vec::new();
    for row in rows {
        urls.push(row?);
    }
    Ok(urls)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_joined_url_is_the_same_url() {
        assert!(same_url(
            "http://127.0.0.1:9000/echo",
            "http:/127.0.0.1:9000/echo"
        ));
        assert!(same_url("http://a/b/", "http://a/b"));
        assert!(!same_url("http://a/b", "http://a/c"));
    }
}
