//! Message content kept as validated raw JSON.

use std::fmt;
use std::sync::Arc;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::value::RawValue;

/// The `content` of a message: any JSON value, stored as its validated JSON text.
///
/// Forwarding a message (bus → cloud link, cloud link → module) then costs no parse and no
/// re-serialisation, and cloning is a reference-count bump. Modules that need the value parse it
/// with [`Content::parse`].
#[derive(Clone)]
pub struct Content(Arc<RawValue>);

impl Content {
    /// JSON `null`, the content of a message that carries none.
    pub fn null() -> Content {
        Content::from_trusted("null".to_owned())
    }

    /// A JSON string.
    pub fn string(text: impl AsRef<str>) -> Content {
        // Encoding a &str as JSON cannot fail.
        let encoded = serde_json::to_string(text.as_ref()).unwrap_or_else(|_| "\"\"".to_owned());
        Content::from_trusted(encoded)
    }

    /// The string `"OK"`, KubeEdge's acknowledgement payload.
    pub fn ok() -> Content {
        Content::from_trusted("\"OK\"".to_owned())
    }

    /// Any serialisable value.
    pub fn json<T: Serialize + ?Sized>(value: &T) -> Result<Content, serde_json::Error> {
        Ok(Content::from_trusted(serde_json::to_string(value)?))
    }

    /// Raw JSON text, validated.
    pub fn from_raw(text: impl Into<String>) -> Result<Content, serde_json::Error> {
        Ok(Content(Arc::from(RawValue::from_string(text.into())?)))
    }

    /// Text we produced ourselves with serde_json, hence valid JSON.
    fn from_trusted(text: String) -> Content {
        match RawValue::from_string(text) {
            Ok(raw) => Content(Arc::from(raw)),
            Err(_) => Content::null(),
        }
    }

    /// The JSON text as received or built.
    pub fn raw(&self) -> &str {
        self.0.get()
    }

    /// True when the content is JSON `null`.
    pub fn is_null(&self) -> bool {
        self.raw() == "null"
    }

    /// The text of a JSON string content; `None` for any other JSON value.
    pub fn as_string(&self) -> Option<String> {
        if self.raw().starts_with('"') {
            serde_json::from_str(self.raw()).ok()
        } else {
            None
        }
    }

    /// Content as bytes, as KubeEdge hands it to MQTT and to parsers: a JSON string yields its
    /// text; anything else is re-serialised compactly with object keys sorted.
    pub fn to_bytes(&self) -> Vec<u8> {
        if let Some(text) = self.as_string() {
            return text.into_bytes();
        }
        match serde_json::from_str::<serde_json::Value>(self.raw()) {
            // serde_json's map is ordered by key (no `preserve_order` in this workspace).
            Ok(value) => serde_json::to_vec(&value).unwrap_or_default(),
            Err(_) => self.raw().as_bytes().to_vec(),
        }
    }

    /// Parses the content into `T`. A JSON string is parsed as the text it holds when `T` wants
    /// something else, because KubeEdge often ships JSON objects as strings.
    pub fn parse<T: DeserializeOwned>(&self) -> Result<T, serde_json::Error> {
        match serde_json::from_str(self.raw()) {
            Ok(value) => Ok(value),
            Err(first) => match self.as_string() {
                Some(text) => serde_json::from_str(&text).map_err(|_| first),
                None => Err(first),
            },
        }
    }
}

impl Default for Content {
    fn default() -> Content {
        Content::null()
    }
}

impl PartialEq for Content {
    fn eq(&self, other: &Content) -> bool {
        self.raw() == other.raw()
    }
}

impl Eq for Content {}

impl fmt::Debug for Content {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Content({})", self.raw())
    }
}

impl Serialize for Content {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for Content {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Content, D::Error> {
        Ok(Content(Arc::from(Box::<RawValue>::deserialize(
            deserializer,
        )?)))
    }
}
