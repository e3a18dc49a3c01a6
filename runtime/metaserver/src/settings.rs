//! The MetaServer's settings.

use std::time::Duration;

/// Where MetaServer listens and what it serves for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetaServerSettings {
    /// `host:port` (`modules.metaManager.metaServer.server`).
    pub listen: String,
    /// This node's name (the only node whose pods it releases).
    pub node_name: String,
    /// How long a lookup in metamanager may take.
    pub query_timeout: Duration,
}

impl MetaServerSettings {
    /// The settings of `modules.metaManager.metaServer` for node `node_name`.
    pub fn from_config(
        config: &wedge_core::config::MetaServer,
        node_name: &str,
    ) -> MetaServerSettings {
        MetaServerSettings {
            listen: config.server.clone(),
            node_name: node_name.to_owned(),
            query_timeout: Duration::from_secs(10),
        }
    }
}
