//! From a pod's container to what the engine creates: command, environment, limits, labels,
//! volume binds, network, published ports.
//!
//! Kubernetes' `command` replaces the image's entrypoint and `args` its cmd, as kubelet maps
//! them. Containers of a pod join their pod's sandbox (`crate::sandbox`), which owns the
//! network namespace, published ports and hostname; without one (a node opted out with
//! `podSandboxImage: ""`, or a `hostNetwork` pod) each joins the default bridge (or the host's
//! network) itself. They share volumes through binds of the same host directories.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use crate::engine::{ContainerPlan, labels};
use crate::objects::Kind;
use crate::pod::{Container, Pod, SpecError};
use crate::projected::volume_dir;

/// A hash of everything about `container` (and the pod-level settings it depends on) that
/// needs a new container when it changes; metadata such as labels is left out, so an update
/// that only touches metadata keeps the running containers.
pub fn spec_hash(pod: &Pod, container: &Container) -> String {
    let mut relevant = serde_json::json!({
        "container": container,
        "hostNetwork": pod.spec.host_network,
        "volumes": pod.spec.volumes,
    });
    // Only when set, so a pod without one keeps the hash it had before edged knew the field.
    if let Some(security) = &pod.spec.security_context {
        relevant["securityContext"] = serde_json::json!(security);
    }
    short_hash(&relevant)
}

/// The first 8 bytes of the SHA-256 of `relevant`'s JSON, in hex: the hash labels' form.
pub(crate) fn short_hash(relevant: &serde_json::Value) -> String {
    let digest = Sha256::digest(relevant.to_string().as_bytes());
    digest[..8].iter().map(|b| format!("{b:02x}")).collect()
}

/// Where the host side of the pod's volume `name` lives, and whether it is always mounted
/// read-only (ConfigMaps and Secrets are); `None` for an unknown volume.
pub fn volume_source(pod: &Pod, name: &str, pods_root: &Path) -> Option<(PathBuf, bool)> {
    let volume = pod.spec.volumes.iter().find(|v| v.name == name)?;
    let (kind, source) = volume.source.iter().next()?;
    let uid = &pod.metadata.uid;
    match kind.as_str() {
        "hostPath" => source["path"].as_str().map(|p| (PathBuf::from(p), false)),
        "emptyDir" => Some((
            pods_root
                .join(uid)
                .join("volumes/kubernetes.io~empty-dir")
                .join(name),
            false,
        )),
        "configMap" => Some((volume_dir(pods_root, uid, Kind::ConfigMap, name), true)),
        "secret" => Some((volume_dir(pods_root, uid, Kind::Secret, name), true)),
        "projected" => Some((
            crate::projected::plugin_dir(pods_root, uid, crate::projected::PROJECTED, name),
            true,
        )),
        "downwardAPI" => Some((
            crate::projected::plugin_dir(pods_root, uid, crate::projected::DOWNWARD_API, name),
            true,
        )),
        _ => None,
    }
}

/// Creates the directories the pod's volumes need before any container starts: emptyDirs
/// under `pods_root`, and hostPaths whose `type` asks for `DirectoryOrCreate`.
pub fn prepare_volumes(pod: &Pod, pods_root: &Path) -> Result<(), SpecError> {
    for volume in &pod.spec.volumes {
        let Some((kind, source)) = volume.source.iter().next() else {
            continue;
        };
        let create = match kind.as_str() {
            "emptyDir" => true,
            "hostPath" => source["type"].as_str() == Some("DirectoryOrCreate"),
            _ => false,
        };
        if !create {
            continue;
        }
        if let Some((dir, _)) = volume_source(pod, &volume.name, pods_root) {
            std::fs::create_dir_all(&dir).map_err(|e| SpecError {
                reason: "VolumeSetupFailed",
                message: format!(
                    "volume {}: cannot create {}: {e}",
                    volume.name,
                    dir.display()
                ),
            })?;
            // Kubelet re-owns the volumes it makes (emptyDir), never a hostPath. An emptyDir is
            // world-writable, as kubelet makes it, so a container running as any user can use
            // it without an fsGroup.
            if kind == "emptyDir" {
                use std::os::unix::fs::PermissionsExt;
                std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).map_err(
                    |e| SpecError {
                        reason: "VolumeSetupFailed",
                        message: format!(
                            "volume {}: cannot open {} to every user: {e}",
                            volume.name,
                            dir.display()
                        ),
                    },
                )?;
                crate::security_context::own_volume(&dir, pod, true).map_err(|e| SpecError {
                    reason: "VolumeSetupFailed",
                    message: format!("volume {}: {e}", volume.name),
                })?;
            }
        }
    }
    Ok(())
}

/// The labels every container edged creates for `pod` carries: managed, node, pod, the
/// container's name in the pod and dockershim's type (`docker_type`), the spec `hash` and the
/// `attempt`. The engine alone is then enough to rebuild what runs.
///
/// The pod's own labels, and its annotations as `annotation.<key>` (dockershim's form), come
/// along so `docker ps --filter label=app=web` finds a pod's containers; edged's keys win over
/// a pod label of the same name. They are the pod's at the container's creation: a
/// metadata-only update keeps the containers (Docker cannot relabel one).
pub(crate) fn pod_labels(
    node: &str,
    pod: &Pod,
    container: &str,
    docker_type: &str,
    hash: String,
    attempt: u32,
) -> HashMap<String, String> {
    let meta = &pod.metadata;
    let from_pod = meta
        .labels
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .chain(
            meta.annotations
                .iter()
                .map(|(k, v)| (format!("annotation.{k}"), v.clone())),
        );
    let mut all: HashMap<String, String> = from_pod.collect();
    all.extend([
        (labels::MANAGED.to_owned(), "true".to_owned()),
        (labels::NODE.to_owned(), node.to_owned()),
        (labels::POD_NAMESPACE.to_owned(), pod.namespace().to_owned()),
        (labels::POD_NAME.to_owned(), pod.metadata.name.clone()),
        (labels::POD_UID.to_owned(), pod.metadata.uid.clone()),
        (labels::CONTAINER_NAME.to_owned(), container.to_owned()),
        (labels::DOCKER_TYPE.to_owned(), docker_type.to_owned()),
        (labels::CONTAINER_HASH.to_owned(), hash),
        (labels::RESTART_COUNT.to_owned(), attempt.to_string()),
    ]);
    all
}

/// `(container port/proto, host port)` of `container`'s ports that have a host port.
pub(crate) fn host_ports(container: &Container) -> impl Iterator<Item = (String, u16)> + '_ {
    container.ports.iter().filter_map(|p| {
        let proto = p.protocol.as_deref().unwrap_or("TCP").to_ascii_lowercase();
        Some((format!("{}/{proto}", p.container_port), p.host_port?))
    })
}

/// The plan of the `attempt`-th container (0 for the first) for `container` of `pod` on
/// node `node`, with its environment `env` already resolved (`projected::container_env`).
///
/// With `sandbox` (the engine id of the pod's running sandbox) the container joins the
/// sandbox's network namespace and has no network settings of its own (ports and hostname
/// belong to the sandbox; the engine refuses them on a joined container). Without, it has
/// its own network, as on a node without sandboxes.
pub fn container_plan(
    node: &str,
    pod: &Pod,
    container: &Container,
    attempt: u32,
    pods_root: &Path,
    env: &[(String, String)],
    sandbox: Option<&str>,
) -> Result<ContainerPlan, SpecError> {
    let ns = pod.namespace();
    let name = &pod.metadata.name;
    let uid = &pod.metadata.uid;
    let mut labels = pod_labels(
        node,
        pod,
        &container.name,
        labels::TYPE_CONTAINER,
        spec_hash(pod, container),
        attempt,
    );
    if let Some(id) = sandbox {
        labels.insert(labels::SANDBOX_ID.to_owned(), id.to_owned());
    }
    let env = env.iter().map(|(k, v)| format!("{k}={v}")).collect();
    let mut binds = Vec::new();
    for (index, mount) in container.volume_mounts.iter().enumerate() {
        let (host, read_only) =
            volume_source(pod, &mount.name, pods_root).ok_or_else(|| SpecError {
                reason: "InvalidPodSpec",
                message: format!(
                    "container {}: volume {:?} has no host directory",
                    container.name, mount.name
                ),
            })?;
        let mode = if mount.read_only || read_only {
            ":ro"
        } else {
            ""
        };
        // A sub-path mount binds what `subpath::prepare` bound for it, never the volume.
        let sub = [&mount.sub_path, &mount.sub_path_expr]
            .iter()
            .any(|p| p.as_deref().is_some_and(|p| !p.is_empty()));
        let host = if sub {
            crate::subpath::target(pods_root, uid, &mount.name, &container.name, index)
        } else {
            host
        };
        binds.push(format!("{}:{}{mode}", host.display(), mount.mount_path));
    }
    let limit = |key: &str| container.resources.limits.get(key);
    let invalid = |e: String| SpecError {
        reason: "InvalidPodSpec",
        message: format!("container {}: {e}", container.name),
    };
    let memory = limit("memory")
        .map(|q| crate::quantity::bytes(q))
        .transpose()
        .map_err(invalid)?;
    let nano_cpus = limit("cpu")
        .map(|q| crate::quantity::nano_cpus(q))
        .transpose()
        .map_err(invalid)?;
    let (network_mode, published) = match sandbox {
        Some(id) => (Some(format!("container:{id}")), Vec::new()),
        None => (
            pod.spec.host_network.then(|| "host".to_owned()),
            host_ports(container).collect(),
        ),
    };
    Ok(ContainerPlan {
        name: format!("k8s_{}_{name}_{ns}_{uid}_{attempt}", container.name),
        image: container.image.clone(),
        entrypoint: (!container.command.is_empty()).then(|| container.command.clone()),
        cmd: (!container.args.is_empty()).then(|| container.args.clone()),
        env,
        working_dir: container.working_dir.clone(),
        labels,
        memory,
        nano_cpus,
        binds,
        network_mode,
        published,
        hostname: None,
        security: crate::security_context::container_security(pod, container, sandbox.is_some()),
        // Given by `name_plan::for_container`, which knows the node's DNS.
        dns: Default::default(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The plan of `p`'s first container, attempt 0, no environment.
    fn first_plan(p: &Pod, sandbox: Option<&str>) -> ContainerPlan {
        container_plan(
            "edge-1",
            p,
            &p.spec.containers[0],
            0,
            Path::new("/pods"),
            &[],
            sandbox,
        )
        .unwrap()
    }

    fn pod() -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "web", "namespace": "apps", "uid": "u-9", "labels": {"a": "1"}},
            "spec": {
                "containers": [{
                    "name": "app", "image": "wedge-test/busybox:1",
                    "command": ["sh", "-c"], "args": ["sleep 60"],
                    "env": [{"name": "MODE", "value": "edge"}, {"name": "FROM", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}],
                    "ports": [{"containerPort": 80, "hostPort": 8080}, {"containerPort": 53, "protocol": "UDP"}],
                    "workingDir": "/work",
                    "resources": {"limits": {"memory": "64Mi", "cpu": "500m"}},
                    "volumeMounts": [{"name": "scratch", "mountPath": "/scratch"}, {"name": "logs", "mountPath": "/logs", "readOnly": true}]
                }],
                "volumes": [{"name": "scratch", "emptyDir": {}}, {"name": "logs", "hostPath": {"path": "/var/log"}}]
            }
        }))
        .unwrap()
    }

    #[test]
    fn a_container_maps_to_kubelet_names_labels_limits_and_binds() {
        let p = pod();
        let plan = container_plan(
            "edge-1",
            &p,
            &p.spec.containers[0],
            2,
            Path::new("/pods"),
            &[
                ("MODE".into(), "edge".into()),
                ("FROM".into(), "s3cret".into()),
            ],
            None,
        )
        .unwrap();
        assert_eq!(plan.name, "k8s_app_web_apps_u-9_2");
        assert_eq!(
            plan.entrypoint.as_deref(),
            Some(&["sh".into(), "-c".into()][..])
        );
        assert_eq!(plan.cmd.as_deref(), Some(&["sleep 60".to_owned()][..]));
        assert_eq!(plan.env, ["MODE=edge", "FROM=s3cret"]);
        assert_eq!(plan.memory, Some(64 * 1024 * 1024));
        assert_eq!(plan.nano_cpus, Some(500_000_000));
        assert_eq!(
            plan.binds,
            [
                "/pods/u-9/volumes/kubernetes.io~empty-dir/scratch:/scratch",
                "/var/log:/logs:ro"
            ]
        );
        assert_eq!(plan.published, [("80/tcp".to_owned(), 8080)]);
        assert_eq!(plan.labels[labels::POD_UID], "u-9");
        assert_eq!(plan.labels[labels::NODE], "edge-1");
        assert_eq!(plan.labels[labels::RESTART_COUNT], "2");
        assert_eq!(plan.labels[labels::DOCKER_TYPE], "container");
        assert!(!plan.labels.contains_key(labels::SANDBOX_ID));
        assert_eq!(plan.network_mode, None);
        assert_eq!(plan.hostname, None);
    }

    #[test]
    fn the_pods_labels_and_annotations_come_along_and_never_replace_edgeds() {
        let mut p = pod();
        p.metadata
            .annotations
            .insert("team".into(), "sensors".into());
        p.metadata
            .labels
            .insert(labels::POD_UID.into(), "forged".into());
        let plan = first_plan(&p, None);
        assert_eq!(plan.labels["a"], "1");
        assert_eq!(plan.labels["annotation.team"], "sensors");
        assert_eq!(plan.labels[labels::POD_UID], "u-9");
        let sandbox = crate::sandbox::plan("edge-1", &p, "pause", 0);
        assert_eq!(sandbox.labels["a"], "1");
        assert_eq!(sandbox.labels["annotation.team"], "sensors");
    }

    #[test]
    fn a_container_in_a_sandbox_joins_its_network_and_publishes_nothing() {
        let p = pod();
        let alone = first_plan(&p, None);
        let joined = first_plan(&p, Some("abc123"));
        assert_eq!(joined.network_mode.as_deref(), Some("container:abc123"));
        assert!(joined.published.is_empty());
        assert_eq!(joined.hostname, None);
        assert_eq!(joined.labels[labels::SANDBOX_ID], "abc123");
        // Same spec, same hash: joining a sandbox is not a spec change.
        assert_eq!(
            joined.labels[labels::CONTAINER_HASH],
            alone.labels[labels::CONTAINER_HASH]
        );
        assert_eq!(
            (joined.name, joined.binds, joined.env),
            (alone.name, alone.binds, alone.env)
        );
    }

    #[test]
    fn the_hash_follows_the_container_spec_not_the_metadata() {
        let p = pod();
        let base = spec_hash(&p, &p.spec.containers[0]);
        let mut relabelled = p.clone();
        relabelled.metadata.labels.insert("b".into(), "2".into());
        assert_eq!(spec_hash(&relabelled, &relabelled.spec.containers[0]), base);
        let mut changed = p.clone();
        changed.spec.containers[0].image = "wedge-test/busybox:2".into();
        assert_ne!(spec_hash(&changed, &changed.spec.containers[0]), base);
        // The pod-level securityContext counts; unset, it leaves the JSON (and so the hash of
        // containers created before edged knew it) as it was.
        let mut secured = p.clone();
        secured.spec.security_context = Some(crate::security_context::PodSecurityContext {
            fs_group: Some(2000),
            ..Default::default()
        });
        assert_ne!(spec_hash(&secured, &secured.spec.containers[0]), base);
        let json = serde_json::to_value(&p.spec.containers[0]).unwrap();
        assert!(json.get("securityContext").is_none(), "{json}");
    }

    #[test]
    fn an_empty_dir_is_writable_by_every_user_as_kubelet_makes_it() {
        use std::os::unix::fs::PermissionsExt;
        let root = tempfile::tempdir().unwrap();
        let p = pod();
        prepare_volumes(&p, root.path()).unwrap();
        let (dir, _) = volume_source(&p, "scratch", root.path()).unwrap();
        let mode = std::fs::metadata(dir).unwrap().permissions().mode() & 0o7777;
        assert_eq!(mode, 0o777);
    }
}
