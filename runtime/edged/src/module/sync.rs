//! What a pod worker does: sync one pod (make its containers match its spec) or kill one
//! (remove its containers, directories and, for a deleted pod, tell metamanager).
//!
//! A worker owns its pod while it runs (see [`super::workers`]), so it may take its time:
//! image pulls, volume contents fetched through metamanager, stop grace periods. What the
//! status report needs from it (why a container waits, restart back-offs, the Wasm modules it
//! started) is kept in the pod's [`PodState`], which the loop reads when it reports.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use wedge_core::message::{group, module, operation};
use wedge_core::{Bus, Content, Message};

use super::Edged;
use super::wasm::WasmContainer;
use crate::engine::{Engine, EngineError, ImageReady, ManagedContainer};
use crate::events::EventType;
use crate::plan::{container_plan, spec_hash};
use crate::pod::{Container, Pod};
use crate::projected::{Objects, container_env, write_volumes};
use crate::sandbox::{self, Step};

/// What edged knows of a pod's progress, shared between its worker and the status report.
#[derive(Debug, Default)]
pub(super) struct PodState {
    /// Per container: why it waits (image pull failed, back-off), with a message.
    pub(super) waiting: HashMap<String, (String, String)>,
    /// Per container: earliest next restart and the current back-off.
    pub(super) backoff: HashMap<String, (Instant, Duration)>,
    /// ConfigMap and Secret volumes are written (tried at every sync until they are).
    pub(super) volumes_ready: bool,
    /// When the volumes must be written again: 80 % into the lifetime of the shortest-lived
    /// service-account token they hold, as kubelet refreshes tokens.
    pub(super) volumes_refresh: Option<Instant>,
    /// Wasm pods: the module each container runs.
    pub(super) wasm: HashMap<String, WasmContainer>,
    /// The pod's start time and condition transition times, for its status.
    pub(super) times: crate::status::PodTimes,
}

/// A pod's [`PodState`], shared.
pub(super) type SharedState = Arc<Mutex<PodState>>;

/// Locks a pod's state. The lock is never held across an await, so a poisoned lock only
/// means a panic mid-update of plain maps; the data is still usable.
pub(super) fn lock(state: &SharedState) -> MutexGuard<'_, PodState> {
    state
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// A sync of one pod, as the loop hands it to a worker.
pub(super) struct SyncJob {
    pub(super) pod: Pod,
    pub(super) state: SharedState,
    /// The pod's containers from a listing taken after its last worker finished; `None` makes
    /// the worker list them itself.
    pub(super) listed: Option<Vec<ManagedContainer>>,
    /// Run in the Wasm host rather than on Docker.
    pub(super) wasm: bool,
}

/// A kill of one pod's containers.
#[derive(Clone)]
pub(super) struct KillJob {
    pub(super) uid: String,
    /// The deleted pod; `None` for orphan containers (no pod known).
    pub(super) pod: Option<Pod>,
    /// Its state, for the Wasm modules the pod deployed.
    pub(super) state: Option<SharedState>,
    /// How long each container gets between SIGTERM and SIGKILL; `None`: the module's
    /// `stop_grace`.
    pub(super) grace: Option<Duration>,
    /// The pod is being deleted gracefully (`deletionTimestamp`): once its containers are
    /// gone, ask the cloud to remove the pod object, as kubelet's status manager does.
    pub(super) confirm_deletion: bool,
}

impl KillJob {
    /// The removal of containers labelled with pod `uid` that no desired pod owns.
    pub(super) fn orphan(uid: &str) -> KillJob {
        KillJob {
            uid: uid.to_owned(),
            pod: None,
            state: None,
            grace: None,
            confirm_deletion: false,
        }
    }
}

/// What kubelet sends to remove a pod whose containers it stopped: no further grace, and
/// only this incarnation of the pod (a pod re-created under the same name is left alone).
fn delete_options(pod: &Pod) -> serde_json::Value {
    serde_json::json!({"gracePeriodSeconds": 0, "preconditions": {"uid": pod.metadata.uid}})
}

/// What a sync pass did about the pod's sandbox.
enum SandboxPass {
    /// Containers join this sandbox (`None`: no sandbox, a network of their own).
    Join(Option<String>),
    /// A new sandbox was created and is starting; containers of the old one are replaced.
    Created(String, SandboxStart),
    /// The pod is done (no container to run again): nothing to do.
    Finished,
    /// The sandbox could not be made; the containers wait with the reason.
    Failed,
}

/// A new sandbox starting while the pod's containers are created: each container waits for
/// it only before its own start, so the sandbox's start (the engine's network setup, the
/// slowest step of a pod's start) overlaps the containers' creation.
enum SandboxStart {
    /// Running (or no sandbox): containers start at once.
    Running,
    /// Being started by this task.
    Starting(tokio::task::JoinHandle<Result<(), EngineError>>),
    /// It did not start (and was removed), with why.
    Failed(String),
}

impl SandboxStart {
    /// Waits for the sandbox to run; an error is the containers' waiting reason.
    async fn running(&mut self) -> Result<(), EngineError> {
        if let SandboxStart::Starting(handle) = self {
            *self = match handle.await {
                Ok(Ok(())) => SandboxStart::Running,
                Ok(Err(e)) => SandboxStart::Failed(e.to_string()),
                Err(e) => SandboxStart::Failed(format!("its start was cut short: {e}")),
            };
        }
        match self {
            SandboxStart::Failed(why) => Err(EngineError::Image {
                reason: "ContainerCreating",
                message: format!("pod sandbox not started: {why}"),
            }),
            _ => Ok(()),
        }
    }
}

/// Where a sync pass left the pod's init containers.
enum InitPass {
    /// All completed in the current sandbox (or the pod has none): the app containers run.
    Done,
    /// One runs, waits for its back-off, was just started, or failed for good: the app
    /// containers wait. Says how this pass went.
    NotDone(Outcome),
}

/// How a worker's run went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Outcome {
    /// Everything asked was done; otherwise the work is retried with back-off.
    pub(super) ok: bool,
    /// Something changed on the engine or in the pod's state: report status now.
    pub(super) changed: bool,
}

/// What a worker works with.
#[derive(Clone)]
pub(super) struct PodSync {
    pub(super) edged: Arc<Edged>,
    pub(super) engine: Engine,
    pub(super) bus: Bus,
    /// Where pod events are recorded.
    pub(super) events: crate::events::Recorder,
}

impl PodSync {
    pub(super) fn settings(&self) -> &super::EdgedSettings {
        &self.edged.settings
    }

    fn engine_error(&self) {
        self.edged
            .stats
            .engine_errors
            .fetch_add(1, Ordering::Relaxed);
    }

    /// Every container this node's edged made (a failure is counted; callers say what for).
    pub(super) async fn list(&self) -> Result<Vec<ManagedContainer>, EngineError> {
        self.engine
            .list(&self.settings().node_name)
            .await
            .inspect_err(|_| self.engine_error())
    }

    /// The containers of pod `uid` on the engine.
    async fn list_pod(&self, uid: &str) -> Result<Vec<ManagedContainer>, EngineError> {
        let listed = self.list().await?;
        Ok(listed.into_iter().filter(|c| c.pod_uid == uid).collect())
    }

    /// Stops and removes one container, SIGKILL after `grace` (the module's `stop_grace`
    /// when `None`); false when the engine refused.
    pub(super) async fn stop_remove(&self, c: &ManagedContainer, grace: Option<Duration>) -> bool {
        let grace = grace.unwrap_or(self.settings().stop_grace);
        match self.engine.stop_and_remove(&c.id, grace).await {
            Ok(()) => {
                self.edged.stats.removed.fetch_add(1, Ordering::Relaxed);
                true
            }
            Err(e) => {
                self.engine_error();
                tracing::warn!(container = %c.id, "container not removed: {e}");
                false
            }
        }
    }

    /// Stops and removes containers concurrently (each has its own grace period).
    async fn stop_remove_all(
        &self,
        containers: &[&ManagedContainer],
        grace: Option<Duration>,
    ) -> bool {
        let removals = containers.iter().map(|c| self.stop_remove(c, grace));
        futures_util::future::join_all(removals)
            .await
            .into_iter()
            .all(|ok| ok)
    }

    /// Makes pod `job.pod`'s containers match its spec: writes its volumes, removes containers
    /// whose spec changed or left the pod, starts missing ones and restarts exited ones per
    /// the restart policy and back-off.
    pub(super) async fn sync(&self, job: SyncJob) -> Outcome {
        if job.wasm {
            return self.sync_wasm(&job.pod, &job.state).await;
        }
        let pod = &job.pod;
        let uid = pod.metadata.uid.as_str();
        let ours = match job.listed {
            Some(listed) => listed,
            None => match self.list_pod(uid).await {
                Ok(listed) => listed,
                Err(e) => {
                    tracing::warn!(pod = %pod.key(), "listing containers failed: {e}");
                    return Outcome {
                        ok: false,
                        changed: false,
                    };
                }
            },
        };
        let mut outcome = Outcome {
            ok: true,
            changed: false,
        };
        let bus = self.bus.clone();
        let mut objects = Objects::new(&bus, pod, self.settings().object_timeout);
        let refresh_due = lock(&job.state)
            .volumes_refresh
            .is_some_and(|at| Instant::now() >= at);
        if refresh_due || !lock(&job.state).volumes_ready {
            let written = write_volumes(pod, &self.settings().pods_root, &mut objects).await;
            let mut state = lock(&job.state);
            outcome.changed = true;
            match written {
                Ok(token_lifetime) => {
                    state.volumes_ready = true;
                    state.volumes_refresh = token_lifetime.map(|ttl| Instant::now() + ttl * 4 / 5);
                    state.waiting.clear();
                }
                Err(message) => {
                    tracing::warn!(pod = %pod.key(), "volumes not ready: {message}");
                    self.events.record(
                        pod,
                        None,
                        EventType::Warning,
                        "FailedMount",
                        format!("MountVolume.SetUp failed: {message}"),
                    );
                    for c in pod.all_containers() {
                        state.waiting.insert(
                            c.name.clone(),
                            ("ContainerCreating".into(), message.clone()),
                        );
                    }
                    outcome.ok = false;
                    return outcome;
                }
            }
        }
        let mut sandbox = SandboxStart::Running;
        let sandbox_id = match self.sync_sandbox(pod, &job.state, &ours).await {
            SandboxPass::Join(id) => id,
            SandboxPass::Created(id, start) => {
                outcome.changed = true;
                sandbox = start;
                Some(id)
            }
            SandboxPass::Finished => return outcome,
            SandboxPass::Failed => {
                outcome.changed = true;
                outcome.ok = false;
                return outcome;
            }
        };
        let ours: Vec<ManagedContainer> = ours.into_iter().filter(|c| !c.sandbox).collect();
        // Containers no longer in the spec.
        let gone: Vec<&ManagedContainer> = ours
            .iter()
            .filter(|c| !pod.has_container(&c.container))
            .collect();
        if !gone.is_empty() {
            outcome.changed = true;
            outcome.ok &= self.stop_remove_all(&gone, None).await;
        }
        let init = self
            .sync_init(
                pod,
                &job.state,
                &ours,
                (sandbox_id.as_deref(), &mut sandbox),
                &mut objects,
            )
            .await;
        if let InitPass::NotDone(step) = init {
            outcome.changed |= step.changed;
            outcome.ok &= step.ok;
            if let Err(e) = sandbox.running().await {
                tracing::warn!(pod = %pod.key(), "{e}");
                outcome.ok = false;
            }
            return outcome;
        }
        for spec in &pod.spec.containers {
            let hash = spec_hash(pod, spec);
            let mut mine: Vec<&ManagedContainer> =
                ours.iter().filter(|c| c.container == spec.name).collect();
            mine.sort_by_key(|c| c.restart_count);
            // A changed spec replaces every container of that name.
            if mine.iter().any(|c| c.hash != hash) {
                outcome.changed = true;
                if !self.stop_remove_all(&mine, None).await {
                    outcome.ok = false;
                    continue;
                }
                mine.clear();
            }
            let newest = mine.last().copied();
            let attempt = match newest {
                None => 0,
                // Its network is gone (the sandbox was replaced): it runs again in the new one,
                // counted as a restart, without a crash back-off (it did not crash).
                Some(c) if !sandbox::joined(c, sandbox_id.as_deref()) => {
                    outcome.changed = true;
                    if !self.stop_remove_all(&mine, None).await {
                        outcome.ok = false;
                        continue;
                    }
                    c.restart_count + 1
                }
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
                    if !self.backoff_elapsed(pod, &job.state, &spec.name) {
                        outcome.changed = true;
                        continue;
                    }
                    // Keep the newest dead container (its logs), drop older ones.
                    let older = &mine[..mine.len().saturating_sub(1)];
                    self.stop_remove_all(older, None).await;
                    c.restart_count + 1
                }
            };
            outcome.changed = true;
            let started = self
                .start_container(
                    pod,
                    &job.state,
                    spec,
                    (attempt, sandbox_id.as_deref(), &mut sandbox),
                    &mut objects,
                )
                .await;
            outcome.ok &= started;
        }
        // No container got as far as its start: the sandbox's own outcome still counts.
        if let Err(e) = sandbox.running().await {
            tracing::warn!(pod = %pod.key(), "{e}");
            outcome.ok = false;
        }
        outcome
    }

    /// Kubelet's init phase: runs the pod's init containers one at a time, in order, each to
    /// a successful exit, in the current sandbox. A failed one is run again (a new container,
    /// counted as a restart) after the crash back-off, unless the pod's restart policy is
    /// `Never`, which ends the pod. Once an app container joined the current sandbox the
    /// phase is over for good: a later change to an init container changes nothing, and only
    /// a new sandbox runs them all again.
    async fn sync_init(
        &self,
        pod: &Pod,
        state: &SharedState,
        ours: &[ManagedContainer],
        (sandbox_id, sandbox): (Option<&str>, &mut SandboxStart),
        objects: &mut Objects<'_>,
    ) -> InitPass {
        let app_started = ours
            .iter()
            .any(|c| !pod.is_init_container(&c.container) && sandbox::joined(c, sandbox_id));
        if pod.spec.init_containers.is_empty() || app_started {
            return InitPass::Done;
        }
        let waiting = |changed| InitPass::NotDone(Outcome { ok: true, changed });
        for spec in &pod.spec.init_containers {
            let hash = spec_hash(pod, spec);
            let mut mine: Vec<&ManagedContainer> =
                ours.iter().filter(|c| c.container == spec.name).collect();
            mine.sort_by_key(|c| c.restart_count);
            let attempt = match mine.last().copied() {
                None => 0,
                // Run in an old sandbox, or under an older spec: it runs again here.
                Some(c) if !sandbox::joined(c, sandbox_id) || c.hash != hash => {
                    if !self.stop_remove_all(&mine, None).await {
                        return InitPass::NotDone(Outcome {
                            ok: false,
                            changed: true,
                        });
                    }
                    c.restart_count + 1
                }
                Some(c) if c.state == "running" => return waiting(false),
                Some(c) => {
                    let run = self.engine.inspect(&c.id).await.ok().flatten();
                    let exit = match run {
                        Some(run) if c.state != "created" => run.exit_code,
                        // Never started (its start failed): a failure like any other.
                        _ => -1,
                    };
                    if exit == 0 {
                        continue;
                    }
                    if pod.restart_policy() == "Never" {
                        // Kubelet's rule: the pod has failed; nothing more runs.
                        return waiting(false);
                    }
                    if !self.backoff_elapsed(pod, state, &spec.name) {
                        return waiting(true);
                    }
                    // Keep the newest failed run (its logs), drop older ones.
                    let older = &mine[..mine.len().saturating_sub(1)];
                    self.stop_remove_all(older, None).await;
                    c.restart_count + 1
                }
            };
            let started = self
                .start_container(pod, state, spec, (attempt, sandbox_id, sandbox), objects)
                .await;
            return InitPass::NotDone(Outcome {
                ok: started,
                changed: true,
            });
        }
        InitPass::Done
    }

    /// The pod's sandbox on this pass (see [`crate::sandbox`]): the one its containers join,
    /// a new one (after stopping the containers of the dead or outdated one), or none.
    async fn sync_sandbox(
        &self,
        pod: &Pod,
        state: &SharedState,
        ours: &[ManagedContainer],
    ) -> SandboxPass {
        let image = self.settings().pod_sandbox_image.as_str();
        match sandbox::step(pod, image, self.engine.is_cri(), ours) {
            Step::NoSandbox { stale } => {
                self.remove_sandboxes(&stale, false).await;
                SandboxPass::Join(None)
            }
            Step::Ready { sandbox, stale } => {
                self.remove_sandboxes(&stale, false).await;
                SandboxPass::Join(Some(sandbox.id.clone()))
            }
            Step::Create { attempt, stale } => {
                if self.finished(pod, ours).await {
                    // Kubelet's rule: a pod whose containers all ended for good gets no new
                    // sandbox; its status stays what its containers left.
                    return SandboxPass::Finished;
                }
                // The containers' network is dead or outdated: stop them before the old
                // sandbox goes (they are replaced, and counted as restarted, once the new one
                // runs).
                let running: Vec<&ManagedContainer> = ours
                    .iter()
                    .filter(|c| !c.sandbox && c.state == "running")
                    .collect();
                let grace = self.settings().stop_grace;
                let stops = running.iter().map(|c| self.engine.stop(&c.id, grace));
                for (c, stopped) in running
                    .iter()
                    .zip(futures_util::future::join_all(stops).await)
                {
                    if let Err(e) = stopped {
                        self.engine_error();
                        tracing::warn!(container = %c.id, "container not stopped: {e}");
                    }
                }
                if !self.remove_sandboxes(&stale, false).await {
                    return SandboxPass::Failed;
                }
                let node = &self.settings().node_name;
                let created = async {
                    self.engine.ensure_sandbox_image(image).await?;
                    let mut plan = sandbox::plan(node, pod, image, attempt);
                    let not_configured = |message: String| EngineError::Image {
                        reason: "ContainerCreating",
                        message,
                    };
                    let resolver = self.pod_resolver(pod).map_err(not_configured)?;
                    crate::name_plan::for_sandbox(&mut plan, pod, &self.settings().dns, resolver)
                        .map_err(|e| not_configured(e.message))?;
                    self.engine.create_sandbox(&plan).await
                }
                .await;
                match created {
                    Ok(id) => {
                        tracing::info!(pod = %pod.key(), attempt, sandbox = %id, "pod sandbox created");
                        let (engine, starting) = (self.engine.clone(), id.clone());
                        let start =
                            tokio::spawn(async move { engine.start_sandbox(&starting).await });
                        SandboxPass::Created(id, SandboxStart::Starting(start))
                    }
                    Err(e) => {
                        self.engine_error();
                        let reason = match &e {
                            EngineError::Image { reason, .. } => (*reason).to_owned(),
                            _ => "ContainerCreating".to_owned(),
                        };
                        let message = format!("pod sandbox not created: {e}");
                        tracing::warn!(pod = %pod.key(), "{message}");
                        let mut state = lock(state);
                        for c in pod.all_containers() {
                            state
                                .waiting
                                .insert(c.name.clone(), (reason.clone(), message.clone()));
                        }
                        SandboxPass::Failed
                    }
                }
            }
        }
    }

    /// Whether every container of `pod` ended and its restart policy restarts none of them.
    async fn finished(&self, pod: &Pod, ours: &[ManagedContainer]) -> bool {
        let policy = pod.restart_policy();
        if policy == "Always" || pod.spec.containers.is_empty() {
            return false;
        }
        if policy == "Never" && self.init_failed(pod, ours).await {
            return true;
        }
        for spec in &pod.spec.containers {
            let newest = ours
                .iter()
                .filter(|c| !c.sandbox && c.container == spec.name)
                .max_by_key(|c| c.restart_count);
            let Some(c) = newest.filter(|c| c.state == "exited" || c.state == "dead") else {
                return false;
            };
            if policy == "OnFailure" {
                let run = self.engine.inspect(&c.id).await.ok().flatten();
                if run.is_none_or(|r| r.exit_code != 0) {
                    return false;
                }
            }
        }
        true
    }

    /// Whether an init container of `pod` ended with a failure and no app container ever
    /// started: under `restartPolicy: Never`, a pod that has failed for good.
    async fn init_failed(&self, pod: &Pod, ours: &[ManagedContainer]) -> bool {
        if ours
            .iter()
            .any(|c| !c.sandbox && !pod.is_init_container(&c.container))
        {
            return false;
        }
        for spec in &pod.spec.init_containers {
            let newest = ours
                .iter()
                .filter(|c| c.container == spec.name)
                .max_by_key(|c| c.restart_count);
            let Some(c) = newest.filter(|c| c.state == "exited" || c.state == "dead") else {
                continue;
            };
            let run = self.engine.inspect(&c.id).await.ok().flatten();
            if run.is_some_and(|r| r.exit_code != 0) {
                return true;
            }
        }
        false
    }

    /// Stops and removes sandboxes (their pods' containers should be gone or stopped);
    /// while the pod stays (`pod_gone` false) a CRI runtime's are only stopped (below).
    async fn remove_sandboxes(&self, sandboxes: &[&ManagedContainer], pod_gone: bool) -> bool {
        let mut ok = true;
        for s in sandboxes {
            if self.engine.is_cri() && !pod_gone {
                // A CRI runtime removes a sandbox's containers with it, and the pod's restart
                // counts live in those: a stale sandbox is only stopped (its network and host
                // ports go), and container GC removes it once it holds no container (kubelet's
                // rule).
                if s.state == "running"
                    && let Err(e) = self.engine.stop(&s.id, sandbox::STOP_GRACE).await
                {
                    self.engine_error();
                    tracing::warn!(sandbox = %s.id, "pod sandbox not stopped: {e}");
                    ok = false;
                }
                continue;
            }
            if let Err(e) = self.engine.remove_sandbox(&s.id).await {
                self.engine_error();
                tracing::warn!(sandbox = %s.id, "pod sandbox not removed: {e}");
                ok = false;
            } else {
                self.edged.stats.removed.fetch_add(1, Ordering::Relaxed);
            }
        }
        ok
    }

    /// True when `container` may be restarted now; otherwise records it as in
    /// `CrashLoopBackOff`. Taking a restart doubles the next back-off.
    fn backoff_elapsed(&self, pod: &Pod, state: &SharedState, container: &str) -> bool {
        let (initial, max) = (self.settings().initial_backoff, self.settings().max_backoff);
        let mut state = lock(state);
        let now = Instant::now();
        let (until, delay) = state
            .backoff
            .get(container)
            .copied()
            .unwrap_or((now, initial));
        if now < until {
            self.events.record(
                pod,
                Some(container),
                EventType::Warning,
                "BackOff",
                format!(
                    "Back-off restarting failed container {container} in pod {}",
                    pod.key()
                ),
            );
            state.waiting.insert(
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
        state
            .backoff
            .insert(container.to_owned(), (now + delay, (delay * 2).min(max)));
        true
    }

    /// Creates and starts one container; a failure is recorded as the container's waiting
    /// reason and returns false.
    async fn start_container(
        &self,
        pod: &Pod,
        state: &SharedState,
        spec: &Container,
        (attempt, sandbox_id, sandbox): (u32, Option<&str>, &mut SandboxStart),
        objects: &mut Objects<'_>,
    ) -> bool {
        let settings = self.settings();
        let env = container_env(pod, &settings.node_name, spec, objects).await;
        let outcome = async {
            let config_error = |message: String| EngineError::Image {
                reason: "CreateContainerConfigError",
                message,
            };
            let env = env.map_err(config_error)?;
            crate::subpath::prepare(pod, spec, &settings.pods_root, &env, |volume| {
                crate::plan::volume_source(pod, volume, &settings.pods_root).map(|(root, _)| root)
            })
            .map_err(|e| config_error(e.to_string()))?;
            let credentials = crate::pull_secrets::credentials(pod, &spec.image, objects).await;
            let image = &spec.image;
            let pulled = self
                .engine
                .ensure_image(image, spec.pull_policy(), &credentials)
                .await;
            let (kind, reason, message) = match &pulled {
                Ok(ImageReady::Present) => (
                    EventType::Normal,
                    "Pulled",
                    format!("Container image {image:?} already present on machine"),
                ),
                Ok(ImageReady::Pulled(took)) => (
                    EventType::Normal,
                    "Pulled",
                    format!("Successfully pulled image {image:?} in {took:.3?}"),
                ),
                Err(EngineError::Image {
                    reason: "ErrImageNeverPull",
                    ..
                }) => (
                    EventType::Warning,
                    "ErrImageNeverPull",
                    format!("Container image {image:?} is not present with pull policy of Never"),
                ),
                Err(e) => (
                    EventType::Warning,
                    "Failed",
                    format!("Failed to pull image {image:?}: {e}"),
                ),
            };
            self.events
                .record(pod, Some(&spec.name), kind, reason, message);
            pulled?;
            self.engine.verify_run_as_non_root(pod, spec).await?;
            let mut plan = container_plan(
                &settings.node_name,
                pod,
                spec,
                attempt,
                &settings.pods_root,
                &env,
                sandbox_id,
            )
            .map_err(|e| config_error(e.message))?;
            crate::security_context::apply_seccomp_default(
                &mut plan.security,
                pod,
                spec,
                settings.seccomp_default,
            );
            // Without a sandbox the container owns its resolver configuration.
            let resolver = match sandbox_id {
                Some(_) => None,
                None => Some(self.pod_resolver(pod).map_err(config_error)?),
            };
            let hosts = crate::name_plan::for_container(
                &mut plan,
                pod,
                spec,
                sandbox_id,
                resolver,
                &settings.pods_root,
                &settings.dns,
            )
            .map_err(|e| config_error(e.message))?;
            let mut hosts_complete = true;
            if let Some(file) = &hosts {
                hosts_complete = self
                    .write_hosts(pod, file, sandbox_id)
                    .await
                    .map_err(config_error)?;
            }
            let id = self.engine.create(&plan).await?;
            self.events.record(
                pod,
                Some(&spec.name),
                EventType::Normal,
                "Created",
                format!("Created container: {}", spec.name),
            );
            sandbox.running().await?;
            // A sandbox that was starting has its IP now: the hosts file gets its line.
            if let Some(file) = hosts.as_ref().filter(|_| !hosts_complete) {
                self.write_hosts(pod, file, sandbox_id)
                    .await
                    .map_err(config_error)?;
            }
            self.engine.start(&id).await
        }
        .await;
        let mut state = lock(state);
        match outcome {
            Ok(()) => {
                state.waiting.remove(&spec.name);
                let counter = if attempt == 0 {
                    &self.edged.stats.starts
                } else {
                    &self.edged.stats.restarts
                };
                counter.fetch_add(1, Ordering::Relaxed);
                tracing::info!(pod = %pod.key(), container = %spec.name, attempt, "container started");
                self.events.record(
                    pod,
                    Some(&spec.name),
                    EventType::Normal,
                    "Started",
                    format!("Started container {}", spec.name),
                );
                true
            }
            Err(e) => {
                self.engine_error();
                let reason = match &e {
                    EngineError::Image { reason, .. } => (*reason).to_owned(),
                    _ => "RunContainerError".to_owned(),
                };
                tracing::warn!(pod = %pod.key(), container = %spec.name, reason, "container not started: {e}");
                if !matches!(
                    e,
                    EngineError::Image {
                        reason: "ErrImageNeverPull" | "ErrImagePull",
                        ..
                    }
                ) {
                    self.events.record(
                        pod,
                        Some(&spec.name),
                        EventType::Warning,
                        "Failed",
                        format!("Error: {e}"),
                    );
                }
                state
                    .waiting
                    .insert(spec.name.clone(), (reason, e.to_string()));
                false
            }
        }
    }

    /// The pod's resolver configuration from the node's DNS settings (read afresh, as kubelet
    /// reads `resolvConf` for each sandbox); kubelet's DNS warnings become pod events.
    fn pod_resolver(&self, pod: &Pod) -> Result<crate::dns::ResolverConfig, String> {
        let node = &self.settings().dns;
        let host = crate::dns::host_config(node).map_err(|e| e.to_string())?;
        let dns = crate::dns::pod_dns(pod, node, host);
        for warning in dns.warnings {
            tracing::debug!(pod = %pod.key(), reason = warning.reason, "{}", warning.message);
            self.events.record(
                pod,
                None,
                EventType::Warning,
                warning.reason,
                warning.message,
            );
        }
        Ok(dns.config)
    }

    /// Writes the pod's hosts file `file` (see `crate::name_plan`) with the address of its
    /// sandbox `sandbox_id`; true when the content is final, false when the sandbox has no
    /// address yet (it is starting) and the file is to be written again once it runs.
    async fn write_hosts(
        &self,
        pod: &Pod,
        file: &std::path::Path,
        sandbox_id: Option<&str>,
    ) -> Result<bool, String> {
        let ips: Vec<String> = match sandbox_id {
            Some(id) if !pod.spec.host_network => self
                .engine
                .sandbox_ip(id)
                .await
                .ok()
                .flatten()
                .into_iter()
                .collect(),
            _ => Vec::new(),
        };
        let complete = pod.spec.host_network || !ips.is_empty();
        let content =
            crate::name_plan::hosts_content(pod, &ips, &self.settings().dns).map_err(|e| {
                format!(
                    "cannot read the node's {}: {e}",
                    crate::etc_hosts::NODE_HOSTS
                )
            })?;
        crate::etc_hosts::write(file, &content)
            .map_err(|e| format!("cannot write the pod's hosts file {}: {e}", file.display()))?;
        Ok(complete)
    }

    /// Asks the cloud (through metamanager) to remove a gracefully deleted pod whose
    /// containers are gone. A pod already gone there counts as removed.
    async fn confirm_deletion(&self, pod: &Pod) -> Result<(), String> {
        let request = Message::build(
            module::EDGED,
            group::META,
            operation::DELETE,
            &format!("{}/pod/{}", pod.namespace(), pod.metadata.name),
            Content::json(&delete_options(pod)).map_err(|e| e.to_string())?,
        );
        let timeout = self.settings().object_timeout;
        let reply = self
            .bus
            .send_sync(module::METAMANAGER, request, timeout)
            .await
            .map_err(|e| e.to_string())?;
        if reply.route.operation == operation::ERROR {
            return Err(reply.content.as_string().unwrap_or_default());
        }
        match wedge_core::message::CloudAnswer::of(&reply.content) {
            wedge_core::message::CloudAnswer::Error(e) if !e.is_not_found() => Err(e.to_string()),
            _ => Ok(()),
        }
    }

    /// Removes a pod's containers (and, for a deleted pod, the modules it deployed and its
    /// directory); for a graceful deletion it then asks the cloud to remove the pod object.
    /// Only a kill that removed every container (and got the cloud's yes, when it asks) is
    /// done; otherwise it is retried.
    pub(super) async fn kill(&self, job: KillJob) -> Outcome {
        let failed = Outcome {
            ok: false,
            changed: false,
        };
        let ours = match self.list_pod(&job.uid).await {
            Ok(ours) => ours,
            Err(e) => {
                tracing::warn!(pod = %job.uid, "listing containers failed: {e}");
                return failed;
            }
        };
        // App containers first: the sandbox holds their network until they are gone.
        let (sandboxes, apps): (Vec<&ManagedContainer>, Vec<&ManagedContainer>) =
            ours.iter().partition(|c| c.sandbox);
        if let Some(pod) = &job.pod {
            for c in apps.iter().filter(|c| c.state == "running") {
                self.events.record(
                    pod,
                    Some(&c.container),
                    EventType::Normal,
                    "Killing",
                    format!("Stopping container {}", c.container),
                );
            }
        }
        if !self.stop_remove_all(&apps, job.grace).await
            || !self.remove_sandboxes(&sandboxes, true).await
        {
            return failed;
        }
        if let Some(state) = &job.state {
            self.stop_wasm_pod(state).await;
        }
        let Some(pod) = job.pod else {
            return Outcome {
                ok: true,
                changed: !ours.is_empty(),
            };
        };
        let root = &self.settings().pods_root;
        let dir = root.join(&job.uid);
        // Sub-path binds come down first: removing the tree across one would delete the
        // volume's own files.
        if !crate::subpath::unmount_all(&dir.join("volume-subpaths")) {
            tracing::warn!(pod = %pod.key(), "sub-path mounts still up; the pod directory stays");
            return failed;
        }
        // Only a plain uid names a directory under the pods root (never `..` or a path).
        if dir.file_name() == Some(std::ffi::OsStr::new(&job.uid))
            && dir.parent() == Some(root.as_path())
            && let Err(e) = std::fs::remove_dir_all(&dir)
            && e.kind() != std::io::ErrorKind::NotFound
        {
            tracing::warn!(dir = %dir.display(), "pod directory not removed: {e}");
        }
        // The cloud never knew a static pod; a pod the cloud deleted is gone there already.
        if job.confirm_deletion
            && !crate::static_pods::is_static(&pod)
            && let Err(e) = self.confirm_deletion(&pod).await
        {
            tracing::warn!(pod = %pod.key(), "containers stopped, but the cloud did not remove the pod yet: {e}");
            return failed;
        }
        tracing::info!(pod = %pod.key(), containers = ours.len(), "pod removed");
        Outcome {
            ok: true,
            changed: true,
        }
    }
}
