//! The `edged` module (bus name and group `edged`): keeps the engine's containers equal to the
//! pods metamanager holds, and reports their status.
//!
//! At start it asks metamanager for every stored pod (so pods come back after a reboot with
//! no cloud); then pod `insert`/`update`/`delete` messages change the desired set. The loop
//! only keeps books: the work on the engine is done by pod workers ([`workers`], [`sync`]),
//! one per pod at a time, from separate addition and deletion queues, with retry and back-off.
//!
//! A relist every second lists the engine's containers once: pods are queued for a sync (a
//! container that exited is restarted per the pod's restart policy with kubelet's back-off,
//! 10 s doubling to 5 min), containers of pods no longer desired (orphans) are queued for
//! removal, and a status that changed is sent as a `podpatch` ([`report`]). A status the
//! cloud did not take (it was away, or refused) is sent again by the periodic sync every 10 s;
//! one it took is not sent again while the pod stays the same.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tokio::sync::mpsc;
use tokio::task::JoinSet;

use wedge_core::message::{group, module, operation};
use wedge_core::metrics::{MetricsSource, PromWriter};
use wedge_core::{Bus, Content, Message, Module, ModuleContext, ModuleError};

use crate::engine::{Engine, EngineError, ManagedContainer};
use crate::plan::prepare_volumes;
use crate::pod::{Pod, validate};
use crate::probe::Prober;
use crate::wasm_pods::WasmPods;

mod directory;
mod report;
mod sync;
mod wasm;
mod workers;

use report::{Inspections, PatchResult, ProbeResult};
use sync::{KillJob, Outcome, PodSync, SharedState, SyncJob};
use wasm::is_wasm_pod;
use workers::{PodWorkers, Work};
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
    /// The periodic status sync: statuses the cloud did not take are sent again this often
    /// (10 s, kubelet's `syncBatch`).
    pub status_interval: Duration,
    /// Grace period for stopping a container: SIGTERM, then SIGKILL.
    pub stop_grace: Duration,
    /// First restart back-off (10 s in kubelet); doubles up to `max_backoff`.
    pub initial_backoff: Duration,
    /// Longest restart back-off (5 min).
    pub max_backoff: Duration,
    /// Image of the pod sandbox that owns each pod's network namespace
    /// (`modules.edged.podSandboxImage`); empty runs pods without sandboxes, each container
    /// in a network of its own.
    pub pod_sandbox_image: String,
    /// The container runtime (`tailoredKubeletConfig.containerRuntimeEndpoint`): Docker's
    /// socket runs pods on Docker, any other endpoint on a CRI runtime (`engine` docs).
    pub runtime_endpoint: String,
    /// Where a CRI runtime writes containers' logs (kubelet's `podLogsDir` layout):
    /// `<rootDirectory>/pod-logs`.
    pub pod_logs_dir: PathBuf,
    /// Pod workers of each kind (additions, deletions) that run at once: 20. kubelet bounds
    /// none (a goroutine per pod); legacy edged ran 5 consumers, which made a Deployment of 20
    /// on Docker take 11.5 s to run (8.7–10.1 s with 20; containerd: 6.4 s).
    pub pod_workers: usize,
    /// First retry of a pod sync or kill that failed (10 s, as legacy edged's pod addition
    /// back-off); doubles up to `work_retry_max`. New desired state for the pod retries at once.
    pub work_retry_initial: Duration,
    /// Longest retry back-off of a pod sync or kill (5 min).
    pub work_retry_max: Duration,
    /// How long to wait for metamanager's answer to the initial pod query.
    pub query_timeout: Duration,
    /// Pod events: whether they reach the cloud (`reportEvent`) and how fast.
    pub events: crate::events::EventSettings,
    /// Kubelet's eviction policy (`evictionHard`, `evictionSoft`, ...): the pressure
    /// conditions, admission under them, and which pods are evicted ([`crate::eviction`]).
    pub eviction: wedge_core::config::eviction::EvictionPolicy,
    /// How often the node's signals are read for eviction, admission and the node's
    /// conditions (10 s, kubelet's eviction monitoring period).
    pub eviction_interval: Duration,
    /// Deadline of the relist's container listing (kubelet's `runtimeRequestTimeout`, 2 min):
    /// a listing that takes longer counts as the runtime being down.
    pub runtime_request_timeout: Duration,
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
    /// Namespaces whose Wasm pods may bring their own module (ConfigMap or HTTPS) rather than
    /// only run the node's (`wedge.edged.wasmPodModuleNamespaces`; none by default).
    pub wasm_pod_module_namespaces: Vec<String>,
    /// Container GC period: 1 min.
    pub container_gc_period: Duration,
    /// Which dead containers container GC removes (`maxContainerCount`, ...).
    pub container_gc: crate::gc::ContainerGcPolicy,
    /// Image GC period: 5 min.
    pub image_gc_period: Duration,
    /// Which unused images image GC removes (`imageGCHighThreshold`, ...).
    pub image_gc: crate::gc::ImageGcPolicy,
    /// CRI container log rotation (`None`: logs are never rotated).
    pub log_rotation: Option<crate::log_rotation::LogRotationPolicy>,
    /// Where image GC reads the image filesystem's usage.
    pub image_disk: crate::disk::DiskSource,
    /// Module files of Wasm pods from HTTPS URLs: cache under `<root>/wasm-modules`, limits.
    pub module_fetch: crate::module_fetch::FetchSettings,
    /// The node's kubelet port (logs, exec, attach, stats: [`crate::server`]); `None` serves
    /// none (tests of pods alone).
    pub server: Option<crate::server::ServerSettings>,
    /// Kubelet's `seccompDefault`: a container whose pod and spec name no seccomp profile runs
    /// under the runtime's default one when set, unconfined when not (kubelet's default).
    pub seccomp_default: bool,
    /// The node's side of pod DNS (`clusterDNS`, `clusterDomain`, `resolvConf`): what pods'
    /// resolv.conf, hostnames and hosts files are made from ([`crate::dns`]).
    pub dns: crate::dns::NodeDns,
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
            pod_sandbox_image: "kubeedge/pause:3.6".to_owned(),
            runtime_endpoint: "unix:///var/run/docker.sock".to_owned(),
            pod_logs_dir: root.join("pod-logs"),
            pod_workers: 20,
            work_retry_initial: Duration::from_secs(10),
            work_retry_max: Duration::from_secs(300),
            query_timeout: Duration::from_secs(60),
            runtime_request_timeout: Duration::from_secs(120),
            events: crate::events::EventSettings::default(),
            eviction: wedge_core::config::eviction::EvictionPolicy::default(),
            eviction_interval: Duration::from_secs(10),
            object_timeout: Duration::from_secs(10),
            node_report: None,
            static_pod_dir: None,
            static_check: Duration::from_secs(20),
            wasm_runtime_class: crate::wasm_pods::DEFAULT_RUNTIME_CLASS.to_owned(),
            wasm_pod_module_namespaces: Vec::new(),
            container_gc_period: Duration::from_secs(60),
            container_gc: crate::gc::ContainerGcPolicy::default(),
            image_gc_period: Duration::from_secs(300),
            image_gc: crate::gc::ImageGcPolicy::default(),
            log_rotation: Some(crate::log_rotation::LogRotationPolicy::default()),
            seccomp_default: false,
            dns: crate::dns::NodeDns::default(),
            image_disk: crate::disk::DiskSource::default(),
            module_fetch: crate::module_fetch::FetchSettings::new(root.join("wasm-modules")),
            server: None,
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
    /// Status patches the cloud refused or did not answer.
    statuses_refused: AtomicU64,
    /// Pods evicted by the eviction manager.
    evictions: AtomicU64,
    additions_running: AtomicU64,
    deletions_running: AtomicU64,
    additions_queued: AtomicU64,
    deletions_queued: AtomicU64,
    work_retries: AtomicU64,
    /// CRI container logs rotated.
    logs_rotated: Arc<AtomicU64>,
}

/// The edged module.
pub struct Edged {
    settings: EdgedSettings,
    stats: Arc<Stats>,
    /// The node's Wasm host, for Wasm pods.
    wasm: Option<Arc<dyn WasmPods>>,
    /// Module files of Wasm pods from HTTPS URLs (per `settings.module_fetch`).
    fetcher: Arc<crate::module_fetch::ModuleFetcher>,
    /// The node server's counters, once it serves.
    server_stats: std::sync::Mutex<Option<Arc<crate::server::ServerStats>>>,
    /// True once the cloud has the Node object (see [`Edged::node_registered`]).
    registered: Arc<tokio::sync::watch::Sender<bool>>,
    /// The pod event recorder's counters.
    event_stats: Arc<crate::events::EventStats>,
    /// edgeStream's in-process connections to the kubelet server (see
    /// [`Edged::with_kubelet_link`]).
    kubelet_listener: Option<wedge_core::kubelet_link::KubeletListener>,
    /// The node's pressure conditions as the eviction manager last decided them (admission,
    /// node status).
    pressure: Arc<tokio::sync::watch::Sender<crate::node::pressure::Pressure>>,
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
            server_stats: std::sync::Mutex::new(None),
            registered: Arc::new(tokio::sync::watch::Sender::new(false)),
            event_stats: Arc::default(),
            kubelet_listener: None,
            pressure: Arc::new(tokio::sync::watch::Sender::new(Default::default())),
        }
    }

    /// Turns true once the cloud has this node's Node object with its first status, and stays
    /// true. What needs the Node to exist waits for it: CloudCore's tunnel server writes the
    /// negotiated kubelet port into the Node's status when the EdgeStream tunnel opens, and
    /// retries only 20 s later (then gives up) when it cannot find the Node or its update
    /// conflicts with the node's own first status. `None` when this edged registers no node
    /// (no node report configured).
    pub fn node_registered(&self) -> Option<tokio::sync::watch::Receiver<bool>> {
        self.settings
            .node_report
            .as_ref()
            .map(|_| self.registered.subscribe())
    }

    /// Serves the kubelet routes (logs, exec, attach, metrics) to edgeStream in this process
    /// on `listener`: the cloud's `kubectl logs/exec` reach edged there, not over TCP.
    pub fn with_kubelet_link(
        mut self,
        listener: wedge_core::kubelet_link::KubeletListener,
    ) -> Edged {
        self.kubelet_listener = Some(listener);
        self
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

/// A pod edged should run.
struct Desired {
    pod: Pod,
    /// Why the pod cannot start (spec or volume problem), with its reason: no worker syncs it.
    problem: Option<(String, String)>,
    /// What its worker and the status report share.
    state: SharedState,
}

/// A listing of the engine's containers, and when it was started.
struct Relisting {
    listed_at: Instant,
    listed: Result<Vec<ManagedContainer>, EngineError>,
}

/// The module's loop: the desired pods, the work queued on them, and what was reported.
struct SyncLoop {
    /// What pod workers are given (the module, engine, bus).
    sync: PodSync,
    desired: BTreeMap<String, Desired>,
    /// Pods (or orphan containers) to remove, until their kill succeeds.
    killing: HashMap<String, KillJob>,
    workers: PodWorkers,
    /// Running pod workers; dropping the loop aborts them.
    tasks: JoinSet<(Work, Outcome)>,
    /// The work each running task does, for a task that panics.
    task_work: HashMap<tokio::task::Id, Work>,
    /// When each pod's last worker finished: a relist listing taken before that is stale
    /// for the pod.
    last_done: HashMap<String, Instant>,
    /// The last relist's listing and when it was started.
    snapshot: Option<(Instant, Arc<Vec<ManagedContainer>>)>,
    /// A listing is out ([`SyncLoop::start_relist`]).
    relisting: bool,
    /// The node's allocatable CPU (millicores) and memory (bytes), read at the first admission.
    allocatable: Option<(i64, i64)>,
    /// Where the listing task sends what it found.
    relist_results: mpsc::Sender<Relisting>,
    /// The container GC pass running now, if any.
    container_gc: Option<tokio::task::JoinHandle<()>>,
    /// The pod evicted last: no other is evicted while its containers are still going.
    evicted_last: Option<String>,
    /// When the pod evicted last was removed (containers and volumes gone).
    evicted_removed_at: Option<Instant>,
    /// Pods whose update waits for `unhold-upgrade` ([`crate::hold_upgrade`]).
    held: crate::hold_upgrade::Held,
    /// Last status sent per pod uid.
    reported: HashMap<String, String>,
    /// Pods whose last status the cloud did not take: sent again by the periodic sync.
    refused: std::collections::HashSet<String>,
    /// Pods whose refusal was logged at warning level since their last status taken.
    refused_said: std::collections::HashSet<String>,
    /// Probe state per (pod uid, container name), for the running container.
    probers: HashMap<(String, String), Prober>,
    /// Where probe tasks send their results.
    probe_results: mpsc::Sender<ProbeResult>,
    /// Where status patch tasks send the cloud's answers.
    patch_results: mpsc::Sender<PatchResult>,
    /// Container inspections, kept while the listed state is unchanged.
    inspections: Inspections,
    /// The node's address, reported as the pods' `hostIP`.
    host_ip: Option<String>,
    /// Something changed since the last report.
    report_due: bool,
    /// The desired pods as the node server looks them up.
    directory: Arc<directory::Directory>,
}

impl SyncLoop {
    fn settings(&self) -> &EdgedSettings {
        &self.sync.edged.settings
    }

    /// Adds or replaces a desired pod and queues its sync; a pod being deleted gracefully
    /// is terminated instead.
    fn want(&mut self, pod: Pod) {
        if pod.is_terminating() {
            // A held update of it must not start it later.
            self.held.forget(pod.namespace(), &pod.metadata.name);
            return self.terminate(pod);
        }
        let uid = pod.metadata.uid.clone();
        if let Some(d) = self.desired.get_mut(&uid)
            && d.pod.spec == pod.spec
        {
            // The same spec again: the cloud echoing a status we sent, or a metadata edit.
            // Nothing to redo, so nothing in the status flaps and no new status is sent.
            d.pod = pod;
            return;
        }
        let problem = validate(&pod)
            .and_then(|()| self.wasm_pod_without_init_containers(&pod))
            .err()
            .map(|e| (e.reason.to_owned(), e.message))
            .or_else(|| self.admission(&pod))
            .or_else(|| {
                prepare_volumes(&pod, &self.settings().pods_root)
                    .err()
                    .map(|e| (e.reason.to_owned(), e.message))
            });
        if let Some((reason, message)) = &problem {
            tracing::warn!(pod = %pod.key(), reason, "pod cannot start: {message}");
        }
        // Restart back-offs and started modules carry over to the new spec; volumes are
        // written again and waiting reasons found again.
        let state = match self.desired.remove(&uid) {
            Some(previous) => {
                let mut s = sync::lock(&previous.state);
                s.volumes_ready = false;
                s.waiting.clear();
                drop(s);
                previous.state
            }
            None => {
                let state = SharedState::default();
                sync::lock(&state).times =
                    crate::status::PodTimes::new(&pod, wedge_core::time::now_ms());
                state
            }
        };
        let has_problem = problem.is_some();
        let wasm = is_wasm_pod(self.settings(), &pod);
        self.directory.put(&pod, wasm, state.clone());
        self.desired.insert(
            uid.clone(),
            Desired {
                pod,
                problem,
                state,
            },
        );
        if !has_problem {
            self.workers.sync_now(&uid);
        }
        self.report_due = true;
    }

    /// Kubelet's admission of a pod the node has not taken on yet ([`crate::admission`]): the
    /// refusal, if any, as a problem whose reason makes the pod `Failed`. A pod the node took
    /// on before (it has a `startTime`) is not weighed again, so a restart under pressure does
    /// not fail the pods it was running; one refused before stays refused.
    fn admission(&mut self, pod: &Pod) -> Option<(String, String)> {
        let seen = &pod.status;
        if seen.phase == "Failed" && crate::admission::REASONS.contains(&seen.reason.as_str()) {
            return Some((seen.reason.clone(), seen.message.clone()));
        }
        if seen.start_time.is_some()
            || self.desired.contains_key(&pod.metadata.uid)
            || crate::static_pods::is_static(pod)
        {
            return None;
        }
        let (cpu_millis, memory_bytes) = *self.allocatable.get_or_insert_with(|| {
            let host = crate::node::host::HostInfo::read(&self.sync.edged.settings.pods_root);
            crate::node::status::allocatable_cpu_memory(&host)
        });
        let facts = crate::admission::NodeFacts {
            max_pods: self
                .settings()
                .node_report
                .as_ref()
                .map_or(110, |r| r.max_pods),
            cpu_millis,
            memory_bytes,
            pressure: *self.sync.edged.pressure.borrow(),
        };
        let admitted = self.desired.values().filter(|d| {
            d.problem.is_none() && !matches!(d.pod.status.phase.as_str(), "Succeeded" | "Failed")
        });
        let refused = crate::admission::admit(pod, admitted.map(|d| &d.pod), &facts).err()?;
        tracing::warn!(pod = %pod.key(), reason = refused.reason, "pod not admitted: {}", refused.message);
        self.sync.events.record(
            pod,
            None,
            crate::events::EventType::Warning,
            refused.reason,
            refused.message.clone(),
        );
        Some((refused.reason.to_owned(), refused.message))
    }

    /// A Wasm pod's containers are long-running modules in the node's Wasm host, which has no
    /// run-to-completion: such a pod with init containers is refused, naming the field.
    fn wasm_pod_without_init_containers(&self, pod: &Pod) -> Result<(), crate::pod::SpecError> {
        if pod.spec.init_containers.is_empty() || !is_wasm_pod(self.settings(), pod) {
            return Ok(());
        }
        Err(crate::pod::SpecError {
            reason: "InvalidPodSpec",
            message: "spec.initContainers: a Wasm pod cannot have init containers (its modules \
                      run until stopped); run the preparation in a Docker pod"
                .into(),
        })
    }

    /// A graceful deletion (the pod carries `deletionTimestamp`): stop wanting the pod, stop
    /// its containers within its grace period, then ask the cloud to remove the object —
    /// kubelet's way, without which the pod stays `Terminating` forever.
    fn terminate(&mut self, pod: Pod) {
        let uid = pod.metadata.uid.clone();
        if self.killing.get(&uid).is_some_and(|k| k.confirm_deletion) {
            // Already terminating: the cloud echoes the object while it waits.
            return;
        }
        let grace = pod.termination_grace();
        tracing::info!(pod = %pod.key(), ?grace, "pod terminating (deletionTimestamp set)");
        let state = self.desired.remove(&uid).map(|d| d.state);
        self.directory.terminating(&uid);
        self.stop_tracking(&uid);
        self.killing.insert(
            uid.clone(),
            KillJob {
                uid: uid.clone(),
                pod: Some(pod),
                state,
                grace: Some(grace),
                confirm_deletion: true,
            },
        );
        self.workers.kill(&uid);
    }

    /// Stops wanting pod `uid` (the cloud deleted it) and queues the removal of its
    /// containers within `grace`, else the pod's grace period.
    fn forget(&mut self, uid: &str, grace: Option<Duration>) {
        if let Some(terminating) = self.killing.get_mut(uid) {
            // Gone from the cloud already: nothing left to confirm there.
            terminating.confirm_deletion = false;
        }
        let Some(d) = self.desired.remove(uid) else {
            return;
        };
        tracing::info!(pod = %d.pod.key(), "pod deleted");
        self.directory.terminating(uid);
        self.stop_tracking(uid);
        let grace = grace.unwrap_or_else(|| d.pod.termination_grace());
        self.killing.insert(
            uid.to_owned(),
            KillJob {
                uid: uid.to_owned(),
                pod: Some(d.pod),
                state: Some(d.state),
                grace: Some(grace),
                confirm_deletion: false,
            },
        );
        self.workers.kill(uid);
    }

    /// Keeps `pod`'s update until `unhold-upgrade` releases it, and shows the hold in the
    /// cloud once (the pod's own status is the cloud's until then: edged does not run it).
    fn hold(&mut self, pod: Pod) {
        let shown = crate::hold_upgrade::shown_held(&pod);
        let (namespace, name) = (pod.namespace().to_owned(), pod.metadata.name.clone());
        if !self.held.hold(pod) {
            return;
        }
        tracing::info!(pod = %format!("{namespace}/{name}"), "pod held by its hold-upgrade annotation until unhold-upgrade");
        if shown {
            return;
        }
        let msg = Message::build(
            module::EDGED,
            group::META,
            operation::PATCH,
            &format!("{namespace}/podpatch/{name}"),
            Content::string(crate::hold_upgrade::condition_patch(
                wedge_core::time::now_ms(),
            )),
        );
        let bus = self.sync.bus.clone();
        let timeout = self.settings().query_timeout;
        tokio::spawn(async move {
            let failed = report::send_patch(&bus, msg, timeout).await.err();
            if let Some(e) = failed {
                tracing::warn!(pod = %format!("{namespace}/{name}"), "the HeldUpgrade condition did not reach the cloud: {e}");
            }
        });
    }

    /// Drops what the loop keeps of a pod it no longer runs: probes, the last status.
    fn stop_tracking(&mut self, uid: &str) {
        self.probers.retain(|(u, _), _| u != uid);
        self.reported.remove(uid);
        self.refused.remove(uid);
        self.refused_said.remove(uid);
        self.report_due = true;
    }

    /// Handles one message from the bus.
    fn handle(&mut self, msg: Message) {
        if crate::ctl::is_ctl(&msg.route.operation) {
            let (engine, bus) = (self.sync.engine.clone(), self.sync.bus.clone());
            let node = self.sync.edged.settings.node_name.clone();
            return crate::ctl::spawn(engine, bus, node, msg);
        }
        let resource = wedge_core::Resource::parse(&msg.route.resource).ok();
        let is_pod = resource.as_ref().is_some_and(|r| r.kind == "pod");
        let changed = matches!(
            msg.route.operation.as_str(),
            operation::INSERT | operation::UPDATE
        );
        if let (Some(r), true) = (&resource, changed)
            && let Some(kind) = crate::objects::Kind::of_resource(r.kind)
            && let Some(name) = r.name
        {
            return self.object_changed(kind, r.namespace, name);
        }
        if !is_pod {
            // Replies to our own podpatch/delete requests, and other kinds, are not ours to act
            // on; an error is worth a line.
            if msg.route.operation == operation::ERROR {
                tracing::debug!(resource = %msg.route.resource, "metamanager: {}", msg.content.raw());
            }
            return;
        }
        let text = msg
            .content
            .as_string()
            .unwrap_or_else(|| msg.content.raw().to_owned());
        match msg.route.operation.as_str() {
            operation::INSERT | operation::UPDATE => match Pod::from_json(&text) {
                Ok(pod)
                    if self.sync.edged.is_ours(&pod)
                        && msg.route.operation == operation::UPDATE
                        && crate::hold_upgrade::holds(&pod) =>
                {
                    self.hold(pod);
                }
                Ok(pod) if self.sync.edged.is_ours(&pod) => {
                    tracing::info!(pod = %pod.key(), op = %msg.route.operation, "pod desired");
                    self.want(pod);
                }
                Ok(_) => {}
                Err(e) => {
                    tracing::warn!(resource = %msg.route.resource, "pod message skipped: {e}")
                }
            },
            operation::UNHOLD_UPGRADE => {
                let key = resource
                    .as_ref()
                    .and_then(|r| Some(format!("{}/{}", r.namespace, r.name?)))
                    .unwrap_or_default();
                match self.held.release(&key) {
                    Some(pod) => {
                        tracing::info!(pod = %key, "pod released by unhold-upgrade");
                        self.want(pod);
                    }
                    None => {
                        tracing::info!(pod = %key, "unhold-upgrade: no held update of this pod")
                    }
                }
            }
            operation::DELETE => {
                if let Some(r) = &resource
                    && let Some(name) = r.name
                {
                    self.held.forget(r.namespace, name);
                }
                let deleted = Pod::from_json(&text).ok();
                // A forced deletion carries its own (short) grace period.
                let grace = deleted
                    .as_ref()
                    .filter(|p| p.metadata.deletion_grace_period_seconds.is_some())
                    .map(Pod::termination_grace);
                let uid = deleted.map(|p| p.metadata.uid);
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
                    self.forget(&uid, grace);
                }
            }
            _ => {}
        }
    }

    /// A ConfigMap or Secret changed in the cloud: the running pods whose volumes show it
    /// get their volumes written again (the kubelet's volume sync; environment variables
    /// keep the value they started with, as in Kubernetes).
    fn object_changed(&mut self, kind: crate::objects::Kind, namespace: &str, name: &str) {
        let showing: Vec<String> = self
            .desired
            .iter()
            .filter(|(_, d)| {
                d.pod.namespace() == namespace && crate::projected::shows(&d.pod, kind, name)
            })
            .map(|(uid, _)| uid.clone())
            .collect();
        for uid in showing {
            if let Some(d) = self.desired.get(&uid) {
                tracing::info!(pod = %d.pod.key(), object = %name, "{} changed; volumes written again", kind.resource());
                sync::lock(&d.state).volumes_ready = false;
            }
            self.workers.sync_now(&uid);
        }
    }

    /// Makes the static pods equal to the manifests in the static pod directory: new or
    /// edited files are (re)started, removed files stop their pod.
    fn sync_static_pods(&mut self) {
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
            tracing::info!(pod = %uid, "static pod manifest removed or changed");
            self.forget(&uid, None);
        }
        for pod in pods {
            if !self.desired.contains_key(&pod.metadata.uid) {
                tracing::info!(pod = %pod.key(), "static pod");
                self.want(pod);
            }
        }
    }

    /// PLEG, first half: lists the engine's containers in a task of its own, within
    /// `runtimeRequestTimeout`; the listing comes back to the loop as a [`Relisting`]. One at
    /// a time: while one is out, asking again only sets `report_due`, which the loop turns
    /// into the next listing.
    fn start_relist(&mut self) {
        if self.relisting {
            return;
        }
        self.relisting = true;
        let (sync, results) = (self.sync.clone(), self.relist_results.clone());
        let inspections = self.inspections.clone();
        let deadline = self.settings().runtime_request_timeout;
        tokio::spawn(async move {
            let listed_at = Instant::now();
            // New containers are inspected here too, so the loop's report finds them known.
            let listed = match tokio::time::timeout(deadline, async {
                let listed = sync.list().await?;
                inspections.prefetch(&sync.engine, &listed).await;
                Ok(listed)
            })
            .await
            {
                Ok(listed) => listed,
                Err(_) => Err(EngineError::Timeout(deadline)),
            };
            let _ = results.send(Relisting { listed_at, listed }).await;
        });
    }

    /// PLEG, second half: queues a sync of every pod not being worked on and the removal of
    /// orphans (labelled by us, pod no longer desired), and reports.
    async fn relisted(&mut self, r: Relisting) {
        self.relisting = false;
        let listed = match r.listed {
            Ok(listed) => listed,
            Err(e) => {
                tracing::warn!("listing containers failed: {e}");
                return self.runtime_down(&e).await;
            }
        };
        let orphans: std::collections::BTreeSet<String> = listed
            .iter()
            .filter(|c| !self.desired.contains_key(&c.pod_uid) && !self.workers.pending(&c.pod_uid))
            .map(|c| c.pod_uid.clone())
            .collect();
        for uid in orphans {
            tracing::info!(pod = %uid, "orphan containers to remove");
            self.killing.insert(uid.clone(), KillJob::orphan(&uid));
            self.workers.kill(&uid);
        }
        for (uid, d) in &self.desired {
            if d.problem.is_none() {
                self.workers.sync(uid);
            }
        }
        let listed = Arc::new(listed);
        self.snapshot = Some((r.listed_at, listed.clone()));
        self.dispatch();
        self.report(&listed, Some(r.listed_at)).await;
    }

    /// Answers the eviction manager's task ([`crate::eviction::pass`]).
    fn eviction_ask(&mut self, ask: crate::eviction::pass::Ask) {
        use crate::eviction::pass::{Ask, PodsNow};
        match ask {
            Ask::Pods(answer) => {
                let candidates = self
                    .desired
                    .iter()
                    .filter(|(_, d)| {
                        d.problem.is_none()
                            && !crate::static_pods::is_static(&d.pod)
                            && !matches!(d.pod.status.phase.as_str(), "Succeeded" | "Failed")
                    })
                    .map(|(uid, d)| (uid.clone(), d.pod.clone()))
                    .collect();
                let busy = self
                    .evicted_last
                    .as_ref()
                    .is_some_and(|uid| self.killing.contains_key(uid));
                let _ = answer.send(PodsNow {
                    candidates,
                    listed: self.snapshot.as_ref().map(|(_, listed)| listed.clone()),
                    busy,
                    evicted_removed_at: self.evicted_removed_at,
                });
            }
            Ask::Evict {
                uid,
                message,
                grace,
            } => self.evict(uid, message, grace),
        }
    }

    /// Evicts the pod an eviction pass chose: `Failed`/`Evicted` with kubelet's message, a
    /// Warning event, its containers killed with `grace` and its volumes removed; it is
    /// not started again.
    fn evict(&mut self, uid: String, message: String, grace: Duration) {
        let Some(d) = self.desired.get_mut(&uid).filter(|d| d.problem.is_none()) else {
            return;
        };
        tracing::warn!(pod = %d.pod.key(), "evicting: {message}");
        self.sync.events.record(
            &d.pod,
            None,
            crate::events::EventType::Warning,
            "Evicted",
            message.clone(),
        );
        d.problem = Some(("Evicted".to_owned(), message));
        self.killing.insert(
            uid.clone(),
            KillJob {
                uid: uid.clone(),
                pod: Some(d.pod.clone()),
                state: Some(d.state.clone()),
                grace: Some(grace),
                confirm_deletion: false,
            },
        );
        self.workers.kill(&uid);
        self.sync
            .edged
            .stats
            .evictions
            .fetch_add(1, Ordering::Relaxed);
        self.evicted_last = Some(uid);
        self.report_due = true;
    }

    /// Container GC in a task of its own (one pass at a time), judging by the pods desired
    /// now: a slow runtime delays the pass, not the loop.
    fn start_container_gc(&mut self) {
        if self.container_gc.as_ref().is_some_and(|t| !t.is_finished()) {
            return;
        }
        let desired: std::collections::HashSet<String> = self.desired.keys().cloned().collect();
        // Module files of Wasm pods go with the last pod pinning them, as images with GC.
        let pins: std::collections::HashSet<String> = self
            .desired
            .values()
            .flat_map(|d| d.pod.spec.containers.iter())
            .filter_map(|c| match crate::wasm_pods::ModuleRef::parse(&c.image) {
                Ok(crate::wasm_pods::ModuleRef::Https { sha256, .. }) => Some(sha256),
                _ => None,
            })
            .collect();
        let (engine, edged) = (self.sync.engine.clone(), self.sync.edged.clone());
        self.container_gc = Some(tokio::spawn(async move {
            crate::gc_pass::containers(&engine, &edged.settings, |uid| desired.contains(uid)).await;
            let removed = edged.fetcher.remove_unused(pins).await;
            if removed > 0 {
                tracing::info!(
                    removed,
                    "module files no pod pins removed from the module cache"
                );
            }
        }));
    }

    /// The relist could not list the runtime (down, missing, refusing): pods the node has not
    /// seen containers of yet wait in `ContainerCreating` with the runtime's error, which names
    /// its endpoint, and are reported; pods seen before keep what the last listing showed. The
    /// runtime is dialled again at the next relist ([`Engine`]'s reconnect period).
    async fn runtime_down(&mut self, e: &EngineError) {
        let last = self.snapshot.as_ref().map(|(_, listed)| listed.clone());
        let seen: std::collections::HashSet<&str> = last
            .iter()
            .flat_map(|l| l.iter().map(|c| c.pod_uid.as_str()))
            .collect();
        let message = format!("the container runtime is not available: {e}");
        for (uid, d) in &self.desired {
            if seen.contains(uid.as_str()) || is_wasm_pod(self.settings(), &d.pod) {
                continue;
            }
            let mut state = sync::lock(&d.state);
            for c in d.pod.all_containers() {
                state.waiting.insert(
                    c.name.clone(),
                    ("ContainerCreating".to_owned(), message.clone()),
                );
            }
        }
        let listed = last.unwrap_or_default();
        self.report(&listed, None).await;
    }

    /// Gives queued work to free workers.
    fn dispatch(&mut self) {
        let now = Instant::now();
        while let Some(work) = self.workers.next(now) {
            let uid = work.uid().to_owned();
            let task = match &work {
                Work::Sync(_) => {
                    let Some(d) = self.desired.get(&uid) else {
                        // Deleted while queued.
                        self.workers.done(&work, true, now);
                        continue;
                    };
                    let fresh = |(at, _): &&(Instant, Arc<Vec<ManagedContainer>>)| {
                        self.last_done.get(&uid).is_none_or(|done| at > done)
                    };
                    let listed =
                        self.snapshot.as_ref().filter(fresh).map(|(_, all)| {
                            all.iter().filter(|c| c.pod_uid == uid).cloned().collect()
                        });
                    let job = SyncJob {
                        pod: d.pod.clone(),
                        state: d.state.clone(),
                        listed,
                        wasm: is_wasm_pod(self.settings(), &d.pod),
                    };
                    let (sync, work) = (self.sync.clone(), work.clone());
                    self.tasks
                        .spawn(async move { (work, sync.sync(job).await) })
                }
                Work::Kill(_) => {
                    let job = self.killing.get(&uid).cloned();
                    let job = job.unwrap_or_else(|| KillJob::orphan(&uid));
                    let (sync, work) = (self.sync.clone(), work.clone());
                    self.tasks
                        .spawn(async move { (work, sync.kill(job).await) })
                }
            };
            self.task_work.insert(task.id(), work);
        }
        self.count_work();
    }

    /// Books a finished worker.
    fn finished(
        &mut self,
        done: Result<(tokio::task::Id, (Work, Outcome)), tokio::task::JoinError>,
    ) {
        let (work, outcome) = match done {
            Ok((id, (work, outcome))) => {
                self.task_work.remove(&id);
                (work, outcome)
            }
            Err(e) => {
                let Some(work) = self.task_work.remove(&e.id()) else {
                    return;
                };
                tracing::error!(pod = %work.uid(), "pod worker failed: {e}");
                let failed = Outcome {
                    ok: false,
                    changed: true,
                };
                (work, failed)
            }
        };
        let uid = work.uid().to_owned();
        let now = Instant::now();
        self.last_done.insert(uid.clone(), now);
        if let Some(delay) = self.workers.done(&work, outcome.ok, now) {
            self.sync
                .edged
                .stats
                .work_retries
                .fetch_add(1, Ordering::Relaxed);
            tracing::debug!(pod = %uid, ?work, "pod work failed; retried in {delay:?}");
        }
        if let Work::Kill(_) = work
            && outcome.ok
        {
            self.killing.remove(&uid);
            if self.evicted_last.as_deref() == Some(uid.as_str()) {
                self.evicted_removed_at = Some(now);
            }
            if !self.desired.contains_key(&uid) {
                self.last_done.remove(&uid);
                self.directory.remove(&uid);
            }
        }
        self.report_due |= outcome.changed;
    }

    fn count_work(&self) {
        let stats = &self.sync.edged.stats;
        let (adding, deleting) = self.workers.running();
        let (to_add, to_delete) = self.workers.queued();
        for (gauge, value) in [
            (&stats.additions_running, adding),
            (&stats.deletions_running, deleting),
            (&stats.additions_queued, to_add),
            (&stats.deletions_queued, to_delete),
        ] {
            gauge.store(value as u64, Ordering::Relaxed);
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
        let engine = Engine::new(
            &self.settings.runtime_endpoint,
            crate::engine::EngineOptions {
                pod_logs_dir: self.settings.pod_logs_dir.clone(),
            },
        );
        // A runtime that is not there yet fails only the calls made meanwhile (`Engine`):
        // the node stays up and each pod's status carries the reason.
        if let Err(e) = engine.version().await {
            tracing::error!("pods cannot run until the container runtime answers: {e}");
        }
        ctx.ready();
        let (eviction_asks, mut evictions) = mpsc::channel(4);
        let (reclaim_images, image_reclaims) = mpsc::channel(1);
        let pods_root = self.settings.pods_root.clone();
        let mut eviction = crate::eviction::pass::EvictionPass {
            manager: crate::eviction::Manager::new(self.settings.eviction.clone()),
            node_root: pods_root.parent().unwrap_or(&pods_root).to_path_buf(),
            // The engine's filesystem is kubelet's image filesystem.
            image_root: engine.root_dir().await.ok(),
            pods_root,
            engine: engine.clone(),
            stats_timeout: self.settings.runtime_request_timeout,
            asks: eviction_asks,
            pressure: self.pressure.clone(),
            reclaim_images,
        };
        // Read before registering, so the Node the cloud first sees says what the machine is
        // under (one registered with `DiskPressure` false on a full disk would show so until
        // its next status).
        eviction.observe().await;
        let stop_reports = ctx.token().child_token();
        let _stop_reports = stop_reports.clone().drop_guard();
        if let Some(mut settings) = self.settings.node_report.clone() {
            let version = engine.version().await.unwrap_or_default();
            settings.runtime_name = engine.runtime_name().to_owned();
            tokio::spawn(crate::node::report(
                ctx.bus().clone(),
                settings,
                version,
                self.registered.clone(),
                self.pressure.subscribe(),
                stop_reports,
            ));
        }
        let directory = Arc::new(directory::Directory::default());
        if let Some(server_settings) = self.settings.server.clone() {
            let server = Arc::new(crate::server::NodeServer::new(
                server_settings,
                engine.clone(),
                directory.clone(),
                self.wasm.clone(),
                crate::stats::StatsCollector::new(
                    engine.clone(),
                    &self.settings.node_name,
                    self.settings
                        .pods_root
                        .parent()
                        .unwrap_or(&self.settings.pods_root),
                ),
            ));
            *self.server_stats.lock().unwrap_or_else(|p| p.into_inner()) = Some(server.stats());
            if let Some(listener) = self.kubelet_listener.clone() {
                tokio::spawn(
                    server
                        .clone()
                        .serve_link(listener, ctx.token().child_token()),
                );
            }
            // A port that cannot be had costs the node its local reads, not its pods.
            match server.bind().await {
                Ok(Some(listener)) => {
                    tokio::spawn(server.serve(listener, ctx.token().child_token()));
                }
                Ok(None) => {}
                Err(e) => tracing::error!("the kubelet read-only port will not serve: {e}"),
            }
        }
        let (probe_results, mut probed) = mpsc::channel(256);
        let (patch_results, mut patched) = mpsc::channel(256);
        let (relist_results, mut relisted) = mpsc::channel(1);
        let settings = &self.settings;
        let mut sl = SyncLoop {
            sync: PodSync {
                edged: self.clone(),
                engine,
                bus: ctx.bus().clone(),
                events: crate::events::Recorder::start(
                    ctx.bus().clone(),
                    self.settings.events.clone(),
                    self.event_stats.clone(),
                    ctx.token().clone(),
                ),
            },
            desired: BTreeMap::new(),
            killing: HashMap::new(),
            workers: PodWorkers::new(
                settings.pod_workers,
                settings.work_retry_initial,
                settings.work_retry_max,
            ),
            tasks: JoinSet::new(),
            task_work: HashMap::new(),
            last_done: HashMap::new(),
            snapshot: None,
            relisting: false,
            allocatable: None,
            relist_results,
            container_gc: None,
            evicted_last: None,
            evicted_removed_at: None,
            held: Default::default(),
            reported: HashMap::new(),
            refused: Default::default(),
            refused_said: Default::default(),
            probers: HashMap::new(),
            probe_results,
            patch_results,
            inspections: Inspections::default(),
            host_ip: settings
                .node_report
                .as_ref()
                .and_then(|r| r.node_ip.clone())
                .or_else(crate::node::host::host_ipv4),
            report_due: true,
            directory,
        };
        let stored = tokio::select! {
            pods = self.stored_pods(ctx.bus()) => pods.map_err(ModuleError::from)?,
            _ = ctx.token().cancelled() => return Ok(()),
        };
        tracing::info!(pods = stored.len(), "pods from local state");
        for pod in stored {
            if crate::hold_upgrade::holds(&pod) {
                sl.hold(pod);
            } else {
                sl.want(pod);
            }
        }
        sl.sync_static_pods();
        let mut relist = tokio::time::interval(settings.relist);
        relist.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut resend = tokio::time::interval(settings.status_interval);
        resend.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        resend.tick().await;
        let mut static_check = tokio::time::interval(settings.static_check);
        static_check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        static_check.tick().await;
        let (mut container_gc, image_gc) = crate::gc_pass::timers(settings);
        // Image GC keeps its own records and needs nothing of the loop: a task of its own.
        tokio::spawn(image_gc.run(sl.sync.engine.clone(), image_reclaims, ctx.token().clone()));
        tokio::spawn(eviction.run(settings.eviction_interval, ctx.token().clone()));
        if let Some(policy) = settings.log_rotation {
            tokio::spawn(crate::log_rotation::run(
                sl.sync.engine.clone(),
                settings.node_name.clone(),
                policy,
                self.stats.logs_rotated.clone(),
                ctx.token().clone(),
            ));
        }
        loop {
            tokio::select! {
                msg = ctx.recv() => match msg {
                    Some(msg) => sl.handle(msg),
                    None => return Ok(()),
                },
                Some(done) = sl.tasks.join_next_with_id() => sl.finished(done),
                _ = relist.tick() => sl.start_relist(),
                // The relist task inspected what is new; a container that changed since
                // is inspected here, with the supervisor's pings answered meanwhile.
                Some(listing) = relisted.recv() => ctx.alive_during(sl.relisted(listing)).await,
                _ = resend.tick() => sl.resend_refused(),
                Some(result) = patched.recv() => sl.patched(result),
                _ = static_check.tick(), if settings.static_pod_dir.is_some() => {
                    sl.sync_static_pods();
                }
                Some(result) = probed.recv() => sl.probed(result),
                _ = container_gc.tick() => sl.start_container_gc(),
                Some(ask) = evictions.recv() => sl.eviction_ask(ask),
            }
            sl.dispatch();
            if sl.report_due {
                sl.start_relist();
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
        for (name, help, additions, deletions) in [
            (
                "wedge_edged_pod_workers_running",
                "Pod workers running now, per queue.",
                &s.additions_running,
                &s.deletions_running,
            ),
            (
                "wedge_edged_pod_work_queued",
                "Pods waiting for a worker (or their retry), per queue.",
                &s.additions_queued,
                &s.deletions_queued,
            ),
        ] {
            w.family(name, help, "gauge");
            w.sample(name, &[("queue", "additions")], load(additions));
            w.sample(name, &[("queue", "deletions")], load(deletions));
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
                "wedge_edged_pod_work_retries_total",
                "Pod syncs and kills that failed and were queued again with back-off.",
                &s.work_retries,
            ),
            (
                "wedge_edged_statuses_sent_total",
                "Pod status patches sent to metamanager.",
                &s.statuses_sent,
            ),
            (
                "wedge_edged_events_sent_total",
                "Pod events sent to the cloud as new (reportEvent).",
                &self.event_stats.sent,
            ),
            (
                "wedge_edged_events_aggregated_total",
                "Pod events that repeated an earlier one and were sent as a patch of it.",
                &self.event_stats.aggregated,
            ),
            (
                "wedge_edged_events_dropped_total",
                "Pod events dropped: over eventRecordQPS/eventBurst, or the recorder's queue full.",
                &self.event_stats.dropped,
            ),
            (
                "wedge_edged_evictions_total",
                "Pods evicted by the eviction manager (memory.available, nodefs.available, imagefs.available).",
                &s.evictions,
            ),
            (
                "wedge_edged_statuses_refused_total",
                "Pod status patches the cloud refused or did not answer (each is sent again, built anew).",
                &s.statuses_refused,
            ),
            (
                "wedge_edged_container_logs_rotated_total",
                "CRI container logs renamed away and reopened (containerLogMaxSize).",
                &s.logs_rotated,
            ),
        ] {
            w.family(name, help, "counter");
            w.sample(name, &[], load(value));
        }
        let server = self
            .server_stats
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        if let Some(server) = server {
            let name = "wedge_edged_kubelet_port_requests_total";
            w.family(
                name,
                "Requests to the node's kubelet port (logs, exec, attach, metrics), and those answered with an error.",
                "counter",
            );
            for (kind, value) in [
                ("logs", &server.logs),
                ("exec", &server.exec),
                ("attach", &server.attach),
                ("metrics", &server.metrics),
                ("error", &server.errors),
            ] {
                w.sample(name, &[("kind", kind)], load(value));
            }
            let name = "wedge_edged_read_only_port_refused_total";
            w.family(
                name,
                "Read-only kubelet port requests and connections turned away: a route served only through the tunnel (route), the idlest connection closed for a new one (evicted), a new connection closed with every open one busy (full).",
                "counter",
            );
            for (reason, value) in [
                ("route", &server.refused_read_only),
                ("evicted", &server.evicted),
                ("full", &server.full),
            ] {
                w.sample(name, &[("reason", reason)], load(value));
            }
        }
    }
}
