//! rustls server configurations: the WebSocket side requires a client certificate signed by the
//! CA (mutual TLS); the bootstrap side accepts clients without one (they have none yet).

use std::sync::Arc;

use anyhow::Result;
use rustls::RootCertStore;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use rustls::server::WebPkiClientVerifier;

use super::{CloudCa, IssuedCert};

/// A server config presenting `server`, verifying client certificates against `ca`.
pub(super) fn server_config(
    ca: &CloudCa,
    server: &IssuedCert,
    require_client_cert: bool,
) -> Result<Arc<rustls::ServerConfig>> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = RootCertStore::empty();
    roots.add(CertificateDer::from(ca.ca_der()))?;
    let builder = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone());
    let verifier = if require_client_cert {
        builder.build()?
    } else {
        builder.allow_unauthenticated().build()?
    };
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_client_cert_verifier(verifier)
        .with_single_cert(
            vec![CertificateDer::from(server.cert_der.clone())],
            PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(server.key_der.clone())),
        )?;
    Ok(Arc::new(config))
}

/// The common name of the first peer certificate, if any.
pub(super) fn peer_cn(certs: Option<&[CertificateDer<'_>]>) -> Option<String> {
    let first = certs?.first()?;
    let (_, cert) = x509_parser::parse_x509_certificate(first.as_ref()).ok()?;
    let cn = cert.subject().iter_common_name().next()?;
    cn.as_str().ok().map(str::to_owned)
}

/// The SHA-256 of the first peer certificate's DER, hex, if there is one.
pub(super) fn peer_sha256(certs: Option<&[CertificateDer<'_>]>) -> Option<String> {
    use sha2::{Digest, Sha256};
    let first = certs?.first()?;
    Some(
        Sha256::digest(first.as_ref())
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect(),
    )
}
