//! The node itself, as KubeEdge's edged reports it through metamanager (§6): registration
//! (`insert null/node/<node>`, a remote call), status (`patch null/nodepatch/<node>` when it
//! changes, at least every `nodeStatusReportFrequency`), and the node lease
//! (`kube-node-lease/lease/<node>`, renewed every `nodeLeaseDurationSeconds / 4`, see
//! [`lease`]). Capacity, addresses and identity come from the host ([`host`]), the object's
//! shape from [`status`].
//!
//! These calls wait for the cloud (up to a minute) and fail while it is away; they run in
//! tasks of their own so pods never wait for them, and are tried again on the next tick. An
//! answer that carries the cloud's refusal is an error ([`CallError::Refused`]), logged with
//! the cloud's reason.

pub mod host;
pub mod lease;
pub mod pressure;
pub mod status;

use std::path::PathBuf;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use wedge_core::message::{CloudAnswer, CloudError, group, module, operation};
use wedge_core::time::now_ms;
use wedge_core::{Bus, Content, Message};

pub use host::HostInfo;
pub use status::{node_object, node_status};

/// Timing and facts of the node reports.
#[derive(Debug, Clone)]
pub struct NodeReportSettings {
    /// The node's name.
    pub node: String,
    /// How often the status is compared and sent when changed (`nodeStatusUpdateFrequency`,
    /// 10 s).
    pub status_every: Duration,
    /// The status is sent at least this often even unchanged (`nodeStatusReportFrequency`,
    /// 5 min).
    pub report_every: Duration,
    /// The lease's duration (`nodeLeaseDurationSeconds`, 40 s); it is renewed every quarter
    /// of it, as kubelet does.
    pub lease_duration: Duration,
    /// How long one call may wait for the cloud (1 min).
    pub call_timeout: Duration,
    /// Registration is retried this soon while the cloud has not taken it (2 s).
    pub register_retry: Duration,
    /// The node's address (`modules.edged.nodeIP`); the host's first address when `None`.
    pub node_ip: Option<String>,
    /// The port reported as the kubelet endpoint, where the cloud's stream server reaches
    /// the node's logs and exec (`readOnlyPort`, 10350 in KubeEdge).
    pub kubelet_port: u16,
    /// Pods the node accepts (`maxPods`, 110), its `pods` capacity.
    pub max_pods: u32,
    /// The container runtime's name in `containerRuntimeVersion` (`docker`).
    pub runtime_name: String,
    /// The node's root directory: the filesystem it is on is the ephemeral storage.
    pub root_directory: PathBuf,
}

impl NodeReportSettings {
    /// KubeEdge's timings for `node`.
    pub fn new(node: impl Into<String>) -> NodeReportSettings {
        NodeReportSettings {
            node: node.into(),
            status_every: Duration::from_secs(10),
            report_every: Duration::from_secs(300),
            lease_duration: Duration::from_secs(40),
            call_timeout: Duration::from_secs(60),
            register_retry: Duration::from_secs(2),
            node_ip: None,
            kubelet_port: 10350,
            max_pods: 110,
            runtime_name: "docker".to_owned(),
            root_directory: PathBuf::from("/var/lib/kubelet"),
        }
    }

    /// How often the lease is renewed: a quarter of its duration, as kubelet does.
    pub fn lease_renew_interval(&self) -> Duration {
        (self.lease_duration / 4).max(Duration::from_secs(1))
    }
}

/// Why a call through metamanager did not succeed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum CallError {
    /// The cloud answered and refused (its Kubernetes reason and message).
    #[error("{0}")]
    Refused(CloudError),
    /// No answer from the cloud: not connected, timed out, metamanager's own error.
    #[error("{0}")]
    Unreachable(String),
}

/// Sends `op resource` to metamanager and waits for the answer; `Ok(Some(object))` carries
/// the object the cloud returned.
pub(crate) async fn call(
    bus: &Bus,
    op: &str,
    resource: &str,
    content: Content,
    timeout: Duration,
) -> Result<Option<Value>, CallError> {
    let msg = Message::build(module::EDGED, group::META, op, resource, content);
    let reply = bus
        .send_sync(module::METAMANAGER, msg, timeout)
        .await
        .map_err(|e| CallError::Unreachable(e.to_string()))?;
    if reply.route.operation == operation::ERROR {
        return Err(CallError::Unreachable(
            reply
                .content
                .as_string()
                .unwrap_or_else(|| reply.content.raw().to_owned()),
        ));
    }
    match CloudAnswer::of(&reply.content) {
        CloudAnswer::Error(e) => Err(CallError::Refused(e)),
        CloudAnswer::Object(object) => Ok(Some(object)),
        CloudAnswer::Ok => Ok(None),
    }
}

/// Registers the node (retrying every status period until the cloud takes it; `registered`
/// turns true once its first status is in), then keeps its status fresh and its lease renewed (in a
/// task of its own) until `cancel`.
pub async fn report(
    bus: Bus,
    settings: NodeReportSettings,
    runtime_version: String,
    registered: std::sync::Arc<watch::Sender<bool>>,
    pressure: watch::Receiver<pressure::Pressure>,
    cancel: CancellationToken,
) {
    let node = settings.node.clone();
    let (uid_tx, uid_rx) = watch::channel(None::<String>);
    let mut lease_task = None;
    let mut last_sent: Option<(Value, std::time::Instant)> = None;
    let mut conditions = status::NodeConditions::new(now_ms());
    let mut status_tick = tokio::time::interval(settings.status_every);
    status_tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = cancel.cancelled() => break,
            _ = status_tick.tick() => {}
        }
        let host = HostInfo::read(&settings.root_directory);
        // The eviction manager's conditions, read before the first registration (edged
        // observes the node once before starting this task).
        let now = *pressure.borrow();
        conditions.observe(now, now_ms());
        if lease_task.is_none() {
            match register(&bus, &settings, &host, &runtime_version, &conditions).await {
                Some(uid) => {
                    if uid.is_some() {
                        uid_tx.send_replace(uid);
                    }
                    lease_task = Some(tokio::spawn(lease::run(
                        bus.clone(),
                        settings.clone(),
                        uid_rx.clone(),
                        cancel.child_token(),
                    )));
                }
                None => {
                    let retry = settings.register_retry.min(settings.status_every);
                    status_tick.reset_at(tokio::time::Instant::now() + retry);
                    continue;
                }
            }
        }
        let status = node_status(&settings, &host, &runtime_version, now_ms(), &conditions);
        let due = match &last_sent {
            None => true,
            Some((sent, at)) => {
                status::without_heartbeat(sent) != status::without_heartbeat(&status)
                    || at.elapsed() >= settings.report_every
            }
        };
        if !due {
            continue;
        }
        let patch = json!({"status": status}).to_string();
        let key = format!("null/nodepatch/{node}");
        match call(
            &bus,
            operation::PATCH,
            &key,
            Content::string(patch),
            settings.call_timeout,
        )
        .await
        {
            Ok(answer) => {
                if let Some(uid) = answer.as_ref().and_then(object_uid) {
                    uid_tx.send_if_modified(|known| {
                        let changed = known.as_deref() != Some(uid.as_str());
                        *known = Some(uid);
                        changed
                    });
                }
                last_sent = Some((status, std::time::Instant::now()));
                // The Node exists and its first status is in: what waits for the Node (the
                // EdgeStream tunnel, whose CloudCore side updates the Node's status and retries
                // only 20 s later when that update conflicts with ours) may go on.
                registered.send_if_modified(|done| !std::mem::replace(done, true));
            }
            Err(CallError::Refused(e)) => {
                tracing::warn!(node = %node, "node status refused by the cloud: {e}")
            }
            Err(e) => tracing::debug!(node = %node, "node status not sent: {e}"),
        }
    }
    if let Some(task) = lease_task {
        let _ = task.await;
    }
}

fn object_uid(object: &Value) -> Option<String> {
    object["metadata"]["uid"].as_str().map(str::to_owned)
}

/// Sends the Node object; `Some` once the cloud has it, with the object's uid when the cloud
/// returned it.
async fn register(
    bus: &Bus,
    settings: &NodeReportSettings,
    host: &HostInfo,
    version: &str,
    conditions: &status::NodeConditions,
) -> Option<Option<String>> {
    let node = &settings.node;
    let object = node_object(settings, host, version, now_ms(), conditions);
    let content = Content::json(&object).unwrap_or_else(|_| Content::null());
    let resource = format!("null/node/{node}");
    match call(
        bus,
        operation::INSERT,
        &resource,
        content,
        settings.call_timeout,
    )
    .await
    {
        Ok(answer) => {
            tracing::info!(node = %node, "node registered with the cloud");
            Some(answer.as_ref().and_then(object_uid))
        }
        // A node registered before: fine; its uid comes with the first status answer.
        Err(CallError::Refused(e)) if e.is_already_exists() => Some(None),
        Err(CallError::Refused(e)) => {
            tracing::warn!(node = %node, "node registration refused by the cloud: {e}");
            None
        }
        Err(e) => {
            tracing::debug!(node = %node, "node not registered yet: {e}");
            None
        }
    }
}
