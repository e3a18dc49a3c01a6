//! Garbage-collection policy, kubelet's, as pure functions: which dead containers and which
//! unused images to remove. No engine calls here, so every rule is unit-tested;
//! [`crate::gc_pass`] lists the engine, asks these functions and removes what they return.
//!
//! Containers (kubelet's `containerGC`): only dead containers edged owns are candidates, and only
//! once older than `min_age` (by creation time). Dead containers of pods no longer desired go
//! first, all of them; then per (pod uid, container name) the oldest dead ones beyond
//! `max_per_pod_container`; then, node-wide, the oldest dead ones beyond `max_containers`
//! (after first evening the units out, as kubelet does). One difference: the newest container
//! of a container name in a desired pod is never removed, whatever the limits, because edged —
//! unlike kubelet, which keeps a status cache — reads a pod's restart count, last exit code and
//! "already ran" (`restartPolicy: Never`) from that container.
//!
//! Sandboxes (`crate::sandbox`) are no app container: they never count in a pod's or the node's
//! limits. GC removes the dead sandboxes of pods no longer desired (after those pods' app
//! containers), and a desired pod's dead sandboxes that are not its newest and hold no container
//! (on a CRI runtime the pod worker only stops a replaced sandbox: removing it would remove its
//! containers, and the pod's restart counts with them).
//!
//! Images (kubelet's `realImageGCManager`): when the image filesystem's usage reaches
//! `high_threshold` percent, unused images (no container at all refers to them) are removed,
//! least recently used first, until `capacity × (100 − low_threshold)/100 − available` bytes are
//! freed. "Recently used" is tracked in memory like kubelet's image records: an image's last use
//! is the last pass that saw a container on it, and its age (`min_age`) counts from the pass that
//! first saw it — not from the image's build time, which says nothing about when it was pulled.
//! After a restart every image is therefore young again, which errs on the side of keeping.
//! Pinned images (the pod sandbox image, as kubelet pins it) are never removed: a node without
//! a registry could not get it back, and no pod would start again.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::{Duration, Instant};

use crate::engine::{ImageInfo, ManagedContainer};

/// Kubelet's container GC policy (`minimumGCAge`, `maxPerPodContainerCount`,
/// `maxContainerCount`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerGcPolicy {
    /// A dead container younger than this (since creation) is kept: 0 s in KubeEdge.
    pub min_age: Duration,
    /// Dead containers kept per (pod, container name); negative means no limit. 1 in KubeEdge.
    pub max_per_pod_container: i32,
    /// Dead containers kept on the node; negative means no limit. -1 in KubeEdge.
    pub max_containers: i32,
}

impl Default for ContainerGcPolicy {
    fn default() -> Self {
        ContainerGcPolicy {
            min_age: Duration::ZERO,
            max_per_pod_container: 1,
            max_containers: -1,
        }
    }
}

/// Kubelet's image GC policy (`imageGCHighThreshold`, `imageGCLowThreshold`,
/// `imageMinimumGCAge`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageGcPolicy {
    /// Usage percent at which collection starts: 85 since KubeEdge v1.16.
    pub high_threshold: u8,
    /// Usage percent collection frees down to: 80 since KubeEdge v1.16.
    pub low_threshold: u8,
    /// An image first seen less than this ago is kept (it may have just been pulled for a
    /// container about to start): 2 min.
    pub min_age: Duration,
    /// Image references never removed, whatever their use: the pod sandbox image
    /// (`podSandboxImage`), which is in use only while some pod runs, yet needed by every
    /// pod that starts.
    pub pinned: Vec<String>,
}

impl Default for ImageGcPolicy {
    fn default() -> Self {
        ImageGcPolicy {
            high_threshold: 85,
            low_threshold: 80,
            min_age: Duration::from_secs(120),
            pinned: Vec::new(),
        }
    }
}

/// `reference` as the engine lists tags: without Docker Hub's implicit registry and `library/`
/// namespace, with the implicit `:latest`.
fn familiar(reference: &str) -> String {
    let short = reference
        .strip_prefix("docker.io/")
        .or_else(|| reference.strip_prefix("index.docker.io/"))
        .unwrap_or(reference);
    let short = short.strip_prefix("library/").unwrap_or(short);
    let name = short.rsplit('/').next().unwrap_or(short);
    if name.contains(':') || name.contains('@') {
        short.to_owned()
    } else {
        format!("{short}:latest")
    }
}

/// States in which a container holds nothing but its logs and filesystem.
fn is_dead(c: &ManagedContainer) -> bool {
    matches!(c.state.as_str(), "exited" | "created" | "dead")
}

/// Oldest first. The engine lists creation times in seconds, so containers of a crash loop
/// often tie; the restart count then orders them, and the id makes the order total.
fn age_key(c: &ManagedContainer) -> (i64, u32, &str) {
    (c.created, c.restart_count, c.id.as_str())
}

/// Which of edged's containers to remove, in removal order, given the engine's list, whether a
/// pod uid is still desired, and the current time in Unix seconds.
pub fn containers_to_remove(
    containers: &[ManagedContainer],
    is_desired: impl Fn(&str) -> bool,
    policy: &ContainerGcPolicy,
    now_unix: i64,
) -> Vec<String> {
    // The newest container of every (desired pod, container name), dead or alive.
    let mut newest: HashMap<(&str, &str), &ManagedContainer> = HashMap::new();
    for c in containers
        .iter()
        .filter(|c| !c.sandbox && is_desired(&c.pod_uid))
    {
        let slot = newest
            .entry((c.pod_uid.as_str(), c.container.as_str()))
            .or_insert(c);
        if age_key(c) > age_key(slot) {
            *slot = c;
        }
    }
    let protected: HashSet<&str> = newest.values().map(|c| c.id.as_str()).collect();
    let min_age = i64::try_from(policy.min_age.as_secs()).unwrap_or(i64::MAX);
    let old_enough = |c: &ManagedContainer| now_unix.saturating_sub(c.created) >= min_age;

    // Evict units, ordered so the result does not depend on hash order.
    let mut units: BTreeMap<(&str, &str), Vec<&ManagedContainer>> = BTreeMap::new();
    let dead = |c: &&ManagedContainer| is_dead(c) && old_enough(c);
    for c in containers.iter().filter(|c| !c.sandbox).filter(dead) {
        units
            .entry((c.pod_uid.as_str(), c.container.as_str()))
            .or_default()
            .push(c);
    }
    for unit in units.values_mut() {
        unit.sort_by_key(|c| age_key(c));
    }
    let mut removed = Vec::new();
    units.retain(|(uid, _), unit| {
        if is_desired(uid) {
            return true;
        }
        removed.extend(unit.iter().map(|c| c.id.clone()));
        false
    });
    // Sandboxes of pods no longer desired, after their app containers; and a desired pod's
    // dead sandboxes that are not its newest and hold no container any more (on a CRI runtime
    // its pod worker only stops them, as their containers carry the pod's restart counts).
    let mut newest_sandbox: HashMap<&str, &ManagedContainer> = HashMap::new();
    for c in containers.iter().filter(|c| c.sandbox) {
        let slot = newest_sandbox.entry(c.pod_uid.as_str()).or_insert(c);
        if (c.restart_count, c.created) > (slot.restart_count, slot.created) {
            *slot = c;
        }
    }
    let holds_containers = |s: &ManagedContainer| {
        containers
            .iter()
            .any(|c| !c.sandbox && c.sandbox_id.as_deref() == Some(s.id.as_str()))
    };
    let mut sandboxes: Vec<&ManagedContainer> = containers
        .iter()
        .filter(|c| c.sandbox)
        .filter(|c| {
            !is_desired(&c.pod_uid)
                || (newest_sandbox
                    .get(c.pod_uid.as_str())
                    .map(|n| n.id.as_str())
                    != Some(c.id.as_str())
                    && !holds_containers(c))
        })
        .filter(dead)
        .collect();
    sandboxes.sort_by_key(|c| (c.pod_uid.as_str(), age_key(c)));
    removed.extend(sandboxes.iter().map(|c| c.id.clone()));
    // Removes the `n` oldest containers of `unit` that are not protected.
    let mut remove_oldest = |unit: &mut Vec<&ManagedContainer>, n: usize| {
        let mut left = n;
        unit.retain(|c| {
            if left == 0 || protected.contains(c.id.as_str()) {
                return true;
            }
            left -= 1;
            removed.push(c.id.clone());
            false
        });
    };
    if let Ok(keep) = usize::try_from(policy.max_per_pod_container) {
        for unit in units.values_mut() {
            let excess = unit.len().saturating_sub(keep);
            remove_oldest(unit, excess);
        }
    }
    if let Ok(max) = usize::try_from(policy.max_containers) {
        let count = |units: &BTreeMap<_, Vec<_>>| units.values().map(Vec::len).sum::<usize>();
        if count(&units) > max && !units.is_empty() {
            let per_unit = (max / units.len()).max(1);
            for unit in units.values_mut() {
                let excess = unit.len().saturating_sub(per_unit);
                remove_oldest(unit, excess);
            }
            let total = count(&units);
            if total > max {
                let mut flat: Vec<&ManagedContainer> = units.into_values().flatten().collect();
                flat.sort_by_key(|c| age_key(c));
                remove_oldest(&mut flat, total - max);
            }
        }
    }
    removed
}

/// The image filesystem's size and free space, in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FsUsage {
    /// Size of the filesystem.
    pub capacity: u64,
    /// Bytes an unprivileged writer can still use (`f_bavail`, as cAdvisor reports).
    pub available: u64,
}

impl FsUsage {
    /// Used percent as kubelet computes it (`100 − available·100/capacity`, rounded down in
    /// the available part); `None` for an empty filesystem, where no percent makes sense.
    pub fn used_percent(&self) -> Option<u8> {
        if self.capacity == 0 {
            return None;
        }
        let available = self.available.min(self.capacity);
        let free = u128::from(available) * 100 / u128::from(self.capacity);
        Some(100 - u8::try_from(free).unwrap_or(100))
    }
}

/// What image GC remembers of an image between passes.
#[derive(Debug, Clone, PartialEq, Eq)]
struct ImageRecord {
    first_detected: Instant,
    /// The last pass that saw a container on it; `None` if none ever did.
    last_used: Option<Instant>,
    size: u64,
    created: i64,
    /// `repo:tag` names, to match pinned references.
    tags: Vec<String>,
}

/// Kubelet's image records: when each image was first seen and last seen in use.
#[derive(Debug, Default)]
pub struct ImageRecords {
    records: HashMap<String, ImageRecord>,
}

/// The outcome of one image GC decision.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ImagePlan {
    /// Usage percent that was found.
    pub used_percent: u8,
    /// Bytes to free to get down to the low threshold (0 below the high threshold).
    pub to_free: u64,
    /// Image ids to remove, in order.
    pub remove: Vec<String>,
    /// Sum of their sizes; below `to_free` when not enough images were eligible.
    pub freed: u64,
}

impl ImageRecords {
    /// Records a pass at `now`: new images are detected, images a container refers to are
    /// used now, images no longer listed are forgotten.
    pub fn observe(&mut self, images: &[ImageInfo], in_use: &HashSet<String>, now: Instant) {
        let listed: HashSet<&str> = images.iter().map(|i| i.id.as_str()).collect();
        self.records.retain(|id, _| listed.contains(id.as_str()));
        for image in images {
            let record = self
                .records
                .entry(image.id.clone())
                .or_insert_with(|| ImageRecord {
                    first_detected: now,
                    last_used: None,
                    size: image.size,
                    created: image.created,
                    tags: Vec::new(),
                });
            record.size = image.size;
            record.tags.clone_from(&image.tags);
            if in_use.contains(&image.id) {
                record.last_used = Some(now);
            }
        }
    }

    /// Images that may be removed at `now`, in kubelet's order: not used by any container,
    /// not pinned, old enough; least recently used first (never used before any use), then
    /// first detected, then oldest build, then id so that the order is total.
    pub fn eligible(
        &self,
        policy: &ImageGcPolicy,
        in_use: &HashSet<String>,
        now: Instant,
    ) -> Vec<(&String, u64)> {
        let pinned: HashSet<String> = policy.pinned.iter().map(|p| familiar(p)).collect();
        let mut candidates: Vec<(&String, &ImageRecord)> = self
            .records
            .iter()
            .filter(|(id, r)| {
                !in_use.contains(id.as_str())
                    && !r.tags.iter().any(|t| pinned.contains(&familiar(t)))
                    && r.last_used.is_none_or(|used| used < now)
                    && now.saturating_duration_since(r.first_detected) >= policy.min_age
            })
            .collect();
        candidates.sort_by_key(|(id, r)| (r.last_used, r.first_detected, r.created, *id));
        candidates.into_iter().map(|(id, r)| (id, r.size)).collect()
    }

    /// Forgets a removed image.
    pub fn forget(&mut self, id: &str) {
        self.records.remove(id);
    }

    /// Decides, after [`observe`](Self::observe) at `now`, which images to remove for `usage`.
    /// `None` when the usage has no capacity.
    pub fn plan(
        &self,
        policy: &ImageGcPolicy,
        usage: FsUsage,
        in_use: &HashSet<String>,
        now: Instant,
    ) -> Option<ImagePlan> {
        let used_percent = usage.used_percent()?;
        let mut plan = ImagePlan {
            used_percent,
            ..ImagePlan::default()
        };
        if used_percent < policy.high_threshold {
            return Some(plan);
        }
        let keep_free =
            u128::from(usage.capacity) * u128::from(100 - policy.low_threshold.min(100)) / 100;
        let available = u128::from(usage.available.min(usage.capacity));
        plan.to_free = u64::try_from(keep_free.saturating_sub(available)).unwrap_or(u64::MAX);
        let candidates = self.eligible(policy, in_use, now);
        for (id, size) in candidates {
            if plan.freed >= plan.to_free {
                break;
            }
            plan.remove.push(id.clone());
            plan.freed = plan.freed.saturating_add(size);
        }
        Some(plan)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(id: &str, uid: &str, name: &str, state: &str, created: i64) -> ManagedContainer {
        ManagedContainer {
            id: id.into(),
            pod_namespace: "default".into(),
            pod_name: format!("pod-{uid}"),
            pod_uid: uid.into(),
            container: name.into(),
            hash: "h".into(),
            restart_count: 0,
            state: state.into(),
            created,
            sandbox: false,
            sandbox_id: None,
        }
    }

    fn sandbox(id: &str, uid: &str, state: &str, created: i64) -> ManagedContainer {
        ManagedContainer {
            sandbox: true,
            ..c(id, uid, "POD", state, created)
        }
    }

    fn policy(per_pod: i32, max: i32) -> ContainerGcPolicy {
        ContainerGcPolicy {
            min_age: Duration::ZERO,
            max_per_pod_container: per_pod,
            max_containers: max,
        }
    }

    fn desired(uids: &[&str]) -> impl Fn(&str) -> bool {
        let uids: Vec<String> = uids.iter().map(|u| (*u).to_owned()).collect();
        move |uid| uids.iter().any(|u| u == uid)
    }

    #[test]
    fn per_pod_limit_removes_the_oldest_dead_and_never_running_ones() {
        let all = [
            c("a1", "a", "app", "exited", 10),
            c("a2", "a", "app", "exited", 20),
            c("a3", "a", "app", "exited", 30),
            c("a4", "a", "app", "running", 40),
            c("b1", "a", "side", "exited", 5),
        ];
        let removed = containers_to_remove(&all, desired(&["a"]), &policy(1, -1), 100);
        assert_eq!(removed, ["a1", "a2"]);
        // No per-pod limit, no global limit: nothing goes.
        assert!(containers_to_remove(&all, desired(&["a"]), &policy(-1, -1), 100).is_empty());
    }

    #[test]
    fn dead_containers_of_pods_no_longer_desired_go_first_and_all_of_them() {
        let all = [
            c("a1", "a", "app", "exited", 10),
            c("a2", "a", "app", "exited", 20),
            c("g1", "gone", "app", "exited", 50),
            c("g2", "gone", "app", "created", 60),
            c("g3", "gone", "app", "running", 70),
        ];
        let removed = containers_to_remove(&all, desired(&["a"]), &policy(1, -1), 100);
        // The running one is the relist's business (orphan removal), not GC's.
        assert_eq!(removed, ["g1", "g2", "a1"]);
    }

    #[test]
    fn the_newest_container_of_a_desired_pod_is_kept_even_with_a_zero_limit() {
        let all = [
            c("a1", "a", "app", "exited", 10),
            c("a2", "a", "app", "exited", 20),
            c("n1", "n", "job", "exited", 15),
        ];
        let removed = containers_to_remove(&all, desired(&["a", "n"]), &policy(0, 0), 100);
        assert_eq!(removed, ["a1"]);
    }

    #[test]
    fn ties_in_creation_time_are_broken_by_restart_count() {
        let mut old = c("zzz", "a", "app", "exited", 10);
        old.restart_count = 1;
        let mut newer = c("aaa", "a", "app", "exited", 10);
        newer.restart_count = 2;
        let removed = containers_to_remove(&[newer, old], desired(&["a"]), &policy(1, -1), 100);
        assert_eq!(removed, ["zzz"]);
    }

    #[test]
    fn global_limit_evens_units_then_removes_the_oldest() {
        let all = [
            c("a1", "a", "app", "exited", 10),
            c("a2", "a", "app", "exited", 20),
            c("a3", "a", "app", "exited", 30),
            c("a4", "a", "app", "exited", 40),
            c("b1", "b", "app", "exited", 5),
            c("b2", "b", "app", "exited", 50),
            c("c1", "c", "app", "exited", 1),
        ];
        let keep = desired(&["a", "b", "c"]);
        // 7 dead, at most 4: 4 / 3 units = 1 per unit first (a1..a3, b1 go), leaving
        // a4, b2, c1 = 3 ≤ 4.
        let removed = containers_to_remove(&all, &keep, &policy(-1, 4), 100);
        assert_eq!(removed, ["a1", "a2", "a3", "b1"]);
        // At most 2: after one per unit, 3 remain; the oldest that is not a unit's newest
        // would go, but all three are their pods' newest, so they stay.
        let removed = containers_to_remove(&all, &keep, &policy(-1, 2), 100);
        assert_eq!(removed, ["a1", "a2", "a3", "b1"]);
    }

    #[test]
    fn global_limit_removes_oldest_across_units_when_evening_is_not_enough() {
        let all = [
            c("a1", "a", "app", "exited", 10),
            c("a2", "a", "app", "exited", 20),
            c("a3", "a", "app", "running", 99),
            c("b1", "b", "app", "exited", 5),
            c("b2", "b", "app", "exited", 50),
            c("b3", "b", "app", "running", 98),
        ];
        // 4 dead, at most 1: evening to 1 per unit removes a1 and b1; a2 and b2 remain (2 > 1),
        // neither is its unit's newest (the running ones are), so the older, a2, goes.
        let removed = containers_to_remove(&all, desired(&["a", "b"]), &policy(-1, 1), 100);
        assert_eq!(removed, ["a1", "b1", "a2"]);
    }

    #[test]
    fn sandboxes_never_count_and_go_with_their_pod_or_once_empty_and_replaced() {
        let in_sandbox = |mut c: ManagedContainer, sandbox: &str| {
            c.sandbox_id = Some(sandbox.to_owned());
            c
        };
        let all = [
            sandbox("s-a0", "a", "exited", 5),
            sandbox("s-a1", "a", "exited", 6),
            sandbox("s-a2", "a", "running", 7),
            in_sandbox(c("a1", "a", "app", "exited", 10), "s-a1"),
            in_sandbox(c("a2", "a", "app", "running", 20), "s-a2"),
            sandbox("s-g0", "gone", "exited", 1),
            sandbox("s-g1", "gone", "running", 2),
            c("g1", "gone", "app", "exited", 50),
        ];
        // A desired pod's dead sandbox stays while it holds a container (s-a1: on a CRI
        // runtime it would take a1 and the restart count with it) or is the newest; an empty
        // replaced one goes (s-a0). A gone pod's dead one goes after its app containers, its
        // running one is the relist's (orphan removal).
        let removed = containers_to_remove(&all, desired(&["a"]), &policy(0, 0), 100);
        assert_eq!(removed, ["g1", "s-a0", "s-g0", "a1"]);
        // Sandboxes take no slot from the app containers: with one per container, a1 stays.
        let removed = containers_to_remove(&all, desired(&["a"]), &policy(1, -1), 100);
        assert_eq!(removed, ["g1", "s-a0", "s-g0"]);
        // Once a1 is gone, so is the sandbox it held.
        let later: Vec<ManagedContainer> = all.iter().filter(|c| c.id != "a1").cloned().collect();
        let removed = containers_to_remove(&later, desired(&["a"]), &policy(1, -1), 100);
        assert_eq!(removed, ["g1", "s-a0", "s-a1", "s-g0"]);
    }

    #[test]
    fn younger_than_min_age_is_kept() {
        let all = [
            c("a1", "a", "app", "exited", 10),
            c("a2", "a", "app", "exited", 90),
            c("a3", "a", "app", "exited", 95),
        ];
        let mut p = policy(0, -1);
        p.min_age = Duration::from_secs(30);
        // a3 is the newest (kept anyway); a2 is 10 s old: kept; a1 is 90 s old: removed.
        assert_eq!(containers_to_remove(&all, desired(&["a"]), &p, 100), ["a1"]);
    }

    fn image(id: &str, size: u64, created: i64) -> ImageInfo {
        ImageInfo {
            id: id.into(),
            tags: vec![format!("{id}:1")],
            size,
            created,
        }
    }

    fn usage(used_percent: u64) -> FsUsage {
        FsUsage {
            capacity: 1000,
            available: 1000 - used_percent * 10,
        }
    }

    fn images_policy() -> ImageGcPolicy {
        ImageGcPolicy {
            high_threshold: 85,
            low_threshold: 80,
            min_age: Duration::from_secs(120),
            pinned: Vec::new(),
        }
    }

    #[test]
    fn a_pinned_image_is_never_removed() {
        let t0 = Instant::now();
        let mut records = ImageRecords::default();
        let none = HashSet::new();
        let mut pause = image("pause", 10, 0);
        pause.tags = vec!["kubeedge/pause:3.6".into()];
        let mut busybox = image("busybox", 10, 0);
        busybox.tags = vec!["busybox:latest".into()];
        records.observe(&[pause, busybox, image("other", 10, 0)], &none, t0);
        let mut policy = images_policy();
        policy.pinned = vec![
            "docker.io/kubeedge/pause:3.6".into(),
            "library/busybox".into(),
        ];
        let later = t0 + Duration::from_secs(600);
        let plan = records.plan(&policy, usage(99), &none, later).unwrap();
        assert_eq!(plan.remove, ["other"]);
    }

    #[test]
    fn below_the_high_threshold_nothing_is_removed() {
        let t0 = Instant::now();
        let mut records = ImageRecords::default();
        let none = HashSet::new();
        records.observe(&[image("x", 500, 1)], &none, t0);
        let later = t0 + Duration::from_secs(600);
        let plan = records
            .plan(&images_policy(), usage(84), &none, later)
            .unwrap();
        assert_eq!(plan.used_percent, 84);
        assert!(plan.remove.is_empty());
    }

    #[test]
    fn above_it_unused_images_go_least_recently_used_first_down_to_the_low_threshold() {
        let t0 = Instant::now();
        let mut records = ImageRecords::default();
        let images = [
            image("used-once", 60, 3),
            image("never", 30, 5),
            image("older-build", 30, 1),
            image("busy", 500, 0),
        ];
        let mut in_use = HashSet::from(["used-once".to_owned(), "busy".to_owned()]);
        records.observe(&images, &in_use, t0);
        in_use.remove("used-once");
        let t1 = t0 + Duration::from_secs(300);
        records.observe(&images, &in_use, t1);
        // 90 % used: free 100 − 20 % of 1000 = 100 bytes.
        let plan = records
            .plan(&images_policy(), usage(90), &in_use, t1)
            .unwrap();
        assert_eq!(plan.to_free, 100);
        assert_eq!(plan.remove, ["older-build", "never", "used-once"]);
        assert_eq!(plan.freed, 120);
        // Not enough eligible: everything unused goes, and `freed` says how short it fell.
        let plan = records
            .plan(&images_policy(), usage(99), &in_use, t1)
            .unwrap();
        assert_eq!(plan.to_free, 190);
        assert_eq!(plan.freed, 120);
    }

    #[test]
    fn young_and_in_use_images_are_kept() {
        let t0 = Instant::now();
        let mut records = ImageRecords::default();
        let in_use = HashSet::from(["busy".to_owned()]);
        records.observe(&[image("busy", 500, 0), image("old", 10, 0)], &in_use, t0);
        let t1 = t0 + Duration::from_secs(200);
        records.observe(
            &[
                image("busy", 500, 0),
                image("old", 10, 0),
                image("new", 10, 9),
            ],
            &in_use,
            t1,
        );
        let plan = records
            .plan(&images_policy(), usage(95), &in_use, t1)
            .unwrap();
        assert_eq!(plan.remove, ["old"]);
        // Forgotten once gone from the engine.
        records.observe(&[image("busy", 500, 0)], &in_use, t1);
        let plan = records
            .plan(&images_policy(), usage(95), &in_use, t1)
            .unwrap();
        assert!(plan.remove.is_empty());
    }

    #[test]
    fn used_percent_is_kubelets() {
        assert_eq!(usage(85).used_percent(), Some(85));
        let odd = FsUsage {
            capacity: 3,
            available: 1,
        };
        // 100 − floor(33.3) = 67.
        assert_eq!(odd.used_percent(), Some(67));
        let empty = FsUsage {
            capacity: 0,
            available: 0,
        };
        assert_eq!(empty.used_percent(), None);
        let over = FsUsage {
            capacity: 10,
            available: 20,
        };
        assert_eq!(over.used_percent(), Some(0));
    }
}
