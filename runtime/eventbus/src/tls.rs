//! TLS with rustls and the ring provider: towards the external broker (`ssl://`), and the
//! embedded broker's own TLS listener (`wedge.broker.tls`).

use std::path::Path;
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::{ClientConfig, RootCertStore, ServerConfig};

use crate::error::EventBusError;
use crate::settings::TlsFiles;

/// A client configuration trusting the CA file (or the system's roots when none is given) and
/// presenting the client certificate when one is configured.
pub(crate) fn client_config(files: Option<&TlsFiles>) -> Result<Arc<ClientConfig>, EventBusError> {
    let mut roots = RootCertStore::empty();
    match files.and_then(|f| f.ca_file.as_deref()) {
        Some(ca) => {
            for cert in read_certs(ca)? {
                roots.add(cert).map_err(|e| EventBusError::TlsFile {
                    path: ca.to_owned(),
                    reason: format!("not a usable CA certificate: {e}"),
                })?;
            }
        }
        None => {
            let native = rustls_native_certs::load_native_certs();
            for e in &native.errors {
                tracing::warn!("system CA certificates: {e}");
            }
            let (added, _ignored) = roots.add_parsable_certificates(native.certs);
            if added == 0 {
                return Err(EventBusError::Tls(
                    "no CA file configured (tlsMqttCAFile) and no system CA certificates found"
                        .to_owned(),
                ));
            }
        }
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| EventBusError::Tls(e.to_string()))?
        .with_root_certificates(roots);
    let client_auth = files.and_then(|f| f.cert_file.as_deref().zip(f.key_file.as_deref()));
    let config = match client_auth {
        Some((cert, key)) => {
            let chain = read_certs(cert)?;
            let key_der =
                PrivateKeyDer::from_pem_file(key).map_err(|e| EventBusError::TlsFile {
                    path: key.to_owned(),
                    reason: format!("no PEM private key: {e}"),
                })?;
            builder
                .with_client_auth_cert(chain, key_der)
                .map_err(|e| EventBusError::TlsFile {
                    path: cert.to_owned(),
                    reason: format!("client certificate and key do not go together: {e}"),
                })?
        }
        None => builder.with_no_client_auth(),
    };
    Ok(Arc::new(config))
}

/// The embedded broker's TLS listener: presents `cert` (a PEM chain) with `key`; with
/// `client_ca`, every client must present a certificate that CA signed.
pub(crate) fn server_config(
    cert: &Path,
    key: &Path,
    client_ca: Option<&Path>,
) -> Result<Arc<ServerConfig>, EventBusError> {
    let chain = read_certs(cert)?;
    let key_der = PrivateKeyDer::from_pem_file(key).map_err(|e| EventBusError::TlsFile {
        path: key.to_owned(),
        reason: format!("no PEM private key: {e}"),
    })?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| EventBusError::Tls(e.to_string()))?;
    let builder = match client_ca {
        Some(ca) => {
            let mut roots = RootCertStore::empty();
            for c in read_certs(ca)? {
                roots.add(c).map_err(|e| EventBusError::TlsFile {
                    path: ca.to_owned(),
                    reason: format!("not a usable CA certificate: {e}"),
                })?;
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .build()
                .map_err(|e| EventBusError::TlsFile {
                    path: ca.to_owned(),
                    reason: format!("cannot verify clients with it: {e}"),
                })?;
            builder.with_client_cert_verifier(verifier)
        }
        None => builder.with_no_client_auth(),
    };
    let config = builder
        .with_single_cert(chain, key_der)
        .map_err(|e| EventBusError::TlsFile {
            path: cert.to_owned(),
            reason: format!("certificate and key do not go together: {e}"),
        })?;
    Ok(Arc::new(config))
}

fn read_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, EventBusError> {
    let bad = |reason: String| EventBusError::TlsFile {
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
    fn missing_files_are_named() {
        let files = TlsFiles {
            ca_file: Some("/nonexistent/ca.pem".into()),
            ..TlsFiles::default()
        };
        let err = client_config(Some(&files)).unwrap_err();
        assert!(err.to_string().contains("/nonexistent/ca.pem"), "{err}");
    }

    #[test]
    fn a_server_certificate_must_match_its_key() {
        let dir = tempfile::tempdir().unwrap();
        let one = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).unwrap();
        let other = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).unwrap();
        let (cert, key, wrong_key) = (
            dir.path().join("cert.pem"),
            dir.path().join("key.pem"),
            dir.path().join("other-key.pem"),
        );
        std::fs::write(&cert, one.cert.pem()).unwrap();
        std::fs::write(&key, one.signing_key.serialize_pem()).unwrap();
        std::fs::write(&wrong_key, other.signing_key.serialize_pem()).unwrap();
        server_config(&cert, &key, None).expect("matching pair");
        server_config(&cert, &key, Some(&cert)).expect("self-signed as the client CA");
        let err = server_config(&cert, &wrong_key, None).unwrap_err();
        assert!(err.to_string().contains("do not go together"), "{err}");
        let err = server_config(&dir.path().join("none.pem"), &key, None).unwrap_err();
        assert!(err.to_string().contains("none.pem"), "{err}");
    }
}
