//! The ordered output stage: waits for each request's commit, then publishes its MQTT
//! messages, sends its cloud messages and tells the hooks about desired values — in arrival
//! order, so a device's results leave in the order its updates came in.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use tokio::sync::mpsc;
use wedge_core::message::{group, module, operation};
use wedge_core::outbox::{Outbox, Reservation, StagedRows};
use wedge_core::store::PendingWrite;
use wedge_core::{Bus, BusError, Content, Message, StoreError};

use crate::cloud_pending::Pending;
use crate::effects::{CloudContent, CloudMessage, Effects};
use crate::hooks::TwinHooks;
use crate::stats::Stats;

/// Sends what requests produce: MQTT through eventbus, cloud messages through edgehub.
pub(crate) struct Outputs {
    pub(crate) bus: Bus,
    pub(crate) hooks: Arc<dyn TwinHooks>,
    pub(crate) stats: Arc<Stats>,
    /// Whether the cloud link is up. Without an outbox, cloud messages are dropped while it is
    /// not (as edgecore does); with one, they are stored and wait for the link.
    pub(crate) connected: AtomicBool,
    /// The cloud link's durable outbox, when the node has a cloud link: cloud messages are
    /// then written in the same transaction as the rows they report ([`Outputs::stage`]).
    pub(crate) outbox: Option<Outbox>,
    /// Cloud messages waiting for their confirmation.
    pub(crate) pending: Mutex<Pending<Message>>,
}

impl Outputs {
    fn pending(&self) -> std::sync::MutexGuard<'_, Pending<Message>> {
        self.pending.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Sends everything `effects` holds except its rows, in order.
    pub(crate) async fn send(&self, effects: Effects) {
        for p in effects.publish {
            let msg = Message::build(
                module::TWIN,
                group::BUS,
                operation::PUBLISH,
                &p.topic,
                Content::string(p.payload),
            );
            match self.bus.send(module::EVENTBUS, msg).await {
                Ok(()) => {
                    self.stats.published.fetch_add(1, Ordering::Relaxed);
                }
                Err(BusError::UnknownModule(_)) => {
                    tracing::debug!(topic = %p.topic, "eventbus not running; not published");
                }
                Err(e) => tracing::warn!(topic = %p.topic, "not published: {e}"),
            }
        }
        for message in effects.cloud {
            self.to_cloud(message).await;
        }
        for desired in effects.desired {
            self.hooks.desired(desired);
        }
        for device in effects.removed {
            self.hooks.device_removed(&device);
        }
    }

    /// Sends one message to the cloud and keeps it pending until confirmed; dropped while
    /// disconnected, as edgecore does.
    pub(crate) async fn to_cloud(&self, message: CloudMessage) {
        if !self.connected.load(Ordering::Acquire) {
            self.stats.cloud_dropped.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let Some(msg) = cloud_message(message) else {
            return;
        };
        self.track(&msg);
        self.deliver(msg).await;
    }

    /// Takes a request's cloud messages out of `effects` and stages them for the outbox, so
    /// the request's write stores them with its rows: a crash after that commit can no longer
    /// lose them, and while the link is down they wait in the outbox instead of being dropped.
    /// `Ok(None)` without an outbox (they stay in `effects` for [`Outputs::to_cloud`]) or when
    /// there is nothing to stage. `Err` when the outbox refused them: they are out of `effects`
    /// and the caller decides whether the request fails or is stored without them.
    pub(crate) fn stage(&self, effects: &mut Effects) -> Result<Option<StagedCloud>, Refusal> {
        let Some(outbox) = self.outbox.as_ref() else {
            return Ok(None);
        };
        if effects.cloud.is_empty() {
            return Ok(None);
        }
        let messages: Vec<Message> = std::mem::take(&mut effects.cloud)
            .into_iter()
            .filter_map(cloud_message)
            .collect();
        match outbox.stage(&messages) {
            Ok((rows, reservation)) => Ok(Some(StagedCloud {
                rows,
                reservation,
                messages,
            })),
            Err(e) => Err(Refusal {
                messages: messages.len(),
                reason: e.to_string(),
            }),
        }
    }

    /// Staged messages are committed: the link will send them from the outbox; while it is up
    /// they are also kept pending until the cloud confirms them (spec §5.7).
    fn staged_committed(&self, messages: Vec<Message>, reservation: Reservation) {
        reservation.committed();
        self.stats
            .to_cloud
            .fetch_add(messages.len() as u64, Ordering::Relaxed);
        if self.connected.load(Ordering::Acquire) {
            for msg in &messages {
                self.track(msg);
            }
        }
    }

    fn track(&self, msg: &Message) {
        let mut pending = self.pending();
        pending.track(msg.header.id.clone(), msg.clone());
        pending.traffic(Instant::now());
    }

    async fn deliver(&self, msg: Message) {
        match self.bus.send(module::EDGEHUB, msg).await {
            Ok(()) => {
                self.stats.to_cloud.fetch_add(1, Ordering::Relaxed);
            }
            Err(e) => tracing::debug!("cloud message not sent: {e}"),
        }
    }

    /// A confirmation arrived.
    pub(crate) fn confirm(&self, parent: &str) {
        let mut pending = self.pending();
        pending.confirm(parent);
        pending.traffic(Instant::now());
    }

    /// The cloud link came up or went down.
    pub(crate) fn set_connected(&self, connected: bool) {
        self.connected.store(connected, Ordering::Release);
        if !connected {
            self.pending().disconnected();
        }
    }

    /// Re-sends, unchanged, every pending message once the link has been idle long enough.
    pub(crate) async fn resend_due(&self) {
        let due = self.pending().due(Instant::now());
        for msg in due {
            self.stats.resent.fetch_add(1, Ordering::Relaxed);
            self.deliver(msg).await;
        }
    }

    /// Messages waiting for confirmation.
    pub(crate) fn pending_count(&self) -> usize {
        self.pending().len()
    }
}

/// The outbox refused a request's cloud messages (see [`Outputs::stage`]).
#[derive(Debug)]
pub(crate) struct Refusal {
    /// How many messages it refused.
    pub(crate) messages: usize,
    /// The outbox's reason.
    pub(crate) reason: String,
}

/// A request's cloud messages, serialised into its write (see [`Outputs::stage`]).
pub(crate) struct StagedCloud {
    /// The outbox rows, inserted by the request's write.
    pub(crate) rows: StagedRows,
    /// Their places in the outbox, given back unless the write commits.
    pub(crate) reservation: Reservation,
    /// The messages, tracked as pending once committed.
    pub(crate) messages: Vec<Message>,
}

/// The envelope of a cloud message (source `twin`, group `resource`); `None` (logged) when its
/// JSON content does not parse, which would be a bug in a handler.
fn cloud_message(message: CloudMessage) -> Option<Message> {
    let content = match message.content {
        CloudContent::Json(text) => match Content::from_raw(text) {
            Ok(c) => c,
            Err(e) => {
                tracing::error!(resource = %message.resource, "cloud content is not JSON: {e}");
                return None;
            }
        },
        CloudContent::Text(text) => Content::string(text),
    };
    Some(Message::build(
        module::TWIN,
        group::RESOURCE,
        &message.operation,
        &message.resource,
        content,
    ))
}

/// One request's outputs, waiting for its write.
pub(crate) struct Job {
    /// The write of its rows (and staged cloud messages), if it has any.
    pub(crate) write: Option<PendingWrite<()>>,
    /// Its cloud messages, when they are part of the write.
    pub(crate) cloud: Option<(Vec<Message>, Reservation)>,
    /// What to send once the write has committed.
    pub(crate) effects: Effects,
    /// What to send instead if the write fails (e.g. a 500 result).
    pub(crate) on_failure: Option<Effects>,
}

/// Runs jobs in order until every sender is gone. `failed` is raised after a failed write so
/// the receive loop reloads its cache from SQLite.
pub(crate) async fn run_stage(
    mut jobs: mpsc::Receiver<Job>,
    outputs: Arc<Outputs>,
    failed: Arc<AtomicBool>,
) {
    while let Some(job) = jobs.recv().await {
        let written: Result<(), StoreError> = match job.write {
            Some(write) => write.await,
            None => Ok(()),
        };
        match written {
            Ok(()) => {
                if let Some((messages, reservation)) = job.cloud {
                    outputs.staged_committed(messages, reservation);
                }
                outputs.send(job.effects).await
            }
            Err(e) => {
                tracing::error!("devicetwin write failed; request answered 500: {e}");
                outputs.stats.write_failures.fetch_add(1, Ordering::Relaxed);
                failed.store(true, Ordering::Release);
                if let Some(answer) = job.on_failure {
                    outputs.send(answer).await;
                }
            }
        }
    }
}
