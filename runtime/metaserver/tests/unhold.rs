//! MetaServer's unhold-upgrade extension on a real bus and a real socket. metamanager's and
//! edged's mailboxes are read here: what MetaServer asks metamanager is answered as
//! metamanager answers a `query` (a JSON array of stored objects as strings), and what it
//! sends edged is checked. The whole path with the real cloud is `tests/realcloud` (hold).

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use wedge_core::health::{Health, ModuleState};
use wedge_core::module::SupervisionSettings;
use wedge_core::{Bus, Content, Mailbox, Supervisor};
use wedge_metaserver::{MetaServer, MetaServerSettings};

const WAIT: Duration = Duration::from_secs(10);

fn pod(name: &str, node: &str, held: bool, phase: &str) -> String {
    json!({
        "metadata": {"name": name, "namespace": "default",
                     "annotations": {"edge.kubeedge.io/hold-upgrade": if held {"true"} else {"false"}}},
        "spec": {"nodeName": node},
        "status": {"phase": phase},
    })
    .to_string()
}

/// Answers metamanager's queries from `pods` until the mailbox closes.
fn metamanager(bus: Bus, mut mailbox: Mailbox, pods: Vec<String>) {
    tokio::spawn(async move {
        while let Some(query) = mailbox.recv().await {
            let resource = query.route.resource.clone();
            let found: Vec<&String> = pods
                .iter()
                .filter(|p| {
                    let v: serde_json::Value = serde_json::from_str(p).unwrap();
                    resource == "default/pod"
                        || resource
                            == format!("default/pod/{}", v["metadata"]["name"].as_str().unwrap())
                })
                .collect();
            let _ = bus.send_response(query.response(Content::json(&found).unwrap()));
        }
    });
}

async fn post(addr: &str, path: &str, body: &str) -> (u16, String) {
    let mut s = tokio::net::TcpStream::connect(addr)
        .await
        .expect("MetaServer listens");
    let request = format!(
        "POST {path} HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    s.write_all(request.as_bytes()).await.unwrap();
    let mut raw = String::new();
    s.read_to_string(&mut raw).await.unwrap();
    let status = raw.split_whitespace().nth(1).unwrap().parse().unwrap();
    (
        status,
        raw.split_once("\r\n\r\n")
            .map(|(_, b)| b.to_owned())
            .unwrap_or_default(),
    )
}

#[tokio::test]
async fn a_held_pod_and_a_node_are_released_and_the_rest_refused() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let addr = format!("127.0.0.1:{port}");
    let bus = Bus::new(64);
    let meta = bus.register("metamanager", "meta").unwrap();
    let mut edged = bus.register("edged", "edged").unwrap();
    metamanager(
        bus.clone(),
        meta,
        vec![
            pod("held-1", "node-a", true, "Pending"),
            pod("held-2", "node-a", true, "Pending"),
            pod("running", "node-a", true, "Running"),
            pod("plain", "node-a", false, "Pending"),
            pod("elsewhere", "node-b", true, "Pending"),
        ],
    );
    let health = Health::new();
    let mut supervisor =
        Supervisor::new(bus.clone(), health.clone(), SupervisionSettings::default());
    supervisor
        .spawn(Arc::new(MetaServer::new(MetaServerSettings {
            listen: addr.clone(),
            node_name: "node-a".into(),
            query_timeout: Duration::from_secs(5),
        })))
        .unwrap();
    let deadline = Instant::now() + WAIT;
    while health.state("metaserver") != Some(ModuleState::Running)
        || tokio::net::TcpStream::connect(&addr).await.is_err()
    {
        assert!(Instant::now() < deadline, "MetaServer did not come up");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    assert_eq!(
        post(&addr, "/api/v1/pods/unhold-upgrade", "default/held-1")
            .await
            .0,
        200
    );
    let release = tokio::time::timeout(WAIT, edged.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(release.route.operation, "unhold-upgrade");
    assert_eq!(release.route.resource, "default/pod/held-1");

    for (body, status, says) in [
        ("held-1", 400, "<namespace>/<name>"),
        ("default/nosuch", 404, "not found"),
        ("default/running", 400, "not in pending phase"),
        ("default/plain", 400, "not marked with hold-upgrade"),
    ] {
        let (got, text) = post(&addr, "/api/v1/pods/unhold-upgrade", body).await;
        assert_eq!(
            (got, text.contains(says)),
            (status, true),
            "{body}: {got} {text:?}"
        );
    }
    assert_eq!(
        post(&addr, "/api/v1/nodes/unhold-upgrade", "node-b")
            .await
            .0,
        404
    );
    assert_eq!(
        post(&addr, "/api/v1/nodes/unhold-upgrade", "  ").await.0,
        400
    );

    // The node: both held Pending pods of node-a, nothing else.
    assert_eq!(
        post(&addr, "/api/v1/nodes/unhold-upgrade", "node-a\n")
            .await
            .0,
        200
    );
    let mut released = Vec::new();
    while let Ok(Some(m)) = tokio::time::timeout(Duration::from_millis(300), edged.recv()).await {
        released.push(m.route.resource);
    }
    assert_eq!(released, ["default/pod/held-1", "default/pod/held-2"]);

    // Other writes need the cloud, which this node has never reached.
    let (status, text) = post(&addr, "/api/v1/namespaces/default/pods", "{}").await;
    assert_eq!(status, 500, "{text}");
    assert!(text.contains("connection lost"), "{text}");
    supervisor.shutdown().await;
}
