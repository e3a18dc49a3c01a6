//! `wedge-core`: the spine every Wedge module stands on.
//!
//! - [`message`]: KubeEdge's message envelope, byte-compatible with edgecore.
//! - [`bus`]: the in-process bus (KubeEdge's beehive) with bounded mailboxes and sync replies.
//! - [`module`]: the module contract and the supervisor that restarts failed modules.
//! - [`store`]: the node's SQLite database with a single group-committing writer.
//! - [`outbox`]: the durable queue of cloud-bound messages, which a module can write in the
//!   same transaction as the change its message reports.
//! - [`config`]: the `edgecore.yaml` model, defaults and validation.
//! - [`health`] and [`metrics`]: what `/healthz` and `/metrics` report.
//! - [`conn_slots`]: connection caps that close the idlest connection rather than wait.
//! - [`private_fs`]: directories and files written so other local users cannot steer them.
//! - [`kubelet_link`]: edgeStream's in-process connection to edged's kubelet server.
//!
//! This crate depends on no other Wedge crate; every module crate depends on it.

#![warn(missing_docs)]

pub mod bus;
pub mod config;
pub mod conn_slots;
pub mod health;
pub mod kubelet_link;
pub mod log_limit;
pub mod message;
pub mod metrics;
pub mod module;
pub mod outbox;
pub mod private_fs;
pub mod resource;
pub mod store;
pub mod time;

pub use bus::{Bus, BusError, Mailbox};
pub use message::{Content, Header, Message, Route};
pub use module::{Module, ModuleContext, ModuleError, Supervisor};
pub use resource::Resource;
pub use store::{Store, StoreError};
