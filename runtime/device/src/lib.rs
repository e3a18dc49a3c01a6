//! The device vocabulary of Wedge's device plane.
//!
//! devicetwin, the Wasm host's mapper glue and DMI (KubeEdge's gRPC device API) all speak of
//! the same things: KubeEdge `Device` and `DeviceModel` objects, the *definition* a device
//! resolves to once its model is known, and KubeEdge's rules for what a twin key, value and
//! type may be. They live here, in a leaf crate, so those parts agree without depending on
//! each other.
//!
//! * [`definition`]: Device/DeviceModel objects (cloud JSON or local YAML), the catalog that
//!   resolves them, and [`definition::DeviceDefinition`].
//! * [`value`]: twin key, value and type rules, and `TwinValue`, a twin value typed by them.

#![warn(missing_docs)]

pub mod definition;
pub mod value;
