//! One password check at a time per source address.
//!
//! The PBKDF2 pool serves waiting checks in turn. Were they queued as they come, fifty
//! CONNECTs from one guesser would put fifty checks ahead of a real client's, and it would
//! wait seconds. Each address first queues in its own lane, so it holds at most one place in
//! the pool's queue: a client from another address waits for at most one check per address
//! that is checking, and a guesser's later attempts find its budget spent by the time their
//! turn comes (refused without work).

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, PoisonError, Weak};

use tokio::sync::Semaphore;

use super::throttle::{MAX_TRACKED, source_key};

/// The lanes of the addresses with a check waiting or running.
#[derive(Debug, Default)]
pub(crate) struct Lanes {
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    /// Dropped with the last check of their address; forgotten when the map is pruned.
    lanes: HashMap<IpAddr, Weak<Semaphore>>,
    /// Size at which the map is next pruned of lanes no check holds.
    prune_at: usize,
}

impl Lanes {
    /// The lane of `source` (IPv6 per /64, as the throttle counts): one permit, held for the
    /// whole wait and check.
    pub(crate) fn lane(&self, source: IpAddr) -> Arc<Semaphore> {
        let key = source_key(source);
        let mut inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(lane) = inner.lanes.get(&key).and_then(Weak::upgrade) {
            return lane;
        }
        if inner.lanes.len() >= inner.prune_at.max(MAX_TRACKED) {
            inner.lanes.retain(|_, lane| lane.strong_count() > 0);
            // Live lanes are bounded by the connections; pruning again only once the map has
            // doubled keeps the cost per CONNECT constant.
            inner.prune_at = inner.lanes.len() * 2;
        }
        let lane = Arc::new(Semaphore::new(1));
        inner.lanes.insert(key, Arc::downgrade(&lane));
        lane
    }

    /// How many lanes are remembered (live or not yet pruned).
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.inner
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .lanes
            .len()
    }
}
