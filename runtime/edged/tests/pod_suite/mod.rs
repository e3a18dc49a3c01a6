//! The pod suite: edged on the real bus against a real runtime, the one of the test target
//! that includes this module (`crate::RUNTIME`: `pods.rs` Docker, `pods_cri.rs` containerd's
//! CRI). The test plays metamanager (it answers the start-up pod query and receives the status
//! patches) and checks the engine's containers.
//!
//! Needs the running runtime and the `wedge-test/busybox:1` image, both set up by
//! `.ci/setup`; without them the tests fail and say so.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::RUNTIME;
use crate::common::{self, IMAGE, WAIT, unique};
use serde_json::{Value, json};
use wedge_core::bus::Mailbox;
use wedge_core::config::eviction::{Amount, EvictionPolicy, SoftThreshold};
use wedge_core::health::Health;
use wedge_core::module::{SupervisionSettings, Supervisor};
use wedge_core::{Bus, Content, Message};
use wedge_edged::engine::{Engine, ManagedContainer};
use wedge_edged::server::ServerSettings;
use wedge_edged::{Edged, EdgedSettings};

mod dns;
mod dns_server;

/// A node with edged and the test as metamanager.
struct Node {
    bus: Bus,
    meta: Mailbox,
    supervisor: Option<Supervisor>,
    engine: Engine,
    root: tempfile::TempDir,
    /// Last status seen per pod name.
    statuses: HashMap<String, Value>,
    /// Pods edged asked the cloud to remove, with the delete options it sent.
    deleted: Vec<(String, Value)>,
    /// The node name, unique per test so that parallel tests own separate containers.
    name: String,
    /// ConfigMaps and Secrets metamanager holds, by `<ns>/<type>/<name>`.
    objects: HashMap<String, Value>,
    /// Resources whose queries go unanswered (a slow cloud), and the queries held so far.
    hold: Vec<String>,
    held: Vec<Message>,
    edged: Arc<Edged>,
}

/// A pod named `name`. Its containers get 2 s to stop (the shell of the test image ignores
/// SIGTERM, and Kubernetes' default of 30 s would make every deletion wait that long).
fn pod(name: &str, mut spec: Value) -> Value {
    if spec.get("terminationGracePeriodSeconds").is_none() {
        spec["terminationGracePeriodSeconds"] = json!(2);
    }
    json!({
        "metadata": {"name": name, "namespace": "default", "uid": unique("uid")},
        "spec": spec,
    })
}

/// `pod` as the cloud sends it once `kubectl delete` made the deletion graceful.
fn deleting(pod: &Value) -> Value {
    let mut pod = pod.clone();
    pod["metadata"]["deletionTimestamp"] = json!("2026-11-23T10:00:00Z");
    pod["metadata"]["deletionGracePeriodSeconds"] = json!(2);
    pod
}

/// The status of a pod condition `kind` (`"True"`/`"False"`).
fn condition<'a>(status: &'a Value, kind: &str) -> &'a Value {
    status["conditions"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["type"] == kind))
        .map_or(&Value::Null, |c| &c["status"])
}

fn sleeper(name: &str, script: &str) -> Value {
    json!({"name": name, "image": IMAGE, "imagePullPolicy": "Never", "command": ["sh", "-c", script]})
}

impl Node {
    /// Starts edged with `stored` as metamanager's answer to its start-up query.
    async fn start(stored: &[Value], root: Option<(tempfile::TempDir, String)>) -> Node {
        Node::start_with(stored, root, |_| {}).await
    }

    /// Like [`Node::start`], with `tune` applied to the settings.
    async fn start_with(
        stored: &[Value],
        root: Option<(tempfile::TempDir, String)>,
        tune: impl FnOnce(&mut EdgedSettings),
    ) -> Node {
        // `RUST_LOG=wedge_edged=debug` shows what edged did (in the test's output).
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_test_writer()
            .try_init();
        let engine = common::engine_on(RUNTIME).await;
        let bus = Bus::new(1024);
        let mut meta = bus.register("metamanager", "meta").unwrap();
        let (root, name) = root.unwrap_or_else(|| (tempfile::tempdir().unwrap(), unique("node")));
        let mut settings = EdgedSettings::new(name.clone(), root.path());
        settings.relist = Duration::from_millis(200);
        settings.status_interval = Duration::from_secs(2);
        settings.initial_backoff = Duration::from_millis(500);
        settings.max_backoff = Duration::from_secs(2);
        settings.stop_grace = Duration::from_secs(1);
        settings.pod_sandbox_image = common::PAUSE_IMAGE.to_owned();
        settings.runtime_endpoint = common::endpoint(RUNTIME);
        tune(&mut settings);
        let mut supervisor =
            Supervisor::new(bus.clone(), Health::new(), SupervisionSettings::default());
        let edged = Arc::new(Edged::new(settings));
        supervisor.spawn(edged.clone()).unwrap();
        let query = tokio::time::timeout(WAIT, meta.recv())
            .await
            .expect("edged asks metamanager for its pods")
            .unwrap();
        assert_eq!(query.route.operation, "query");
        assert_eq!(query.route.resource, "default/pod");
        let values: Vec<String> = stored.iter().map(Value::to_string).collect();
        let unclaimed = bus.send_response(query.response(Content::json(&values).unwrap()));
        assert!(
            unclaimed.is_none(),
            "edged waits for the answer to its query"
        );
        Node {
            bus,
            meta,
            supervisor: Some(supervisor),
            engine,
            root,
            statuses: HashMap::new(),
            deleted: Vec::new(),
            name,
            objects: HashMap::new(),
            hold: Vec::new(),
            held: Vec::new(),
            edged,
        }
    }

    /// The value of one of edged's metrics, with its labels as written (`name{queue="..."}`).
    fn metric(&self, sample: &str) -> f64 {
        let mut w = wedge_core::metrics::PromWriter::new();
        wedge_core::metrics::MetricsSource::write_metrics(&*self.edged, &mut w);
        let text = w.finish();
        text.lines()
            .find_map(|l| l.strip_prefix(sample)?.trim().parse().ok())
            .unwrap_or_else(|| panic!("no metric {sample} in {text}"))
    }

    async fn send(&self, operation: &str, pod: &Value) {
        let name = pod["metadata"]["name"].as_str().unwrap();
        let msg = Message::build(
            "metamanager",
            "meta",
            operation,
            &format!("default/pod/{name}"),
            Content::json(pod).unwrap(),
        );
        self.bus.send("edged", msg).await.unwrap();
    }

    /// Takes what edged sent metamanager until `done` holds for the status of `name`.
    async fn wait_status(&mut self, name: &str, done: impl Fn(&Value) -> bool) -> Value {
        let deadline = Instant::now() + WAIT;
        loop {
            if let Some(s) = self.statuses.get(name)
                && done(s)
            {
                return s.clone();
            }
            let left = deadline.saturating_duration_since(Instant::now());
            let Ok(Some(msg)) = tokio::time::timeout(left, self.meta.recv()).await else {
                panic!(
                    "no such status of {name}; last: {:?}",
                    self.statuses.get(name)
                );
            };
            self.take(msg);
        }
    }

    /// Plays metamanager for `d`: answers queries and records statuses.
    async fn serve_for(&mut self, d: Duration) {
        let until = Instant::now() + d;
        while let Ok(Some(msg)) = tokio::time::timeout(
            until.saturating_duration_since(Instant::now()),
            self.meta.recv(),
        )
        .await
        {
            self.take(msg);
        }
    }

    fn take(&mut self, msg: Message) {
        let resource = msg.route.resource.clone();
        match msg.route.operation.as_str() {
            "patch" => {
                let name = resource.rsplit('/').next().unwrap().to_owned();
                assert!(resource.starts_with("default/podpatch/"), "{resource}");
                let patch: Value =
                    serde_json::from_str(&msg.content.as_string().expect("patch as string"))
                        .unwrap();
                self.statuses.insert(name, patch["status"].clone());
            }
            "delete" => {
                // What the cloud does with it: removes the pod and answers "OK".
                let options: Value = msg.content.parse().unwrap();
                self.deleted.push((resource, options));
                let _ = self.bus.send_response(msg.response(Content::ok()));
            }
            "query" if self.hold.contains(&resource) => self.held.push(msg),
            // Answered as metamanager does from its table: a list of stored JSON strings.
            "query" => {
                let values: Vec<String> = self
                    .objects
                    .get(&resource)
                    .map(|o| vec![o.to_string()])
                    .unwrap_or_default();
                let reply = msg.response(Content::json(&values).unwrap());
                assert!(
                    self.bus.send_response(reply).is_none(),
                    "edged waits for {resource}"
                );
            }
            other => panic!("unexpected {other} {resource}"),
        }
    }

    /// The app containers of pod `uid` (not its sandbox), by name and restart count.
    async fn containers(&self, uid: &str) -> Vec<ManagedContainer> {
        let mut all: Vec<ManagedContainer> = self
            .engine
            .list(&self.name)
            .await
            .unwrap()
            .into_iter()
            .filter(|c| c.pod_uid == uid && !c.sandbox)
            .collect();
        all.sort_by(|a, b| (&a.container, a.restart_count).cmp(&(&b.container, b.restart_count)));
        all
    }

    async fn stop(mut self) {
        if let Some(s) = self.supervisor.take() {
            s.shutdown().await;
        }
    }
}

fn uid(pod: &Value) -> &str {
    pod["metadata"]["uid"].as_str().unwrap()
}

fn running(status: &Value, containers: usize) -> bool {
    status["phase"] == "Running"
        && status["containerStatuses"]
            .as_array()
            .is_some_and(|c| c.len() == containers && c.iter().all(|c| c["ready"] == true))
}

/// Removes what a test left running on `node`. A removal edged's worker started before the
/// node stopped may still be in progress (the engine answers 409): the loop waits it out.
async fn remove_all(node: &str) {
    let engine = common::engine_on(RUNTIME).await;
    let deadline = Instant::now() + WAIT;
    loop {
        let left = engine.list(node).await.unwrap();
        if left.is_empty() {
            return;
        }
        assert!(Instant::now() < deadline, "containers left: {left:?}");
        for c in left {
            let _ = engine.remove(&c.id).await;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn a_two_container_pod_shares_an_empty_dir_and_is_updated_and_deleted() {
    let name = unique("web");
    let mut web = pod(
        &name,
        json!({
            "containers": [
                sleeper("writer", "echo hello > /shared/greeting; cat /config/mode > /shared/mode; sleep 3600"),
                sleeper("reader", "while [ ! -f /shared/greeting ]; do sleep 0.1; done; echo \"$TOKEN\" > /shared/token; sleep 3600"),
            ],
            "volumes": [
                {"name": "shared", "emptyDir": {}},
                {"name": "config", "configMap": {"name": "app-config"}},
                {"name": "creds", "secret": {"secretName": "app-creds"}},
            ],
        }),
    );
    for c in web["spec"]["containers"].as_array_mut().unwrap() {
        c["volumeMounts"] = json!([
            {"name": "shared", "mountPath": "/shared"},
            {"name": "config", "mountPath": "/config"},
            {"name": "creds", "mountPath": "/creds"},
        ]);
    }
    web["spec"]["containers"][1]["env"] = json!([{"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "app-creds", "key": "token"}}}]);
    let mut node = Node::start(&[], None).await;
    // Without its ConfigMap the pod waits, and says why.
    node.send("insert", &web).await;
    let waiting = node
        .wait_status(&name, |s| {
            let waiting = &s["containerStatuses"][0]["state"]["waiting"];
            // The first status may come before the worker asked for the volumes.
            waiting["reason"] == "ContainerCreating"
                && waiting["message"].as_str().is_some_and(|m| !m.is_empty())
        })
        .await;
    assert!(
        waiting["containerStatuses"][0]["state"]["waiting"]["message"]
            .as_str()
            .unwrap()
            .contains("configmap \"app-config\" not found"),
        "{waiting}"
    );
    node.objects.insert(
        "default/configmap/app-config".into(),
        json!({"metadata": {"name": "app-config"}, "data": {"mode": "edge"}}),
    );
    node.objects.insert(
        "default/secret/app-creds".into(),
        json!({"metadata": {"name": "app-creds"}, "data": {"token": "czNjcmV0"}}),
    );
    let status = node.wait_status(&name, |s| running(s, 2)).await;
    assert_eq!(condition(&status, "Ready"), "True");
    assert!(
        status["podIP"].as_str().is_some_and(|ip| !ip.is_empty()),
        "{status}"
    );
    let greeting = node
        .root
        .path()
        .join("pods")
        .join(uid(&web))
        .join("volumes/kubernetes.io~empty-dir/shared/greeting");
    assert_eq!(std::fs::read_to_string(&greeting).unwrap(), "hello\n");
    let shared = greeting.parent().unwrap();
    let deadline = Instant::now() + WAIT;
    while !shared.join("token").exists() || !shared.join("mode").exists() {
        assert!(
            Instant::now() < deadline,
            "the containers did not write their files"
        );
        node.serve_for(Duration::from_millis(50)).await;
    }
    assert_eq!(
        std::fs::read_to_string(shared.join("mode")).unwrap(),
        "edge",
        "configMap volume"
    );
    assert_eq!(
        std::fs::read_to_string(shared.join("token")).unwrap(),
        "s3cret\n",
        "env from a secret"
    );
    let secret_file = node
        .root
        .path()
        .join("pods")
        .join(uid(&web))
        .join("volumes/kubernetes.io~secret/creds/token");
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&secret_file)
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o400, "secret files are 0400");
    let before = node.containers(uid(&web)).await;
    assert_eq!(
        before
            .iter()
            .map(|c| (c.container.as_str(), c.state.as_str()))
            .collect::<Vec<_>>(),
        [("reader", "running"), ("writer", "running")]
    );
    assert!(
        before
            .iter()
            .all(|c| c.pod_name == name && c.pod_namespace == "default")
    );

    // Metadata only: the containers stay.
    web["metadata"]["labels"] = json!({"tier": "edge"});
    node.send("update", &web).await;
    node.serve_for(Duration::from_millis(800)).await;
    let same = node.containers(uid(&web)).await;
    assert_eq!(
        same.iter().map(|c| &c.id).collect::<Vec<_>>(),
        before.iter().map(|c| &c.id).collect::<Vec<_>>()
    );

    // A changed container is recreated; the other one stays.
    web["spec"]["containers"][1]["command"] =
        json!(["sh", "-c", "cat /shared/greeting; sleep 3601"]);
    web["spec"]["containers"][1]["env"] = json!([]);
    node.send("update", &web).await;
    let deadline = Instant::now() + WAIT;
    loop {
        let now = node.containers(uid(&web)).await;
        let reader = now.iter().find(|c| c.container == "reader");
        if reader.is_some_and(|r| r.id != before[0].id && r.state == "running") {
            let writer = now.iter().find(|c| c.container == "writer").unwrap();
            assert_eq!(writer.id, before[1].id, "the unchanged container is kept");
            assert_eq!(now.len(), 2, "{now:?}");
            break;
        }
        assert!(Instant::now() < deadline, "reader not recreated: {now:?}");
        node.serve_for(Duration::from_millis(100)).await;
    }

    // `kubectl delete pod`: the cloud's update carries deletionTimestamp.
    node.send("update", &deleting(&web)).await;
    let deadline = Instant::now() + WAIT;
    // Containers first, then the sandbox, then the pod's directory.
    while !node.containers(uid(&web)).await.is_empty() || greeting.exists() {
        assert!(
            Instant::now() < deadline,
            "containers or the directory of the deleted pod remain"
        );
        node.serve_for(Duration::from_millis(100)).await;
    }
    let deadline = Instant::now() + WAIT;
    while !node
        .deleted
        .iter()
        .any(|(r, _)| *r == format!("default/pod/{name}"))
    {
        let left = deadline.saturating_duration_since(Instant::now());
        let msg = tokio::time::timeout(left, node.meta.recv())
            .await
            .expect("edged asks the cloud to remove the pod")
            .unwrap();
        node.take(msg);
    }
    // Kubelet's request: no more grace, and only this incarnation of the pod.
    let (_, options) = &node.deleted[0];
    assert_eq!(
        *options,
        json!({"gracePeriodSeconds": 0, "preconditions": {"uid": uid(&web)}})
    );
    node.stop().await;
}

#[tokio::test]
async fn the_containers_of_a_pod_share_its_sandboxs_network_and_a_dead_sandbox_is_replaced() {
    let name = unique("net");
    let mut web = pod(
        &name,
        json!({
            "containers": [
                sleeper("server", "echo up > /www/index.html; httpd -f -p 8080 -h /www"),
                sleeper("client", "while :; do wget -q -O /shared/page http://127.0.0.1:8080/ && sleep 0.2; sleep 0.1; done"),
            ],
            "volumes": [{"name": "shared", "emptyDir": {}}, {"name": "www", "emptyDir": {}}],
        }),
    );
    web["spec"]["containers"][0]["volumeMounts"] = json!([{"name": "www", "mountPath": "/www"}]);
    web["spec"]["containers"][1]["volumeMounts"] =
        json!([{"name": "shared", "mountPath": "/shared"}]);
    let mut node = Node::start(&[], None).await;
    node.send("insert", &web).await;
    let status = node.wait_status(&name, |s| running(s, 2)).await;
    let first_ip = status["podIP"].as_str().unwrap_or_default().to_owned();
    assert!(
        !first_ip.is_empty(),
        "the sandbox's IP is the pod's: {status}"
    );
    let page = node
        .root
        .path()
        .join("pods")
        .join(uid(&web))
        .join("volumes/kubernetes.io~empty-dir/shared/page");
    let deadline = Instant::now() + WAIT;
    while std::fs::read_to_string(&page).unwrap_or_default() != "up\n" {
        assert!(
            Instant::now() < deadline,
            "the client never reached the server on localhost"
        );
        node.serve_for(Duration::from_millis(100)).await;
    }
    let all = node.engine.list(&node.name).await.unwrap();
    let sandboxes: Vec<&ManagedContainer> = all
        .iter()
        .filter(|c| c.pod_uid == uid(&web) && c.sandbox)
        .collect();
    assert_eq!(sandboxes.len(), 1, "one sandbox per pod: {all:?}");
    let sandbox = sandboxes[0].clone();
    assert!(
        all.iter()
            .filter(|c| c.pod_uid == uid(&web) && !c.sandbox)
            .all(|c| c.sandbox_id.as_deref() == Some(sandbox.id.as_str())),
        "both containers joined it: {all:?}"
    );

    // The sandbox dies: a new one is made and both containers run again in it, counted as
    // restarts.
    node.engine
        .stop(&sandbox.id, Duration::from_secs(1))
        .await
        .unwrap();
    let status = node
        .wait_status(&name, |s| {
            // At least once: on CRI, stopping a sandbox stops its containers too, and a pass
            // that still saw the old sandbox running may restart one there first, which fails
            // (its namespaces are gone) and counts, as it would under kubelet.
            running(s, 2)
                && s["containerStatuses"]
                    .as_array()
                    .is_some_and(|c| c.iter().all(|c| c["restartCount"].as_u64() >= Some(1)))
        })
        .await;
    assert!(
        status["podIP"].as_str().is_some_and(|ip| !ip.is_empty()),
        "{status}"
    );
    let all = node.engine.list(&node.name).await.unwrap();
    let current: Vec<&ManagedContainer> = all
        .iter()
        .filter(|c| c.pod_uid == uid(&web) && c.sandbox && c.state == "running")
        .collect();
    assert_eq!(current.len(), 1, "{all:?}");
    assert_ne!(current[0].id, sandbox.id, "a new sandbox");
    assert_eq!(current[0].restart_count, 1, "its attempt is the next");
    std::fs::remove_file(&page).unwrap();
    let deadline = Instant::now() + WAIT;
    while std::fs::read_to_string(&page).unwrap_or_default() != "up\n" {
        assert!(
            Instant::now() < deadline,
            "the containers do not share the new sandbox's network"
        );
        node.serve_for(Duration::from_millis(100)).await;
    }

    // Deleting the pod removes its containers and its sandbox.
    node.send("delete", &web).await;
    let deadline = Instant::now() + WAIT;
    while node
        .engine
        .list(&node.name)
        .await
        .unwrap()
        .iter()
        .any(|c| c.pod_uid == uid(&web))
    {
        assert!(Instant::now() < deadline, "the pod's containers stayed");
        node.serve_for(Duration::from_millis(100)).await;
    }
    let name = node.name.clone();
    node.stop().await;
    remove_all(&name).await;
}

#[tokio::test]
async fn an_exiting_container_is_restarted_per_policy_with_back_off() {
    let always = unique("crash");
    let never = unique("once");
    let crash = pod(&always, json!({"containers": [sleeper("app", "exit 3")]}));
    let once = pod(
        &never,
        json!({"restartPolicy": "Never", "containers": [sleeper("app", "exit 0")]}),
    );
    let mut node = Node::start(&[], None).await;
    node.send("insert", &crash).await;
    node.send("insert", &once).await;
    let status = node
        .wait_status(&always, |s| {
            s["containerStatuses"][0]["restartCount"].as_u64() >= Some(2)
        })
        .await;
    assert_eq!(status["phase"], "Running", "{status}");
    // Between restarts the container waits in CrashLoopBackOff.
    node.wait_status(&always, |s| {
        s["containerStatuses"][0]["state"]["waiting"]["reason"] == "CrashLoopBackOff"
    })
    .await;
    // Only the newest dead container is kept.
    assert!(node.containers(uid(&crash)).await.len() <= 2);

    let status = node
        .wait_status(&never, |s| s["phase"] == "Succeeded")
        .await;
    assert_eq!(
        status["containerStatuses"][0]["state"]["terminated"]["reason"],
        "Completed"
    );
    assert_eq!(status["containerStatuses"][0]["restartCount"], 0);
    let name = node.name.clone();
    node.stop().await;
    remove_all(&name).await;
}

/// A container writing ~12 KB/s under a 4 KiB policy: on CRI its log is rotated by kubelet's
/// rules, nothing is lost at a rotation, and `kubectl logs -f` (the node's `/containerLogs`
/// with `follow`) reads on across every rotation; Docker's logs are left to dockerd.
#[tokio::test]
async fn a_chatty_containers_log_is_rotated_on_cri_and_left_to_docker() {
    let name = unique("chatty");
    // About 10 KB/s of numbered lines.
    let chatty = pod(
        &name,
        json!({"containers": [sleeper(
            "app",
            "i=0; while true; do i=$((i+1)); echo \"line $i 01234567890123456789012345678901234567890123456789012345678901234567890123456789\"; sleep 0.01; done",
        )]}),
    );
    let policy = wedge_edged::log_rotation::LogRotationPolicy {
        max_size: 4 << 10,
        max_files: 3,
        interval: Duration::from_millis(300),
    };
    // The node's kubelet port, so `kubectl logs -f`'s request can follow the file while it
    // is rotated under it.
    let port = kubelet_port();
    let mut node = Node::start_with(&[], None, |s| {
        s.log_rotation = Some(policy);
        s.server = Some(logs_on_the_port(s.node_name.clone(), port));
    })
    .await;
    node.send("insert", &chatty).await;
    node.wait_status(&name, |s| running(s, 1)).await;
    let follower = tokio::spawn(kubelet_get(
        port,
        format!("/containerLogs/default/{name}/app?follow=true"),
        Duration::from_millis(4500),
    ));
    node.serve_for(Duration::from_secs(4)).await;
    let followed = follower.await.unwrap();
    let log = node
        .root
        .path()
        .join("pod-logs")
        .join(format!("default_{name}_{}", uid(&chatty)))
        .join("app/0.log");
    let rotated = wedge_edged::log_rotation::rotated_files(&log).unwrap_or_default();
    let count = node.metric("wedge_edged_container_logs_rotated_total");
    match RUNTIME {
        common::Runtime::Docker => {
            // Docker writes its own logs (its daemon's log-opts); edged touches none.
            assert!(rotated.is_empty(), "{rotated:?}");
            assert_eq!(count, 0.0);
        }
        common::Runtime::Cri => {
            // ~40 KB written at 4 KiB per file: rotated many times, at most 2 rotated files
            // kept, and the runtime writes the new file at the same path.
            assert!(count >= 3.0, "rotations: {count}");
            assert_eq!(rotated.len(), 2, "{rotated:?}");
            for file in &rotated {
                let text = std::fs::read_to_string(file).unwrap();
                assert!(
                    text.len() >= 4 << 10,
                    "{} holds {} bytes",
                    file.display(),
                    text.len()
                );
            }
            // Nothing lost at a rotation: the newest rotated file and the current one
            // continue each other's numbering.
            let number = |line: &str| -> Option<u64> {
                line.split(" line ").nth(1)?.split(' ').next()?.parse().ok()
            };
            let last_rotated = std::fs::read_to_string(&rotated[1]).unwrap();
            let current = std::fs::read_to_string(&log).unwrap();
            let before = last_rotated.lines().rev().find_map(number).unwrap();
            let after = current.lines().filter_map(number).next().unwrap();
            assert_eq!(after, before + 1, "{last_rotated}\n---\n{current}");
            // The follower read on across every rotation: one run of numbers, none missing
            // or twice, well past the first file.
            let numbers: Vec<u64> = followed
                .lines()
                .filter_map(|l| l.strip_prefix("line ")?.split(' ').next()?.parse().ok())
                .collect();
            assert!(
                numbers.len() > 100,
                "followed {} lines: {followed}",
                numbers.len()
            );
            for pair in numbers.windows(2) {
                assert_eq!(pair[1], pair[0] + 1, "the followed log skips: {pair:?}");
            }
        }
    }
    let name = node.name.clone();
    node.stop().await;
    remove_all(&name).await;
}

/// The node's kubelet server with its read-only port on `port`, serving `/containerLogs`
/// there too (`wedge.edged.readOnlyPortLogs`), which these tests read logs from.
fn logs_on_the_port(node: String, port: std::net::SocketAddr) -> ServerSettings {
    let mut settings = ServerSettings::new(node, port);
    settings.read_only_logs = true;
    settings
}

/// A loopback address for a node's kubelet port.
fn kubelet_port() -> std::net::SocketAddr {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .unwrap()
}

/// What a `GET path` on the node's kubelet port answers within `window` (the body, read as an
/// HTTP/1.0 client reads one: to the end of the connection).
async fn kubelet_get(port: std::net::SocketAddr, path: String, window: Duration) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(port).await.unwrap();
    stream
        .write_all(format!("GET {path} HTTP/1.0\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(window, stream.read_to_end(&mut answer)).await;
    let answer = String::from_utf8_lossy(&answer).into_owned();
    let (head, body) = answer.split_once("\r\n\r\n").unwrap_or((&answer, ""));
    assert!(head.starts_with("HTTP/1.0 200"), "{head}\n\n{body}");
    body.to_owned()
}

/// Kubelet's `seccompDefault`: a container that names no seccomp profile runs unconfined
/// (kubelet's default) or, with the key set, under the runtime's default profile; a profile
/// the container names is kept either way. Read from the kernel (`Seccomp:` in
/// `/proc/self/status`: 0 none, 2 a filter) through the node's `/containerLogs`.
#[tokio::test]
async fn seccomp_default_decides_for_containers_that_name_no_profile() {
    for runtime_default in [false, true] {
        let name = unique("seccomp");
        let report = "busybox grep Seccomp: /proc/self/status; sleep 3600";
        let mut p = pod(
            &name,
            json!({"containers": [sleeper("plain", report), sleeper("asked", report)]}),
        );
        p["spec"]["containers"][1]["securityContext"] =
            json!({"seccompProfile": {"type": "RuntimeDefault"}});
        let port = kubelet_port();
        let mut node = Node::start_with(&[], None, |s| {
            s.seccomp_default = runtime_default;
            s.server = Some(logs_on_the_port(s.node_name.clone(), port));
        })
        .await;
        node.send("insert", &p).await;
        node.wait_status(&name, |s| running(s, 2)).await;
        let plain = if runtime_default { 2 } else { 0 };
        for (container, mode) in [("plain", plain), ("asked", 2)] {
            let path = format!("/containerLogs/default/{name}/{container}");
            let deadline = Instant::now() + WAIT;
            let out = loop {
                let out = kubelet_get(port, path.clone(), Duration::from_secs(5)).await;
                if out.contains("Seccomp:") || Instant::now() > deadline {
                    break out;
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            };
            assert!(
                out.contains(&format!("Seccomp:\t{mode}")),
                "seccompDefault {runtime_default}, container {container}: {out:?}"
            );
        }
        let node_name = node.name.clone();
        node.stop().await;
        remove_all(&node_name).await;
    }
}

#[tokio::test]
async fn bad_specs_and_missing_images_are_reported_and_other_pods_run() {
    let bad_volume = unique("nfs");
    let no_image = unique("ghost");
    let good = unique("fine");
    let mut nfs = pod(
        &bad_volume,
        json!({"containers": [sleeper("app", "sleep 3600")],
        "volumes": [{"name": "data", "nfs": {"server": "nas", "path": "/"}}]}),
    );
    nfs["spec"]["containers"][0]["volumeMounts"] = json!([{"name": "data", "mountPath": "/data"}]);
    let ghost = pod(
        &no_image,
        json!({"containers": [{"name": "app", "image": "wedge-test/does-not-exist:1", "imagePullPolicy": "IfNotPresent"}]}),
    );
    let fine = pod(&good, json!({"containers": [sleeper("app", "sleep 3600")]}));
    let mut node = Node::start(&[], None).await;
    for p in [&nfs, &ghost, &fine] {
        node.send("insert", p).await;
    }
    let status = node
        .wait_status(&bad_volume, |s| s["reason"].is_string())
        .await;
    assert_eq!(status["phase"], "Pending");
    assert_eq!(status["reason"], "InvalidPodSpec");
    assert!(
        status["message"]
            .as_str()
            .unwrap()
            .contains("volume source \"nfs\" is not supported"),
        "{status}"
    );
    let status = node
        .wait_status(&no_image, |s| {
            s["containerStatuses"][0]["state"]["waiting"]["reason"] == "ErrImagePull"
        })
        .await;
    assert_eq!(status["phase"], "Pending");
    // The failed pull is queued again behind its back-off rather than tried every relist
    // (booked when its worker returns, which may be just after the status went out).
    let deadline = Instant::now() + WAIT;
    while node.metric("wedge_edged_pod_work_retries_total") < 1.0 {
        assert!(
            Instant::now() < deadline,
            "the failed pull was not queued again"
        );
        node.serve_for(Duration::from_millis(50)).await;
    }
    node.wait_status(&good, |s| running(s, 1)).await;
    assert!(node.containers(uid(&nfs)).await.is_empty());
    node.send("delete", &fine).await;
    let name = node.name.clone();
    node.stop().await;
    remove_all(&name).await;
}

#[tokio::test]
async fn a_slow_pod_holds_up_neither_other_pods_nor_deletions() {
    let (slow, quick, doomed) = (unique("slow"), unique("quick"), unique("doomed"));
    let mut slow_pod = pod(
        &slow,
        json!({"containers": [sleeper("app", "sleep 3600")],
        "volumes": [{"name": "config", "configMap": {"name": "slow-config"}}]}),
    );
    slow_pod["spec"]["containers"][0]["volumeMounts"] =
        json!([{"name": "config", "mountPath": "/config"}]);
    let quick_pod = pod(
        &quick,
        json!({"containers": [sleeper("app", "sleep 3600")]}),
    );
    let doomed_pod = pod(
        &doomed,
        json!({"containers": [sleeper("app", "sleep 3600")]}),
    );
    // Its ConfigMap's query goes unanswered for up to a minute: the slow pod's worker waits.
    let mut node = Node::start_with(&[], None, |s| {
        s.object_timeout = Duration::from_secs(60);
    })
    .await;
    node.hold.push("default/configmap/slow-config".into());
    node.send("insert", &doomed_pod).await;
    node.wait_status(&doomed, |s| running(s, 1)).await;
    node.send("insert", &slow_pod).await;
    let deadline = Instant::now() + WAIT;
    while node.held.is_empty() {
        assert!(
            Instant::now() < deadline,
            "edged never asked for the ConfigMap"
        );
        node.serve_for(Duration::from_millis(50)).await;
    }
    // While it waits, another pod starts and a deleted one is removed.
    node.send("insert", &quick_pod).await;
    node.send("update", &deleting(&doomed_pod)).await;
    node.wait_status(&quick, |s| running(s, 1)).await;
    while !node.containers(uid(&doomed_pod)).await.is_empty()
        || !node.deleted.iter().any(|(r, _)| r.ends_with(&doomed))
    {
        assert!(Instant::now() < deadline, "the deleted pod was not removed");
        node.serve_for(Duration::from_millis(50)).await;
    }
    assert_eq!(
        node.metric("wedge_edged_pod_workers_running{queue=\"additions\"}"),
        1.0,
        "only the slow pod's worker is still busy"
    );
    // The slow pod's worker was waiting all along: it still takes the answer, and runs.
    node.objects.insert(
        "default/configmap/slow-config".into(),
        json!({"metadata": {"name": "slow-config"}, "data": {"mode": "late"}}),
    );
    for query in std::mem::take(&mut node.held) {
        let values = vec![node.objects["default/configmap/slow-config"].to_string()];
        let reply = query.response(Content::json(&values).unwrap());
        assert!(
            node.bus.send_response(reply).is_none(),
            "the slow pod's worker still waited for its ConfigMap"
        );
    }
    node.hold.clear();
    node.wait_status(&slow, |s| running(s, 1)).await;
    let name = node.name.clone();
    node.stop().await;
    remove_all(&name).await;
}

#[tokio::test]
async fn a_restart_keeps_stored_pods_running_and_removes_orphans() {
    let kept = unique("kept");
    let gone = unique("gone");
    let keep = pod(&kept, json!({"containers": [sleeper("app", "sleep 3600")]}));
    let drop = pod(&gone, json!({"containers": [sleeper("app", "sleep 3600")]}));
    let mut node = Node::start(&[], None).await;
    node.send("insert", &keep).await;
    node.send("insert", &drop).await;
    node.wait_status(&kept, |s| running(s, 1)).await;
    node.wait_status(&gone, |s| running(s, 1)).await;
    let before = node.containers(uid(&keep)).await;
    let root = std::mem::replace(&mut node.root, tempfile::tempdir().unwrap());
    let name = node.name.clone();
    node.stop().await;

    // The node comes back; local state holds only `kept` (`gone` was deleted meanwhile).
    let mut node = Node::start(std::slice::from_ref(&keep), Some((root, name))).await;
    node.wait_status(&kept, |s| running(s, 1)).await;
    assert_eq!(
        node.containers(uid(&keep))
            .await
            .iter()
            .map(|c| &c.id)
            .collect::<Vec<_>>(),
        before.iter().map(|c| &c.id).collect::<Vec<_>>(),
        "a stored pod is not recreated"
    );
    let deadline = Instant::now() + WAIT;
    while !node.containers(uid(&drop)).await.is_empty() {
        assert!(Instant::now() < deadline, "orphan containers remain");
        node.serve_for(Duration::from_millis(100)).await;
    }
    node.send("delete", &keep).await;
    let name = node.name.clone();
    node.stop().await;
    remove_all(&name).await;
}

#[tokio::test]
async fn a_failing_liveness_probe_restarts_and_readiness_gates_ready() {
    let sick = unique("sick");
    let slow = unique("slow");
    let mut liveness = pod(
        &sick,
        json!({"containers": [sleeper("app", "sleep 2; touch /tmp/dead; sleep 3600")]}),
    );
    liveness["spec"]["containers"][0]["livenessProbe"] = json!({
        "exec": {"command": ["sh", "-c", "test ! -f /tmp/dead"]},
        "periodSeconds": 1, "failureThreshold": 2
    });
    let mut readiness = pod(
        &slow,
        json!({"containers": [sleeper(
            "web",
            "mkdir -p /www; httpd -p 8080 -h /www; sleep 2; echo ok > /www/ready; sleep 3600"
        )]}),
    );
    readiness["spec"]["containers"][0]["ports"] = json!([{"name": "http", "containerPort": 8080}]);
    readiness["spec"]["containers"][0]["startupProbe"] =
        json!({"tcpSocket": {"port": "http"}, "periodSeconds": 1, "failureThreshold": 30});
    readiness["spec"]["containers"][0]["readinessProbe"] =
        json!({"httpGet": {"path": "/ready", "port": 8080}, "periodSeconds": 1});
    let mut node = Node::start(&[], None).await;
    node.send("insert", &liveness).await;
    node.send("insert", &readiness).await;

    // Running but not ready until /ready answers 200.
    let status = node
        .wait_status(&slow, |s| {
            s["phase"] == "Running" && s["containerStatuses"][0]["started"] == true
        })
        .await;
    assert_eq!(status["containerStatuses"][0]["ready"], false, "{status}");
    assert_eq!(condition(&status, "Ready"), "False");
    let status = node.wait_status(&slow, |s| running(s, 1)).await;
    assert_eq!(condition(&status, "Ready"), "True");
    assert_eq!(status["containerStatuses"][0]["restartCount"], 0);

    // The liveness probe fails twice once /tmp/dead exists: the container is restarted.
    let status = node
        .wait_status(&sick, |s| {
            s["containerStatuses"][0]["restartCount"].as_u64() >= Some(1)
        })
        .await;
    assert_eq!(status["phase"], "Running", "{status}");
    let name = node.name.clone();
    node.stop().await;
    remove_all(&name).await;
}

#[tokio::test]
async fn static_pods_follow_their_manifest_files_and_stay_local() {
    let manifests = tempfile::tempdir().unwrap();
    let file = manifests.path().join("agent.yaml");
    let manifest = format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: agent\nspec:\n  terminationGracePeriodSeconds: 2\n  containers:\n  - name: app\n    image: {IMAGE}\n    imagePullPolicy: Never\n    command: [sleep, '3600']\n"
    );
    std::fs::write(&file, &manifest).unwrap();
    let dir = manifests.path().to_owned();
    let mut node = Node::start_with(&[], None, |s| {
        s.static_pod_dir = Some(dir);
        s.static_check = Duration::from_millis(300);
    })
    .await;
    let running_static = |node: &Node| {
        let name = format!("agent-{}", node.name);
        let engine = node.engine.clone();
        let node_name = node.name.clone();
        async move {
            engine
                .list(&node_name)
                .await
                .unwrap()
                .into_iter()
                .filter(|c| c.pod_name == name && c.state == "running" && !c.sandbox)
                .collect::<Vec<_>>()
        }
    };
    let deadline = Instant::now() + WAIT;
    let first = loop {
        let now = running_static(&node).await;
        if now.len() == 1 {
            break now[0].clone();
        }
        assert!(Instant::now() < deadline, "static pod not started");
        node.serve_for(Duration::from_millis(100)).await;
    };

    // An edited manifest is a new pod: its container replaces the old one.
    std::fs::write(&file, manifest.replace("3600", "3601")).unwrap();
    let deadline = Instant::now() + WAIT;
    loop {
        let now = running_static(&node).await;
        if now.len() == 1 && now[0].pod_uid != first.pod_uid {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "edited static pod not replaced: {now:?}"
        );
        node.serve_for(Duration::from_millis(100)).await;
    }

    // A removed manifest stops the pod.
    std::fs::remove_file(&file).unwrap();
    let deadline = Instant::now() + WAIT;
    while !running_static(&node).await.is_empty() {
        assert!(Instant::now() < deadline, "removed static pod still runs");
        node.serve_for(Duration::from_millis(100)).await;
    }
    // None of this was reported to the cloud: the pod is the node's own.
    assert!(
        !node.statuses.keys().any(|k| k.starts_with("agent-")),
        "{:?}",
        node.statuses.keys()
    );
    assert!(node.deleted.is_empty(), "{:?}", node.deleted);
    let name = node.name.clone();
    node.stop().await;
    remove_all(&name).await;
}

/// The status of init container `i` of a pod status.
fn init_status(status: &Value, i: usize) -> &Value {
    &status["initContainerStatuses"][i]
}

#[tokio::test]
async fn init_containers_run_in_order_to_completion_and_again_in_a_new_sandbox() {
    let name = unique("init");
    let mut prepared = pod(
        &name,
        json!({
            "initContainers": [
                sleeper("first", "echo one >> /work/log"),
                sleeper("second", "sleep 1; echo two >> /work/log"),
            ],
            "containers": [sleeper("app", "cp /work/log /work/seen; sleep 3600")],
            "volumes": [{"name": "work", "emptyDir": {}}],
        }),
    );
    for path in [
        "/spec/initContainers/0",
        "/spec/initContainers/1",
        "/spec/containers/0",
    ] {
        prepared.pointer_mut(path).unwrap()["volumeMounts"] =
            json!([{"name": "work", "mountPath": "/work"}]);
    }
    let mut node = Node::start(&[], None).await;
    node.send("insert", &prepared).await;

    // While the second init container runs, the pod is Pending and not Initialized, and the
    // app container waits for the init phase.
    let status = node
        .wait_status(&name, |s| init_status(s, 1)["state"]["running"].is_object())
        .await;
    assert_eq!(status["phase"], "Pending", "{status}");
    assert_eq!(condition(&status, "Initialized"), "False", "{status}");
    assert_eq!(
        init_status(&status, 0)["state"]["terminated"]["reason"],
        "Completed",
        "{status}"
    );
    assert_eq!(
        status["containerStatuses"][0]["state"],
        json!({"waiting": {"reason": "PodInitializing"}}),
        "{status}"
    );
    assert!(
        node.containers(uid(&prepared))
            .await
            .iter()
            .all(|c| c.container != "app"),
        "the app container waits for the init containers"
    );

    let status = node.wait_status(&name, |s| running(s, 1)).await;
    assert_eq!(condition(&status, "Initialized"), "True", "{status}");
    for i in 0..2 {
        let init = init_status(&status, i);
        assert_eq!(init["ready"], true, "{status}");
        assert_eq!(init["state"]["terminated"]["exitCode"], 0, "{status}");
        assert_eq!(init["restartCount"], 0, "{status}");
    }
    let work = node
        .root
        .path()
        .join("pods")
        .join(uid(&prepared))
        .join("volumes/kubernetes.io~empty-dir/work");
    // Running is reported once the app's process started; its `cp` may come a moment later.
    let deadline = Instant::now() + WAIT;
    while !work.join("seen").exists() {
        assert!(Instant::now() < deadline, "the app never copied the log");
        node.serve_for(Duration::from_millis(100)).await;
    }
    node.serve_for(Duration::from_millis(200)).await;
    assert_eq!(
        std::fs::read_to_string(work.join("seen")).unwrap(),
        "one\ntwo\n",
        "the init containers ran in order before the app"
    );

    // A new sandbox runs the init phase again (kubelet's rule), then the app.
    let sandbox = node
        .engine
        .list(&node.name)
        .await
        .unwrap()
        .into_iter()
        .find(|c| c.pod_uid == uid(&prepared) && c.sandbox)
        .expect("the pod's sandbox");
    node.engine
        .stop(&sandbox.id, Duration::from_secs(1))
        .await
        .unwrap();
    let status = node
        .wait_status(&name, |s| {
            // At least once (see the sandbox test: a restart in the dying sandbox counts too).
            running(s, 1) && s["containerStatuses"][0]["restartCount"].as_u64() >= Some(1)
        })
        .await;
    assert_eq!(init_status(&status, 1)["restartCount"], 1, "{status}");
    assert_eq!(
        std::fs::read_to_string(work.join("log")).unwrap(),
        "one\ntwo\none\ntwo\n"
    );

    node.send("delete", &prepared).await;
    let deadline = Instant::now() + WAIT;
    while node
        .engine
        .list(&node.name)
        .await
        .unwrap()
        .iter()
        .any(|c| c.pod_uid == uid(&prepared))
    {
        assert!(Instant::now() < deadline, "the pod's containers stayed");
        node.serve_for(Duration::from_millis(100)).await;
    }
    let name = node.name.clone();
    node.stop().await;
    remove_all(&name).await;
}

#[tokio::test]
async fn a_failing_init_container_is_retried_with_back_off_and_fails_a_never_pod() {
    let retried = unique("initretry");
    let failed = unique("initfail");
    let flaky = unique("initflaky");
    let app = || sleeper("app", "sleep 3600");
    let retrying = pod(
        &retried,
        json!({"initContainers": [sleeper("check", "exit 1")], "containers": [app()]}),
    );
    let once = pod(
        &failed,
        json!({"restartPolicy": "Never",
               "initContainers": [sleeper("check", "exit 1")], "containers": [app()]}),
    );
    let mut second_try = pod(
        &flaky,
        json!({"restartPolicy": "OnFailure",
               "initContainers": [sleeper("check", "test -e /work/tried && exit 0; touch /work/tried; exit 1")],
               "containers": [app()],
               "volumes": [{"name": "work", "emptyDir": {}}]}),
    );
    second_try["spec"]["initContainers"][0]["volumeMounts"] =
        json!([{"name": "work", "mountPath": "/work"}]);
    let mut node = Node::start(&[], None).await;
    for p in [&retrying, &once, &second_try] {
        node.send("insert", p).await;
    }

    // Always: run again and again, with the crash back-off in between; the app never starts.
    let status = node
        .wait_status(&retried, |s| {
            init_status(s, 0)["restartCount"].as_u64() >= Some(2)
        })
        .await;
    assert_eq!(status["phase"], "Pending", "{status}");
    node.wait_status(&retried, |s| {
        init_status(s, 0)["state"]["waiting"]["reason"] == "CrashLoopBackOff"
    })
    .await;

    // Never: the pod has failed, and nothing runs again.
    let status = node.wait_status(&failed, |s| s["phase"] == "Failed").await;
    assert_eq!(
        init_status(&status, 0)["state"]["terminated"]["exitCode"],
        1,
        "{status}"
    );
    assert_eq!(init_status(&status, 0)["restartCount"], 0, "{status}");

    // OnFailure: the second run succeeds and the app starts.
    let status = node.wait_status(&flaky, |s| running(s, 1)).await;
    assert_eq!(init_status(&status, 0)["restartCount"], 1, "{status}");

    node.serve_for(Duration::from_secs(1)).await;
    for p in [&retrying, &once] {
        assert!(
            node.containers(uid(p))
                .await
                .iter()
                .all(|c| c.container != "app"),
            "no app container runs before its init containers completed"
        );
    }
    assert_eq!(
        node.containers(uid(&once)).await.len(),
        1,
        "never run again"
    );
    let name = node.name.clone();
    node.stop().await;
    remove_all(&name).await;
}

#[tokio::test]
async fn a_missing_runtime_keeps_edged_up_and_its_pods_name_the_endpoint() {
    // A socket of the suite runtime's kind where nothing listens.
    let missing = tempfile::tempdir().unwrap();
    let socket = match RUNTIME {
        common::Runtime::Docker => "docker.sock",
        common::Runtime::Cri => "containerd.sock",
    };
    let path = missing.path().join(socket).display().to_string();
    let endpoint = format!("unix://{path}");
    let mut node = Node::start_with(&[], None, |s| s.runtime_endpoint = endpoint.clone()).await;
    let name = unique("no-runtime");
    node.send(
        "insert",
        &pod(&name, json!({"containers": [sleeper("app", "sleep 3600")]})),
    )
    .await;
    let status = node
        .wait_status(&name, |s| {
            s["containerStatuses"][0]["state"]["waiting"]["reason"] == "ContainerCreating"
        })
        .await;
    let message = status["containerStatuses"][0]["state"]["waiting"]["message"]
        .as_str()
        .unwrap_or_default();
    assert!(message.contains(&path), "{status}");
    assert_eq!(status["phase"], "Pending", "{status}");
    // edged is still up: it keeps answering for new pods.
    let other = unique("no-runtime-2");
    node.send(
        "insert",
        &pod(
            &other,
            json!({"containers": [sleeper("app", "sleep 3600")]}),
        ),
    )
    .await;
    node.wait_status(&other, |s| {
        s["containerStatuses"][0]["state"]["waiting"]["message"]
            .as_str()
            .is_some_and(|m| m.contains(&path))
    })
    .await;
    node.stop().await;
}

/// `subPath` and `subPathExpr` mounts see what is inside the volume at that path, through
/// symlinks that stay inside; one whose path leads out of the volume (a symlink to `/etc` left
/// by the pod's own init container: CVE-2017-1002101) is refused with kubelet's reason and the
/// container never starts. A deleted pod's sub-path binds come down before its directory goes.
#[tokio::test]
async fn sub_path_mounts_stay_inside_their_volume() {
    let good = unique("subpath");
    let bad = unique("escape");
    let prep = |script: &str| {
        json!([{"name": "prep", "image": IMAGE, "imagePullPolicy": "Never",
                "command": ["sh", "-c", script],
                "volumeMounts": [{"name": "v", "mountPath": "/v"}]}])
    };
    let mut inside = pod(
        &good,
        json!({"containers": [sleeper("app", "sleep 3600")], "volumes": [{"name": "v", "emptyDir": {}}]}),
    );
    inside["spec"]["initContainers"] =
        prep("mkdir -p /v/data && echo hello > /v/data/greeting && ln -s data /v/link-in");
    inside["spec"]["containers"][0]["env"] = json!([{"name": "PART", "value": "made"}]);
    inside["spec"]["containers"][0]["volumeMounts"] = json!([
        {"name": "v", "mountPath": "/d", "subPath": "data"},
        {"name": "v", "mountPath": "/l", "subPath": "link-in"},
        {"name": "v", "mountPath": "/g", "subPath": "data/greeting", "readOnly": true},
        {"name": "v", "mountPath": "/x", "subPathExpr": "data/$(PART)"}
    ]);
    let mut out = pod(
        &bad,
        json!({"containers": [sleeper("app", "sleep 3600")], "volumes": [{"name": "v", "emptyDir": {}}]}),
    );
    out["spec"]["initContainers"] = prep("ln -s /etc /v/escape");
    out["spec"]["containers"][0]["volumeMounts"] =
        json!([{"name": "v", "mountPath": "/e", "subPath": "escape"}]);
    let mut node = Node::start(&[], None).await;
    node.send("insert", &inside).await;
    node.send("insert", &out).await;
    node.wait_status(&good, |s| running(s, 1)).await;
    let app = node
        .containers(uid(&inside))
        .await
        .into_iter()
        .find(|c| c.container == "app")
        .unwrap();
    for (cmd, want) in [
        ("cat /d/greeting /l/greeting /g", "hello\nhello\nhello\n"),
        ("test -d /x && echo made-on-demand", "made-on-demand\n"),
        ("(echo x > /g) 2>/dev/null || echo read-only", "read-only\n"),
    ] {
        let (code, output) = node
            .engine
            .exec(
                &app.id,
                &["sh".into(), "-c".into(), cmd.into()],
                Duration::from_secs(10),
            )
            .await
            .unwrap();
        assert_eq!((code, output.as_str()), (0, want), "{cmd}");
    }
    let status = node
        .wait_status(&bad, |s| {
            s["containerStatuses"][0]["state"]["waiting"]["reason"] == "CreateContainerConfigError"
        })
        .await;
    let message = status["containerStatuses"][0]["state"]["waiting"]["message"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(message.contains("leads out of volume"), "{message}");
    assert!(
        node.containers(uid(&out))
            .await
            .iter()
            .all(|c| c.container != "app"),
        "the app container never started"
    );
    // Deleted: binds down, then the directory (and /etc untouched, of course).
    let pod_dir = node.root.path().join("pods").join(uid(&inside));
    assert!(pod_dir.join("volume-subpaths").exists());
    node.send("delete", &inside).await;
    node.send("delete", &out).await;
    let deadline = Instant::now() + WAIT;
    while pod_dir.exists() {
        assert!(Instant::now() < deadline, "the pod directory stayed");
        node.serve_for(Duration::from_millis(100)).await;
    }
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    assert!(
        !mounts.contains(uid(&inside)),
        "no sub-path bind left: {mounts}"
    );
    assert!(std::path::Path::new("/etc/passwd").exists());
    let name = node.name.clone();
    node.stop().await;
    remove_all(&name).await;
}

/// A tmpfs of `mib` MiB mounted on a new temporary directory: a small node filesystem.
struct SmallDisk {
    dir: Option<tempfile::TempDir>,
    path: std::path::PathBuf,
}

impl SmallDisk {
    fn new(mib: u32) -> SmallDisk {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().to_path_buf();
        let out = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={mib}m"), "tmpfs"])
            .arg(&path)
            .output()
            .expect("mount (the pod suite runs as root: bash .ci/setup)");
        assert!(out.status.success(), "mount tmpfs: {out:?}");
        SmallDisk {
            dir: Some(dir),
            path,
        }
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .args(["-l"])
            .arg(&self.path)
            .output();
        drop(self.dir.take());
    }
}

/// A pod filling its emptyDir past `nodefs.available` is evicted as kubelet evicts it
/// (`Failed`, `Evicted`, kubelet's message; its containers and volume gone, which ends the
/// pressure) while a pod using nothing is untouched; and while the pressure lasts a new pod is
/// refused (`Evicted`, "The node had condition: [DiskPressure]. ").
#[tokio::test]
async fn a_pod_filling_the_disk_is_evicted_and_new_pods_are_refused_under_pressure() {
    let disk = SmallDisk::new(64);
    let root = tempfile::tempdir_in(&disk.path).unwrap();
    let filler = unique("filler");
    let bystander = unique("bystander");
    let latecomer = unique("latecomer");
    let mut fill = pod(
        &filler,
        json!({"containers": [sleeper("app", "dd if=/dev/zero of=/v/fill bs=1M count=48; sleep 3600")],
               "volumes": [{"name": "v", "emptyDir": {}}]}),
    );
    fill["spec"]["containers"][0]["volumeMounts"] = json!([{"name": "v", "mountPath": "/v"}]);
    let calm = pod(
        &bystander,
        json!({"containers": [sleeper("app", "sleep 3600")]}),
    );
    let mut node = Node::start_with(&[], Some((root, unique("node"))), |s| {
        s.eviction = EvictionPolicy {
            hard: [("nodefs.available".to_owned(), Amount::Percent(30.0))].into(),
            ..EvictionPolicy::default()
        };
        s.eviction_interval = Duration::from_millis(300);
    })
    .await;
    node.send("insert", &calm).await;
    node.wait_status(&bystander, |s| running(s, 1)).await;
    node.send("insert", &fill).await;
    let status = node
        .wait_status(&filler, |s| s["reason"] == "Evicted")
        .await;
    assert_eq!(status["phase"], "Failed");
    let message = status["message"].as_str().unwrap();
    assert!(
        message
            .starts_with("The node was low on resource: ephemeral-storage. Threshold quantity: ")
            && message.contains(&format!("Pod {filler} was using ")),
        "{message}"
    );
    let deadline = Instant::now() + WAIT;
    while !node.containers(uid(&fill)).await.is_empty() {
        assert!(
            Instant::now() < deadline,
            "the evicted pod's containers stayed"
        );
        node.serve_for(Duration::from_millis(100)).await;
    }
    // Its volume went with it: the pressure is over, and the other pod ran on untouched.
    node.serve_for(Duration::from_secs(1)).await;
    assert!(
        running(&node.statuses[&bystander], 1),
        "{}",
        node.statuses[&bystander]
    );
    assert_eq!(node.containers(uid(&calm)).await[0].restart_count, 0);
    assert_eq!(node.metric("wedge_edged_evictions_total"), 1.0);

    // Pressure that no pod caused: a pass sees it (and, as kubelet would, evicts the one pod
    // left), and a new pod is refused while it lasts.
    std::fs::write(disk.path.join("ballast"), vec![0u8; 50 << 20]).unwrap();
    node.wait_status(&bystander, |s| s["reason"] == "Evicted")
        .await;
    let late = pod(
        &latecomer,
        json!({"containers": [sleeper("app", "sleep 3600")]}),
    );
    node.send("insert", &late).await;
    let status = node
        .wait_status(&latecomer, |s| s["phase"] == "Failed")
        .await;
    assert_eq!(status["reason"], "Evicted");
    assert_eq!(
        status["message"],
        "The node had condition: [DiskPressure]. "
    );
    assert!(node.containers(uid(&late)).await.is_empty());
    std::fs::remove_file(disk.path.join("ballast")).unwrap();
    for p in [&calm, &fill, &late] {
        node.send("delete", p).await;
    }
    let name = node.name.clone();
    node.stop().await;
    remove_all(&name).await;
}

/// Under `memory.available` pressure pods go in kubelet's order: the one using more memory
/// than it requested first (kubelet's message names its container and usage), the one within
/// its request only once the first is gone; each `Failed`/`Evicted`. The threshold is a soft
/// one above any machine's memory, so the pressure is there from the start and pods go once
/// its grace period is over.
#[tokio::test]
async fn memory_pressure_evicts_the_pod_above_its_request_first() {
    let hog = unique("hog");
    let modest = unique("modest");
    // ~30 MB held in a shell variable, no memory request (Burstable: BestEffort pods are
    // refused under memory pressure): above its request.
    let mut hungry = pod(
        &hog,
        json!({"containers": [sleeper("app", "v=$(head -c 30000000 /dev/zero | tr '\\0' a); sleep 3600")]}),
    );
    hungry["spec"]["containers"][0]["resources"] = json!({"requests": {"cpu": "10m"}});
    let mut within = pod(
        &modest,
        json!({"containers": [sleeper("app", "sleep 3600")]}),
    );
    within["spec"]["containers"][0]["resources"] = json!({"requests": {"memory": "256Mi"}});
    let mut node = Node::start_with(&[], None, |s| {
        s.eviction = EvictionPolicy {
            soft: [(
                "memory.available".to_owned(),
                SoftThreshold {
                    amount: Amount::Quantity(1 << 50),
                    grace: Duration::from_secs(10),
                },
            )]
            .into(),
            ..EvictionPolicy::default()
        };
        s.eviction_interval = Duration::from_millis(500);
    })
    .await;
    node.send("insert", &hungry).await;
    node.send("insert", &within).await;
    node.wait_status(&hog, |s| running(s, 1)).await;
    node.wait_status(&modest, |s| running(s, 1)).await;
    let status = node.wait_status(&hog, |s| s["reason"] == "Evicted").await;
    assert_eq!(status["phase"], "Failed");
    let message = status["message"].as_str().unwrap();
    assert!(
        message.starts_with(
            "The node was low on resource: memory. Threshold quantity: 1Pi, available: "
        ) && message.contains("Container app was using ")
            && message.ends_with(", request is 0, has larger consumption of memory. "),
        "{message}"
    );
    assert_ne!(
        node.statuses[&modest]["reason"], "Evicted",
        "the pod within its request goes second"
    );
    let status = node
        .wait_status(&modest, |s| s["reason"] == "Evicted")
        .await;
    assert!(
        !status["message"]
            .as_str()
            .unwrap()
            .contains("Container app"),
        "within its request: no container is named: {status}"
    );
    assert_eq!(node.metric("wedge_edged_evictions_total"), 2.0);
    for p in [&hungry, &within] {
        node.send("delete", p).await;
    }
    let name = node.name.clone();
    node.stop().await;
    remove_all(&name).await;
}
