//! The metamanager driven through the real bus, over a real SQLite file. The test plays the
//! modules around it: it registers the cloud link (`websocket`), `edged` and `twin` mailboxes.

use std::time::Duration;

use rusqlite::Connection;
use wedge_core::bus::Mailbox;
use wedge_core::health::Health;
use wedge_core::module::{SupervisionSettings, Supervisor};
use wedge_core::store::StoreOptions;

use super::*;
use wedge_core::{Content, Message};

struct Node {
    bus: Bus,
    store: Store,
    dir: tempfile::TempDir,
    cloud: Mailbox,
    edged: Mailbox,
    twin: Mailbox,
    supervisor: Supervisor,
}

async fn start(settings: MetaManagerSettings) -> Node {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("edgecore.db"), StoreOptions::default()).unwrap();
    store.migrate("metamanager", MIGRATIONS).await.unwrap();
    let bus = Bus::new(4096);
    let cloud = bus.register("websocket", "hub").unwrap();
    let edged = bus.register("edged", "edged").unwrap();
    let twin = bus.register("twin", "twin").unwrap();
    let mut supervisor =
        Supervisor::new(bus.clone(), Health::new(), SupervisionSettings::default());
    let mm = Arc::new(MetaManager::new(bus.clone(), store.clone(), settings));
    supervisor.spawn(mm).unwrap();
    Node {
        bus,
        store,
        dir,
        cloud,
        edged,
        twin,
        supervisor,
    }
}

fn pod(ns: &str, name: &str, uid: &str) -> Content {
    Content::json(&serde_json::json!({
        "metadata": {"name": name, "namespace": ns, "uid": uid},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]}
    }))
    .unwrap()
}

fn from_cloud(op: &str, resource: &str, content: Content) -> Message {
    Message::build("edgecontroller", "resource", op, resource, content)
}

async fn next(mailbox: &mut Mailbox) -> Message {
    tokio::time::timeout(Duration::from_secs(5), mailbox.recv())
        .await
        .unwrap_or_else(|_| panic!("nothing arrived at {}", mailbox.name()))
        .unwrap()
}

async fn nothing(mailbox: &mut Mailbox) {
    if let Ok(Some(m)) = tokio::time::timeout(Duration::from_millis(150), mailbox.recv()).await {
        panic!("unexpected message at {}: {m:?}", mailbox.name());
    }
}

impl Node {
    /// An independent connection, as another process would open.
    fn db(&self) -> Connection {
        Connection::open(self.dir.path().join("edgecore.db")).unwrap()
    }

    fn stored(&self, key: &str) -> Option<String> {
        self.db()
            .query_row("SELECT value FROM meta WHERE key = ?1", [key], |r| r.get(0))
            .ok()
    }

    fn row_count(&self) -> i64 {
        self.db()
            .query_row("SELECT count(*) FROM meta", [], |r| r.get(0))
            .unwrap()
    }

    async fn send(&self, msg: Message) {
        self.bus.send("metamanager", msg).await.unwrap();
    }

    async fn connect(&self, connected: bool) {
        let state = if connected {
            "cloud_connected"
        } else {
            "cloud_disconnected"
        };
        self.send(Message::build(
            "edgehub",
            "meta",
            "connect",
            "node/connection",
            Content::string(state),
        ))
        .await;
    }

    async fn edged_query(&self, resource: &str) -> Message {
        let q = Message::build("edged", "meta", "query", resource, Content::null());
        self.bus
            .send_sync("metamanager", q, Duration::from_secs(5))
            .await
            .unwrap()
    }
}

fn values(reply: &Message) -> Vec<serde_json::Value> {
    let texts: Vec<String> = reply.content.parse().unwrap();
    texts
        .iter()
        .map(|t| serde_json::from_str(t).unwrap())
        .collect()
}

#[tokio::test]
async fn cloud_insert_is_stored_then_acked_and_reaches_edged() {
    let mut node = start(MetaManagerSettings::default()).await;
    let insert = from_cloud(
        "insert",
        "default/pod/nginx",
        pod("default", "nginx", "uid-1"),
    );
    node.send(insert.clone()).await;

    let to_edged = next(&mut node.edged).await;
    assert_eq!(to_edged.header.id, insert.header.id);
    assert_eq!(to_edged.route.resource, "default/pod/nginx");

    let ack = next(&mut node.cloud).await;
    // The ACK exists only after the commit: the row is visible to another connection now.
    assert!(node.stored("default/pod/nginx").unwrap().contains("uid-1"));
    assert_eq!(ack.header.parent_id, insert.header.id);
    assert_ne!(ack.header.id, insert.header.id);
    assert_eq!(ack.route.operation, "response");
    assert_eq!(ack.route.source, "edgecontroller");
    assert_eq!(ack.route.group, "resource");
    assert_eq!(ack.route.resource, "default/pod/nginx");
    assert_eq!(ack.content.raw(), "\"OK\"");
    let ty: String = node
        .db()
        .query_row(
            "SELECT type FROM meta WHERE key = 'default/pod/nginx'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(ty, "pod");
    node.supervisor.shutdown().await;
}

#[tokio::test]
async fn queries_return_stored_values_by_key_and_by_type() {
    let mut node = start(MetaManagerSettings::default()).await;
    for (ns, name) in [("default", "a"), ("kube-system", "b")] {
        node.send(from_cloud(
            "insert",
            &format!("{ns}/pod/{name}"),
            pod(ns, name, name),
        ))
        .await;
    }
    node.send(from_cloud(
        "insert",
        "default/configmap/cfg",
        Content::json(&serde_json::json!({"data": {"k": "v"}})).unwrap(),
    ))
    .await;
    // The queries queue behind the inserts, so they see them without waiting for the ACKs.
    let one = node.edged_query("default/pod/a").await;
    assert_eq!(one.route.operation, "response");
    assert_eq!(one.route.source, "metamanager");
    let got = values(&one);
    assert_eq!(got.len(), 1);
    assert_eq!(got[0]["metadata"]["name"], "a");

    let all = values(&node.edged_query("default/pod").await);
    let names: Vec<&str> = all
        .iter()
        .map(|p| p["metadata"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["a", "b"], "the list form spans namespaces");

    assert!(values(&node.edged_query("default/pod/missing").await).is_empty());
    // Offline, a remote type is answered from SQLite too.
    let cfg = values(&node.edged_query("default/configmap/cfg").await);
    assert_eq!(cfg[0]["data"]["k"], "v");
    for _ in 0..3 {
        next(&mut node.cloud).await;
    }
    node.supervisor.shutdown().await;
}

#[tokio::test]
async fn pod_delete_needs_the_stored_uid() {
    let mut node = start(MetaManagerSettings::default()).await;
    node.send(from_cloud(
        "insert",
        "default/pod/web",
        pod("default", "web", "uid-new"),
    ))
    .await;
    node.send(from_cloud(
        "insert",
        "default/podpatch/web",
        Content::string(r#"{"status":{}}"#),
    ))
    .await;
    for _ in 0..2 {
        next(&mut node.edged).await;
        next(&mut node.cloud).await;
    }

    // A stale delete for an older pod of the same name.
    let stale = from_cloud(
        "delete",
        "default/pod/web",
        pod("default", "web", "uid-old"),
    );
    node.send(stale.clone()).await;
    let ack = next(&mut node.cloud).await;
    assert_eq!(ack.header.parent_id, stale.header.id);
    assert!(
        node.stored("default/pod/web").is_some(),
        "wrong UID deleted nothing"
    );
    nothing(&mut node.edged).await;

    let real = from_cloud(
        "delete",
        "default/pod/web",
        pod("default", "web", "uid-new"),
    );
    node.send(real.clone()).await;
    assert_eq!(next(&mut node.edged).await.route.operation, "delete");
    assert_eq!(next(&mut node.cloud).await.header.parent_id, real.header.id);
    assert!(node.stored("default/pod/web").is_none());
    assert!(
        node.stored("default/podpatch/web").is_none(),
        "the patch goes with the pod"
    );

    // A delete without a UID is refused.
    node.send(from_cloud(
        "insert",
        "default/pod/x",
        pod("default", "x", "u"),
    ))
    .await;
    next(&mut node.edged).await;
    next(&mut node.cloud).await;
    node.send(from_cloud("delete", "default/pod/x", Content::null()))
        .await;
    let err = next(&mut node.cloud).await;
    assert_eq!(err.route.operation, "error");
    assert!(node.stored("default/pod/x").is_some());
    node.supervisor.shutdown().await;
}

#[tokio::test]
async fn malformed_messages_get_errors_and_change_nothing() {
    let mut node = start(MetaManagerSettings::default()).await;
    node.send(from_cloud(
        "insert",
        "default/pod/keep",
        pod("default", "keep", "k"),
    ))
    .await;
    next(&mut node.edged).await;
    next(&mut node.cloud).await;
    let before = node.row_count();
    let before_value = node.stored("default/pod/keep");

    let cases = [
        (
            from_cloud(
                "frobnicate",
                "default/pod/keep",
                pod("default", "keep", "z"),
            ),
            "unknown operation",
        ),
        (
            from_cloud("insert", "pod", pod("default", "keep", "z")),
            "not of the form",
        ),
        (
            from_cloud("insert", "", pod("default", "keep", "z")),
            "not of the form",
        ),
        (
            from_cloud("update", "default/pod", pod("default", "keep", "z")),
            "names no object",
        ),
        (
            from_cloud("update", "default//keep", pod("default", "keep", "z")),
            "empty type",
        ),
        (
            from_cloud("insert", "default/pod/keep", Content::null()),
            "no content",
        ),
        (from_cloud("", "", Content::null()), "unknown operation"),
    ];
    for (msg, expected) in cases {
        node.send(msg.clone()).await;
        let err = next(&mut node.cloud).await;
        assert_eq!(err.route.operation, "error", "{msg:?}");
        assert_eq!(err.route.source, "metamanager");
        assert_eq!(err.header.parent_id, msg.header.id);
        let text = err.content.as_string().unwrap();
        assert!(text.contains(expected), "{text:?} lacks {expected:?}");
    }
    // An error for a local module goes back to it.
    node.send(Message::build(
        "edged",
        "meta",
        "bogus",
        "default/pod/keep",
        Content::null(),
    ))
    .await;
    assert_eq!(next(&mut node.edged).await.route.operation, "error");

    assert_eq!(node.row_count(), before);
    assert_eq!(node.stored("default/pod/keep"), before_value);
    nothing(&mut node.edged).await;
    node.supervisor.shutdown().await;
}

#[tokio::test]
async fn remote_query_uses_the_cloud_then_the_cache() {
    let mut node = start(MetaManagerSettings::default()).await;
    node.connect(true).await;
    let bus = node.bus.clone();
    let query = Message::build(
        "edged",
        "meta",
        "query",
        "default/configmap/app",
        Content::null(),
    );
    let edged_id = query.header.id.clone();
    let asking = tokio::spawn(async move {
        bus.send_sync("metamanager", query, Duration::from_secs(5))
            .await
    });

    // The cloud sees the query under a fresh id and answers it.
    let to_cloud = next(&mut node.cloud).await;
    assert_eq!(to_cloud.route.operation, "query");
    assert_eq!(to_cloud.route.resource, "default/configmap/app");
    assert_ne!(to_cloud.header.id, edged_id);
    let answer = to_cloud.response(
        Content::json(&serde_json::json!({"Object": {"data": {"mode": "fast"}}, "Err": null}))
            .unwrap(),
    );
    let answer_id = answer.header.id.clone();
    assert!(node.bus.send_response(answer).is_none());

    let reply = asking.await.unwrap().unwrap();
    assert_eq!(
        reply.header.parent_id, edged_id,
        "edged's id pairs the relayed answer"
    );
    let ack = next(&mut node.cloud).await;
    assert_eq!(ack.header.parent_id, answer_id);
    assert_eq!(ack.content.raw(), "\"OK\"");
    let cached: serde_json::Value =
        serde_json::from_str(&node.stored("default/configmap/app").unwrap()).unwrap();
    assert_eq!(cached, serde_json::json!({"data": {"mode": "fast"}}));

    // Cloud gone: the same query is answered from the cache.
    node.connect(false).await;
    let offline = values(&node.edged_query("default/configmap/app").await);
    assert_eq!(offline[0]["data"]["mode"], "fast");
    nothing(&mut node.cloud).await;
    node.supervisor.shutdown().await;
}

/// CloudCore keeps one answer per object in its queue to a node: two questions about one
/// object at once must reach it as one, and its one answer must serve both askers.
#[tokio::test]
async fn the_same_remote_query_twice_at_once_is_asked_once_and_answers_both() {
    let mut node = start(MetaManagerSettings::default()).await;
    node.connect(true).await;
    let ask = |bus: Bus| {
        let query = Message::build(
            "edged",
            "meta",
            "query",
            "default/configmap/kube-root-ca.crt",
            Content::null(),
        );
        let id = query.header.id.clone();
        let task = tokio::spawn(async move {
            bus.send_sync("metamanager", query, Duration::from_secs(5))
                .await
        });
        (id, task)
    };
    let (first_id, first) = ask(node.bus.clone());
    let to_cloud = next(&mut node.cloud).await;
    let (second_id, second) = ask(node.bus.clone());
    // The second question waits for the first's answer instead of going to the cloud.
    nothing(&mut node.cloud).await;
    let answer = to_cloud.response(
        Content::json(&serde_json::json!({"Object": {"data": {"ca.crt": "PEM"}}, "Err": null}))
            .unwrap(),
    );
    let answer_id = answer.header.id.clone();
    assert!(node.bus.send_response(answer).is_none());
    for (id, task) in [(first_id, first), (second_id, second)] {
        let reply = task.await.unwrap().unwrap();
        assert_eq!(
            reply.header.parent_id, id,
            "each asker gets the answer under its id"
        );
        assert!(reply.content.raw().contains("PEM"));
    }
    // One answer, one acknowledgement; the next question goes to the cloud again.
    let ack = next(&mut node.cloud).await;
    assert_eq!(ack.header.parent_id, answer_id);
    nothing(&mut node.cloud).await;
    let (_, third) = ask(node.bus.clone());
    let again = next(&mut node.cloud).await;
    assert_eq!(again.route.resource, "default/configmap/kube-root-ca.crt");
    third.abort();
    node.supervisor.shutdown().await;
}

#[tokio::test]
async fn remote_query_falls_back_to_the_cache_when_the_cloud_is_silent() {
    let settings = MetaManagerSettings {
        remote_query_timeout: Duration::from_millis(100),
        ..MetaManagerSettings::default()
    };
    let mut node = start(settings).await;
    node.send(from_cloud(
        "insert",
        "default/secret/s",
        Content::json(&serde_json::json!({"data": {"p": "cw=="}})).unwrap(),
    ))
    .await;
    next(&mut node.edged).await;
    next(&mut node.cloud).await;
    node.connect(true).await;
    let reply = node.edged_query("default/secret/s").await;
    let _unanswered = next(&mut node.cloud).await;
    assert_eq!(values(&reply)[0]["data"]["p"], "cw==");
    // Nothing cached and no answer: an error.
    let err = node.edged_query("default/secret/none").await;
    assert_eq!(err.route.operation, "error");
    assert!(err.content.as_string().unwrap().contains("no cached copy"));
    node.supervisor.shutdown().await;
}

#[tokio::test]
async fn edged_traffic_follows_kubeedge_routing() {
    let mut node = start(MetaManagerSettings::default()).await;
    // Offline, edged's inserts (remote calls) fail at once.
    let register = Message::build(
        "edged",
        "meta",
        "insert",
        "null/node/edge-1",
        Content::string("{}"),
    );
    let reply = node
        .bus
        .send_sync("metamanager", register, Duration::from_secs(5))
        .await
        .unwrap();
    assert_eq!(reply.route.operation, "error");
    assert_eq!(
        reply.content.as_string().unwrap(),
        "failed to process remote: not connected"
    );

    // Offline patches are stored but refused.
    let patch = Message::build(
        "edged",
        "meta",
        "patch",
        "default/podpatch/p",
        Content::string(r#"{"status":{"phase":"Running"}}"#),
    );
    let reply = node
        .bus
        .send_sync("metamanager", patch, Duration::from_secs(5))
        .await
        .unwrap();
    assert_eq!(
        reply.content.as_string().unwrap(),
        "connection lost between EdgeCore and CloudCore"
    );
    assert_eq!(
        node.stored("default/podpatch/p").unwrap(),
        r#"{"status":{"phase":"Running"}}"#
    );

    // Online, a patch goes to the cloud with edged's own id.
    node.connect(true).await;
    let patch = Message::build(
        "edged",
        "meta",
        "patch",
        "default/podpatch/p",
        Content::string("{}"),
    );
    node.send(patch.clone()).await;
    assert_eq!(next(&mut node.cloud).await.header.id, patch.header.id);

    // edged's update: stored, forwarded to the cloud, "OK" to edged.
    let status = Message::build(
        "edged",
        "meta",
        "update",
        "default/podstatus/p",
        Content::string(r#"{"phase":"Running"}"#),
    );
    node.send(status.clone()).await;
    assert_eq!(next(&mut node.cloud).await.header.id, status.header.id);
    let ok = next(&mut node.edged).await;
    assert_eq!(
        (ok.header.parent_id.as_str(), ok.content.raw()),
        (status.header.id.as_str(), "\"OK\"")
    );

    // edged's pod delete only goes to the cloud.
    let del = Message::build(
        "edged",
        "meta",
        "delete",
        "default/pod/p",
        pod("default", "p", "u"),
    );
    node.send(del.clone()).await;
    assert_eq!(next(&mut node.cloud).await.header.id, del.header.id);

    // devicecontroller traffic reaches twin, re-routed as KubeEdge does.
    let device = Message::build(
        "devicecontroller",
        "resource",
        "insert",
        "default/device/d1",
        Content::string("{}"),
    );
    node.send(device).await;
    let to_twin = next(&mut node.twin).await;
    assert_eq!(
        (to_twin.route.source.as_str(), to_twin.route.group.as_str()),
        ("meta", "twin")
    );
    assert_eq!(next(&mut node.cloud).await.content.raw(), "\"OK\"");

    // A pushed response from edgecontroller is stored and handed to edged.
    let pushed = from_cloud("response", "default/pod/q", pod("default", "q", "uq"));
    node.send(pushed).await;
    assert_eq!(next(&mut node.edged).await.route.resource, "default/pod/q");
    assert!(node.stored("default/pod/q").is_some());

    // Node updates from edgecontroller are stored but not handed to edged.
    node.send(from_cloud(
        "update",
        "null/node/edge-1",
        Content::string("{}"),
    ))
    .await;
    assert_eq!(next(&mut node.cloud).await.content.raw(), "\"OK\"");
    nothing(&mut node.edged).await;
    node.supervisor.shutdown().await;
}

#[tokio::test]
async fn a_burst_of_inserts_is_acked_in_order_with_shared_commits() {
    let mut node = start(MetaManagerSettings::default()).await;
    let (batches_before, _) = node.store.commit_counts();
    let mut ids = Vec::new();
    for i in 0..1000 {
        let msg = from_cloud(
            "insert",
            &format!("default/pod/p{i}"),
            pod("default", "p", &format!("u{i}")),
        );
        ids.push(msg.header.id.clone());
        node.send(msg).await;
    }
    for id in &ids {
        next(&mut node.edged).await;
        assert_eq!(&next(&mut node.cloud).await.header.parent_id, id);
    }
    let (batches, _) = node.store.commit_counts();
    assert!(
        batches - batches_before < 1000,
        "{} commits for 1000 inserts",
        batches - batches_before
    );
    assert_eq!(node.row_count(), 1000);
    node.supervisor.shutdown().await;
}

#[tokio::test]
async fn shutdown_mid_burst_keeps_everything_it_acknowledged() {
    let node = start(MetaManagerSettings::default()).await;
    let mut sent = Vec::new();
    for i in 0..500 {
        let msg = from_cloud(
            "insert",
            &format!("default/pod/s{i}"),
            pod("default", "s", &format!("u{i}")),
        );
        sent.push(msg.header.id.clone());
        node.send(msg).await;
    }
    // Stop while most of the burst is still queued or being committed.
    let Node {
        supervisor,
        mut cloud,
        dir,
        ..
    } = node;
    supervisor.shutdown().await;
    let db = Connection::open(dir.path().join("edgecore.db")).unwrap();
    let stored = |key: String| -> bool {
        db.query_row("SELECT 1 FROM meta WHERE key = ?1", [key], |_| Ok(()))
            .is_ok()
    };
    let mut acked = 0;
    while let Some(ack) = cloud.try_recv() {
        let i = sent
            .iter()
            .position(|id| *id == ack.header.parent_id)
            .unwrap();
        assert!(
            stored(format!("default/pod/s{i}")),
            "ACKed s{i} is not stored"
        );
        acked += 1;
    }
    assert!(acked > 0, "the stage drained nothing before stopping");
}

/// edged's pod events (insert, and patch for a repeat) go to the cloud as sent and are not
/// stored, as edgecore's metamanager does.
#[tokio::test]
async fn pod_events_go_to_the_cloud_unstored() {
    let mut node = start(MetaManagerSettings::default()).await;
    node.connect(true).await;
    let event = serde_json::json!({
        "metadata": {"name": "web.1", "namespace": "default"},
        "involvedObject": {"kind": "Pod", "name": "web"},
        "reason": "Started", "count": 1
    });
    for (op, content) in [
        ("insert", event.clone()),
        (
            "patch",
            serde_json::json!({"Event": event, "Data": "{\"count\":2}"}),
        ),
    ] {
        node.send(Message::build(
            "edged",
            "meta",
            op,
            "default/event/web.1",
            Content::json(&content).unwrap(),
        ))
        .await;
        let relayed = next(&mut node.cloud).await;
        assert_eq!(relayed.route.operation, op);
        assert_eq!(relayed.route.resource, "default/event/web.1");
        let sent: serde_json::Value = serde_json::from_str(relayed.content.raw()).unwrap();
        assert_eq!(sent, content);
    }
    assert!(node.stored("default/event/web.1").is_none());
    nothing(&mut node.edged).await;
    node.supervisor.shutdown().await;
}
