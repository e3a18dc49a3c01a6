//! Pod status: what the engine, the probes and the pod workers say of each pod, sent to
//! metamanager as a `podpatch` when it changed. As kubelet's status manager, a status the
//! cloud took is not sent again while the pod stays the same (an idle pod costs the cloud no
//! writes); one that did not get through is sent again at the next report.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::time::Instant;

use tokio::sync::mpsc;

use wedge_core::message::{CloudAnswer, group, module, operation};
use wedge_core::{Content, Message};

use super::SyncLoop;
use super::sync::lock;
use super::wasm::{is_wasm_pod, wasm_observed};
use crate::engine::{ContainerRun, Engine, ManagedContainer};
use crate::events::EventType;
use crate::pod::Container;
use crate::probe::{ProbeKind, Prober, Verdict};
use crate::status::{Observed, pod_patch, pod_status};

/// The cloud's answer to one status patch, from its task back to the module's loop.
pub(super) struct PatchResult {
    uid: String,
    patch: String,
    outcome: Result<(), String>,
}

/// One probe's outcome, from its task back to the module's loop.
pub(super) struct ProbeResult {
    uid: String,
    container: String,
    container_id: String,
    kind: ProbeKind,
    outcome: Result<(), String>,
}

/// Container inspections kept while the container's listed state stays the same: a running
/// container's start time, IP and image do not change, so the relist does not ask the engine
/// for every container every second. Shared with the relist task, which inspects what a
/// listing shows new ([`Inspections::prefetch`]) before the loop reports, so that a slow
/// runtime holds up that task and never the loop.
#[derive(Default, Clone)]
pub(super) struct Inspections {
    by_id: std::sync::Arc<std::sync::Mutex<InspectionMap>>,
}

/// Container id → (listed state when inspected, what the inspection found).
type InspectionMap = HashMap<String, (String, Option<ContainerRun>)>;

impl Inspections {
    /// The map; never held across an await.
    fn map(&self) -> std::sync::MutexGuard<'_, InspectionMap> {
        self.by_id
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn cached(&self, c: &ManagedContainer) -> Option<Option<ContainerRun>> {
        self.map()
            .get(&c.id)
            .filter(|(state, _)| *state == c.state)
            .map(|(_, run)| run.clone())
    }

    async fn inspect(&self, engine: &Engine, c: &ManagedContainer) -> Option<ContainerRun> {
        let run = engine.inspect(&c.id).await.ok().flatten();
        self.map()
            .insert(c.id.clone(), (c.state.clone(), run.clone()));
        run
    }

    async fn get(&self, engine: &Engine, c: &ManagedContainer) -> Option<ContainerRun> {
        match self.cached(c) {
            Some(run) => run,
            None => self.inspect(engine, c).await,
        }
    }

    /// Inspects the containers of `listed` a report asks about (running sandboxes, the newest
    /// container of each pod and name) whose listed state is not known yet: in the relist
    /// task, after the listing.
    pub(super) async fn prefetch(&self, engine: &Engine, listed: &[ManagedContainer]) {
        let wanted: Vec<&ManagedContainer> = listed
            .iter()
            .filter(|c| {
                if c.sandbox {
                    c.state == "running"
                } else {
                    newest_listed(listed, &c.pod_uid, &c.container).is_some_and(|n| n.id == c.id)
                }
            })
            .filter(|c| self.cached(c).is_none())
            .collect();
        for c in wanted {
            self.inspect(engine, c).await;
        }
    }

    /// Forgets containers that are no longer listed.
    fn retain_listed(&self, listed: &[ManagedContainer]) {
        let ids: std::collections::HashSet<&str> = listed.iter().map(|c| c.id.as_str()).collect();
        self.map().retain(|id, _| ids.contains(id.as_str()));
    }
}

impl SyncLoop {
    /// Computes every pod's status from `listed` (a listing started at `listed_at`) and sends
    /// those that changed or did not get through last time. A pod whose worker finished after
    /// the listing started is left for the next listing (which is asked for): this one may
    /// predate the containers the worker made.
    pub(super) async fn report(&mut self, listed: &[ManagedContainer], listed_at: Option<Instant>) {
        self.report_due = false;
        self.inspections.retain_listed(listed);
        let mut running = 0;
        let mut patches = Vec::new();
        let now = wedge_core::time::now_ms();
        let mut stale = false;
        for (uid, d) in &self.desired {
            if let (Some(at), Some(done)) = (listed_at, self.last_done.get(uid))
                && *done > at
            {
                stale = true;
                continue;
            }
            let mut vanished = false;
            let mut sandbox_ip = None;
            let mut sandbox_ready = true;
            let mut init = Vec::new();
            let observed = if is_wasm_pod(self.settings(), &d.pod) {
                let observed = wasm_observed(self.sync.edged.wasm.as_deref(), &d.pod, &d.state);
                running += observed.iter().filter(|o| o.ready).count() as u64;
                observed
            } else {
                // The pod's IP is its running sandbox's: joined containers have none.
                let sandbox = listed
                    .iter()
                    .filter(|c| c.sandbox && c.pod_uid == *uid && c.state == "running")
                    .max_by_key(|c| c.restart_count);
                // Without a sandbox (host network, or sandboxes off) the network is the
                // host's or each container's own: ready once a container was made.
                sandbox_ready = if crate::sandbox::needed(
                    &d.pod,
                    &self.settings().pod_sandbox_image,
                    self.sync.engine.is_cri(),
                ) {
                    sandbox.is_some()
                } else {
                    listed.iter().any(|c| c.pod_uid == *uid)
                };
                if let Some(s) = sandbox {
                    sandbox_ip = self
                        .inspections
                        .get(&self.sync.engine, s)
                        .await
                        .map(|run| run.ip)
                        .filter(|ip| !ip.is_empty());
                }
                // Init containers have no probes: what the engine and the worker say is all.
                for spec in &d.pod.spec.init_containers {
                    let newest = newest_listed(listed, uid, &spec.name);
                    let run = match newest {
                        Some(c) => self.inspections.get(&self.sync.engine, c).await,
                        None => None,
                    };
                    vanished |= newest.is_some() && run.is_none();
                    let is_running = run.as_ref().is_some_and(|r| r.running);
                    let waiting = lock(&d.state)
                        .waiting
                        .get(&spec.name)
                        .filter(|_| !is_running)
                        .cloned();
                    init.push(Observed {
                        name: spec.name.clone(),
                        image: spec.image.clone(),
                        id: newest
                            .map(|c| format!("{}://{}", self.sync.engine.runtime_name(), c.id)),
                        run,
                        restart_count: newest.map(|c| c.restart_count).unwrap_or(0),
                        waiting,
                        ready: false,
                    });
                }
                let mut observed = Vec::new();
                for spec in &d.pod.spec.containers {
                    let newest = newest_listed(listed, uid, &spec.name);
                    let run = match newest {
                        Some(c) => self.inspections.get(&self.sync.engine, c).await,
                        None => None,
                    };
                    // Listed, then gone before it could be inspected: the pod's worker (or the
                    // container GC) removed it since the listing, which is stale for this pod.
                    vanished |= newest.is_some() && run.is_none();
                    let is_running = run.as_ref().is_some_and(|r| r.running);
                    if is_running {
                        running += 1;
                    }
                    let waiting = lock(&d.state)
                        .waiting
                        .get(&spec.name)
                        .filter(|_| !is_running)
                        .cloned();
                    let key = (uid.clone(), spec.name.clone());
                    let ready = match (newest, &run) {
                        (Some(c), Some(r)) if r.running => {
                            // Probes reach the container at the pod's address.
                            let ip = match sandbox_ip.as_deref() {
                                _ if d.pod.spec.host_network => "127.0.0.1",
                                Some(ip) => ip,
                                None if r.ip.is_empty() => "127.0.0.1",
                                None => r.ip.as_str(),
                            };
                            let prober = self
                                .probers
                                .entry(key)
                                .or_insert_with(|| Prober::new(c.id.clone(), spec, Instant::now()));
                            if prober.container_id != c.id {
                                *prober = Prober::new(c.id.clone(), spec, Instant::now());
                            }
                            schedule_probes(
                                prober,
                                &self.sync.engine,
                                &self.probe_results,
                                uid,
                                spec,
                                ip,
                            );
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
                        id: newest
                            .map(|c| format!("{}://{}", self.sync.engine.runtime_name(), c.id)),
                        run,
                        restart_count: newest.map(|c| c.restart_count).unwrap_or(0),
                        waiting,
                        ready,
                    });
                }
                observed
            };
            let removing = self.workers.pending(uid)
                || self.container_gc.as_ref().is_some_and(|t| !t.is_finished());
            if vanished && listed_at.is_some() && removing {
                stale = true;
                continue;
            }
            let problem = d.problem.as_ref().map(|(r, m)| (r.as_str(), m.as_str()));
            let containers = crate::status::PodContainers {
                init: &init,
                app: &observed,
            };
            let mut status = pod_status(
                &d.pod,
                containers,
                problem,
                self.host_ip.as_deref(),
                sandbox_ip.as_deref(),
                sandbox_ready,
            );
            lock(&d.state).times.stamp(&mut status, now);
            let patch = pod_patch(&d.pod, &status);
            if self.reported.get(uid) != Some(&patch) {
                patches.push((uid.clone(), d.pod.clone(), patch));
            }
        }
        let stats = &self.sync.edged.stats;
        stats
            .pods
            .store(self.desired.len() as u64, Ordering::Relaxed);
        stats.running.store(running, Ordering::Relaxed);
        if stale {
            self.report_due = true;
        }
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
            stats.statuses_sent.fetch_add(1, Ordering::Relaxed);
            self.reported.insert(uid.clone(), patch.clone());
            let (bus, results) = (self.sync.bus.clone(), self.patch_results.clone());
            let timeout = self.settings().query_timeout;
            // In a task of its own: the cloud may take its time to answer.
            tokio::spawn(async move {
                let outcome = send_patch(&bus, msg, timeout).await;
                let _ = results
                    .send(PatchResult {
                        uid,
                        patch,
                        outcome,
                    })
                    .await;
            });
        }
    }

    /// Books the cloud's answer to a status patch. A status that did not get through is sent
    /// again by the next periodic sync ([`Self::resend_refused`]); one that did is not sent
    /// again while the pod stays the same.
    pub(super) fn patched(&mut self, r: PatchResult) {
        let Err(why) = r.outcome else {
            self.refused_said.remove(&r.uid);
            return;
        };
        self.sync
            .edged
            .stats
            .statuses_refused
            .fetch_add(1, Ordering::Relaxed);
        // Said once per pod and status: the same refusal repeats every resend interval.
        if self.reported.get(&r.uid) == Some(&r.patch) {
            if self.refused_said.insert(r.uid.clone()) {
                tracing::warn!(pod = %r.uid, "pod status not taken by the cloud, sent again every sync: {why}");
            } else {
                tracing::debug!(pod = %r.uid, "pod status still not taken by the cloud: {why}");
            }
            self.refused.insert(r.uid);
        }
    }

    /// The periodic sync (`status_interval`): statuses that did not get through are sent
    /// again, whatever else changed.
    pub(super) fn resend_refused(&mut self) {
        for uid in std::mem::take(&mut self.refused) {
            self.reported.remove(&uid);
        }
        self.report_due = true;
    }

    /// Books a probe result; a failed liveness or startup probe stops the container (in its
    /// own task: the grace period may be long), and the restart policy, with its back-off,
    /// takes over from there.
    pub(super) fn probed(&mut self, r: ProbeResult) {
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
        self.report_due = true;
        let pod = self.desired.get(&r.uid).map(|d| &d.pod);
        if let (Err(why), Some(pod)) = (&r.outcome, pod) {
            self.sync.events.record(
                pod,
                Some(&r.container),
                EventType::Warning,
                "Unhealthy",
                format!("{} probe failed: {why}", r.kind.title()),
            );
        }
        if let Verdict::Restart(why) = prober.record(r.kind, probe, &r.outcome) {
            tracing::info!(pod = %r.uid, container = %r.container, "{why}; killing the container");
            if let Some(d) = self.desired.get(&r.uid) {
                self.sync.events.record(
                    &d.pod,
                    Some(&r.container),
                    EventType::Normal,
                    "Killing",
                    format!(
                        "Container {} failed {} probe, will be restarted",
                        r.container,
                        r.kind.title().to_lowercase()
                    ),
                );
            }
            self.probers.remove(&key);
            let (engine, grace) = (self.sync.engine.clone(), self.settings().stop_grace);
            tokio::spawn(async move {
                if let Err(e) = engine.stop(&r.container_id, grace).await {
                    tracing::warn!(container = %r.container_id, "container not stopped: {e}");
                }
            });
        }
    }
}

/// The newest (highest restart count) listed container `name` of pod `uid`.
fn newest_listed<'a>(
    listed: &'a [ManagedContainer],
    uid: &str,
    name: &str,
) -> Option<&'a ManagedContainer> {
    listed
        .iter()
        .filter(|c| !c.sandbox && c.pod_uid == uid && c.container == name)
        .max_by_key(|c| c.restart_count)
}

/// Starts every probe of `spec` that is due, each in its own task (a slow probe never holds
/// up the loop); results come back through `results`.
fn schedule_probes(
    prober: &mut Prober,
    engine: &Engine,
    results: &mpsc::Sender<ProbeResult>,
    uid: &str,
    spec: &Container,
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

/// Sends a `podpatch` through metamanager and waits for the cloud's word: why it did not
/// get through, if it did not (metamanager's error, or the cloud's refusal).
pub(super) async fn send_patch(
    bus: &wedge_core::Bus,
    msg: Message,
    timeout: std::time::Duration,
) -> Result<(), String> {
    match bus.send_sync(module::METAMANAGER, msg, timeout).await {
        Err(e) => Err(e.to_string()),
        Ok(reply) if reply.route.operation == operation::ERROR => {
            Err(reply.content.as_string().unwrap_or_default())
        }
        Ok(reply) => match CloudAnswer::of(&reply.content) {
            CloudAnswer::Error(e) => Err(e.to_string()),
            _ => Ok(()),
        },
    }
}
