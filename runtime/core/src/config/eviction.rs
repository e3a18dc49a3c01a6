//! Kubelet's eviction policy from `tailoredKubeletConfig`: `evictionHard`, `evictionSoft` with
//! `evictionSoftGracePeriod`, `evictionMinimumReclaim`, `evictionPressureTransitionPeriod` and
//! `evictionMaxPodGracePeriod`, parsed once with kubelet's rules so that validation at start and
//! edged's eviction manager read the same thing.
//!
//! Kubelet's rules, kept here: a signal kubelet does not know is an error; a threshold is a
//! positive quantity or a percent in `[0%, 100%]`, where `0%` and `100%` mean no threshold; a
//! soft threshold needs a grace period, which must not be negative; a minimum reclaim is a
//! non-negative quantity or a percent in `[0%, 100%]`.

use std::collections::BTreeMap;
use std::time::Duration;

use super::duration::GoDuration;
use super::kubelet::TailoredKubeletConfig;

/// Signals edged reads and acts on, in the order the eviction manager weighs them (kubelet's:
/// memory first).
pub const EVICTION_SIGNALS: [&str; 6] = [
    "memory.available",
    "nodefs.available",
    "nodefs.inodesFree",
    "imagefs.available",
    "imagefs.inodesFree",
    "pid.available",
];

/// Signals kubelet knows that edged does not read (a separate container filesystem, the
/// allocatable cgroup): accepted, and said at start to raise nothing.
pub const UNREAD_EVICTION_SIGNALS: [&str; 3] = [
    "containerfs.available",
    "containerfs.inodesFree",
    "allocatableMemory.available",
];

/// A threshold or a reclaim amount: a quantity (bytes, inodes, pids) or a percent of capacity.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Amount {
    /// This many bytes (memory, disk), inodes or pids.
    Quantity(u64),
    /// This percent of the capacity.
    Percent(f64),
}

impl Amount {
    /// The amount for a signal whose capacity is `capacity`.
    pub fn of(self, capacity: u64) -> u64 {
        match self {
            Amount::Quantity(q) => q,
            Amount::Percent(p) => (capacity as f64 * p / 100.0) as u64,
        }
    }
}

/// One soft threshold: its amount, and how long it must hold before pods are evicted.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SoftThreshold {
    /// Below this, the signal is under pressure.
    pub amount: Amount,
    /// How long it must stay below before a pod is evicted.
    pub grace: Duration,
}

/// The whole eviction policy, by signal.
#[derive(Debug, Clone, PartialEq)]
pub struct EvictionPolicy {
    /// `evictionHard`: pods are evicted as soon as a signal is below.
    pub hard: BTreeMap<String, Amount>,
    /// `evictionSoft` with `evictionSoftGracePeriod`.
    pub soft: BTreeMap<String, SoftThreshold>,
    /// `evictionMinimumReclaim`: once evicting for a signal, go on until it is this much above
    /// its threshold.
    pub minimum_reclaim: BTreeMap<String, Amount>,
    /// `evictionPressureTransitionPeriod`: a pressure condition stays this long after its
    /// signal recovered (5 min).
    pub pressure_transition: Duration,
    /// `evictionMaxPodGracePeriod`: the longest grace a pod evicted for a soft threshold gets,
    /// in seconds (0: none beyond kubelet's minimum).
    pub max_pod_grace_seconds: i64,
}

impl Default for EvictionPolicy {
    /// No thresholds, kubelet's 5 min transition period.
    fn default() -> EvictionPolicy {
        EvictionPolicy {
            hard: BTreeMap::new(),
            soft: BTreeMap::new(),
            minimum_reclaim: BTreeMap::new(),
            pressure_transition: Duration::from_secs(300),
            max_pod_grace_seconds: 0,
        }
    }
}

/// One problem of the policy: the key (under `tailoredKubeletConfig`) and what is wrong.
pub type PolicyProblem = (&'static str, String);

fn known(signal: &str) -> bool {
    EVICTION_SIGNALS.contains(&signal) || UNREAD_EVICTION_SIGNALS.contains(&signal)
}

/// A threshold value as kubelet reads it; `None` for `0%` and `100%`, which kubelet ignores.
pub fn parse_threshold(signal: &str, value: &str) -> Result<Option<Amount>, String> {
    if !known(signal) {
        return Err(format!("unsupported eviction signal {signal:?}"));
    }
    let value = value.trim();
    if let Some(percent) = value.strip_suffix('%') {
        if value == "0%" || value == "100%" {
            return Ok(None);
        }
        return parse_percent(signal, percent).map(|p| Some(Amount::Percent(p)));
    }
    super::quantity::bytes(value)
        .ok()
        .and_then(|b| u64::try_from(b).ok())
        .map(|b| Some(Amount::Quantity(b)))
        .ok_or_else(|| format!("eviction threshold {signal} must be positive: {value:?}"))
}

fn parse_percent(signal: &str, percent: &str) -> Result<f64, String> {
    match percent.trim().parse::<f64>() {
        Ok(p) if (0.0..=100.0).contains(&p) => Ok(p),
        Ok(_) => Err(format!(
            "eviction percentage {signal} must be >= 0% and <= 100%: {percent}%"
        )),
        Err(_) => Err(format!(
            "eviction threshold {signal} is not a percent: {percent}%"
        )),
    }
}

/// A minimum reclaim as kubelet reads it.
pub fn parse_minimum_reclaim(signal: &str, value: &str) -> Result<Amount, String> {
    if !known(signal) {
        return Err(format!("unsupported eviction signal {signal:?}"));
    }
    let value = value.trim();
    if let Some(percent) = value.strip_suffix('%') {
        return parse_percent(signal, percent).map(Amount::Percent);
    }
    if value == "0" {
        return Ok(Amount::Quantity(0));
    }
    super::quantity::bytes(value)
        .ok()
        .and_then(|b| u64::try_from(b).ok())
        .map(Amount::Quantity)
        .ok_or_else(|| format!("minimum reclaim for {signal} must not be negative: {value:?}"))
}

impl EvictionPolicy {
    /// The policy of `tailoredKubeletConfig` (kubelet's default hard thresholds when
    /// `evictionHard` is unset), or every problem found in its `eviction*` keys.
    pub fn from_tailored(k: &TailoredKubeletConfig) -> Result<EvictionPolicy, Vec<PolicyProblem>> {
        let none = BTreeMap::new();
        let hard = k
            .eviction_hard
            .clone()
            .unwrap_or_else(super::kubelet::default_eviction_hard);
        EvictionPolicy::parse(
            &hard,
            k.eviction_soft.as_ref().unwrap_or(&none),
            k.eviction_soft_grace_period.as_ref().unwrap_or(&none),
            k.eviction_minimum_reclaim.as_ref().unwrap_or(&none),
            k.eviction_pressure_transition_period
                .unwrap_or(GoDuration::from_secs(300)),
            k.eviction_max_pod_grace_period.unwrap_or(0),
        )
    }

    /// The policy from the keys' values, or every problem found (with the key it is under).
    pub fn parse(
        hard: &BTreeMap<String, String>,
        soft: &BTreeMap<String, String>,
        soft_grace: &BTreeMap<String, String>,
        minimum_reclaim: &BTreeMap<String, String>,
        pressure_transition: GoDuration,
        max_pod_grace_seconds: i32,
    ) -> Result<EvictionPolicy, Vec<PolicyProblem>> {
        let mut problems = Vec::new();
        let mut policy = EvictionPolicy {
            pressure_transition: pressure_transition.to_std(),
            max_pod_grace_seconds: i64::from(max_pod_grace_seconds.max(0)),
            ..EvictionPolicy::default()
        };
        for (signal, value) in hard {
            match parse_threshold(signal, value) {
                Ok(Some(amount)) => {
                    policy.hard.insert(signal.clone(), amount);
                }
                Ok(None) => {}
                Err(e) => problems.push(("evictionHard", e)),
            }
        }
        for (signal, value) in soft {
            let amount = match parse_threshold(signal, value) {
                Ok(Some(amount)) => amount,
                Ok(None) => continue,
                Err(e) => {
                    problems.push(("evictionSoft", e));
                    continue;
                }
            };
            let Some(grace) = soft_grace.get(signal) else {
                problems.push((
                    "evictionSoftGracePeriod",
                    format!(
                        "grace period must be specified for the soft eviction threshold {signal}"
                    ),
                ));
                continue;
            };
            match GoDuration::parse(grace) {
                Ok(g) if g.as_nanos() >= 0 => {
                    policy.soft.insert(
                        signal.clone(),
                        SoftThreshold {
                            amount,
                            grace: g.to_std(),
                        },
                    );
                }
                Ok(_) => problems.push((
                    "evictionSoftGracePeriod",
                    format!(
                        "invalid eviction grace period for {signal}: {grace}, must not be negative"
                    ),
                )),
                Err(e) => problems.push(("evictionSoftGracePeriod", format!("{signal}: {e}"))),
            }
        }
        for signal in soft_grace.keys().filter(|s| !known(s)) {
            problems.push((
                "evictionSoftGracePeriod",
                format!("unsupported eviction signal {signal:?}"),
            ));
        }
        for (signal, value) in minimum_reclaim {
            match parse_minimum_reclaim(signal, value) {
                Ok(amount) => {
                    policy.minimum_reclaim.insert(signal.clone(), amount);
                }
                Err(e) => problems.push(("evictionMinimumReclaim", e)),
            }
        }
        if pressure_transition.as_nanos() < 0 {
            problems.push((
                "evictionPressureTransitionPeriod",
                format!("must not be negative, got {pressure_transition}"),
            ));
        }
        if max_pod_grace_seconds < 0 {
            problems.push((
                "evictionMaxPodGracePeriod",
                format!("must not be negative, got {max_pod_grace_seconds}"),
            ));
        }
        if problems.is_empty() {
            Ok(policy)
        } else {
            Err(problems)
        }
    }

    /// Signals with a threshold that edged does not read (said at start).
    pub fn unread_signals(&self) -> Vec<&str> {
        self.hard
            .keys()
            .chain(self.soft.keys())
            .map(String::as_str)
            .filter(|s| UNREAD_EVICTION_SIGNALS.contains(s))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn thresholds_read_as_kubelet_reads_them() {
        assert_eq!(
            parse_threshold("memory.available", "100Mi"),
            Ok(Some(Amount::Quantity(100 << 20)))
        );
        assert_eq!(
            parse_threshold("nodefs.available", "10%"),
            Ok(Some(Amount::Percent(10.0)))
        );
        assert_eq!(parse_threshold("nodefs.available", "0%"), Ok(None));
        assert_eq!(parse_threshold("nodefs.available", "100%"), Ok(None));
        assert!(parse_threshold("nodefs.available", "120%").is_err());
        assert!(parse_threshold("memory.available", "0").is_err());
        assert!(parse_threshold("memory.available", "-1Mi").is_err());
        assert!(
            parse_threshold("disk.free", "1Gi")
                .unwrap_err()
                .contains("unsupported eviction signal")
        );
        assert_eq!(
            parse_minimum_reclaim("memory.available", "0"),
            Ok(Amount::Quantity(0))
        );
        assert_eq!(Amount::Percent(10.0).of(1000), 100);
    }

    #[test]
    fn a_soft_threshold_needs_its_grace_period() {
        let err = EvictionPolicy::parse(
            &BTreeMap::new(),
            &map(&[("memory.available", "1Gi")]),
            &BTreeMap::new(),
            &BTreeMap::new(),
            GoDuration::from_secs(300),
            0,
        )
        .unwrap_err();
        assert_eq!(err[0].0, "evictionSoftGracePeriod");
        assert!(
            err[0].1.contains("grace period must be specified"),
            "{err:?}"
        );

        let policy = EvictionPolicy::parse(
            &map(&[
                ("memory.available", "100Mi"),
                ("containerfs.available", "10%"),
            ]),
            &map(&[("memory.available", "1Gi")]),
            &map(&[("memory.available", "1m30s")]),
            &map(&[("memory.available", "50Mi")]),
            GoDuration::from_secs(30),
            60,
        )
        .unwrap();
        assert_eq!(
            policy.soft["memory.available"],
            SoftThreshold {
                amount: Amount::Quantity(1 << 30),
                grace: Duration::from_secs(90)
            }
        );
        assert_eq!(
            policy.minimum_reclaim["memory.available"],
            Amount::Quantity(50 << 20)
        );
        assert_eq!(policy.pressure_transition, Duration::from_secs(30));
        assert_eq!(policy.max_pod_grace_seconds, 60);
        assert_eq!(policy.unread_signals(), ["containerfs.available"]);
    }
}
