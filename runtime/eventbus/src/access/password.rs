//! Stored passwords (PBKDF2-HMAC-SHA256) and the work of checking one.
//!
//! Checking costs milliseconds by design. That cost must not depend on whether the user
//! exists: an unknown name is checked against a dummy hash as costly as the costliest stored
//! one, and a user whose hash is cheaper is padded up to it, so the time of a refusal tells
//! nothing about the name.

use std::num::NonZeroU32;
use std::path::PathBuf;

use base64::Engine as _;

use super::AccessError;

/// The fewest PBKDF2 iterations a stored hash may use: fewer would make a stolen file cheap to
/// crack.
pub const MIN_ITERATIONS: u32 = 1_000;

/// Bytes of one PBKDF2-HMAC-SHA256 block: a derived key costs its iterations once per block.
const BLOCK: usize = 32;

/// The dummy hash's salt: never compared with anything, so it need not be secret.
const DUMMY_SALT: &[u8] = b"wedge-dummy-salt";

/// A stored password: PBKDF2-HMAC-SHA256 parameters and the derived key (`derive` makes one).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PasswordHash {
    iterations: NonZeroU32,
    salt: Vec<u8>,
    key: Vec<u8>,
}

impl PasswordHash {
    /// Parses `pbkdf2-sha256$<iterations>$<salt b64>$<key b64>`.
    pub(crate) fn parse(text: &str) -> Result<PasswordHash, String> {
        let b64 = base64::engine::general_purpose::STANDARD;
        let parts: Vec<&str> = text.split('$').collect();
        let [scheme, iterations, salt, key] = parts.as_slice() else {
            return Err("passwordHash must be pbkdf2-sha256$<iterations>$<salt>$<key>".into());
        };
        if *scheme != "pbkdf2-sha256" {
            return Err(format!(
                "passwordHash scheme {scheme:?} is not supported; use pbkdf2-sha256"
            ));
        }
        let iterations: u32 = iterations
            .parse()
            .map_err(|_| format!("passwordHash iterations {iterations:?} is not a number"))?;
        if iterations < MIN_ITERATIONS {
            return Err(format!(
                "passwordHash uses {iterations} iterations; at least {MIN_ITERATIONS} are required"
            ));
        }
        let salt = b64
            .decode(salt)
            .map_err(|e| format!("passwordHash salt: {e}"))?;
        let key = b64
            .decode(key)
            .map_err(|e| format!("passwordHash key: {e}"))?;
        if salt.len() < 8 || key.len() < 16 {
            return Err("passwordHash salt (>= 8 bytes) or key (>= 16 bytes) too short".into());
        }
        Ok(PasswordHash {
            iterations: NonZeroU32::new(iterations).unwrap_or(NonZeroU32::MIN),
            salt,
            key,
        })
    }

    /// Makes the stored form of `password` with `salt` (for tests and for the tool that
    /// writes users files).
    pub fn derive(password: &[u8], salt: &[u8], iterations: u32) -> String {
        let b64 = base64::engine::general_purpose::STANDARD;
        let iterations = NonZeroU32::new(iterations.max(MIN_ITERATIONS)).unwrap_or(NonZeroU32::MIN);
        let mut key = [0u8; BLOCK];
        ring::pbkdf2::derive(
            ring::pbkdf2::PBKDF2_HMAC_SHA256,
            iterations,
            salt,
            password,
            &mut key,
        );
        format!(
            "pbkdf2-sha256${iterations}${}${}",
            b64.encode(salt),
            b64.encode(key)
        )
    }

    /// Makes the stored form of `password` with a fresh 16-byte random salt.
    pub fn with_random_salt(password: &[u8], iterations: u32) -> Result<String, AccessError> {
        use ring::rand::SecureRandom;
        let mut salt = [0u8; 16];
        ring::rand::SystemRandom::new()
            .fill(&mut salt)
            .map_err(|_| AccessError::Invalid {
                path: PathBuf::new(),
                reason: "the system's random source failed".to_owned(),
            })?;
        Ok(PasswordHash::derive(password, &salt, iterations))
    }

    /// Whether `password` is the one stored (constant time).
    pub(crate) fn verify(&self, password: &[u8]) -> bool {
        ring::pbkdf2::verify(
            ring::pbkdf2::PBKDF2_HMAC_SHA256,
            self.iterations,
            &self.salt,
            password,
            &self.key,
        )
        .is_ok()
    }

    /// What checking a password against this hash costs, in PBKDF2 block iterations.
    pub(crate) fn cost(&self) -> u64 {
        u64::from(self.iterations.get()) * self.key.len().div_ceil(BLOCK) as u64
    }

    /// A hash that costs as much to check against as `like` and that no password is meant to
    /// match: what unknown user names are checked against.
    pub(crate) fn dummy_like(like: &PasswordHash) -> PasswordHash {
        PasswordHash {
            iterations: like.iterations,
            salt: DUMMY_SALT.to_vec(),
            key: vec![0; like.key.len()],
        }
    }
}

/// How a user proves who it is.
#[derive(Debug, Clone)]
pub(crate) enum Secret {
    /// A PBKDF2 hash from the users file.
    Hash(PasswordHash),
    /// KubeEdge's `mqttPassword`, which its config holds in clear.
    Clear(Vec<u8>),
}

impl Secret {
    /// Whether `password` is KubeEdge's clear password (constant time); always false for a
    /// hash, which needs the PBKDF2 work of a [`Check`].
    pub(crate) fn clear_matches(&self, password: &[u8]) -> bool {
        match self {
            // Compared as digests, so neither the length nor the first differing byte shows in
            // the time taken.
            Secret::Clear(expected) => {
                sha256(expected)
                    .iter()
                    .zip(sha256(password))
                    .fold(0u8, |acc, (a, b)| acc | (a ^ b))
                    == 0
            }
            Secret::Hash(_) => false,
        }
    }
}

/// The PBKDF2 work of one password check: verifying against a hash, then padding up to the
/// policy's costliest hash.
#[derive(Debug, Clone)]
pub(crate) struct Check {
    /// What the password is verified against.
    hash: PasswordHash,
    /// Extra block iterations run after, so every check costs the same.
    pad: u32,
    /// Whether a match means the password is right (false for the dummy).
    counts: bool,
}

impl Check {
    /// Checks against a user's stored hash, padded up to `max_cost`.
    pub(crate) fn user(hash: &PasswordHash, max_cost: u64) -> Check {
        let pad = max_cost.saturating_sub(hash.cost());
        Check {
            hash: hash.clone(),
            pad: u32::try_from(pad).unwrap_or(u32::MAX),
            counts: true,
        }
    }

    /// The same work against the dummy hash, never right: for unknown user names and for a
    /// wrong clear password.
    pub(crate) fn dummy(dummy: &PasswordHash) -> Check {
        Check {
            hash: dummy.clone(),
            pad: 0,
            counts: false,
        }
    }

    /// Does the work (milliseconds: call it off the async threads); whether the password is
    /// right.
    pub(crate) fn run(&self, password: &[u8]) -> bool {
        let matched = self.hash.verify(password);
        if let Some(pad) = NonZeroU32::new(self.pad) {
            let mut sink = [0u8; BLOCK];
            ring::pbkdf2::derive(
                ring::pbkdf2::PBKDF2_HMAC_SHA256,
                pad,
                DUMMY_SALT,
                password,
                &mut sink,
            );
            std::hint::black_box(&sink);
        }
        matched && self.counts
    }
}

/// SHA-256 of `bytes`.
pub(crate) fn sha256(bytes: &[u8]) -> [u8; 32] {
    let d = ring::digest::digest(&ring::digest::SHA256, bytes);
    let mut out = [0u8; 32];
    out.copy_from_slice(d.as_ref());
    out
}
