//! MetaServer: the node's local Kubernetes API (`modules.metaManager.metaServer`, KubeEdge's
//! `127.0.0.1:10550`).
//!
//! So far Wedge serves KubeEdge v1.23's **unhold-upgrade** extension only ([`unhold`]):
//! `POST /api/v1/pods/unhold-upgrade` (body `<namespace>/<name>`) releases one pod held by its
//! `edge.kubeedge.io/hold-upgrade` annotation, `POST /api/v1/nodes/unhold-upgrade` (body the
//! node's name) every held pod of the node. The pods are read from metamanager's store
//! through the bus, so this works with the cloud away. Every other path (list, watch, get,
//! discovery) answers `501 Not Implemented` saying so, and the start says it once.

#![warn(missing_docs)]

mod module;
mod server;
mod settings;
pub mod unhold;

pub use module::MetaServer;
pub use settings::MetaServerSettings;
