//! A node with edged on the real bus and engine, the test playing metamanager: it answers the
//! start-up pod query and the ConfigMap/Secret queries, and keeps the status patches.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use wedge_core::bus::Mailbox;
use wedge_core::health::Health;
use wedge_core::module::{SupervisionSettings, Supervisor};
use wedge_core::{Bus, Content, Message};
use wedge_edged::engine::{Engine, ManagedContainer};
use wedge_edged::{Edged, EdgedSettings};

use crate::common::{self, WAIT, unique};

/// A node with edged and the test as metamanager.
pub struct Node {
    bus: Bus,
    meta: Mailbox,
    supervisor: Option<Supervisor>,
    pub engine: Engine,
    pub root: tempfile::TempDir,
    /// Last status seen per pod name.
    pub statuses: HashMap<String, Value>,
    /// The node name, unique per test so that parallel tests own separate containers.
    pub name: String,
    /// Secrets (and ConfigMaps) metamanager holds, by `<ns>/<type>/<name>`.
    pub objects: HashMap<String, Value>,
}

/// A pod named `name` with `spec`; its containers get 2 s to stop.
pub fn pod(name: &str, mut spec: Value) -> Value {
    if spec.get("terminationGracePeriodSeconds").is_none() {
        spec["terminationGracePeriodSeconds"] = json!(2);
    }
    json!({
        "metadata": {"name": name, "namespace": "default", "uid": unique("uid")},
        "spec": spec,
    })
}

/// A container of the test image running `script`.
pub fn sh(name: &str, script: &str) -> Value {
    json!({"name": name, "image": common::IMAGE, "imagePullPolicy": "Never", "command": ["sh", "-c", script]})
}

/// The pod's uid.
pub fn uid(pod: &Value) -> &str {
    pod["metadata"]["uid"].as_str().unwrap_or_default()
}

/// Whether the pod runs with `containers` containers, all ready.
pub fn running(status: &Value, containers: usize) -> bool {
    status["phase"] == "Running"
        && status["containerStatuses"]
            .as_array()
            .is_some_and(|c| c.len() == containers && c.iter().all(|c| c["ready"] == true))
}

/// The status of container `name` in `status`.
pub fn container<'a>(status: &'a Value, name: &str) -> &'a Value {
    status["containerStatuses"]
        .as_array()
        .and_then(|all| all.iter().find(|c| c["name"] == name))
        .unwrap_or(&Value::Null)
}

impl Node {
    /// Starts edged (sandboxes on, short back-offs) with no stored pods.
    pub async fn start() -> Node {
        let engine = common::engine().await;
        let bus = Bus::new(1024);
        let mut meta = bus.register("metamanager", "meta").unwrap();
        let root = tempfile::tempdir().unwrap();
        let name = unique("node");
        let mut settings = EdgedSettings::new(name.clone(), root.path());
        settings.relist = Duration::from_millis(200);
        settings.status_interval = Duration::from_secs(2);
        settings.initial_backoff = Duration::from_millis(500);
        settings.max_backoff = Duration::from_secs(2);
        settings.stop_grace = Duration::from_secs(1);
        settings.pod_sandbox_image = common::PAUSE_IMAGE.to_owned();
        let mut supervisor =
            Supervisor::new(bus.clone(), Health::new(), SupervisionSettings::default());
        supervisor
            .spawn(std::sync::Arc::new(Edged::new(settings)))
            .unwrap();
        let query = tokio::time::timeout(WAIT, meta.recv())
            .await
            .expect("edged asks metamanager for its pods")
            .unwrap();
        assert_eq!(query.route.resource, "default/pod");
        let none: Vec<String> = Vec::new();
        let unclaimed = bus.send_response(query.response(Content::json(&none).unwrap()));
        assert!(unclaimed.is_none(), "edged waits for its pods");
        Node {
            bus,
            meta,
            supervisor: Some(supervisor),
            engine,
            root,
            statuses: HashMap::new(),
            name,
            objects: HashMap::new(),
        }
    }

    /// Sends `pod` to edged as metamanager's `insert`.
    pub async fn insert(&self, pod: &Value) {
        let name = pod["metadata"]["name"].as_str().unwrap_or_default();
        let msg = Message::build(
            "metamanager",
            "meta",
            "insert",
            &format!("default/pod/{name}"),
            Content::json(pod).unwrap(),
        );
        self.bus.send("edged", msg).await.unwrap();
    }

    /// Plays metamanager until `done` holds for the status of pod `name`.
    pub async fn wait_status(&mut self, name: &str, done: impl Fn(&Value) -> bool) -> Value {
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

    /// Plays metamanager for `d`.
    pub async fn serve_for(&mut self, d: Duration) {
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

    /// Plays metamanager until the file `path` has content (a container wrote it), and
    /// returns it.
    pub async fn wait_file(&mut self, path: &std::path::Path) -> String {
        let deadline = Instant::now() + WAIT;
        loop {
            if let Ok(text) = std::fs::read_to_string(path)
                && !text.is_empty()
            {
                // A container may still be writing: give it a moment and read again.
                self.serve_for(Duration::from_millis(200)).await;
                return std::fs::read_to_string(path).unwrap_or(text);
            }
            assert!(
                Instant::now() < deadline,
                "{} was never written; statuses: {:?}",
                path.display(),
                self.statuses
            );
            self.serve_for(Duration::from_millis(100)).await;
        }
    }

    fn take(&mut self, msg: Message) {
        let resource = msg.route.resource.clone();
        match msg.route.operation.as_str() {
            "patch" => {
                let name = resource.rsplit('/').next().unwrap_or_default().to_owned();
                let patch: Value = msg
                    .content
                    .as_string()
                    .and_then(|s| serde_json::from_str(&s).ok())
                    .unwrap_or_default();
                self.statuses.insert(name, patch["status"].clone());
            }
            "delete" => {
                let _ = self.bus.send_response(msg.response(Content::ok()));
            }
            // Answered as metamanager does from its table: a list of stored JSON strings.
            "query" => {
                let values: Vec<String> = self
                    .objects
                    .get(&resource)
                    .map(|o| vec![o.to_string()])
                    .unwrap_or_default();
                let _ = self
                    .bus
                    .send_response(msg.response(Content::json(&values).unwrap()));
            }
            other => panic!("unexpected {other} {resource}"),
        }
    }

    /// The directory of emptyDir `volume` of `pod` on the host.
    pub fn empty_dir(&self, pod: &Value, volume: &str) -> std::path::PathBuf {
        self.root
            .path()
            .join("pods")
            .join(uid(pod))
            .join("volumes/kubernetes.io~empty-dir")
            .join(volume)
    }

    /// Every container of pod `uid`, its sandbox included.
    pub async fn containers(&self, uid: &str) -> Vec<ManagedContainer> {
        self.engine
            .list(&self.name)
            .await
            .unwrap_or_default()
            .into_iter()
            .filter(|c| c.pod_uid == uid)
            .collect()
    }

    /// Stops edged and removes every container it made.
    pub async fn stop(mut self) {
        if let Some(s) = self.supervisor.take() {
            s.shutdown().await;
        }
        let deadline = Instant::now() + WAIT;
        loop {
            let left = self.engine.list(&self.name).await.unwrap_or_default();
            if left.is_empty() {
                return;
            }
            assert!(Instant::now() < deadline, "containers left: {left:?}");
            for c in left {
                let _ = self.engine.remove(&c.id).await;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

impl Drop for Node {
    /// A test that failed before [`Node::stop`] still leaves no containers behind.
    fn drop(&mut self) {
        if self.supervisor.is_none() {
            return;
        }
        let filter = format!("label=io.wedge.node={}", self.name);
        let Ok(listed) = std::process::Command::new("docker")
            .args(["ps", "-aq", "--filter", &filter])
            .output()
        else {
            return;
        };
        let ids = String::from_utf8_lossy(&listed.stdout).into_owned();
        let ids: Vec<&str> = ids.split_whitespace().collect();
        if !ids.is_empty() {
            let _ = std::process::Command::new("docker")
                .args(["rm", "-f"])
                .args(&ids)
                .output();
        }
    }
}
