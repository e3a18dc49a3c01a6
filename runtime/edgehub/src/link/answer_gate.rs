//! Device messages, one at a time per device: the order CloudCore does not keep for us.
//!
//! CloudCore v1.23.1 hands each message it reads from a node to its controllers through
//! beehive's `SendToGroup`, which starts one goroutine per message; Go runs the newest
//! goroutine first, so a burst of reports for one device (the backlog replayed after an
//! outage) is applied out of order — seen here as `109, 100, ..., 108`, leaving the cloud at
//! 108 while the edge holds 109. The device controller answers every twin and state message
//! (a response whose `parent_msg_id` is the message's id) once it has written it, so the link
//! sends the next message for a device only after that answer, or after [`ANSWER_WAIT`] when
//! none comes (CloudCore drops a report for a device it does not know yet, without
//! answering). Other devices and other messages are not held back: [`AnswerGate::pick`] skips
//! a held message and every later one of the same resource, so order per resource is kept.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use wedge_core::Message;

/// How long the next message for a device waits for the cloud's answer to the previous one.
pub const ANSWER_WAIT: Duration = Duration::from_secs(1);

/// The device messages in flight, one per device resource at most.
#[derive(Debug, Default)]
pub struct AnswerGate {
    /// Resource → (id of the message in flight, when to stop waiting for its answer).
    awaiting: HashMap<String, (String, Instant)>,
}

/// Device messages (twin `edge_updated`, state updates): those the device controller applies
/// and answers.
fn is_device_message(msg: &Message) -> bool {
    msg.route.resource.starts_with("device/")
}

impl AnswerGate {
    /// Whether `next` must wait for the answer to the previous message of its device.
    pub fn holds(&self, next: &Message, now: Instant) -> bool {
        self.awaiting
            .get(&next.route.resource)
            .is_some_and(|(_, until)| now < *until)
    }

    /// Which of `queued` (oldest first) may be written now, at most `limit`, in order: not a
    /// held message, nor any message behind a held one of the same resource. Each picked
    /// device message holds the later ones of its device, as if already sent.
    pub fn pick<'a>(
        &self,
        queued: impl IntoIterator<Item = &'a Message>,
        limit: usize,
        now: Instant,
    ) -> Vec<usize> {
        let mut blocked: Vec<&str> = Vec::new();
        let mut picked = Vec::new();
        for (i, msg) in queued.into_iter().enumerate() {
            if picked.len() == limit {
                break;
            }
            let resource = msg.route.resource.as_str();
            if blocked.contains(&resource) || self.holds(msg, now) {
                if !blocked.contains(&resource) {
                    blocked.push(resource);
                }
                continue;
            }
            if is_device_message(msg) {
                blocked.push(resource);
            }
            picked.push(i);
        }
        picked
    }

    /// `msg` was written to the cloud at `now`.
    pub fn sent(&mut self, msg: &Message, now: Instant) {
        if is_device_message(msg) {
            self.awaiting.insert(
                msg.route.resource.clone(),
                (msg.header.id.clone(), now + ANSWER_WAIT),
            );
        }
    }

    /// A message from the cloud arrived: if it answers a message in flight, that device's
    /// gate opens. True when it did.
    pub fn answered(&mut self, from_cloud: &Message) -> bool {
        let parent = &from_cloud.header.parent_id;
        if parent.is_empty() {
            return false;
        }
        let before = self.awaiting.len();
        self.awaiting.retain(|_, (id, _)| id != parent);
        self.awaiting.len() != before
    }

    /// When the first unanswered message stops holding its device back; `None` when nothing
    /// is in flight.
    pub fn gives_up_at(&self) -> Option<Instant> {
        self.awaiting.values().map(|(_, until)| *until).min()
    }

    /// Stops waiting for answers whose time ran out; how many.
    pub fn expire(&mut self, now: Instant) -> usize {
        let before = self.awaiting.len();
        self.awaiting.retain(|_, (_, until)| now < *until);
        before - self.awaiting.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wedge_core::Content;

    fn twin(device: &str) -> Message {
        Message::build(
            "twin",
            "resource",
            "update",
            &format!("device/{device}/twin/edge_updated"),
            Content::null(),
        )
    }

    fn podpatch() -> Message {
        Message::build(
            "edged",
            "meta",
            "patch",
            "default/podpatch/p",
            Content::null(),
        )
    }

    #[test]
    fn the_next_report_of_a_device_waits_for_the_answer_to_the_last() {
        let now = Instant::now();
        let mut gate = AnswerGate::default();
        let first = twin("default/d1");
        gate.sent(&first, now);
        // Same device: held; another device or another kind of message: not.
        assert!(gate.holds(&twin("default/d1"), now));
        assert!(!gate.holds(&twin("default/d2"), now));
        assert!(!gate.holds(&podpatch(), now));
        // An unrelated answer does not open it; the answer to `first` does.
        let mut other = podpatch();
        other.header.parent_id = "someone-else".into();
        assert!(!gate.answered(&other));
        assert!(gate.holds(&twin("default/d1"), now));
        assert!(gate.answered(&first.response(Content::ok())));
        assert!(!gate.holds(&twin("default/d1"), now));
    }

    #[test]
    fn a_held_device_holds_back_nothing_else() {
        let now = Instant::now();
        let mut gate = AnswerGate::default();
        gate.sent(&twin("default/d1"), now);
        let queued = [
            twin("default/d1"),
            podpatch(),
            twin("default/d2"),
            twin("default/d2"),
            twin("default/d1"),
            podpatch(),
        ];
        // d1 waits (and so does its later report); the first of d2 goes, the second waits
        // for its answer; both pod patches go, in order.
        assert_eq!(gate.pick(&queued, 64, now), [1, 2, 5]);
        assert_eq!(gate.pick(&queued, 2, now), [1, 2]);
    }

    #[test]
    fn without_an_answer_the_gate_opens_after_the_wait() {
        let now = Instant::now();
        let mut gate = AnswerGate::default();
        gate.sent(&twin("default/d1"), now);
        let later = now + ANSWER_WAIT;
        assert_eq!(gate.gives_up_at(), Some(later));
        assert!(!gate.holds(&twin("default/d1"), later));
        assert_eq!(gate.expire(later), 1);
        assert_eq!(gate.gives_up_at(), None);
    }
}
