//! The node's pressure conditions, as kubelet's eviction manager sets them: `MemoryPressure`,
//! `DiskPressure` and `PIDPressure` are true while a signal is below its hard eviction
//! threshold (`evictionHard`, kubelet's defaults `memory.available<100Mi`,
//! `nodefs.available<10%`, `nodefs.inodesFree<5%`, `imagefs.available<15%`,
//! `imagefs.inodesFree<5%`; `pid.available` only when configured).
//!
//! Signals are read as kubelet reads them, approximated where it uses cgroup statistics:
//! `memory.available` is `MemAvailable`, the node filesystem is the one holding the root
//! directory, the image filesystem the one holding the engine's root. A signal that cannot be
//! read never raises pressure. Wedge reports the conditions; it does not evict pods.

use std::collections::BTreeMap;
use std::path::Path;

/// One hard eviction threshold: an absolute quantity or a percent of the capacity.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Threshold {
    /// Below this many bytes (memory, disk) or this many (inodes, pids).
    Quantity(u64),
    /// Below this percent of the capacity.
    Percent(f64),
}

impl Threshold {
    /// Parses `100Mi`, `10%`, `5000`; `None` for what is neither.
    pub fn parse(text: &str) -> Option<Threshold> {
        let text = text.trim();
        if let Some(percent) = text.strip_suffix('%') {
            let p: f64 = percent.trim().parse().ok()?;
            return (0.0..=100.0).contains(&p).then_some(Threshold::Percent(p));
        }
        let bytes = crate::quantity::bytes(text).ok()?;
        u64::try_from(bytes).ok().map(Threshold::Quantity)
    }

    /// Whether `available` of `capacity` is below the threshold.
    fn crossed(self, available: u64, capacity: u64) -> bool {
        match self {
            Threshold::Quantity(q) => available < q,
            Threshold::Percent(p) => {
                capacity > 0 && (available as f64) < capacity as f64 * p / 100.0
            }
        }
    }
}

/// The hard eviction thresholds edged watches, by signal.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Thresholds {
    signals: BTreeMap<String, Threshold>,
}

impl Thresholds {
    /// From `evictionHard` (signal → quantity or percent); signals kubelet does not know, and
    /// values that do not parse, are left out (with a warning).
    pub fn from_eviction_hard(eviction_hard: &BTreeMap<String, String>) -> Thresholds {
        let mut signals = BTreeMap::new();
        for (signal, value) in eviction_hard {
            match (SIGNALS.contains(&signal.as_str()), Threshold::parse(value)) {
                (true, Some(t)) => {
                    signals.insert(signal.clone(), t);
                }
                _ => tracing::warn!(
                    signal,
                    value,
                    "evictionHard threshold not understood; its pressure is not reported"
                ),
            }
        }
        Thresholds { signals }
    }

    /// The threshold of `signal` in bytes (a percentage taken of `capacity`); `None` when no
    /// threshold is set for it.
    pub fn bytes(&self, signal: &str, capacity: u64) -> Option<u64> {
        match self.signals.get(signal)? {
            Threshold::Quantity(q) => Some(*q),
            Threshold::Percent(p) => Some((capacity as f64 * p / 100.0) as u64),
        }
    }

    fn crossed(&self, signal: &str, reading: Option<(u64, u64)>) -> bool {
        match (self.signals.get(signal), reading) {
            (Some(t), Some((available, capacity))) => t.crossed(available, capacity),
            _ => false,
        }
    }
}

/// The signals kubelet's eviction manager knows (the ones edged reads).
const SIGNALS: [&str; 6] = [
    "memory.available",
    "nodefs.available",
    "nodefs.inodesFree",
    "imagefs.available",
    "imagefs.inodesFree",
    "pid.available",
];

/// One reading of every signal: (available, capacity), `None` where it could not be read.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Signals {
    /// `MemAvailable`, `MemTotal` in bytes.
    pub memory: Option<(u64, u64)>,
    /// Bytes of the node filesystem.
    pub nodefs: Option<(u64, u64)>,
    /// Inodes of the node filesystem.
    pub nodefs_inodes: Option<(u64, u64)>,
    /// Bytes of the image filesystem.
    pub imagefs: Option<(u64, u64)>,
    /// Inodes of the image filesystem.
    pub imagefs_inodes: Option<(u64, u64)>,
    /// Process ids left, and `kernel.pid_max`.
    pub pids: Option<(u64, u64)>,
}

impl Signals {
    /// Reads the machine: memory, the filesystems of `root` (the node's) and `image_root`
    /// (the engine's; the node's when `None`), and process ids.
    pub fn read(root: &Path, image_root: Option<&Path>) -> Signals {
        let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
        let kib = |key: &str| -> Option<u64> {
            meminfo
                .lines()
                .find_map(|l| l.strip_prefix(key))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
                .map(|k| k.saturating_mul(1024))
        };
        let memory = kib("MemAvailable:").zip(kib("MemTotal:"));
        let fs = |dir: &Path| {
            let dir = dir.ancestors().find(|p| p.exists())?;
            crate::disk::statvfs_with_inodes(dir).ok()
        };
        let node = fs(root);
        let image = image_root.and_then(fs).or(node);
        let bytes = |f: Option<(crate::gc::FsUsage, crate::disk::Inodes)>| {
            f.map(|(u, _)| (u.available, u.capacity))
        };
        let inodes = |f: Option<(crate::gc::FsUsage, crate::disk::Inodes)>| {
            f.map(|(_, i)| (i.free, i.total))
                .filter(|(_, total)| *total > 0)
        };
        let pid_max = std::fs::read_to_string("/proc/sys/kernel/pid_max")
            .ok()
            .and_then(|s| s.trim().parse::<u64>().ok());
        // Running processes: /proc/loadavg's fourth field is "running/total".
        let total = std::fs::read_to_string("/proc/loadavg").ok().and_then(|s| {
            s.split_whitespace()
                .nth(3)?
                .split('/')
                .nth(1)?
                .parse::<u64>()
                .ok()
        });
        Signals {
            memory,
            nodefs: bytes(node),
            nodefs_inodes: inodes(node),
            imagefs: bytes(image),
            imagefs_inodes: inodes(image),
            pids: pid_max
                .zip(total)
                .map(|(max, used)| (max.saturating_sub(used), max)),
        }
    }
}

/// Which pressure conditions hold.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Pressure {
    /// `memory.available` is below its threshold.
    pub memory: bool,
    /// A node or image filesystem signal is below its threshold.
    pub disk: bool,
    /// `pid.available` is below its threshold.
    pub pid: bool,
}

impl Pressure {
    /// Kubelet's reading of `signals` against `thresholds`.
    pub fn of(thresholds: &Thresholds, signals: &Signals) -> Pressure {
        Pressure {
            memory: thresholds.crossed("memory.available", signals.memory),
            disk: thresholds.crossed("nodefs.available", signals.nodefs)
                || thresholds.crossed("nodefs.inodesFree", signals.nodefs_inodes)
                || thresholds.crossed("imagefs.available", signals.imagefs)
                || thresholds.crossed("imagefs.inodesFree", signals.imagefs_inodes),
            pid: thresholds.crossed("pid.available", signals.pids),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Kubelet's default thresholds, as the config resolves an unset `evictionHard`.
    fn defaults() -> Thresholds {
        let kubelet = wedge_core::config::EdgeCoreConfig::default().kubelet();
        Thresholds::from_eviction_hard(&kubelet.eviction_hard)
    }

    #[test]
    fn thresholds_parse_quantities_and_percents() {
        assert_eq!(
            Threshold::parse("100Mi"),
            Some(Threshold::Quantity(100 << 20))
        );
        assert_eq!(Threshold::parse("10%"), Some(Threshold::Percent(10.0)));
        assert_eq!(Threshold::parse("5000"), Some(Threshold::Quantity(5000)));
        assert_eq!(Threshold::parse("lots"), None);
        assert_eq!(Threshold::parse("120%"), None);
    }

    #[test]
    fn pressure_follows_kubelets_default_thresholds() {
        let t = defaults();
        let gib = 1u64 << 30;
        let calm = Signals {
            memory: Some((2 * gib, 8 * gib)),
            nodefs: Some((50 * gib, 100 * gib)),
            nodefs_inodes: Some((900, 1000)),
            imagefs: Some((50 * gib, 100 * gib)),
            imagefs_inodes: Some((900, 1000)),
            pids: Some((10, 32768)),
        };
        // No pid.available threshold by default: few pids left raise nothing.
        assert_eq!(Pressure::of(&t, &calm), Pressure::default());
        // 11 % free: above nodefs' 10 %, below imagefs' 15 % (the same disk here).
        let tight = Signals {
            nodefs: Some((11 * gib, 100 * gib)),
            imagefs: Some((11 * gib, 100 * gib)),
            ..calm
        };
        assert!(Pressure::of(&t, &tight).disk);
        let low_memory = Signals {
            memory: Some((50 << 20, 8 * gib)),
            ..calm
        };
        assert!(Pressure::of(&t, &low_memory).memory);
        let inodes = Signals {
            nodefs_inodes: Some((40, 1000)),
            ..calm
        };
        assert!(Pressure::of(&t, &inodes).disk);
        // Unreadable signals raise nothing.
        assert_eq!(Pressure::of(&t, &Signals::default()), Pressure::default());
    }

    #[test]
    fn the_machine_can_be_read() {
        let s = Signals::read(Path::new("/"), None);
        assert!(s.memory.is_some_and(|(a, c)| a <= c && c > 0));
        assert!(s.nodefs.is_some_and(|(a, c)| a <= c && c > 0));
        assert_eq!(s.imagefs, s.nodefs);
    }
}
