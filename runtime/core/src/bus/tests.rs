use std::time::Duration;

use super::*;
use crate::message::Content;

fn msg(op: &str) -> Message {
    Message::build("test", "meta", op, "default/pod/a", Content::null())
}

#[tokio::test]
async fn send_reaches_the_named_module() {
    let bus = Bus::new(8);
    let mut meta = bus.register("metamanager", "meta").unwrap();
    bus.send("metamanager", msg("insert")).await.unwrap();
    assert_eq!(meta.recv().await.unwrap().route.operation, "insert");
    assert_eq!(
        bus.send("nobody", msg("x")).await,
        Err(BusError::UnknownModule("nobody".into()))
    );
    assert_eq!(
        bus.register("metamanager", "meta").err(),
        Some(BusError::AlreadyRegistered("metamanager".into()))
    );
}

#[tokio::test]
async fn group_send_copies_to_every_member() {
    let bus = Bus::new(8);
    let mut a = bus.register("eventbus", "bus").unwrap();
    let mut b = bus.register("servicebus", "bus").unwrap();
    let _other = bus.register("twin", "twin").unwrap();
    assert_eq!(bus.send_to_group("bus", msg("connect")).await, 2);
    assert_eq!(a.recv().await.unwrap().route.operation, "connect");
    assert_eq!(b.recv().await.unwrap().route.operation, "connect");
    assert_eq!(bus.send_to_group("nobody", msg("x")).await, 0);
}

#[tokio::test]
async fn full_mailbox_pushes_back() {
    let bus = Bus::new(2);
    let mut m = bus.register("m", "g").unwrap();
    bus.try_send("m", msg("1")).unwrap();
    bus.try_send("m", msg("2")).unwrap();
    assert_eq!(bus.try_send("m", msg("3")), Err(BusError::Full("m".into())));
    // A waiting send completes once the receiver makes room.
    let sender = bus.clone();
    let blocked = tokio::spawn(async move { sender.send("m", msg("4")).await });
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert!(!blocked.is_finished());
    assert_eq!(m.recv().await.unwrap().route.operation, "1");
    blocked.await.unwrap().unwrap();
    let mut w = PromWriter::new();
    bus.write_metrics(&mut w);
    let text = w.finish();
    assert!(text.contains("wedge_bus_messages_rejected_total{module=\"m\"} 1"));
    assert!(text.contains("wedge_bus_mailbox_depth{module=\"m\"} 2"));
}

#[tokio::test]
async fn send_sync_is_answered_by_parent_id() {
    let bus = Bus::new(8);
    let mut server = bus.register("metamanager", "meta").unwrap();
    let responder = bus.clone();
    tokio::spawn(async move {
        while let Some(req) = server.recv().await {
            assert!(req.header.sync);
            // An unrelated response first: must not satisfy the waiter.
            let mut stray = req.response(Content::string("stray"));
            stray.header.parent_id = "someone-else".into();
            assert!(responder.send_response(stray).is_some());
            assert!(
                responder
                    .send_response(req.response(Content::string("answer")))
                    .is_none()
            );
        }
    });
    let req = msg("query");
    let id = req.header.id.clone();
    let reply = bus
        .send_sync("metamanager", req, Duration::from_secs(1))
        .await
        .unwrap();
    assert_eq!(reply.header.parent_id, id);
    assert_eq!(reply.content.as_string().as_deref(), Some("answer"));
    assert_eq!(bus.pending_replies(), 0);
}

#[tokio::test]
async fn send_sync_times_out_and_forgets() {
    let bus = Bus::new(8);
    let _silent = bus.register("edged", "edged").unwrap();
    let err = bus
        .send_sync("edged", msg("query"), Duration::from_millis(30))
        .await
        .unwrap_err();
    assert!(matches!(err, BusError::Timeout { .. }), "{err}");
    assert_eq!(bus.pending_replies(), 0);
    // A late reply finds nobody and is handed back.
    let late = msg("query").response(Content::ok());
    assert!(bus.send_response(late).is_some());
}
