//! Kubernetes resource quantities as the engine wants them: memory in bytes, CPU in
//! nano-CPUs. The parsers are the config's ([`wedge_core::config::quantity`]), so a value
//! config validation accepts is one edged can act on.

pub use wedge_core::config::quantity::{bytes, nano_cpus};
