use super::*;

const SCHEMA: &[&str] = &[
    "CREATE TABLE kv (k TEXT PRIMARY KEY NOT NULL, v TEXT NOT NULL)",
    "ALTER TABLE kv ADD COLUMN note TEXT NOT NULL DEFAULT ''",
];

async fn open_kv(dir: &tempfile::TempDir) -> Store {
    let store = Store::open(&dir.path().join("edge.db"), StoreOptions::default()).unwrap();
    store.migrate("kv", SCHEMA).await.unwrap();
    store
}

fn put(k: &str, v: &str) -> impl FnOnce(&Connection) -> Result<(), StoreError> + Send + 'static {
    let (k, v) = (k.to_owned(), v.to_owned());
    move |c| {
        c.prepare_cached("INSERT OR REPLACE INTO kv (k, v) VALUES (?1, ?2)")?
            .execute([&k, &v])?;
        Ok(())
    }
}

async fn get(store: &Store, k: &str) -> Option<String> {
    let k = k.to_owned();
    store
        .read(move |c| {
            Ok(
                c.query_row("SELECT v FROM kv WHERE k = ?1", [k], |r| r.get(0))
                    .ok(),
            )
        })
        .await
        .unwrap()
}

#[tokio::test]
async fn committed_writes_are_on_disk_for_other_connections() {
    let dir = tempfile::tempdir().unwrap();
    let store = open_kv(&dir).await;
    store.write(put("a", "1")).await.unwrap();
    // An independent connection (another process would be the same) sees it at once.
    let other = Connection::open(dir.path().join("edge.db")).unwrap();
    let v: String = other
        .query_row("SELECT v FROM kv WHERE k = 'a'", [], |r| r.get(0))
        .unwrap();
    assert_eq!(v, "1");
    assert_eq!(get(&store, "a").await.as_deref(), Some("1"));
    let mode: String = other
        .query_row("PRAGMA journal_mode", [], |r| r.get(0))
        .unwrap();
    assert_eq!(mode, "wal");
}

#[tokio::test]
async fn concurrent_writes_share_commits() {
    let dir = tempfile::tempdir().unwrap();
    let store = open_kv(&dir).await;
    let (batches_before, _) = store.commit_counts();
    let mut pending = Vec::new();
    for i in 0..2000 {
        pending.push(store.submit(put(&format!("k{i}"), "v")).await.unwrap());
    }
    for p in pending {
        p.await.unwrap();
    }
    let (batches, writes) = store.commit_counts();
    assert!(writes >= 2000);
    assert!(
        batches - batches_before < 2000,
        "2000 writes took {} commits",
        batches - batches_before
    );
    let count: i64 = store
        .read(|c| Ok(c.query_row("SELECT count(*) FROM kv", [], |r| r.get(0))?))
        .await
        .unwrap();
    assert_eq!(count, 2000);
}

#[tokio::test]
async fn a_failing_write_rolls_back_alone() {
    let dir = tempfile::tempdir().unwrap();
    let store = open_kv(&dir).await;
    let good1 = store.submit(put("good1", "x")).await.unwrap();
    let bad = store
        .submit(|c| {
            c.execute("INSERT INTO kv (k, v) VALUES ('half', 'written')", [])?;
            c.execute("INSERT INTO nowhere VALUES (1)", [])?;
            Ok(())
        })
        .await
        .unwrap();
    let boom = store
        .submit(|c| -> Result<(), StoreError> {
            c.execute("INSERT INTO kv (k, v) VALUES ('panic', 'written')", [])?;
            panic!("write closure bug")
        })
        .await
        .unwrap();
    let good2 = store.submit(put("good2", "y")).await.unwrap();
    good1.await.unwrap();
    assert!(matches!(bad.await, Err(StoreError::Sql(_))));
    assert!(matches!(boom.await, Err(StoreError::Panicked(_))));
    good2.await.unwrap();
    assert_eq!(get(&store, "good1").await.as_deref(), Some("x"));
    assert_eq!(get(&store, "good2").await.as_deref(), Some("y"));
    assert_eq!(get(&store, "half").await, None);
    assert_eq!(get(&store, "panic").await, None);
    // The writer is still alive.
    store.write(put("after", "z")).await.unwrap();
    let mut w = PromWriter::new();
    store.write_metrics(&mut w);
    assert!(w.finish().contains("wedge_store_write_errors_total 2"));
}

#[tokio::test]
async fn migrations_apply_once_and_refuse_newer_schemas() {
    let dir = tempfile::tempdir().unwrap();
    let store = open_kv(&dir).await;
    store.migrate("kv", SCHEMA).await.unwrap();
    store
        .write(|c| {
            c.execute("INSERT INTO kv (k, v, note) VALUES ('a', 'b', 'c')", [])?;
            Ok(())
        })
        .await
        .unwrap();
    let err = store.migrate("kv", &SCHEMA[..1]).await.unwrap_err();
    assert!(err.to_string().contains("newer than this build"), "{err}");
    let bad = store
        .migrate("broken", &["CREATE TABLE ("])
        .await
        .unwrap_err();
    assert!(bad.to_string().contains("broken v1"), "{bad}");
}

#[tokio::test]
async fn barrier_gives_read_your_writes() {
    let dir = tempfile::tempdir().unwrap();
    let store = open_kv(&dir).await;
    let _queued = store.submit(put("late", "1")).await.unwrap();
    store.barrier().await.unwrap();
    assert_eq!(get(&store, "late").await.as_deref(), Some("1"));
}

#[test]
fn a_corrupt_file_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("edge.db");
    std::fs::write(
        &path,
        b"this is not an sqlite database, just some text here...",
    )
    .unwrap();
    let err = Store::open(&path, StoreOptions::default()).err().unwrap();
    let text = err.to_string();
    assert!(matches!(err, StoreError::Open { .. }), "{text}");
    assert!(
        text.contains("edge.db") && text.contains("not an SQLite database"),
        "{text}"
    );
    // Nothing was written over it.
    assert!(std::fs::read(&path).unwrap().starts_with(b"this is not"));
}

#[test]
fn an_unwritable_location_is_a_clear_error() {
    // /proc refuses new directories even for root, which the tests may run as.
    let err = Store::open(
        Path::new("/proc/wedge-test/edge.db"),
        StoreOptions::default(),
    )
    .err()
    .unwrap();
    assert!(matches!(err, StoreError::ReadOnly { .. }), "{err}");
    assert!(err.to_string().contains("/proc/wedge-test"), "{err}");
    let dir = tempfile::tempdir().unwrap();
    let err = Store::open(dir.path(), StoreOptions::default())
        .err()
        .unwrap();
    assert!(
        err.to_string().contains("cannot open database")
            || matches!(err, StoreError::ReadOnly { .. }),
        "{err}"
    );
}

#[tokio::test]
async fn the_wal_is_checkpointed_in_the_background_and_reused() {
    let dir = tempfile::tempdir().unwrap();
    let store = open_kv(&dir).await;
    let wal = dir.path().join("edge.db-wal");
    let size_after = |rounds: usize| {
        let store = store.clone();
        let wal = wal.clone();
        async move {
            for round in 0..rounds {
                let mut pending = Vec::new();
                for i in 0..500 {
                    let value = format!("{round}-{}", "x".repeat(200));
                    pending.push(store.submit(put(&format!("k{i}"), &value)).await.unwrap());
                }
                for p in pending {
                    p.await.unwrap();
                }
                // Give the checkpointer a turn between bursts, as idle moments do.
                tokio::time::sleep(checkpoint::PERIOD * 2).await;
            }
            std::fs::metadata(&wal).unwrap().len()
        }
    };
    let first = size_after(3).await;
    let later = size_after(12).await;
    // Without checkpoints the WAL would grow with every round; with them it is reused.
    assert!(
        later <= first.max(1) * 2,
        "WAL grew from {first} to {later} bytes"
    );
    // Everything written is in the database file itself (a fresh connection with the WAL
    // checkpointed reads it).
    let other = Connection::open(dir.path().join("edge.db")).unwrap();
    let (log, done): (i64, i64) = other
        .query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |r| {
            Ok((r.get(1)?, r.get(2)?))
        })
        .unwrap();
    assert_eq!(log, done, "every WAL frame is checkpointed");
    assert!(wal.exists());
}
