//! The pod suite (`pod_suite/`) on containerd through CRI: the same tests as `pods.rs`.

mod common;
#[path = "pod_suite/mod.rs"]
mod pod_suite;

/// The runtime the suite's pods run on.
const RUNTIME: common::Runtime = common::Runtime::Cri;
