//! Cloud-bound messages pending confirmation, resent when idle (`spec/kubeedge-compat.md` §5.7).
//!
//! Every message devicetwin sends to the cloud (`edge_updated`, state updates, the membership
//! detail request) stays pending under its `msg_id` until a twin-group message carrying that id
//! as `parent_msg_id` arrives. KubeEdge's communication worker waits for its next message with a
//! 60 s timeout that restarts whenever anything reaches the worker; when it fires, every pending
//! message is sent again, unchanged (same `msg_id`). So resends only happen after a full minute
//! without any twin communication traffic, and they happen all at once.
//!
//! This is that behaviour as a plain state machine: the caller passes the time in, reports
//! traffic, and asks what is [`Pending::due`]. Nothing here sleeps, so the rules can be tested
//! without a clock.

use std::time::{Duration, Instant};

/// How long twin communication must stay quiet before pending messages are sent again.
pub const RESEND_AFTER: Duration = Duration::from_secs(60);

/// Messages waiting for the cloud's confirmation, in the order they were first tracked.
#[derive(Debug, Clone)]
pub struct Pending<T> {
    resend_after: Duration,
    /// `(msg_id, message)`; a `Vec` keeps resends in sending order and stays small (a handful
    /// of unconfirmed messages at a time), so linear look-ups are cheap.
    entries: Vec<(String, T)>,
    /// Start of the current quiet period; `None` until the first traffic or check.
    quiet_since: Option<Instant>,
}

impl<T> Pending<T> {
    /// An empty set whose messages are resent after `resend_after` of quiet
    /// (KubeEdge: [`RESEND_AFTER`]).
    pub fn new(resend_after: Duration) -> Self {
        Pending {
            resend_after,
            entries: Vec::new(),
            quiet_since: None,
        }
    }

    /// Keeps `message` until `msg_id` is confirmed. Tracking an id again replaces its message
    /// in place (a resend re-registers the same id).
    ///
    /// Sending is traffic too: the caller reports it with [`Pending::traffic`], since only the
    /// caller knows the time.
    pub fn track(&mut self, msg_id: String, message: T) {
        match self.entries.iter_mut().find(|(id, _)| *id == msg_id) {
            Some(entry) => entry.1 = message,
            None => self.entries.push((msg_id, message)),
        }
    }

    /// The cloud confirmed `parent_msg_id`: forget it. False when nothing was pending under
    /// that id (already confirmed, or dropped while disconnected).
    pub fn confirm(&mut self, parent_msg_id: &str) -> bool {
        let before = self.entries.len();
        self.entries.retain(|(id, _)| id != parent_msg_id);
        self.entries.len() != before
    }

    /// Twin communication happened at `now` (a publish, a cloud message, a confirmation, a
    /// lifecycle event): the quiet period starts again.
    pub fn traffic(&mut self, now: Instant) {
        self.quiet_since = Some(now);
    }

    /// When the pending messages become due if nothing else happens; `None` when nothing is
    /// pending or no time has been seen yet. Meant for the caller's sleep.
    pub fn deadline(&self) -> Option<Instant> {
        if self.entries.is_empty() {
            return None;
        }
        self.quiet_since?.checked_add(self.resend_after)
    }

    /// The link to the cloud is gone: everything pending is dropped.
    pub fn disconnected(&mut self) {
        self.entries.clear();
    }

    /// How many messages are pending.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True when nothing is pending.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

impl<T: Clone> Pending<T> {
    /// The messages to send again at `now`: all pending ones, in tracking order, once the
    /// quiet period has lasted `resend_after`; nothing before. They stay pending (still
    /// unconfirmed), and the quiet period restarts, so the next resend is another full period
    /// away. The first check without any earlier traffic starts the quiet period.
    pub fn due(&mut self, now: Instant) -> Vec<T> {
        let since = *self.quiet_since.get_or_insert(now);
        if now.saturating_duration_since(since) < self.resend_after {
            return Vec::new();
        }
        self.quiet_since = Some(now);
        self.entries.iter().map(|(_, m)| m.clone()).collect()
    }
}

#[cfg(test)]
mod tests;
