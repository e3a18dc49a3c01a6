//! What handling one request does, as data: rows to write, MQTT messages to publish and
//! messages for the cloud.
//!
//! Handlers are pure functions over the device cache that return [`Effects`]; the module writes
//! `rows` in one transaction and only after it has committed sends `publish` (in order) and
//! `cloud`. A request is therefore never answered before its change is durable, and a failed
//! write answers nothing but the error.

use crate::device::{DeviceRecord, StoredAttr};
use crate::mapper_update::StoredTwin;

/// A change to one SQLite row (or a device's rows), carrying the data to write so it can be
/// applied later without looking at the cache again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RowChange {
    /// Insert or replace the `device` row and **all** of its attribute and twin rows (a new
    /// device, or one re-listed by membership detail).
    PutDevice(DeviceRecord),
    /// Delete the device and its attribute and twin rows.
    DeleteDevice {
        /// Device id.
        device: String,
    },
    /// Update `state` and `last_online` of a `device` row.
    PutState {
        /// Device id.
        device: String,
        /// State as sent.
        state: String,
        /// RFC 3339 or `""`.
        last_online: String,
    },
    /// Insert or replace one `device_twin` row.
    PutTwin {
        /// Device id.
        device: String,
        /// Twin key.
        key: String,
        /// The row.
        twin: StoredTwin,
    },
    /// Delete one `device_twin` row.
    DeleteTwin {
        /// Device id.
        device: String,
        /// Twin key.
        key: String,
    },
    /// Insert or replace one `device_attr` row.
    PutAttr {
        /// Device id.
        device: String,
        /// Attribute name.
        name: String,
        /// The row.
        attr: StoredAttr,
    },
    /// Delete one `device_attr` row.
    DeleteAttr {
        /// Device id.
        device: String,
        /// Attribute name.
        name: String,
    },
}

/// One MQTT message to publish (through eventbus).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Publish {
    /// Topic.
    pub topic: String,
    /// JSON payload.
    pub payload: String,
}

/// How the content of a cloud-bound message is written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CloudContent {
    /// A JSON value (e.g. `edge_updated`'s Result object).
    Json(String),
    /// A JSON text carried as a string (state updates, membership detail requests).
    Text(String),
}

/// One message to the cloud (source `twin`, group `resource`), kept pending until confirmed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CloudMessage {
    /// `update` or `get`.
    pub operation: String,
    /// e.g. `device/<id>/twin/edge_updated`, `device/<id>/state/update`, `membership/detail`.
    pub resource: String,
    /// The content.
    pub content: CloudContent,
}

/// A change a Wasm mapper must hear about after the commit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DesiredValue {
    /// Device id.
    pub device: String,
    /// Twin key.
    pub key: String,
    /// The desired (`expected`) value.
    pub value: String,
    /// The twin's type.
    pub value_type: String,
}

/// Everything one request does.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Effects {
    /// Rows to write, in one transaction, before anything below is sent.
    pub rows: Vec<RowChange>,
    /// MQTT messages, in this order.
    pub publish: Vec<Publish>,
    /// Messages for the cloud (dropped while disconnected).
    pub cloud: Vec<CloudMessage>,
    /// Desired values that now differ from the reported ones, for Wasm mappers.
    pub desired: Vec<DesiredValue>,
    /// Devices removed, for the mappers that drive them; told after the commit, so a failed
    /// removal never stops a mapper.
    pub removed: Vec<String>,
}

impl Effects {
    /// Effects that only publish `payload` on `topic`.
    pub fn publish_only(topic: String, payload: String) -> Effects {
        Effects {
            publish: vec![Publish { topic, payload }],
            ..Effects::default()
        }
    }

    /// Queues an MQTT message.
    pub fn publish(&mut self, topic: String, payload: String) {
        self.publish.push(Publish { topic, payload });
    }
}
