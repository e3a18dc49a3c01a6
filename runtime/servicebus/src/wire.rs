//! KubeEdge's `HTTPRequest` and `HTTPResponse` (`common/types/http.go`): what the cloud's
//! router sends for a call to an app on the node, and what goes back.
//!
//! They are Go structs marshalled with `encoding/json`, so the bodies (`[]byte`) travel as
//! base64 strings and the headers (`http.Header`) as a map of name → list of values; a nil
//! body or header is `null`.

use std::collections::BTreeMap;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Go's `http.Header`: each name with its values, in the order they were given.
pub type Header = BTreeMap<String, Vec<String>>;

/// A call to an app on the node, as the cloud's router sends it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HttpRequest {
    /// Request headers (`null` when the cloud sent none).
    #[serde(default, deserialize_with = "null_as_default")]
    pub header: Header,
    /// The request body (base64 on the wire).
    #[serde(default, with = "go_bytes")]
    pub body: Vec<u8>,
    /// The HTTP method (`GET`, `POST`, ...).
    #[serde(default)]
    pub method: String,
    /// Unused by the router in v1.23 (the target is in the message's resource); kept so a
    /// request round-trips.
    #[serde(default)]
    pub url: String,
}

/// The app's answer (or the node's error in its place), sent back to the cloud.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HttpResponse {
    /// Response headers.
    #[serde(default, deserialize_with = "null_as_default")]
    pub header: Header,
    /// The HTTP status code.
    pub status_code: u16,
    /// The response body (base64 on the wire).
    #[serde(default, with = "go_bytes")]
    pub body: Vec<u8>,
}

fn null_as_default<'de, D: Deserializer<'de>, T: Default + Deserialize<'de>>(
    d: D,
) -> Result<T, D::Error> {
    Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
}

/// Go's `[]byte` in JSON: a base64 string, or `null` for a nil slice.
pub mod go_bytes {
    use super::*;

    /// Writes `bytes` as Go does: base64 (standard alphabet, padded).
    pub fn serialize<S: Serializer>(bytes: &[u8], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&STANDARD.encode(bytes))
    }

    /// Reads a base64 string (or `null`, an empty body).
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        match Option::<String>::deserialize(d)? {
            None => Ok(Vec::new()),
            Some(text) => STANDARD.decode(text).map_err(serde::de::Error::custom),
        }
    }
}

/// `bytes` as the JSON string Go writes for a `[]byte` message content.
pub fn go_bytes_json(bytes: &[u8]) -> String {
    // A base64 string needs no escaping.
    format!("\"{}\"", STANDARD.encode(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_what_the_router_sends() {
        // As CloudCore v1.23.1's servicebus target fills it (http.Header, []byte body).
        let raw = r#"{"header":{"Passwd":["I am passwd"],"User":["I am user"]},"body":"SGVsbG8gV29ybGQh","method":"POST","url":""}"#;
        let request: HttpRequest = serde_json::from_str(raw).unwrap();
        assert_eq!(request.method, "POST");
        assert_eq!(request.body, b"Hello World!");
        assert_eq!(request.header["User"], vec!["I am user"]);
        let nil: HttpRequest =
            serde_json::from_str(r#"{"header":null,"body":null,"method":"GET"}"#).unwrap();
        assert!(nil.header.is_empty() && nil.body.is_empty());
    }

    #[test]
    fn writes_what_go_writes() {
        let response = HttpResponse {
            header: Header::from([("Content-Type".to_owned(), vec!["text/plain".to_owned()])]),
            status_code: 200,
            body: b"Hello World".to_vec(),
        };
        assert_eq!(
            serde_json::to_string(&response).unwrap(),
            r#"{"header":{"Content-Type":["text/plain"]},"status_code":200,"body":"SGVsbG8gV29ybGQ="}"#
        );
        assert_eq!(go_bytes_json(b"{}"), "\"e30=\"");
    }

    #[test]
    fn a_body_that_is_not_base64_is_refused() {
        let bad = serde_json::from_str::<HttpRequest>(r#"{"body":"not base64!","method":"GET"}"#);
        assert!(bad.is_err());
    }
}
