//! Directories and files the node writes where other local users might reach them (module
//! caches, data directories).
//!
//! Two rules keep another user from steering the node's writes:
//! - a directory the node keeps files in is created `0700`, and one that already exists is
//!   used only if it is a real directory (not a symlink), owned by this user or root, and not
//!   writable by group or others, since anyone who can write into it can plant a symlink where
//!   the node will write;
//! - a file is written whole under a fresh name opened with `O_CREAT | O_EXCL | O_NOFOLLOW`
//!   (never through a planted link), synced, and renamed over its final name.

use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// Why a directory or file could not be used safely.
#[derive(Debug, thiserror::Error)]
pub enum PrivateFsError {
    /// The directory is not one only this user controls.
    #[error(
        "refusing to use {path}: {why} (other users could plant links there); make it a \
         directory owned by uid {uid} with mode 0700"
    )]
    Unsafe {
        /// The directory.
        path: PathBuf,
        /// What is wrong with it.
        why: String,
        /// This process's effective uid.
        uid: u32,
    },
    /// A filesystem call failed.
    #[error("{what} {path}: {source}")]
    Io {
        /// What was being done.
        what: &'static str,
        /// The path.
        path: PathBuf,
        /// The system's answer.
        source: std::io::Error,
    },
}

fn io(what: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> PrivateFsError {
    let path = path.to_owned();
    move |source| PrivateFsError::Io { what, path, source }
}

/// This process's effective user id (0: root).
pub fn effective_uid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

/// Creates `dir` (and missing parents) `0700`, or checks an existing one: a directory, not a
/// symlink, owned by this user or root, not writable by group or others.
pub fn ensure_private_dir(dir: &Path) -> Result<(), PrivateFsError> {
    match std::fs::symlink_metadata(dir) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => create_dirs_private(dir)?,
        Err(e) => return Err(io("cannot inspect", dir)(e)),
        Ok(_) => {}
    }
    check_private_dir(dir)
}

/// Creates the missing directories of `dir` `0700`, whatever the umask; existing ones are
/// left as they are (for paths the operator chose outside the node's own directories).
pub fn create_dirs_private(dir: &Path) -> Result<(), PrivateFsError> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(io("cannot create", dir))
}

/// Checks that `dir` is a directory only this user (or root) can write into.
pub fn check_private_dir(dir: &Path) -> Result<(), PrivateFsError> {
    let uid = effective_uid();
    let unsafe_dir = |why: String| PrivateFsError::Unsafe {
        path: dir.to_owned(),
        why,
        uid,
    };
    let meta = std::fs::symlink_metadata(dir).map_err(io("cannot inspect", dir))?;
    if meta.file_type().is_symlink() {
        return Err(unsafe_dir("it is a symbolic link".into()));
    }
    if !meta.is_dir() {
        return Err(unsafe_dir("it is not a directory".into()));
    }
    if meta.uid() != uid && meta.uid() != 0 {
        return Err(unsafe_dir(format!("it is owned by uid {}", meta.uid())));
    }
    let mode = meta.mode() & 0o7777;
    if mode & 0o022 != 0 {
        return Err(unsafe_dir(format!(
            "its mode {mode:04o} lets group or others write into it"
        )));
    }
    Ok(())
}

/// Writes `bytes` to `path` so that the file is either absent or whole, even across a crash,
/// and never through a link someone planted: a fresh `0600` file in the same directory
/// (`O_EXCL | O_NOFOLLOW`), synced, renamed over `path`, then the directory synced.
pub fn write_atomically(path: &Path, bytes: &[u8]) -> Result<(), PrivateFsError> {
    static SEQ: AtomicU64 = AtomicU64::new(0);
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("file");
    // Not guessable ahead of time either: the clock's nanoseconds join the pid and counter.
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    let tmp = dir.join(format!(
        ".{name}.{}.{}.{nanos:08x}.tmp",
        std::process::id(),
        SEQ.fetch_add(1, Ordering::Relaxed)
    ));
    let written = (|| {
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&tmp)
            .map_err(io("cannot create", &tmp))?;
        file.write_all(bytes).map_err(io("cannot write", &tmp))?;
        file.sync_all().map_err(io("cannot sync", &tmp))?;
        std::fs::rename(&tmp, path).map_err(io("cannot rename into place", path))
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written?;
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io("cannot sync", dir))
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    #[test]
    fn a_new_directory_is_0700_and_a_shared_one_is_refused_by_name() {
        let root = tempfile::tempdir().expect("tempdir");
        let dir = root.path().join("a/b");
        ensure_private_dir(&dir).expect("created");
        let mode = std::fs::metadata(&dir).expect("meta").permissions().mode() & 0o777;
        assert_eq!(mode, 0o700);
        let shared = root.path().join("shared");
        std::fs::create_dir(&shared).expect("mkdir");
        std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o777)).expect("chmod");
        let err = ensure_private_dir(&shared).expect_err("world-writable");
        assert!(err.to_string().contains("shared"), "{err}");
        assert!(err.to_string().contains("0777"), "{err}");
    }

    #[test]
    fn a_symlinked_directory_is_refused() {
        let root = tempfile::tempdir().expect("tempdir");
        let real = root.path().join("real");
        std::fs::create_dir(&real).expect("mkdir");
        let link = root.path().join("link");
        std::os::unix::fs::symlink(&real, &link).expect("symlink");
        let err = ensure_private_dir(&link).expect_err("a link");
        assert!(err.to_string().contains("symbolic link"), "{err}");
    }

    #[test]
    fn a_write_replaces_the_file_and_never_follows_a_planted_link() {
        let root = tempfile::tempdir().expect("tempdir");
        let victim = root.path().join("victim");
        std::fs::write(&victim, b"precious").expect("victim");
        let target = root.path().join("module.wasm");
        // A link planted at the final name is replaced, not written through.
        std::os::unix::fs::symlink(&victim, &target).expect("symlink");
        write_atomically(&target, b"module bytes").expect("written");
        assert_eq!(std::fs::read(&victim).expect("victim"), b"precious");
        assert_eq!(std::fs::read(&target).expect("target"), b"module bytes");
        assert!(
            !std::fs::symlink_metadata(&target)
                .expect("meta")
                .file_type()
                .is_symlink()
        );
        let mode = std::fs::metadata(&target)
            .expect("meta")
            .permissions()
            .mode()
            & 0o777;
        assert_eq!(mode, 0o600);
    }
}
