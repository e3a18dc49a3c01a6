//! The node's eviction signals and pressure conditions. The eviction manager
//! ([`crate::eviction`]) reads the signals once per pass and decides the conditions from its
//! thresholds; the node status and admission take them from it.
//!
//! Signals are read as kubelet reads them, approximated where it uses cgroup statistics:
//! `memory.available` is `MemAvailable`, the node filesystem is the one holding the root
//! directory, the image filesystem the one holding the engine's root. A signal that cannot be
//! read never raises pressure.

use std::path::Path;

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
    /// The reading of a signal by kubelet's name: (available, capacity).
    pub fn get(&self, signal: &str) -> Option<(u64, u64)> {
        match signal {
            "memory.available" => self.memory,
            "nodefs.available" => self.nodefs,
            "nodefs.inodesFree" => self.nodefs_inodes,
            "imagefs.available" => self.imagefs,
            "imagefs.inodesFree" => self.imagefs_inodes,
            "pid.available" => self.pids,
            _ => None,
        }
    }

    /// Whether the image filesystem is the node's (one disk: pods' use of it frees it).
    pub fn shared_disk(&self) -> bool {
        self.imagefs == self.nodefs
    }

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
    /// `MemoryPressure`: a `memory.available` threshold crossed within the transition period.
    pub memory: bool,
    /// `DiskPressure`: a node or image filesystem threshold crossed within it.
    pub disk: bool,
    /// `PIDPressure`: a `pid.available` threshold crossed within it.
    pub pid: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_machine_can_be_read() {
        let s = Signals::read(Path::new("/"), None);
        assert!(s.memory.is_some_and(|(a, c)| a <= c && c > 0));
        assert!(s.nodefs.is_some_and(|(a, c)| a <= c && c > 0));
        assert_eq!(s.imagefs, s.nodefs);
    }
}
