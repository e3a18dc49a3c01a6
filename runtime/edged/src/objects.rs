//! ConfigMaps and Secrets a pod refers to, asked of metamanager: it answers from the cloud
//! while connected (and caches the answer in SQLite) and from that cache while offline, so a
//! pod whose objects were fetched once starts again with no cloud.

use std::collections::BTreeMap;
use std::time::Duration;

use base64::Engine as _;
use serde_json::Value;
use wedge_core::message::{CloudAnswer, group, module, operation};
use wedge_core::{Bus, Content, Message};

/// A ConfigMap or Secret reduced to what pods consume: key → bytes.
pub type ObjectData = BTreeMap<String, Vec<u8>>;

/// The two kinds of object pods consume.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    /// `configmap`: `data` as text, `binaryData` base64.
    ConfigMap,
    /// `secret`: `data` base64, `stringData` as text.
    Secret,
}

impl Kind {
    /// The metamanager resource type.
    pub fn resource(self) -> &'static str {
        match self {
            Kind::ConfigMap => "configmap",
            Kind::Secret => "secret",
        }
    }

    /// The kind a metamanager resource type names, if it is one of the two.
    pub fn of_resource(resource_type: &str) -> Option<Kind> {
        match resource_type {
            "configmap" => Some(Kind::ConfigMap),
            "secret" => Some(Kind::Secret),
            _ => None,
        }
    }
}

/// Asks metamanager for `<namespace>/<kind>/<name>`; `Ok(None)` when it does not exist.
pub async fn fetch(
    bus: &Bus,
    kind: Kind,
    namespace: &str,
    name: &str,
    timeout: Duration,
) -> Result<Option<ObjectData>, String> {
    let resource = format!("{namespace}/{}/{name}", kind.resource());
    let query = Message::build(
        module::EDGED,
        group::META,
        operation::QUERY,
        &resource,
        Content::null(),
    );
    let reply = bus
        .send_sync(module::METAMANAGER, query, timeout)
        .await
        .map_err(|e| format!("{resource}: query to metamanager failed: {e}"))?;
    if reply.route.operation == operation::ERROR {
        let text = reply.content.as_string().unwrap_or_default();
        // Metamanager's "not found" for a remote object is an error from the cloud.
        if text.contains("not found") {
            return Ok(None);
        }
        return Err(format!("{resource}: {text}"));
    }
    let Some(object) = object_of(reply.content.raw()).map_err(|e| format!("{resource}: {e}"))?
    else {
        return Ok(None);
    };
    decode(kind, &object)
        .map(Some)
        .map_err(|e| format!("{resource}: {e}"))
}

/// The object in one of metamanager's answer shapes: a list of stored JSON strings (local),
/// the cloud's `{"Object":…,"Err":…}` or `{"ErrStatus":…}` (see [`CloudAnswer`]), the object
/// itself, or any of these as a JSON string.
fn object_of(raw: &str) -> Result<Option<Value>, String> {
    let value: Value = serde_json::from_str(raw).map_err(|e| format!("answer is not JSON: {e}"))?;
    match value {
        Value::Null => Ok(None),
        Value::String(text) => object_of(&text),
        Value::Array(items) => match items.into_iter().next() {
            None => Ok(None),
            Some(Value::String(text)) => object_of(&text),
            Some(other) => Ok(Some(other)),
        },
        other => match CloudAnswer::of_value(other) {
            CloudAnswer::Object(object) => Ok(Some(object)),
            CloudAnswer::Ok => Ok(None),
            CloudAnswer::Error(e) if e.is_not_found() => Ok(None),
            CloudAnswer::Error(e) => Err(format!("the cloud answered with an error: {e}")),
        },
    }
}

/// Key → bytes of a ConfigMap or Secret object.
fn decode(kind: Kind, object: &Value) -> Result<ObjectData, String> {
    let mut out = ObjectData::new();
    let text_field = match kind {
        Kind::ConfigMap => "data",
        Kind::Secret => "stringData",
    };
    let base64_field = match kind {
        Kind::ConfigMap => "binaryData",
        Kind::Secret => "data",
    };
    if let Some(map) = object[base64_field].as_object() {
        for (key, value) in map {
            let text = value
                .as_str()
                .ok_or_else(|| format!("{base64_field}.{key} is not a string"))?;
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(text)
                .map_err(|e| format!("{base64_field}.{key} is not base64: {e}"))?;
            out.insert(key.clone(), bytes);
        }
    }
    if let Some(map) = object[text_field].as_object() {
        for (key, value) in map {
            let text = value
                .as_str()
                .ok_or_else(|| format!("{text_field}.{key} is not a string"))?;
            out.insert(key.clone(), text.as_bytes().to_vec());
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_answer_shape_gives_the_object() {
        let cm = r#"{"metadata":{"name":"app"},"data":{"mode":"edge"}}"#;
        let local = serde_json::to_string(&vec![cm]).unwrap();
        let cloud = format!(r#"{{"Object":{cm},"Err":null}}"#);
        for raw in [local.as_str(), cloud.as_str(), cm] {
            let object = object_of(raw).unwrap().unwrap();
            assert_eq!(object["data"]["mode"], "edge", "{raw}");
        }
        assert_eq!(object_of("[]").unwrap(), None);
        assert_eq!(
            object_of(
                r#"{"Object":null,"Err":{"ErrStatus":{"reason":"NotFound","code":404,"message":"configmaps \"x\" not found"}}}"#
            )
            .unwrap(),
            None
        );
        // What CloudCore's query answers when the object is missing: a bare Status.
        let missing = r#"{"ErrStatus":{"status":"Failure","reason":"NotFound","code":404}}"#;
        assert_eq!(object_of(missing).unwrap(), None);
        assert!(
            object_of(r#"{"Object":null,"Err":{"ErrStatus":{"reason":"Forbidden","code":403}}}"#)
                .is_err()
        );
        assert!(object_of(r#"{"Object":null,"Err":{}}"#).is_err());
    }

    #[test]
    fn configmaps_and_secrets_decode_to_bytes() {
        let cm: Value = serde_json::json!({"data": {"a": "1"}, "binaryData": {"b": "AAE="}});
        let d = decode(Kind::ConfigMap, &cm).unwrap();
        assert_eq!(d["a"], b"1");
        assert_eq!(d["b"], [0u8, 1]);
        let secret: Value =
            serde_json::json!({"data": {"password": "czNjcmV0"}, "stringData": {"user": "admin"}});
        let d = decode(Kind::Secret, &secret).unwrap();
        assert_eq!(d["password"], b"s3cret");
        assert_eq!(d["user"], b"admin");
        assert!(decode(Kind::Secret, &serde_json::json!({"data": {"x": "%%"}})).is_err());
    }
}
