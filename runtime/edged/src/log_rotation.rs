//! Container log rotation on CRI runtimes, by kubelet's rules (`containerLogMaxSize`,
//! `containerLogMaxFiles`, `containerLogMonitorInterval`).
//!
//! A CRI runtime writes each container's output to the file the node named and never trims
//! it; bounding it is the node's job. Every interval, each running container's log that has
//! reached `containerLogMaxSize` is renamed to `<log>.<YYYYmmdd-HHMMSS>` and the runtime is
//! asked to `ReopenContainerLog`, so it starts a new file at the same path. Rotated files
//! beyond `containerLogMaxFiles - 1` (the current file counts as one) are removed, oldest
//! first. When the runtime cannot reopen, the rename is undone: the output keeps its file.
//!
//! Decided: rotated files are not compressed (kubelet gzips all but the newest); they are few
//! and bounded, and `kubectl logs` reads only the current file either way. Docker containers
//! are left to the Docker daemon's own `log-opts`, as kubelet left them with dockershim.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::engine::Engine;

/// When a container log is rotated and how many files are kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogRotationPolicy {
    /// A log of at least this many bytes is rotated.
    pub max_size: u64,
    /// Files kept per container log, the current one included (at least 2).
    pub max_files: usize,
    /// How often logs are checked.
    pub interval: Duration,
}

impl Default for LogRotationPolicy {
    /// kubelet's defaults: 10 MiB, 5 files, every 10 s.
    fn default() -> Self {
        LogRotationPolicy {
            max_size: 10 << 20,
            max_files: 5,
            interval: Duration::from_secs(10),
        }
    }
}

impl LogRotationPolicy {
    /// The policy of kubelet's keys, checked as kubelet checks them (a size quantity > 0,
    /// at least 2 files, a positive interval). The error names the key.
    pub fn from_kubelet(
        max_size: &str,
        max_files: i32,
        interval: Duration,
    ) -> Result<LogRotationPolicy, String> {
        let size = crate::quantity::bytes(max_size)
            .map_err(|e| format!("containerLogMaxSize {max_size:?}: {e}"))?;
        let max_size = u64::try_from(size)
            .ok()
            .filter(|s| *s > 0)
            .ok_or_else(|| format!("containerLogMaxSize {max_size:?}: must be above 0"))?;
        let max_files = usize::try_from(max_files)
            .ok()
            .filter(|n| *n >= 2)
            .ok_or_else(|| format!("containerLogMaxFiles {max_files}: must be at least 2"))?;
        if interval.is_zero() {
            return Err("containerLogMonitorInterval: must be above 0".to_owned());
        }
        Ok(LogRotationPolicy {
            max_size,
            max_files,
            interval,
        })
    }
}

/// Rotates `node`'s CRI container logs every `policy.interval` until `stop`, counting the
/// rotations in `rotated`. A runtime that cannot be reached is tried again next interval.
pub async fn run(
    engine: Engine,
    node: String,
    policy: LogRotationPolicy,
    rotated: Arc<AtomicU64>,
    stop: CancellationToken,
) {
    let mut every = tokio::time::interval(policy.interval);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    every.tick().await;
    loop {
        tokio::select! {
            _ = every.tick() => {}
            _ = stop.cancelled() => return,
        }
        match engine.rotate_logs(&node, &policy).await {
            Ok(n) => {
                rotated.fetch_add(n as u64, Ordering::Relaxed);
            }
            Err(e) => tracing::debug!("container logs not checked for rotation: {e}"),
        }
    }
}

/// `<log>.<YYYYmmdd-HHMMSS>` for the UTC time `now_ms` (kubelet's name for a rotated log).
pub fn rotated_name(log: &Path, now_ms: i64) -> PathBuf {
    let stamp: String = wedge_core::time::rfc3339_utc(now_ms)
        .chars()
        .take(19)
        .filter(|c| *c != '-' && *c != ':')
        .map(|c| if c == 'T' { '-' } else { c })
        .collect();
    let mut name = log.as_os_str().to_owned();
    name.push(".");
    name.push(stamp);
    PathBuf::from(name)
}

/// Rotated files of `log` (`<log>.<stamp>`), oldest first (the stamps sort by time).
pub fn rotated_files(log: &Path) -> io::Result<Vec<PathBuf>> {
    let (Some(dir), Some(file)) = (log.parent(), log.file_name()) else {
        return Ok(Vec::new());
    };
    let mut prefix = file.to_owned();
    prefix.push(".");
    let prefix = prefix.to_string_lossy().into_owned();
    let mut found: Vec<PathBuf> = std::fs::read_dir(dir)?
        .flatten()
        .filter(|e| {
            let name = e.file_name();
            let name = name.to_string_lossy();
            name.strip_prefix(&prefix)
                .is_some_and(|stamp| stamp.len() == 15 && stamp.as_bytes()[8] == b'-')
        })
        .map(|e| e.path())
        .collect();
    found.sort();
    Ok(found)
}

/// Renames `log` away when it has reached the policy's size, first removing the oldest
/// rotated files so that, with the new one, `max_files - 1` remain. Returns the new name
/// (the caller then has the runtime reopen the log, and calls [`undo`] if it cannot), or
/// `None` when nothing was due (too small, missing, or rotated already this second).
pub fn rotate(log: &Path, policy: &LogRotationPolicy, now_ms: i64) -> io::Result<Option<PathBuf>> {
    let size = match std::fs::metadata(log) {
        Ok(meta) => meta.len(),
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    if size < policy.max_size {
        return Ok(None);
    }
    let target = rotated_name(log, now_ms);
    if target.exists() {
        return Ok(None);
    }
    let rotated = rotated_files(log)?;
    let keep = policy.max_files.saturating_sub(2);
    let excess = rotated.len().saturating_sub(keep);
    for old in &rotated[..excess] {
        match std::fs::remove_file(old) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
    }
    std::fs::rename(log, &target)?;
    Ok(Some(target))
}

/// Puts a rotated log back at its path (the runtime could not reopen it, so it still writes
/// to the renamed file).
pub fn undo(log: &Path, rotated: &Path) -> io::Result<()> {
    std::fs::rename(rotated, log)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(max_size: u64, max_files: usize) -> LogRotationPolicy {
        LogRotationPolicy {
            max_size,
            max_files,
            interval: Duration::from_secs(10),
        }
    }

    #[test]
    fn kubelets_keys_are_checked_and_name_themselves() {
        let p = LogRotationPolicy::from_kubelet("10Mi", 5, Duration::from_secs(10)).unwrap();
        assert_eq!(p, LogRotationPolicy::default());
        let e = LogRotationPolicy::from_kubelet("ten", 5, Duration::from_secs(10)).unwrap_err();
        assert!(e.contains("containerLogMaxSize"), "{e}");
        let e = LogRotationPolicy::from_kubelet("0", 5, Duration::from_secs(10)).unwrap_err();
        assert!(e.contains("containerLogMaxSize"), "{e}");
        let e = LogRotationPolicy::from_kubelet("1Ki", 1, Duration::from_secs(10)).unwrap_err();
        assert!(e.contains("containerLogMaxFiles"), "{e}");
        let e = LogRotationPolicy::from_kubelet("1Ki", 2, Duration::ZERO).unwrap_err();
        assert!(e.contains("containerLogMonitorInterval"), "{e}");
    }

    #[test]
    fn rotated_names_carry_kubelets_stamp() {
        // 2024-05-01T10:20:30.123Z
        let name = rotated_name(Path::new("/logs/main/0.log"), 1_714_558_830_123);
        assert_eq!(name, Path::new("/logs/main/0.log.20240501-102030"));
    }

    #[test]
    fn a_log_past_its_size_is_renamed_and_old_files_beyond_the_count_go() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("0.log");
        let p = policy(100, 3);
        std::fs::write(&log, vec![b'x'; 99]).unwrap();
        assert_eq!(rotate(&log, &p, 0).unwrap(), None, "below the size");

        let mut now = 1_714_558_830_000;
        let mut made = Vec::new();
        for round in 0..4 {
            std::fs::write(&log, vec![b'a' + round; 100]).unwrap();
            let rotated = rotate(&log, &p, now).unwrap().expect("rotated");
            assert!(!log.exists());
            made.push(rotated);
            now += 1_000;
        }
        // 3 files per log: the current one (written next by the runtime) and 2 rotated.
        let left = rotated_files(&log).unwrap();
        assert_eq!(left, made[2..].to_vec());
        assert_eq!(std::fs::read(&left[1]).unwrap(), vec![b'd'; 100]);
        // Other files of the directory are not rotated files of this log.
        std::fs::write(dir.path().join("0.log.tmp"), b"").unwrap();
        std::fs::write(dir.path().join("1.log.20240501-102030"), b"").unwrap();
        assert_eq!(rotated_files(&log).unwrap(), made[2..].to_vec());
    }

    #[test]
    fn a_second_rotation_in_the_same_second_waits_and_undo_puts_the_log_back() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("0.log");
        let p = policy(10, 5);
        std::fs::write(&log, b"0123456789").unwrap();
        let rotated = rotate(&log, &p, 5_000).unwrap().unwrap();
        std::fs::write(&log, b"0123456789").unwrap();
        assert_eq!(rotate(&log, &p, 5_500).unwrap(), None);
        std::fs::remove_file(&log).unwrap();
        undo(&log, &rotated).unwrap();
        assert_eq!(std::fs::read(&log).unwrap(), b"0123456789");
        assert_eq!(rotate(&dir.path().join("gone.log"), &p, 0).unwrap(), None);
    }
}
