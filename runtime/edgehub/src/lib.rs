//! EdgeHub: the node's link to a KubeEdge CloudCore (`spec/kubeedge-compat.md` §2) — a
//! WebSocket over mutual TLS carrying KubeEdge's message envelope — and, beyond KubeEdge, a
//! durable outbox so that nothing bound for the cloud is lost while the link is down.
//!
//! [`link::EdgeHub`] is the module: it dials the cloud, sends what the outbox holds in commit
//! order and hands what the cloud sends to the other modules; [`bootstrap`] gets and rotates
//! the node certificate with a join token.

#![warn(missing_docs)]

pub mod bootstrap;
pub mod link;

/// The durable outbox the link sends from. It lives in `wedge-core` so that a module can stage
/// a cloud-bound message in the same transaction as the change it reports; re-exported here
/// because [`link::EdgeHub::new`] takes one.
pub mod outbox {
    pub use wedge_core::outbox::*;
}
