//! Mutual TLS towards CloudCore, with rustls and the ring provider.
//!
//! The configuration is rebuilt at every dial, so certificates written by the bootstrap (or a
//! rotation) are picked up by the next connection without restarting the module.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::{ClientConfig, RootCertStore};

/// Why the TLS client configuration could not be built.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A certificate or key file is missing or unusable.
    #[error("{path}: {reason}")]
    File {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// rustls refused the configuration.
    #[error("TLS configuration: {0}")]
    Config(String),
}

/// A client configuration trusting only the CA in `ca_file` and presenting the certificate chain
/// in `cert_file` with the key in `key_file`. TLS 1.2 and 1.3 (the cloud requires ≥ 1.2).
pub fn client_config(
    ca_file: &Path,
    cert_file: &Path,
    key_file: &Path,
) -> Result<Arc<ClientConfig>, TlsError> {
    let mut roots = RootCertStore::empty();
    for cert in read_certs(ca_file)? {
        roots.add(cert).map_err(|e| TlsError::File {
            path: ca_file.to_owned(),
            reason: format!("not a usable CA certificate: {e}"),
        })?;
    }
    let chain = read_certs(cert_file)?;
    let key = PrivateKeyDer::from_pem_file(key_file).map_err(|e| TlsError::File {
        path: key_file.to_owned(),
        reason: format!("no PEM private key: {e}"),
    })?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::Config(e.to_string()))?
        .with_root_certificates(roots)
        .with_client_auth_cert(chain, key)
        .map_err(|e| TlsError::File {
            path: cert_file.to_owned(),
            reason: format!("client certificate and key do not go together: {e}"),
        })?;
    Ok(Arc::new(config))
}

fn read_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let bad = |reason: String| TlsError::File {
        path: path.to_owned(),
        reason,
    };
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| bad(format!("cannot read: {e}")))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| bad(format!("bad PEM: {e}")))?;
    if certs.is_empty() {
        return Err(bad("no PEM certificate in the file".to_owned()));
    }
    Ok(certs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_and_empty_files_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let empty = dir.path().join("empty.pem");
        std::fs::write(&empty, "").unwrap();
        let err = client_config(Path::new("/nonexistent/ca.crt"), &empty, &empty).unwrap_err();
        assert!(
            err.to_string()
                .starts_with("/nonexistent/ca.crt: cannot read"),
            "{err}"
        );
        let err = client_config(&empty, &empty, &empty).unwrap_err();
        assert_eq!(
            err.to_string(),
            format!("{}: no PEM certificate in the file", empty.display())
        );
    }
}
