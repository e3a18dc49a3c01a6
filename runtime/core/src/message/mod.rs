//! KubeEdge's message envelope (`header` / `route` / `content`).
//!
//! Every message that crosses the bus has this shape, and the same bytes can cross the cloud link
//! unchanged, so the serialised form follows edgecore exactly: `msg_id`, `timestamp`, `route` and
//! `content` are always written, the other header keys only when set, in KubeEdge's key order.
//!
//! The content is kept as raw JSON text ([`Content`]): most messages are forwarded, not inspected,
//! so we parse a payload only where a module needs to look inside it.

mod cloud_answer;
mod content;
mod names;

pub use cloud_answer::{CloudAnswer, CloudError};
pub use content::Content;
pub use names::{group, module, operation};

use serde::{Deserialize, Serialize};

/// The header of a message: identity, correlation and a few flags.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Header {
    /// The message id (`msg_id`); a fresh UUIDv4 for new messages, may be `""` on input.
    #[serde(rename = "msg_id", default)]
    pub id: String,
    /// The id of the request this message answers (`parent_msg_id`); the only way replies are
    /// paired with requests.
    #[serde(
        rename = "parent_msg_id",
        default,
        skip_serializing_if = "String::is_empty"
    )]
    pub parent_id: String,
    /// Creation time in Unix milliseconds.
    #[serde(default)]
    pub timestamp: i64,
    /// The Kubernetes resourceVersion the content carries, if any.
    #[serde(
        rename = "resourceversion",
        default,
        skip_serializing_if = "String::is_empty"
    )]
    pub resource_version: String,
    /// Whether the sender waits for a reply (`send_sync`). Cleared before the cloud link.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub sync: bool,
    /// Free-form message type, copied into responses.
    #[serde(rename = "type", default, skip_serializing_if = "String::is_empty")]
    pub message_type: String,
}

/// Where a message comes from, which module or group it goes to, and what it asks.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Route {
    /// The sending module (`edgecontroller`, `edged`, `metamanager`, ...).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub source: String,
    /// The destination module, when the sender names one.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub destination: String,
    /// The destination group (`resource`, `meta`, `twin`, `hub`, ...).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub group: String,
    /// The operation (`insert`, `update`, `delete`, `query`, `response`, ...).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub operation: String,
    /// The resource the operation is about, e.g. `default/pod/nginx`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub resource: String,
}

/// One message: KubeEdge's `model.Message`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Message {
    /// Identity and correlation.
    pub header: Header,
    /// Addressing. Written as `route`; `router` is accepted on input for leniency.
    #[serde(rename = "route", alias = "router")]
    pub route: Route,
    /// The payload, any JSON value; `null` when unset.
    #[serde(default)]
    pub content: Content,
}

/// Why bytes could not be read as a [`Message`].
#[derive(Debug, thiserror::Error)]
#[error("malformed message: {0}")]
pub struct DecodeError(#[from] serde_json::Error);

impl Message {
    /// A new message with a fresh UUIDv4 id and the current time.
    pub fn new(route: Route, content: Content) -> Message {
        Message {
            header: Header {
                id: new_id(),
                timestamp: crate::time::now_ms(),
                ..Header::default()
            },
            route,
            content,
        }
    }

    /// Builds a route and a new message in one go.
    pub fn build(
        source: &str,
        group: &str,
        operation: &str,
        resource: &str,
        content: Content,
    ) -> Message {
        Message::new(
            Route {
                source: source.to_owned(),
                group: group.to_owned(),
                operation: operation.to_owned(),
                resource: resource.to_owned(),
                ..Route::default()
            },
            content,
        )
    }

    /// The response to `self`: a new id, `parent_msg_id` = this id, the route copied with
    /// operation `response`, the type copied, and `content` as payload (`"OK"` for acks).
    pub fn response(&self, content: Content) -> Message {
        Message {
            header: Header {
                id: new_id(),
                parent_id: self.header.id.clone(),
                timestamp: crate::time::now_ms(),
                message_type: self.header.message_type.clone(),
                ..Header::default()
            },
            route: Route {
                operation: operation::RESPONSE.to_owned(),
                ..self.route.clone()
            },
            content,
        }
    }

    /// An error reply to `self`: like [`Message::response`] but with operation `error`, the
    /// error text as content, and the sender's own source and group.
    pub fn error_reply(&self, source: &str, group: &str, text: impl Into<String>) -> Message {
        let mut reply = self.response(Content::string(text.into()));
        reply.route.operation = operation::ERROR.to_owned();
        reply.route.source = source.to_owned();
        reply.route.group = group.to_owned();
        reply
    }

    /// The same message under a fresh id (and time), for a remote call that must be paired with
    /// its own reply rather than the original sender's.
    pub fn with_new_id(&self) -> Message {
        let mut copy = self.clone();
        copy.header.id = new_id();
        copy.header.timestamp = crate::time::now_ms();
        copy
    }

    /// Parses one message from JSON bytes. Both `<` and `\u003c` forms of escaped text are
    /// accepted, since that is only a JSON spelling.
    pub fn from_slice(bytes: &[u8]) -> Result<Message, DecodeError> {
        Ok(serde_json::from_slice(bytes)?)
    }

    /// Serialises to compact JSON in KubeEdge's key order.
    pub fn to_vec(&self) -> Vec<u8> {
        // Serialising our own types into a Vec cannot fail: every key is a string and the
        // content is already valid JSON.
        serde_json::to_vec(self).unwrap_or_default()
    }

    /// The form written to the cloud link: `sync` cleared, compact JSON.
    pub fn to_cloud_vec(&self) -> Vec<u8> {
        if self.header.sync {
            let mut copy = self.clone();
            copy.header.sync = false;
            copy.to_vec()
        } else {
            self.to_vec()
        }
    }

    /// The id this message answers, if any.
    pub fn parent_id(&self) -> Option<&str> {
        (!self.header.parent_id.is_empty()).then_some(self.header.parent_id.as_str())
    }
}

/// A fresh lowercase UUIDv4, the id format KubeEdge uses.
pub fn new_id() -> String {
    uuid::Uuid::new_v4().to_string()
}

#[cfg(test)]
mod tests;
