//! Whether the node's certificate will do, and when to rotate it.

use std::hash::{BuildHasher, Hasher};
use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use x509_parser::pem::parse_x509_pem;

/// What the current certificate file holds, for the node `node`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CertStatus {
    /// There is no certificate: bootstrap.
    Missing,
    /// The file is not a PEM X.509 certificate: bootstrap.
    Unreadable(String),
    /// The certificate is for another identity (CN ≠ `system:node:<node>`): bootstrap.
    WrongCn {
        /// The CN found (empty when the subject has none).
        found: String,
    },
    /// The certificate's validity has ended: bootstrap (the cloud would refuse it).
    Expired {
        /// Its NotAfter.
        not_after: SystemTime,
    },
    /// Usable; rotate it some time before `not_after` (see [`rotation_due`]). A certificate
    /// whose NotBefore is still ahead counts as valid: that is a clock problem, and a new
    /// certificate would carry the same NotBefore.
    Valid {
        /// Its NotBefore.
        not_before: SystemTime,
        /// Its NotAfter.
        not_after: SystemTime,
    },
}

impl CertStatus {
    /// Whether the node must bootstrap (fetch a new certificate with the join token).
    pub fn needs_bootstrap(&self) -> bool {
        !matches!(self, CertStatus::Valid { .. })
    }
}

/// Checks a PEM certificate (the first block of `cert_pem`; empty means missing) for `node`.
pub fn cert_status(cert_pem: &[u8], node: &str, now: SystemTime) -> CertStatus {
    if cert_pem.iter().all(u8::is_ascii_whitespace) {
        return CertStatus::Missing;
    }
    let pem = match parse_x509_pem(cert_pem) {
        Ok((_, pem)) if pem.label == "CERTIFICATE" => pem,
        Ok((_, pem)) => {
            return CertStatus::Unreadable(format!(
                "PEM block is {:?}, not CERTIFICATE",
                pem.label
            ));
        }
        Err(e) => return CertStatus::Unreadable(format!("not PEM: {e}")),
    };
    let cert = match pem.parse_x509() {
        Ok(cert) => cert,
        Err(e) => return CertStatus::Unreadable(format!("not an X.509 certificate: {e}")),
    };
    let found = cert
        .subject()
        .iter_common_name()
        .next()
        .and_then(|cn| cn.as_str().ok())
        .unwrap_or_default();
    if found != format!("system:node:{node}") {
        return CertStatus::WrongCn {
            found: found.to_owned(),
        };
    }
    let validity = cert.validity();
    let not_before = to_system_time(validity.not_before.timestamp());
    let not_after = to_system_time(validity.not_after.timestamp());
    if now > not_after {
        return CertStatus::Expired { not_after };
    }
    CertStatus::Valid {
        not_before,
        not_after,
    }
}

/// [`cert_status`] of the file at `path`; a file that does not exist is [`CertStatus::Missing`].
pub fn read_cert_status(path: &Path, node: &str, now: SystemTime) -> CertStatus {
    match std::fs::read(path) {
        Ok(bytes) => cert_status(&bytes, node, now),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => CertStatus::Missing,
        Err(e) => CertStatus::Unreadable(format!("cannot read {}: {e}", path.display())),
    }
}

/// When to rotate a certificate: at NotBefore + `fraction` of its validity, `fraction` held to
/// KubeEdge's 70–90 % (pass [`rotation_fraction`] for a random point, so a fleet of nodes
/// issued together does not rotate together).
pub fn rotation_due(not_before: SystemTime, not_after: SystemTime, fraction: f64) -> SystemTime {
    let fraction = if fraction.is_nan() {
        0.7
    } else {
        fraction.clamp(0.7, 0.9)
    };
    let validity = not_after.duration_since(not_before).unwrap_or_default();
    not_before + validity.mul_f64(fraction)
}

/// A random fraction in [0.7, 0.9) for [`rotation_due`].
pub fn rotation_fraction() -> f64 {
    // The std hasher's per-instance random keys are randomness enough for spreading rotations.
    let random = std::collections::hash_map::RandomState::new()
        .build_hasher()
        .finish();
    0.7 + 0.2 * ((random >> 11) as f64 / (1u64 << 53) as f64)
}

fn to_system_time(unix: i64) -> SystemTime {
    if unix >= 0 {
        UNIX_EPOCH + Duration::from_secs(unix as u64)
    } else {
        UNIX_EPOCH - Duration::from_secs(unix.unsigned_abs())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rcgen::{CertificateParams, DnType, KeyPair, date_time_ymd};

    fn unix(y: i32, m: u8, d: u8) -> SystemTime {
        to_system_time(date_time_ymd(y, m, d).unix_timestamp())
    }

    /// A certificate for `cn`, valid 2030-01-01 to 2031-01-01, signed by a fresh CA.
    fn cert(cn: Option<&str>) -> String {
        let ca_key = KeyPair::generate().unwrap();
        let mut ca = CertificateParams::default();
        ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let issuer = rcgen::Issuer::new(ca, ca_key);
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::default();
        params.distinguished_name = rcgen::DistinguishedName::new();
        params
            .distinguished_name
            .push(DnType::OrganizationName, "system:nodes");
        if let Some(cn) = cn {
            params.distinguished_name.push(DnType::CommonName, cn);
        }
        params.not_before = date_time_ymd(2030, 1, 1);
        params.not_after = date_time_ymd(2031, 1, 1);
        params.signed_by(&key, &issuer).unwrap().pem()
    }

    #[test]
    fn valid_certificate() {
        let pem = cert(Some("system:node:edge-1"));
        let status = cert_status(pem.as_bytes(), "edge-1", unix(2030, 6, 1));
        assert_eq!(
            status,
            CertStatus::Valid {
                not_before: unix(2030, 1, 1),
                not_after: unix(2031, 1, 1)
            }
        );
        assert!(!status.needs_bootstrap());
        // Not yet valid is still the right certificate (a clock problem).
        assert!(matches!(
            cert_status(pem.as_bytes(), "edge-1", unix(2029, 1, 1)),
            CertStatus::Valid { .. }
        ));
    }

    #[test]
    fn expired_certificate() {
        let pem = cert(Some("system:node:edge-1"));
        let status = cert_status(pem.as_bytes(), "edge-1", unix(2031, 1, 2));
        assert_eq!(
            status,
            CertStatus::Expired {
                not_after: unix(2031, 1, 1)
            }
        );
        assert!(status.needs_bootstrap());
    }

    #[test]
    fn wrong_or_missing_cn() {
        let now = unix(2030, 6, 1);
        let pem = cert(Some("system:node:edge-2"));
        assert_eq!(
            cert_status(pem.as_bytes(), "edge-1", now),
            CertStatus::WrongCn {
                found: "system:node:edge-2".to_owned()
            }
        );
        assert_eq!(
            cert_status(cert(Some("edge-1")).as_bytes(), "edge-1", now),
            CertStatus::WrongCn {
                found: "edge-1".to_owned()
            }
        );
        assert_eq!(
            cert_status(cert(None).as_bytes(), "edge-1", now),
            CertStatus::WrongCn {
                found: String::new()
            }
        );
    }

    #[test]
    fn missing_and_unreadable() {
        let now = unix(2030, 6, 1);
        assert_eq!(cert_status(b"", "n", now), CertStatus::Missing);
        assert_eq!(cert_status(b" \n", "n", now), CertStatus::Missing);
        assert!(matches!(
            cert_status(b"garbage", "n", now),
            CertStatus::Unreadable(ref why) if why.starts_with("not PEM: ")
        ));
        let key = KeyPair::generate().unwrap().serialize_pem();
        assert_eq!(
            cert_status(key.as_bytes(), "n", now),
            CertStatus::Unreadable("PEM block is \"PRIVATE KEY\", not CERTIFICATE".to_owned())
        );
        let fake = super::super::pem_encode("CERTIFICATE", b"not der");
        assert!(matches!(
            cert_status(fake.as_bytes(), "n", now),
            CertStatus::Unreadable(ref why) if why.starts_with("not an X.509 certificate: ")
        ));

        let dir = tempfile::tempdir().unwrap();
        assert_eq!(
            read_cert_status(&dir.path().join("none.crt"), "n", now),
            CertStatus::Missing
        );
        let path = dir.path().join("edge.crt");
        std::fs::write(&path, cert(Some("system:node:n"))).unwrap();
        assert!(matches!(
            read_cert_status(&path, "n", now),
            CertStatus::Valid { .. }
        ));
    }

    #[test]
    fn rotation_between_70_and_90_percent() {
        let nb = UNIX_EPOCH + Duration::from_secs(1_000_000);
        let na = nb + Duration::from_secs(1000);
        assert_eq!(rotation_due(nb, na, 0.8), nb + Duration::from_secs(800));
        assert_eq!(rotation_due(nb, na, 0.1), nb + Duration::from_secs(700));
        assert_eq!(rotation_due(nb, na, 2.0), nb + Duration::from_secs(900));
        assert_eq!(
            rotation_due(nb, na, f64::NAN),
            nb + Duration::from_secs(700)
        );
        // An inverted validity rotates at once.
        assert_eq!(rotation_due(na, nb, 0.8), na);
        for _ in 0..100 {
            let f = rotation_fraction();
            assert!((0.7..0.9).contains(&f), "{f}");
        }
    }
}
