//! What the node's admin API shows of devices and twins, and the desired value an operator
//! sets (`wedge twin set`): it is delivered as the cloud delivers one, a twin sync
//! (`twin/cloud_updated`, one cloud version past the stored one), so it takes the same path —
//! handler review, versions, document and delta, the mappers told after the commit.

use std::collections::BTreeMap;

use serde::Serialize;
use wedge_core::message::{group, module};
use wedge_core::{Content, Message};

use crate::device::DeviceRecord;
use crate::mapper_update::DELETED;
use crate::module::DeviceTwin;
use crate::validate;

/// One twin as the admin API shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TwinView {
    /// The desired value, if any.
    pub expected: Option<String>,
    /// The reported value, if any.
    pub actual: Option<String>,
    /// Its type.
    #[serde(rename = "type")]
    pub value_type: String,
    /// Cloud version of the desired side (0 when it has none).
    #[serde(rename = "expectedVersion")]
    pub expected_version: i64,
}

/// One device as the admin API shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DeviceView {
    /// `<namespace>/<name>`.
    pub id: String,
    /// Name.
    pub name: String,
    /// The protocol of its definition (`""` for a device known only from the cloud's
    /// membership, without a Device object).
    pub protocol: String,
    /// Description.
    pub description: String,
    /// State as the mapper last reported it (`ok`, `online`, ...; `""` before any).
    pub state: String,
    /// When it was last seen online (RFC 3339, or `""`).
    #[serde(rename = "lastOnline")]
    pub last_online: String,
    /// Attributes, by name.
    pub attributes: BTreeMap<String, String>,
    /// Twins, by property (deleted ones left out).
    pub twins: BTreeMap<String, TwinView>,
}

impl DeviceView {
    fn of(record: &DeviceRecord, protocol: String) -> DeviceView {
        let value =
            |side: &Option<crate::wire::TwinValue>| side.as_ref().and_then(|v| v.value.clone());
        DeviceView {
            id: record.id.clone(),
            name: record.name.clone(),
            protocol,
            description: record.description.clone(),
            state: record.state.clone(),
            last_online: record.last_online.clone(),
            attributes: record
                .attributes
                .iter()
                .map(|(name, attr)| (name.clone(), attr.value.clone()))
                .collect(),
            twins: record
                .twins
                .iter()
                .filter(|(_, twin)| twin.attr_type != DELETED)
                .map(|(key, twin)| {
                    (
                        key.clone(),
                        TwinView {
                            expected: value(&twin.expected),
                            actual: value(&twin.actual),
                            value_type: twin.attr_type.clone(),
                            expected_version: twin.expected_version.map(|v| v.cloud).unwrap_or(0),
                        },
                    )
                })
                .collect(),
        }
    }
}

/// Why a desired value cannot be set.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DesiredError {
    /// No such device on the node.
    #[error("no device {0:?} on this node")]
    NoDevice(String),
    /// The device has no such twin (its Device defines its properties).
    #[error("device {device:?} has no property {key:?} (its properties: {known})")]
    NoTwin {
        /// The device.
        device: String,
        /// The property asked for.
        key: String,
        /// The properties it has, comma-separated.
        known: String,
    },
    /// The value is not valid for the twin (KubeEdge's reason).
    #[error("{key}={value:?} is not a valid {value_type} value: {reason}")]
    Invalid {
        /// The property.
        key: String,
        /// The value.
        value: String,
        /// The twin's type.
        value_type: String,
        /// Why.
        reason: &'static str,
    },
}

/// A desired value on its way: the message to hand devicetwin, and the cloud version the
/// twin's desired side has once it is applied.
#[derive(Debug, Clone)]
pub struct DesiredRequest {
    /// A `twin/cloud_updated` message for devicetwin.
    pub message: Message,
    /// The cloud version it carries.
    pub version: i64,
}

impl DeviceTwin {
    /// Every device, by id.
    pub fn device_views(&self) -> Vec<DeviceView> {
        let devices = self.cache().read();
        let mut views: Vec<DeviceView> = devices
            .values()
            .map(|r| DeviceView::of(r, self.protocol_of(&r.id)))
            .collect();
        views.sort_by(|a, b| a.id.cmp(&b.id));
        views
    }

    /// One device.
    pub fn device_view(&self, id: &str) -> Option<DeviceView> {
        self.cache()
            .device(id)
            .as_ref()
            .map(|r| DeviceView::of(r, self.protocol_of(id)))
    }

    /// The twin sync that sets the desired value of `device`'s `key` to `value`, checked
    /// against the twin first (the device and the twin must exist, the value must fit the
    /// twin's type).
    pub fn desired_request(
        &self,
        device: &str,
        key: &str,
        value: &str,
    ) -> Result<DesiredRequest, DesiredError> {
        let record = self
            .cache()
            .device(device)
            .ok_or_else(|| DesiredError::NoDevice(device.to_owned()))?;
        let Some(twin) = record.twins.get(key).filter(|t| t.attr_type != DELETED) else {
            let known: Vec<&str> = record
                .twins
                .iter()
                .filter(|(_, t)| t.attr_type != DELETED)
                .map(|(k, _)| k.as_str())
                .collect();
            return Err(DesiredError::NoTwin {
                device: device.to_owned(),
                key: key.to_owned(),
                known: known.join(", "),
            });
        };
        let invalid = |reason| DesiredError::Invalid {
            key: key.to_owned(),
            value: value.to_owned(),
            value_type: twin.attr_type.clone(),
            reason,
        };
        if !validate::valid_value(value) {
            return Err(invalid(validate::BAD_VALUE));
        }
        validate::check_type(value, &twin.attr_type).map_err(invalid)?;
        let stored = twin.expected_version.unwrap_or_default();
        let version = stored.cloud + 1;
        let body = serde_json::json!({
            "event_id": wedge_core::message::new_id(),
            "timestamp": wedge_core::time::now_ms(),
            "twin": { key: {
                "expected": { "value": value },
                "metadata": { "type": twin.attr_type },
                "expected_version": { "cloud": version, "edge": stored.edge },
            }},
        });
        let message = Message::build(
            module::DEVICECONTROLLER,
            group::TWIN,
            "update",
            &format!("device/{device}/twin/cloud_updated"),
            Content::string(body.to_string()),
        );
        Ok(DesiredRequest { message, version })
    }
}
