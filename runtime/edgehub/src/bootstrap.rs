//! Certificate bootstrap from a join token, and rotation (`spec/kubeedge-compat.md` §2).
//!
//! When the node's certificate is missing, unreadable, expired or not issued to
//! `system:node:<node>`, the node fetches the cloud's CA, checks it against the hash in the join
//! token, makes a fresh ECDSA P-256 key and CSR, has the cloud sign it, and writes the three
//! files. The pieces here are pure (no network) so each is tested on its own:
//!
//! - [`parse_token`] / [`check_ca`]: the join token and the CA it vouches for;
//! - [`new_key_and_csr`]: the key (PEM `EC PRIVATE KEY`) and CSR (DER) to send;
//! - [`cert_status`] / [`rotation_due`]: whether the current certificate will do, and when to
//!   rotate it;
//! - [`write_files`]: replacing the files so a failure never leaves a half-written one;
//! - [`fetch_ca`], [`fetch_cert`] and [`bootstrap`]: the HTTPS steps, and the whole sequence;
//! - [`rotate`]: a new certificate, authenticated by the current one.

mod cert;
mod client;
mod files;
mod http;
mod key;
mod pem;
mod rotate;
mod token;

pub use cert::{CertStatus, cert_status, read_cert_status, rotation_due, rotation_fraction};
pub use client::{CertAuth, authority, bootstrap, fetch_ca, fetch_cert};
pub use files::{CertPaths, write_files};
pub use key::new_key_and_csr;
pub use pem::pem_encode;
pub use rotate::{rotate, rotation_retry_delay};
pub use token::{Token, check_ca, parse_token, parse_token_at};

use std::path::PathBuf;

/// Why a bootstrap step failed. Every variant says what to fix.
#[derive(Debug, thiserror::Error)]
pub enum BootstrapError {
    /// The join token is not `<ca hash>.<jwt header>.<jwt payload>.<jwt signature>`.
    #[error("invalid join token: {0}")]
    BadToken(String),
    /// The join token's `exp` has passed; a new token is needed from the cloud
    /// (`keadm gettoken`).
    #[error(
        "join token expired at unix time {expired_unix} ({ago_secs} s ago); get a new token from the cloud"
    )]
    TokenExpired {
        /// The token's `exp` claim, Unix seconds.
        expired_unix: i64,
        /// How long ago that was.
        ago_secs: u64,
    },
    /// The CA certificate the server sent is not the one the token names: possibly a server
    /// impersonating the cloud.
    #[error(
        "CA certificate hash {actual} does not match the join token's {expected}; refusing the CA"
    )]
    CaMismatch {
        /// The hash in the token.
        expected: String,
        /// The hash of the CA received.
        actual: String,
    },
    /// The key or the CSR could not be made.
    #[error("cannot create key or certificate request: {0}")]
    Key(String),
    /// A certificate, CA or key file could not be written.
    #[error("cannot write {path}: {source}")]
    Io {
        /// The file (or its temporary sibling).
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// A current certificate, CA or key file could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// A request to the cloud's certificate server failed (connection, TLS, HTTP).
    #[error("cannot fetch {url}: {reason}")]
    Http {
        /// The URL asked for.
        url: String,
        /// What went wrong, in words.
        reason: String,
    },
    /// The cloud answered with an error status (e.g. 401 for a token it does not accept).
    #[error("{url} refused: HTTP {status}: {body}")]
    Refused {
        /// The URL asked for.
        url: String,
        /// The HTTP status.
        status: u16,
        /// The response body (the cloud's reason).
        body: String,
    },
    /// The certificate the cloud issued is not usable for this node.
    #[error("the cloud issued an unusable certificate: {0}")]
    BadCertificate(String),
}
