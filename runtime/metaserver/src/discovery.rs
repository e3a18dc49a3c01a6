//! Discovery answers the cloud passes through, made readable.
//!
//! CloudCore answers a pass-through Application (`/api`, `/apis`, `/api/v1`...) with what its
//! own client got from kube-apiserver, and that client asks for protobuf: the body is
//! Kubernetes' protobuf envelope (`k8s\0` + `runtime.Unknown`). KubeEdge v1.23.1's MetaServer
//! hands those bytes on labelled `application/json`, and kubectl fails on them (`invalid
//! character 'k' looking for beginning of value`). Wedge decodes the three discovery kinds —
//! `APIVersions`, `APIGroupList`, `APIResourceList` — into the JSON kube-apiserver itself
//! sends for them; any other body passes unchanged.
//!
//! The field numbers are those of `k8s.io/apimachinery/pkg/apis/meta/v1/generated.proto`;
//! the tests decode real apiserver answers and compare them with its JSON answers.

use serde_json::{Map, Value, json};

/// The protobuf envelope's magic.
const MAGIC: &[u8] = b"k8s\0";

/// One field of a protobuf message.
enum Field<'a> {
    Varint(u64),
    Bytes(&'a [u8]),
}

/// The fields of a protobuf message, in order; `None` for bytes that are not one.
fn fields(mut buf: &[u8]) -> Option<Vec<(u64, Field<'_>)>> {
    fn varint(buf: &mut &[u8]) -> Option<u64> {
        let mut value = 0u64;
        for shift in (0..64).step_by(7) {
            let (&byte, rest) = buf.split_first()?;
            *buf = rest;
            value |= u64::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                return Some(value);
            }
        }
        None
    }
    let mut out = Vec::new();
    while !buf.is_empty() {
        let tag = varint(&mut buf)?;
        let field = match tag & 7 {
            0 => Field::Varint(varint(&mut buf)?),
            2 => {
                let len = usize::try_from(varint(&mut buf)?).ok()?;
                if len > buf.len() {
                    return None;
                }
                let (bytes, rest) = buf.split_at(len);
                buf = rest;
                Field::Bytes(bytes)
            }
            1 => {
                buf = buf.get(8..)?;
                Field::Varint(0)
            }
            5 => {
                buf = buf.get(4..)?;
                Field::Varint(0)
            }
            _ => return None,
        };
        out.push((tag >> 3, field));
    }
    Some(out)
}

fn text(bytes: &[u8]) -> Value {
    Value::String(String::from_utf8_lossy(bytes).into_owned())
}

/// A message's fields as JSON: `names` gives each field number its JSON name and how to
/// read it.
fn message(buf: &[u8], names: &[(u64, &str, Kind)]) -> Option<Value> {
    let mut out = Map::new();
    for (number, field) in fields(buf)? {
        let Some((_, name, kind)) = names.iter().find(|(n, _, _)| *n == number) else {
            continue;
        };
        let value = match (kind, field) {
            (Kind::Text, Field::Bytes(b)) => text(b),
            (Kind::Bool, Field::Varint(v)) => Value::Bool(v != 0),
            (Kind::Message(inner), Field::Bytes(b)) => message(b, inner)?,
            (Kind::Texts, Field::Bytes(b)) => {
                push(&mut out, name, text(b));
                continue;
            }
            (Kind::Messages(inner), Field::Bytes(b)) => {
                push(&mut out, name, message(b, inner)?);
                continue;
            }
            (Kind::Verbs, Field::Bytes(b)) => {
                let verbs: Vec<Value> = fields(b)?
                    .into_iter()
                    .filter_map(|(n, f)| match (n, f) {
                        (1, Field::Bytes(v)) => Some(text(v)),
                        _ => None,
                    })
                    .collect();
                Value::Array(verbs)
            }
            _ => return None,
        };
        out.insert((*name).to_owned(), value);
    }
    Some(Value::Object(out))
}

fn push(out: &mut Map<String, Value>, name: &str, value: Value) {
    if let Value::Array(items) = out
        .entry(name.to_owned())
        .or_insert_with(|| Value::Array(Vec::new()))
    {
        items.push(value);
    }
}

/// How a field is read.
#[derive(Clone, Copy)]
enum Kind {
    Text,
    Texts,
    Bool,
    Verbs,
    Message(&'static [(u64, &'static str, Kind)]),
    Messages(&'static [(u64, &'static str, Kind)]),
}

const CIDR: &[(u64, &str, Kind)] = &[
    (1, "clientCIDR", Kind::Text),
    (2, "serverAddress", Kind::Text),
];
const GROUP_VERSION: &[(u64, &str, Kind)] =
    &[(1, "groupVersion", Kind::Text), (2, "version", Kind::Text)];
const API_VERSIONS: &[(u64, &str, Kind)] = &[
    (1, "versions", Kind::Texts),
    (2, "serverAddressByClientCIDRs", Kind::Messages(CIDR)),
];
const API_GROUP: &[(u64, &str, Kind)] = &[
    (1, "name", Kind::Text),
    (2, "versions", Kind::Messages(GROUP_VERSION)),
    (3, "preferredVersion", Kind::Message(GROUP_VERSION)),
    (4, "serverAddressByClientCIDRs", Kind::Messages(CIDR)),
];
const API_GROUP_LIST: &[(u64, &str, Kind)] = &[(1, "groups", Kind::Messages(API_GROUP))];
const API_RESOURCE: &[(u64, &str, Kind)] = &[
    (1, "name", Kind::Text),
    (2, "namespaced", Kind::Bool),
    (3, "kind", Kind::Text),
    (4, "verbs", Kind::Verbs),
    (5, "shortNames", Kind::Texts),
    (6, "singularName", Kind::Text),
    (7, "categories", Kind::Texts),
    (8, "group", Kind::Text),
    (9, "version", Kind::Text),
    (10, "storageVersionHash", Kind::Text),
];
const API_RESOURCE_LIST: &[(u64, &str, Kind)] = &[
    (1, "groupVersion", Kind::Text),
    (2, "resources", Kind::Messages(API_RESOURCE)),
];

/// The JSON of a discovery body: a protobuf envelope of a discovery kind becomes the JSON
/// kube-apiserver sends for it; anything else is returned as it is.
pub fn readable(body: Vec<u8>) -> Vec<u8> {
    match decode(&body) {
        Some(json) => json.to_string().into_bytes(),
        None => body,
    }
}

/// The JSON of a protobuf discovery answer, `None` when `body` is not one.
pub fn decode(body: &[u8]) -> Option<Value> {
    let envelope = body.strip_prefix(MAGIC)?;
    let mut kind = String::new();
    let mut raw: &[u8] = &[];
    for (number, field) in fields(envelope)? {
        match (number, field) {
            (1, Field::Bytes(type_meta)) => {
                for (n, f) in fields(type_meta)? {
                    if let (2, Field::Bytes(k)) = (n, f) {
                        kind = String::from_utf8_lossy(k).into_owned();
                    }
                }
            }
            (2, Field::Bytes(bytes)) => raw = bytes,
            _ => {}
        }
    }
    let mut value = match kind.as_str() {
        "APIVersions" => message(raw, API_VERSIONS)?,
        "APIGroupList" => message(raw, API_GROUP_LIST)?,
        "APIResourceList" => message(raw, API_RESOURCE_LIST)?,
        _ => return None,
    };
    let map = value.as_object_mut()?;
    // kube-apiserver's JSON always carries these, even empty.
    match kind.as_str() {
        "APIVersions" => {
            map.entry("versions").or_insert(json!([]));
            map.entry("serverAddressByClientCIDRs").or_insert(json!([]));
        }
        "APIGroupList" => {
            map.entry("groups").or_insert(json!([]));
            map.insert("apiVersion".into(), json!("v1"));
        }
        _ => {
            map.entry("resources").or_insert(json!([]));
            for r in map["resources"].as_array_mut().into_iter().flatten() {
                if let Some(r) = r.as_object_mut() {
                    r.entry("namespaced").or_insert(json!(false));
                    r.entry("verbs").or_insert(json!([]));
                    r.entry("singularName").or_insert(json!(""));
                    // Empty in protobuf, left out of the JSON.
                    for omitted in ["group", "version", "storageVersionHash"] {
                        if r.get(omitted).is_some_and(|v| v == "") {
                            r.remove(omitted);
                        }
                    }
                }
            }
            // The legacy group's list names no apiVersion; the others' do.
            if map.get("groupVersion").is_some_and(|g| g != "v1") {
                map.insert("apiVersion".into(), json!("v1"));
            }
        }
    }
    map.insert("kind".into(), Value::String(kind));
    Some(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture(name: &str) -> Vec<u8> {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/discovery/");
        std::fs::read(format!("{path}{name}")).unwrap()
    }

    #[test]
    fn the_apiservers_protobuf_answers_decode_to_its_json_answers() {
        for path in ["_api", "_apis", "_api_v1", "_apis_discovery.k8s.io_v1"] {
            let decoded = decode(&fixture(&format!("pb{path}"))).unwrap();
            let json: Value = serde_json::from_slice(&fixture(&format!("js{path}"))).unwrap();
            assert_eq!(decoded, json, "{path}");
        }
    }

    #[test]
    fn other_bodies_pass_unchanged_and_garbage_does_not_panic() {
        assert_eq!(
            readable(b"{\"major\":\"1\"}".to_vec()),
            b"{\"major\":\"1\"}"
        );
        for bad in [
            &b"k8s\0"[..],
            b"k8s\0\x0a\xff\xff",
            b"k8s\0\x12\x05ab",
            b"k8s\0\x0f",
        ] {
            assert!(decode(bad).is_none() || decode(bad).is_some());
            let _ = readable(bad.to_vec());
        }
    }
}
