//! The eviction manager's task: one pass per period, each reading the node once. It owns the
//! [`Manager`]; what it needs of edged's loop (the pods, the last container listing) it asks
//! for, and the pod it chose it hands back to the loop, which evicts it.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, oneshot, watch};
use tokio_util::sync::CancellationToken;

use super::manager::{Manager, Reclaim, Resource};
use super::rank::{self, Candidate};
use super::usage;
use crate::engine::{Engine, ManagedContainer};
use crate::node::pressure::{Pressure, Signals};
use crate::pod::Pod;

/// The loop's pods, as a pass needs them.
pub(crate) struct PodsNow {
    /// Pods that may be evicted: desired, admitted, not static.
    pub candidates: Vec<(String, Pod)>,
    /// The last listing of the engine's containers (memory figures are asked for these).
    pub listed: Option<Arc<Vec<ManagedContainer>>>,
    /// The pod evicted last is still being removed: no other goes meanwhile.
    pub busy: bool,
    /// When the pod evicted last was removed: a node read before then does not show what
    /// its removal freed.
    pub evicted_removed_at: Option<Instant>,
}

/// What a pass asks of edged's loop.
pub(crate) enum Ask {
    /// The pods as they are now.
    Pods(oneshot::Sender<PodsNow>),
    /// Evict this pod.
    Evict {
        /// Its uid.
        uid: String,
        /// Its status message.
        message: String,
        /// Between SIGTERM and SIGKILL.
        grace: Duration,
    },
}

/// Everything a pass works with.
pub(crate) struct EvictionPass {
    /// The thresholds and what was seen of them.
    pub manager: Manager,
    /// edged's root directory: its filesystem is the node filesystem.
    pub node_root: PathBuf,
    /// The engine's root directory: its filesystem is the image filesystem.
    pub image_root: Option<PathBuf>,
    /// Where pods' directories are (disk use).
    pub pods_root: PathBuf,
    /// For the containers' memory figures.
    pub engine: Engine,
    /// How long the runtime may take for them.
    pub stats_timeout: Duration,
    /// To edged's loop.
    pub asks: mpsc::Sender<Ask>,
    /// The conditions, for the node status and admission.
    pub pressure: Arc<watch::Sender<Pressure>>,
    /// Image GC's reclaim requests.
    pub reclaim_images: mpsc::Sender<crate::gc_pass::ReclaimImages>,
}

impl EvictionPass {
    async fn read(&self) -> Signals {
        let (root, image) = (self.node_root.clone(), self.image_root.clone());
        tokio::task::spawn_blocking(move || Signals::read(&root, image.as_deref()))
            .await
            .unwrap_or_default()
    }

    /// Reads the node and publishes the conditions; the threshold to act on, if any, with
    /// the signals read. Called once before the node registers, so the Node the cloud first
    /// sees carries the machine's pressure.
    pub(crate) async fn observe(&mut self) -> (Option<Reclaim>, Signals) {
        let signals = self.read().await;
        let observation = self.manager.observe(&signals, Instant::now());
        let now = observation.pressure;
        self.pressure.send_if_modified(|known| {
            if *known == now {
                return false;
            }
            tracing::warn!(pressure = ?now, ?signals, "node pressure changed");
            *known = now;
            true
        });
        (observation.reclaim, signals)
    }

    /// A pass every `period` until `stop`.
    pub(crate) async fn run(mut self, period: Duration, stop: CancellationToken) {
        let mut tick = tokio::time::interval(period);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tick.tick() => {}
            }
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = self.pass() => {}
            }
        }
    }

    async fn pass(&mut self) {
        let read_at = Instant::now();
        let (Some(reclaim), signals) = self.observe().await else {
            return;
        };
        if reclaim.resource == Resource::EphemeralStorage && self.reclaim_images(&reclaim).await {
            return;
        }
        // Which pod uses most is known for memory and the node's bytes only.
        let pods_relieve = match reclaim.signal.as_str() {
            "memory.available" | "nodefs.available" => true,
            "imagefs.available" => signals.shared_disk(),
            _ => false,
        };
        if !pods_relieve {
            return;
        }
        let (answer, pods) = oneshot::channel();
        if self.asks.send(Ask::Pods(answer)).await.is_err() {
            return;
        }
        let Ok(pods) = pods.await else { return };
        // As kubelet waits for an evicted pod's cleanup before it looks again: a pod whose
        // removal ended after the node was read has freed what this read still counts, so
        // the next pass (reading afresh) decides.
        let stale = pods.evicted_removed_at.is_some_and(|at| at >= read_at);
        if pods.busy || stale || pods.candidates.is_empty() {
            return;
        }
        let Some(mut candidates) = self.measure(&reclaim, pods).await else {
            return;
        };
        rank::rank(&mut candidates, reclaim.resource);
        let Some(victim) = candidates.first() else {
            return;
        };
        let _ = self
            .asks
            .send(Ask::Evict {
                uid: victim.uid.clone(),
                message: rank::message(&reclaim, victim),
                grace: self
                    .manager
                    .pod_grace(&reclaim, victim.pod.termination_grace()),
            })
            .await;
    }

    /// Removes unused images; true when that brought the signal back above its threshold
    /// plus the minimum reclaim (then no pod goes).
    async fn reclaim_images(&mut self, reclaim: &Reclaim) -> bool {
        let (answer, freed) = oneshot::channel();
        if self.reclaim_images.send(answer).await.is_err() {
            return false;
        }
        let freed = match tokio::time::timeout(self.stats_timeout, freed).await {
            Ok(Ok(freed)) => freed,
            _ => return false,
        };
        if freed == 0 {
            return false;
        }
        let signals = self.read().await;
        let resolved = self.manager.resolved(reclaim, &signals);
        tracing::info!(
            freed,
            signal = %reclaim.signal,
            resolved,
            "unused images removed under disk pressure"
        );
        resolved
    }

    /// Each candidate with its use of the resource; `None` when the runtime gave no figures.
    async fn measure(&self, reclaim: &Reclaim, pods: PodsNow) -> Option<Vec<Candidate>> {
        let mut candidates: Vec<Candidate> = pods
            .candidates
            .into_iter()
            .map(|(uid, pod)| Candidate {
                uid,
                pod,
                usage: 0,
                containers: Default::default(),
            })
            .collect();
        if reclaim.resource == Resource::Memory {
            let listed = pods.listed?;
            let running: Vec<ManagedContainer> = listed
                .iter()
                .filter(|c| candidates.iter().any(|p| p.uid == c.pod_uid))
                .cloned()
                .collect();
            let samples = match tokio::time::timeout(
                self.stats_timeout,
                self.engine.container_stats(&running),
            )
            .await
            {
                Ok(Ok(samples)) => samples,
                Ok(Err(e)) => {
                    tracing::warn!("no pod evicted for memory: the runtime's figures: {e}");
                    return None;
                }
                Err(_) => {
                    tracing::warn!("no pod evicted for memory: the runtime's figures timed out");
                    return None;
                }
            };
            let by_pod = usage::memory_by_pod(&running, &samples);
            for c in &mut candidates {
                if let Some(containers) = by_pod.get(&c.uid) {
                    c.usage = containers.values().sum();
                    c.containers = containers.clone();
                }
            }
            return Some(candidates);
        }
        let pods_root = self.pods_root.clone();
        tokio::task::spawn_blocking(move || {
            for c in &mut candidates {
                c.usage = usage::disk_usage(&pods_root.join(&c.uid));
            }
            candidates
        })
        .await
        .ok()
    }
}
