//! The ordered output stage: waits for each request's commit, then publishes its MQTT
//! messages, sends its cloud messages and tells the hooks about desired values — in arrival
//! order, so a device's results leave in the order its updates came in.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use tokio::sync::mpsc;
use wedge_core::message::{group, module, operation};
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
    /// Whether the cloud link is up; cloud messages are dropped while it is not.
    pub(crate) connected: AtomicBool,
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
        let content = match message.content {
            CloudContent::Json(text) => match Content::from_raw(text) {
                Ok(c) => c,
                Err(e) => {
                    tracing::error!(resource = %message.resource, "cloud content is not JSON: {e}");
                    return;
                }
            },
            CloudContent::Text(text) => Content::string(text),
        };
        let msg = Message::build(
            module::TWIN,
            group::RESOURCE,
            &message.operation,
            &message.resource,
            content,
        );
        {
            let mut pending = self.pending();
            pending.track(msg.header.id.clone(), msg.clone());
            pending.traffic(Instant::now());
        }
        self.deliver(msg).await;
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

/// One request's outputs, waiting for its write.
pub(crate) struct Job {
    /// The write of its rows, if it has any.
    pub(crate) write: Option<PendingWrite<()>>,
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
            Ok(()) => outputs.send(job.effects).await,
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
