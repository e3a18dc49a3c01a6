//! What pods take from ConfigMaps and Secrets: `configMap`/`secret` volumes written into the
//! pod's directory before its containers start, and environment variables from their keys
//! (`valueFrom`, `envFrom`), resolved when a container is created.
//!
//! Files are written into a fresh sibling directory which then replaces the volume's
//! directory, so a container never sees half of an update. Secret files are 0400 unless the
//! pod asks otherwise; key paths are checked so a spec cannot write outside its volume.

use std::collections::HashMap;
use std::path::{Component, Path, PathBuf};
use std::time::Duration;

use serde_json::Value;
use wedge_core::Bus;

use crate::objects::{Kind, ObjectData, fetch};
use crate::pod::{Container, Pod};

/// Where a `configMap` or `secret` volume's files live.
pub fn volume_dir(pods_root: &Path, uid: &str, kind: Kind, volume: &str) -> PathBuf {
    let plugin = match kind {
        Kind::ConfigMap => "kubernetes.io~configmap",
        Kind::Secret => "kubernetes.io~secret",
    };
    plugin_dir(pods_root, uid, plugin, volume)
}

/// The object kind and name a volume source projects, if it is one.
fn projected(kind: &str, source: &Value) -> Option<(Kind, String)> {
    match kind {
        "configMap" => Some((Kind::ConfigMap, source["name"].as_str()?.to_owned())),
        "secret" => Some((Kind::Secret, source["secretName"].as_str()?.to_owned())),
        _ => None,
    }
}

/// Whether one of `pod`'s volumes shows ConfigMap or Secret `name` (of the pod's namespace):
/// a change of that object is written into the running pod.
pub fn shows(pod: &Pod, kind: Kind, name: &str) -> bool {
    let names = |k: Kind, source: &Value| {
        let key = match k {
            Kind::ConfigMap => "name",
            Kind::Secret => "secretName",
        };
        k == kind && source[key].as_str() == Some(name)
    };
    pod.spec.volumes.iter().any(|volume| {
        volume
            .source
            .iter()
            .any(|(source_kind, source)| match source_kind.as_str() {
                "configMap" => names(Kind::ConfigMap, source),
                "secret" => names(Kind::Secret, source),
                // A projection names its ConfigMaps and Secrets by `name`.
                "projected" => source["sources"].as_array().into_iter().flatten().any(|p| {
                    (kind == Kind::ConfigMap && p["configMap"]["name"].as_str() == Some(name))
                        || (kind == Kind::Secret && p["secret"]["name"].as_str() == Some(name))
                }),
                _ => false,
            })
    })
}

/// Objects fetched for one pod, so each is asked of metamanager once.
pub struct Objects<'a> {
    bus: &'a Bus,
    namespace: String,
    timeout: Duration,
    seen: HashMap<(Kind, String), Option<ObjectData>>,
}

impl<'a> Objects<'a> {
    /// Objects of `pod`'s namespace, asked through `bus`.
    pub fn new(bus: &'a Bus, pod: &Pod, timeout: Duration) -> Objects<'a> {
        Objects {
            bus,
            namespace: pod.namespace().to_owned(),
            timeout,
            seen: HashMap::new(),
        }
    }

    /// The object `kind`/`name` of the pod's namespace; `None` when it does not exist.
    pub async fn get(&mut self, kind: Kind, name: &str) -> Result<Option<&ObjectData>, String> {
        let key = (kind, name.to_owned());
        if !self.seen.contains_key(&key) {
            let data = fetch(self.bus, kind, &self.namespace, name, self.timeout).await?;
            self.seen.insert(key.clone(), data);
        }
        Ok(self.seen.get(&key).and_then(Option::as_ref))
    }

    /// The bus the objects are asked through (service-account tokens go the same way).
    pub fn bus(&self) -> &'a Bus {
        self.bus
    }

    /// How long one answer may take.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Why object `kind`/`name` cannot be had, for a status message.
    pub(crate) fn missing(&self, kind: Kind, name: &str) -> String {
        let label = match kind {
            Kind::ConfigMap => "configmap",
            Kind::Secret => "secret",
        };
        format!(
            "{label} {:?} not found in namespace {:?}",
            name, self.namespace
        )
    }
}

/// Writes every `configMap`, `secret`, `projected` and `downwardAPI` volume of `pod`. An
/// object or key that is missing (and not `optional`) is an error naming it: the pod waits
/// and this is tried again. `Ok` carries the lifetime of the shortest-lived service-account
/// token written, after which the volumes must be written again.
pub async fn write_volumes(
    pod: &Pod,
    pods_root: &Path,
    objects: &mut Objects<'_>,
) -> Result<Option<Duration>, String> {
    let mut shortest: Option<Duration> = None;
    for volume in &pod.spec.volumes {
        let Some((source_kind, source)) = volume.source.iter().next() else {
            continue;
        };
        let in_volume = |e: String| format!("volume {}: {e}", volume.name);
        let (files, dir) = match source_kind.as_str() {
            "projected" => {
                let (files, ttl) = crate::projected_volume::projected_files(pod, source, objects)
                    .await
                    .map_err(in_volume)?;
                if let Some(ttl) = ttl {
                    shortest = Some(shortest.map_or(ttl, |s| s.min(ttl)));
                }
                (
                    files,
                    plugin_dir(pods_root, &pod.metadata.uid, PROJECTED, &volume.name),
                )
            }
            "downwardAPI" => {
                let mode = source["defaultMode"].as_u64().map_or(0o644, |m| m as u32);
                let files = crate::projected_volume::downward_files(pod, source, mode)
                    .map_err(in_volume)?;
                (
                    files,
                    plugin_dir(pods_root, &pod.metadata.uid, DOWNWARD_API, &volume.name),
                )
            }
            _ => {
                let Some((kind, name)) = projected(source_kind, source) else {
                    continue;
                };
                let optional = source["optional"].as_bool().unwrap_or(false);
                let data = match objects.get(kind, &name).await? {
                    Some(data) => data.clone(),
                    None if optional => ObjectData::new(),
                    None => return Err(in_volume(objects.missing(kind, &name))),
                };
                let default_mode =
                    source["defaultMode"]
                        .as_u64()
                        .map(|m| m as u32)
                        .unwrap_or(match kind {
                            Kind::ConfigMap => 0o644,
                            Kind::Secret => 0o400,
                        });
                let files =
                    select_files(&data, source, default_mode, optional).map_err(in_volume)?;
                (
                    files,
                    volume_dir(pods_root, &pod.metadata.uid, kind, &volume.name),
                )
            }
        };
        replace_dir(&dir, &files).map_err(in_volume)?;
        crate::security_context::own_volume(&dir, pod, false).map_err(in_volume)?;
    }
    Ok(shortest)
}

/// The kubelet plugin directory of `projected` volumes.
pub const PROJECTED: &str = "kubernetes.io~projected";

/// The kubelet plugin directory of `downwardAPI` volumes.
pub const DOWNWARD_API: &str = "kubernetes.io~downward-api";

/// Where a volume of kubelet plugin `plugin` lives: `<pods_root>/<uid>/volumes/<plugin>/<name>`.
pub fn plugin_dir(pods_root: &Path, uid: &str, plugin: &str, volume: &str) -> PathBuf {
    pods_root
        .join(uid)
        .join("volumes")
        .join(plugin)
        .join(volume)
}

/// The files of a projection: every key, or the listed `items` (key → path, mode).
pub(crate) fn select_files(
    data: &ObjectData,
    source: &Value,
    default_mode: u32,
    optional: bool,
) -> Result<Vec<(PathBuf, Vec<u8>, u32)>, String> {
    let Some(items) = source["items"].as_array() else {
        return data
            .iter()
            .map(|(key, bytes)| Ok((safe_path(key)?, bytes.clone(), default_mode)))
            .collect();
    };
    let mut files = Vec::new();
    for item in items {
        let key = item["key"].as_str().ok_or("items[].key is missing")?;
        let path = safe_path(item["path"].as_str().unwrap_or(key))?;
        let mode = item["mode"]
            .as_u64()
            .map(|m| m as u32)
            .unwrap_or(default_mode);
        match data.get(key) {
            Some(bytes) => files.push((path, bytes.clone(), mode)),
            None if optional => {}
            None => return Err(format!("key {key:?} not found")),
        }
    }
    Ok(files)
}

/// A relative path inside the volume; `..`, absolute paths and empty names are refused.
pub(crate) fn safe_path(path: &str) -> Result<PathBuf, String> {
    let p = Path::new(path);
    let ok = !path.is_empty() && p.components().all(|c| matches!(c, Component::Normal(_)));
    if ok {
        Ok(p.to_path_buf())
    } else {
        Err(format!(
            "path {path:?} must be relative and stay inside the volume"
        ))
    }
}

/// Replaces `dir` with one holding exactly `files`, built aside first.
fn replace_dir(dir: &Path, files: &[(PathBuf, Vec<u8>, u32)]) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt;
    let parent = dir.parent().ok_or("volume directory has no parent")?;
    std::fs::create_dir_all(parent)
        .map_err(|e| format!("cannot create {}: {e}", parent.display()))?;
    let staging = parent.join(format!(
        ".{}.new",
        dir.file_name().and_then(|n| n.to_str()).unwrap_or("volume")
    ));
    let _ = std::fs::remove_dir_all(&staging);
    let write = || -> std::io::Result<()> {
        std::fs::create_dir_all(&staging)?;
        for (path, bytes, mode) in files {
            let target = staging.join(path);
            if let Some(p) = target.parent() {
                std::fs::create_dir_all(p)?;
            }
            std::fs::write(&target, bytes)?;
            std::fs::set_permissions(&target, std::fs::Permissions::from_mode(*mode & 0o777))?;
        }
        Ok(())
    };
    write().map_err(|e| format!("cannot write {}: {e}", staging.display()))?;
    // Bind mounts follow the directory inode: swap contents only when none is mounted yet,
    // otherwise the new files replace the old ones in place.
    if dir.exists() {
        for entry in std::fs::read_dir(dir).map_err(|e| e.to_string())? {
            let entry = entry.map_err(|e| e.to_string())?;
            let path = entry.path();
            let removed = if path.is_dir() {
                std::fs::remove_dir_all(&path)
            } else {
                std::fs::remove_file(&path)
            };
            removed.map_err(|e| format!("cannot replace {}: {e}", path.display()))?;
        }
        for entry in std::fs::read_dir(&staging).map_err(|e| e.to_string())? {
            let entry = entry.map_err(|e| e.to_string())?;
            std::fs::rename(entry.path(), dir.join(entry.file_name()))
                .map_err(|e| format!("cannot move into {}: {e}", dir.display()))?;
        }
        let _ = std::fs::remove_dir_all(&staging);
    } else {
        std::fs::rename(&staging, dir)
            .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    }
    Ok(())
}

/// The container's environment in Kubernetes' order: `envFrom` sources, then `env` (later
/// entries win in the engine). References to missing objects or keys that are not `optional`
/// are errors naming them.
pub async fn container_env(
    pod: &Pod,
    node: &str,
    container: &Container,
    objects: &mut Objects<'_>,
) -> Result<Vec<(String, String)>, String> {
    let mut env = Vec::new();
    for source in &container.env_from {
        let prefix = source["prefix"].as_str().unwrap_or_default();
        let (kind, reference) = if source["configMapRef"].is_object() {
            (Kind::ConfigMap, &source["configMapRef"])
        } else if source["secretRef"].is_object() {
            (Kind::Secret, &source["secretRef"])
        } else {
            return Err(format!(
                "container {}: unsupported envFrom source",
                container.name
            ));
        };
        let name = reference["name"].as_str().unwrap_or_default();
        match objects.get(kind, name).await? {
            Some(data) => {
                for (key, bytes) in data {
                    env.push((
                        format!("{prefix}{key}"),
                        String::from_utf8_lossy(bytes).into_owned(),
                    ));
                }
            }
            None if reference["optional"].as_bool() == Some(true) => {}
            None => return Err(objects.missing(kind, name)),
        }
    }
    for var in &container.env {
        if let Some(value) = &var.value {
            env.push((var.name.clone(), value.clone()));
            continue;
        }
        let Some(from) = &var.value_from else {
            env.push((var.name.clone(), String::new()));
            continue;
        };
        let value = if let Some(field) = from["fieldRef"]["fieldPath"].as_str() {
            match field {
                "metadata.name" => pod.metadata.name.clone(),
                "metadata.namespace" => pod.namespace().to_owned(),
                "metadata.uid" => pod.metadata.uid.clone(),
                "spec.nodeName" => node.to_owned(),
                other => {
                    return Err(format!(
                        "env {}: fieldRef {other:?} is not supported",
                        var.name
                    ));
                }
            }
        } else {
            let (kind, reference) = if from["configMapKeyRef"].is_object() {
                (Kind::ConfigMap, &from["configMapKeyRef"])
            } else if from["secretKeyRef"].is_object() {
                (Kind::Secret, &from["secretKeyRef"])
            } else {
                return Err(format!("env {}: unsupported valueFrom", var.name));
            };
            let name = reference["name"].as_str().unwrap_or_default();
            let key = reference["key"].as_str().unwrap_or_default();
            let optional = reference["optional"].as_bool() == Some(true);
            let found = objects
                .get(kind, name)
                .await?
                .and_then(|data| data.get(key))
                .map(|bytes| String::from_utf8_lossy(bytes).into_owned());
            match found {
                Some(value) => value,
                None if optional => continue,
                None => {
                    return Err(format!(
                        "env {}: couldn't find key {key:?} in {} {name:?}",
                        var.name,
                        kind.resource()
                    ));
                }
            }
        };
        env.push((var.name.clone(), value));
    }
    Ok(env)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_must_stay_inside_the_volume() {
        assert!(safe_path("config.yaml").is_ok());
        assert!(safe_path("conf/app.yaml").is_ok());
        for bad in ["", "/etc/passwd", "../escape", "a/../../b", "./x"] {
            assert!(safe_path(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn items_select_keys_and_modes() {
        let data = ObjectData::from([("a".into(), b"1".to_vec()), ("b".into(), b"2".to_vec())]);
        let all = select_files(&data, &Value::Null, 0o400, false).unwrap();
        assert_eq!(all.len(), 2);
        let source =
            serde_json::json!({"items": [{"key": "b", "path": "sub/b.txt", "mode": 0o600}]});
        let some = select_files(&data, &source, 0o400, false).unwrap();
        assert_eq!(some, [(PathBuf::from("sub/b.txt"), b"2".to_vec(), 0o600)]);
        let missing = serde_json::json!({"items": [{"key": "c"}]});
        assert!(select_files(&data, &missing, 0o400, false).is_err());
        assert!(
            select_files(&data, &missing, 0o400, true)
                .unwrap()
                .is_empty()
        );
    }

    #[test]
    fn a_volume_directory_is_replaced_whole_with_its_modes() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let vol = dir.path().join("vol");
        replace_dir(&vol, &[(PathBuf::from("old"), b"x".to_vec(), 0o644)]).unwrap();
        replace_dir(&vol, &[(PathBuf::from("new"), b"y".to_vec(), 0o400)]).unwrap();
        assert!(!vol.join("old").exists());
        assert_eq!(std::fs::read(vol.join("new")).unwrap(), b"y");
        let mode = std::fs::metadata(vol.join("new"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o400);
    }
}
