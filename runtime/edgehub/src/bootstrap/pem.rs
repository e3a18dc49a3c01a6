//! PEM encoding (RFC 7468): what edgecore writes for the CA, the certificate and the key.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;

/// `der` as a PEM block with the given label (`CERTIFICATE`, `EC PRIVATE KEY`), 64 characters
/// a line, ending with a newline.
pub fn pem_encode(label: &str, der: &[u8]) -> String {
    let b64 = STANDARD.encode(der);
    let mut out = String::with_capacity(b64.len() + b64.len() / 64 + 2 * label.len() + 40);
    out.push_str("-----BEGIN ");
    out.push_str(label);
    out.push_str("-----\n");
    // Base64 text is ASCII, so cutting every 64 bytes never splits a character.
    for line in b64.as_bytes().chunks(64) {
        out.push_str(&String::from_utf8_lossy(line));
        out.push('\n');
    }
    out.push_str("-----END ");
    out.push_str(label);
    out.push_str("-----\n");
    out
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
    }
}
