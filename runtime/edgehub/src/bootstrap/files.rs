//! Replacing the CA, certificate and key files without ever leaving a torn one.
//!
//! All three are first written in full to temporary files beside their targets (same directory,
//! hence same filesystem) and synced; only then are they renamed over the targets. A failure
//! while writing leaves every existing file untouched. The key is created with mode 0600 before
//! any of it is written, so it is never readable by others, even briefly.

use std::fs::{File, OpenOptions};
use std::io::Write as _;
use std::path::{Path, PathBuf};

use super::BootstrapError;

/// Where the three files go (`tlsCaFile`, `tlsCertFile`, `tlsPrivateKeyFile`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertPaths {
    /// The CA certificate (PEM).
    pub ca: PathBuf,
    /// The node certificate (PEM).
    pub cert: PathBuf,
    /// The node key (PEM), written 0600.
    pub key: PathBuf,
}

/// Writes the CA, certificate and key (PEM text) to `paths`, replacing what is there only once
/// all three are safely on disk.
pub fn write_files(
    ca_pem: &str,
    cert_pem: &str,
    key_pem: &str,
    paths: &CertPaths,
) -> Result<(), BootstrapError> {
    let plan = [
        (&paths.ca, ca_pem, 0o644),
        (&paths.cert, cert_pem, 0o644),
        (&paths.key, key_pem, 0o600),
    ];
    let mut written: Vec<(PathBuf, &Path)> = Vec::with_capacity(plan.len());
    for (target, text, mode) in plan {
        match write_temp(target, text, mode) {
            Ok(temp) => written.push((temp, target)),
            Err(e) => {
                for (temp, _) in &written {
                    let _ = std::fs::remove_file(temp);
                }
                return Err(e);
            }
        }
    }
    for (i, (temp, target)) in written.iter().enumerate() {
        if let Err(source) = std::fs::rename(temp, target) {
            for (temp, _) in &written[i..] {
                let _ = std::fs::remove_file(temp);
            }
            return Err(BootstrapError::Io {
                path: target.to_path_buf(),
                source,
            });
        }
    }
    // Make the renames themselves durable.
    for (_, target) in &written {
        if let Some(dir) = parent(target) {
            let _ = File::open(dir).and_then(|d| d.sync_all());
        }
    }
    Ok(())
}

fn parent(path: &Path) -> Option<&Path> {
    path.parent().map(|p| {
        if p.as_os_str().is_empty() {
            Path::new(".")
        } else {
            p
        }
    })
}

/// Writes `text` to a new temporary file next to `target`; returns its path.
fn write_temp(target: &Path, text: &str, mode: u32) -> Result<PathBuf, BootstrapError> {
    let io = |path: &Path, source| BootstrapError::Io {
        path: path.to_path_buf(),
        source,
    };
    let dir = parent(target).unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).map_err(|e| io(dir, e))?;
    let name = target
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or_default();
    let temp = dir.join(format!(".{name}.tmp-{}-{nanos}", std::process::id()));
    let mut options = OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt as _;
        options.mode(mode);
    }
    #[cfg(not(unix))]
    let _ = mode;
    let result = options.open(&temp).and_then(|mut f| {
        // The umask may have narrowed the mode, never widened it; set it exactly.
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            f.set_permissions(std::fs::Permissions::from_mode(mode))?;
        }
        f.write_all(text.as_bytes())?;
        f.sync_all()
    });
    match result {
        Ok(()) => Ok(temp),
        Err(e) => {
            let _ = std::fs::remove_file(&temp);
            Err(io(&temp, e))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn paths(dir: &Path) -> CertPaths {
        CertPaths {
            ca: dir.join("ca/rootCA.crt"),
            cert: dir.join("certs/server.crt"),
            key: dir.join("certs/server.key"),
        }
    }

    fn entries(dir: &Path) -> Vec<String> {
        let mut out = Vec::new();
        for sub in ["ca", "certs"] {
            if let Ok(rd) = std::fs::read_dir(dir.join(sub)) {
                for e in rd {
                    out.push(format!(
                        "{sub}/{}",
                        e.unwrap().file_name().to_string_lossy()
                    ));
                }
            }
        }
        out.sort();
        out
    }

    #[test]
    fn writes_all_three_and_key_is_private() {
        let dir = tempfile::tempdir().unwrap();
        let p = paths(dir.path());
        write_files("CA1", "CERT1", "KEY1", &p).unwrap();
        assert_eq!(std::fs::read_to_string(&p.ca).unwrap(), "CA1");
        assert_eq!(std::fs::read_to_string(&p.cert).unwrap(), "CERT1");
        assert_eq!(std::fs::read_to_string(&p.key).unwrap(), "KEY1");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode(&p.key), 0o600);
            assert_eq!(mode(&p.cert), 0o644);
        }
        // Replacing works and leaves no temporary files behind.
        write_files("CA2", "CERT2", "KEY2", &p).unwrap();
        assert_eq!(std::fs::read_to_string(&p.key).unwrap(), "KEY2");
        assert_eq!(
            entries(dir.path()),
            vec!["ca/rootCA.crt", "certs/server.crt", "certs/server.key"]
        );
    }

    #[test]
    fn a_failure_overwrites_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let p = paths(dir.path());
        write_files("CA1", "CERT1", "KEY1", &p).unwrap();
        // The key's directory cannot take new files (a file stands where the directory should
        // be), so the third write fails after the first two temporaries were made.
        let broken = CertPaths {
            key: dir.path().join("certs/server.crt/server.key"),
            ..p.clone()
        };
        let err = write_files("CA2", "CERT2", "KEY2", &broken).unwrap_err();
        assert!(
            err.to_string().starts_with(&format!(
                "cannot write {}",
                dir.path().join("certs/server.crt").display()
            )),
            "{err}"
        );
        assert_eq!(std::fs::read_to_string(&p.ca).unwrap(), "CA1");
        assert_eq!(std::fs::read_to_string(&p.cert).unwrap(), "CERT1");
        assert_eq!(std::fs::read_to_string(&p.key).unwrap(), "KEY1");
        assert_eq!(
            entries(dir.path()),
            vec!["ca/rootCA.crt", "certs/server.crt", "certs/server.key"]
        );
    }
}
