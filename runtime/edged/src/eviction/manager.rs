//! The eviction manager's bookkeeping, kept apart from any I/O so that each rule can be
//! tested with a clock of its own. Each observation of the node's [`Signals`] decides, as
//! kubelet's `synchronize` does:
//!
//! 1. which thresholds are crossed: every hard and soft threshold whose signal is below it,
//!    plus every threshold met at the last observation whose signal has not yet climbed
//!    `evictionMinimumReclaim` above it (so one eviction does not stop at the threshold's
//!    edge and start again at the next pass);
//! 2. the pressure conditions: a condition holds while one of its thresholds is crossed and
//!    for `evictionPressureTransitionPeriod` after (so a node does not flap between pressure
//!    and none, and the scheduler does not send pods back at once);
//! 3. which thresholds are met: hard ones when crossed, soft ones once crossed for their
//!    grace period without a break;
//! 4. the one to act on: memory first, then the disk signals in kubelet's order.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use wedge_core::config::eviction::{Amount, EvictionPolicy};

use crate::node::pressure::{Pressure, Signals};

/// A threshold: its signal and whether it is the hard or the soft one.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Key {
    signal: String,
    hard: bool,
}

/// What a pod eviction reclaims.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resource {
    /// `memory.available`.
    Memory,
    /// `nodefs.*`, `imagefs.*`: the disk (bytes or inodes).
    EphemeralStorage,
    /// `pid.available`.
    Pids,
}

impl Resource {
    /// Kubelet's name of the resource in messages.
    pub fn name(self) -> &'static str {
        match self {
            Resource::Memory => "memory",
            Resource::EphemeralStorage => "ephemeral-storage",
            Resource::Pids => "pids",
        }
    }

    fn of(signal: &str) -> Resource {
        match signal {
            "memory.available" => Resource::Memory,
            "pid.available" => Resource::Pids,
            _ => Resource::EphemeralStorage,
        }
    }
}

/// A threshold met (grace period over): what the eviction pass acts on.
#[derive(Debug, Clone, PartialEq)]
pub struct Reclaim {
    /// The signal, e.g. `memory.available`.
    pub signal: String,
    /// What it reclaims.
    pub resource: Resource,
    /// The threshold, in the signal's unit (bytes, inodes, pids).
    pub threshold: u64,
    /// What was available when observed.
    pub available: u64,
    /// A hard threshold (pods get kubelet's 1 s grace) or a soft one (`evictionMaxPodGracePeriod`).
    pub hard: bool,
}

/// One observation's outcome.
#[derive(Debug, Clone, PartialEq)]
pub struct Observation {
    /// The node's pressure conditions (transition period applied).
    pub pressure: Pressure,
    /// The threshold to reclaim for now, if any is met.
    pub reclaim: Option<Reclaim>,
}

/// The eviction manager's state between observations.
#[derive(Debug)]
pub struct Manager {
    policy: EvictionPolicy,
    /// Thresholds met at the last observation.
    met: Vec<Key>,
    /// When each crossed threshold was first seen crossed, without a break since.
    first_crossed: BTreeMap<Key, Instant>,
    /// When each condition (memory, disk, pid) was last seen.
    last_seen: [Option<Instant>; 3],
}

/// Kubelet's order of signals to act on: memory first, then the disk, then pids — the order
/// the policy lists the signals it reads in.
const PRIORITY: [&str; 6] = wedge_core::config::eviction::EVICTION_SIGNALS;

impl Manager {
    /// A manager for `policy`, having seen nothing.
    pub fn new(policy: EvictionPolicy) -> Manager {
        Manager {
            policy,
            met: Vec::new(),
            first_crossed: BTreeMap::new(),
            last_seen: [None; 3],
        }
    }

    /// The policy it applies.
    pub fn policy(&self) -> &EvictionPolicy {
        &self.policy
    }

    fn amount(&self, key: &Key) -> Option<Amount> {
        if key.hard {
            self.policy.hard.get(&key.signal).copied()
        } else {
            self.policy.soft.get(&key.signal).map(|s| s.amount)
        }
    }

    /// Whether `key` is crossed in `signals`; with `reclaiming`, whether its signal is still
    /// short of the threshold plus the minimum reclaim. `None` when the signal was not read.
    fn crossed(&self, key: &Key, signals: &Signals, reclaiming: bool) -> Option<(u64, u64)> {
        let (available, capacity) = signals.get(&key.signal)?;
        let threshold = self.amount(key)?.of(capacity);
        let extra = if reclaiming {
            self.policy
                .minimum_reclaim
                .get(&key.signal)
                .map_or(0, |m| m.of(capacity))
        } else {
            0
        };
        (available < threshold.saturating_add(extra)).then_some((threshold, available))
    }

    fn keys(&self) -> impl Iterator<Item = Key> + '_ {
        let hard = self.policy.hard.keys().map(|s| Key {
            signal: s.clone(),
            hard: true,
        });
        let soft = self.policy.soft.keys().map(|s| Key {
            signal: s.clone(),
            hard: false,
        });
        hard.chain(soft)
    }

    /// Observes `signals` at `now` (module docs).
    pub fn observe(&mut self, signals: &Signals, now: Instant) -> Observation {
        let mut crossed: Vec<Key> = self
            .keys()
            .filter(|k| self.crossed(k, signals, false).is_some())
            .collect();
        for key in &self.met {
            if !crossed.contains(key) && self.crossed(key, signals, true).is_some() {
                crossed.push(key.clone());
            }
        }
        self.first_crossed.retain(|k, _| crossed.contains(k));
        for key in &crossed {
            self.first_crossed.entry(key.clone()).or_insert(now);
        }
        for key in &crossed {
            let slot = match Resource::of(&key.signal) {
                Resource::Memory => 0,
                Resource::EphemeralStorage => 1,
                Resource::Pids => 2,
            };
            self.last_seen[slot] = Some(now);
        }
        let transition = self.policy.pressure_transition;
        let holds = |seen: Option<Instant>| {
            seen.is_some_and(|at| {
                let since = now.saturating_duration_since(at);
                since.is_zero() || since < transition
            })
        };
        let pressure = Pressure {
            memory: holds(self.last_seen[0]),
            disk: holds(self.last_seen[1]),
            pid: holds(self.last_seen[2]),
        };
        self.met = crossed
            .into_iter()
            .filter(|k| {
                let grace = if k.hard {
                    Duration::ZERO
                } else {
                    self.policy
                        .soft
                        .get(&k.signal)
                        .map_or(Duration::MAX, |s| s.grace)
                };
                self.first_crossed
                    .get(k)
                    .is_some_and(|at| now.saturating_duration_since(*at) >= grace)
            })
            .collect();
        let reclaim = PRIORITY.iter().find_map(|signal| {
            // A hard threshold before a soft one of the same signal.
            let key = self
                .met
                .iter()
                .filter(|k| k.signal == *signal)
                .max_by_key(|k| k.hard)?;
            let (threshold, available) = self
                .crossed(key, signals, true)
                .or_else(|| self.crossed(key, signals, false))?;
            Some(Reclaim {
                signal: key.signal.clone(),
                resource: Resource::of(&key.signal),
                threshold,
                available,
                hard: key.hard,
            })
        });
        Observation { pressure, reclaim }
    }

    /// Whether `reclaim`'s signal is back above its threshold plus the minimum reclaim in
    /// `signals` (read after reclaiming node-level resources: then no pod is evicted).
    pub fn resolved(&self, reclaim: &Reclaim, signals: &Signals) -> bool {
        let key = Key {
            signal: reclaim.signal.clone(),
            hard: reclaim.hard,
        };
        self.crossed(&key, signals, true).is_none()
    }

    /// The grace period of a pod evicted for `reclaim`, whose own is `pod_grace`: kubelet's
    /// 1 s for a hard threshold; for a soft one `evictionMaxPodGracePeriod`, or the pod's own
    /// when shorter (at least 1 s).
    pub fn pod_grace(&self, reclaim: &Reclaim, pod_grace: Duration) -> Duration {
        let second = Duration::from_secs(1);
        if reclaim.hard {
            return second;
        }
        let max =
            Duration::from_secs(u64::try_from(self.policy.max_pod_grace_seconds).unwrap_or(0));
        max.min(pod_grace).max(second)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wedge_core::config::eviction::SoftThreshold;

    const MI: u64 = 1 << 20;
    const GI: u64 = 1 << 30;

    fn policy() -> EvictionPolicy {
        EvictionPolicy {
            hard: [("memory.available".to_owned(), Amount::Quantity(100 * MI))].into(),
            soft: [(
                "memory.available".to_owned(),
                SoftThreshold {
                    amount: Amount::Quantity(GI),
                    grace: Duration::from_secs(60),
                },
            )]
            .into(),
            minimum_reclaim: [("memory.available".to_owned(), Amount::Quantity(200 * MI))].into(),
            pressure_transition: Duration::from_secs(300),
            max_pod_grace_seconds: 30,
        }
    }

    fn memory(available: u64) -> Signals {
        Signals {
            memory: Some((available, 8 * GI)),
            ..Signals::default()
        }
    }

    #[test]
    fn a_soft_threshold_waits_for_its_grace_period_and_a_break_restarts_it() {
        let mut m = Manager::new(policy());
        let t0 = Instant::now();
        let o = m.observe(&memory(GI / 2), t0);
        assert!(o.pressure.memory, "pressure shows at once");
        assert_eq!(o.reclaim, None, "the grace period has not passed");
        let o = m.observe(&memory(GI / 2), t0 + Duration::from_secs(59));
        assert_eq!(o.reclaim, None);
        let o = m.observe(&memory(GI / 2), t0 + Duration::from_secs(60));
        let r = o.reclaim.expect("grace over");
        assert!(!r.hard);
        assert_eq!((r.threshold, r.available), (GI, GI / 2));
        assert_eq!(
            m.pod_grace(&r, Duration::from_secs(600)),
            Duration::from_secs(30)
        );
        assert_eq!(
            m.pod_grace(&r, Duration::from_secs(5)),
            Duration::from_secs(5)
        );
        // Back above threshold plus reclaim (1 GiB + 200 MiB): the clock starts again.
        let t1 = t0 + Duration::from_secs(70);
        assert_eq!(m.observe(&memory(2 * GI), t1).reclaim, None);
        assert_eq!(
            m.observe(&memory(GI / 2), t1 + Duration::from_secs(30))
                .reclaim,
            None
        );
    }

    #[test]
    fn a_hard_threshold_acts_at_once_and_until_the_minimum_is_reclaimed() {
        let mut m = Manager::new(policy());
        let t0 = Instant::now();
        let r = m.observe(&memory(50 * MI), t0).reclaim.unwrap();
        assert!(r.hard);
        assert_eq!(
            m.pod_grace(&r, Duration::from_secs(600)),
            Duration::from_secs(1)
        );
        // Above the threshold, short of threshold + minimum reclaim: still acting on it.
        let r = m
            .observe(&memory(150 * MI), t0 + Duration::from_secs(10))
            .reclaim
            .unwrap();
        assert!(r.hard);
        assert!(!m.resolved(&r, &memory(250 * MI)));
        assert!(m.resolved(&r, &memory(301 * MI)));
        // Past threshold + minimum reclaim (300 MiB): the hard one is resolved; the soft one
        // (1 GiB) is crossed but still within its grace, so nothing is to be reclaimed.
        assert_eq!(
            m.observe(&memory(400 * MI), t0 + Duration::from_secs(20))
                .reclaim,
            None
        );
    }

    #[test]
    fn pressure_stays_for_the_transition_period() {
        let mut m = Manager::new(EvictionPolicy {
            pressure_transition: Duration::from_secs(30),
            ..policy()
        });
        let t0 = Instant::now();
        assert!(m.observe(&memory(50 * MI), t0).pressure.memory);
        let calm = memory(4 * GI);
        assert!(
            m.observe(&calm, t0 + Duration::from_secs(29))
                .pressure
                .memory
        );
        let o = m.observe(&calm, t0 + Duration::from_secs(30));
        assert!(!o.pressure.memory);
        assert_eq!(o.reclaim, None);
        // Unread signals raise nothing.
        assert_eq!(
            m.observe(&Signals::default(), t0 + Duration::from_secs(40))
                .pressure,
            Pressure::default()
        );
    }

    #[test]
    fn memory_comes_before_the_disk() {
        let mut m = Manager::new(EvictionPolicy {
            hard: [
                ("memory.available".to_owned(), Amount::Quantity(100 * MI)),
                ("nodefs.available".to_owned(), Amount::Percent(10.0)),
            ]
            .into(),
            ..EvictionPolicy::default()
        });
        let both = Signals {
            memory: Some((MI, 8 * GI)),
            nodefs: Some((GI, 100 * GI)),
            ..Signals::default()
        };
        let o = m.observe(&both, Instant::now());
        assert!(o.pressure.memory && o.pressure.disk);
        assert_eq!(o.reclaim.unwrap().resource, Resource::Memory);
        let disk = Signals {
            memory: Some((4 * GI, 8 * GI)),
            ..both
        };
        let r = m.observe(&disk, Instant::now()).reclaim.unwrap();
        assert_eq!(
            (r.signal.as_str(), r.threshold),
            ("nodefs.available", 10 * GI)
        );
    }
}
