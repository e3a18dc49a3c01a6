//! ServiceBus: KubeEdge's HTTP bridge between the cloud's router and applications on the node.
//!
//! Two directions, both driven by CloudCore's router (`rules.kubeedge.io/v1`):
//! - **rest → servicebus**: a REST call on the cloud becomes a message whose resource is
//!   `<port>:<path>`; [`app_call`] calls `http://127.0.0.1:<port><path>` and sends the app's
//!   answer back as the reply.
//! - **servicebus → rest**: the rule's `start` message allows a cloud URL ([`target_urls`],
//!   kept in SQLite) and opens the [`server`] on `modules.serviceBus.server:port`; an edge app
//!   posts `{"method","targetURL","payload"}` to it, and the cloud endpoint's answer comes back.
//!
//! The wire format is KubeEdge v1.23.1's ([`wire`]). Where Wedge differs from edgecore, it is
//! said on the item: a stopped rule's URL is really forgotten ([`target_urls::same_url`]), an
//! app's answer over 5 MB is an error rather than cut short, and an edge app's request while
//! the cloud is away is refused at once rather than queued for a caller that gave up.

#![warn(missing_docs)]

pub mod app_call;
mod module;
pub mod server;
mod settings;
mod stats;
pub mod target_urls;
pub mod wire;

pub use module::{MAX_APP_CALLS, ROUTER_SOURCE, START, STOP, ServiceBus};
pub use settings::ServiceBusSettings;
pub use stats::Stats;
pub use target_urls::{COMPONENT, MIGRATIONS};
