//! The pod suite (`pod_suite/`) on the Docker engine.

mod common;
#[path = "pod_suite/mod.rs"]
mod pod_suite;

/// The runtime the suite's pods run on.
const RUNTIME: common::Runtime = common::Runtime::Docker;
