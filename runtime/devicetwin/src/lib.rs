//! DeviceTwin: devices, attributes and twins with KubeEdge's tables, version rules and MQTT
//! topic protocol (`spec/kubeedge-compat.md` §5).
//!
//! The [`module::DeviceTwin`] module receives requests from eventbus (MQTT topics, parsed by
//! [`topics`]/[`inbound`]), the Wasm host and the cloud, runs a pure handler per request over
//! the in-memory device cache ([`twin_update`] with [`mapper_update`]'s version rules,
//! [`cloud_sync`], [`membership`], [`state`], [`attributes`], [`twin_get`]; KubeEdge's rules
//! and error strings in [`validate`], the wire JSON in [`wire`]), and hands the resulting
//! [`effects`] to the ordered [`output`] stage: rows to SQLite ([`storage`]), then results to
//! MQTT, messages to the cloud (staged in the outbox with the rows) and desired values to
//! mappers. [`limits`] caps what any client can add; [`definition`] turns KubeEdge `Device`
//! and `DeviceModel` objects into devices; [`hooks`] is where Wasm handlers and mappers plug
//! in.

#![warn(missing_docs)]

pub mod admin;
pub mod attributes;
pub mod cloud_pending;
pub mod cloud_sync;
pub mod definition;
pub mod device;
pub mod effects;
pub mod hooks;
pub mod inbound;
pub mod limits;
pub mod mapper_update;
pub mod membership;
pub mod module;
pub mod objects;
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
