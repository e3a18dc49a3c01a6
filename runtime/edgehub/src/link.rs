//! The WebSocket link to CloudCore (`spec/kubeedge-compat.md` §2): settings, framing,
//! keepalive, inbound dispatch, outbound rate limit, reconnect backoff, mutual TLS, and the
//! [`EdgeHub`] module that ties them together over a durable queue.
//!
//! The pure parts (everything but `connection` and `module`) are unit-tested on their own; the
//! connection task and the module are tested end to end against an in-test TLS server.
//!
//! Where Wedge departs from edgecore, on purpose:
//! - Redial: 100 ms doubling to 800 ms, ±20 % jitter ([`BackoffSettings`]), instead of five
//!   dials 5 s apart then 30 s of sleep: back within a second of the cloud's return.
//! - Outbound traffic is durable: committed to the outbox before it is written, resent after a
//!   reconnect or restart in order with the same `msg_id` (at least once; see [`EdgeHub`]).
//! - Inbound frames over [`LinkSettings::max_frame`] (`wedge.edgeHub.maxFrameBytes`, 32 MiB by
//!   default) are skipped like malformed ones.
//! - `messageQPS: 0` means unlimited ([`TokenBucket`]).

mod answer_gate;
mod backoff;
mod connection;
mod dispatch;
mod frame;
mod inbound;
mod module;
mod ratelimit;
mod settings;
mod tls;

pub use backoff::{Backoff, BackoffSettings};
pub use dispatch::{Dispatch, route_inbound};
pub use frame::{FrameError, control_ack, decode, encode, is_control, keepalive};
pub use module::{EdgeHub, connection_message};
pub use ratelimit::TokenBucket;
pub use settings::{DEFAULT_MAX_FRAME, LinkSettings, SettingsError};
pub use tls::{TlsError, client_config};
