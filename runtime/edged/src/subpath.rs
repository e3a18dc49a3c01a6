//! `subPath` and `subPathExpr` volume mounts, done as kubelet does them safely
//! (CVE-2017-1002101, CVE-2021-25741): the sub-path is resolved inside the volume, a symlink
//! that leads out of it is refused, and what the container gets is a bind mount made from an
//! open file descriptor of the resolved path, so a symlink swapped in after the check (by a
//! container that writes the volume) cannot redirect it.
//!
//! Each mount is bound at kubelet's place, `<pods_root>/<uid>/volume-subpaths/<volume>/
//! <container>/<index>` ([`target`]), which is what the runtime bind-mounts into the container.
//! [`unmount_all`] takes them down before a pod's directory is removed: removing a directory
//! tree across a live bind mount would delete the volume's files.

use std::ffi::CString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

use crate::pod::{Container, Pod};

/// Why a sub-path mount could not be made.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SubPathError {
    /// The sub-path is absolute, climbs with `..`, or expands to nothing.
    #[error("subPath {0:?} must be a relative path inside the volume, without '..'")]
    Invalid(String),
    /// The sub-path resolves (through a symlink) outside its volume.
    #[error("subPath {sub:?} leads out of volume {volume:?} (to {to})")]
    Escapes {
        /// The sub-path as given.
        sub: String,
        /// The volume's name.
        volume: String,
        /// Where it led.
        to: String,
    },
    /// A file operation failed.
    #[error("subPath {sub:?} of volume {volume:?}: {what}: {error}")]
    Io {
        /// The sub-path as given.
        sub: String,
        /// The volume's name.
        volume: String,
        /// The operation.
        what: &'static str,
        /// The system's error.
        error: String,
    },
}

/// Where the `index`-th mount of `container` in pod `uid` is bound for the runtime.
pub fn target(pods_root: &Path, uid: &str, volume: &str, container: &str, index: usize) -> PathBuf {
    pods_root
        .join(uid)
        .join("volume-subpaths")
        .join(volume)
        .join(container)
        .join(index.to_string())
}

/// `subPathExpr` with `$(VAR)` taken from the container's environment (kubelet's expansion: an
/// unknown variable expands to nothing, `$$(X)` is a literal `$(X)`).
pub fn expand(expr: &str, env: &[(String, String)]) -> String {
    let mut out = String::new();
    let mut rest = expr;
    while let Some(at) = rest.find("$(") {
        if rest[..at].ends_with('$') {
            out.push_str(&rest[..at]);
            out.push('(');
            rest = &rest[at + 2..];
            continue;
        }
        out.push_str(&rest[..at]);
        let after = &rest[at + 2..];
        match after.find(')') {
            Some(end) => {
                let name = &after[..end];
                if let Some((_, value)) = env.iter().rev().find(|(k, _)| k == name) {
                    out.push_str(value);
                }
                rest = &after[end + 1..];
            }
            None => {
                out.push_str(&rest[at..]);
                rest = "";
            }
        }
    }
    out.push_str(rest);
    out
}

/// The sub-path of a mount: `subPath`, or `subPathExpr` expanded with `env`; `None` for a
/// mount of the whole volume.
pub fn sub_path_of(m: &crate::pod::VolumeMount, env: &[(String, String)]) -> Option<String> {
    if let Some(p) = m.sub_path.as_deref().filter(|p| !p.is_empty()) {
        return Some(p.to_owned());
    }
    m.sub_path_expr
        .as_deref()
        .filter(|p| !p.is_empty())
        .map(|e| expand(e, env))
}

/// The relative components of `sub`, refused when absolute or climbing.
fn components(sub: &str) -> Result<Vec<&std::ffi::OsStr>, SubPathError> {
    let mut parts = Vec::new();
    for c in Path::new(sub).components() {
        match c {
            Component::Normal(p) => parts.push(p),
            Component::CurDir => {}
            _ => return Err(SubPathError::Invalid(sub.to_owned())),
        }
    }
    if parts.is_empty() {
        return Err(SubPathError::Invalid(sub.to_owned()));
    }
    Ok(parts)
}

fn cstring(p: &std::ffi::OsStr) -> CString {
    // Components come from `Path::components` of a `&str`: no interior NUL.
    CString::new(p.as_bytes()).unwrap_or_default()
}

fn open_at(dir: &OwnedFd, name: &std::ffi::OsStr, flags: i32) -> std::io::Result<OwnedFd> {
    let name = cstring(name);
    // SAFETY: `dir` is an open descriptor and `name` a NUL-terminated string; the result is
    // checked before it is owned.
    let fd = unsafe { libc::openat(dir.as_raw_fd(), name.as_ptr(), flags | libc::O_CLOEXEC) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: `fd` was just opened and is owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn open_path(path: &Path, flags: i32) -> std::io::Result<OwnedFd> {
    let path = cstring(path.as_os_str());
    // SAFETY: as in `open_at`.
    let fd = unsafe { libc::open(path.as_ptr(), flags | libc::O_CLOEXEC) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: as in `open_at`.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Opens `sub` inside the volume at `root` without following any symlink from `root` down:
/// the path is first resolved (symlinks inside the volume are allowed, as kubelet allows
/// them) and checked to stay inside, then opened component by component with `O_NOFOLLOW`, so
/// a component swapped for a symlink after the check fails the open instead of leading out.
/// A missing sub-path is made as a directory first, as kubelet makes it.
pub fn open_inside(root: &Path, volume: &str, sub: &str) -> Result<OwnedFd, SubPathError> {
    let io = |what: &'static str| {
        move |e: std::io::Error| SubPathError::Io {
            sub: sub.to_owned(),
            volume: volume.to_owned(),
            what,
            error: e.to_string(),
        }
    };
    let parts = components(sub)?;
    let base = root.canonicalize().map_err(io("resolving the volume"))?;
    let wanted = base.join(parts.iter().collect::<PathBuf>());
    let resolved = match wanted.canonicalize() {
        Ok(p) => p,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            make_dirs_inside(&base, &parts).map_err(io("creating the sub-path"))?;
            wanted
                .canonicalize()
                .map_err(io("resolving the sub-path"))?
        }
        Err(e) => return Err(io("resolving the sub-path")(e)),
    };
    let Ok(inside) = resolved.strip_prefix(&base) else {
        return Err(SubPathError::Escapes {
            sub: sub.to_owned(),
            volume: volume.to_owned(),
            to: resolved.display().to_string(),
        });
    };
    let mut fd = open_path(&base, libc::O_PATH | libc::O_DIRECTORY | libc::O_NOFOLLOW)
        .map_err(io("opening the volume"))?;
    for part in inside.components() {
        let Component::Normal(name) = part else {
            continue;
        };
        fd = open_at(&fd, name, libc::O_PATH | libc::O_NOFOLLOW)
            .map_err(io("opening a component (changed since it was resolved)"))?;
        if is_symlink(&fd) {
            return Err(SubPathError::Escapes {
                sub: sub.to_owned(),
                volume: volume.to_owned(),
                to: "a symlink put in place after the check".to_owned(),
            });
        }
    }
    Ok(fd)
}

fn is_symlink(fd: &OwnedFd) -> bool {
    // SAFETY: `stat` is plain data, filled by fstat on an open descriptor.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    let rc = unsafe { libc::fstat(fd.as_raw_fd(), &mut st) };
    rc == 0 && (st.st_mode & libc::S_IFMT) == libc::S_IFLNK
}

fn is_dir(fd: &OwnedFd) -> bool {
    // SAFETY: as in `is_symlink`.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    let rc = unsafe { libc::fstat(fd.as_raw_fd(), &mut st) };
    rc == 0 && (st.st_mode & libc::S_IFMT) == libc::S_IFDIR
}

/// Makes the missing directories of `parts` under `base`, never following a symlink.
fn make_dirs_inside(base: &Path, parts: &[&std::ffi::OsStr]) -> std::io::Result<()> {
    let mut fd = open_path(base, libc::O_PATH | libc::O_DIRECTORY | libc::O_NOFOLLOW)?;
    for part in parts {
        let name = cstring(part);
        // SAFETY: `fd` is an open directory and `name` NUL-terminated.
        let rc = unsafe { libc::mkdirat(fd.as_raw_fd(), name.as_ptr(), 0o750) };
        if rc < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() != std::io::ErrorKind::AlreadyExists {
                return Err(e);
            }
        }
        fd = open_at(
            &fd,
            part,
            libc::O_PATH | libc::O_DIRECTORY | libc::O_NOFOLLOW,
        )?;
    }
    Ok(())
}

/// Binds what `fd` names at `at` (made as a file or directory to match it), replacing an
/// earlier bind there.
pub fn bind_at(fd: &OwnedFd, at: &Path) -> std::io::Result<()> {
    if let Some(parent) = at.parent() {
        std::fs::create_dir_all(parent)?;
    }
    // A restarted container binds afresh: the sub-path is resolved again.
    if is_mount_point(at) {
        unmount(at)?;
    }
    if is_dir(fd) {
        std::fs::create_dir_all(at)?;
    } else if !at.exists() {
        std::fs::File::create(at)?;
    }
    let source =
        CString::new(format!("/proc/self/fd/{}", fd.as_raw_fd())).map_err(std::io::Error::other)?;
    let target = cstring(at.as_os_str());
    // SAFETY: both paths are NUL-terminated; a bind mount takes no data.
    let rc = unsafe {
        libc::mount(
            source.as_ptr(),
            target.as_ptr(),
            std::ptr::null(),
            libc::MS_BIND,
            std::ptr::null(),
        )
    };
    if rc < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

fn unmount(at: &Path) -> std::io::Result<()> {
    let target = cstring(at.as_os_str());
    // SAFETY: a NUL-terminated path.
    let rc = unsafe { libc::umount2(target.as_ptr(), libc::MNT_DETACH) };
    if rc < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Mount points (from `/proc/self/mountinfo`) under `dir`, deepest first.
fn mounts_under(dir: &Path) -> Vec<PathBuf> {
    let text = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let mut found: Vec<PathBuf> = text
        .lines()
        .filter_map(|line| line.split(' ').nth(4))
        .map(|p| PathBuf::from(unescape(p)))
        .filter(|p| p.starts_with(dir))
        .collect();
    found.sort_by_key(|p| std::cmp::Reverse(p.components().count()));
    found.dedup();
    found
}

/// mountinfo's octal escapes (`\040` for a space).
fn unescape(p: &str) -> String {
    let bytes = p.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\\'
            && i + 3 < bytes.len()
            && let Ok(v) = u8::from_str_radix(&p[i + 1..i + 4], 8)
        {
            out.push(v);
            i += 4;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn is_mount_point(p: &Path) -> bool {
    mounts_under(p).iter().any(|m| m == p)
}

/// Takes down every bind under `dir` (a pod's `volume-subpaths`). True when none is left,
/// so the directory may be removed.
pub fn unmount_all(dir: &Path) -> bool {
    for m in mounts_under(dir) {
        if let Err(e) = unmount(&m) {
            tracing::warn!(mount = %m.display(), "sub-path mount not taken down: {e}");
        }
    }
    mounts_under(dir).is_empty()
}

/// Makes the sub-path mounts of `container` (the `attempt`-th run) of `pod`, whose resolved
/// environment is `env`. `volume_root` gives a volume's host directory.
pub fn prepare(
    pod: &Pod,
    container: &Container,
    pods_root: &Path,
    env: &[(String, String)],
    volume_root: impl Fn(&str) -> Option<PathBuf>,
) -> Result<(), SubPathError> {
    for (index, m) in container.volume_mounts.iter().enumerate() {
        let Some(sub) = sub_path_of(m, env) else {
            continue;
        };
        let Some(root) = volume_root(&m.name) else {
            continue;
        };
        let fd = open_inside(&root, &m.name, &sub)?;
        let at = target(
            pods_root,
            &pod.metadata.uid,
            &m.name,
            &container.name,
            index,
        );
        bind_at(&fd, &at).map_err(|e| SubPathError::Io {
            sub: sub.clone(),
            volume: m.name.clone(),
            what: "bind-mounting it for the container",
            error: e.to_string(),
        })?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expressions_expand_from_the_environment_as_kubelet_does() {
        let env = vec![
            ("POD".to_owned(), "web-1".to_owned()),
            ("NS".to_owned(), "apps".to_owned()),
        ];
        assert_eq!(expand("logs/$(NS)/$(POD)", &env), "logs/apps/web-1");
        assert_eq!(expand("$(MISSING)x", &env), "x");
        assert_eq!(expand("$$(POD)", &env), "$(POD)");
        assert_eq!(expand("a$(POD", &env), "a$(POD");
    }

    #[test]
    fn absolute_and_climbing_sub_paths_are_refused() {
        for bad in ["/etc", "../x", "a/../../b", "", "."] {
            assert!(
                matches!(components(bad), Err(SubPathError::Invalid(_))),
                "{bad:?}"
            );
        }
        assert_eq!(components("a/./b").unwrap().len(), 2);
    }

    #[test]
    fn a_sub_path_resolves_inside_the_volume_and_a_symlink_out_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let volume = dir.path().join("vol");
        let outside = dir.path().join("secret");
        std::fs::create_dir_all(volume.join("data")).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::write(volume.join("data/file"), "in").unwrap();
        std::os::unix::fs::symlink("data", volume.join("link-in")).unwrap();
        std::os::unix::fs::symlink(&outside, volume.join("escape")).unwrap();
        std::os::unix::fs::symlink("../secret", volume.join("climb")).unwrap();
        std::os::unix::fs::symlink("/", volume.join("root")).unwrap();
        // Inside: plain, through an inside symlink, a file, and one made on demand.
        for ok in ["data", "link-in", "data/file", "link-in/file", "new/dir"] {
            open_inside(&volume, "v", ok).unwrap_or_else(|e| panic!("{ok}: {e}"));
        }
        assert!(volume.join("new/dir").is_dir(), "made as kubelet makes it");
        for out in ["escape", "climb", "root/etc"] {
            let e = open_inside(&volume, "v", out).unwrap_err();
            assert!(matches!(e, SubPathError::Escapes { .. }), "{out}: {e:?}");
        }
        // A missing path under a symlink out is not made there.
        assert!(open_inside(&volume, "v", "escape/x").is_err());
        assert!(!outside.join("x").exists(), "nothing made outside");
    }

    #[test]
    fn mountinfo_escapes_are_read() {
        assert_eq!(unescape("/a\\040b/c"), "/a b/c");
        assert_eq!(unescape("/plain"), "/plain");
    }
}
