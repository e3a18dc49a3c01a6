//! Who may use the embedded broker, and for which topics.
//!
//! By default (KubeEdge's behaviour) any client may connect without a user name and publish or
//! subscribe to everything; the broker then says so at start. That lets any local process read
//! every device's traffic, answer mappers in devicetwin's name (`twin/update/result`), set
//! desired values, or have a will message taken as a twin update. A users file
//! (`wedge.mqtt.usersFile`) closes it:
//!
//! ```yaml
//! users:
//! - name: thermo-mapper
//!   # pbkdf2-sha256$<iterations>$<salt, base64>$<derived key, base64> (see README)
//!   passwordHash: "pbkdf2-sha256$100000$c2FsdHNhbHQ=$..."
//!   publish: ["$hw/events/device/default/thermo-1/#"]
//!   subscribe: ["$hw/events/device/default/thermo-1/#"]
//! anonymous:          # optional: what clients without a user name may do; absent = refused
//!   subscribe: ["$hw/events/node/+/membership/get/result"]
//! ```
//!
//! Patterns are MQTT filters (`+`, `#`) in which `%u` stands for the user name and `%c` for the
//! client id. A PUBLISH (and a will, checked at CONNECT) needs a `publish` pattern matching its
//! topic; a SUBSCRIBE filter needs a `subscribe` pattern that covers every topic it could
//! match. KubeEdge's `mqttUsername`/`mqttPassword` stay a user allowed everything.
//!
//! Passwords are stored as PBKDF2-HMAC-SHA256 (never in clear): checking one costs milliseconds
//! by design, so checks run one at a time off the async threads, and a password that was right
//! once is remembered (by its SHA-256) so a mapper's reconnects cost nothing.

use std::collections::{HashMap, HashSet};
use std::num::NonZeroU32;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use base64::Engine as _;
use serde::Deserialize;

use crate::settings::Credentials;
use crate::topics::valid_filter;

/// The fewest PBKDF2 iterations a stored hash may use: fewer would make a stolen file cheap to
/// crack.
pub const MIN_ITERATIONS: u32 = 1_000;

/// Why a users file cannot be used; the message names the file and the entry.
#[derive(Debug, thiserror::Error)]
pub enum AccessError {
    /// The file cannot be read.
    #[error("MQTT users file {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// Other users may read it: its password hashes would be theirs to attack.
    #[error(
        "MQTT users file {path} is readable by other users (mode {mode:o}); chmod 600 it (or 640 for a group the daemon's user shares)"
    )]
    Exposed {
        /// The file.
        path: PathBuf,
        /// Its permission bits.
        mode: u32,
    },
    /// It is not a valid users file.
    #[error("MQTT users file {path}: {reason}")]
    Invalid {
        /// The file.
        path: PathBuf,
        /// What is wrong, naming the entry.
        reason: String,
    },
}

/// What a client may publish and subscribe to.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Acl {
    /// Topic patterns it may publish to (and use as its will).
    #[serde(default)]
    pub publish: Vec<String>,
    /// Topic patterns it may subscribe within.
    #[serde(default)]
    pub subscribe: Vec<String>,
}

impl Acl {
    /// Everything: the access of an anonymous client when no users file is set (KubeEdge's
    /// default), and of KubeEdge's `mqttUsername`.
    pub fn everything() -> Acl {
        Acl {
            publish: vec!["#".to_owned()],
            subscribe: vec!["#".to_owned()],
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct UserEntry {
    name: String,
    #[serde(default)]
    password_hash: String,
    #[serde(default)]
    password: Option<String>,
    #[serde(flatten)]
    acl: Acl,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct UsersFile {
    #[serde(default)]
    users: Vec<UserEntry>,
    #[serde(default)]
    anonymous: Option<Acl>,
}

/// A stored password: PBKDF2-HMAC-SHA256 parameters and the derived key (`derive` makes one).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PasswordHash {
    iterations: NonZeroU32,
    salt: Vec<u8>,
    key: Vec<u8>,
}

impl PasswordHash {
    /// Parses `pbkdf2-sha256$<iterations>$<salt b64>$<key b64>`.
    fn parse(text: &str) -> Result<PasswordHash, String> {
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
        let mut key = [0u8; 32];
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
    fn verify(&self, password: &[u8]) -> bool {
        ring::pbkdf2::verify(
            ring::pbkdf2::PBKDF2_HMAC_SHA256,
            self.iterations,
            &self.salt,
            password,
            &self.key,
        )
        .is_ok()
    }
}

/// How a user proves who it is.
#[derive(Debug, Clone)]
enum Secret {
    /// A PBKDF2 hash from the users file.
    Hash(PasswordHash),
    /// KubeEdge's `mqttPassword`, which its config holds in clear.
    Clear(Vec<u8>),
}

#[derive(Debug, Clone)]
struct User {
    secret: Secret,
    acl: Acl,
}

/// A user name and the SHA-256 of a password that verified for it.
type VerifiedLogin = (String, [u8; 32]);

/// Who may connect to the embedded broker and what each client may do.
#[derive(Debug, Clone)]
pub struct AccessPolicy {
    users: HashMap<String, User>,
    /// What clients without a user name may do; `None`: they are refused.
    anonymous: Option<Acl>,
    /// SHA-256 of passwords that verified, per user: reconnects skip PBKDF2.
    verified: Arc<Mutex<HashSet<VerifiedLogin>>>,
    /// One PBKDF2 check at a time, so a storm of bad log-ins costs one core at most.
    checking: Arc<tokio::sync::Semaphore>,
}

/// Why a CONNECT is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// Unknown user, wrong password, or no user name where one is required
    /// (CONNACK `BadUserNamePassword`).
    BadCredentials,
    /// The will's topic is outside the client's `publish` patterns (CONNACK `NotAuthorized`).
    WillNotAllowed,
}

/// What one connected client may do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    /// Its publish patterns, `%u`/`%c` substituted.
    publish: Vec<String>,
    /// Its subscribe patterns, substituted.
    subscribe: Vec<String>,
    /// Who it is, for logs (`""` for anonymous).
    pub user: String,
}

impl AccessPolicy {
    /// Anyone may connect and do anything (KubeEdge's embedded broker).
    pub fn open() -> AccessPolicy {
        AccessPolicy::new(HashMap::new(), Some(Acl::everything()))
    }

    fn new(users: HashMap<String, User>, anonymous: Option<Acl>) -> AccessPolicy {
        AccessPolicy {
            users,
            anonymous,
            verified: Arc::new(Mutex::new(HashSet::new())),
            checking: Arc::new(tokio::sync::Semaphore::new(1)),
        }
    }

    /// The policy of a node: KubeEdge's `mqttUsername`/`mqttPassword` (one user allowed
    /// everything, anonymous refused), the users of `users_file`, or, with neither, anyone.
    pub fn build(
        kubeedge: Option<&Credentials>,
        users_file: Option<&Path>,
    ) -> Result<AccessPolicy, AccessError> {
        let (mut users, anonymous) = match users_file {
            Some(path) => read_users_file(path)?,
            None if kubeedge.is_some() => (HashMap::new(), None),
            None => return Ok(AccessPolicy::open()),
        };
        if let Some(c) = kubeedge {
            users.insert(
                c.username.clone(),
                User {
                    secret: Secret::Clear(c.password.clone().into_bytes()),
                    acl: Acl::everything(),
                },
            );
        }
        Ok(AccessPolicy::new(users, anonymous))
    }

    /// What anonymous clients may do, for the line the broker logs at start.
    pub fn anonymous(&self) -> Option<&Acl> {
        self.anonymous.as_ref()
    }

    /// How many named users may log in.
    pub fn user_count(&self) -> usize {
        self.users.len()
    }

    /// Checks a CONNECT: its log-in (`None`: no user name) and its will topic. On success,
    /// what the client may do.
    pub async fn admit(
        &self,
        login: Option<(&str, &str)>,
        client_id: &str,
        will_topic: Option<&str>,
    ) -> Result<Grant, Refusal> {
        let (user, acl) = match login {
            None => match &self.anonymous {
                Some(acl) => ("", acl),
                None => return Err(Refusal::BadCredentials),
            },
            Some((name, password)) => {
                let Some(user) = self.users.get(name) else {
                    return Err(Refusal::BadCredentials);
                };
                if !self.password_ok(name, user, password.as_bytes()).await {
                    return Err(Refusal::BadCredentials);
                }
                (name, &user.acl)
            }
        };
        let substitute = |p: &String| p.replace("%u", user).replace("%c", client_id);
        let grant = Grant {
            publish: acl.publish.iter().map(substitute).collect(),
            subscribe: acl.subscribe.iter().map(substitute).collect(),
            user: user.to_owned(),
        };
        if let Some(topic) = will_topic
            && !grant.may_publish(topic)
        {
            return Err(Refusal::WillNotAllowed);
        }
        Ok(grant)
    }

    async fn password_ok(&self, name: &str, user: &User, password: &[u8]) -> bool {
        match &user.secret {
            // Compared as digests, so neither the length nor the first differing byte shows
            // in the time taken.
            Secret::Clear(expected) => {
                sha256(expected)
                    .iter()
                    .zip(sha256(password))
                    .fold(0u8, |acc, (a, b)| acc | (a ^ b))
                    == 0
            }
            Secret::Hash(hash) => {
                let digest = sha256(password);
                let key = (name.to_owned(), digest);
                let known = self
                    .verified
                    .lock()
                    .map(|v| v.contains(&key))
                    .unwrap_or(false);
                if known {
                    return true;
                }
                let Ok(_turn) = self.checking.acquire().await else {
                    return false;
                };
                let (hash, password) = (hash.clone(), password.to_vec());
                let ok = tokio::task::spawn_blocking(move || hash.verify(&password))
                    .await
                    .unwrap_or(false);
                if ok && let Ok(mut v) = self.verified.lock() {
                    v.insert(key);
                }
                ok
            }
        }
    }
}

/// SHA-256 of `bytes`.
fn sha256(bytes: &[u8]) -> [u8; 32] {
    let d = ring::digest::digest(&ring::digest::SHA256, bytes);
    let mut out = [0u8; 32];
    out.copy_from_slice(d.as_ref());
    out
}

impl Grant {
    /// Everything (the broker's own in-process client).
    pub fn everything() -> Grant {
        Grant {
            publish: vec!["#".to_owned()],
            subscribe: vec!["#".to_owned()],
            user: String::new(),
        }
    }

    /// Whether the client may publish to `topic`.
    pub fn may_publish(&self, topic: &str) -> bool {
        self.publish.iter().any(|p| covers(p, topic))
    }

    /// Whether the client may subscribe to `filter`: some pattern covers every topic the
    /// filter could match.
    pub fn may_subscribe(&self, filter: &str) -> bool {
        self.subscribe.iter().any(|p| covers(p, filter))
    }
}

/// Whether pattern `pattern` covers `filter` (a topic, or a filter with wildcards): every
/// topic `filter` matches, `pattern` matches too. `+` in the filter needs `+` or `#` in the
/// pattern at that level, `#` needs `#`. Unlike subscription matching, `#` and `+` here also
/// cover `$`-topics: an ACL names what it grants.
pub fn covers(pattern: &str, filter: &str) -> bool {
    let mut p = pattern.split('/');
    let mut f = filter.split('/');
    loop {
        match (p.next(), f.next()) {
            (Some("#"), _) => return true,
            (Some("+"), Some(level)) if level != "#" => {}
            (Some(a), Some(b)) if a == b && a != "+" && a != "#" => {}
            (None, None) => return true,
            _ => return false,
        }
    }
}

/// Reads and checks a users file.
fn read_users_file(path: &Path) -> Result<(HashMap<String, User>, Option<Acl>), AccessError> {
    use std::os::unix::fs::PermissionsExt;
    let read = |source| AccessError::Read {
        path: path.to_owned(),
        source,
    };
    let meta = std::fs::metadata(path).map_err(read)?;
    let mode = meta.permissions().mode() & 0o777;
    if mode & 0o007 != 0 {
        return Err(AccessError::Exposed {
            path: path.to_owned(),
            mode,
        });
    }
    let text = std::fs::read_to_string(path).map_err(read)?;
    let invalid = |reason: String| AccessError::Invalid {
        path: path.to_owned(),
        reason,
    };
    let file: UsersFile = serde_norway::from_str(&text).map_err(|e| invalid(e.to_string()))?;
    let mut users = HashMap::new();
    let check_acl = |who: &str, acl: &Acl| -> Result<(), AccessError> {
        for (kind, patterns) in [("publish", &acl.publish), ("subscribe", &acl.subscribe)] {
            for p in patterns {
                let probe = p.replace("%u", "u").replace("%c", "c");
                if !valid_filter(&probe) {
                    return Err(invalid(format!(
                        "{who}: {kind} pattern {p:?} is not a valid MQTT filter"
                    )));
                }
            }
        }
        Ok(())
    };
    for (i, entry) in file.users.into_iter().enumerate() {
        let who = format!("users[{i}] ({})", entry.name);
        if entry.name.is_empty() {
            return Err(invalid(format!("users[{i}].name: must not be empty")));
        }
        if entry.password.is_some() {
            return Err(invalid(format!(
                "{who}.password: clear-text passwords are not accepted; store passwordHash (see README: MQTT users)"
            )));
        }
        let hash = PasswordHash::parse(&entry.password_hash)
            .map_err(|reason| invalid(format!("{who}.passwordHash: {reason}")))?;
        check_acl(&who, &entry.acl)?;
        let user = User {
            secret: Secret::Hash(hash),
            acl: entry.acl,
        };
        if users.insert(entry.name.clone(), user).is_some() {
            return Err(invalid(format!("{who}: the user is listed twice")));
        }
    }
    if let Some(acl) = &file.anonymous {
        check_acl("anonymous", acl)?;
    }
    Ok((users, file.anonymous))
}

#[cfg(test)]
mod tests;
