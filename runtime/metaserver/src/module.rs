//! MetaServer as a Wedge module: it owns the listener, and its mailbox keeps it supervised.

use std::sync::Arc;

use wedge_core::{Module, ModuleContext, ModuleError};

use crate::server::{self, NAME, Shared};
use crate::settings::MetaServerSettings;

/// The group MetaServer is registered under: its own, so no broadcast reaches it.
const GROUP: &str = "metaserver";

/// KubeEdge's MetaServer (the part Wedge serves so far; see the crate docs).
pub struct MetaServer {
    settings: Arc<MetaServerSettings>,
}

impl MetaServer {
    /// A MetaServer per `settings`.
    pub fn new(settings: MetaServerSettings) -> MetaServer {
        MetaServer {
            settings: Arc::new(settings),
        }
    }
}

impl Module for MetaServer {
    fn name(&self) -> &'static str {
        NAME
    }

    fn group(&self) -> &'static str {
        GROUP
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
        tracing::info!(address = %self.settings.listen, "metaserver: listening (unhold-upgrade only so far)");
        let app = server::router(Shared {
            bus: ctx.bus().clone(),
            settings: self.settings.clone(),
        });
        let stop = ctx.token().clone();
        let serving = tokio::spawn(async move {
            axum::serve(listener, app)
                .with_graceful_shutdown(async move { stop.cancelled().await })
                .await
        });
        // Nothing is sent to MetaServer; receiving keeps it answering the supervisor.
        while let Some(msg) = ctx.recv().await {
            tracing::debug!(op = %msg.route.operation, "metaserver: message ignored");
        }
        match serving.await {
            Ok(Ok(())) | Err(_) => Ok(()),
            Ok(Err(e)) => Err(format!("metaserver: the server stopped: {e}").into()),
        }
    }
}
