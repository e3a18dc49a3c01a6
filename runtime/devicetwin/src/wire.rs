//! The JSON of KubeEdge's twin protocol, field for field.
//!
//! Field order is declaration order and maps are `BTreeMap`s (sorted keys), as edgecore writes
//! them. Optional parts are `Option`s written only when present; `event_id`, `timestamp`, version
//! fields, `twin`, `delta`, `last` and `current` are always written.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::validate;

/// `{"timestamp": <ms>}` of a twin value.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ValueMetadata {
    /// When the value was written, Unix ms; omitted when zero.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub timestamp: i64,
}

/// `{"value": "...", "metadata": {...}}`: one side of a twin.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TwinValue {
    /// The value, always a string on the wire.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
    /// When it was written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<ValueMetadata>,
}

/// `{"type": "..."}` of a twin.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TypeMetadata {
    /// `int`, `float`, `boolean`, `string`, `deleted`...; omitted when empty.
    #[serde(rename = "type", default, skip_serializing_if = "String::is_empty")]
    pub kind: String,
}

/// `{"cloud": N, "edge": M}`: how many times each side changed a twin side.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Version {
    /// Changes made by the cloud.
    #[serde(default)]
    pub cloud: i64,
    /// Changes made at the edge.
    #[serde(default)]
    pub edge: i64,
}

/// One twin property, as carried in updates, results, documents and deltas.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Twin {
    /// Desired value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected: Option<TwinValue>,
    /// Reported value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub actual: Option<TwinValue>,
    /// Whether the twin may be deleted by a mapper.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub optional: Option<bool>,
    /// Its type.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<TypeMetadata>,
    /// Version of the desired side.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected_version: Option<Version>,
    /// Version of the reported side.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub actual_version: Option<Version>,
}

impl Twin {
    /// The same twin without its versions (results, documents and deltas never carry them).
    pub fn without_versions(&self) -> Twin {
        Twin {
            expected_version: None,
            actual_version: None,
            ..self.clone()
        }
    }
}

/// A twin update request, a result, or an `edge_updated` message: `twin` maps keys to twins,
/// `null` marking a deletion.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TwinMessage {
    /// Correlates a result with its request.
    #[serde(default)]
    pub event_id: String,
    /// Unix ms.
    #[serde(default)]
    pub timestamp: i64,
    /// The twins.
    pub twin: BTreeMap<String, Option<Twin>>,
}

/// An error result.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorMessage {
    /// The request's `event_id` (or `""` when the request could not be read).
    pub event_id: String,
    /// Unix ms.
    pub timestamp: i64,
    /// 400, 404 or 500.
    #[serde(default, skip_serializing_if = "is_zero_i32")]
    pub code: i32,
    /// KubeEdge's reason text.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
}

/// One key of a document: the twin before and after.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DocumentEntry {
    /// Before the change (`null` for a new twin).
    pub last: Option<Twin>,
    /// After the change (`null` for a deleted twin).
    pub current: Option<Twin>,
}

/// `…/twin/update/document`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DocumentMessage {
    /// The request's `event_id`.
    pub event_id: String,
    /// Unix ms.
    pub timestamp: i64,
    /// Changed keys.
    pub twin: BTreeMap<String, DocumentEntry>,
}

/// `…/twin/update/delta`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeltaMessage {
    /// A fresh id.
    pub event_id: String,
    /// Unix ms.
    pub timestamp: i64,
    /// Every twin with a desired value (deleted ones skipped).
    pub twin: BTreeMap<String, Twin>,
    /// Desired values that differ from the reported ones.
    pub delta: BTreeMap<String, String>,
}

fn is_zero(v: &i64) -> bool {
    *v == 0
}

fn is_zero_i32(v: &i32) -> bool {
    *v == 0
}

/// Reads a mapper's twin update, with KubeEdge's reasons for what it refuses.
pub fn parse_mapper_update(payload: &[u8]) -> Result<TwinMessage, &'static str> {
    parse_update(payload, validate::UNMARSHAL_MAPPER)
}

/// Reads a cloud sync, with KubeEdge's (differently capitalised) reasons.
pub fn parse_cloud_update(payload: &[u8]) -> Result<TwinMessage, &'static str> {
    parse_update(payload, validate::UNMARSHAL_CLOUD)
}

fn parse_update(payload: &[u8], unmarshal: &'static str) -> Result<TwinMessage, &'static str> {
    #[derive(Deserialize)]
    struct Raw {
        #[serde(default)]
        event_id: String,
        #[serde(default)]
        timestamp: i64,
        #[serde(default)]
        twin: Option<BTreeMap<String, Option<Twin>>>,
    }
    let raw: Raw = serde_json::from_slice(payload).map_err(|_| unmarshal)?;
    let twin = raw.twin.ok_or(validate::TWIN_MISSING)?;
    Ok(TwinMessage {
        event_id: raw.event_id,
        timestamp: raw.timestamp,
        twin,
    })
}

/// Compact JSON of a wire message.
pub fn to_json<T: Serialize>(message: &T) -> String {
    // Our wire types have string keys only and cannot fail to serialise.
    serde_json::to_string(message).unwrap_or_default()
}

#[cfg(test)]
mod tests;
