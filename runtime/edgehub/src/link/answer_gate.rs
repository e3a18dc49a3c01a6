//! Device messages, one at a time per device: the order CloudCore does not keep for us.
//!
//! CloudCore v1.23.1 hands each message it reads from a node to its controllers through
//! beehive's `SendToGroup`, which starts one goroutine per message; Go runs the newest
//! goroutine first, so a burst of reports for one device (the backlog replayed after an
//! outage) is applied out of order — seen here as `109, 100, ..., 108`, leaving the cloud at
//! 108 while the edge holds 109. The device controller answers every twin and state message
//! (a response whose `parent_msg_id` is the message's id) once it has written it, so the link
//! sends the next message for the same device only after that answer, or after
//! [`ANSWER_WAIT`] when none comes (CloudCore drops a report for a device it does not know
//! yet, without answering). Messages for other resources are not held back.

use std::time::{Duration, Instant};

use wedge_core::Message;

/// How long the next message for a device waits for the cloud's answer to the previous one.
pub const ANSWER_WAIT: Duration = Duration::from_secs(1);

/// The device message in flight, if any.
#[derive(Debug, Default)]
pub struct AnswerGate {
    awaiting: Option<Awaiting>,
}

#[derive(Debug)]
struct Awaiting {
    msg_id: String,
    resource: String,
    until: Instant,
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
            .as_ref()
            .is_some_and(|a| now < a.until && a.resource == next.route.resource)
    }

    /// `msg` was written to the cloud at `now`.
    pub fn sent(&mut self, msg: &Message, now: Instant) {
        if is_device_message(msg) {
            self.awaiting = Some(Awaiting {
                msg_id: msg.header.id.clone(),
                resource: msg.route.resource.clone(),
                until: now + ANSWER_WAIT,
            });
        }
    }

    /// A message from the cloud arrived: if it answers the message in flight, the gate opens.
    /// True when it did.
    pub fn answered(&mut self, from_cloud: &Message) -> bool {
        let answers = self.awaiting.as_ref().is_some_and(|a| {
            !from_cloud.header.parent_id.is_empty() && a.msg_id == from_cloud.header.parent_id
        });
        if answers {
            self.awaiting = None;
        }
        answers
    }

    /// When a held message may go without an answer; `None` when nothing is in flight.
    pub fn gives_up_at(&self) -> Option<Instant> {
        self.awaiting.as_ref().map(|a| a.until)
    }

    /// The wait ran out: stop waiting.
    pub fn expire(&mut self, now: Instant) {
        if self.awaiting.as_ref().is_some_and(|a| now >= a.until) {
            self.awaiting = None;
        }
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

    #[test]
    fn the_next_report_of_a_device_waits_for_the_answer_to_the_last() {
        let now = Instant::now();
        let mut gate = AnswerGate::default();
        let first = twin("default/d1");
        assert!(!gate.holds(&first, now));
        gate.sent(&first, now);
        // Same device: held; another device or another kind of message: not.
        assert!(gate.holds(&twin("default/d1"), now));
        assert!(!gate.holds(&twin("default/d2"), now));
        let pod = Message::build(
            "edged",
            "meta",
            "patch",
            "default/podpatch/p",
            Content::null(),
        );
        assert!(!gate.holds(&pod, now));
        // An unrelated answer does not open it; the answer to `first` does.
        let mut other = pod.clone();
        other.header.parent_id = "someone-else".into();
        assert!(!gate.answered(&other));
        assert!(gate.holds(&twin("default/d1"), now));
        let answer = first.response(Content::ok());
        assert!(gate.answered(&answer));
        assert!(!gate.holds(&twin("default/d1"), now));
    }

    #[test]
    fn without_an_answer_the_gate_opens_after_the_wait() {
        let now = Instant::now();
        let mut gate = AnswerGate::default();
        gate.sent(&twin("default/d1"), now);
        let later = now + ANSWER_WAIT;
        assert_eq!(gate.gives_up_at(), Some(later));
        assert!(!gate.holds(&twin("default/d1"), later));
        gate.expire(later);
        assert_eq!(gate.gives_up_at(), None);
    }
}
