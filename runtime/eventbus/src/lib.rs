//! EventBus: MQTT for the node, as KubeEdge's eventbus (`spec/kubeedge-compat.md` §4).
//!
//! Devices, mappers and apps talk MQTT; the rest of the node talks bus messages. This module sits
//! between them:
//!
//! - **Brokers** (`mqttMode`): 0 runs the embedded broker ([`broker`]) on `mqttServerInternal`,
//!   2 dials an external broker ([`external`]) on `mqttServerExternal`, 1 does both and publishes
//!   to both.
//! - **MQTT → bus** ([`inbound`]): `$hw/events/device...` / `$hw/events/node...` messages go to
//!   `twin` as `response`s with the base64 topic as resource; the rest go to the cloud as
//!   `upload`s.
//! - **Bus → MQTT** ([`outbound`]): `publish`, `subscribe` / `unsubscribe` (remembered in the
//!   `sub_topics` table, [`sub_topics`]), `message` and `get_result`.
//!
//! The daemon builds [`EventBusSettings::from_config`], applies [`MIGRATIONS`] under
//! [`COMPONENT`], and spawns [`EventBus::new`] under the supervisor.

#![warn(missing_docs)]

pub mod access;
pub mod broker;
mod error;
pub mod external;
pub mod inbound;
mod module;
pub mod outbound;
mod settings;
mod stats;
pub mod sub_topics;
mod tls;
pub mod topics;

pub use error::{EventBusError, SettingsError};
pub use module::EventBus;
pub use settings::{
    BrokerUrl, Credentials, DEFAULT_MAX_PAYLOAD, EventBusSettings, MqttMode, TlsFiles,
};
pub use stats::{DropReason, Stats};
pub use sub_topics::{COMPONENT, MIGRATIONS};
