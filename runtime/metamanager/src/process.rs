//! Dispatch of incoming messages and the ordered follow-up stage.
//!
//! The receive loop never waits for a commit. Each message queues its write with the store (in
//! arrival order) and hands a follow-up to the *stage*: a single task that awaits follow-ups one
//! by one, in order. A follow-up waits for its write to commit and only then acknowledges,
//! forwards or answers. So concurrent messages share commits, every ACK comes after its commit,
//! outputs leave in arrival order, and a query queued behind a write reads that write.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use wedge_core::message::operation;
use wedge_core::metrics::PromWriter;
use wedge_core::{Message, Resource, Store};

use crate::in_flight::InFlight;
use crate::routing::{Router, is_connection_event};
use crate::settings::MetaManagerSettings;

/// Work that runs after everything queued before it.
pub(crate) type Followup = Pin<Box<dyn Future<Output = ()> + Send>>;

/// Messages handled and rejected, per operation.
#[derive(Default)]
pub(crate) struct Stats {
    pub(crate) by_op: [AtomicU64; OPS.len()],
    pub(crate) rejected: AtomicU64,
    /// Remote queries answered by an identical one already in flight ([`crate::in_flight`]).
    pub(crate) joined: AtomicU64,
}

const OPS: [&str; 8] = [
    operation::INSERT,
    operation::UPDATE,
    operation::PATCH,
    operation::DELETE,
    operation::QUERY,
    operation::RESPONSE,
    operation::CONNECT,
    "other",
];

impl Stats {
    fn count(&self, op: &str) {
        let index = OPS.iter().position(|o| *o == op).unwrap_or(OPS.len() - 1);
        self.by_op[index].fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn write_metrics(&self, w: &mut PromWriter) {
        w.family(
            "wedge_metamanager_messages_total",
            "Messages handled by the metamanager, by operation.",
            "counter",
        );
        for (op, count) in OPS.iter().zip(&self.by_op) {
            w.sample(
                "wedge_metamanager_messages_total",
                &[("operation", op)],
                count.load(Ordering::Relaxed) as f64,
            );
        }
        w.family(
            "wedge_metamanager_rejected_total",
            "Messages answered with an error (bad resource, missing content, failed write...).",
            "counter",
        );
        w.sample(
            "wedge_metamanager_rejected_total",
            &[],
            self.rejected.load(Ordering::Relaxed) as f64,
        );
        w.family(
            "wedge_metamanager_remote_queries_joined_total",
            "Remote queries that waited for the answer to the same query already sent to the cloud.",
            "counter",
        );
        w.sample(
            "wedge_metamanager_remote_queries_joined_total",
            &[],
            self.joined.load(Ordering::Relaxed) as f64,
        );
    }
}

/// One incarnation of the metamanager's message handling.
pub(crate) struct Processor {
    pub(crate) router: Router,
    pub(crate) store: Store,
    pub(crate) settings: MetaManagerSettings,
    pub(crate) stats: Arc<Stats>,
    pub(crate) token: CancellationToken,
    /// Remote queries on their way to the cloud.
    pub(crate) in_flight: InFlight,
    stage: mpsc::Sender<Followup>,
}

impl Processor {
    pub(crate) fn new(
        router: Router,
        store: Store,
        settings: MetaManagerSettings,
        stats: Arc<Stats>,
        token: CancellationToken,
    ) -> (Processor, tokio::task::JoinHandle<()>) {
        let (stage, followups) = mpsc::channel(settings.max_in_flight.max(1));
        let stage_task = tokio::spawn(run_stage(followups));
        (
            Processor {
                router,
                store,
                settings,
                stats,
                token,
                in_flight: InFlight::default(),
                stage,
            },
            stage_task,
        )
    }

    /// Queues `work` behind everything queued so far.
    pub(crate) async fn later(&self, work: impl Future<Output = ()> + Send + 'static) {
        if self.stage.send(Box::pin(work)).await.is_err() {
            tracing::error!("metamanager follow-up stage is gone; output dropped");
        }
    }

    /// Rejects `msg` with an error reply, in order with other outputs.
    pub(crate) async fn reject(&self, msg: Message, text: String) {
        self.stats.rejected.fetch_add(1, Ordering::Relaxed);
        let router = self.router.clone();
        self.later(async move { router.reply_error(&msg, text).await })
            .await;
    }

    /// Handles one message.
    pub(crate) async fn handle(&self, msg: Message) {
        let op = msg.route.operation.clone();
        self.stats.count(&op);
        if is_connection_event(&msg) {
            let connected = msg.content.as_string().as_deref() == Some("cloud_connected");
            tracing::info!(connected, "cloud connection state");
            self.router.set_connected(connected);
            return;
        }
        match op.as_str() {
            operation::INSERT => self.insert(msg).await,
            operation::UPDATE => self.update(msg).await,
            operation::PATCH => self.patch(msg).await,
            operation::DELETE => self.delete(msg).await,
            operation::QUERY => self.query(msg).await,
            operation::RESPONSE => self.response(msg).await,
            operation::ERROR => self.cloud_error(msg),
            other => {
                let text = format!(
                    "unknown operation {other:?} for resource {:?}",
                    msg.route.resource
                );
                self.reject(msg, text).await;
            }
        }
    }

    /// Parses the message's resource, rejecting the message when it is malformed or, with
    /// `need_name`, when it is a list form.
    pub(crate) async fn resource_of(
        &self,
        msg: &Message,
        need_name: bool,
    ) -> Option<(String, String)> {
        let parsed = match Resource::parse(&msg.route.resource) {
            Ok(r) if need_name && r.is_list() => Err(format!(
                "resource {:?} names no object (want <namespace>/<type>/<name>)",
                msg.route.resource
            )),
            Ok(r) => Ok(r.kind.to_owned()),
            Err(e) => Err(e.to_string()),
        };
        match parsed {
            Ok(kind) => Some((msg.route.resource.clone(), kind)),
            Err(text) => {
                self.reject(msg.clone(), text).await;
                None
            }
        }
    }

    /// An `error` from the cloud: hand it to the request waiting for it, else log it.
    fn cloud_error(&self, msg: Message) {
        if let Some(unclaimed) = self.router.bus().send_response(msg) {
            tracing::warn!(
                resource = %unclaimed.route.resource,
                "error from the cloud: {}",
                String::from_utf8_lossy(&unclaimed.content.to_bytes())
            );
        }
    }
}

async fn run_stage(mut followups: mpsc::Receiver<Followup>) {
    while let Some(work) = followups.recv().await {
        work.await;
    }
}
