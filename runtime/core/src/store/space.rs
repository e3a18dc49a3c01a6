//! Free space under the database: SQLite needs room for its WAL and journal pages, so a disk
//! that is nearly full means writes will fail even if none has yet.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// Below this much free space the store is reported unwritable: a few WAL pages' worth of
/// batches, so `/healthz` turns before commits start failing.
pub const MIN_FREE_BYTES: u64 = 4 * 1024 * 1024;

/// Bytes this process may still write on the file system holding `dir` (root may use the
/// blocks reserved for it, as the kernel allows).
pub fn free_bytes(dir: &Path) -> std::io::Result<u64> {
    let path = CString::new(dir.as_os_str().as_bytes())
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
    // SAFETY: statvfs writes into the zeroed struct we own; `path` is NUL-terminated.
    let mut vfs: libc::statvfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statvfs(path.as_ptr(), &mut vfs) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let root = crate::private_fs::effective_uid() == 0;
    let blocks = if root { vfs.f_bfree } else { vfs.f_bavail };
    #[allow(clippy::unnecessary_cast)] // the field types differ between targets
    Ok((blocks as u64).saturating_mul(vfs.f_frsize as u64))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_real_directory_has_some_free_space_and_a_missing_one_says_why() {
        let dir = tempfile::tempdir().expect("tempdir");
        assert!(free_bytes(dir.path()).expect("statvfs") > 0);
        assert!(free_bytes(&dir.path().join("missing")).is_err());
    }
}
