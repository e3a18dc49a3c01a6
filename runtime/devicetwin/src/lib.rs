//! DeviceTwin: devices, attributes and twins with KubeEdge's tables, version rules and MQTT
//! topic protocol (`spec/kubeedge-compat.md` §5).
//!
//! Built so far: the topic grammar (`topics`), KubeEdge's validation rules and error strings
//! (`validate`), the wire JSON (`wire`) and a mapper's update with its version rules and
//! outputs (`mapper_update`), each checked against the spec's worked examples. Cloud syncs,
//! storage and the module itself come next (issue 4).

#![warn(missing_docs)]

pub mod attributes;
pub mod cloud_pending;
pub mod cloud_sync;
pub mod definition;
pub mod device;
pub mod effects;
pub mod hooks;
pub mod inbound;
pub mod mapper_update;
pub mod membership;
pub mod module;
pub mod output;
mod reviews;
pub mod settings;
pub mod state;
pub mod stats;
pub mod storage;
pub mod topics;
pub mod twin_get;
pub mod twin_update;
pub mod validate;
pub mod wire;
pub mod wire_device;
