//! Where the metamanager's outputs go: the cloud link, edged, twin, or back to a requester.
//!
//! A destination that is not on the bus (no cloud link configured, edged disabled) is not an
//! error for the node: the message is dropped with a debug line, exactly as KubeEdge drops
//! traffic for modules it did not start.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use wedge_core::message::{group, module, operation};
use wedge_core::{Bus, BusError, Content, Message};

/// Sends the metamanager's outputs and tracks the cloud connection state.
#[derive(Clone)]
pub struct Router {
    bus: Bus,
    cloud_module: Arc<str>,
    connected: Arc<AtomicBool>,
}

impl Router {
    /// A router sending cloud-bound traffic to `cloud_module`.
    pub fn new(bus: Bus, cloud_module: &str) -> Router {
        Router {
            bus,
            cloud_module: Arc::from(cloud_module),
            connected: Arc::new(AtomicBool::new(false)),
        }
    }

    /// The bus.
    pub fn bus(&self) -> &Bus {
        &self.bus
    }

    /// The module cloud traffic goes to.
    pub fn cloud_module(&self) -> &str {
        &self.cloud_module
    }

    /// Whether EdgeHub last said the cloud is connected.
    pub fn is_connected(&self) -> bool {
        self.connected.load(Ordering::Acquire)
    }

    /// Records EdgeHub's connection broadcast.
    pub fn set_connected(&self, connected: bool) {
        self.connected.store(connected, Ordering::Release);
    }

    /// Sends to the cloud link.
    pub async fn to_cloud(&self, msg: Message) {
        let cloud = self.cloud_module.clone();
        self.deliver(&cloud, msg).await;
    }

    /// Sends to edged.
    pub async fn to_edged(&self, msg: Message) {
        self.deliver(module::EDGED, msg).await;
    }

    /// Tells MetaServer (when it runs) that the object stored under `key` changed: `op` is
    /// `insert`, `update` or `delete`, `content` the object. Sent after the commit, in order
    /// with every other output, and with back-pressure: MetaServer's watches see each
    /// committed change once and none is dropped.
    pub async fn to_metaserver(&self, op: &str, key: &str, content: Content) {
        if !self.bus.has_module(module::METASERVER) {
            return;
        }
        let msg = Message::build(module::METAMANAGER, group::METASERVER, op, key, content);
        self.deliver(module::METASERVER, msg).await;
    }

    /// Sends a copy of a devicecontroller message to the twin module, re-routed as KubeEdge
    /// does (source `meta`, group `twin`).
    pub async fn to_twin(&self, msg: &Message) {
        let mut copy = msg.clone();
        copy.route.source = group::META.to_owned();
        copy.route.group = group::TWIN.to_owned();
        self.deliver(module::TWIN, copy).await;
    }

    /// Answers `request` with `reply`: through the waiting `send_sync` if the request was
    /// synchronous, else to the requesting module if it is local, else to the cloud.
    pub async fn reply(&self, request: &Message, reply: Message) {
        let reply = if request.header.sync {
            match self.bus.send_response(reply) {
                None => return,
                Some(unclaimed) => unclaimed,
            }
        } else {
            reply
        };
        let source = request.route.source.as_str();
        if !source.is_empty() && self.bus.has_module(source) {
            self.deliver(source, reply).await;
        } else {
            self.to_cloud(reply).await;
        }
    }

    /// Sends an error reply for `request` (source `metamanager`, the request's group).
    pub async fn reply_error(&self, request: &Message, text: impl Into<String>) {
        let text = text.into();
        tracing::warn!(
            operation = %request.route.operation,
            resource = %request.route.resource,
            source = %request.route.source,
            "rejected: {text}"
        );
        let reply = request.error_reply(module::METAMANAGER, &request.route.group, text);
        self.reply(request, reply).await;
    }

    /// Answers a local module's request with `"OK"`.
    pub async fn ok_to(&self, request: &Message) {
        self.reply(request, request.response(Content::ok())).await;
    }

    async fn deliver(&self, target: &str, msg: Message) {
        match self.bus.send(target, msg).await {
            Ok(()) => {}
            Err(BusError::UnknownModule(_)) => {
                tracing::debug!(target, "module not running; message dropped");
            }
            Err(e) => tracing::warn!(target, "message not delivered: {e}"),
        }
    }
}

/// True for the connection broadcast EdgeHub sends (`connect` on `node/connection`).
pub fn is_connection_event(msg: &Message) -> bool {
    msg.route.operation == operation::CONNECT && msg.route.resource == "node/connection"
}
