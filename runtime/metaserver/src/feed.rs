//! metamanager's change feed into the cache.
//!
//! After each committed write of a cloud object metamanager sends MetaServer the change:
//! operation `insert`, `update` or `delete`, resource `<namespace>/<type>/<name>`, content the
//! object (for a delete, the object as last sent, when there is one). The same message shape
//! is what MetaServer reads at start, type by type, from metamanager's `query` answers.
//! Types that are not objects of their own (`podstatus`, `podpatch`, `nodestatus`, events)
//! are not served, as in KubeEdge.

use std::sync::Arc;

use serde_json::Value;
use wedge_core::message::operation;
use wedge_core::{Message, Resource};

use crate::cache::{Cache, rv_of};
use crate::catalog::{ResourceType, by_store_type};

/// Whether objects of metamanager type `store_type` are served.
fn served(store_type: &str) -> bool {
    !(store_type.contains("status") || store_type.contains("patch") || store_type == "event")
}

/// The object a message carries: its JSON, or the JSON text of a string content.
fn object_of(msg: &Message) -> Option<Value> {
    if msg.content.is_null() {
        return None;
    }
    let value: Value = match msg.content.as_string() {
        Some(text) => serde_json::from_str(&text).ok()?,
        None => msg.content.parse().ok()?,
    };
    value.is_object().then_some(value)
}

/// Gives `object` the `apiVersion` and `kind` of its type when it lacks them (typed objects
/// the cloud sends without their TypeMeta), so clients can decode it.
pub fn with_type_meta(mut object: Value, rtype: &ResourceType) -> Value {
    if let Some(map) = object.as_object_mut() {
        if !map.get("apiVersion").is_some_and(Value::is_string) {
            map.insert("apiVersion".into(), Value::String(rtype.api_version()));
        }
        if !map.get("kind").is_some_and(Value::is_string) {
            map.insert("kind".into(), Value::String(rtype.kind.clone()));
        }
    }
    object
}

/// The type of a stored object of `store_type`.
pub fn type_of(store_type: &str, object: Option<&Value>) -> Option<ResourceType> {
    if !served(store_type) {
        return None;
    }
    let api_version = object.and_then(|o| o["apiVersion"].as_str());
    let kind = object.and_then(|o| o["kind"].as_str());
    let mut rtype = by_store_type(store_type, api_version, kind)?;
    // An unknown kind is cluster-scoped when its objects have no namespace.
    if crate::catalog::by_resource(&rtype.group, &rtype.resource).is_none()
        && object.is_some_and(|o| o["metadata"]["namespace"].as_str().is_none())
    {
        rtype.namespaced = false;
    }
    Some(rtype)
}

/// Stores one object read from metamanager (start-up load) of `store_type`.
pub fn load(cache: &Cache, store_type: &str, object: Value) {
    if let Some(rtype) = type_of(store_type, Some(&object)) {
        let object = with_type_meta(object, &rtype);
        cache.put(Arc::new(rtype), object);
    }
}

/// Applies one change message; `false` when it is not one MetaServer serves.
pub fn apply(cache: &Cache, msg: &Message) -> bool {
    let Ok(resource) = Resource::parse(&msg.route.resource) else {
        return false;
    };
    let Some(name) = resource.name else {
        return false;
    };
    let object = object_of(msg);
    let Some(rtype) = type_of(resource.kind, object.as_ref()) else {
        return false;
    };
    match msg.route.operation.as_str() {
        operation::DELETE => {
            let rv = object.as_ref().map(rv_of).unwrap_or(0);
            cache.delete(&rtype, resource.namespace, name, rv);
            true
        }
        operation::INSERT | operation::UPDATE | operation::RESPONSE => match object {
            Some(object) => {
                let object = with_type_meta(object, &rtype);
                cache.put(Arc::new(rtype), object);
                true
            }
            None => false,
        },
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use wedge_core::Content;

    fn msg(op: &str, resource: &str, content: Value) -> Message {
        Message::build(
            "metamanager",
            "metaserver",
            op,
            resource,
            Content::json(&content).unwrap(),
        )
    }

    #[test]
    fn cloud_objects_are_served_and_status_rows_are_not() {
        let cache = Cache::default();
        let pod = json!({"metadata": {"name": "a", "namespace": "default", "resourceVersion": "5"}, "spec": {}});
        assert!(apply(&cache, &msg("insert", "default/pod/a", pod.clone())));
        let stored = cache.get("", "pods", "default", "a").unwrap();
        assert_eq!(stored.object["kind"], "Pod");
        assert_eq!(stored.object["apiVersion"], "v1");
        assert!(!apply(
            &cache,
            &msg("update", "default/podstatus/a", pod.clone())
        ));
        assert!(!apply(&cache, &msg("patch", "default/pod/a", pod)));
        let slice = json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
                           "metadata": {"name": "s", "namespace": "default", "resourceVersion": "7"}});
        assert!(apply(
            &cache,
            &msg("insert", "default/endpointslice/s", slice)
        ));
        assert!(
            cache
                .get("discovery.k8s.io", "endpointslices", "default", "s")
                .is_some()
        );
        let dep = json!({"apiVersion": "apps/v1", "kind": "Deployment",
                         "metadata": {"name": "d", "namespace": "default", "resourceVersion": "8"}});
        assert!(apply(&cache, &msg("insert", "default/deployment/d", dep)));
        assert!(cache.get("apps", "deployments", "default", "d").is_some());
        assert!(apply(&cache, &msg("delete", "default/pod/a", Value::Null)));
        assert!(cache.get("", "pods", "default", "a").is_none());
        assert_eq!(cache.revision(), 9);
    }
}
