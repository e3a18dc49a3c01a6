//! `wedge-wasm`: the WebAssembly component host.
//!
//! Device mappers and twin handlers are components of the worlds in `wit/`. This crate compiles
//! them once per engine (cached on disk), instantiates them from pre-linked `InstancePre`s in a
//! pooling allocator, runs every call under an epoch deadline and a memory limit from the
//! module's manifest, grants WASI with no files, environment or arguments and TCP only to the
//! manifest's endpoints, and restarts a module that traps with exponential back-off.

#![warn(missing_docs)]

mod bindings;
pub mod capabilities;
mod engine;
mod error;
pub mod grants;
mod guest_log;
mod host_state;
mod http;
pub mod manifest;
mod memory;
pub mod package;
mod reporting;
pub mod serial;
pub mod services;
mod value;

pub use engine::{CompileSource, EngineSettings, WasmEngine};
pub use error::WasmError;
pub use guest_log::{GuestLogLine, LogPolicy, RECENT_LINES};
pub use manifest::{Manifest, ModuleKind};
pub use memory::{MemoryBudget, Reservation};
pub use services::{DeviceState, HostServices, MapperSink, Publisher, TwinReader};
pub use value::TwinValue;
mod handler;
mod lifecycle;

pub use handler::{HandlerModule, TwinUpdate, UpdateSource, Verdict};
pub use lifecycle::{ModuleStatus, RunState};
pub mod guest_build;
mod linking;
mod mapper;
mod registry;

pub use mapper::{Device, MapperModule, Property};
pub use registry::{
    Deployed, GuestLimits, MIGRATIONS, PodModule, WasmHost, is_pod_module, pod_module_name,
};
pub use reporting::{DEFAULT_REPORT_CYCLE, PushTarget};
