//! MetaServer's Kubernetes API over a real metamanager and SQLite file, with no cloud: what the
//! node answers on its own (LIST, GET, WATCH with resource versions, selectors, kubectl's
//! Table), and how it refuses bad input (malformed selectors, unknown resources, bogus and
//! too-old versions, writes with the cloud away, more watches than it serves) while still
//! answering everyone else. The same API against the real cloud is `tests/realcloud`
//! (metaserver).
//!
//! The node is built in-process as `wedge run` wires it: a store on a temporary SQLite file,
//! the bus, the supervisor, `MetaManager` and `MetaServer`. Objects arrive as the cloud sends
//! them: `insert`/`update`/`delete` messages from `edgecontroller` to metamanager.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use wedge_core::health::Health;
use wedge_core::module::SupervisionSettings;
use wedge_core::store::StoreOptions;
use wedge_core::{Bus, Content, Message, Store, Supervisor};
use wedge_metamanager::{MetaManager, MetaManagerSettings};
use wedge_metaserver::{MetaServer, MetaServerSettings};
use wedge_tests::kube_http::{self, Watch};

const WAIT: Duration = Duration::from_secs(15);

fn pod(name: &str, node: &str, app: &str, rv: u64) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": name, "namespace": "default", "uid": format!("uid-{name}"),
                        "resourceVersion": rv.to_string(), "labels": {"app": app},
                        "creationTimestamp": "2026-11-28T00:00:00Z"},
           "spec": {"nodeName": node, "containers": [{"name": "c", "image": "busybox"}]},
           "status": {"phase": "Running"}})
}

fn configmap(name: &str, value: &str, rv: u64) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap",
           "metadata": {"name": name, "namespace": "default", "resourceVersion": rv.to_string(),
                        "creationTimestamp": "2026-11-28T00:00:00Z"},
           "data": {"v": value}})
}

/// Sends metamanager what edgecontroller would, and waits for the commit (its `OK`).
async fn cloud_sends(bus: &Bus, op: &str, resource: &str, object: &Value) {
    let msg = Message::build(
        "edgecontroller",
        "resource",
        op,
        resource,
        Content::json(object).unwrap(),
    );
    let reply = bus
        .send_sync("metamanager", msg, WAIT)
        .await
        .expect("metamanager answers");
    assert_ne!(reply.route.operation, "error", "{op} {resource} refused");
}

struct Node {
    rt: tokio::runtime::Runtime,
    bus: Bus,
    metaserver: Arc<MetaServer>,
    supervisor: Option<Supervisor>,
    _dir: tempfile::TempDir,
    addr: SocketAddr,
}

impl Node {
    /// A node whose store already holds `before` (sent before MetaServer starts, so its
    /// history begins after them), then MetaServer.
    fn start(before: &[(&str, &str, Value)]) -> Node {
        let dir = tempfile::tempdir().unwrap();
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let port = wedge_tests::free_port();
        let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
        let (bus, supervisor, metaserver) = rt.block_on(async {
            let store =
                Store::open(&dir.path().join("edgecore.db"), StoreOptions::default()).unwrap();
            store
                .migrate("metamanager", wedge_metamanager::MIGRATIONS)
                .await
                .unwrap();
            let bus = Bus::new(1024);
            let mut supervisor =
                Supervisor::new(bus.clone(), Health::new(), SupervisionSettings::default());
            let metamanager = Arc::new(MetaManager::new(
                bus.clone(),
                store.clone(),
                MetaManagerSettings::default(),
            ));
            supervisor.spawn(metamanager).unwrap();
            for (op, resource, object) in before {
                cloud_sends(&bus, op, resource, object).await;
            }
            let settings = MetaServerSettings {
                listen: addr.to_string(),
                node_name: "node-a".into(),
                query_timeout: WAIT,
            };
            let metaserver = Arc::new(MetaServer::new(settings));
            supervisor.spawn(metaserver.clone()).unwrap();
            (bus, supervisor, metaserver)
        });
        let deadline = Instant::now() + WAIT;
        while std::net::TcpStream::connect(addr).is_err() {
            assert!(Instant::now() < deadline, "MetaServer does not listen");
            std::thread::sleep(Duration::from_millis(20));
        }
        // Listening comes before the load; wait for the load too.
        while kube_http::get(addr, "/api/v1/pods")
            .map(|(s, _)| s)
            .unwrap_or(0)
            != 200
        {
            assert!(Instant::now() < deadline, "MetaServer does not answer");
            std::thread::sleep(Duration::from_millis(20));
        }
        Node {
            rt,
            bus,
            metaserver,
            supervisor: Some(supervisor),
            _dir: dir,
            addr,
        }
    }

    fn send(&self, op: &str, resource: &str, object: &Value) {
        self.rt
            .block_on(cloud_sends(&self.bus, op, resource, object));
    }

    fn get(&self, path: &str) -> (u16, Value) {
        let (status, body) = kube_http::get(self.addr, path).unwrap();
        (
            status,
            serde_json::from_slice(&body)
                .unwrap_or(Value::String(String::from_utf8_lossy(&body).into_owned())),
        )
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        if let Some(s) = self.supervisor.take() {
            self.rt.block_on(s.shutdown());
        }
    }
}

fn names(list: &Value) -> Vec<&str> {
    list["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|o| o["metadata"]["name"].as_str())
        .collect()
}

fn event(line: &str) -> (String, String, String) {
    let v: Value = serde_json::from_str(line).unwrap();
    (
        v["type"].as_str().unwrap_or("").to_owned(),
        v["object"]["metadata"]["name"]
            .as_str()
            .unwrap_or("")
            .to_owned(),
        v["object"]["metadata"]["resourceVersion"]
            .as_str()
            .unwrap_or("")
            .to_owned(),
    )
}

#[test]
fn lists_gets_and_watches_from_the_node_with_versions_and_selectors() {
    let node = Node::start(&[
        (
            "insert",
            "default/pod/web-1",
            pod("web-1", "node-a", "web", 10),
        ),
        (
            "insert",
            "default/pod/web-2",
            pod("web-2", "node-b", "web", 11),
        ),
        (
            "insert",
            "default/pod/db-1",
            pod("db-1", "node-a", "db", 12),
        ),
        (
            "insert",
            "default/configmap/cm-1",
            configmap("cm-1", "a", 13),
        ),
    ]);

    let (status, list) = node.get("/api/v1/namespaces/default/pods");
    assert_eq!(status, 200, "{list}");
    assert_eq!(list["kind"], "PodList");
    assert_eq!(list["metadata"]["resourceVersion"], "13");
    assert_eq!(names(&list), ["db-1", "web-1", "web-2"]);
    let (_, mine) = node.get("/api/v1/pods?fieldSelector=spec.nodeName%3Dnode-a");
    assert_eq!(names(&mine), ["db-1", "web-1"]);
    let (_, web) = node.get("/api/v1/pods?labelSelector=app+in+(web),app!%3Ddb");
    assert_eq!(names(&web), ["web-1", "web-2"]);
    let (status, one) = node.get("/api/v1/namespaces/default/configmaps/cm-1");
    assert_eq!((status, one["data"]["v"].as_str()), (200, Some("a")));

    // kubectl's Table.
    let (status, body) = kube_http::request(
        node.addr,
        "GET",
        "/api/v1/namespaces/default/pods",
        "application/json;as=Table;v=v1;g=meta.k8s.io,application/json",
        b"",
    )
    .unwrap();
    let table: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!((status, table["kind"].as_str()), (200, Some("Table")));
    assert_eq!(table["columnDefinitions"][0]["name"], "Name");
    assert_eq!(table["rows"].as_array().map(Vec::len), Some(3));

    // A watch from the list's version sees each later change once, as kube-apiserver sends it.
    let watch = Watch::open(
        node.addr,
        "/api/v1/namespaces/default/configmaps?watch=1&resourceVersion=13",
    )
    .unwrap();
    assert_eq!(watch.status, 200);
    node.send(
        "update",
        "default/configmap/cm-1",
        &configmap("cm-1", "b", 20),
    );
    node.send(
        "update",
        "default/configmap/cm-1",
        &configmap("cm-1", "b", 20),
    ); // a resend
    node.send(
        "insert",
        "default/configmap/cm-2",
        &configmap("cm-2", "x", 21),
    );
    node.send(
        "delete",
        "default/configmap/cm-2",
        &configmap("cm-2", "x", 21),
    );
    let mut seen = Vec::new();
    for _ in 0..3 {
        let (_, line) = watch.until(WAIT, |_| true).unwrap();
        seen.push(event(&line));
    }
    assert_eq!(
        seen,
        [
            ("MODIFIED".into(), "cm-1".into(), "20".into()),
            ("ADDED".into(), "cm-2".into(), "21".into()),
            ("DELETED".into(), "cm-2".into(), "22".into()),
        ]
    );
    assert!(
        watch.until(Duration::from_millis(500), |_| true).is_err(),
        "a resend is no event"
    );
    watch.close();

    // A client that saw version 20 resumes after it.
    let resumed = Watch::open(
        node.addr,
        "/api/v1/namespaces/default/configmaps?watch=true&resourceVersion=20",
    )
    .unwrap();
    let (_, line) = resumed.until(WAIT, |_| true).unwrap();
    assert_eq!(event(&line), ("ADDED".into(), "cm-2".into(), "21".into()));
    resumed.close();
}

#[test]
fn bad_input_gets_a_clear_error_and_the_node_keeps_answering() {
    let node = Node::start(&[
        (
            "insert",
            "default/pod/web-1",
            pod("web-1", "node-a", "web", 10),
        ),
        (
            "insert",
            "default/configmap/cm-1",
            configmap("cm-1", "a", 11),
        ),
    ]);
    let status_of = |path: &str| -> (u16, String, String) {
        let (status, v) = node.get(path);
        (
            status,
            v["reason"].as_str().unwrap_or("").to_owned(),
            v["message"].as_str().unwrap_or("").to_owned(),
        )
    };
    let (s, reason, msg) = status_of("/api/v1/pods?labelSelector=app%3D%3D%3Dweb");
    assert_eq!((s, reason.as_str()), (400, "BadRequest"), "{msg}");
    let (s, _, msg) = status_of("/api/v1/pods?fieldSelector=spec.color%3Dred");
    assert_eq!(s, 400);
    assert!(msg.contains("spec.color"), "{msg}");
    let (s, reason, _) = status_of("/api/v1/foos");
    assert_eq!((s, reason.as_str()), (404, "NotFound"));
    let (s, reason, msg) = status_of("/api/v1/namespaces/default/pods/nope");
    assert_eq!((s, reason.as_str()), (404, "NotFound"));
    assert_eq!(msg, "pods \"nope\" not found");
    let (s, _, msg) = status_of("/api/v1/pods?watch=true&resourceVersion=abc");
    assert_eq!(s, 400, "{msg}");
    // A version from before the node's history: 410 Gone as a watch event, so informers relist.
    let old = Watch::open(node.addr, "/api/v1/pods?watch=true&resourceVersion=3").unwrap();
    let (_, line) = old.until(WAIT, |_| true).unwrap();
    let v: Value = serde_json::from_str(&line).unwrap();
    assert_eq!(
        (
            v["type"].as_str(),
            v["object"]["code"].as_u64(),
            v["object"]["reason"].as_str()
        ),
        (Some("ERROR"), Some(410), Some("Expired"))
    );
    // Writes need the cloud.
    let (s, body) = kube_http::request(
        node.addr,
        "POST",
        "/api/v1/namespaces/default/configmaps",
        "application/json",
        br#"{"metadata":{"name":"new"}}"#,
    )
    .unwrap();
    assert_eq!(s, 500);
    assert!(
        String::from_utf8_lossy(&body).contains("connection lost between EdgeCore and CloudCore")
    );
    // More watches than it serves: the rest get 429, and a LIST still answers.
    let extra = 50;
    let max = wedge_metaserver::cache::MAX_WATCHES;
    let mut open = Vec::new();
    let mut refused = 0;
    for _ in 0..(max + extra) {
        let w = Watch::open(node.addr, "/api/v1/configmaps?watch=true").unwrap();
        match w.status {
            200 => open.push(w),
            429 => refused += 1,
            other => panic!("a watch answered {other}"),
        }
    }
    assert_eq!((open.len(), refused), (max, extra));
    let at = Instant::now();
    let (s, list) = node.get("/api/v1/configmaps");
    assert_eq!((s, names(&list)), (200, vec!["cm-1"]));
    println!("LIST with {max} watches open: {:.1?}", at.elapsed());
    // Every open watch gets a change.
    node.send(
        "update",
        "default/configmap/cm-1",
        &configmap("cm-1", "z", 30),
    );
    for w in &open {
        w.until(WAIT, |l| l.contains("\"z\"")).unwrap();
    }
    for w in open {
        w.close();
    }
    // Closed watches are given back.
    let deadline = Instant::now() + WAIT;
    loop {
        let w = Watch::open(node.addr, "/api/v1/configmaps?watch=true").unwrap();
        if w.status == 200 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "closed watches were not given back"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn a_watcher_that_does_not_read_is_ended_and_the_others_get_every_change() {
    use std::io::Write;
    use std::sync::atomic::Ordering;
    let node = Node::start(&[("insert", "default/configmap/big", configmap("big", "0", 10))]);
    // A client that asks for a watch and never reads a byte of it.
    let mut slow = std::net::TcpStream::connect(node.addr).unwrap();
    slow.write_all(
        format!(
            "GET /api/v1/namespaces/default/configmaps?watch=true&resourceVersion=10 HTTP/1.1\r\nHost: {}\r\n\r\n",
            node.addr
        )
        .as_bytes(),
    )
    .unwrap();
    let reader = Watch::open(
        node.addr,
        "/api/v1/namespaces/default/configmaps?watch=true&resourceVersion=10",
    )
    .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    // 2,000 changes of 8 KiB: far more than the slow client's queue and socket buffers hold.
    let filler = "x".repeat(8192);
    let changes = 2000u64;
    for i in 0..changes {
        node.send(
            "update",
            "default/configmap/big",
            &configmap("big", &format!("{i}-{filler}"), 11 + i),
        );
    }
    for i in 0..changes {
        let (_, line) = reader.until(WAIT, |_| true).unwrap();
        assert!(
            line.contains(&format!("\"{i}-x")),
            "change {i} out of order or missing"
        );
    }
    let stats = &node.metaserver.cache().stats;
    assert_eq!(
        stats.shed.load(Ordering::Relaxed),
        1,
        "the slow watcher is ended"
    );
    assert_eq!(
        node.metaserver.cache().watches(),
        1,
        "the reading one stays"
    );
    let (status, list) = node.get("/api/v1/configmaps");
    assert_eq!((status, names(&list)), (200, vec!["big"]));
    drop(slow);
    reader.close();
}
