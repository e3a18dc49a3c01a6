//! devicetwin's hooks over the node's mappers and twin handlers.
//!
//! devicetwin knows nothing of Wasm or DMI: it calls its `TwinHooks` trait. This crate
//! implements it for a node:
//!
//! * [`WasmTwinHooks`] (`wasm_hooks.rs`): twin handlers review proposed changes; Wasm mappers
//!   are handed device definitions and desired values — recorded by the hook and applied by one
//!   worker per mapper (`wasm_hooks/drive.rs`), so devicetwin never waits for a mapper and
//!   nothing queues without bound;
//! * [`NodeTwinHooks`] (`node_hooks.rs`): the node's hooks, fanning definitions and desired
//!   values out to the Wasm mappers and to KubeEdge mappers over DMI (`wedge-dmi`);
//! * [`trial`]: one module in a host of its own behind [`WasmTwinHooks`], for
//!   `wedge module test` (a handler reviews given updates, a mapper drives a given device).
//!
//! The `wedge` binary only wires them.

#![warn(missing_docs)]

mod node_hooks;
pub mod trial;
mod wasm_hooks;

pub use node_hooks::NodeTwinHooks;
pub use wasm_hooks::WasmTwinHooks;
