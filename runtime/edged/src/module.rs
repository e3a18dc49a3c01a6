//! The `edged` module (bus name and group `edged`): keeps the engine's containers equal to the
//! pods metamanager holds, and reports their status.
//!
//! At start it asks metamanager for every stored pod (so pods come back after a reboot with
//! no cloud) and converges; then pod `insert`/`update`/`delete` messages change the desired
//! set, and a relist every second converges again: a container that exited is restarted per
//! the pod's restart policy with kubelet's back-off (10 s doubling to 5 min), containers of
//! pods no longer desired (orphans) are removed, and a status that changed is sent as a
//! `podpatch`. Every status is sent again every 10 s, so a status refused while the cloud was
//! away reaches it once the link is back.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tokio::sync::mpsc;

use wedge_core::message::{group, module, operation};
use wedge_core::metrics::{MetricsSource, PromWriter};
use wedge_core::{Bus, Content, Message, Module, ModuleContext, ModuleError};

use crate::engine::{Engine, EngineError, ManagedContainer};
use crate::plan::{container_plan, prepare_volumes, spec_hash};
use crate::pod::{Pod, validate};
use crate::probe::{ProbeKind, Prober, Verdict};
use crate::projected::{Objects, container_env, write_volumes};
use crate::wasm_pods::WasmPods;

mod wasm;
use crate::status::{Observed, pod_patch, pod_status};

/// How edged runs.
#[derive(Debug, Clone)]
pub struct EdgedSettings {
    /// This node's name: pods bound to another node are ignored.
    pub node_name: String,
    /// Namespace of the initial pod query (`registerNodeNamespace`).
    pub namespace: String,
    /// Where pod directories (emptyDir volumes) live: `<rootDirectory>/pods`.
    pub pods_root: PathBuf,
    /// Relist period (PLEG): 1 s.
    pub relist: Duration,
    /// Every status is re-sent this often: 10 s.
    pub status_interval: Duration,
    /// Grace period for stopping a container: SIGTERM, then SIGKILL.
    pub stop_grace: Duration,
    /// First restart back-off (10 s in kubelet); doubles up to `max_backoff`.
    pub initial_backoff: Duration,
    /// Longest restart back-off (5 min).
    pub max_backoff: Duration,
    /// How long to wait for metamanager's answer to the initial pod query.
    pub query_timeout: Duration,
    /// How long to wait for a ConfigMap or Secret from metamanager before trying again later.
    pub object_timeout: Duration,
    /// Registration, node status and lease timing; `None` leaves the node unreported (tests
    /// of pods alone).
    pub node_report: Option<crate::node::NodeReportSettings>,
    /// Directory of static pod manifests, read at start and every `static_check`.
    pub static_pod_dir: Option<PathBuf>,
    /// How often the static pod directory is read again (20 s, as kubelet).
    pub static_check: Duration,
    /// `runtimeClassName` that makes a pod a Wasm pod.
    pub wasm_runtime_class: String,
    /// Container GC period: 1 min.
    pub container_gc_period: Duration,
    /// Which dead containers container GC removes (`maxContainerCount`, ...).
    pub container_gc: crate::gc::ContainerGcPolicy,
    /// Image GC period: 5 min.
    pub image_gc_period: Duration,
    /// Which unused images image GC removes (`imageGCHighThreshold`, ...).
    pub image_gc: crate::gc::ImageGcPolicy,
    /// Where image GC reads the image filesystem's usage.
    pub image_disk: crate::disk::DiskSource,
    /// Module files of Wasm pods from HTTPS URLs: cache under `<root>/wasm-modules`, limits.
    pub module_fetch: crate::module_fetch::FetchSettings,
}

impl EdgedSettings {
    /// Kubelet's defaults for node `node_name`, pod directories under `root`.
    pub fn new(node_name: impl Into<String>, root: impl Into<PathBuf>) -> EdgedSettings {
        let root = root.into();
        EdgedSettings {
            node_name: node_name.into(),
            namespace: "default".into(),
            pods_root: root.join("pods"),
            relist: Duration::from_secs(1),
            status_interval: Duration::from_secs(10),
            stop_grace: Duration::from_secs(10),
            initial_backoff: Duration::from_secs(10),
            max_backoff: Duration::from_secs(300),
            query_timeout: Duration::from_secs(60),
            object_timeout: Duration::from_secs(10),
            node_report: None,
            static_pod_dir: None,
            static_check: Duration::from_secs(20),
            wasm_runtime_class: crate::wasm_pods::DEFAULT_RUNTIME_CLASS.to_owned(),
            container_gc_period: Duration::from_secs(60),
            container_gc: crate::gc::ContainerGcPolicy::default(),
            image_gc_period: Duration::from_secs(300),
            image_gc: crate::gc::ImageGcPolicy::default(),
            image_disk: crate::disk::DiskSource::default(),
            module_fetch: crate::module_fetch::FetchSettings::new(root.join("wasm-modules")),
        }
    }
}

#[derive(Debug, Default)]
struct Stats {
    pods: AtomicU64,
    running: AtomicU64,
    starts: AtomicU64,
    restarts: AtomicU64,
    removed: AtomicU64,
    engine_errors: AtomicU64,
    statuses_sent: AtomicU64,
}

/// The edged module.
pub struct Edged {
    settings: EdgedSettings,
    stats: Arc<Stats>,
    /// The node's Wasm host, for Wasm pods.
    wasm: Option<Arc<dyn WasmPods>>,
    /// Module files of Wasm pods from HTTPS URLs (per `settings.module_fetch`).
    fetcher: Arc<crate::module_fetch::ModuleFetcher>,
}

/// A pod edged should run, and what it knows of its progress.
struct Desired {
    pod: Pod,
    /// Why the pod cannot start (spec or volume problem), with its reason.
    problem: Option<(String, String)>,
    /// Per container: why it waits (image pull failed, back-off), with a message.
    waiting: HashMap<String, (String, String)>,
    /// Per container: earliest next restart and the current back-off.
    backoff: HashMap<String, (Instant, Duration)>,
    /// ConfigMap and Secret volumes are written (tried at every converge until they are).
    volumes_ready: bool,
    /// Wasm pods: the module each container runs.
    wasm: HashMap<String, wasm::WasmContainer>,
}

impl Edged {
    /// A module with `settings`.
    pub fn new(settings: EdgedSettings) -> Edged {
        Edged {
            fetcher: Arc::new(crate::module_fetch::ModuleFetcher::new(
                settings.module_fetch.clone(),
            )),
            settings,
            stats: Arc::default(),
            wasm: None,
        }
    }

    /// Runs Wasm pods (see [`crate::wasm_pods`]) in `host`; without one they wait with a
    /// reason saying the node has no Wasm host.
    pub fn with_wasm(mut self, host: Arc<dyn WasmPods>) -> Edged {
        self.wasm = Some(host);
        self
    }

    /// Asks metamanager for the stored pods of this node.
    async fn stored_pods(&self, bus: &Bus) -> Result<Vec<Pod>, String> {
        let query = Message::build(
            module::EDGED,
            group::META,
            operation::QUERY,
            &format!("{}/pod", self.settings.namespace),
            Content::null(),
        );
        let reply = bus
            .send_sync(module::METAMANAGER, query, self.settings.query_timeout)
            .await
            .map_err(|e| format!("pod query to metamanager failed: {e}"))?;
        let values: Vec<String> = serde_json::from_str(reply.content.raw())
            .map_err(|e| format!("pod list from metamanager is not a list of strings: {e}"))?;
        let mut pods = Vec::new();
        for value in values {
            match Pod::from_json(&value) {
                Ok(pod) if self.is_ours(&pod) => pods.push(pod),
                Ok(_) => {}
                Err(e) => tracing::warn!("stored pod skipped, not a pod: {e}"),
            }
        }
        Ok(pods)
    }

    fn is_ours(&self, pod: &Pod) -> bool {
        pod.spec.node_name.is_empty() || pod.spec.node_name == self.settings.node_name
    }
}

/// One run of the module: the engine and the desired pods by uid.
struct Turn<'a> {
    edged: &'a Edged,
    engine: Engine,
    bus: Bus,
    desired: BTreeMap<String, Desired>,
    /// Last status sent per pod uid.
    reported: HashMap<String, String>,
    /// Probe state per (pod uid, container name), for the running container.
    probers: HashMap<(String, String), Prober>,
    /// Where probe tasks send their results.
    probe_results: mpsc::Sender<ProbeResult>,
    /// The node's address, reported as the pods' `hostIP`.
    host_ip: Option<String>,
}

/// One probe's outcome, from its task back to the module's loop.
struct ProbeResult {
    uid: String,
    container: String,
    container_id: String,
    kind: ProbeKind,
    outcome: Result<(), String>,
}

impl Turn<'_> {
    fn settings(&self) -> &EdgedSettings {
        &self.edged.settings
    }

    /// Adds or replaces a desired pod.
    fn want(&mut self, pod: Pod) {
        let uid = pod.metadata.uid.clone();
        let problem = validate(&pod)
            .and_then(|()| prepare_volumes(&pod, &self.settings().pods_root))
            .err()
            .map(|e| (e.reason.to_owned(), e.message));
        if let Some((reason, message)) = &problem {
            tracing::warn!(pod = %pod.key(), reason, "pod cannot start: {message}");
        }
        let previous = self.desired.remove(&uid);
        let previous_wasm = previous
            .as_ref()
            .map(|d| d.wasm.clone())
            .unwrap_or_default();
        self.desired.insert(
            uid,
            Desired {
                pod,
                problem,
                waiting: HashMap::new(),
                backoff: previous.map(|d| d.backoff).unwrap_or_default(),
                volumes_ready: false,
                wasm: previous_wasm,
            },
        );
    }

    /// Handles one message from the bus.
    async fn handle(&mut self, msg: Message) {
        let resource = wedge_core::Resource::parse(&msg.route.resource).ok();
        let is_pod = resource.as_ref().is_some_and(|r| r.kind == "pod");
        if !is_pod {
            // Replies to our own podpatch/delete requests, and other kinds, are not ours to act
            // on; an error is worth a line.
            if msg.route.operation == operation::ERROR {
                tracing::debug!(resource = %msg.route.resource, "metamanager: {}", msg.content.raw());
            }
            return;
        }
        match msg.route.operation.as_str() {
            operation::INSERT | operation::UPDATE => {
                let text = msg
                    .content
                    .as_string()
                    .unwrap_or_else(|| msg.content.raw().to_owned());
                match Pod::from_json(&text) {
                    Ok(pod) if self.edged.is_ours(&pod) => {
                        tracing::info!(pod = %pod.key(), op = %msg.route.operation, "pod desired");
                        self.want(pod);
                        self.converge().await;
                    }
                    Ok(_) => {}
                    Err(e) => {
                        tracing::warn!(resource = %msg.route.resource, "pod message skipped: {e}")
                    }
                }
            }
            operation::DELETE => {
                let text = msg
                    .content
                    .as_string()
                    .unwrap_or_else(|| msg.content.raw().to_owned());
                let uid = Pod::from_json(&text).ok().map(|p| p.metadata.uid);
                let name =
                    resource.and_then(|r| Some((r.namespace.to_owned(), r.name?.to_owned())));
                let gone: Vec<String> = self
                    .desired
                    .iter()
                    .filter(|(u, d)| {
                        uid.as_deref() == Some(u.as_str())
                            || name.as_ref().is_some_and(|(ns, n)| {
                                d.pod.namespace() == ns && d.pod.metadata.name == *n
                            })
                    })
                    .map(|(u, _)| u.clone())
                    .collect();
                for uid in gone {
                    if let Some(d) = self.desired.remove(&uid) {
                        tracing::info!(pod = %d.pod.key(), "pod deleted");
                        self.remove_pod(&d).await;
                    }
                }
                self.converge().await;
            }
            _ => {}
        }
    }

    /// Makes the static pods equal to the manifests in the static pod directory: new or
    /// edited files are (re)started, removed files stop their pod.
    async fn sync_static_pods(&mut self) {
        let Some(dir) = self.settings().static_pod_dir.clone() else {
            return;
        };
        let (pods, errors) = crate::static_pods::read_dir(&dir, &self.settings().node_name);
        for (file, error) in errors {
            tracing::warn!(file = %file.display(), "static pod manifest skipped: {error}");
        }
        let current: std::collections::BTreeSet<String> =
            pods.iter().map(|p| p.metadata.uid.clone()).collect();
        let gone: Vec<String> = self
            .desired
            .iter()
            .filter(|(uid, d)| crate::static_pods::is_static(&d.pod) && !current.contains(*uid))
            .map(|(uid, _)| uid.clone())
            .collect();
        for uid in gone {
            if let Some(d) = self.desired.remove(&uid) {
                tracing::info!(pod = %d.pod.key(), "static pod manifest removed or changed");
                self.remove_pod(&d).await;
            }
        }
        for pod in pods {
            if !self.desired.contains_key(&pod.metadata.uid) {
                tracing::info!(pod = %pod.key(), "static pod");
                self.want(pod);
            }
        }
    }

    /// Removes a deleted pod's containers and directories, then tells metamanager (and so the
    /// cloud) that it is gone.
    async fn remove_pod(&mut self, d: &Desired) {
        self.stop_wasm_pod(d).await;
        let pod = &d.pod;
        let uid = pod.metadata.uid.clone();
        if let Ok(listed) = self.list().await {
            for c in listed.iter().filter(|c| c.pod_uid == uid) {
                self.stop_remove(c).await;
            }
        }
        let dir = self.settings().pods_root.join(&uid);
        if dir.starts_with(&self.settings().pods_root)
            && !uid.is_empty()
            && let Err(e) = std::fs::remove_dir_all(&dir)
            && e.kind() != std::io::ErrorKind::NotFound
        {
            tracing::warn!(dir = %dir.display(), "pod directory not removed: {e}");
        }
        self.reported.remove(&uid);
        self.probers.retain(|(u, _), _| *u != uid);
        if crate::static_pods::is_static(pod) {
            // The cloud never knew it.
            return;
        }
        let gone = Message::build(
            module::EDGED,
            group::META,
            operation::DELETE,
            &format!("{}/pod/{}", pod.namespace(), pod.metadata.name),
            Content::json(pod).unwrap_or_else(|_| Content::null()),
        );
        let _ = self.bus.send(module::METAMANAGER, gone).await;
    }

    async fn list(&self) -> Result<Vec<ManagedContainer>, EngineError> {
        self.engine
            .list(&self.settings().node_name)
            .await
            .inspect_err(|e| {
                self.edged
                    .stats
                    .engine_errors
                    .fetch_add(1, Ordering::Relaxed);
                tracing::warn!("listing containers failed: {e}");
            })
    }

    async fn stop_remove(&self, c: &ManagedContainer) {
        match self
            .engine
            .stop_and_remove(&c.id, self.settings().stop_grace)
            .await
        {
            Ok(()) => {
                self.edged.stats.removed.fetch_add(1, Ordering::Relaxed);
            }
            Err(e) => {
                self.edged
                    .stats
                    .engine_errors
                    .fetch_add(1, Ordering::Relaxed);
                tracing::warn!(container = %c.id, "container not removed: {e}");
            }
        }
    }

    /// Makes the engine match the desired pods: creates, restarts and removes containers.
    async fn converge(&mut self) {
        let Ok(listed) = self.list().await else {
            return;
        };
        // Orphans: labelled by us, pod no longer desired.
        for c in listed
            .iter()
            .filter(|c| !self.desired.contains_key(&c.pod_uid))
        {
            tracing::info!(pod = %format!("{}/{}", c.pod_namespace, c.pod_name), container = %c.container, "orphan container removed");
            self.stop_remove(c).await;
        }
        let uids: Vec<String> = self.desired.keys().cloned().collect();
        for uid in uids {
            let ours: Vec<ManagedContainer> = listed
                .iter()
                .filter(|c| c.pod_uid == uid)
                .cloned()
                .collect();
            self.converge_pod(&uid, ours).await;
        }
    }

    async fn converge_pod(&mut self, uid: &str, ours: Vec<ManagedContainer>) {
        let Some(desired) = self.desired.get(uid) else {
            return;
        };
        if desired.problem.is_some() {
            return;
        }
        if self.is_wasm_pod(&desired.pod) {
            return self.converge_wasm_pod(uid).await;
        }
        let pod = desired.pod.clone();
        let ready = desired.volumes_ready;
        let bus = self.bus.clone();
        let mut objects = Objects::new(&bus, &pod, self.settings().object_timeout);
        if !ready {
            let written = write_volumes(&pod, &self.settings().pods_root, &mut objects).await;
            let Some(d) = self.desired.get_mut(uid) else {
                return;
            };
            match written {
                Ok(()) => {
                    d.volumes_ready = true;
                    d.waiting.clear();
                }
                Err(message) => {
                    tracing::warn!(pod = %pod.key(), "volumes not ready: {message}");
                    for c in &pod.spec.containers {
                        d.waiting.insert(
                            c.name.clone(),
                            ("ContainerCreating".into(), message.clone()),
                        );
                    }
                    return;
                }
            }
        }
        // Containers no longer in the spec.
        for c in ours
            .iter()
            .filter(|c| !pod.spec.containers.iter().any(|s| s.name == c.container))
        {
            self.stop_remove(c).await;
        }
        for spec in &pod.spec.containers {
            let hash = spec_hash(&pod, spec);
            let mut mine: Vec<&ManagedContainer> =
                ours.iter().filter(|c| c.container == spec.name).collect();
            mine.sort_by_key(|c| c.restart_count);
            // A changed spec replaces every container of that name.
            if mine.iter().any(|c| c.hash != hash) {
                for c in &mine {
                    self.stop_remove(c).await;
                }
                mine.clear();
            }
            let newest = mine.last().copied();
            let attempt = match newest {
                None => 0,
                Some(c) if c.state == "running" => continue,
                Some(c) => {
                    let run = self.engine.inspect(&c.id).await.ok().flatten();
                    let exit = run.as_ref().map(|r| r.exit_code).unwrap_or(0);
                    let restart = match pod.restart_policy() {
                        "Always" => true,
                        "OnFailure" => exit != 0 || c.state == "created",
                        _ => c.state == "created",
                    };
                    if !restart {
                        continue;
                    }
                    if !self.backoff_elapsed(uid, &spec.name) {
                        continue;
                    }
                    // Keep the newest dead container (its logs), drop older ones.
                    for old in &mine[..mine.len().saturating_sub(1)] {
                        self.stop_remove(old).await;
                    }
                    c.restart_count + 1
                }
            };
            self.start_container(uid, &pod, spec, attempt, &mut objects)
                .await;
        }
    }

    /// True when `container` of pod `uid` may be restarted now; otherwise records it as in
    /// `CrashLoopBackOff`. Taking a restart doubles the next back-off.
    fn backoff_elapsed(&mut self, uid: &str, container: &str) -> bool {
        let (initial, max) = (self.settings().initial_backoff, self.settings().max_backoff);
        let Some(d) = self.desired.get_mut(uid) else {
            return false;
        };
        let now = Instant::now();
        let (until, delay) = d.backoff.get(container).copied().unwrap_or((now, initial));
        if now < until {
            d.waiting.insert(
                container.to_owned(),
                (
                    "CrashLoopBackOff".into(),
                    format!(
                        "back-off {}s restarting failed container {container}",
                        delay.as_secs()
                    ),
                ),
            );
            return false;
        }
        d.backoff
            .insert(container.to_owned(), (now + delay, (delay * 2).min(max)));
        true
    }

    async fn start_container(
        &mut self,
        uid: &str,
        pod: &Pod,
        spec: &crate::pod::Container,
        attempt: u32,
        objects: &mut Objects<'_>,
    ) {
        let settings = self.settings();
        let env = container_env(pod, &settings.node_name, spec, objects).await;
        let outcome = async {
            let config_error = |message: String| EngineError::Image {
                reason: "CreateContainerConfigError",
                message,
            };
            let env = env.map_err(config_error)?;
            self.engine
                .ensure_image(&spec.image, spec.pull_policy())
                .await?;
            let plan = container_plan(
                &settings.node_name,
                pod,
                spec,
                attempt,
                &settings.pods_root,
                &env,
            )
            .map_err(|e| config_error(e.message))?;
            let id = self.engine.create(&plan).await?;
            self.engine.start(&id).await
        }
        .await;
        let Some(d) = self.desired.get_mut(uid) else {
            return;
        };
        match outcome {
            Ok(()) => {
                d.waiting.remove(&spec.name);
                let counter = if attempt == 0 {
                    &self.edged.stats.starts
                } else {
                    &self.edged.stats.restarts
                };
                counter.fetch_add(1, Ordering::Relaxed);
                tracing::info!(pod = %pod.key(), container = %spec.name, attempt, "container started");
            }
            Err(e) => {
                self.edged
                    .stats
                    .engine_errors
                    .fetch_add(1, Ordering::Relaxed);
                let reason = match &e {
                    EngineError::Image { reason, .. } => (*reason).to_owned(),
                    _ => "RunContainerError".to_owned(),
                };
                tracing::warn!(pod = %pod.key(), container = %spec.name, reason, "container not started: {e}");
                d.waiting.insert(spec.name.clone(), (reason, e.to_string()));
            }
        }
    }

    /// Computes every pod's status and sends those that changed (all with `force`).
    async fn report(&mut self, force: bool) {
        let Ok(listed) = self.list().await else {
            return;
        };
        let mut running = 0;
        let mut patches = Vec::new();
        for (uid, d) in &self.desired {
            if self.is_wasm_pod(&d.pod) {
                let observed = self.wasm_observed(d);
                running += observed.iter().filter(|o| o.ready).count() as u64;
                let problem = d.problem.as_ref().map(|(r, m)| (r.as_str(), m.as_str()));
                let status = pod_status(&d.pod, &observed, problem, self.host_ip.as_deref());
                let patch = pod_patch(&d.pod, &status);
                if force || self.reported.get(uid) != Some(&patch) {
                    patches.push((uid.clone(), d.pod.clone(), patch));
                }
                continue;
            }
            let mut observed = Vec::new();
            for spec in &d.pod.spec.containers {
                let newest = listed
                    .iter()
                    .filter(|c| c.pod_uid == *uid && c.container == spec.name)
                    .max_by_key(|c| c.restart_count);
                let run = match newest {
                    Some(c) => self.engine.inspect(&c.id).await.ok().flatten(),
                    None => None,
                };
                if run.as_ref().is_some_and(|r| r.running) {
                    running += 1;
                }
                let waiting = d
                    .waiting
                    .get(&spec.name)
                    .filter(|_| !run.as_ref().is_some_and(|r| r.running))
                    .cloned();
                let key = (uid.clone(), spec.name.clone());
                let ready = match (newest, &run) {
                    (Some(c), Some(r)) if r.running => {
                        let ip = if d.pod.spec.host_network || r.ip.is_empty() {
                            "127.0.0.1"
                        } else {
                            r.ip.as_str()
                        };
                        let prober = self
                            .probers
                            .entry(key)
                            .or_insert_with(|| Prober::new(c.id.clone(), spec, Instant::now()));
                        if prober.container_id != c.id {
                            *prober = Prober::new(c.id.clone(), spec, Instant::now());
                        }
                        schedule_probes(prober, &self.engine, &self.probe_results, uid, spec, ip);
                        prober.ready()
                    }
                    _ => {
                        self.probers.remove(&key);
                        false
                    }
                };
                observed.push(Observed {
                    name: spec.name.clone(),
                    image: spec.image.clone(),
                    id: newest.map(|c| format!("docker://{}", c.id)),
                    run,
                    restart_count: newest.map(|c| c.restart_count).unwrap_or(0),
                    waiting,
                    ready,
                });
            }
            let problem = d.problem.as_ref().map(|(r, m)| (r.as_str(), m.as_str()));
            let status = pod_status(&d.pod, &observed, problem, self.host_ip.as_deref());
            let patch = pod_patch(&d.pod, &status);
            if force || self.reported.get(uid) != Some(&patch) {
                patches.push((uid.clone(), d.pod.clone(), patch));
            }
        }
        let stats = &self.edged.stats;
        stats
            .pods
            .store(self.desired.len() as u64, Ordering::Relaxed);
        stats.running.store(running, Ordering::Relaxed);
        // Static pods are the node's own: the cloud has no pod to patch.
        patches.retain(|(_, pod, _)| !crate::static_pods::is_static(pod));
        for (uid, pod, patch) in patches {
            let msg = Message::build(
                module::EDGED,
                group::META,
                operation::PATCH,
                &format!("{}/podpatch/{}", pod.namespace(), pod.metadata.name),
                Content::string(&patch),
            );
            if self.bus.send(module::METAMANAGER, msg).await.is_ok() {
                stats.statuses_sent.fetch_add(1, Ordering::Relaxed);
                self.reported.insert(uid, patch);
            }
        }
    }
}

/// Starts every probe of `spec` that is due, each in its own task (a slow probe never holds
/// up the loop); results come back through `results`.
fn schedule_probes(
    prober: &mut Prober,
    engine: &Engine,
    results: &mpsc::Sender<ProbeResult>,
    uid: &str,
    spec: &crate::pod::Container,
    ip: &str,
) {
    let now = Instant::now();
    for kind in ProbeKind::ALL {
        let Some(probe) = kind.of(spec) else {
            continue;
        };
        if !prober.due(kind, probe, now) {
            continue;
        }
        prober.begin(kind, now);
        let (engine, results, probe, spec) =
            (engine.clone(), results.clone(), probe.clone(), spec.clone());
        let (uid, id, ip) = (uid.to_owned(), prober.container_id.clone(), ip.to_owned());
        tokio::spawn(async move {
            let outcome = crate::probe::run(&engine, &id, &ip, &spec, &probe).await;
            let _ = results
                .send(ProbeResult {
                    uid,
                    container: spec.name,
                    container_id: id,
                    kind,
                    outcome,
                })
                .await;
        });
    }
}

impl Turn<'_> {
    /// Books a probe result; a failed liveness or startup probe stops the container, and the
    /// restart policy (with its back-off) takes over from there.
    async fn probed(&mut self, r: ProbeResult) {
        let key = (r.uid.clone(), r.container.clone());
        let Some(spec) = self
            .desired
            .get(&r.uid)
            .and_then(|d| d.pod.spec.containers.iter().find(|c| c.name == r.container))
        else {
            return;
        };
        let (Some(probe), Some(prober)) = (r.kind.of(spec), self.probers.get_mut(&key)) else {
            return;
        };
        if prober.container_id != r.container_id {
            return;
        }
        if let Verdict::Restart(why) = prober.record(r.kind, probe, &r.outcome) {
            tracing::info!(pod = %r.uid, container = %r.container, "{why}; killing the container");
            self.probers.remove(&key);
            if let Err(e) = self
                .engine
                .stop(&r.container_id, self.settings().stop_grace)
                .await
            {
                tracing::warn!(container = %r.container_id, "container not stopped: {e}");
            }
        }
    }
}

impl Module for Edged {
    fn name(&self) -> &'static str {
        module::EDGED
    }

    fn group(&self) -> &'static str {
        group::EDGED
    }

    async fn run(self: Arc<Self>, mut ctx: ModuleContext) -> Result<(), ModuleError> {
        let engine = Engine::connect().await.map_err(Box::new)?;
        ctx.ready();
        let stop_reports = ctx.token().child_token();
        let _stop_reports = stop_reports.clone().drop_guard();
        if let Some(settings) = self.settings.node_report.clone() {
            let version = engine.version().await.unwrap_or_default();
            tokio::spawn(crate::node::report(
                ctx.bus().clone(),
                settings,
                version,
                stop_reports,
            ));
        }
        let (probe_results, mut probed) = mpsc::channel(256);
        let mut turn = Turn {
            edged: &self,
            engine,
            bus: ctx.bus().clone(),
            desired: BTreeMap::new(),
            reported: HashMap::new(),
            probers: HashMap::new(),
            probe_results,
            host_ip: crate::node::HostInfo::read().ip,
        };
        let stored = tokio::select! {
            pods = self.stored_pods(ctx.bus()) => pods.map_err(ModuleError::from)?,
            _ = ctx.token().cancelled() => return Ok(()),
        };
        tracing::info!(pods = stored.len(), "pods from local state");
        for pod in stored {
            turn.want(pod);
        }
        turn.sync_static_pods().await;
        turn.converge().await;
        turn.report(true).await;
        let mut relist = tokio::time::interval(self.settings.relist);
        relist.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut resend = tokio::time::interval(self.settings.status_interval);
        resend.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        resend.tick().await;
        let mut static_check = tokio::time::interval(self.settings.static_check);
        static_check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        static_check.tick().await;
        let (mut container_gc, mut image_gc) = crate::gc_pass::timers(&self.settings);
        loop {
            tokio::select! {
                msg = ctx.recv() => match msg {
                    Some(msg) => {
                        turn.handle(msg).await;
                        turn.report(false).await;
                    }
                    None => return Ok(()),
                },
                _ = relist.tick() => {
                    turn.converge().await;
                    turn.report(false).await;
                }
                _ = resend.tick() => turn.report(true).await,
                _ = static_check.tick(), if self.settings.static_pod_dir.is_some() => {
                    turn.sync_static_pods().await;
                    turn.converge().await;
                }
                Some(result) = probed.recv() => {
                    turn.probed(result).await;
                    turn.report(false).await;
                }
                _ = container_gc.tick() => crate::gc_pass::containers(&turn.engine, &self.settings, |uid| turn.desired.contains_key(uid)).await,
                _ = image_gc.tick() => image_gc.collect_logged(&turn.engine).await,
            }
        }
    }
}

impl MetricsSource for Edged {
    fn write_metrics(&self, w: &mut PromWriter) {
        let s = &self.stats;
        let load = |c: &AtomicU64| c.load(Ordering::Relaxed) as f64;
        for (name, help, value) in [
            ("wedge_edged_pods", "Pods edged runs.", &s.pods),
            (
                "wedge_edged_containers_running",
                "Containers of those pods running now.",
                &s.running,
            ),
        ] {
            w.family(name, help, "gauge");
            w.sample(name, &[], load(value));
        }
        for (name, help, value) in [
            (
                "wedge_edged_container_starts_total",
                "First starts of containers.",
                &s.starts,
            ),
            (
                "wedge_edged_container_restarts_total",
                "Containers started again per the restart policy.",
                &s.restarts,
            ),
            (
                "wedge_edged_containers_removed_total",
                "Containers removed (pod deleted or changed, orphans).",
                &s.removed,
            ),
            (
                "wedge_edged_engine_errors_total",
                "Docker engine calls that failed.",
                &s.engine_errors,
            ),
            (
                "wedge_edged_statuses_sent_total",
                "Pod status patches sent to metamanager.",
                &s.statuses_sent,
            ),
        ] {
            w.family(name, help, "counter");
            w.sample(name, &[], load(value));
        }
    }
}
