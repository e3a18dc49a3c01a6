//! The inbound queue between the socket reader and the bus.
//!
//! The reader must never wait on a module's mailbox: a module that is itself blocked sending to
//! EdgeHub would deadlock the link. So frames go into this bounded queue (100, like edgecore's)
//! that drops the *oldest* entry when full, and a separate task delivers to the bus.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::sync::atomic::Ordering;

use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use wedge_core::{Bus, Message};

use super::dispatch::Dispatch;
use super::module::Stats;

/// Entries the queue holds before dropping the oldest (edgecore's inbound queue size).
pub(crate) const INBOUND_CAPACITY: usize = 100;

/// A bounded drop-oldest queue of messages with their destination.
pub(crate) struct InboundQueue {
    entries: Mutex<VecDeque<(Dispatch, Message)>>,
    notify: Notify,
    capacity: usize,
}

impl InboundQueue {
    /// An empty queue of `capacity` (at least 1).
    pub(crate) fn new(capacity: usize) -> InboundQueue {
        InboundQueue {
            entries: Mutex::new(VecDeque::new()),
            notify: Notify::new(),
            capacity: capacity.max(1),
        }
    }

    /// Queues a message; returns the entry dropped to make room, if any.
    pub(crate) fn push(&self, to: Dispatch, msg: Message) -> Option<Message> {
        let dropped = {
            let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
            let dropped = if entries.len() >= self.capacity {
                entries.pop_front().map(|(_, m)| m)
            } else {
                None
            };
            entries.push_back((to, msg));
            dropped
        };
        self.notify.notify_one();
        dropped
    }

    fn pop(&self) -> Option<(Dispatch, Message)> {
        self.entries
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .pop_front()
    }

    /// Waits for the next entry.
    pub(crate) async fn next(&self) -> (Dispatch, Message) {
        loop {
            if let Some(entry) = self.pop() {
                return entry;
            }
            // `notify_one` stores a permit when nobody waits, so a push between `pop` and
            // here is not missed.
            self.notify.notified().await;
        }
    }
}

/// Delivers queued messages to the bus until `cancel` fires.
pub(crate) async fn deliver(
    bus: Bus,
    queue: std::sync::Arc<InboundQueue>,
    stats: std::sync::Arc<Stats>,
    cancel: CancellationToken,
) {
    // A cloud message nobody takes is counted (`wedge_edgehub_inbound_undeliverable_total`) and said
    // at warning level, the first at once and then once a minute with the count.
    let mut said = wedge_core::log_limit::RepeatLimit::new(std::time::Duration::from_secs(60));
    loop {
        let (to, msg) = tokio::select! {
            _ = cancel.cancelled() => return,
            entry = queue.next() => entry,
        };
        let (route, source, resource) = (
            msg.route.group.clone(),
            msg.route.source.clone(),
            msg.route.resource.clone(),
        );
        let delivered = match to {
            Dispatch::Reply => match bus.send_response(msg) {
                None => true,
                Some(unclaimed) => {
                    tracing::debug!(
                        parent = %unclaimed.header.parent_id,
                        "cloud reply with no waiting request; dropped"
                    );
                    false
                }
            },
            Dispatch::Group(group) => {
                // The connection state is told to every group that may care; a group with no
                // module running (taskmanager or MetaServer off) is not a lost message.
                let broadcast = msg.route.operation == wedge_core::message::operation::CONNECT
                    && msg.route.source == wedge_core::message::module::EDGEHUB_SOURCE;
                let n = bus.send_to_group(group, msg).await;
                if broadcast {
                    continue;
                }
                if n == 0
                    && let Some(more) = said.check(std::time::Instant::now())
                {
                    tracing::warn!(
                        group,
                        source = %source,
                        resource = %resource,
                        dropped_before = more,
                        "no module of the group runs; cloud message dropped"
                    );
                }
                n > 0
            }
            Dispatch::Module(name) => match bus.send(name, msg).await {
                Ok(()) => true,
                Err(e) => {
                    if let Some(more) = said.check(std::time::Instant::now()) {
                        tracing::warn!(
                            module = name,
                            group = %route,
                            source = %source,
                            resource = %resource,
                            dropped_before = more,
                            "cloud message dropped: {e} (is the module enabled and built?)"
                        );
                    }
                    false
                }
            },
            Dispatch::Drop => false,
        };
        if !delivered {
            stats.undeliverable.fetch_add(1, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wedge_core::Content;

    #[tokio::test]
    async fn drops_the_oldest_when_full() {
        let q = InboundQueue::new(2);
        let m = |r: &str| Message::build("c", "twin", "update", r, Content::null());
        assert!(q.push(Dispatch::Group("twin"), m("a")).is_none());
        assert!(q.push(Dispatch::Group("twin"), m("b")).is_none());
        let dropped = q.push(Dispatch::Group("twin"), m("c")).unwrap();
        assert_eq!(dropped.route.resource, "a");
        assert_eq!(q.next().await.1.route.resource, "b");
        assert_eq!(q.next().await.1.route.resource, "c");
    }
}
