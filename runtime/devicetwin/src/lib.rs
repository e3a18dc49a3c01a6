//! DeviceTwin: devices, attributes and twins with KubeEdge's tables, version rules and MQTT
//! topic protocol (`spec/kubeedge-compat.md` §5).
//!
//! Built so far: the topic grammar (`topics`), KubeEdge's validation rules and error strings
//! (`validate`), and the wire JSON (`wire`), each checked against the spec's worked examples.
//! The update algorithm, storage and the module itself come next (issue 4).

#![warn(missing_docs)]

pub mod topics;
pub mod validate;
pub mod wire;
