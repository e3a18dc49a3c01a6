//! Hook reviews in flight, so one slow review holds up only its own device.
//!
//! A twin update that a hook reviews (a Wasm twin handler may take up to its deadline) runs
//! its review as a task of its own; the receive loop goes on with other devices meanwhile.
//! Order is kept where it matters: a later request for a device under review is parked until
//! that review is committed, and a request that is not about one device (membership,
//! definitions) waits until no review is in flight. Both are bounded: past
//! [`MAX_REVIEWS`] reviews or [`MAX_PARKED`] parked requests the loop stops reading its
//! mailbox, which pushes back on the senders.

use std::collections::{HashMap, VecDeque};
use std::future::Future;

use tokio::task::{Id, JoinSet};
use wedge_core::Message;

use crate::effects::Effects;
use crate::inbound::Request;
use crate::wire::TwinMessage;

/// Reviews running at once.
pub const MAX_REVIEWS: usize = 256;
/// Requests parked behind reviews at once.
pub const MAX_PARKED: usize = 4096;

/// What a finished review asks the loop to do.
pub(crate) enum Reviewed {
    /// Apply the (possibly rewritten) update, as of `now`.
    Commit(TwinMessage, i64),
    /// Answer with this error result; nothing changes.
    Answer(Effects),
}

/// Which requests a request must stay ordered with.
pub(crate) enum Scope {
    /// None: handled as it comes (confirmations, connection state).
    Free,
    /// Others of this device.
    Device(String),
    /// Every request: it waits for all reviews.
    Global,
}

impl Scope {
    /// The scope of `request`.
    pub(crate) fn of(request: &Request) -> Scope {
        match request {
            Request::Confirm { .. } | Request::Connection(_) | Request::Ignored(_) => Scope::Free,
            Request::Device { device, .. }
            | Request::CloudAttributes { device }
            | Request::CloudSync { device } => Scope::Device(device.clone()),
            _ => Scope::Global,
        }
    }
}

/// The reviews in flight and the requests waiting behind them.
pub(crate) struct Reviews {
    tasks: JoinSet<(String, Reviewed)>,
    /// Per task: its device and the answer to publish should the task die.
    running: HashMap<Id, (String, Effects)>,
    /// Devices under review.
    busy: HashMap<String, Id>,
    parked: HashMap<String, VecDeque<(Message, Request)>>,
    parked_count: usize,
    /// A request waiting for every review to end.
    held: Option<(Message, Request)>,
}

impl Reviews {
    pub(crate) fn new() -> Reviews {
        Reviews {
            tasks: JoinSet::new(),
            running: HashMap::new(),
            busy: HashMap::new(),
            parked: HashMap::new(),
            parked_count: 0,
            held: None,
        }
    }

    /// True when the loop may read another request.
    pub(crate) fn accepting(&self) -> bool {
        self.held.is_none() && self.busy.len() < MAX_REVIEWS && self.parked_count < MAX_PARKED
    }

    /// True when some review runs.
    pub(crate) fn any(&self) -> bool {
        !self.busy.is_empty()
    }

    /// True when `device` is under review.
    pub(crate) fn busy(&self, device: &str) -> bool {
        self.busy.contains_key(device)
    }

    /// Starts reviewing `device`; `if_lost` is published should the task die.
    pub(crate) fn spawn(
        &mut self,
        device: String,
        if_lost: Effects,
        review: impl Future<Output = Reviewed> + Send + 'static,
    ) {
        let key = device.clone();
        let handle = self.tasks.spawn(async move { (key, review.await) });
        self.busy.insert(device.clone(), handle.id());
        self.running.insert(handle.id(), (device, if_lost));
    }

    /// Waits for the next review to end (pending forever when none runs).
    pub(crate) async fn next(&mut self) -> (String, Reviewed) {
        loop {
            match self.tasks.join_next_with_id().await {
                None => std::future::pending::<()>().await,
                Some(Ok((id, (device, reviewed)))) => {
                    self.running.remove(&id);
                    self.busy.remove(&device);
                    return (device, reviewed);
                }
                Some(Err(e)) => {
                    let Some((device, if_lost)) = self.running.remove(&e.id()) else {
                        continue;
                    };
                    tracing::error!(device = %device, "twin review task failed: {e}");
                    self.busy.remove(&device);
                    return (device, Reviewed::Answer(if_lost));
                }
            }
        }
    }

    /// Parks a request of `device` until its review ends.
    pub(crate) fn park(&mut self, device: String, msg: Message, request: Request) {
        self.parked_count += 1;
        self.parked
            .entry(device)
            .or_default()
            .push_back((msg, request));
    }

    /// The next parked request of `device`.
    pub(crate) fn unpark(&mut self, device: &str) -> Option<(Message, Request)> {
        let queue = self.parked.get_mut(device)?;
        let next = queue.pop_front();
        if queue.is_empty() {
            self.parked.remove(device);
        }
        if next.is_some() {
            self.parked_count -= 1;
        }
        next
    }

    /// Holds a request until no review runs.
    pub(crate) fn hold(&mut self, msg: Message, request: Request) {
        self.held = Some((msg, request));
    }

    /// The held request, once no review runs.
    pub(crate) fn take_held(&mut self) -> Option<(Message, Request)> {
        if self.any() {
            return None;
        }
        self.held.take()
    }
}
