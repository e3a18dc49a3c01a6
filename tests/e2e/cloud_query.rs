//! edged's configmap query through the real metamanager and the real cloud link (spec §3): while
//! the cloud is connected the query goes to the cloud and the answer is cached in `meta`; with
//! the cloud gone it is answered from that cache.
//!
//! edged does not exist yet, so the node is built in-process (a real store on a temp SQLite
//! file, the bus, the supervisor, `MetaManager` and `EdgeHub`, as `wedge run` wires them) and
//! the test registers itself on the bus as `edged`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use wedge_core::health::Health;
use wedge_core::module::SupervisionSettings;
use wedge_core::store::StoreOptions;
use wedge_core::{Bus, Content, Message, Store, Supervisor};
use wedge_metamanager::{MetaManager, MetaManagerSettings};
use wedge_tests::cloudhub::{CloudHub, CloudHubOptions};
use wedge_tests::inproc_link;

const NODE: &str = "edge-1";
const WAIT: Duration = Duration::from_secs(15);
const RESOURCE: &str = "default/configmap/cm-1";

/// Polls `condition` until it holds; fails with `what` after `WAIT`.
fn wait_until(what: &str, condition: impl Fn() -> bool) {
    let deadline = Instant::now() + WAIT;
    while !condition() {
        assert!(Instant::now() < deadline, "{what} not within {WAIT:?}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn query() -> Message {
    Message::build("edged", "meta", "query", RESOURCE, Content::null())
}

#[test]
fn configmap_query_goes_to_the_cloud_when_connected_and_to_the_cache_when_not() {
    let mut hub = CloudHub::start(CloudHubOptions::default()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let config = inproc_link::edgehub_config(&hub, &dir.path().join("certs"), NODE).unwrap();
    let db = dir.path().join("edgecore.db");
    let (bus, metamanager, supervisor) = rt.block_on(async {
        let store = Store::open(&db, StoreOptions::default()).unwrap();
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
        supervisor.spawn(metamanager.clone()).unwrap();
        let (edgehub, _) = inproc_link::edgehub(&store, &config, NODE, 1000)
            .await
            .unwrap();
        supervisor.spawn(edgehub).unwrap();
        (bus, metamanager, supervisor)
    });
    // The test is edged: replies to its synchronous requests come back through the bus.
    let _edged = bus.register("edged", "edged").unwrap();
    hub.wait_connected(WAIT).unwrap();
    wait_until("metamanager seeing cloud_connected", || {
        metamanager.cloud_connected()
    });

    // Online: the query reaches the cloud (under a fresh id), the cloud answers it, edged gets
    // the answer, and the object is cached.
    let asked = query();
    let pending = {
        let bus = bus.clone();
        let asked = asked.clone();
        rt.spawn(async move { bus.send_sync("metamanager", asked, WAIT).await })
    };
    let at_cloud = hub
        .wait_for(
            |m| {
                m.message
                    .as_ref()
                    .is_some_and(|m| m.route.operation == "query" && m.route.resource == RESOURCE)
            },
            WAIT,
        )
        .unwrap()
        .message
        .unwrap();
    assert_eq!(at_cloud.route.source, "edged");
    assert_eq!(at_cloud.route.group, "meta");
    assert_ne!(
        at_cloud.header.id, asked.header.id,
        "a remote call uses a fresh id"
    );
    let configmap = serde_json::json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "cm-1", "namespace": "default", "uid": "cm-u1", "resourceVersion": "3"},
        "data": {"key": "value"}
    });
    let mut answer = Message::build(
        "edgecontroller",
        "resource",
        "response",
        RESOURCE,
        Content::json(&serde_json::json!({"Object": configmap, "Err": null})).unwrap(),
    );
    answer.header.parent_id = at_cloud.header.id.clone();
    hub.send(answer.clone()).unwrap();
    let reply = rt.block_on(pending).unwrap().unwrap();
    assert_eq!(reply.header.parent_id, asked.header.id);
    let body: serde_json::Value = reply.content.parse().unwrap();
    assert_eq!(body["Object"], configmap, "{}", reply.content.raw());
    assert!(body["Err"].is_null());
    // The cloud's answer is ACKed back to it.
    hub.wait_for(
        |m| {
            m.message.as_ref().is_some_and(|m| {
                m.route.operation == "response" && m.header.parent_id == answer.header.id
            })
        },
        WAIT,
    )
    .unwrap();
    // Cached before edged was answered.
    let cached: String =
        rusqlite::Connection::open_with_flags(&db, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
            .unwrap()
            .query_row(
                "SELECT value FROM meta WHERE key = ?1 AND type = 'configmap'",
                [RESOURCE],
                |r| r.get(0),
            )
            .unwrap();
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&cached).unwrap(),
        configmap
    );

    // Offline: the hub goes away, the link reports it, and the same query is answered from the
    // cache without reaching any cloud.
    hub.stop();
    wait_until("metamanager seeing cloud_disconnected", || {
        !metamanager.cloud_connected()
    });
    let received_before = hub.received().len();
    let asked = query();
    let reply = rt
        .block_on(bus.send_sync("metamanager", asked.clone(), WAIT))
        .unwrap();
    assert_eq!(reply.header.parent_id, asked.header.id);
    assert_eq!(reply.route.source, "metamanager");
    assert_eq!(reply.route.operation, "response");
    let values: Vec<String> = reply.content.parse().unwrap();
    assert_eq!(values.len(), 1, "{}", reply.content.raw());
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&values[0]).unwrap(),
        configmap
    );
    assert_eq!(hub.received().len(), received_before);

    rt.block_on(supervisor.shutdown());
}
