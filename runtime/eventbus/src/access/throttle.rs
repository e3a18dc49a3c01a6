//! Throttling of failed MQTT log-ins, per source address and per user name, and of the log
//! lines refusals write.
//!
//! Each source address and each user name has a budget of failed log-ins (a token bucket kept
//! as one instant, GCRA style): a burst, then one more per refill period. While either budget
//! of a CONNECT is spent, it is refused at once, without PBKDF2 work, so guessers cost the node
//! almost nothing and cannot make real log-ins queue behind their checks. Only failures spend
//! the budget: a node full of mappers logging in at once is never throttled.
//!
//! IPv6 sources count per /64 (what one host usually holds); IPv4-mapped addresses as IPv4.
//! Each table tracks at most [`MAX_TRACKED`] keys; when full, keys whose budget is whole again
//! are forgotten, and a new key that still finds no room is not tracked (its CONNECTs still
//! spend the other table's budget and queue for the bounded PBKDF2 pool).

use std::collections::HashMap;
use std::hash::Hash;
use std::net::IpAddr;
use std::time::{Duration, Instant};

/// Failed log-ins one source address may make in a burst. Larger than [`NAME_BURST`]: all
/// local clients share 127.0.0.1, and a few misconfigured ones must not lock out the others.
pub const ADDRESS_BURST: u32 = 20;
/// One more failed log-in per source address is allowed this often (12 a minute).
pub const ADDRESS_REFILL: Duration = Duration::from_secs(5);
/// Failed log-ins with one user name in a burst, from any addresses.
pub const NAME_BURST: u32 = 10;
/// One more failed log-in per user name is allowed this often (2 a minute, 2,880 guesses a day
/// at most for any one user, however many addresses guess).
pub const NAME_REFILL: Duration = Duration::from_secs(30);
/// Refusals are logged as a warning at most once per source address per period; the others
/// go to the debug level, and the next warning says how many there were.
pub const LOG_PERIOD: Duration = Duration::from_secs(60);
/// Keys tracked per table (addresses, names, log periods): bounds the memory guessers cost.
pub const MAX_TRACKED: usize = 4096;

/// Which budget refuses a log-in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Neither: the password may be checked.
    Open,
    /// The user name's budget is spent.
    Name,
    /// The source address's budget is spent.
    Address,
}

/// A budget of failures per key.
#[derive(Debug)]
struct Table<K> {
    burst: u32,
    refill: Duration,
    /// When each key's budget is whole again (its "theoretical arrival time").
    whole_at: HashMap<K, Instant>,
}

impl<K: Hash + Eq> Table<K> {
    fn new(burst: u32, refill: Duration) -> Table<K> {
        Table {
            burst: burst.max(1),
            refill,
            whole_at: HashMap::new(),
        }
    }

    /// Whether `key` has spent its budget at `now`.
    fn spent(&self, key: &K, now: Instant) -> bool {
        let tolerance = self.refill * (self.burst - 1);
        self.whole_at
            .get(key)
            .is_some_and(|t| t.saturating_duration_since(now) > tolerance)
    }

    /// Spends one failure of `key`'s budget. Never further than one refill past spent, so a
    /// key that stops failing is let in again one refill period later.
    fn fail(&mut self, key: K, now: Instant) {
        if !self.whole_at.contains_key(&key) && self.whole_at.len() >= MAX_TRACKED {
            self.whole_at.retain(|_, t| *t > now);
            if self.whole_at.len() >= MAX_TRACKED {
                return;
            }
        }
        let cap = now + self.refill * self.burst;
        let t = self.whole_at.entry(key).or_insert(now);
        *t = ((*t).max(now) + self.refill).min(cap);
    }
}

/// When a source's refusals were last logged as a warning, and how many went quietly since.
#[derive(Debug)]
struct Logged {
    at: Instant,
    quiet: u64,
}

/// The failure budgets of the broker's log-ins, and when refusals were last logged.
#[derive(Debug)]
pub(crate) struct LoginThrottle {
    addresses: Table<IpAddr>,
    /// Keyed by the SHA-256 of the name: a name may be 64 KiB long.
    names: Table<[u8; 32]>,
    logged: HashMap<IpAddr, Logged>,
}

impl Default for LoginThrottle {
    fn default() -> LoginThrottle {
        LoginThrottle::new(ADDRESS_BURST, ADDRESS_REFILL, NAME_BURST, NAME_REFILL)
    }
}

impl LoginThrottle {
    /// Budgets of `*_burst` failures, plus one per `*_refill`.
    pub(crate) fn new(
        address_burst: u32,
        address_refill: Duration,
        name_burst: u32,
        name_refill: Duration,
    ) -> LoginThrottle {
        LoginThrottle {
            addresses: Table::new(address_burst, address_refill),
            names: Table::new(name_burst, name_refill),
            logged: HashMap::new(),
        }
    }

    /// Whether a log-in from `source` as the name hashed to `name` may be checked at `now`.
    pub(crate) fn verdict(&self, source: IpAddr, name: &[u8; 32], now: Instant) -> Verdict {
        if self.names.spent(name, now) {
            Verdict::Name
        } else if self.addresses.spent(&source_key(source), now) {
            Verdict::Address
        } else {
            Verdict::Open
        }
    }

    /// Counts a failed log-in against both budgets.
    pub(crate) fn failed(&mut self, source: IpAddr, name: &[u8; 32], now: Instant) {
        self.addresses.fail(source_key(source), now);
        self.names.fail(*name, now);
    }

    /// Counts a failed log-in against the name's budget only.
    pub(crate) fn failed_name(&mut self, name: &[u8; 32], now: Instant) {
        self.names.fail(*name, now);
    }

    /// Whether a refusal of a CONNECT from `source` should be logged as a warning now: once
    /// per [`LOG_PERIOD`] per source. `Some(n)`: warn, saying `n` refusals went unlogged since
    /// the last warning; `None`: log it at the debug level only.
    pub(crate) fn warn_due(&mut self, source: IpAddr, now: Instant) -> Option<u64> {
        let key = source_key(source);
        if !self.logged.contains_key(&key) && self.logged.len() >= MAX_TRACKED {
            self.logged
                .retain(|_, l| now.saturating_duration_since(l.at) < LOG_PERIOD);
            if self.logged.len() >= MAX_TRACKED {
                return None;
            }
        }
        match self.logged.get_mut(&key) {
            Some(l) if now.saturating_duration_since(l.at) < LOG_PERIOD => {
                l.quiet += 1;
                None
            }
            Some(l) => {
                let quiet = l.quiet;
                *l = Logged { at: now, quiet: 0 };
                Some(quiet)
            }
            None => {
                self.logged.insert(key, Logged { at: now, quiet: 0 });
                Some(0)
            }
        }
    }
}

/// The key a source address is counted under: IPv4 as is (IPv4-mapped IPv6 too), IPv6 by /64.
pub(crate) fn source_key(source: IpAddr) -> IpAddr {
    match source.to_canonical() {
        IpAddr::V6(v6) => IpAddr::V6((u128::from(v6) & !(u128::MAX >> 64)).into()),
        v4 => v4,
    }
}

#[cfg(test)]
mod tests;
