//! The node's listening DMI socket, created with its final mode whatever the process umask.
//!
//! `bind(2)` gives a socket file the mode `0777 & !umask`: under umask 000 every local user
//! could connect before a `chmod` after it. So the socket is bound inside a fresh 0700
//! directory next to its final path (no one else can reach into it), made 0600 — or 0660 and
//! chowned to the configured group — there, and only then renamed into place, which also
//! replaces a stale socket of an earlier run without a moment where the path is missing.

use std::os::unix::fs::{DirBuilderExt, FileTypeExt, MetadataExt, PermissionsExt};
use std::os::unix::net::UnixListener as StdUnixListener;
use std::path::Path;

use tokio::net::UnixListener;

use crate::error::DmiError;

/// Longest path a unix socket can be bound at (`sun_path` is 108 bytes with its NUL).
const MAX_SOCKET_PATH: usize = 107;

fn err(path: &Path, what: &'static str) -> impl FnOnce(std::io::Error) -> DmiError {
    let path = path.to_owned();
    move |source| DmiError::Socket { path, what, source }
}

/// The mode the socket gets: owner only, or owner and `group`.
pub(crate) fn mode(group: Option<u32>) -> u32 {
    if group.is_some() { 0o660 } else { 0o600 }
}

/// Binds the DMI socket at `path` with [`mode`]`(group)` (see the module docs).
pub(crate) fn bind(path: &Path, group: Option<u32>) -> Result<UnixListener, DmiError> {
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).map_err(err(dir, "create its directory"))?;
    // Only a socket (an earlier run's, or edgecore's) is replaced.
    match std::fs::symlink_metadata(path) {
        Ok(meta) if !meta.file_type().is_socket() => {
            return Err(DmiError::NotASocket(path.to_owned()));
        }
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(err(path, "inspect the old socket")(e)),
    }
    let staging = dir.join(format!(".dmi.{}.tmp", std::process::id()));
    let staged = staging.join("s");
    let listener = if staged.as_os_str().len() <= MAX_SOCKET_PATH {
        bind_staged(path, &staging, &staged, group)?
    } else {
        bind_in_place(path, group)?
    };
    let meta = std::fs::symlink_metadata(path).map_err(err(path, "inspect the new socket"))?;
    let want = mode(group);
    if meta.mode() & 0o777 != want {
        return Err(DmiError::Socket {
            path: path.to_owned(),
            what: "give it its mode",
            source: std::io::Error::other(format!("mode {:o}, not {want:o}", meta.mode() & 0o777)),
        });
    }
    listener
        .set_nonblocking(true)
        .map_err(err(path, "make it non-blocking"))?;
    UnixListener::from_std(listener).map_err(err(path, "register it with the runtime"))
}

/// Binds at `staged` inside the private directory `staging`, sets the mode there, and renames
/// the socket to `path`; the directory is removed whatever happens.
fn bind_staged(
    path: &Path,
    staging: &Path,
    staged: &Path,
    group: Option<u32>,
) -> Result<StdUnixListener, DmiError> {
    // Left by a run of this pid that crashed (pids are reused): it holds nothing of value.
    match std::fs::symlink_metadata(staging) {
        Ok(meta) if meta.is_dir() => std::fs::remove_dir_all(staging)
            .map_err(err(staging, "remove a stale staging directory"))?,
        Ok(_) => {
            std::fs::remove_file(staging).map_err(err(staging, "remove a stale staging file"))?
        }
        Err(_) => {}
    }
    // The umask can only take bits away from 0700: the directory is never wider.
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(staging)
        .map_err(err(staging, "create a private staging directory"))?;
    let result = (|| {
        let listener = StdUnixListener::bind(staged).map_err(err(staged, "bind"))?;
        set_mode(staged, group)?;
        std::fs::rename(staged, path).map_err(err(path, "move the socket into place"))?;
        Ok(listener)
    })();
    let _ = std::fs::remove_dir_all(staging);
    result
}

/// For a path too long to stage next to: binds in place and sets the mode at once. The peer
/// check still refuses anyone the umask let in for that instant.
fn bind_in_place(path: &Path, group: Option<u32>) -> Result<StdUnixListener, DmiError> {
    match std::fs::remove_file(path) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(err(path, "remove the old socket")(e)),
    }
    let listener = StdUnixListener::bind(path).map_err(err(path, "bind"))?;
    set_mode(path, group)?;
    Ok(listener)
}

/// Gives the socket at `path` its group (first, so group bits never apply to another group)
/// and its mode.
fn set_mode(path: &Path, group: Option<u32>) -> Result<(), DmiError> {
    if let Some(gid) = group {
        std::os::unix::fs::chown(path, None, Some(gid))
            .map_err(err(path, "chown it to its group"))?;
    }
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode(group)))
        .map_err(err(path, "chmod it"))
}

/// The staging directory [`bind`] uses for `path` (for tests).
#[cfg(test)]
fn staging_of(path: &Path) -> std::path::PathBuf {
    path.parent()
        .unwrap_or(Path::new("."))
        .join(format!(".dmi.{}.tmp", std::process::id()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_socket_is_0600_replaces_a_stale_one_and_leaves_no_staging() {
        let dir = tempfile::tempdir().expect("a temp dir");
        let path = dir.path().join("dmi.sock");
        let first = bind(&path, None).expect("binds");
        drop(first);
        // The first socket is stale now; binding again replaces it.
        let listener = bind(&path, None).expect("binds over a stale socket");
        let meta = std::fs::symlink_metadata(&path).expect("the socket exists");
        assert!(meta.file_type().is_socket());
        assert_eq!(meta.mode() & 0o777, 0o600);
        assert!(!staging_of(&path).exists(), "staging directory removed");
        // The renamed socket still answers at its final path.
        let (connected, accepted) =
            tokio::join!(tokio::net::UnixStream::connect(&path), listener.accept());
        connected.expect("connects");
        accepted.expect("accepts");
    }

    #[test]
    fn a_file_that_is_not_a_socket_is_not_replaced() {
        let dir = tempfile::tempdir().expect("a temp dir");
        let path = dir.path().join("dmi.sock");
        std::fs::write(&path, b"data").expect("a file");
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime");
        let _guard = runtime.enter();
        assert!(matches!(bind(&path, None), Err(DmiError::NotASocket(_))));
        assert_eq!(std::fs::read(&path).expect("still there"), b"data");
    }

    #[tokio::test]
    async fn a_group_makes_it_0660_of_that_group() {
        let dir = tempfile::tempdir().expect("a temp dir");
        let path = dir.path().join("dmi.sock");
        // Our own group: chown to it needs no privilege.
        let gid = std::fs::metadata(dir.path()).expect("the dir").gid();
        let _listener = bind(&path, Some(gid)).expect("binds");
        let meta = std::fs::symlink_metadata(&path).expect("the socket exists");
        assert_eq!(meta.mode() & 0o777, 0o660);
        assert_eq!(meta.gid(), gid);
    }
}
