//! MetaServer as a Wedge module: it loads the node's objects from metamanager, follows
//! metamanager's change feed and EdgeHub's connection broadcast, and serves HTTP.
//!
//! Start-up order: the listener is bound first (a taken port fails the module at once);
//! the objects are loaded type by type through metamanager's `query` while the mailbox is
//! read into a list (so metamanager, which feeds MetaServer with back-pressure, never waits
//! on a MetaServer that waits on it); the listed changes are applied after the load, in
//! order; then requests are served.

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use wedge_core::message::{group, module, operation};
use wedge_core::{Bus, Content, Message, Module, ModuleContext, ModuleError};

use crate::api::Api;
use crate::application::Agent;
use crate::cache::Cache;
use crate::catalog::known_store_types;
use crate::feed;
use crate::server::{self, NAME, Shared};
use crate::settings::MetaServerSettings;

/// How often watchers that take bookmarks get one.
const BOOKMARK_EVERY: Duration = Duration::from_secs(30);

/// KubeEdge's MetaServer (see the crate docs).
pub struct MetaServer {
    settings: Arc<MetaServerSettings>,
    cache: Arc<Cache>,
    kubelet: Option<wedge_core::kubelet_link::KubeletLink>,
}

impl MetaServer {
    /// A MetaServer per `settings`.
    pub fn new(settings: MetaServerSettings) -> MetaServer {
        MetaServer {
            settings: Arc::new(settings),
            cache: Arc::default(),
            kubelet: None,
        }
    }

    /// Reads pod logs for `keadm ctl logs` from edged's kubelet server through `link` (the
    /// in-process connection edgeStream uses); without it, logs answer that edged is off.
    pub fn with_kubelet_link(mut self, link: wedge_core::kubelet_link::KubeletLink) -> MetaServer {
        self.kubelet = Some(link);
        self
    }

    /// The objects it serves (for metrics and tests).
    pub fn cache(&self) -> &Arc<Cache> {
        &self.cache
    }
}

/// Every stored object of the served types, read from metamanager.
async fn load(
    bus: &Bus,
    timeout: Duration,
) -> Result<Vec<(&'static str, Vec<Value>)>, ModuleError> {
    let mut loaded = Vec::new();
    for store_type in known_store_types() {
        // The list form answers every object of the type, in all namespaces.
        let query = Message::build(
            NAME,
            group::META,
            operation::QUERY,
            &format!("default/{store_type}"),
            Content::null(),
        );
        let reply = bus
            .send_sync(module::METAMANAGER, query, timeout)
            .await
            .map_err(|e| format!("metaserver: cannot read the node's {store_type}s: {e}"))?;
        if reply.route.operation == operation::ERROR {
            return Err(format!(
                "metaserver: metamanager refused to list {store_type}s: {}",
                reply.content.as_string().unwrap_or_default()
            )
            .into());
        }
        let texts: Vec<String> = reply.content.parse().unwrap_or_default();
        let objects = texts
            .iter()
            .filter_map(|t| serde_json::from_str::<Value>(t).ok())
            .filter(Value::is_object)
            .collect();
        loaded.push((store_type, objects));
    }
    Ok(loaded)
}

impl MetaServer {
    fn take(&self, agent: &Agent, msg: &Message) {
        if msg.route.operation == operation::CONNECT && msg.route.resource == "node/connection" {
            let up = msg.content.as_string().as_deref() == Some("cloud_connected");
            agent.set_connected(up);
            return;
        }
        if !feed::apply(&self.cache, msg) {
            tracing::debug!(op = %msg.route.operation, resource = %msg.route.resource, "metaserver: message not served");
        }
    }
}

impl wedge_core::metrics::MetricsSource for MetaServer {
    /// Writes the objects, watches and what was refused or shed (`wedge_metaserver_*`).
    fn write_metrics(&self, w: &mut wedge_core::metrics::PromWriter) {
        self.cache.write_metrics(w);
    }
}

impl Module for MetaServer {
    fn name(&self) -> &'static str {
        NAME
    }

    fn group(&self) -> &'static str {
        group::METASERVER
    }

    async fn run(self: Arc<Self>, mut ctx: ModuleContext) -> Result<(), ModuleError> {
        let listener = tokio::net::TcpListener::bind(&self.settings.listen)
            .await
            .map_err(|e| {
                format!(
                    "cannot listen on {} (modules.metaManager.metaServer.server): {e}",
                    self.settings.listen
                )
            })?;
        let bus = ctx.bus().clone();
        let agent = Arc::new(Agent::new(bus.clone(), &self.settings.node_name));
        // Load while the mailbox is read (module docs).
        let mut early = Vec::new();
        let loaded = {
            let loading = load(&bus, self.settings.query_timeout);
            tokio::pin!(loading);
            loop {
                tokio::select! {
                    loaded = &mut loading => break loaded?,
                    msg = ctx.recv() => match msg {
                        Some(m) => early.push(m),
                        None => return Ok(()),
                    },
                }
            }
        };
        let mut objects = 0;
        for (store_type, list) in loaded {
            objects += list.len();
            for object in list {
                feed::load(&self.cache, store_type, object);
            }
        }
        for msg in &early {
            self.take(&agent, msg);
        }
        self.cache.loaded();
        tracing::info!(
            address = %self.settings.listen,
            objects,
            revision = self.cache.revision(),
            "metaserver: listening"
        );
        let app = server::router(Shared {
            bus: bus.clone(),
            settings: self.settings.clone(),
            api: Arc::new(Api::new(
                self.cache.clone(),
                agent.clone(),
                crate::ctl::Ctl {
                    bus: bus.clone(),
                    kubelet: self.kubelet.clone(),
                },
            )),
        });
        let stop = ctx.token().clone();
        let serving = tokio::spawn(serve(listener, app, stop));
        let mut bookmarks = tokio::time::interval(BOOKMARK_EVERY);
        bookmarks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                msg = ctx.recv() => {
                    let Some(msg) = msg else { break };
                    let reconnected = msg.route.operation == operation::CONNECT
                        && msg.content.as_string().as_deref() == Some("cloud_connected");
                    self.take(&agent, &msg);
                    if reconnected {
                        // Tell the cloud our watches again (it sends what they cover), then
                        // remove what it deleted meanwhile (`resync`).
                        let (agent, cache, bus) = (agent.clone(), self.cache.clone(), bus.clone());
                        tokio::spawn(async move {
                            agent.sync_watches().await;
                            let removed = crate::resync::deletions(&agent, &cache, &bus).await;
                            if removed > 0 {
                                tracing::info!(removed, "metaserver: deletions made during the outage applied");
                            }
                        });
                    }
                }
                _ = bookmarks.tick() => self.cache.bookmark(),
            }
        }
        match serving.await {
            Ok(Ok(())) | Err(_) => Ok(()),
            Ok(Err(e)) => Err(format!("metaserver: the server stopped: {e}").into()),
        }
    }
}

/// How much a connection's writer buffers before it waits for its client (hyper's default is
/// ~400 KiB). A watch whose client does not read holds at most this in Wedge, not hyper's
/// default times every open watch: 1,000 unread watches held 342 MiB with the default.
const WRITE_BUFFER: usize = 64 * 1024;

/// Serves `app` on `listener` until `stop`, each connection with a bounded write buffer.
async fn serve(
    listener: tokio::net::TcpListener,
    app: axum::Router,
    stop: tokio_util::sync::CancellationToken,
) -> std::io::Result<()> {
    loop {
        let (stream, _) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                // Out of descriptors and the like: the listener stays; try again shortly.
                Err(e) => {
                    tracing::warn!("metaserver: accept failed: {e}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
            _ = stop.cancelled() => return Ok(()),
        };
        let service = hyper_util::service::TowerToHyperService::new(app.clone());
        let stop = stop.clone();
        tokio::spawn(async move {
            let conn = hyper::server::conn::http1::Builder::new()
                .max_buf_size(WRITE_BUFFER)
                .serve_connection(hyper_util::rt::TokioIo::new(stream), service);
            tokio::pin!(conn);
            tokio::select! {
                _ = conn.as_mut() => {}
                _ = stop.cancelled() => conn.as_mut().graceful_shutdown(),
            }
        });
    }
}
