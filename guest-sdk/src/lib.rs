//! # wedge-guest
//!
//! The guest SDK for [Wedge](https://example.invalid/wedge) modules: device mappers and twin
//! handlers compiled to WebAssembly components (`wasm32-wasip2`) against the contract in
//! `wit/` (package `wedge:device@0.2.0`).
//!
//! A module crate is a `cdylib` that enables exactly one of this crate's features:
//!
//! * **`mapper`** — implement [`Mapper`] and export it with [`export_mapper!`]. Imports
//!   available: [`log`], [`report`], [`publish`], and for device I/O [`net`] (TCP, UDP, name
//!   lookup), [`http`] (HTTP(S) requests) and [`serial`] (serial ports).
//! * **`twin-handler`** — implement [`TwinHandler`] and export it with
//!   [`export_twin_handler!`]. Imports available: [`log`], [`twin`], [`publish`].
//!
//! The module's component imports only the interfaces its code calls (the componentizer drops
//! the others), and exports only the world whose export macro it invokes.
//!
//! ```no_run
//! # #[cfg(feature = "twin-handler")] // (the SDK's own doc tests run once per feature)
//! # mod example {
//! // Cargo.toml: crate-type = ["cdylib"],
//! // wedge-guest = { path = "../guest-sdk", features = ["twin-handler"] }
//! use wedge_guest::{TwinHandler, TwinUpdate, Verdict};
//!
//! #[derive(serde::Deserialize)]
//! struct Config { max: f64 }
//!
//! struct Limit(Config);
//!
//! impl TwinHandler for Limit {
//!     fn init(config: &str) -> Result<Self, String> {
//!         Ok(Limit(wedge_guest::parse_config(config)?))
//!     }
//!     fn on_update(&mut self, update: &TwinUpdate) -> Verdict {
//!         match update.value.as_f64() {
//!             Some(x) if x > self.0.max => Verdict::Replace(self.0.max.into()),
//!             _ => Verdict::Accept,
//!         }
//!     }
//! }
//!
//! wedge_guest::export_twin_handler!(Limit);
//! # }
//! ```
//!
//! Build with a rustup toolchain: `cargo build --release --target wasm32-wasip2`; the output
//! `target/wasm32-wasip2/release/<name>.wasm` is already a component. See the README for the
//! offline toolchain and the module manifest (`wedge.toml`).

#![warn(missing_docs)]

#[cfg(not(any(feature = "mapper", feature = "twin-handler")))]
compile_error!("wedge-guest: enable the `mapper` or the `twin-handler` feature (one per module)");

#[doc(hidden)]
pub mod bindings;
mod instance;
#[cfg(any(feature = "mapper", feature = "twin-handler"))]
pub mod log;
pub mod net;
mod types;

#[cfg(feature = "mapper")]
pub mod http;
#[cfg(feature = "mapper")]
mod mapper;
#[cfg(feature = "mapper")]
pub mod report;
#[cfg(feature = "mapper")]
pub mod serial;

#[cfg(any(feature = "mapper", feature = "twin-handler"))]
pub mod publish;
#[cfg(feature = "twin-handler")]
pub mod twin;
#[cfg(feature = "twin-handler")]
mod twin_handler;

pub use types::{
    Device, DeviceState, Property, TwinUpdate, TwinValue, UpdateSource, ValueType, Verdict,
    parse_config,
};

#[cfg(feature = "mapper")]
pub use mapper::Mapper;
#[cfg(feature = "twin-handler")]
pub use twin_handler::TwinHandler;

/// What the export macros expand to. Not public API; may change in any release.
#[doc(hidden)]
pub mod __private {
    #[cfg(feature = "mapper")]
    pub use crate::bindings::mapper;
    #[cfg(feature = "twin-handler")]
    pub use crate::bindings::twin_handler;
    #[cfg(feature = "mapper")]
    pub use crate::mapper::MapperExport;
    #[cfg(feature = "twin-handler")]
    pub use crate::twin_handler::TwinHandlerExport;
}
