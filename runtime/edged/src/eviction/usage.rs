//! What a pod uses of what is being reclaimed.
//!
//! A pod's disk use is what it writes on the node's filesystem: its directory under the pods
//! root (emptyDir volumes, written ConfigMaps/Secrets), never crossing into a mount (sub-path
//! binds) and never following a symlink. Container writable layers and logs, which live in the
//! runtime's own directories, are not counted. Its memory use is its containers' working set,
//! as the runtime reports it (kubelet's figure: usage less inactive page cache).

use std::collections::BTreeMap;
use std::path::Path;

use crate::engine::{ContainerStats, ManagedContainer};

/// Bytes under `dir` on its own filesystem: files counted by their allocated blocks, no
/// symlink followed, no mount point entered.
pub fn disk_usage(dir: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let Ok(top) = std::fs::symlink_metadata(dir) else {
        return 0;
    };
    let device = top.dev();
    let mut total = 0u64;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(path) = stack.pop() {
        let Ok(meta) = std::fs::symlink_metadata(&path) else {
            continue;
        };
        if meta.dev() != device {
            continue;
        }
        total = total.saturating_add(meta.blocks().saturating_mul(512));
        if meta.is_dir()
            && let Ok(entries) = std::fs::read_dir(&path)
        {
            stack.extend(entries.flatten().map(|e| e.path()));
        }
    }
    total
}

/// Working set per pod uid, then per container name, of the app containers among `listed`
/// that `samples` cover (a sandbox's own few pages are left out, as kubelet's container
/// messages leave them out).
pub fn memory_by_pod(
    listed: &[ManagedContainer],
    samples: &[ContainerStats],
) -> BTreeMap<String, BTreeMap<String, u64>> {
    let mut pods: BTreeMap<String, BTreeMap<String, u64>> = BTreeMap::new();
    for sample in samples.iter().filter(|s| !s.sandbox) {
        let (Some(container), Some(memory)) = (
            listed.iter().find(|c| c.id == sample.id),
            sample.memory.as_ref(),
        ) else {
            continue;
        };
        *pods
            .entry(container.pod_uid.clone())
            .or_default()
            .entry(container.container.clone())
            .or_default() += memory.working_set_bytes;
    }
    pods
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn usage_counts_files_and_follows_no_symlink() {
        let dir = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("big"), vec![7u8; 1 << 20]).unwrap();
        std::fs::create_dir(dir.path().join("vol")).unwrap();
        std::fs::write(dir.path().join("vol/data"), vec![1u8; 256 << 10]).unwrap();
        std::os::unix::fs::symlink(outside.path(), dir.path().join("vol/out")).unwrap();
        let used = disk_usage(dir.path());
        assert!(used >= 256 << 10, "{used}");
        assert!(
            used < 1 << 20,
            "the symlinked megabyte is not counted: {used}"
        );
    }
}
