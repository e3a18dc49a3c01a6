//! MetaManager: the node's metadata in SQLite.
//!
//! Receives KubeEdge's metadata operations from the cloud (through EdgeHub) and from local
//! modules (edged, twin), stores them in the `meta` table and routes them on, so pods, configmaps
//! and secrets are available with no cloud. Behaviour follows KubeEdge v1.23 (see
//! `spec/kubeedge-compat.md` §3): `insert`, `update`, `patch`, `delete` (pods guarded by UID),
//! `query` (remote types through the cloud while connected, cached), pushed `response`s, the
//! cloud connection state, the `"OK"` ACK after commit, and error replies.
//!
//! Throughput comes from the store's group commit: see `process` for how messages are pipelined
//! without ever acknowledging before the commit.

#![warn(missing_docs)]

mod in_flight;
mod meta_table;
mod process;
mod read_ops;
mod routing;
mod settings;
mod write_ops;

use std::sync::Arc;

pub use meta_table::MIGRATIONS;
pub use settings::MetaManagerSettings;

use wedge_core::message::{group, module};
use wedge_core::metrics::{MetricsSource, PromWriter};
use wedge_core::{Bus, Module, ModuleContext, ModuleError, Store};

use process::{Processor, Stats};
use routing::Router;

/// The metamanager module (`metamanager`, group `meta`).
pub struct MetaManager {
    router: Router,
    store: Store,
    settings: MetaManagerSettings,
    stats: Arc<Stats>,
}

impl MetaManager {
    /// A metamanager over `store`, whose `meta` table must exist (apply [`MIGRATIONS`] with
    /// `Store::migrate("metamanager", MIGRATIONS)` first).
    pub fn new(bus: Bus, store: Store, settings: MetaManagerSettings) -> MetaManager {
        MetaManager {
            router: Router::new(bus, &settings.cloud_module),
            store,
            settings,
            stats: Arc::default(),
        }
    }

    /// Whether the cloud is connected, as last broadcast by EdgeHub.
    pub fn cloud_connected(&self) -> bool {
        self.router.is_connected()
    }
}

impl MetricsSource for MetaManager {
    /// Writes message counters.
    fn write_metrics(&self, w: &mut PromWriter) {
        self.stats.write_metrics(w);
    }
}

impl Module for MetaManager {
    fn name(&self) -> &'static str {
        module::METAMANAGER
    }

    fn group(&self) -> &'static str {
        group::META
    }

    async fn run(self: Arc<Self>, mut ctx: ModuleContext) -> Result<(), ModuleError> {
        let (processor, stage) = Processor::new(
            self.router.clone(),
            self.store.clone(),
            self.settings.clone(),
            self.stats.clone(),
            ctx.token().clone(),
        );
        while let Some(msg) = ctx.recv().await {
            processor.handle(msg).await;
        }
        // Closing the stage lets it finish: every write already queued is committed and
        // acknowledged before the module reports stopped.
        drop(processor);
        stage.await?;
        Ok(())
    }
}

#[cfg(test)]
mod tests;
