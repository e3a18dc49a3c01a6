use std::path::Path;

use crate::metrics::{MetricsSource, PromWriter};
use crate::store::StoreOptions;
use crate::{Content, Message, Store};

use super::{COMPONENT, MIGRATIONS, Outbox, OutboxError};

async fn store(path: &Path) -> Store {
    let store = Store::open(&path.join("edgecore.db"), StoreOptions::default()).unwrap();
    store.migrate(COMPONENT, MIGRATIONS).await.unwrap();
    store
}

fn status(i: usize) -> Message {
    let mut msg = Message::build(
        "edged",
        "resource",
        "update",
        &format!("default/podstatus/pod-{i}"),
        Content::json(&serde_json::json!({"phase": "Running", "n": i})).unwrap(),
    );
    // A sync flag must not reach the cloud (nor the stored body).
    msg.header.sync = i.is_multiple_of(2);
    msg
}

fn ids(items: &[(u64, Message)]) -> Vec<String> {
    items.iter().map(|(_, m)| m.header.id.clone()).collect()
}

fn metrics(outbox: &Outbox) -> String {
    let mut w = PromWriter::new();
    outbox.write_metrics(&mut w);
    w.finish()
}

#[tokio::test]
async fn keeps_order_across_push_and_remove() {
    let dir = tempfile::tempdir().unwrap();
    let outbox = Outbox::open(store(dir.path()).await, 100).await.unwrap();
    assert!(outbox.is_empty());
    let msgs: Vec<Message> = (0..5).map(status).collect();
    let mut seqs = Vec::new();
    for m in &msgs {
        seqs.push(outbox.push(m).await.unwrap());
    }
    assert!(seqs.windows(2).all(|w| w[0] < w[1]), "{seqs:?}");
    assert_eq!(outbox.len(), 5);

    let all = outbox.oldest(None, 10).await.unwrap();
    assert_eq!(all.iter().map(|(s, _)| *s).collect::<Vec<_>>(), seqs);
    // What comes back is the cloud form: same id, sync cleared, otherwise the same message.
    for ((_, got), sent) in all.iter().zip(&msgs) {
        assert_eq!(got.to_cloud_vec(), sent.to_cloud_vec());
        assert_eq!(got.to_vec(), sent.to_cloud_vec());
        assert!(!got.header.sync);
    }

    // Paging after a seq, and a limit.
    let page = outbox.oldest(Some(seqs[1]), 2).await.unwrap();
    assert_eq!(ids(&page), ids(&all[2..4]));

    assert_eq!(outbox.remove_upto(seqs[1]).await.unwrap(), 2);
    assert_eq!(outbox.len(), 3);
    assert!(outbox.remove(seqs[3]).await.unwrap());
    assert!(!outbox.remove(seqs[3]).await.unwrap());
    assert_eq!(outbox.len(), 2);
    let left = outbox.oldest(None, 10).await.unwrap();
    assert_eq!(
        ids(&left),
        vec![msgs[2].header.id.clone(), msgs[4].header.id.clone()]
    );

    // A newer push goes behind what is left, with a seq never used before.
    let later = outbox.push(&status(9)).await.unwrap();
    assert!(later > seqs[4]);
    let left = outbox.oldest(None, 10).await.unwrap();
    assert_eq!(left.last().unwrap().0, later);
    assert_eq!(outbox.remove_upto(u64::MAX).await.unwrap(), 3);
    assert!(outbox.is_empty());
}

#[tokio::test]
async fn survives_reopening_the_store() {
    let dir = tempfile::tempdir().unwrap();
    let msgs: Vec<Message> = (0..4).map(status).collect();
    let before = {
        let outbox = Outbox::open(store(dir.path()).await, 100).await.unwrap();
        for m in &msgs {
            outbox.push(m).await.unwrap();
        }
        let first = outbox.oldest(None, 1).await.unwrap()[0].0;
        assert!(outbox.remove(first).await.unwrap());
        outbox.oldest(None, 10).await.unwrap()
        // The outbox and its store are dropped here: the writer finishes and the file closes.
    };
    let outbox = Outbox::open(store(dir.path()).await, 100).await.unwrap();
    assert_eq!(outbox.len(), 3);
    let after = outbox.oldest(None, 10).await.unwrap();
    assert_eq!(after, before);
    assert_eq!(
        ids(&after),
        ids(&msgs[1..]
            .iter()
            .cloned()
            .map(|m| (0, m))
            .collect::<Vec<_>>())
    );
    // Seqs keep growing after the restart.
    let next = outbox.push(&status(7)).await.unwrap();
    assert!(next > after.last().unwrap().0);
}

#[tokio::test]
async fn cap_refuses_and_counts() {
    let dir = tempfile::tempdir().unwrap();
    let outbox = Outbox::open(store(dir.path()).await, 2).await.unwrap();
    assert_eq!(outbox.cap(), 2);
    outbox.push(&status(0)).await.unwrap();
    // A pending (not yet committed) push holds its place too.
    let pending = outbox.submit(&status(1)).await.unwrap();
    let refused = outbox.push(&status(2)).await;
    assert!(
        matches!(refused, Err(OutboxError::Full { cap: 2 })),
        "{refused:?}"
    );
    assert_eq!(
        refused.unwrap_err().to_string(),
        "outbox full (2 messages queued); message refused"
    );
    pending.await.unwrap();
    assert!(matches!(
        outbox.push(&status(3)).await,
        Err(OutboxError::Full { cap: 2 })
    ));
    // The refused messages were not stored.
    let stored = outbox.oldest(None, 10).await.unwrap();
    assert_eq!(stored.len(), 2);
    assert_eq!(outbox.len(), 2);

    outbox.remove_upto(stored[0].0).await.unwrap();
    outbox.push(&status(4)).await.unwrap();
    assert_eq!(
        metrics(&outbox),
        "# HELP wedge_edgehub_outbox_messages Cloud-bound messages queued in the durable outbox.\n\
         # TYPE wedge_edgehub_outbox_messages gauge\n\
         wedge_edgehub_outbox_messages 2\n\
         # HELP wedge_edgehub_outbox_cap Most messages the outbox holds before refusing more.\n\
         # TYPE wedge_edgehub_outbox_cap gauge\n\
         wedge_edgehub_outbox_cap 2\n\
         # HELP wedge_edgehub_outbox_relayed_messages Messages relayed for local clients (MQTT uploads) queued in the outbox.\n\
         # TYPE wedge_edgehub_outbox_relayed_messages gauge\n\
         wedge_edgehub_outbox_relayed_messages 0\n\
         # HELP wedge_edgehub_outbox_relayed_cap Most relayed messages the outbox holds before refusing more of them.\n\
         # TYPE wedge_edgehub_outbox_relayed_cap gauge\n\
         wedge_edgehub_outbox_relayed_cap 2\n\
         # HELP wedge_edgehub_outbox_refused_total Messages refused because the outbox was full.\n\
         # TYPE wedge_edgehub_outbox_refused_total counter\n\
         wedge_edgehub_outbox_refused_total 2\n\
         # HELP wedge_edgehub_outbox_relayed_refused_total Relayed messages refused because their share of the outbox was full.\n\
         # TYPE wedge_edgehub_outbox_relayed_refused_total counter\n\
         wedge_edgehub_outbox_relayed_refused_total 0\n\
         # HELP wedge_edgehub_outbox_pushed_total Messages committed to the outbox.\n\
         # TYPE wedge_edgehub_outbox_pushed_total counter\n\
         wedge_edgehub_outbox_pushed_total 3\n\
         # HELP wedge_edgehub_outbox_removed_total Messages removed from the outbox once the cloud had them.\n\
         # TYPE wedge_edgehub_outbox_removed_total counter\n\
         wedge_edgehub_outbox_removed_total 1\n"
    );
}

#[tokio::test]
async fn reopened_outbox_over_cap_refuses_until_drained() {
    let dir = tempfile::tempdir().unwrap();
    let store = store(dir.path()).await;
    let big = Outbox::open(store.clone(), 10).await.unwrap();
    for i in 0..3 {
        big.push(&status(i)).await.unwrap();
    }
    let small = Outbox::open(store, 2).await.unwrap();
    assert_eq!(small.len(), 3);
    assert!(matches!(
        small.push(&status(5)).await,
        Err(OutboxError::Full { cap: 2 })
    ));
    let first = small.oldest(None, 1).await.unwrap()[0].0;
    small.remove_upto(first + 1).await.unwrap();
    small.push(&status(6)).await.unwrap();
    assert_eq!(small.len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipelined_submits_share_commits() {
    let dir = tempfile::tempdir().unwrap();
    let store = store(dir.path()).await;
    let outbox = Outbox::open(store.clone(), 10_000).await.unwrap();
    // Hold the writer so every push below is queued while it is busy: they must then go out
    // together rather than one commit each.
    let (release, hold) = std::sync::mpsc::channel::<()>();
    let (started_tx, started) = tokio::sync::oneshot::channel();
    let blocker = store
        .submit(move |_| {
            let _ = started_tx.send(());
            let _ = hold.recv();
            Ok(())
        })
        .await
        .unwrap();
    started.await.unwrap();
    let (batches_before, writes_before) = store.commit_counts();

    let msgs: Vec<Message> = (0..300).map(status).collect();
    let mut pending = Vec::new();
    for m in &msgs {
        pending.push(outbox.submit(m).await.unwrap());
    }
    assert_eq!(outbox.len(), 300);
    release.send(()).unwrap();
    blocker.await.unwrap();
    let mut seqs = Vec::new();
    for p in pending {
        seqs.push(p.await.unwrap());
    }
    let (batches, writes) = store.commit_counts();
    // The blocker's batch, then the 300 pushes in one batch (max_batch is 512).
    assert_eq!(writes - writes_before, 301, "writes");
    assert_eq!(batches - batches_before, 2, "batches");
    assert!(
        seqs.windows(2).all(|w| w[0] + 1 == w[1]),
        "seqs in submit order"
    );
    let stored = outbox.oldest(None, 1000).await.unwrap();
    assert_eq!(
        ids(&stored),
        msgs.iter().map(|m| m.header.id.clone()).collect::<Vec<_>>()
    );
}

#[tokio::test]
async fn concurrent_submitters_respect_the_cap() {
    let dir = tempfile::tempdir().unwrap();
    let outbox = Outbox::open(store(dir.path()).await, 50).await.unwrap();
    let mut tasks = Vec::new();
    for t in 0..8 {
        let outbox = outbox.clone();
        tasks.push(tokio::spawn(async move {
            let mut ok = 0;
            for i in 0..20 {
                match outbox.push(&status(t * 100 + i)).await {
                    Ok(_) => ok += 1,
                    Err(OutboxError::Full { .. }) => {}
                    Err(e) => panic!("{e}"),
                }
            }
            ok
        }));
    }
    let mut ok = 0;
    for t in tasks {
        ok += t.await.unwrap();
    }
    assert_eq!(ok, 50);
    assert_eq!(outbox.len(), 50);
    assert_eq!(outbox.oldest(None, 1000).await.unwrap().len(), 50);
}

#[tokio::test]
async fn dropped_pending_push_is_still_stored_and_counted() {
    let dir = tempfile::tempdir().unwrap();
    let store = store(dir.path()).await;
    let outbox = Outbox::open(store.clone(), 10).await.unwrap();
    drop(outbox.submit(&status(0)).await.unwrap());
    store.barrier().await.unwrap();
    assert_eq!(outbox.len(), 1);
    assert_eq!(outbox.oldest(None, 10).await.unwrap().len(), 1);
}

#[tokio::test]
async fn corrupt_rows_are_reported() {
    let dir = tempfile::tempdir().unwrap();
    let store = store(dir.path()).await;
    let outbox = Outbox::open(store.clone(), 10).await.unwrap();
    let mut seqs = Vec::new();
    for i in 0..4 {
        seqs.push(outbox.push(&status(i)).await.unwrap());
    }
    let (bad_json, bad_id) = (seqs[1] as i64, seqs[2] as i64);
    store
        .write(move |c| {
            c.execute(
                "UPDATE outbox SET body = 'not json' WHERE seq = ?1",
                [bad_json],
            )?;
            c.execute(
                "UPDATE outbox SET msg_id = 'other' WHERE seq = ?1",
                [bad_id],
            )?;
            Ok(())
        })
        .await
        .unwrap();

    // The good row before the damage comes back alone.
    let first = outbox.oldest(None, 10).await.unwrap();
    assert_eq!(
        first.iter().map(|(s, _)| *s).collect::<Vec<_>>(),
        vec![seqs[0]]
    );
    // Then the damaged row is named, so the caller can drop it and go on.
    match outbox.oldest(Some(seqs[0]), 10).await {
        Err(OutboxError::Corrupt { seq, reason }) => {
            assert_eq!(seq, seqs[1]);
            assert!(
                reason.starts_with("malformed message: expected ident"),
                "{reason}"
            );
        }
        other => panic!("{other:?}"),
    }
    assert!(outbox.remove(seqs[1]).await.unwrap());
    match outbox.oldest(Some(seqs[0]), 10).await {
        Err(e @ OutboxError::Corrupt { .. }) => assert_eq!(
            e.to_string(),
            format!(
                "outbox row {} is corrupt: body holds msg_id {:?}, row says \"other\"",
                seqs[2],
                status_id(&outbox, seqs[2]).await
            )
        ),
        other => panic!("{other:?}"),
    }
    assert!(outbox.remove(seqs[2]).await.unwrap());
    let rest = outbox.oldest(None, 10).await.unwrap();
    assert_eq!(
        rest.iter().map(|(s, _)| *s).collect::<Vec<_>>(),
        vec![seqs[0], seqs[3]]
    );
}

#[tokio::test]
async fn corrupt_first_row_is_reported() {
    let dir = tempfile::tempdir().unwrap();
    let store = store(dir.path()).await;
    let outbox = Outbox::open(store.clone(), 10).await.unwrap();
    let seq = outbox.push(&status(0)).await.unwrap() as i64;
    store
        .write(move |c| {
            // Valid JSON, but not a message.
            c.execute("UPDATE outbox SET body = '42' WHERE seq = ?1", [seq])?;
            Ok(())
        })
        .await
        .unwrap();
    match outbox.oldest(None, 10).await {
        Err(OutboxError::Corrupt { seq: s, reason }) => {
            assert_eq!(s, seq as u64);
            assert_eq!(
                reason,
                "malformed message: invalid type: integer `42`, expected struct Message at line 1 column 2"
            );
        }
        other => panic!("{other:?}"),
    }
}

/// The msg_id the body of row `seq` holds, read straight from the table.
async fn status_id(outbox: &Outbox, seq: u64) -> String {
    let seq = seq as i64;
    let body: String = outbox
        .shared
        .store
        .read(move |c| {
            Ok(
                c.query_row("SELECT body FROM outbox WHERE seq = ?1", [seq], |r| {
                    r.get(0)
                })?,
            )
        })
        .await
        .unwrap();
    Message::from_slice(body.as_bytes()).unwrap().header.id
}

/// A component's own table, written in the same transaction as its staged messages.
async fn with_changes_table(store: &Store) {
    store
        .write(|conn| {
            conn.execute_batch("CREATE TABLE changes (n INTEGER)")?;
            Ok(())
        })
        .await
        .unwrap();
}

#[tokio::test]
async fn staged_rows_commit_with_the_callers_change_and_wake_the_reader() {
    let dir = tempfile::tempdir().unwrap();
    let store = store(dir.path()).await;
    with_changes_table(&store).await;
    let outbox = Outbox::open(store.clone(), 10).await.unwrap();
    let msgs: Vec<Message> = (0..3).map(status).collect();
    let (rows, reservation) = outbox.stage(&msgs).unwrap();
    assert_eq!(rows.len(), 3);
    // Places are held while the write is in flight.
    assert_eq!(outbox.len(), 3);
    store
        .write(move |conn| {
            conn.execute("INSERT INTO changes (n) VALUES (1)", [])?;
            rows.insert(conn)
        })
        .await
        .unwrap();
    reservation.committed();
    // The reader is woken once for the commit, and reads the messages in order, as staged.
    tokio::time::timeout(std::time::Duration::from_secs(1), outbox.changed())
        .await
        .expect("a commit wakes the reader");
    let stored = outbox.oldest(None, 10).await.unwrap();
    assert_eq!(
        ids(&stored),
        msgs.iter().map(|m| m.header.id.clone()).collect::<Vec<_>>()
    );
    assert_eq!(outbox.len(), 3);
    assert!(metrics(&outbox).contains("wedge_edgehub_outbox_pushed_total 3\n"));
}

#[tokio::test]
async fn a_failed_write_rolls_back_its_staged_rows_and_gives_their_places_back() {
    let dir = tempfile::tempdir().unwrap();
    let store = store(dir.path()).await;
    with_changes_table(&store).await;
    let outbox = Outbox::open(store.clone(), 10).await.unwrap();
    let (rows, reservation) = outbox.stage(&[status(0), status(1)]).unwrap();
    let failed = store
        .write(move |conn| {
            rows.insert(conn)?;
            conn.execute("INSERT INTO no_such_table (n) VALUES (1)", [])?;
            Ok(())
        })
        .await;
    assert!(failed.is_err());
    drop(reservation);
    assert!(outbox.oldest(None, 10).await.unwrap().is_empty());
    assert_eq!(outbox.len(), 0);
    assert!(metrics(&outbox).contains("wedge_edgehub_outbox_pushed_total 0\n"));
}

#[tokio::test]
async fn staging_more_than_fits_is_refused_whole() {
    let dir = tempfile::tempdir().unwrap();
    let outbox = Outbox::open(store(dir.path()).await, 3).await.unwrap();
    outbox.push(&status(0)).await.unwrap();
    let refused = outbox.stage(&[status(1), status(2), status(3)]);
    assert!(
        matches!(refused, Err(OutboxError::Full { cap: 3 })),
        "{refused:?}"
    );
    assert_eq!(outbox.len(), 1);
    assert!(metrics(&outbox).contains("wedge_edgehub_outbox_refused_total 3\n"));
    // What fits is taken.
    let (rows, reservation) = outbox.stage(&[status(1), status(2)]).unwrap();
    assert_eq!((rows.len(), outbox.len()), (2, 3));
    drop(reservation);
    assert_eq!(outbox.len(), 1);
}

/// An MQTT upload, as eventbus relays it for a local client.
fn upload(i: usize) -> Message {
    Message::build(
        "bus",
        "user",
        "upload",
        &format!("$hw/events/upload/flood-{i}"),
        Content::string(format!("{{\"n\":{i}}}")),
    )
}

#[tokio::test]
async fn relayed_messages_take_only_their_share_and_the_nodes_own_still_fit() {
    use super::OutboxLimits;
    let dir = tempfile::tempdir().unwrap();
    let limits = OutboxLimits::with_relayed_percent(10, 50);
    assert_eq!(limits.relayed_cap, 5);
    let outbox = Outbox::open_with(store(dir.path()).await, limits)
        .await
        .unwrap();
    // A flood of uploads stops at the share...
    for i in 0..5 {
        outbox
            .submit_relayed(&upload(i))
            .await
            .unwrap()
            .await
            .unwrap();
    }
    let refused = outbox.submit_relayed(&upload(5)).await.err().unwrap();
    assert!(
        matches!(refused, OutboxError::RelayedFull { cap: 5 }),
        "{refused}"
    );
    assert_eq!((outbox.len(), outbox.relayed_len()), (5, 5));
    // ...and the node's own messages (pushed or staged) still have the rest.
    outbox.push(&status(0)).await.unwrap();
    let (_rows, reservation) = outbox.stage(&[status(1), status(2)]).unwrap();
    drop(reservation);
    for i in 1..5 {
        outbox.push(&status(i)).await.unwrap();
    }
    assert!(matches!(
        outbox.push(&status(9)).await,
        Err(OutboxError::Full { cap: 10 })
    ));
    let text = metrics(&outbox);
    assert!(
        text.contains("wedge_edgehub_outbox_relayed_refused_total 1"),
        "{text}"
    );
    assert!(
        text.contains("wedge_edgehub_outbox_relayed_messages 5"),
        "{text}"
    );

    // The share is counted again after a restart, and removing rows gives places back.
    drop(outbox);
    let outbox = Outbox::open_with(store(dir.path()).await, limits)
        .await
        .unwrap();
    assert_eq!((outbox.len(), outbox.relayed_len()), (10, 5));
    assert!(outbox.submit_relayed(&upload(6)).await.is_err());
    let oldest = outbox.oldest(None, 3).await.unwrap();
    assert_eq!(outbox.remove_upto(oldest[1].0).await.unwrap(), 2);
    assert!(outbox.remove(oldest[2].0).await.unwrap());
    assert_eq!((outbox.len(), outbox.relayed_len()), (7, 2));
    outbox
        .submit_relayed(&upload(7))
        .await
        .unwrap()
        .await
        .unwrap();
    assert_eq!(outbox.relayed_len(), 3);
}
