//! One garbage-collection pass against the engine: list, ask the policy in [`crate::gc`], remove.
//! The module runs these on its timers (container GC every minute, image GC every 5 minutes);
//! tests run them directly.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use tokio::time::{Interval, MissedTickBehavior};

use crate::disk::{DiskError, DiskSource};
use crate::engine::{Engine, EngineError, ImageInfo};
use crate::gc::{ContainerGcPolicy, ImageGcPolicy, ImagePlan, ImageRecords, containers_to_remove};
use crate::module::EdgedSettings;

/// Why a pass did not run; a removal that fails is logged and the pass goes on.
#[derive(Debug, thiserror::Error)]
pub enum GcError {
    /// Listing containers or images failed.
    #[error("garbage collection: {0}")]
    Engine(#[from] EngineError),
    /// The image filesystem's usage is unknown.
    #[error("image garbage collection: {0}")]
    Disk(#[from] DiskError),
    /// The image filesystem reports no capacity.
    #[error("image garbage collection: the image filesystem reports a capacity of 0 bytes")]
    NoCapacity,
}

/// Removes the dead containers of `node` that `policy` says to, `is_desired` telling which pod
/// uids edged still runs. Returns the ids removed, in order.
pub async fn collect_containers(
    engine: &Engine,
    node: &str,
    policy: &ContainerGcPolicy,
    is_desired: impl Fn(&str) -> bool,
) -> Result<Vec<String>, GcError> {
    let listed = engine.list(node).await?;
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
        .unwrap_or(0);
    let plan = containers_to_remove(&listed, is_desired, policy, now);
    let by_id: HashMap<&str, _> = listed.iter().map(|c| (c.id.as_str(), c)).collect();
    let mut removed = Vec::new();
    for id in plan {
        let pod = by_id
            .get(id.as_str())
            .map(|c| format!("{}/{} {}", c.pod_namespace, c.pod_name, c.container))
            .unwrap_or_default();
        match engine.remove(&id).await {
            Ok(()) => {
                tracing::info!(container = %id, pod, "dead container garbage-collected");
                removed.push(id);
            }
            Err(e) => tracing::warn!(container = %id, pod, "dead container not removed: {e}"),
        }
    }
    Ok(removed)
}

/// Image garbage collection, with the records it keeps between passes (first seen, last used).
#[derive(Debug)]
pub struct ImageGc {
    policy: ImageGcPolicy,
    disk: DiskSource,
    records: ImageRecords,
}

/// What an image pass found and did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageGcReport {
    /// The policy's decision.
    pub plan: ImagePlan,
    /// Ids actually removed.
    pub removed: Vec<String>,
}

impl ImageGc {
    /// Collection by `policy`, reading usage from `disk`.
    pub fn new(policy: ImageGcPolicy, disk: DiskSource) -> ImageGc {
        ImageGc {
            policy,
            disk,
            records: ImageRecords::default(),
        }
    }

    /// Removes every image no container uses that is old enough and not pinned, whatever the
    /// disk usage: the eviction manager's reclaim of the disk before it evicts a pod. Returns
    /// the bytes of the images removed.
    pub async fn collect_unused(&mut self, engine: &Engine, now: Instant) -> Result<u64, GcError> {
        let (images, in_use) = self.observe(engine, now).await?;
        let eligible: Vec<String> = self
            .records
            .eligible(&self.policy, &in_use, now)
            .into_iter()
            .map(|(id, _)| id.clone())
            .collect();
        let removed = self.remove(engine, &images, &eligible).await;
        Ok(images
            .iter()
            .filter(|i| removed.contains(&i.id))
            .map(|i| i.size)
            .sum())
    }

    /// Lists the images and those in use, and records both at `now`.
    async fn observe(
        &mut self,
        engine: &Engine,
        now: Instant,
    ) -> Result<(Vec<ImageInfo>, HashSet<String>), GcError> {
        let images = engine.list_images().await?;
        let in_use = engine.images_in_use().await?;
        self.records.observe(&images, &in_use, now);
        Ok((images, in_use))
    }

    /// Removes the images `ids` of `images` (a failure is logged and skipped); the ids removed.
    async fn remove(
        &mut self,
        engine: &Engine,
        images: &[ImageInfo],
        ids: &[String],
    ) -> Vec<String> {
        let mut removed = Vec::new();
        for id in ids {
            let Some(image) = images.iter().find(|i| &i.id == id) else {
                continue;
            };
            match engine.remove_image(image).await {
                Ok(()) => {
                    tracing::info!(image = %id, tags = ?image.tags, size = image.size, "unused image garbage-collected");
                    self.records.forget(id);
                    removed.push(id.clone());
                }
                Err(e) => tracing::warn!(image = %id, "unused image not removed: {e}"),
            }
        }
        removed
    }

    /// One pass at `now` (the records' clock: ages and last uses are measured in it).
    pub async fn collect(
        &mut self,
        engine: &Engine,
        now: Instant,
    ) -> Result<ImageGcReport, GcError> {
        let (images, in_use) = self.observe(engine, now).await?;
        let usage = self.disk.usage(engine).await?;
        let plan = self
            .records
            .plan(&self.policy, usage, &in_use, now)
            .ok_or(GcError::NoCapacity)?;
        let removed = self.remove(engine, &images, &plan.remove).await;
        if plan.freed < plan.to_free {
            tracing::warn!(
                used_percent = plan.used_percent,
                "image garbage collection should free {} bytes but only {} were eligible",
                plan.to_free,
                plan.freed
            );
        }
        Ok(ImageGcReport { plan, removed })
    }
}

/// The module's timers: container GC, and image GC with its records. Both fire at once, as
/// kubelet's loops do: the first image pass only records what it sees unless images may be
/// collected at age 0.
pub(crate) fn timers(settings: &EdgedSettings) -> (Interval, ImageGcTimer) {
    let gc = ImageGc::new(settings.image_gc.clone(), settings.image_disk.clone());
    let timer = ImageGcTimer {
        interval: interval(settings.image_gc_period),
        gc,
    };
    (interval(settings.container_gc_period), timer)
}

fn interval(period: Duration) -> Interval {
    let mut interval = tokio::time::interval(period);
    interval.set_missed_tick_behavior(MissedTickBehavior::Delay);
    interval
}

/// The module's container GC pass: a failure is logged, and the next tick tries again.
pub(crate) async fn containers(
    engine: &Engine,
    settings: &EdgedSettings,
    is_desired: impl Fn(&str) -> bool,
) {
    let node = &settings.node_name;
    if let Err(e) = collect_containers(engine, node, &settings.container_gc, is_desired).await {
        tracing::warn!("{e}");
    }
}

/// A request of the eviction manager: remove every unused image now, and answer with the
/// bytes freed.
pub(crate) type ReclaimImages = tokio::sync::oneshot::Sender<u64>;

/// Image GC on the module's timer.
pub(crate) struct ImageGcTimer {
    interval: Interval,
    gc: ImageGc,
}

impl ImageGcTimer {
    /// Runs a pass on every tick until `stop`: in a task of its own, so a slow runtime holds
    /// up image GC, never edged's loop.
    /// Between ticks it answers the eviction manager's requests (`reclaims`), so that the
    /// records of both are one.
    pub(crate) async fn run(
        mut self,
        engine: Engine,
        mut reclaims: tokio::sync::mpsc::Receiver<ReclaimImages>,
        stop: tokio_util::sync::CancellationToken,
    ) {
        loop {
            let reclaim = tokio::select! {
                _ = stop.cancelled() => return,
                _ = self.interval.tick() => None,
                Some(answer) = reclaims.recv() => Some(answer),
            };
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = async {
                    match reclaim {
                        None => self.collect_logged(&engine).await,
                        Some(answer) => {
                            let freed = self
                                .gc
                                .collect_unused(&engine, Instant::now())
                                .await
                                .unwrap_or_else(|e| {
                                    tracing::warn!("{e}");
                                    0
                                });
                            let _ = answer.send(freed);
                        }
                    }
                } => {}
            }
        }
    }

    /// One pass now; a failure is logged, and the next tick tries again.
    pub(crate) async fn collect_logged(&mut self, engine: &Engine) {
        if let Err(e) = self.gc.collect(engine, Instant::now()).await {
            tracing::warn!("{e}");
        }
    }
}
