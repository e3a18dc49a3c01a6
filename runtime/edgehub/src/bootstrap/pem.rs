//! PEM encoding (RFC 7468): what edgecore writes for the CA, the certificate and the key.

use pem::{EncodeConfig, LineEnding, Pem};

/// `der` as a PEM block with the given label (`CERTIFICATE`, `EC PRIVATE KEY`), 64 characters
/// a line, ending with a newline: Go's `pem.Encode`, as edgecore uses it (LF line endings, no
/// headers).
pub fn pem_encode(label: &str, der: &[u8]) -> String {
    pem::encode_config(
        &Pem::new(label, der),
        EncodeConfig::new().set_line_ending(LineEnding::LF),
    )
}

#[cfg(test)]
mod tests {
    use super::pem_encode;

    #[test]
    fn wraps_at_64_and_labels() {
        let pem = pem_encode("CERTIFICATE", &[0u8; 60]);
        let lines: Vec<&str> = pem.lines().collect();
        assert_eq!(lines[0], "-----BEGIN CERTIFICATE-----");
        assert_eq!(lines[1], "A".repeat(64));
        assert_eq!(lines[2], "A".repeat(16));
        assert_eq!(lines[3], "-----END CERTIFICATE-----");
        assert_eq!(lines.len(), 4);
        assert!(pem.ends_with("-----\n"));
        assert!(!pem.contains('\r'));
    }

    #[test]
    fn byte_exact() {
        assert_eq!(
            pem_encode("EC PRIVATE KEY", b"\x01\x02\x03"),
            "-----BEGIN EC PRIVATE KEY-----\nAQID\n-----END EC PRIVATE KEY-----\n"
        );
        // Exactly one full line, and nothing at all.
        assert_eq!(
            pem_encode("CERTIFICATE", &[0xff; 48]),
            format!(
                "-----BEGIN CERTIFICATE-----\n{}\n-----END CERTIFICATE-----\n",
                "/".repeat(64)
            )
        );
        assert_eq!(
            pem_encode("CERTIFICATE", b""),
            "-----BEGIN CERTIFICATE-----\n-----END CERTIFICATE-----\n"
        );
    }
}
