//! The bearer token TCP clients of the admin API present: read from `wedge.admin.tokenFile`, or
//! created there (random, mode 0600) on first use, so `wedge module ... --token-file` works on
//! the same machine and the token survives restarts.

use std::io::Write;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::Path;

use anyhow::{Context, Result, bail};

/// Shortest token accepted from a file the operator wrote.
const MIN_TOKEN_LEN: usize = 16;

/// The token of `path`, creating the file with a fresh random token when it does not exist.
/// A file readable or writable by group or others, or holding a short or non-printable token,
/// is refused: its token would not be a secret (or not one a header can carry).
pub fn load_or_create(path: &Path) -> Result<String> {
    let key = "wedge.admin.tokenFile";
    match std::fs::metadata(path) {
        Ok(meta) => {
            let mode = meta.mode() & 0o777;
            if mode & 0o077 != 0 {
                bail!(
                    "{key}: {} is accessible to other users (mode {mode:04o}); `chmod 600` it",
                    path.display()
                );
            }
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("{key}: cannot read {}", path.display()))?;
            let token = text.trim();
            if token.len() < MIN_TOKEN_LEN || !token.bytes().all(|b| b.is_ascii_graphic()) {
                bail!(
                    "{key}: {} must hold one token of at least {MIN_TOKEN_LEN} printable \
                     characters without spaces",
                    path.display()
                );
            }
            Ok(token.to_owned())
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => create(path),
        Err(e) => bail!("{key}: cannot inspect {}: {e}", path.display()),
    }
}

fn create(path: &Path) -> Result<String> {
    let key = "wedge.admin.tokenFile";
    let token = random_token().context("cannot read random bytes for the admin token")?;
    if let Some(parent) = path.parent() {
        wedge_core::private_fs::create_dirs_private(parent).with_context(|| key.to_owned())?;
    }
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .with_context(|| format!("{key}: cannot create {}", path.display()))?;
    writeln!(file, "{token}")
        .and_then(|()| file.sync_all())
        .with_context(|| format!("{key}: cannot write {}", path.display()))?;
    tracing::info!(file = %path.display(), "admin API token created");
    Ok(token)
}

/// 32 bytes from the kernel's CSPRNG, as 64 hex digits.
fn random_token() -> std::io::Result<String> {
    use std::io::Read;
    let mut bytes = [0u8; 32];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut bytes)?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    #[test]
    fn created_once_then_read_back() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub/admin.token");
        let token = load_or_create(&path).unwrap();
        assert_eq!(token.len(), 64);
        let mode = std::fs::metadata(&path).unwrap().mode() & 0o777;
        assert_eq!(mode, 0o600);
        assert_eq!(load_or_create(&path).unwrap(), token);
    }

    #[test]
    fn an_exposed_or_weak_file_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t");
        std::fs::write(&path, "0123456789abcdef0123\n").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        let e = load_or_create(&path).unwrap_err().to_string();
        assert!(
            e.contains("wedge.admin.tokenFile") && e.contains("0644"),
            "{e}"
        );
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert_eq!(load_or_create(&path).unwrap(), "0123456789abcdef0123");
        std::fs::write(&path, "short\n").unwrap();
        assert!(load_or_create(&path).is_err());
    }
}
