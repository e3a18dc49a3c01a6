//! The network steps of the bootstrap: `GET /ca.crt` (server not verified: the CA is checked
//! against the token's hash instead) and `GET /edge.crt` (server verified against that CA),
//! then [`bootstrap`], which runs the whole sequence and writes the files only when every step
//! succeeded.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

use super::{
    BootstrapError, CertPaths, CertStatus, cert_status, check_ca, new_key_and_csr, parse_token,
    pem_encode, write_files,
};

/// Longest a single request (connect, TLS, exchange) may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// How the node proves itself to `/edge.crt`. (No `Debug`: it holds credentials.)
#[derive(Clone, Copy)]
pub enum CertAuth<'a> {
    /// First bootstrap: the join token's JWT as bearer.
    Token(&'a str),
    /// Rotation: the current certificate chain and key (PEM), presented as TLS client identity.
    ClientCert {
        /// The certificate chain, PEM.
        chain_pem: &'a [u8],
        /// Its key, PEM.
        key_pem: &'a [u8],
    },
}

/// Fetches the cloud's CA certificate (DER) from `server` (`https://<ip>:10002` or
/// `<ip>:10002`). The server is not verified here: check the result with
/// [`check_ca`] before trusting it.
pub async fn fetch_ca(server: &str) -> Result<Vec<u8>, BootstrapError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| tls_err(server, e))?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(AnyServer(provider)))
        .with_no_client_auth();
    let response = request(server, "/ca.crt", config, &[], &[]).await?;
    Ok(response)
}

/// Has the cloud sign `csr_der` for `node`; returns the certificate (DER). The server must
/// present a certificate issued by `ca_der`.
pub async fn fetch_cert(
    server: &str,
    ca_der: &[u8],
    auth: CertAuth<'_>,
    node: &str,
    csr_der: &[u8],
) -> Result<Vec<u8>, BootstrapError> {
    let mut roots = RootCertStore::empty();
    roots
        .add(CertificateDer::from(ca_der.to_vec()))
        .map_err(|e| BootstrapError::Http {
            url: url(server, "/edge.crt"),
            reason: format!("the CA certificate is not usable: {e}"),
        })?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| tls_err(server, e))?
        .with_root_certificates(roots);
    let bearer;
    let mut headers = vec![("NodeName", node)];
    let config = match auth {
        CertAuth::Token(jwt) => {
            bearer = format!("Bearer {jwt}");
            headers.insert(0, ("Authorization", bearer.as_str()));
            builder.with_no_client_auth()
        }
        CertAuth::ClientCert { chain_pem, key_pem } => {
            let bad = |reason: String| BootstrapError::Http {
                url: url(server, "/edge.crt"),
                reason,
            };
            let chain = CertificateDer::pem_slice_iter(chain_pem)
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| bad(format!("current certificate is not PEM: {e}")))?;
            let key = PrivateKeyDer::from_pem_slice(key_pem)
                .map_err(|e| bad(format!("current key is not PEM: {e}")))?;
            builder
                .with_client_auth_cert(chain, key)
                .map_err(|e| bad(format!("current certificate and key do not match: {e}")))?
        }
    };
    request(server, "/edge.crt", config, &headers, csr_der).await
}

/// The whole first bootstrap: checks the token, fetches and checks the CA, makes a key and CSR,
/// has the cloud sign it, checks the certificate is `system:node:<node>` and valid, then writes
/// the CA, certificate and key to `paths`. Nothing is written unless every step succeeded.
/// (Blanking the token in the configuration is the caller's job.)
pub async fn bootstrap(
    server: &str,
    token: &str,
    node: &str,
    paths: &CertPaths,
) -> Result<(), BootstrapError> {
    let token = parse_token(token)?;
    let ca_der = fetch_ca(server).await?;
    check_ca(&token, &ca_der)?;
    let (key_pem, csr_der) = new_key_and_csr(node)?;
    let cert_der = fetch_cert(
        server,
        &ca_der,
        CertAuth::Token(&token.bearer),
        node,
        &csr_der,
    )
    .await?;
    let cert_pem = pem_encode("CERTIFICATE", &cert_der);
    match cert_status(cert_pem.as_bytes(), node, SystemTime::now()) {
        CertStatus::Valid { .. } => {}
        other => return Err(unusable(other, node)),
    }
    write_files(
        &pem_encode("CERTIFICATE", &ca_der),
        &cert_pem,
        &key_pem,
        paths,
    )
}

/// The error for an issued certificate that will not do.
pub(super) fn unusable(status: CertStatus, node: &str) -> BootstrapError {
    BootstrapError::BadCertificate(match status {
        CertStatus::WrongCn { found } => {
            format!("issued for CN {found:?}, not \"system:node:{node}\"")
        }
        CertStatus::Expired { .. } => "already expired".to_owned(),
        CertStatus::Missing => "empty response".to_owned(),
        CertStatus::Unreadable(why) => why,
        CertStatus::Valid { .. } => "valid".to_owned(),
    })
}

fn url(server: &str, path: &str) -> String {
    format!("https://{}{path}", authority(server))
}

/// CloudHub's `host:port` from `modules.edgeHub.httpServer` (`https://host:port`, a scheme and
/// a trailing slash optional).
pub fn authority(server: &str) -> &str {
    server
        .trim()
        .trim_start_matches("https://")
        .trim_end_matches('/')
}

fn tls_err(server: &str, e: rustls::Error) -> BootstrapError {
    BootstrapError::Http {
        url: url(server, ""),
        reason: format!("TLS configuration: {e}"),
    }
}

/// One request over a fresh TLS connection; the body of a 200 response.
async fn request(
    server: &str,
    path: &str,
    config: ClientConfig,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Result<Vec<u8>, BootstrapError> {
    let target = url(server, path);
    let http = |reason: String| BootstrapError::Http {
        url: target.clone(),
        reason,
    };
    let authority = authority(server);
    // `[v6]:port`, `v4:port` or `name:port`; the host is what the certificate must name.
    let host = match authority.rsplit_once(':') {
        Some((host, port)) if port.bytes().all(|b| b.is_ascii_digit()) => host,
        _ => return Err(http("server must be host:port".to_owned())),
    };
    let host = host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_owned();
    let name = ServerName::try_from(host).map_err(|e| http(format!("bad host: {e}")))?;
    let exchange = async {
        let tcp = TcpStream::connect(authority)
            .await
            .map_err(|e| http(format!("cannot connect: {e}")))?;
        let mut tls = TlsConnector::from(Arc::new(config))
            .connect(name, tcp)
            .await
            .map_err(|e| http(handshake_failure(&e)))?;
        super::http::get(&mut tls, authority, path, headers, body)
            .await
            .map_err(http)
    };
    let response = tokio::time::timeout(REQUEST_TIMEOUT, exchange)
        .await
        .map_err(|_| http(format!("no response within {REQUEST_TIMEOUT:?}")))??;
    if response.status != 200 {
        return Err(BootstrapError::Refused {
            url: target,
            status: response.status,
            body: String::from_utf8_lossy(&response.body).trim().to_owned(),
        });
    }
    Ok(response.body)
}

/// Why a TLS handshake failed, in words. A server certificate the CA does not vouch for (the
/// only certificate check the bootstrap makes, on `/edge.crt`) gets a plain hint on top of
/// rustls' terse reason (`UnknownIssuer`, `Expired`, ...), since that is what an operator
/// meets when the address points at something other than the cloud that issued the token.
fn handshake_failure(e: &std::io::Error) -> String {
    let invalid_server_cert = e
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<rustls::Error>())
        .is_some_and(|tls| matches!(tls, rustls::Error::InvalidCertificate(_)));
    if invalid_server_cert {
        format!(
            "TLS handshake failed: {e}; the server's certificate does not verify against the \
             cloud's CA, so it is not trusted with the certificate request"
        )
    } else {
        format!("TLS handshake failed: {e}")
    }
}

/// Accepts any server certificate (still checking the handshake signatures): used only for
/// `/ca.crt`, whose answer is then checked against the token's hash.
#[derive(Debug)]
struct AnyServer(Arc<CryptoProvider>);

impl ServerCertVerifier for AnyServer {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

#[cfg(test)]
mod tests;
