//! `wedge.admin`: how the admin API (health, metrics, module deploys) is reached and what
//! bounds a client of it. Deploying a module runs code on the node, so the API is a unix socket
//! only its owner can open unless TCP is asked for, and then changes need a token.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::error::Violation;
use super::model::EdgeCoreConfig;

/// File name of the admin socket in the data directory (`wedge.admin.socket: ""`).
pub const ADMIN_SOCKET_FILE: &str = "admin.sock";
/// File name of the admin token in the data directory (`wedge.admin.tokenFile: ""`).
pub const ADMIN_TOKEN_FILE: &str = "admin.token";

/// `wedge.admin`: the admin API's transport, credentials and limits.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct AdminSettings {
    /// Unix socket path ("" = `<dataDir>/admin.sock`). Created mode 0600, so only the daemon's
    /// user (and root) can reach it; the data dir is per node, which keeps two nodes on one
    /// machine apart and lets `wedge module ...` find it from the same `--data-dir`.
    pub socket: String,
    /// File holding the bearer token that TCP clients must send for everything but `/healthz`
    /// and `/metrics` ("" = `<dataDir>/admin.token`). Created with a random token (mode 0600)
    /// when missing; one readable by other users is refused.
    pub token_file: String,
    /// Allows `wedge.adminAddr` on a non-loopback address. The API has no TLS, so the token
    /// would cross the network in clear; off unless the operator says the network is trusted.
    pub allow_insecure_remote: bool,
    /// Time a client has to send a request's headers (also how long an idle connection is
    /// kept), in ms; 100..=600000.
    pub header_timeout_ms: u32,
    /// Time a client has to send a request's body, in ms; 100..=3600000.
    pub body_timeout_ms: u32,
    /// Largest request body (a module file), in bytes; 1024..=1073741824.
    pub max_body_bytes: u32,
    /// Connections held at once per listener; 2..=65536. Past it the longest idle connection
    /// is closed, so a flood of idle sockets cannot keep health checks out.
    pub max_connections: u32,
}

impl Default for AdminSettings {
    fn default() -> Self {
        Self {
            socket: String::new(),
            token_file: String::new(),
            allow_insecure_remote: false,
            header_timeout_ms: 10_000,
            body_timeout_ms: 60_000,
            max_body_bytes: 64 << 20,
            max_connections: 128,
        }
    }
}

impl EdgeCoreConfig {
    /// The admin API's unix socket: `wedge.admin.socket`, or `<dataDir>/admin.sock`.
    pub fn admin_socket_path(&self) -> PathBuf {
        or_in_data_dir(
            &self.wedge.admin.socket,
            &self.data_dir(),
            ADMIN_SOCKET_FILE,
        )
    }

    /// The TCP clients' token file: `wedge.admin.tokenFile`, or `<dataDir>/admin.token`.
    pub fn admin_token_path(&self) -> PathBuf {
        or_in_data_dir(
            &self.wedge.admin.token_file,
            &self.data_dir(),
            ADMIN_TOKEN_FILE,
        )
    }
}

fn or_in_data_dir(configured: &str, data_dir: &Path, file: &str) -> PathBuf {
    if configured.is_empty() {
        data_dir.join(file)
    } else {
        PathBuf::from(configured)
    }
}

/// Longest unix socket path Linux binds (`sun_path` is 108 bytes with its NUL).
pub const MAX_SOCKET_PATH: usize = 107;

impl AdminSettings {
    /// Every broken rule of `wedge.admin` and `wedge.adminAddr` (`admin_addr`), so a bad value
    /// stops the start and `wedge config check` names the key.
    pub(crate) fn violations(&self, admin_addr: &str) -> Vec<Violation> {
        let mut out = Vec::new();
        let mut fail = |key: &str, message: String| {
            out.push(Violation {
                key: key.to_owned(),
                message,
            })
        };
        if !admin_addr.is_empty() {
            match admin_addr.parse::<SocketAddr>() {
                Err(e) => fail(
                    "wedge.adminAddr",
                    format!(
                        "must be empty (unix socket only) or a socket address like \
                         127.0.0.1:10240 or [::1]:10240 ({e}), got {admin_addr:?}"
                    ),
                ),
                Ok(addr) if !addr.ip().is_loopback() && !self.allow_insecure_remote => fail(
                    "wedge.adminAddr",
                    format!(
                        "{addr} is not a loopback address: the admin API has no TLS, so its \
                         token would cross the network in clear; use 127.0.0.1 or [::1] (and \
                         the unix socket for deploys), or set \
                         wedge.admin.allowInsecureRemote: true on a trusted network"
                    ),
                ),
                Ok(_) => {}
            }
        }
        if self.socket.len() > MAX_SOCKET_PATH {
            fail(
                "wedge.admin.socket",
                format!(
                    "unix socket paths are limited to {MAX_SOCKET_PATH} bytes, got {}",
                    self.socket.len()
                ),
            );
        }
        let ranges: [(&str, u32, u32, u32, &str); 4] = [
            (
                "wedge.admin.headerTimeoutMs",
                self.header_timeout_ms,
                100,
                600_000,
                "milliseconds",
            ),
            (
                "wedge.admin.bodyTimeoutMs",
                self.body_timeout_ms,
                100,
                3_600_000,
                "milliseconds",
            ),
            (
                "wedge.admin.maxBodyBytes",
                self.max_body_bytes,
                1024,
                1 << 30,
                "bytes",
            ),
            (
                "wedge.admin.maxConnections",
                self.max_connections,
                2,
                65_536,
                "connections per listener",
            ),
        ];
        for (key, value, lo, hi, unit) in ranges {
            if !(lo..=hi).contains(&value) {
                fail(key, format!("must be {lo}..={hi} ({unit}), got {value}"));
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(admin: &AdminSettings, addr: &str) -> Vec<String> {
        admin.violations(addr).into_iter().map(|v| v.key).collect()
    }

    #[test]
    fn defaults_and_loopback_pass() {
        let admin = AdminSettings::default();
        for addr in ["", "127.0.0.1:10240", "[::1]:1", "127.1.2.3:80"] {
            assert!(keys(&admin, addr).is_empty(), "{addr}");
        }
    }

    #[test]
    fn non_loopback_needs_the_opt_in() {
        let mut admin = AdminSettings::default();
        for addr in ["0.0.0.0:10240", "[::]:10240", "192.168.1.5:80"] {
            let v = admin.violations(addr);
            assert_eq!(v.len(), 1, "{addr}");
            assert_eq!(v[0].key, "wedge.adminAddr");
            assert!(v[0].message.contains("allowInsecureRemote"), "{}", v[0]);
        }
        admin.allow_insecure_remote = true;
        assert!(keys(&admin, "0.0.0.0:10240").is_empty());
        assert_eq!(keys(&admin, "nowhere"), ["wedge.adminAddr"]);
    }

    #[test]
    fn limits_are_checked() {
        let admin = AdminSettings {
            socket: "/x".repeat(60),
            header_timeout_ms: 0,
            body_timeout_ms: 50,
            max_body_bytes: 10,
            max_connections: 1,
            ..AdminSettings::default()
        };
        assert_eq!(
            keys(&admin, ""),
            [
                "wedge.admin.socket",
                "wedge.admin.headerTimeoutMs",
                "wedge.admin.bodyTimeoutMs",
                "wedge.admin.maxBodyBytes",
                "wedge.admin.maxConnections"
            ]
        );
    }
}
