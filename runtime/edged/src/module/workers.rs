//! The pod workers' queues: which pod gets a worker next.
//!
//! Syncing a pod (pulling images, writing volumes, creating containers) and killing one
//! (stopping containers with their grace period) can each take seconds to minutes, so they run
//! in worker tasks, never in the module's loop. Two queues keep them apart, as kubelet's pod
//! workers and legacy edged's addition/deletion queues do: a slow image pull never holds up a
//! deletion, and up to [`PodWorkers::limit`] pods of each kind are worked on at once, so one
//! slow pod does not hold up the others either.
//!
//! A pod has at most one worker at a time, so its containers are never created and removed
//! concurrently; work asked for a busy pod waits for it. A failed sync or kill is tried again
//! with a back-off per pod (doubling up to a cap), which new desired state for the pod resets.
//!
//! This is bookkeeping only (no engine, no tasks), so its rules are tested on their own.

use std::collections::{HashMap, HashSet, VecDeque};
use std::time::{Duration, Instant};

/// Work on one pod, by uid.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Work {
    /// Make the pod's containers match its spec.
    Sync(String),
    /// Remove the pod's containers (pod deleted, or orphan containers).
    Kill(String),
}

impl Work {
    /// The pod this work is for.
    pub(super) fn uid(&self) -> &str {
        match self {
            Work::Sync(uid) | Work::Kill(uid) => uid,
        }
    }
}

/// When a failed piece of work may be tried again.
#[derive(Debug, Clone, Copy)]
struct Retry {
    at: Instant,
    next_delay: Duration,
}

/// One queue (additions or deletions) and its retries.
#[derive(Debug, Default)]
struct Queue {
    order: VecDeque<String>,
    queued: HashSet<String>,
    running: usize,
    retry: HashMap<String, Retry>,
}

impl Queue {
    fn push(&mut self, uid: &str) {
        if self.queued.insert(uid.to_owned()) {
            self.order.push_back(uid.to_owned());
        }
    }

    fn drop_uid(&mut self, uid: &str) {
        if self.queued.remove(uid) {
            self.order.retain(|u| u != uid);
        }
        self.retry.remove(uid);
    }

    /// Takes the first queued pod that is not busy and whose retry (if any) is due.
    fn take(&mut self, busy: &HashMap<String, bool>, now: Instant) -> Option<String> {
        let position = self.order.iter().position(|uid| {
            !busy.contains_key(uid) && self.retry.get(uid).is_none_or(|r| r.at <= now)
        })?;
        let uid = self.order.remove(position)?;
        self.queued.remove(&uid);
        self.running += 1;
        Some(uid)
    }

    fn failed(&mut self, uid: &str, now: Instant, initial: Duration, max: Duration) -> Duration {
        let delay = self.retry.get(uid).map_or(initial, |r| r.next_delay);
        self.retry.insert(
            uid.to_owned(),
            Retry {
                at: now + delay,
                next_delay: (delay * 2).min(max),
            },
        );
        delay
    }
}

/// The addition and deletion queues of the pods edged runs.
#[derive(Debug)]
pub(super) struct PodWorkers {
    limit: usize,
    initial_retry: Duration,
    max_retry: Duration,
    additions: Queue,
    deletions: Queue,
    /// Pods a worker holds now; `true` for a kill.
    busy: HashMap<String, bool>,
    /// Pods asked to sync while their worker ran: synced again as soon as it finishes.
    again: HashSet<String>,
}

impl PodWorkers {
    /// Queues with up to `limit` workers of each kind; failed work is retried after
    /// `initial_retry`, doubling up to `max_retry`.
    pub(super) fn new(limit: usize, initial_retry: Duration, max_retry: Duration) -> PodWorkers {
        PodWorkers {
            limit: limit.max(1),
            initial_retry,
            max_retry,
            additions: Queue::default(),
            deletions: Queue::default(),
            busy: HashMap::new(),
            again: HashSet::new(),
        }
    }

    /// How many workers of each kind run at once.
    #[cfg(test)]
    pub(super) fn limit(&self) -> usize {
        self.limit
    }

    /// Asks for a sync of `uid` (relist, or a pod that may need work). Honours a pending
    /// retry back-off.
    pub(super) fn sync(&mut self, uid: &str) {
        if self.busy.contains_key(uid) {
            return;
        }
        self.additions.push(uid);
    }

    /// Asks for a sync of `uid` because its desired state changed: a pending back-off is
    /// dropped, and a pod being worked on is synced again as soon as its worker is done.
    pub(super) fn sync_now(&mut self, uid: &str) {
        self.additions.retry.remove(uid);
        if self.busy.contains_key(uid) {
            self.again.insert(uid.to_owned());
        } else {
            self.additions.push(uid);
        }
    }

    /// Asks for `uid` to be killed; a queued sync of it is dropped.
    pub(super) fn kill(&mut self, uid: &str) {
        self.additions.drop_uid(uid);
        self.again.remove(uid);
        self.deletions.push(uid);
    }

    /// Whether a kill of `uid` is queued or running.
    #[cfg(test)]
    pub(super) fn killing(&self, uid: &str) -> bool {
        self.deletions.queued.contains(uid) || self.busy.get(uid) == Some(&true)
    }

    /// Whether a worker holds `uid` or work for it is queued.
    pub(super) fn pending(&self, uid: &str) -> bool {
        self.busy.contains_key(uid)
            || self.additions.queued.contains(uid)
            || self.deletions.queued.contains(uid)
    }

    /// The next work a free worker should take: deletions first, then additions; `None` when
    /// every worker of both kinds is busy or nothing is ready.
    pub(super) fn next(&mut self, now: Instant) -> Option<Work> {
        if self.deletions.running < self.limit
            && let Some(uid) = self.deletions.take(&self.busy, now)
        {
            self.busy.insert(uid.clone(), true);
            return Some(Work::Kill(uid));
        }
        if self.additions.running < self.limit
            && let Some(uid) = self.additions.take(&self.busy, now)
        {
            self.busy.insert(uid.clone(), false);
            return Some(Work::Sync(uid));
        }
        None
    }

    /// Books the end of `work`. A failure is queued again behind its back-off (the delay is
    /// returned); a success clears the pod's back-off.
    pub(super) fn done(&mut self, work: &Work, ok: bool, now: Instant) -> Option<Duration> {
        let uid = work.uid();
        self.busy.remove(uid);
        let (initial, max) = (self.initial_retry, self.max_retry);
        let (queue, again) = match work {
            Work::Sync(_) => (&mut self.additions, self.again.remove(uid)),
            Work::Kill(_) => (&mut self.deletions, false),
        };
        queue.running -= 1;
        let delay = if ok {
            queue.retry.remove(uid);
            None
        } else {
            let delay = queue.failed(uid, now, initial, max);
            queue.push(uid);
            Some(delay)
        };
        if again {
            // New desired state arrived while the worker ran: no back-off for it.
            self.additions.retry.remove(uid);
            self.additions.push(uid);
        }
        delay
    }

    /// Workers running now (additions, deletions).
    pub(super) fn running(&self) -> (usize, usize) {
        (self.additions.running, self.deletions.running)
    }

    /// Work queued and not yet taken (additions, deletions).
    pub(super) fn queued(&self) -> (usize, usize) {
        (self.additions.order.len(), self.deletions.order.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn workers() -> PodWorkers {
        PodWorkers::new(2, Duration::from_secs(1), Duration::from_secs(4))
    }

    fn drain(w: &mut PodWorkers, now: Instant) -> Vec<Work> {
        std::iter::from_fn(|| w.next(now)).collect()
    }

    #[test]
    fn deletions_go_first_and_each_queue_has_its_own_workers() {
        let mut w = workers();
        let now = Instant::now();
        for uid in ["a", "b", "c"] {
            w.sync(uid);
        }
        w.kill("x");
        w.kill("y");
        w.kill("z");
        let taken = drain(&mut w, now);
        assert_eq!(
            taken,
            vec![
                Work::Kill("x".into()),
                Work::Kill("y".into()),
                Work::Sync("a".into()),
                Work::Sync("b".into()),
            ],
            "two of each kind at once; deletions do not wait behind additions"
        );
        assert_eq!(w.running(), (2, 2));
        assert_eq!(w.queued(), (1, 1));
        // A slow addition does not hold up the next deletion.
        w.done(&Work::Kill("x".into()), true, now);
        assert_eq!(w.next(now), Some(Work::Kill("z".into())));
        assert_eq!(w.next(now), None);
        w.done(&Work::Sync("a".into()), true, now);
        assert_eq!(w.next(now), Some(Work::Sync("c".into())));
    }

    #[test]
    fn one_worker_per_pod_and_new_state_syncs_again() {
        let mut w = workers();
        let now = Instant::now();
        w.sync("a");
        assert_eq!(w.next(now), Some(Work::Sync("a".into())));
        // Relist asks again while it runs: nothing queued twice.
        w.sync("a");
        assert_eq!(w.next(now), None);
        // An update arrives while it runs: synced again right after.
        w.sync_now("a");
        assert_eq!(w.next(now), None);
        w.done(&Work::Sync("a".into()), true, now);
        assert_eq!(w.next(now), Some(Work::Sync("a".into())));
        // A delete while it runs waits for the worker, and drops the queued sync.
        w.kill("a");
        assert!(w.killing("a"));
        assert_eq!(w.next(now), None);
        w.done(&Work::Sync("a".into()), true, now);
        assert_eq!(w.next(now), Some(Work::Kill("a".into())));
        assert_eq!(w.next(now), None);
        w.done(&Work::Kill("a".into()), true, now);
        assert!(!w.pending("a"));
    }

    #[test]
    fn failures_back_off_doubling_to_the_cap_and_new_state_resets() {
        let mut w = workers();
        let t0 = Instant::now();
        w.sync("a");
        let work = w.next(t0).expect("queued");
        assert_eq!(w.done(&work, false, t0), Some(Duration::from_secs(1)));
        assert_eq!(w.next(t0), None, "not before its back-off");
        let t1 = t0 + Duration::from_secs(1);
        let work = w.next(t1).expect("due");
        assert_eq!(w.done(&work, false, t1), Some(Duration::from_secs(2)));
        let t2 = t1 + Duration::from_secs(2);
        let work = w.next(t2).expect("due");
        assert_eq!(w.done(&work, false, t2), Some(Duration::from_secs(4)));
        let t3 = t2 + Duration::from_secs(4);
        let work = w.next(t3).expect("due");
        assert_eq!(
            w.done(&work, false, t3),
            Some(Duration::from_secs(4)),
            "capped"
        );
        // Relist does not jump the back-off; a new spec does.
        w.sync("a");
        assert_eq!(w.next(t3), None);
        w.sync_now("a");
        let work = w.next(t3).expect("new state is worked on at once");
        assert_eq!(w.done(&work, true, t3), None);
        w.sync("a");
        let work = w.next(t3).expect("success cleared the back-off");
        w.done(&work, true, t3);
    }

    #[test]
    fn a_failed_kill_is_retried_and_a_waiting_pod_does_not_block_others() {
        let mut w = workers();
        let t0 = Instant::now();
        w.kill("a");
        let work = w.next(t0).expect("queued");
        w.done(&work, false, t0);
        assert!(w.killing("a"), "still to be killed");
        w.sync("b");
        assert_eq!(
            w.next(t0),
            Some(Work::Sync("b".into())),
            "a pod in back-off does not block the queue"
        );
        assert_eq!(
            w.next(t0 + Duration::from_secs(1)),
            Some(Work::Kill("a".into()))
        );
        assert_eq!(w.limit(), 2);
    }
}
