//! The in-process message bus: KubeEdge's beehive on tokio.
//!
//! Modules register under a name and a group and get a bounded [`Mailbox`]. Senders address a
//! module by name ([`Bus::send`]) or every module of a group ([`Bus::send_to_group`]). A full
//! mailbox makes `send` wait (back-pressure) rather than grow memory; [`Bus::try_send`] is for
//! callers that must not wait. Request/reply pairs work only through `parent_msg_id`:
//! [`Bus::send_sync`] parks a waiter under the request's id and [`Bus::send_response`] wakes it.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};

use crate::message::Message;
use crate::metrics::{MetricsSource, PromWriter};

/// Why a message could not be delivered.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BusError {
    /// No module of that name is registered (not enabled, or not built).
    #[error("no module named {0:?} on the bus")]
    UnknownModule(String),
    /// A module of that name is already registered.
    #[error("a module named {0:?} is already registered")]
    AlreadyRegistered(String),
    /// The module's mailbox is full (only from [`Bus::try_send`]).
    #[error("mailbox of module {0:?} is full")]
    Full(String),
    /// The module's mailbox is closed: the node is shutting down.
    #[error("module {0:?} is no longer receiving")]
    Closed(String),
    /// No reply arrived within the timeout.
    #[error("no reply to message {msg_id} from {module:?} within {timeout:?}")]
    Timeout {
        /// The module the request went to.
        module: String,
        /// The request id the reply was expected for.
        msg_id: String,
        /// How long we waited.
        timeout: Duration,
    },
}

/// Counters for one module's mailbox, exported as metrics.
#[derive(Debug, Default)]
struct MailboxStats {
    delivered: AtomicU64,
    rejected: AtomicU64,
}

#[derive(Clone)]
struct Endpoint {
    // Arc so resolving an endpoint per send costs reference counts, not an allocation.
    group: Arc<str>,
    tx: mpsc::Sender<Message>,
    stats: Arc<MailboxStats>,
}

struct Inner {
    capacity: usize,
    modules: RwLock<HashMap<String, Endpoint>>,
    pending: Mutex<HashMap<String, oneshot::Sender<Message>>>,
    unmatched_responses: AtomicU64,
}

/// A handle to the node's bus; cheap to clone, shared by every module.
#[derive(Clone)]
pub struct Bus {
    inner: Arc<Inner>,
}

/// The receiving end of a module's registration.
pub struct Mailbox {
    name: String,
    rx: mpsc::Receiver<Message>,
}

impl Mailbox {
    /// The module this mailbox belongs to.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Waits for the next message; `None` once every sender is gone.
    pub async fn recv(&mut self) -> Option<Message> {
        self.rx.recv().await
    }

    /// The next message if one is queued.
    pub fn try_recv(&mut self) -> Option<Message> {
        self.rx.try_recv().ok()
    }
}

/// A direct handle to one module's mailbox, for hot paths that send to the same module many
/// times and should not look it up each time.
#[derive(Clone)]
pub struct ModuleSender {
    name: Arc<str>,
    endpoint: Endpoint,
}

impl ModuleSender {
    /// Sends, waiting for room in the mailbox.
    pub async fn send(&self, msg: Message) -> Result<(), BusError> {
        match self.endpoint.tx.send(msg).await {
            Ok(()) => {
                self.endpoint
                    .stats
                    .delivered
                    .fetch_add(1, Ordering::Relaxed);
                Ok(())
            }
            Err(_) => Err(BusError::Closed(self.name.to_string())),
        }
    }
}

impl Bus {
    /// A bus whose mailboxes hold `capacity` messages each.
    pub fn new(capacity: usize) -> Bus {
        Bus {
            inner: Arc::new(Inner {
                capacity: capacity.max(1),
                modules: RwLock::new(HashMap::new()),
                pending: Mutex::new(HashMap::new()),
                unmatched_responses: AtomicU64::new(0),
            }),
        }
    }

    /// Registers a module under `name` in `group` and returns its mailbox.
    pub fn register(&self, name: &str, group: &str) -> Result<Mailbox, BusError> {
        let mut modules = write(&self.inner.modules);
        if modules.contains_key(name) {
            return Err(BusError::AlreadyRegistered(name.to_owned()));
        }
        let (tx, rx) = mpsc::channel(self.inner.capacity);
        modules.insert(
            name.to_owned(),
            Endpoint {
                group: Arc::from(group),
                tx,
                stats: Arc::default(),
            },
        );
        Ok(Mailbox {
            name: name.to_owned(),
            rx,
        })
    }

    /// Removes a module; messages already queued stay readable from its mailbox.
    pub fn unregister(&self, name: &str) {
        write(&self.inner.modules).remove(name);
    }

    /// True when a module of that name is registered.
    pub fn has_module(&self, name: &str) -> bool {
        read(&self.inner.modules).contains_key(name)
    }

    fn endpoint(&self, name: &str) -> Result<Endpoint, BusError> {
        read(&self.inner.modules)
            .get(name)
            .cloned()
            .ok_or_else(|| BusError::UnknownModule(name.to_owned()))
    }

    /// A direct sender to `name`, resolved once.
    pub fn sender(&self, name: &str) -> Result<ModuleSender, BusError> {
        Ok(ModuleSender {
            name: Arc::from(name),
            endpoint: self.endpoint(name)?,
        })
    }

    /// Sends to module `name`, waiting for room in its mailbox.
    pub async fn send(&self, name: &str, msg: Message) -> Result<(), BusError> {
        let endpoint = self.endpoint(name)?;
        match endpoint.tx.send(msg).await {
            Ok(()) => {
                endpoint.stats.delivered.fetch_add(1, Ordering::Relaxed);
                Ok(())
            }
            Err(_) => Err(BusError::Closed(name.to_owned())),
        }
    }

    /// Sends to module `name` only if its mailbox has room now.
    pub fn try_send(&self, name: &str, msg: Message) -> Result<(), BusError> {
        let endpoint = self.endpoint(name)?;
        match endpoint.tx.try_send(msg) {
            Ok(()) => {
                endpoint.stats.delivered.fetch_add(1, Ordering::Relaxed);
                Ok(())
            }
            Err(mpsc::error::TrySendError::Full(_)) => {
                endpoint.stats.rejected.fetch_add(1, Ordering::Relaxed);
                Err(BusError::Full(name.to_owned()))
            }
            Err(mpsc::error::TrySendError::Closed(_)) => Err(BusError::Closed(name.to_owned())),
        }
    }

    /// Sends a copy to every module of `group`; returns how many received it. A group with no
    /// members is not an error (KubeEdge drops such messages too).
    pub async fn send_to_group(&self, group: &str, msg: Message) -> usize {
        let members: Vec<(String, Endpoint)> = read(&self.inner.modules)
            .iter()
            .filter(|(_, e)| &*e.group == group)
            .map(|(n, e)| (n.clone(), e.clone()))
            .collect();
        let mut delivered = 0;
        for (name, endpoint) in members {
            if endpoint.tx.send(msg.clone()).await.is_ok() {
                endpoint.stats.delivered.fetch_add(1, Ordering::Relaxed);
                delivered += 1;
            } else {
                tracing::debug!(module = %name, "group member no longer receiving");
            }
        }
        delivered
    }

    /// Sends `msg` (marked `sync`) to module `name` and waits up to `timeout` for the message
    /// whose `parent_msg_id` is `msg`'s id.
    pub async fn send_sync(
        &self,
        name: &str,
        mut msg: Message,
        timeout: Duration,
    ) -> Result<Message, BusError> {
        msg.header.sync = true;
        let id = msg.header.id.clone();
        let reply = self.expect_reply(&id);
        if let Err(e) = self.send(name, msg).await {
            self.forget_reply(&id);
            return Err(e);
        }
        self.await_reply(name, id, reply, timeout).await
    }

    /// Parks a waiter for the reply to `msg_id`. Used by [`Bus::send_sync`], and by senders that
    /// deliver the request some other way (e.g. onto the cloud link) but want the reply back
    /// through the bus.
    pub fn expect_reply(&self, msg_id: &str) -> oneshot::Receiver<Message> {
        let (tx, rx) = oneshot::channel();
        lock(&self.inner.pending).insert(msg_id.to_owned(), tx);
        rx
    }

    /// Drops a waiter registered with [`Bus::expect_reply`].
    pub fn forget_reply(&self, msg_id: &str) {
        lock(&self.inner.pending).remove(msg_id);
    }

    /// Waits for a reply registered with [`Bus::expect_reply`], forgetting it on timeout.
    pub async fn await_reply(
        &self,
        module: &str,
        msg_id: String,
        reply: oneshot::Receiver<Message>,
        timeout: Duration,
    ) -> Result<Message, BusError> {
        match tokio::time::timeout(timeout, reply).await {
            Ok(Ok(message)) => Ok(message),
            Ok(Err(_)) => Err(BusError::Closed(module.to_owned())),
            Err(_) => {
                self.forget_reply(&msg_id);
                Err(BusError::Timeout {
                    module: module.to_owned(),
                    msg_id,
                    timeout,
                })
            }
        }
    }

    /// Delivers a reply to whoever waits for its `parent_msg_id`. Returns the message back when
    /// nobody waits, so the caller can route it another way or drop it.
    #[must_use = "an unclaimed reply is handed back to be routed or dropped"]
    pub fn send_response(&self, msg: Message) -> Option<Message> {
        let waiter = match msg.parent_id() {
            Some(parent) => lock(&self.inner.pending).remove(parent),
            None => None,
        };
        match waiter {
            // A waiter that gave up (timed out) hands the message back too.
            Some(tx) => tx.send(msg).err(),
            None => {
                self.inner
                    .unmatched_responses
                    .fetch_add(1, Ordering::Relaxed);
                Some(msg)
            }
        }
    }

    /// Number of requests waiting for replies.
    pub fn pending_replies(&self) -> usize {
        lock(&self.inner.pending).len()
    }
}

impl MetricsSource for Bus {
    /// Writes per-module mailbox metrics.
    fn write_metrics(&self, w: &mut PromWriter) {
        let modules = read(&self.inner.modules);
        let mut names: Vec<&String> = modules.keys().collect();
        names.sort();
        w.family(
            "wedge_bus_messages_delivered_total",
            "Messages delivered into a module's mailbox.",
            "counter",
        );
        for name in &names {
            let stats = &modules[*name].stats;
            w.sample(
                "wedge_bus_messages_delivered_total",
                &[("module", name)],
                stats.delivered.load(Ordering::Relaxed) as f64,
            );
        }
        w.family(
            "wedge_bus_messages_rejected_total",
            "Messages refused because a module's mailbox was full.",
            "counter",
        );
        for name in &names {
            let stats = &modules[*name].stats;
            w.sample(
                "wedge_bus_messages_rejected_total",
                &[("module", name)],
                stats.rejected.load(Ordering::Relaxed) as f64,
            );
        }
        w.family(
            "wedge_bus_mailbox_depth",
            "Messages queued in a module's mailbox.",
            "gauge",
        );
        for name in &names {
            let tx = &modules[*name].tx;
            let depth = tx.max_capacity() - tx.capacity();
            w.sample("wedge_bus_mailbox_depth", &[("module", name)], depth as f64);
        }
        w.family(
            "wedge_bus_pending_replies",
            "Synchronous requests waiting for a reply.",
            "gauge",
        );
        w.sample(
            "wedge_bus_pending_replies",
            &[],
            lock(&self.inner.pending).len() as f64,
        );
        w.family(
            "wedge_bus_unmatched_responses_total",
            "Responses whose parent_msg_id matched no waiting request.",
            "counter",
        );
        w.sample(
            "wedge_bus_unmatched_responses_total",
            &[],
            self.inner.unmatched_responses.load(Ordering::Relaxed) as f64,
        );
    }
}

// The bus's locks guard plain maps and are never held across an await or a call into module
// code, so a poisoned lock only means another thread panicked mid-insert; the map is still
// usable and the node must keep routing.
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}
fn read<T>(m: &RwLock<T>) -> std::sync::RwLockReadGuard<'_, T> {
    m.read().unwrap_or_else(|e| e.into_inner())
}
fn write<T>(m: &RwLock<T>) -> std::sync::RwLockWriteGuard<'_, T> {
    m.write().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests;
