//! Mutual TLS towards CloudCore's tunnel server (rustls, ring).
//!
//! The node presents its certificate (CloudCore's tunnel server requires one signed by its CA:
//! the node certificate edgeHub got). edgecore does not check the server at all
//! (`InsecureSkipVerify`); we do check that the server's certificate chains to the configured
//! CA, but not the name in it: CloudCore serves the tunnel with CloudHub's certificate, whose
//! names are CloudHub's advertised addresses, which need not include the address the node
//! dials for the tunnel.
//!
//! The configuration is built again at every dial, so certificate files written by the
//! bootstrap or a rotation are used by the next connection.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{
    CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme,
};

use crate::config::Credentials;

/// Why the TLS client configuration could not be built.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A certificate or key (file) is missing or unusable.
    #[error("{what}: {reason}")]
    Credential {
        /// The file, or which PEM.
        what: String,
        /// What is wrong with it.
        reason: String,
    },
    /// rustls refused the configuration.
    #[error("TLS configuration: {0}")]
    Config(String),
}

/// The client configuration for `credentials`.
pub(crate) fn client_config(credentials: &Credentials) -> Result<Arc<ClientConfig>, TlsError> {
    let (ca, cert, key) = match credentials {
        Credentials::Files { ca, cert, key } => (read(ca)?, read(cert)?, read(key)?),
        Credentials::Pem { ca, cert, key } => (
            ("CA PEM".to_owned(), ca.clone()),
            ("certificate PEM".to_owned(), cert.clone()),
            ("key PEM".to_owned(), key.clone()),
        ),
    };
    let mut roots = RootCertStore::empty();
    for der in certs(&ca)? {
        roots.add(der).map_err(|e| TlsError::Credential {
            what: ca.0.clone(),
            reason: format!("not a usable CA certificate: {e}"),
        })?;
    }
    let chain = certs(&cert)?;
    let key_der = PrivateKeyDer::from_pem_slice(&key.1).map_err(|e| TlsError::Credential {
        what: key.0.clone(),
        reason: format!("no PEM private key: {e}"),
    })?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let verifier = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider.clone())
        .build()
        .map_err(|e| TlsError::Config(e.to_string()))?;
    let config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::Config(e.to_string()))?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(AnyName(verifier)))
        .with_client_auth_cert(chain, key_der)
        .map_err(|e| TlsError::Credential {
            what: cert.0.clone(),
            reason: format!("certificate and key do not go together: {e}"),
        })?;
    Ok(Arc::new(config))
}

fn read(path: &PathBuf) -> Result<(String, Vec<u8>), TlsError> {
    let what = path.display().to_string();
    match std::fs::read(path) {
        Ok(bytes) => Ok((what, bytes)),
        Err(e) => Err(TlsError::Credential {
            what,
            reason: format!("cannot read: {e}"),
        }),
    }
}

fn certs((what, pem): &(String, Vec<u8>)) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let certs = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| TlsError::Credential {
            what: what.clone(),
            reason: format!("bad PEM: {e}"),
        })?;
    if certs.is_empty() {
        return Err(TlsError::Credential {
            what: what.clone(),
            reason: "no PEM certificate".to_owned(),
        });
    }
    Ok(certs)
}

/// Checks the chain (signature, validity, usage) with webpki and accepts any name.
#[derive(Debug)]
struct AnyName(Arc<WebPkiServerVerifier>);

impl ServerCertVerifier for AnyName {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match self
            .0
            .verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
        {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

/// Whether the files of `credentials` exist (before the bootstrap wrote them they do not;
/// that is waited for, not an error worth a warning each time).
pub(crate) fn missing_file(credentials: &Credentials) -> Option<&Path> {
    match credentials {
        Credentials::Files { ca, cert, key } => [ca, cert, key]
            .into_iter()
            .find(|p| !p.exists())
            .map(PathBuf::as_path),
        Credentials::Pem { .. } => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_and_empty_credentials_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let empty = dir.path().join("empty.pem");
        std::fs::write(&empty, "").unwrap();
        let files = Credentials::Files {
            ca: "/nonexistent/ca.crt".into(),
            cert: empty.clone(),
            key: empty.clone(),
        };
        assert_eq!(missing_file(&files), Some(Path::new("/nonexistent/ca.crt")));
        let err = client_config(&files).unwrap_err().to_string();
        assert!(err.starts_with("/nonexistent/ca.crt: cannot read"), "{err}");
        let err = client_config(&Credentials::Files {
            ca: empty.clone(),
            cert: empty.clone(),
            key: empty.clone(),
        })
        .unwrap_err()
        .to_string();
        assert_eq!(err, format!("{}: no PEM certificate", empty.display()));
    }
}
