//! Static pods: manifests in a directory on the node, run by edged with no cloud and no
//! metamanager involved, as kubelet's file source does.
//!
//! Each `*.yaml`, `*.yml` or `*.json` file holds one Pod. As in kubelet, the pod is named
//! `<name>-<node>`, bound to this node, and its uid is derived from the file's content and the
//! node, so an edited file is a new pod (its containers are replaced) and an unchanged one
//! keeps its containers across restarts.

use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use crate::pod::Pod;

/// Annotation kubelet puts on static pods, kept so they can be told apart.
pub const SOURCE_ANNOTATION: &str = "kubernetes.io/config.source";

/// The pods of the manifests in `dir`, and the files that could not be read as a pod (with
/// why). A missing directory holds no pods.
pub fn read_dir(dir: &Path, node: &str) -> (Vec<Pod>, Vec<(PathBuf, String)>) {
    let mut pods = Vec::new();
    let mut errors = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return (pods, errors);
    };
    let mut files: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.is_file()
                && p.extension()
                    .and_then(|e| e.to_str())
                    .is_some_and(|e| matches!(e, "yaml" | "yml" | "json"))
        })
        .collect();
    files.sort();
    for file in files {
        match read_manifest(&file, node) {
            Ok(pod) => pods.push(pod),
            Err(e) => errors.push((file, e)),
        }
    }
    (pods, errors)
}

fn read_manifest(file: &Path, node: &str) -> Result<Pod, String> {
    let text = std::fs::read_to_string(file).map_err(|e| e.to_string())?;
    let value: serde_json::Value = serde_norway::from_str(&text).map_err(|e| e.to_string())?;
    if value["kind"].as_str().is_some_and(|k| k != "Pod") {
        return Err(format!("kind {} is not Pod", value["kind"]));
    }
    let mut pod: Pod = serde_json::from_value(value).map_err(|e| e.to_string())?;
    if pod.metadata.name.is_empty() {
        return Err("metadata.name is missing".to_owned());
    }
    let digest = Sha256::new()
        .chain_update(node.as_bytes())
        .chain_update([0])
        .chain_update(text.as_bytes())
        .finalize();
    pod.metadata.uid = digest[..16].iter().map(|b| format!("{b:02x}")).collect();
    pod.metadata.name = format!("{}-{node}", pod.metadata.name);
    if pod.metadata.namespace.is_empty() {
        pod.metadata.namespace = "default".to_owned();
    }
    pod.metadata
        .annotations
        .insert(SOURCE_ANNOTATION.to_owned(), "file".to_owned());
    pod.spec.node_name = node.to_owned();
    Ok(pod)
}

/// Whether `pod` came from a manifest file.
pub fn is_static(pod: &Pod) -> bool {
    pod.metadata
        .annotations
        .get(SOURCE_ANNOTATION)
        .is_some_and(|s| s == "file")
}

#[cfg(test)]
mod tests {
    use super::*;

    const MANIFEST: &str = "apiVersion: v1
kind: Pod
metadata:
  name: probe
spec:
  containers:
  - name: app
    image: wedge-test/busybox:1
    command: [sleep, '3600']
";

    #[test]
    fn manifests_become_node_bound_pods_with_content_uids() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("probe.yaml"), MANIFEST).unwrap();
        std::fs::write(dir.path().join("notes.txt"), "not a manifest").unwrap();
        std::fs::write(dir.path().join("broken.yaml"), "kind: Pod\nmetadata: [").unwrap();
        std::fs::write(
            dir.path().join("svc.json"),
            r#"{"kind":"Service","metadata":{"name":"s"}}"#,
        )
        .unwrap();
        let (pods, errors) = read_dir(dir.path(), "edge-1");
        assert_eq!(pods.len(), 1);
        let pod = &pods[0];
        assert_eq!(pod.key(), "default/probe-edge-1");
        assert_eq!(pod.spec.node_name, "edge-1");
        assert!(is_static(pod));
        assert_eq!(pod.metadata.uid.len(), 32);
        assert_eq!(errors.len(), 2, "{errors:?}");

        // Same content, same uid; an edit is a new pod.
        let (again, _) = read_dir(dir.path(), "edge-1");
        assert_eq!(again[0].metadata.uid, pod.metadata.uid);
        std::fs::write(
            dir.path().join("probe.yaml"),
            MANIFEST.replace("3600", "3601"),
        )
        .unwrap();
        let (edited, _) = read_dir(dir.path(), "edge-1");
        assert_ne!(edited[0].metadata.uid, pod.metadata.uid);
        assert!(read_dir(&dir.path().join("missing"), "edge-1").0.is_empty());
    }
}
