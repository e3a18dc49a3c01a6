//! The join token: `<hex sha256 of the CA DER>.<jwt header>.<jwt payload>.<jwt signature>`.
//!
//! The JWT (parts 2–4) is the bearer credential for `/edge.crt`; its HS256 signature is the
//! cloud's to verify (we do not hold the secret). We only read its `exp` so that an expired token
//! is refused here, with a clear error, instead of by an opaque 401 from the cloud.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use sha2::{Digest, Sha256};

use super::BootstrapError;

/// A parsed join token. Its `Debug` form hides the bearer, so it cannot leak into logs.
#[derive(Clone, PartialEq, Eq)]
pub struct Token {
    /// The expected SHA-256 of the CA certificate's DER, lowercase hex.
    pub ca_hash: String,
    /// The JWT to send as `Authorization: Bearer <jwt>`.
    pub bearer: String,
    /// The JWT's `exp`, when it has one.
    pub expires: Option<SystemTime>,
}

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Token")
            .field("ca_hash", &self.ca_hash)
            .field("bearer", &"<redacted>")
            .field("expires", &self.expires)
            .finish()
    }
}

/// Parses a join token and refuses it if it has expired (against the system clock).
pub fn parse_token(token: &str) -> Result<Token, BootstrapError> {
    parse_token_at(token, SystemTime::now())
}

/// [`parse_token`] with an explicit current time.
pub fn parse_token_at(token: &str, now: SystemTime) -> Result<Token, BootstrapError> {
    let bad = |why: &str| BootstrapError::BadToken(why.to_owned());
    let token = token.trim();
    let parts: Vec<&str> = token.split('.').collect();
    if parts.len() != 4 || parts.iter().any(|p| p.is_empty()) {
        return Err(bad(
            "expected 4 non-empty parts separated by '.' (CA hash, then a JWT)",
        ));
    }
    let ca_hash = parts[0];
    if ca_hash.len() != 64 || !ca_hash.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(bad(
            "the first part must be the CA certificate's SHA-256 in hex (64 characters)",
        ));
    }
    // JWTs use unpadded base64url; tolerate padding anyway.
    let payload = URL_SAFE_NO_PAD
        .decode(parts[2].trim_end_matches('='))
        .map_err(|e| bad(&format!("JWT payload is not base64url: {e}")))?;
    let claims: serde_json::Value = serde_json::from_slice(&payload)
        .map_err(|e| bad(&format!("JWT payload is not JSON: {e}")))?;
    if !claims.is_object() {
        return Err(bad("JWT payload is not a JSON object"));
    }
    let expires = match claims.get("exp") {
        None | Some(serde_json::Value::Null) => None,
        Some(exp) => {
            // NumericDate may carry a fraction; whole seconds are what matter here.
            let secs = exp
                .as_f64()
                .ok_or_else(|| bad("JWT claim exp is not a number"))?
                .floor() as i64;
            let at = unix_to_system_time(secs);
            if at <= now {
                let ago = now.duration_since(at).unwrap_or_default().as_secs();
                return Err(BootstrapError::TokenExpired {
                    expired_unix: secs,
                    ago_secs: ago,
                });
            }
            Some(at)
        }
    };
    Ok(Token {
        ca_hash: ca_hash.to_ascii_lowercase(),
        bearer: parts[1..].join("."),
        expires,
    })
}

/// Checks that `ca_der` is the CA certificate the token names.
pub fn check_ca(token: &Token, ca_der: &[u8]) -> Result<(), BootstrapError> {
    let actual = hex(&Sha256::digest(ca_der));
    if actual == token.ca_hash {
        Ok(())
    } else {
        Err(BootstrapError::CaMismatch {
            expected: token.ca_hash.clone(),
            actual,
        })
    }
}

fn unix_to_system_time(secs: i64) -> SystemTime {
    if secs >= 0 {
        UNIX_EPOCH + Duration::from_secs(secs as u64)
    } else {
        UNIX_EPOCH - Duration::from_secs(secs.unsigned_abs())
    }
}

fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        out.push(DIGITS[usize::from(b >> 4)] as char);
        out.push(DIGITS[usize::from(b & 0xf)] as char);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: u64 = 1_800_000_000;

    fn now() -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(NOW)
    }

    fn jwt(claims: &str) -> String {
        format!(
            "{}.{}.c2lnbmF0dXJl",
            URL_SAFE_NO_PAD.encode(r#"{"alg":"HS256","typ":"JWT"}"#),
            URL_SAFE_NO_PAD.encode(claims)
        )
    }

    fn ca_der() -> Vec<u8> {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::default();
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params.self_signed(&key).unwrap().der().to_vec()
    }

    #[test]
    fn parses_hash_bearer_and_expiry() {
        let ca = ca_der();
        let hash = hex(&Sha256::digest(&ca));
        let bearer = jwt(&format!(r#"{{"exp":{}}}"#, NOW + 3600));
        let token = parse_token_at(&format!("{}.{bearer}\n", hash.to_uppercase()), now()).unwrap();
        assert_eq!(token.ca_hash, hash);
        assert_eq!(token.bearer, bearer);
        assert_eq!(
            token.expires,
            Some(UNIX_EPOCH + Duration::from_secs(NOW + 3600))
        );
        check_ca(&token, &ca).unwrap();
        let debug = format!("{token:?}");
        assert!(
            debug.contains("<redacted>") && !debug.contains(&bearer),
            "{debug}"
        );
    }

    #[test]
    fn refuses_expired_token() {
        let token = format!(
            "{}.{}",
            "ab".repeat(32),
            jwt(&format!(r#"{{"exp":{}}}"#, NOW - 90))
        );
        let err = parse_token_at(&token, now()).unwrap_err();
        assert_eq!(
            err.to_string(),
            format!(
                "join token expired at unix time {} (90 s ago); get a new token from the cloud",
                NOW - 90
            )
        );
        // Exactly at exp counts as expired, as in JWT validation.
        let at = format!(
            "{}.{}",
            "ab".repeat(32),
            jwt(&format!(r#"{{"exp":{NOW}}}"#))
        );
        assert!(matches!(
            parse_token_at(&at, now()),
            Err(BootstrapError::TokenExpired { ago_secs: 0, .. })
        ));
    }

    #[test]
    fn token_without_exp_is_left_to_the_cloud() {
        let token = format!("{}.{}", "ab".repeat(32), jwt(r#"{"sub":"edge"}"#));
        assert_eq!(parse_token_at(&token, now()).unwrap().expires, None);
    }

    #[test]
    fn refuses_malformed_tokens() {
        let hash = "ab".repeat(32);
        let good = jwt(&format!(r#"{{"exp":{}}}"#, NOW + 10));
        let cases = [
            (
                good.clone(),
                "expected 4 non-empty parts separated by '.' (CA hash, then a JWT)",
            ),
            (
                format!("{hash}.{good}.x"),
                "expected 4 non-empty parts separated by '.' (CA hash, then a JWT)",
            ),
            (
                format!("{hash}..x.y"),
                "expected 4 non-empty parts separated by '.' (CA hash, then a JWT)",
            ),
            (
                format!("abc.{good}"),
                "the first part must be the CA certificate's SHA-256 in hex (64 characters)",
            ),
            (
                format!("{}.{good}", "zz".repeat(32)),
                "the first part must be the CA certificate's SHA-256 in hex (64 characters)",
            ),
            (
                format!("{hash}.h.!!!.s"),
                "JWT payload is not base64url: Invalid symbol 33, offset 0.",
            ),
            (
                format!("{hash}.h.{}.s", URL_SAFE_NO_PAD.encode("nope")),
                "JWT payload is not JSON: expected ident at line 1 column 2",
            ),
            (
                format!("{hash}.h.{}.s", URL_SAFE_NO_PAD.encode("[1]")),
                "JWT payload is not a JSON object",
            ),
            (
                format!("{hash}.h.{}.s", URL_SAFE_NO_PAD.encode(r#"{"exp":"soon"}"#)),
                "JWT claim exp is not a number",
            ),
        ];
        for (token, why) in cases {
            let err = parse_token_at(&token, now()).unwrap_err();
            assert_eq!(
                err.to_string(),
                format!("invalid join token: {why}"),
                "{token}"
            );
        }
    }

    #[test]
    fn refuses_a_different_ca() {
        let (ca, other) = (ca_der(), ca_der());
        let hash = hex(&Sha256::digest(&ca));
        let token = parse_token_at(&format!("{hash}.{}", jwt("{}")), now()).unwrap();
        let err = check_ca(&token, &other).unwrap_err();
        assert_eq!(
            err.to_string(),
            format!(
                "CA certificate hash {} does not match the join token's {hash}; refusing the CA",
                hex(&Sha256::digest(&other))
            )
        );
    }
}
