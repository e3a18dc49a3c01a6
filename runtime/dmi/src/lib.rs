//! DMI, KubeEdge's Device Management Interface (gRPC, v1beta1), on a Wedge node.
//!
//! Since KubeEdge v1.15 every mapper built with KubeEdge's mapper-framework (modbus, onvif,
//! opcua, bluetooth, virtual, ...) talks to its node over DMI instead of MQTT. This crate is
//! the node's side, as edgecore v1.23.1 does it:
//!
//! * the [`Dmi`] module serves `DeviceManagerService` on the node's DMI socket
//!   (`modules.deviceTwin.dmiSockPath`, read as [`socket_path`]): `MapperRegister` answers a
//!   mapper with the devices and models of its protocol, and reports
//!   (`ReportDeviceStatus`, `ReportDeviceStates`) go to devicetwin on the bus as the plain
//!   device topics an MQTT mapper would publish on, so they take the same path;
//! * the node calls each registered mapper's `DeviceMapperService` (`RegisterDevice`,
//!   `UpdateDevice`, `RemoveDevice`, the model calls; never `GetDevice`, which crashes
//!   mapper-framework v1.23.1 mappers) when devices of its protocol are defined, changed or
//!   removed, or when a twin's desired value must reach a device: the daemon forwards
//!   devicetwin's hooks to [`Dmi::device_defined`], [`Dmi::device_removed`] and
//!   [`Dmi::desired`]. How: `state.rs` (level-triggered, one worker per mapper).
//! * [`convert`] builds the messages from KubeEdge's objects exactly as edgecore does.
//!
//! Registered mappers are kept in SQLite (`dmi_mapper`, [`MIGRATIONS`]), so a node that
//! restarts still reaches the mappers that registered before.
//!
//! Unlike edgecore, the socket is guarded (see [`DmiSettings`]): it is created 0600 whatever
//! the umask (`socket.rs`); a connection is admitted only from allowed users, by the kernel's
//! peer credentials, and within a connection cap (`peer.rs`, `accept.rs`); HTTP/2 frames,
//! header lists, windows, streams, messages and requests in flight are bounded (`authority.rs`,
//! `inflight.rs`, [`Limits`]); a protocol is held by the process that registered it while its
//! mapper lives, and a device's reports count only from that process, at a bounded rate
//! (`owner.rs`, `rate.rs`). Every refusal is counted ([`DmiCounters`], `/metrics`).

#![warn(missing_docs)]

mod accept;
mod admit;
pub mod authority;
mod client;
pub mod convert;
mod error;
mod inflight;
mod module;
mod owner;
mod peer;
mod rate;
mod server;
mod settings;
mod socket;
mod state;
mod stats;
mod store;

pub use error::DmiError;
pub use module::{Dmi, ProtocolOwner};
pub use server::socket_path;
pub use settings::{Access, DmiSettings, Limits, Rate};
pub use stats::DmiCounters;
pub use store::{COMPONENT, MIGRATIONS};

/// The generated DMI v1beta1 messages and services.
#[allow(missing_docs, clippy::all)]
pub mod pb {
    tonic::include_proto!("v1beta1");
}
