//! The usage of the image filesystem, the input of image garbage collection: measured with
//! `statvfs` on the engine's root directory, or a figure the caller sets (tests, and any node
//! that wants to drive collection from elsewhere — the issue allows simulated usage).

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError};

use crate::engine::{Engine, EngineError};
use crate::gc::FsUsage;

/// Why the usage could not be read.
#[derive(Debug, thiserror::Error)]
pub enum DiskError {
    /// The engine would not say where its root directory is.
    #[error("finding the image filesystem: {0}")]
    Engine(#[from] EngineError),
    /// `statvfs` failed on the root directory.
    #[error("statvfs {path}: {source}")]
    Statvfs {
        /// The directory.
        path: String,
        /// The OS error.
        source: std::io::Error,
    },
}

/// Where image GC reads the filesystem usage.
#[derive(Debug, Clone, Default)]
pub enum DiskSource {
    /// `statvfs` of the engine's root directory (`docker info` → `DockerRootDir`), read on
    /// every pass so a moved root or a remounted disk is followed.
    #[default]
    Engine,
    /// A figure set through the handle.
    Simulated(SimulatedDisk),
}

/// A settable usage figure, shared between its setter and image GC.
#[derive(Debug, Clone)]
pub struct SimulatedDisk(Arc<Mutex<FsUsage>>);

impl SimulatedDisk {
    /// A disk reporting `usage` until [`set`](Self::set) changes it.
    pub fn new(usage: FsUsage) -> SimulatedDisk {
        SimulatedDisk(Arc::new(Mutex::new(usage)))
    }

    /// Changes what the next pass sees.
    pub fn set(&self, usage: FsUsage) {
        *self.0.lock().unwrap_or_else(PoisonError::into_inner) = usage;
    }

    /// The current figure.
    pub fn get(&self) -> FsUsage {
        *self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl DiskSource {
    /// The usage now.
    pub async fn usage(&self, engine: &Engine) -> Result<FsUsage, DiskError> {
        match self {
            DiskSource::Simulated(disk) => Ok(disk.get()),
            DiskSource::Engine => {
                let root = engine.root_dir().await?;
                statvfs(&root)
            }
        }
    }
}

/// Size and space available to unprivileged writers (`f_bavail`, as cAdvisor reports for
/// kubelet's image filesystem) of the filesystem holding `path`.
pub fn statvfs(path: &Path) -> Result<FsUsage, DiskError> {
    statvfs_with_inodes(path).map(|(usage, _)| usage)
}

/// Inode figures of a filesystem: total and free to an unprivileged writer (`f_files`,
/// `f_favail`), the input of kubelet's `inodesFree` eviction signals.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Inodes {
    /// Inodes the filesystem has (0 where it has no fixed number, as on btrfs).
    pub total: u64,
    /// Inodes still free.
    pub free: u64,
}

/// [`statvfs`] with the filesystem's inode figures.
pub fn statvfs_with_inodes(path: &Path) -> Result<(FsUsage, Inodes), DiskError> {
    let figures = StatvfsFigures::of(path).map_err(|source| DiskError::Statvfs {
        path: path.display().to_string(),
        source,
    })?;
    Ok((
        FsUsage {
            capacity: figures.blocks.saturating_mul(figures.frsize),
            available: figures.bavail.saturating_mul(figures.frsize),
        },
        Inodes {
            total: figures.files,
            free: figures.favail,
        },
    ))
}

/// The figures `statvfs(3)` gives of a filesystem, widened to 64 bits: the one place the
/// call is made (image GC, pressure signals and the node's stats read through it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct StatvfsFigures {
    /// Fragment size: the unit of the block counts.
    pub frsize: u64,
    /// Blocks in all.
    pub blocks: u64,
    /// Free blocks, reserved ones included.
    pub bfree: u64,
    /// Blocks free to an unprivileged writer.
    pub bavail: u64,
    /// Inodes in all.
    pub files: u64,
    /// Free inodes.
    pub ffree: u64,
    /// Inodes free to an unprivileged writer.
    pub favail: u64,
}

impl StatvfsFigures {
    /// `statvfs` of the filesystem holding `path`.
    pub fn of(path: &Path) -> std::io::Result<StatvfsFigures> {
        let c_path = CString::new(path.as_os_str().as_bytes())
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
        let mut stat = std::mem::MaybeUninit::<libc::statvfs>::zeroed();
        // SAFETY: `c_path` is a valid NUL-terminated string and `stat` points to writable
        // memory of the right type; the result is read only when the call succeeds.
        let rc = unsafe { libc::statvfs(c_path.as_ptr(), stat.as_mut_ptr()) };
        if rc != 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: statvfs returned 0, so it filled `stat`.
        let stat = unsafe { stat.assume_init() };
        #[allow(
            clippy::useless_conversion,
            reason = "the fields are 32-bit on 32-bit targets (armhf edge boards)"
        )]
        Ok(StatvfsFigures {
            frsize: u64::from(stat.f_frsize),
            blocks: u64::from(stat.f_blocks),
            bfree: u64::from(stat.f_bfree),
            bavail: u64::from(stat.f_bavail),
            files: u64::from(stat.f_files),
            ffree: u64::from(stat.f_ffree),
            favail: u64::from(stat.f_favail),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statvfs_of_a_real_directory_has_a_size() {
        let usage = statvfs(Path::new("/")).unwrap();
        assert!(usage.capacity > 0);
        assert!(usage.available <= usage.capacity);
        assert!(statvfs(Path::new("/no/such/dir")).is_err());
    }

    #[test]
    fn a_simulated_disk_reports_what_was_set() {
        let disk = SimulatedDisk::new(FsUsage {
            capacity: 100,
            available: 50,
        });
        let source = DiskSource::Simulated(disk.clone());
        disk.set(FsUsage {
            capacity: 100,
            available: 5,
        });
        let DiskSource::Simulated(seen) = source else {
            unreachable!()
        };
        assert_eq!(seen.get().used_percent(), Some(95));
    }
}
