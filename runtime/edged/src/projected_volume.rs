//! `projected` and `downwardAPI` volumes: the files a real cluster's pods get, above all the
//! `kube-api-access-*` volume the ServiceAccount admission plugin adds to every pod — a
//! service-account token, the cluster's CA (`kube-root-ca.crt`) and the pod's namespace.
//!
//! A token comes from the cloud through metamanager (`query <ns>/serviceaccounttoken/<sa>`
//! with a `TokenRequest` bound to the pod, which CloudCore turns into a TokenRequest to the
//! apiserver), so metamanager caches it for an offline restart. Like kubelet, the volume is
//! written again when 80 % of the token's lifetime has passed.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use serde_json::{Value, json};
use wedge_core::message::{CloudAnswer, group, module, operation};
use wedge_core::{Bus, Content, Message};

use crate::objects::{Kind, ObjectData};
use crate::pod::Pod;
use crate::projected::Objects;

/// Kubernetes' default token lifetime when a source names none.
const DEFAULT_TOKEN_SECONDS: u64 = 3600;

/// One file of a volume: path inside it, bytes, mode.
pub type VolumeFile = (PathBuf, Vec<u8>, u32);

/// The files of a `projected` volume's `sources`, and the lifetime of its shortest-lived
/// token (when it has one), after which it must be written again.
pub async fn projected_files(
    pod: &Pod,
    projected: &Value,
    objects: &mut Objects<'_>,
) -> Result<(Vec<VolumeFile>, Option<Duration>), String> {
    let default_mode = projected["defaultMode"]
        .as_u64()
        .map_or(0o644, |m| m as u32);
    let mut files = Vec::new();
    let mut ttl: Option<Duration> = None;
    let sources = projected["sources"].as_array().cloned().unwrap_or_default();
    for (i, source) in sources.iter().enumerate() {
        let at = |e: String| format!("sources[{i}]: {e}");
        if let Some(sa) = source.get("serviceAccountToken") {
            let (token, lifetime) = token(objects.bus(), pod, sa, objects.timeout())
                .await
                .map_err(at)?;
            let path =
                crate::projected::safe_path(sa["path"].as_str().unwrap_or("token")).map_err(at)?;
            let mode = sa["mode"].as_u64().map_or(default_mode, |m| m as u32);
            files.push((path, token.into_bytes(), mode));
            ttl = Some(ttl.map_or(lifetime, |t| t.min(lifetime)));
        } else if let Some(cm) = source.get("configMap") {
            files.extend(
                object_files(objects, Kind::ConfigMap, cm, "name", default_mode)
                    .await
                    .map_err(at)?,
            );
        } else if let Some(secret) = source.get("secret") {
            files.extend(
                object_files(objects, Kind::Secret, secret, "name", default_mode)
                    .await
                    .map_err(at)?,
            );
        } else if let Some(downward) = source.get("downwardAPI") {
            files.extend(downward_files(pod, downward, default_mode).map_err(at)?);
        } else {
            return Err(at(
                "no source edged knows (serviceAccountToken, configMap, secret, downwardAPI)"
                    .into(),
            ));
        }
    }
    Ok((files, ttl))
}

async fn object_files(
    objects: &mut Objects<'_>,
    kind: Kind,
    source: &Value,
    name_key: &str,
    default_mode: u32,
) -> Result<Vec<VolumeFile>, String> {
    let name = source[name_key]
        .as_str()
        .ok_or_else(|| format!("{} without a {name_key}", kind.resource()))?;
    let optional = source["optional"].as_bool().unwrap_or(false);
    let data = match objects.get(kind, name).await? {
        Some(data) => data.clone(),
        None if optional => ObjectData::new(),
        None => return Err(objects.missing(kind, name)),
    };
    crate::projected::select_files(&data, source, default_mode, optional)
}

/// The files of a `downwardAPI` source (or volume): the pod's own metadata.
pub fn downward_files(
    pod: &Pod,
    downward: &Value,
    default_mode: u32,
) -> Result<Vec<VolumeFile>, String> {
    let mut files = Vec::new();
    for (j, item) in downward["items"]
        .as_array()
        .into_iter()
        .flatten()
        .enumerate()
    {
        let path = crate::projected::safe_path(item["path"].as_str().unwrap_or_default())
            .map_err(|e| format!("items[{j}].path: {e}"))?;
        let Some(field) = item["fieldRef"]["fieldPath"].as_str() else {
            return Err(format!(
                "items[{j}]: only fieldRef (metadata.name, namespace, uid, labels, annotations) is supported"
            ));
        };
        let meta = &pod.metadata;
        let text = match field {
            "metadata.name" => meta.name.clone(),
            "metadata.namespace" => pod.namespace().to_owned(),
            "metadata.uid" => meta.uid.clone(),
            "metadata.labels" => key_values(&meta.labels),
            "metadata.annotations" => key_values(&meta.annotations),
            other => {
                return Err(format!(
                    "items[{j}].fieldRef.fieldPath {other:?} is not supported"
                ));
            }
        };
        let mode = item["mode"].as_u64().map_or(default_mode, |m| m as u32);
        files.push((path, text.into_bytes(), mode));
    }
    Ok(files)
}

/// Labels or annotations as the downward API writes them: `key="value"` lines, sorted.
fn key_values(map: &BTreeMap<String, String>) -> String {
    map.iter()
        .map(|(k, v)| format!("{k}={}\n", serde_json::to_string(v).unwrap_or_default()))
        .collect()
}

/// A token for the pod's service account, bound to the pod, and its lifetime.
async fn token(
    bus: &Bus,
    pod: &Pod,
    source: &Value,
    timeout: Duration,
) -> Result<(String, Duration), String> {
    let account = pod
        .spec
        .service_account_name
        .as_deref()
        .filter(|s| !s.is_empty())
        .unwrap_or("default");
    let seconds = source["expirationSeconds"]
        .as_u64()
        .unwrap_or(DEFAULT_TOKEN_SECONDS);
    let mut spec = json!({
        "expirationSeconds": seconds,
        "boundObjectRef": {"kind": "Pod", "apiVersion": "v1", "name": pod.metadata.name, "uid": pod.metadata.uid},
    });
    if let Some(audience) = source["audience"].as_str().filter(|a| !a.is_empty()) {
        spec["audiences"] = json!([audience]);
    }
    let request = json!({
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenRequest",
        "metadata": {"name": account, "namespace": pod.namespace()},
        "spec": spec,
    });
    let resource = format!("{}/serviceaccounttoken/{account}", pod.namespace());
    let query = Message::build(
        module::EDGED,
        group::META,
        operation::QUERY,
        &resource,
        Content::json(&request).map_err(|e| e.to_string())?,
    );
    let reply = bus
        .send_sync(module::METAMANAGER, query, timeout)
        .await
        .map_err(|e| format!("service account token {resource}: {e}"))?;
    if reply.route.operation == operation::ERROR {
        return Err(format!(
            "service account token {resource}: {}",
            reply.content.as_string().unwrap_or_default()
        ));
    }
    let answer = match CloudAnswer::of(&reply.content) {
        CloudAnswer::Error(e) => return Err(format!("service account token {resource}: {e}")),
        CloudAnswer::Ok => return Err(format!("service account token {resource}: empty answer")),
        CloudAnswer::Object(object) => object,
    };
    let token_request = match answer {
        // metamanager's cached copy while the cloud is away: a list of stored JSON strings.
        Value::Array(items) => items
            .into_iter()
            .next()
            .and_then(|v| v.as_str().and_then(|t| serde_json::from_str(t).ok()))
            .unwrap_or(Value::Null),
        other => other,
    };
    let token = token_request["status"]["token"]
        .as_str()
        .filter(|t| !t.is_empty())
        .ok_or_else(|| format!("service account token {resource}: the answer carries no token"))?;
    Ok((token.to_owned(), Duration::from_secs(seconds)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_downward_api_writes_the_pods_metadata() {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "web", "namespace": "shop", "uid": "u-1", "labels": {"app": "web", "tier": "a b"}},
            "spec": {"containers": []}
        }))
        .unwrap();
        let source = json!({"items": [
            {"path": "namespace", "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}},
            {"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}},
        ]});
        let files = downward_files(&pod, &source, 0o644).unwrap();
        assert_eq!(
            files[0],
            (PathBuf::from("namespace"), b"shop".to_vec(), 0o644)
        );
        assert_eq!(files[1].1, b"app=\"web\"\ntier=\"a b\"\n");
        let bad = json!({"items": [{"path": "../x", "fieldRef": {"fieldPath": "metadata.name"}}]});
        assert!(downward_files(&pod, &bad, 0o644).is_err());
        let cpu =
            json!({"items": [{"path": "cpu", "resourceFieldRef": {"resource": "limits.cpu"}}]});
        assert!(
            downward_files(&pod, &cpu, 0o644)
                .unwrap_err()
                .contains("fieldRef")
        );
    }
}
