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
//! **Names in patterns are literal.** A name stands for `%u` or `%c` only if it is one literal
//! topic level: not empty, no `+`, `#`, `/` or NUL, no leading `$` ([`identity`]). A client
//! whose patterns use `%c` and whose client id is not such a level is refused at CONNECT
//! (CONNACK "identifier rejected"); likewise a user name for `%u` ("bad user name or
//! password"). Other client ids are left alone: they appear in no topic. A users file is
//! refused at load if a user's name is not such a level, or if the `anonymous` entry uses `%u`
//! (anonymous clients have no user name). Without this, client id `+` would turn
//! `clients/%c/#` into every client's topics. An empty client id is given a generated one
//! before the patterns are filled in. A pattern that starts with `%c` still lets each client
//! pick its own first level: put a fixed level first.
//!
//! **Passwords** are stored as PBKDF2-HMAC-SHA256 (never in clear): checking one costs
//! milliseconds by design. The checks run off the async threads on a pool of half the cores
//! (at least one), so a storm of bad log-ins cannot take the whole node, and queue for it one
//! per source address (`access/lanes.rs`), so an address's storm holds one place in that
//! queue, not one per guess. A password that was right once is remembered (by its
//! SHA-256) so a mapper's reconnects cost nothing. Every check costs the same whether the user
//! exists or not: an unknown name is checked against a dummy hash as costly as the costliest
//! stored one, and cheaper users' checks are padded up to it (`access/password.rs`), so the
//! time of a refusal does not tell which names exist.
//!
//! **Failed log-ins are throttled** per source address and per user name ([`throttle`]): 20
//! failures per address, then one more every 5 s; 10 failures per user name, from anywhere,
//! then one more every 30 s. While a budget is spent, CONNECTs it covers are refused at once
//! ("server unavailable") without PBKDF2 work; a password remembered as right still gets in
//! from a throttled address (checking it costs nothing), but not with a throttled name, lest a
//! throttled guesser learn when it guessed right. All local clients share 127.0.0.1: a local
//! guesser delays other local clients' first log-in, not their reconnects. Refusals are
//! counted by reason on `/metrics` (`wedge_eventbus_broker_logins_refused_total`, reasons
//! `bad_credentials`, `throttled`, `client_id`, `user_name`, `will`) and logged as a warning
//! once a minute per source address (the others at debug level, counted in the next warning).

pub mod identity;
mod lanes;
mod password;
pub mod throttle;
mod users_file;

use std::collections::{HashMap, HashSet};
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Instant;

use serde::Deserialize;

pub use identity::NotALevel;
pub use password::{MIN_ITERATIONS, PasswordHash};

use crate::settings::Credentials;
use identity::{literal_level, substitute};
use lanes::Lanes;
use password::{Check, Secret, sha256};
use throttle::{LoginThrottle, Verdict};
use users_file::read_users_file;

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
    /// Topic patterns it may neither publish to nor receive, even inside its other patterns
    /// (mosquitto's `topic deny`): a subscription entirely inside one is refused, and a broader
    /// subscription does not deliver what one covers.
    #[serde(default)]
    pub deny: Vec<String>,
}

impl Acl {
    /// Everything: the access of an anonymous client when no users file is set (KubeEdge's
    /// default), and of KubeEdge's `mqttUsername`.
    pub fn everything() -> Acl {
        Acl {
            publish: vec!["#".to_owned()],
            subscribe: vec!["#".to_owned()],
            deny: Vec::new(),
        }
    }

    /// Whether any pattern uses `placeholder` (`"%u"` or `"%c"`).
    fn uses(&self, placeholder: &str) -> bool {
        self.publish
            .iter()
            .chain(&self.subscribe)
            .chain(&self.deny)
            .any(|p| p.contains(placeholder))
    }
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
    /// What unknown names are checked against, as costly as the costliest user's hash; `None`
    /// when no user has a hash (no check costs PBKDF2 work then).
    dummy: Option<PasswordHash>,
    /// The costliest user's hash's cost: every check is padded up to it.
    max_cost: u64,
    /// PBKDF2 checks running at once: half the cores, so guessers cannot take the node.
    checking: Arc<tokio::sync::Semaphore>,
    /// One check waiting or running per source address, so one address cannot fill the
    /// pool's queue.
    lanes: Arc<Lanes>,
    /// Failure budgets per source address and user name, shared by every listener.
    throttle: Arc<Mutex<LoginThrottle>>,
    /// PBKDF2 checks run so far.
    checks_run: Arc<AtomicU64>,
}

/// Why a CONNECT is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// Unknown user, wrong password, or no user name where one is required
    /// (CONNACK `BadUserNamePassword`).
    #[error("bad user name or password")]
    BadCredentials,
    /// Too many failed log-ins from the source address or with the user name: refused without
    /// checking the password (CONNACK `ServiceUnavailable`, which clients retry).
    #[error(
        "too many failed log-ins from this address or with this user name; refused without checking the password"
    )]
    Throttled,
    /// The client's patterns use `%c` and its client id is not one literal topic level
    /// (CONNACK `BadClientId`).
    #[error("the client id cannot stand for %c in the client's topic patterns: {0}")]
    BadClientId(NotALevel),
    /// The client's patterns use `%u` and its user name is not one literal topic level
    /// (CONNACK `BadUserNamePassword`).
    #[error("the user name cannot stand for %u in the client's topic patterns: {0}")]
    BadUserName(NotALevel),
    /// The will's topic is outside the client's `publish` patterns (CONNACK `NotAuthorized`).
    #[error("the will's topic is not the client's to publish")]
    WillNotAllowed,
}

/// What one connected client may do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    /// Its publish patterns, `%u`/`%c` substituted.
    publish: Vec<String>,
    /// Its subscribe patterns, substituted.
    subscribe: Vec<String>,
    /// Its deny patterns, substituted.
    deny: Vec<String>,
    /// Who it is, for logs (`""` for anonymous).
    pub user: String,
}

/// PBKDF2 checks that may run at once: half the cores, at least one.
fn pool_size() -> usize {
    std::thread::available_parallelism()
        .map_or(1, |n| n.get() / 2)
        .max(1)
}

impl AccessPolicy {
    /// Anyone may connect and do anything (KubeEdge's embedded broker).
    pub fn open() -> AccessPolicy {
        AccessPolicy::new(HashMap::new(), Some(Acl::everything()))
    }

    fn new(users: HashMap<String, User>, anonymous: Option<Acl>) -> AccessPolicy {
        let costliest = users
            .values()
            .filter_map(|u| match &u.secret {
                Secret::Hash(hash) => Some(hash),
                Secret::Clear(_) => None,
            })
            .max_by_key(|hash| hash.cost());
        AccessPolicy {
            dummy: costliest.map(PasswordHash::dummy_like),
            max_cost: costliest.map_or(0, PasswordHash::cost),
            users,
            anonymous,
            verified: Arc::new(Mutex::new(HashSet::new())),
            checking: Arc::new(tokio::sync::Semaphore::new(pool_size())),
            lanes: Arc::new(Lanes::default()),
            throttle: Arc::new(Mutex::new(LoginThrottle::default())),
            checks_run: Arc::new(AtomicU64::new(0)),
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

    /// How many PBKDF2 password checks log-ins have cost so far: what guessers made the node
    /// spend (throttled attempts cost none).
    pub fn password_checks(&self) -> u64 {
        self.checks_run.load(Ordering::Relaxed)
    }

    /// Checks a CONNECT from `source`: its log-in (`None`: no user name), its client id as
    /// `%c`, and its will topic. On success, what the client may do. `client_id` is the one
    /// the session will use (generated already if the client sent none).
    pub async fn admit(
        &self,
        login: Option<(&str, &str)>,
        client_id: &str,
        will_topic: Option<&str>,
        source: IpAddr,
    ) -> Result<Grant, Refusal> {
        let (user, acl) = match login {
            None => match &self.anonymous {
                Some(acl) => ("", acl),
                None => return Err(Refusal::BadCredentials),
            },
            Some((name, password)) => (
                name,
                self.authenticate(name, password.as_bytes(), source).await?,
            ),
        };
        let grant = grant(acl, user, client_id)?;
        if let Some(topic) = will_topic
            && !grant.may_publish(topic)
        {
            return Err(Refusal::WillNotAllowed);
        }
        Ok(grant)
    }

    /// Whether a refusal of a CONNECT from `source` should be logged as a warning now (once a
    /// minute per source); `Some(n)`: yes, and `n` refusals went to the debug level since.
    pub(crate) fn warn_due(&self, source: IpAddr) -> Option<u64> {
        self.throttle().warn_due(source, Instant::now())
    }

    /// Checks `name`'s password under the failure budgets; its ACL if right.
    async fn authenticate(
        &self,
        name: &str,
        password: &[u8],
        source: IpAddr,
    ) -> Result<&Acl, Refusal> {
        let name_key = sha256(name.as_bytes());
        let digest = sha256(password);
        let user = self.users.get(name);
        // Right without PBKDF2 work: a password that verified before, or KubeEdge's clear one.
        // Looked up for unknown names too, so both take the same time.
        let remembered = self.remembered(name, digest);
        let quick = user.is_some_and(|u| remembered || u.secret.clear_matches(password));
        self.gate(source, &name_key, quick)?;
        if let Some(user) = user
            && quick
        {
            return Ok(&user.acl);
        }
        let lane = self.lanes.lane(source);
        let Ok(_lane) = lane.acquire().await else {
            return Err(Refusal::BadCredentials);
        };
        let Ok(_turn) = self.checking.acquire().await else {
            return Err(Refusal::BadCredentials);
        };
        // The checks queued ahead of this one may have spent a budget meanwhile.
        self.gate(source, &name_key, false)?;
        let check = match user.map(|u| &u.secret) {
            Some(Secret::Hash(hash)) => Some(Check::user(hash, self.max_cost)),
            // Unknown name or wrong clear password: the same work, never right.
            _ => self.dummy.as_ref().map(Check::dummy),
        };
        let right = match check {
            Some(check) => {
                self.checks_run.fetch_add(1, Ordering::Relaxed);
                let password = password.to_vec();
                tokio::task::spawn_blocking(move || check.run(&password))
                    .await
                    .unwrap_or(false)
            }
            None => false,
        };
        match user {
            Some(user) if right => {
                if let Ok(mut v) = self.verified.lock() {
                    v.insert((name.to_owned(), digest));
                }
                Ok(&user.acl)
            }
            _ => {
                self.throttle().failed(source, &name_key, Instant::now());
                Err(Refusal::BadCredentials)
            }
        }
    }

    /// Refuses a log-in whose address or name budget is spent. A `quick` (already known
    /// right) password passes a spent address budget, as it costs no work; a guess refused for
    /// its address spends its name's budget, so a throttled address cannot test remembered
    /// passwords at will.
    fn gate(&self, source: IpAddr, name_key: &[u8; 32], quick: bool) -> Result<(), Refusal> {
        let now = Instant::now();
        let mut throttle = self.throttle();
        match throttle.verdict(source, name_key, now) {
            Verdict::Open => Ok(()),
            Verdict::Address if quick => Ok(()),
            Verdict::Address => {
                throttle.failed_name(name_key, now);
                Err(Refusal::Throttled)
            }
            Verdict::Name => Err(Refusal::Throttled),
        }
    }

    /// Whether `name` logged in with the password hashed to `digest` before.
    fn remembered(&self, name: &str, digest: [u8; 32]) -> bool {
        self.verified
            .lock()
            .map(|v| v.contains(&(name.to_owned(), digest)))
            .unwrap_or(false)
    }

    /// The failure budgets; a panic elsewhere while holding them leaves them usable.
    fn throttle(&self) -> MutexGuard<'_, LoginThrottle> {
        self.throttle.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// What a client with `acl`, logged in as `user`, with `client_id`, may do: the patterns with
/// the names filled in, each name checked to be one literal level where it is used.
fn grant(acl: &Acl, user: &str, client_id: &str) -> Result<Grant, Refusal> {
    if acl.uses("%c") {
        literal_level(client_id).map_err(Refusal::BadClientId)?;
    }
    if acl.uses("%u") {
        literal_level(user).map_err(Refusal::BadUserName)?;
    }
    let fill = |patterns: &[String]| -> Vec<String> {
        patterns
            .iter()
            .map(|p| substitute(p, user, client_id))
            .collect()
    };
    Ok(Grant {
        publish: fill(&acl.publish),
        subscribe: fill(&acl.subscribe),
        deny: fill(&acl.deny),
        user: user.to_owned(),
    })
}

impl Grant {
    /// Everything (the broker's own in-process client).
    pub fn everything() -> Grant {
        Grant {
            publish: vec!["#".to_owned()],
            subscribe: vec!["#".to_owned()],
            deny: Vec::new(),
            user: String::new(),
        }
    }

    /// Whether the client may publish to `topic`.
    pub fn may_publish(&self, topic: &str) -> bool {
        self.publish.iter().any(|p| covers(p, topic)) && self.may_receive(topic)
    }

    /// Whether a message on `topic` may be delivered to the client (no deny pattern covers it).
    pub fn may_receive(&self, topic: &str) -> bool {
        !self.deny.iter().any(|d| covers(d, topic))
    }

    /// Whether the client may subscribe to `filter`: some pattern covers every topic the
    /// filter could match.
    pub fn may_subscribe(&self, filter: &str) -> bool {
        self.subscribe.iter().any(|p| covers(p, filter))
            && !self.deny.iter().any(|d| covers(d, filter))
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

#[cfg(test)]
mod tests;
