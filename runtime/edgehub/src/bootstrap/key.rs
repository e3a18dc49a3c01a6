//! The node's key and certificate request, as edgecore makes them: ECDSA P-256, the key kept
//! as SEC1 (`EC PRIVATE KEY`, what edgecore writes and reads back), the CSR in DER.

use rcgen::{CertificateParams, DistinguishedName, DnType, KeyPair, PKCS_ECDSA_P256_SHA256};
use yasna::Tag;
use yasna::models::ObjectIdentifier;

use super::BootstrapError;
use super::pem::pem_encode;

/// prime256v1 (secp256r1), the curve named in the SEC1 key.
const P256_OID: &[u64] = &[1, 2, 840, 10045, 3, 1, 7];

/// A new ECDSA P-256 key (PEM `EC PRIVATE KEY`) and a CSR (DER) for `system:node:<node>`,
/// subject `C=CN, ST=Zhejiang, L=Hangzhou, O=system:nodes, CN=system:node:<node>`.
pub fn new_key_and_csr(node: &str) -> Result<(String, Vec<u8>), BootstrapError> {
    let key_err = |e: rcgen::Error| BootstrapError::Key(e.to_string());
    let key = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256).map_err(key_err)?;
    let mut params = CertificateParams::default();
    // The attributes in the order Go's pkix.Name writes them, so the CSR's subject has the same
    // bytes as edgecore's.
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CountryName, "CN");
    dn.push(DnType::StateOrProvinceName, "Zhejiang");
    dn.push(DnType::LocalityName, "Hangzhou");
    dn.push(DnType::OrganizationName, "system:nodes");
    dn.push(DnType::CommonName, format!("system:node:{node}"));
    params.distinguished_name = dn;
    let csr = params.serialize_request(&key).map_err(key_err)?;
    let sec1 = pkcs8_to_sec1(key.serialized_der(), key.public_key_raw())?;
    Ok((pem_encode("EC PRIVATE KEY", &sec1), csr.der().to_vec()))
}

/// Re-encodes a P-256 PKCS#8 key (what the crypto library gives) as SEC1 `ECPrivateKey`
/// (RFC 5915) with the curve and the public key included, as Go's `MarshalECPrivateKey` does
/// (Go refuses a SEC1 key without its curve).
fn pkcs8_to_sec1(pkcs8: &[u8], public: &[u8]) -> Result<Vec<u8>, BootstrapError> {
    let bad = |e: yasna::ASN1Error| BootstrapError::Key(format!("unexpected PKCS#8 key: {e}"));
    let inner = yasna::parse_der(pkcs8, |r| {
        r.read_sequence(|r| {
            r.next().read_u8()?;
            r.next().read_sequence(|r| {
                r.next().read_oid()?;
                r.next().read_oid()
            })?;
            let inner = r.next().read_bytes()?;
            // PKCS#8 v2 may add the public key; we have it already.
            r.read_optional(|r| {
                r.read_tagged_implicit(Tag::context(1), |r| r.read_bitvec_bytes())
            })?;
            Ok(inner)
        })
    })
    .map_err(bad)?;
    let secret = yasna::parse_der(&inner, |r| {
        r.read_sequence(|r| {
            r.next().read_u8()?;
            let secret = r.next().read_bytes()?;
            r.read_optional(|r| r.read_tagged(Tag::context(0), |r| r.read_oid()))?;
            r.read_optional(|r| r.read_tagged(Tag::context(1), |r| r.read_bitvec_bytes()))?;
            Ok(secret)
        })
    })
    .map_err(bad)?;
    Ok(yasna::construct_der(|w| {
        w.write_sequence(|w| {
            w.next().write_u8(1);
            w.next().write_bytes(&secret);
            w.next().write_tagged(Tag::context(0), |w| {
                w.write_oid(&ObjectIdentifier::from_slice(P256_OID))
            });
            w.next().write_tagged(Tag::context(1), |w| {
                w.write_bitvec_bytes(public, public.len() * 8)
            });
        })
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use base64::Engine as _;
    use rcgen::PKCS_ECDSA_P256_SHA256;
    use x509_parser::prelude::*;

    fn pem_der(pem: &str, label: &str) -> Vec<u8> {
        let body: String = pem
            .strip_prefix(&format!("-----BEGIN {label}-----\n"))
            .unwrap()
            .strip_suffix(&format!("-----END {label}-----\n"))
            .unwrap()
            .lines()
            .collect();
        base64::engine::general_purpose::STANDARD
            .decode(body)
            .unwrap()
    }

    #[test]
    fn csr_names_the_node_and_is_signed_by_the_key() {
        let (key_pem, csr_der) = new_key_and_csr("edge-1").unwrap();
        let (rest, csr) = X509CertificationRequest::from_der(&csr_der).unwrap();
        assert!(rest.is_empty());
        csr.verify_signature().unwrap();
        let info = &csr.certification_request_info;
        assert_eq!(
            info.subject.to_string(),
            "C=CN, ST=Zhejiang, L=Hangzhou, O=system:nodes, CN=system:node:edge-1"
        );
        assert_eq!(
            info.subject_pki
                .algorithm
                .parameters
                .as_ref()
                .unwrap()
                .as_oid()
                .unwrap(),
            x509_parser::oid_registry::OID_EC_P256
        );

        // The key is SEC1 with its curve, and is the key the CSR carries.
        let sec1 = pem_der(&key_pem, "EC PRIVATE KEY");
        let (secret, curve, public) = yasna::parse_der(&sec1, |r| {
            r.read_sequence(|r| {
                assert_eq!(r.next().read_u8()?, 1);
                let secret = r.next().read_bytes()?;
                let curve = r.next().read_tagged(Tag::context(0), |r| r.read_oid())?;
                let public = r
                    .next()
                    .read_tagged(Tag::context(1), |r| r.read_bitvec_bytes())?;
                Ok((secret, curve, public.0))
            })
        })
        .unwrap();
        assert_eq!(secret.len(), 32);
        assert_eq!(curve, ObjectIdentifier::from_slice(P256_OID));
        assert_eq!(public, info.subject_pki.subject_public_key.data.to_vec());
        // Loading the secret back (the library checks it against the public key) gives the
        // same key pair.
        let pkcs8 = yasna::construct_der(|w| {
            w.write_sequence(|w| {
                w.next().write_u8(0);
                w.next().write_sequence(|w| {
                    w.next()
                        .write_oid(&ObjectIdentifier::from_slice(&[1, 2, 840, 10045, 2, 1]));
                    w.next().write_oid(&ObjectIdentifier::from_slice(P256_OID));
                });
                w.next().write_bytes(&sec1);
            })
        });
        let loaded = KeyPair::from_pkcs8_der_and_sign_algo(
            &pkcs8.as_slice().into(),
            &PKCS_ECDSA_P256_SHA256,
        )
        .unwrap();
        assert_eq!(loaded.public_key_raw(), public.as_slice());
    }

    #[test]
    fn every_call_makes_a_new_key() {
        let (a, _) = new_key_and_csr("n").unwrap();
        let (b, _) = new_key_and_csr("n").unwrap();
        assert_ne!(a, b);
    }
}
