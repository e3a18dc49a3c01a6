//! MetaServer: the node's local Kubernetes API (`modules.metaManager.metaServer`, KubeEdge's
//! `127.0.0.1:10550`), for edge apps, client-go informers and `kubectl --server`.
//!
//! - [`api`]: GET, LIST, WATCH, writes and discovery, as KubeEdge v1.23.1 answers them:
//!   reads ask the cloud while connected and fall back to the node; watches are served from
//!   the node, with resource versions, history and `410 Gone` ([`cache`]); writes go to the
//!   cloud through an [`application`] to CloudCore's dynamicController.
//! - [`cache`]: the node's objects in memory, loaded from metamanager's SQLite at start and
//!   kept by metamanager's change feed ([`feed`]), so lists and watches work with no cloud.
//! - [`unhold`]: KubeEdge's unhold-upgrade extension (`POST /api/v1/pods/unhold-upgrade`,
//!   `/api/v1/nodes/unhold-upgrade`).
//! - [`selector`] and [`table`]: label and field selectors, and kubectl's `Table` answers.
//!
//! - [`ctl`]: the other `keadm ctl` extensions: restart, logs and exec (without a tty) of the
//!   node's pods, through edged.
//!
//! Not built yet (said at start): `featureGates.requireAuthorization` (HTTPS and
//! service-account tokens), `dummyServer`, and the device-update and confirm-upgrade
//! extensions.

#![warn(missing_docs)]

pub mod api;
pub mod application;
pub mod cache;
pub mod catalog;
pub mod ctl;
pub mod discovery;
pub mod feed;
mod module;
pub mod request;
pub mod resync;
pub mod selector;
mod server;
mod settings;
pub mod status;
pub mod table;
pub mod unhold;

pub use module::MetaServer;
pub use settings::MetaServerSettings;
