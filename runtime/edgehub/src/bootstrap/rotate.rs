//! Certificate rotation: before the current certificate expires, a new key and CSR are signed by
//! the cloud, the node proving itself with the current certificate (no token).

use std::time::{Duration, SystemTime};

use super::{
    BootstrapError, CertAuth, CertPaths, CertStatus, cert_status, fetch_cert, new_key_and_csr,
    write_files,
};

/// Fetches a new certificate for `node` with a fresh key, authenticated by the current
/// certificate and key in `paths`, the server verified against the CA in `paths`; then
/// replaces the certificate and key (the CA file is rewritten unchanged). Nothing is replaced
/// unless the new certificate is valid for `node`. The caller reconnects afterwards.
pub async fn rotate(server: &str, node: &str, paths: &CertPaths) -> Result<(), BootstrapError> {
    let read = |path: &std::path::Path| {
        std::fs::read(path).map_err(|source| BootstrapError::Read {
            path: path.to_owned(),
            source,
        })
    };
    let ca_pem = read(&paths.ca)?;
    let chain_pem = read(&paths.cert)?;
    let key_pem = read(&paths.key)?;
    let ca_der = first_certificate(&ca_pem).ok_or_else(|| BootstrapError::Read {
        path: paths.ca.clone(),
        source: std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            "no PEM CERTIFICATE in the CA file",
        ),
    })?;
    let (new_key, csr) = new_key_and_csr(node)?;
    let auth = CertAuth::ClientCert {
        chain_pem: &chain_pem,
        key_pem: &key_pem,
    };
    let cert_der = fetch_cert(server, &ca_der, auth, node, &csr).await?;
    let cert_pem = super::pem_encode("CERTIFICATE", &cert_der);
    match cert_status(cert_pem.as_bytes(), node, SystemTime::now()) {
        CertStatus::Valid { .. } => {}
        other => return Err(super::client::unusable(other, node)),
    }
    let ca_text = String::from_utf8_lossy(&ca_pem).into_owned();
    write_files(&ca_text, &cert_pem, &new_key, paths)
}

/// How long to wait before rotation attempt `attempt` (0 = the first retry): 2 s doubling five
/// times, then every 32 s, as edgecore does.
pub fn rotation_retry_delay(attempt: u32) -> Duration {
    Duration::from_secs(2u64 << attempt.min(4))
}

fn first_certificate(pem: &[u8]) -> Option<Vec<u8>> {
    match x509_parser::pem::parse_x509_pem(pem) {
        Ok((_, block)) if block.label == "CERTIFICATE" => Some(block.contents),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_delays() {
        let delays: Vec<u64> = (0..8).map(|a| rotation_retry_delay(a).as_secs()).collect();
        assert_eq!(delays, vec![2, 4, 8, 16, 32, 32, 32, 32]);
        assert_eq!(rotation_retry_delay(u32::MAX).as_secs(), 32);
    }
}
