//! The part of the Kubernetes Pod that edged runs, as it arrives from metamanager (the cloud's
//! JSON, stored verbatim in the `meta` table), and the checks that turn a bad spec into a
//! reason in the pod's status instead of a failed start.
//!
//! Unknown fields are ignored: the cloud sends whole Kubernetes objects, and a field Wedge does
//! not act on must not stop a pod. Volume sources are the exception: a volume whose source
//! Wedge does not support is refused by name, since running without it would be wrong.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// A pod: what edged needs of its metadata and spec.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
pub struct Pod {
    /// Name, namespace, uid, labels.
    pub metadata: ObjectMeta,
    /// What to run.
    #[serde(default)]
    pub spec: PodSpec,
    /// The status the cloud holds, for the times a new status keeps (start time, condition
    /// transitions) across edged restarts.
    #[serde(default, skip_serializing)]
    pub status: SeenStatus,
}

/// The part of a pod's stored status whose times carry over.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SeenStatus {
    /// When the node first took the pod on.
    #[serde(default)]
    pub start_time: Option<String>,
    /// The conditions with their transition times.
    #[serde(default)]
    pub conditions: Vec<SeenCondition>,
    /// `Pending`, `Running`, `Succeeded`, `Failed` (empty before the node first reported).
    #[serde(default)]
    pub phase: String,
    /// Why the pod is in its phase (an admission refusal's reason).
    #[serde(default)]
    pub reason: String,
    /// The reason's message.
    #[serde(default)]
    pub message: String,
}

/// One condition of a stored status.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SeenCondition {
    /// `Ready`, `Initialized`...
    #[serde(default, rename = "type")]
    pub kind: String,
    /// `True` or `False`.
    #[serde(default)]
    pub status: String,
    /// When it took that status.
    #[serde(default)]
    pub last_transition_time: Option<String>,
}

/// Object metadata.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ObjectMeta {
    /// Name (a DNS-1123 subdomain).
    #[serde(default)]
    pub name: String,
    /// Namespace; empty means `default`.
    #[serde(default)]
    pub namespace: String,
    /// Unique id of this incarnation of the pod.
    #[serde(default)]
    pub uid: String,
    /// Labels.
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// Annotations.
    #[serde(default)]
    pub annotations: BTreeMap<String, String>,
    /// Set by the apiserver when the pod is being deleted gracefully: its containers are to
    /// be stopped within the grace period, then the node confirms the deletion.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deletion_timestamp: Option<String>,
    /// The grace period of that deletion, in seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deletion_grace_period_seconds: Option<i64>,
}

/// The pod spec subset edged acts on.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PodSpec {
    /// The containers, started in order.
    #[serde(default)]
    pub containers: Vec<Container>,
    /// Containers run one at a time, each to a successful exit, before any of `containers`
    /// starts (again whenever the pod gets a new sandbox, as kubelet does).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub init_containers: Vec<Container>,
    /// `Always` (default), `OnFailure` or `Never`.
    #[serde(default)]
    pub restart_policy: Option<String>,
    /// Run in the host's network namespace.
    #[serde(default)]
    pub host_network: bool,
    /// Volumes the containers may mount.
    #[serde(default)]
    pub volumes: Vec<Volume>,
    /// The node the pod is bound to.
    #[serde(default)]
    pub node_name: String,
    /// Runtime class (a Wasm class runs the pod in the Wasm host).
    #[serde(default)]
    pub runtime_class_name: Option<String>,
    /// The service account whose token a `serviceAccountToken` projection carries
    /// (`default` when unset).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_account_name: Option<String>,
    /// Seconds its containers get between SIGTERM and SIGKILL when the pod is deleted
    /// (Kubernetes' default: 30).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub termination_grace_period_seconds: Option<i64>,
    /// Pod-level security settings: container defaults, groups, sysctls
    /// (see `crate::security_context`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub security_context: Option<crate::security_context::PodSecurityContext>,
    /// Secrets holding registry credentials for the pod's images (see `crate::pull_secrets`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub image_pull_secrets: Vec<crate::pull_secrets::PullSecretRef>,
    /// The pod's priority (from its PriorityClass, set by the apiserver): lower is evicted
    /// first under pressure.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<i32>,
    /// `ClusterFirst` (the default), `ClusterFirstWithHostNet`, `Default` or `None`: where the
    /// pod's resolver configuration comes from (see `crate::dns`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dns_policy: Option<String>,
    /// Nameservers, searches and options added to the policy's (all of it under `None`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dns_config: Option<crate::dns::PodDnsConfig>,
    /// Extra lines of the pod's `/etc/hosts` (see `crate::etc_hosts`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub host_aliases: Vec<crate::etc_hosts::HostAlias>,
    /// The pod's hostname instead of its name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hostname: Option<String>,
    /// With it the pod has the FQDN `<hostname>.<subdomain>.<ns>.svc.<clusterDomain>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subdomain: Option<String>,
    /// The FQDN is the kernel's hostname rather than the short name.
    #[serde(
        default,
        rename = "setHostnameAsFQDN",
        skip_serializing_if = "Option::is_none"
    )]
    pub set_hostname_as_fqdn: Option<bool>,
}

/// One container.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Container {
    /// Name (a DNS-1123 label, unique in the pod).
    #[serde(default)]
    pub name: String,
    /// Image reference.
    #[serde(default)]
    pub image: String,
    /// Entrypoint override.
    #[serde(default)]
    pub command: Vec<String>,
    /// Arguments.
    #[serde(default)]
    pub args: Vec<String>,
    /// Environment.
    #[serde(default)]
    pub env: Vec<EnvVar>,
    /// Whole ConfigMaps or Secrets as environment (`configMapRef`/`secretRef`, `prefix`).
    #[serde(default)]
    pub env_from: Vec<serde_json::Value>,
    /// Ports (published on the host when `hostPort` is set).
    #[serde(default)]
    pub ports: Vec<ContainerPort>,
    /// Working directory.
    #[serde(default)]
    pub working_dir: Option<String>,
    /// Resource limits.
    #[serde(default)]
    pub resources: Resources,
    /// `Always`, `IfNotPresent` or `Never`; default per Kubernetes (`Always` for `:latest`
    /// or no tag, else `IfNotPresent`).
    #[serde(default)]
    pub image_pull_policy: Option<String>,
    /// Volume mounts.
    #[serde(default)]
    pub volume_mounts: Vec<VolumeMount>,
    /// Restarts the container when it fails.
    #[serde(default)]
    pub liveness_probe: Option<Probe>,
    /// Gates the container's (and the pod's) readiness.
    #[serde(default)]
    pub readiness_probe: Option<Probe>,
    /// Holds the other probes until it succeeds; restarts the container when it fails.
    #[serde(default)]
    pub startup_probe: Option<Probe>,
    /// On an init container, `Always` makes it a sidecar (kept running beside the app
    /// containers); edged refuses that rather than run it as a plain init container.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restart_policy: Option<String>,
    /// The container's security settings, overriding the pod's (see
    /// `crate::security_context`). Left out of the JSON when unset, so the spec hash of a
    /// container without it is what it was before edged knew the field.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub security_context: Option<crate::security_context::SecurityContext>,
}

/// A probe: one action and its timing (Kubernetes' defaults).
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Probe {
    /// Run a command in the container; exit 0 is success.
    #[serde(default)]
    pub exec: Option<ExecAction>,
    /// HTTP GET; a status from 200 to 399 is success.
    #[serde(default)]
    pub http_get: Option<HttpGetAction>,
    /// A TCP connection that opens is success.
    #[serde(default)]
    pub tcp_socket: Option<TcpSocketAction>,
    /// Seconds after the container starts before the first probe.
    #[serde(default)]
    pub initial_delay_seconds: u32,
    /// Seconds between probes (10).
    #[serde(default)]
    pub period_seconds: Option<u32>,
    /// Seconds a probe may take (1).
    #[serde(default)]
    pub timeout_seconds: Option<u32>,
    /// Consecutive successes that count (1).
    #[serde(default)]
    pub success_threshold: Option<u32>,
    /// Consecutive failures that count (3).
    #[serde(default)]
    pub failure_threshold: Option<u32>,
}

impl Probe {
    /// Seconds between probes.
    pub fn period(&self) -> u32 {
        self.period_seconds.unwrap_or(10).max(1)
    }
    /// Seconds a probe may take.
    pub fn timeout(&self) -> u32 {
        self.timeout_seconds.unwrap_or(1).max(1)
    }
    /// Consecutive successes needed.
    pub fn successes(&self) -> u32 {
        self.success_threshold.unwrap_or(1).max(1)
    }
    /// Consecutive failures needed.
    pub fn failures(&self) -> u32 {
        self.failure_threshold.unwrap_or(3).max(1)
    }
}

/// `exec` probe action.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
pub struct ExecAction {
    /// The command (no shell unless it names one).
    #[serde(default)]
    pub command: Vec<String>,
}

/// `httpGet` probe action.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
pub struct HttpGetAction {
    /// Path (default `/`).
    #[serde(default)]
    pub path: Option<String>,
    /// Port number or the name of a container port.
    pub port: serde_json::Value,
    /// Host to connect to (default: the pod's IP).
    #[serde(default)]
    pub host: Option<String>,
}

/// `tcpSocket` probe action.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
pub struct TcpSocketAction {
    /// Port number or the name of a container port.
    pub port: serde_json::Value,
    /// Host to connect to (default: the pod's IP).
    #[serde(default)]
    pub host: Option<String>,
}

/// An environment variable.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct EnvVar {
    /// Name.
    pub name: String,
    /// Literal value.
    #[serde(default)]
    pub value: Option<String>,
    /// A reference (`configMapKeyRef`, `secretKeyRef`, `fieldRef`); see `projected`.
    #[serde(default)]
    pub value_from: Option<serde_json::Value>,
}

/// A container port.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ContainerPort {
    /// Name, which probes may use instead of the number.
    #[serde(default)]
    pub name: Option<String>,
    /// Port inside the container.
    pub container_port: u16,
    /// Port on the host, if published.
    #[serde(default)]
    pub host_port: Option<u16>,
    /// `TCP` (default), `UDP` or `SCTP`.
    #[serde(default)]
    pub protocol: Option<String>,
}

/// Requests and limits; edged enforces the limits.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
pub struct Resources {
    /// `memory` and `cpu` quantities.
    #[serde(default)]
    pub limits: BTreeMap<String, String>,
    /// What the container asks for (its QoS class; the apiserver copies limits here when
    /// only limits are given).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub requests: BTreeMap<String, String>,
}

/// A volume mount.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct VolumeMount {
    /// The volume's name.
    pub name: String,
    /// Where it appears in the container.
    pub mount_path: String,
    /// Read-only mount.
    #[serde(default)]
    pub read_only: bool,
    /// A path inside the volume to mount instead of its root, resolved safely inside it
    /// ([`crate::subpath`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sub_path: Option<String>,
    /// `subPath` with `$(VAR)` expansion from the container's environment.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sub_path_expr: Option<String>,
    /// Mount propagation: only `None` (the default) is supported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mount_propagation: Option<String>,
}

/// A volume: its name and its source, kept as JSON and checked by [`validate`].
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
pub struct Volume {
    /// Name, referenced by mounts.
    pub name: String,
    /// The source: one key such as `hostPath`, `emptyDir`, `configMap`, `secret`.
    #[serde(flatten)]
    pub source: BTreeMap<String, serde_json::Value>,
}

/// Volume sources edged knows how to provide.
pub const SUPPORTED_VOLUME_SOURCES: [&str; 6] = [
    "hostPath",
    "emptyDir",
    "configMap",
    "secret",
    "projected",
    "downwardAPI",
];

/// Sources of a `projected` volume edged knows how to provide (the `kube-api-access-*`
/// volume uses the first, third and fourth).
pub const SUPPORTED_PROJECTIONS: [&str; 4] =
    ["serviceAccountToken", "configMap", "secret", "downwardAPI"];

/// Why a pod cannot be run as specified; the text goes into the pod's status.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct SpecError {
    /// A Kubernetes-style reason (`InvalidPodSpec`, `InvalidImageName`...).
    pub reason: &'static str,
    /// What is wrong, naming the field.
    pub message: String,
}

impl SpecError {
    fn invalid(message: String) -> SpecError {
        SpecError {
            reason: "InvalidPodSpec",
            message,
        }
    }
}

impl Pod {
    /// Parses a pod from the cloud's JSON.
    pub fn from_json(text: &str) -> Result<Pod, serde_json::Error> {
        serde_json::from_str(text)
    }

    /// The namespace, `default` when empty.
    pub fn namespace(&self) -> &str {
        if self.metadata.namespace.is_empty() {
            "default"
        } else {
            &self.metadata.namespace
        }
    }

    /// `<namespace>/<name>`.
    pub fn key(&self) -> String {
        format!("{}/{}", self.namespace(), self.metadata.name)
    }

    /// The restart policy, `Always` when unset.
    pub fn restart_policy(&self) -> &str {
        self.spec.restart_policy.as_deref().unwrap_or("Always")
    }

    /// Every container of the pod: the init containers in order, then the app containers.
    pub fn all_containers(&self) -> impl Iterator<Item = &Container> {
        self.spec
            .init_containers
            .iter()
            .chain(self.spec.containers.iter())
    }

    /// Whether `name` is one of the pod's init containers.
    pub fn is_init_container(&self, name: &str) -> bool {
        self.spec.init_containers.iter().any(|c| c.name == name)
    }

    /// Whether `name` is one of the pod's containers, init or app.
    pub fn has_container(&self, name: &str) -> bool {
        self.all_containers().any(|c| c.name == name)
    }

    /// Whether the apiserver is deleting the pod gracefully (`deletionTimestamp` set).
    pub fn is_terminating(&self) -> bool {
        self.metadata.deletion_timestamp.is_some()
    }

    /// How long the pod's containers get to stop: the deletion's grace period, else the
    /// pod's `terminationGracePeriodSeconds`, else 30 s; never under kubelet's minimum of 2 s
    /// (a forced deletion, grace 0, still sends SIGTERM first).
    pub fn termination_grace(&self) -> std::time::Duration {
        let seconds = self
            .metadata
            .deletion_grace_period_seconds
            .or(self.spec.termination_grace_period_seconds)
            .unwrap_or(DEFAULT_TERMINATION_GRACE_SECONDS);
        std::time::Duration::from_secs(seconds.max(MINIMUM_GRACE_SECONDS).unsigned_abs())
    }
}

/// Kubernetes' default `terminationGracePeriodSeconds`.
const DEFAULT_TERMINATION_GRACE_SECONDS: i64 = 30;

/// Kubelet's shortest grace period: even a forced deletion gets SIGTERM and this long.
const MINIMUM_GRACE_SECONDS: i64 = 2;

impl Container {
    /// The effective pull policy (Kubernetes' default when unset).
    pub fn pull_policy(&self) -> &str {
        if let Some(p) = self.image_pull_policy.as_deref() {
            return p;
        }
        let tag_is_latest = match self.image.rsplit_once(':') {
            // A ':' inside the last path segment is a tag; one before a '/' is a registry port.
            Some((_, tag)) if !tag.contains('/') => tag == "latest",
            _ => true,
        };
        if tag_is_latest && !self.image.contains('@') {
            "Always"
        } else {
            "IfNotPresent"
        }
    }
}

/// Checks what edged relies on before touching the engine: names, images, policies, volume
/// sources and mounts. The first problem found is returned.
pub fn validate(pod: &Pod) -> Result<(), SpecError> {
    let meta = &pod.metadata;
    if !is_dns1123_subdomain(&meta.name) {
        return Err(SpecError::invalid(format!(
            "metadata.name {:?}: must be a DNS-1123 subdomain (lowercase letters, digits, '-' and '.', at most 253)",
            meta.name
        )));
    }
    if !meta.namespace.is_empty() && !is_dns1123_label(&meta.namespace) {
        return Err(SpecError::invalid(format!(
            "metadata.namespace {:?}: must be a DNS-1123 label",
            meta.namespace
        )));
    }
    if meta.uid.is_empty() {
        return Err(SpecError::invalid("metadata.uid: must not be empty".into()));
    }
    if !matches!(pod.restart_policy(), "Always" | "OnFailure" | "Never") {
        return Err(SpecError::invalid(format!(
            "spec.restartPolicy {:?}: must be Always, OnFailure or Never",
            pod.restart_policy()
        )));
    }
    let mut volumes = std::collections::BTreeSet::new();
    for (i, v) in pod.spec.volumes.iter().enumerate() {
        if !is_dns1123_label(&v.name) || !volumes.insert(v.name.as_str()) {
            return Err(SpecError::invalid(format!(
                "spec.volumes[{i}].name {:?}: must be a unique DNS-1123 label",
                v.name
            )));
        }
        let sources: Vec<&String> = v.source.keys().collect();
        match sources.as_slice() {
            [one] if one.as_str() == "projected" => {
                let projections = v.source[*one]["sources"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default();
                for (j, projection) in projections.iter().enumerate() {
                    let kinds: Vec<&String> = projection
                        .as_object()
                        .map(|o| o.keys().collect())
                        .unwrap_or_default();
                    match kinds.as_slice() {
                        [kind] if SUPPORTED_PROJECTIONS.contains(&kind.as_str()) => {}
                        _ => {
                            return Err(SpecError::invalid(format!(
                                "spec.volumes[{i}].projected.sources[{j}] ({}): {kinds:?} is not supported; use one of {}",
                                v.name,
                                SUPPORTED_PROJECTIONS.join(", ")
                            )));
                        }
                    }
                }
            }
            [one] if SUPPORTED_VOLUME_SOURCES.contains(&one.as_str()) => {}
            [one] => {
                return Err(SpecError::invalid(format!(
                    "spec.volumes[{i}] ({}): volume source {one:?} is not supported; use one of {}",
                    v.name,
                    SUPPORTED_VOLUME_SOURCES.join(", ")
                )));
            }
            _ => {
                return Err(SpecError::invalid(format!(
                    "spec.volumes[{i}] ({}): exactly one volume source is required, found {}",
                    v.name,
                    sources.len()
                )));
            }
        }
    }
    if pod.spec.containers.is_empty() {
        return Err(SpecError::invalid(
            "spec.containers: at least one container is required".into(),
        ));
    }
    // Names are unique across init and app containers: the engine's labels and the status
    // tell containers apart by name alone.
    let mut names = std::collections::BTreeSet::new();
    for (field, list) in [
        ("spec.initContainers", &pod.spec.init_containers),
        ("spec.containers", &pod.spec.containers),
    ] {
        for (i, c) in list.iter().enumerate() {
            if !is_dns1123_label(&c.name) || !names.insert(c.name.as_str()) {
                return Err(SpecError::invalid(format!(
                    "{field}[{i}].name {:?}: must be a DNS-1123 label unique among the pod's containers and init containers",
                    c.name
                )));
            }
            validate_container(&format!("{field}[{i}]"), c, &volumes)?;
        }
    }
    for (i, c) in pod.spec.init_containers.iter().enumerate() {
        if let Some(policy) = &c.restart_policy {
            return Err(SpecError::invalid(format!(
                "spec.initContainers[{i}].restartPolicy {policy:?} ({}): sidecar containers are not supported by this node; the pod is not started without it",
                c.name
            )));
        }
        let probes = [
            ("livenessProbe", &c.liveness_probe),
            ("readinessProbe", &c.readiness_probe),
            ("startupProbe", &c.startup_probe),
        ];
        if let Some((probe, _)) = probes.iter().find(|(_, p)| p.is_some()) {
            return Err(SpecError::invalid(format!(
                "spec.initContainers[{i}].{probe} ({}): an init container may not have probes",
                c.name
            )));
        }
    }
    crate::security_context::validate(pod)?;
    crate::dns::validate(pod)?;
    crate::etc_hosts::validate(pod)?;
    Ok(())
}

/// The checks every container, init or app, must pass; `at` is its field path
/// (`spec.containers[0]`).
fn validate_container(
    at: &str,
    c: &Container,
    volumes: &std::collections::BTreeSet<&str>,
) -> Result<(), SpecError> {
    if c.image.trim().is_empty() || c.image.chars().any(char::is_whitespace) {
        return Err(SpecError {
            reason: "InvalidImageName",
            message: format!(
                "{at}.image {:?} ({}): an image reference is required",
                c.image, c.name
            ),
        });
    }
    if !matches!(c.pull_policy(), "Always" | "IfNotPresent" | "Never") {
        return Err(SpecError::invalid(format!(
            "{at}.imagePullPolicy {:?}: must be Always, IfNotPresent or Never",
            c.pull_policy()
        )));
    }
    for (key, value) in &c.resources.limits {
        let parsed = match key.as_str() {
            "memory" => crate::quantity::bytes(value).map(|_| ()),
            "cpu" => crate::quantity::nano_cpus(value).map(|_| ()),
            _ => Ok(()),
        };
        if let Err(e) = parsed {
            return Err(SpecError::invalid(format!(
                "{at}.resources.limits.{key}: {e}"
            )));
        }
    }
    for (j, m) in c.volume_mounts.iter().enumerate() {
        if !volumes.contains(m.name.as_str()) {
            return Err(SpecError::invalid(format!(
                "{at}.volumeMounts[{j}].name {:?}: no such volume",
                m.name
            )));
        }
        if !m.mount_path.starts_with('/') {
            return Err(SpecError::invalid(format!(
                "{at}.volumeMounts[{j}].mountPath {:?}: must be absolute",
                m.mount_path
            )));
        }
        if let Some(mode) = m.mount_propagation.as_deref()
            && mode != "None"
        {
            return Err(SpecError::invalid(format!(
                "{at}.volumeMounts[{j}].mountPropagation {mode:?}: only None is supported by this node"
            )));
        }
    }
    if c.restart_policy.is_some() && !at.starts_with("spec.initContainers") {
        return Err(SpecError::invalid(format!(
            "{at}.restartPolicy: a per-container restart policy is not supported by this node"
        )));
    }
    Ok(())
}

/// A DNS-1123 label: 1–63 of `[a-z0-9-]`, starting and ending alphanumeric.
pub fn is_dns1123_label(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        && b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric()
}

/// A DNS-1123 subdomain: dot-separated labels, at most 253 characters.
pub fn is_dns1123_subdomain(s: &str) -> bool {
    s.len() <= 253 && s.split('.').all(is_dns1123_label)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(json: serde_json::Value) -> Pod {
        serde_json::from_value(json).unwrap()
    }

    fn good() -> serde_json::Value {
        serde_json::json!({
            "metadata": {"name": "web", "namespace": "default", "uid": "u-1", "resourceVersion": "3"},
            "spec": {
                "nodeName": "edge-1",
                "restartPolicy": "Always",
                "containers": [{"name": "app", "image": "wedge-test/busybox:1", "command": ["sleep", "60"],
                                "volumeMounts": [{"name": "scratch", "mountPath": "/scratch"}],
                                "resources": {"limits": {"memory": "64Mi", "cpu": "250m"}}}],
                "volumes": [{"name": "scratch", "emptyDir": {}}],
                "tolerations": [{"key": "x"}]
            },
            "status": {"phase": "Pending"}
        })
    }

    #[test]
    fn a_whole_kubernetes_pod_parses_and_validates() {
        let p = pod(good());
        assert_eq!(p.key(), "default/web");
        assert_eq!(p.restart_policy(), "Always");
        assert_eq!(p.spec.volumes[0].source.keys().next().unwrap(), "emptyDir");
        validate(&p).unwrap();
    }

    #[test]
    fn propagation_is_refused_by_name_and_sub_paths_are_taken() {
        let with_mount = |mount: serde_json::Value| {
            let mut spec = good();
            spec["spec"]["containers"][0]["volumeMounts"] = serde_json::json!([mount]);
            validate(&pod(spec))
        };
        let err = with_mount(
            serde_json::json!({"name": "scratch", "mountPath": "/s", "mountPropagation": "Bidirectional"}),
        )
        .unwrap_err();
        assert!(
            err.message
                .contains("spec.containers[0].volumeMounts[0].mountPropagation"),
            "{}",
            err.message
        );
        for ok in [
            serde_json::json!({"name": "scratch", "mountPath": "/s", "subPath": "a"}),
            serde_json::json!({"name": "scratch", "mountPath": "/s", "subPathExpr": "$(POD)"}),
            serde_json::json!({"name": "scratch", "mountPath": "/s", "subPath": "", "mountPropagation": "None"}),
        ] {
            with_mount(ok).unwrap();
        }
    }

    #[test]
    fn init_containers_are_checked_like_containers_and_sidecars_are_refused_by_name() {
        let with_init = |init: serde_json::Value| {
            let mut spec = good();
            spec["spec"]["initContainers"] = init;
            validate(&pod(spec))
        };
        let prep = serde_json::json!({"name": "prep", "image": "wedge-test/busybox:1",
                                      "volumeMounts": [{"name": "scratch", "mountPath": "/s"}]});
        with_init(serde_json::json!([prep])).unwrap();
        let p = pod({
            let mut spec = good();
            spec["spec"]["initContainers"] = serde_json::json!([prep]);
            spec
        });
        assert_eq!(
            p.all_containers()
                .map(|c| c.name.as_str())
                .collect::<Vec<_>>(),
            ["prep", "app"]
        );
        assert!(p.is_init_container("prep") && !p.is_init_container("app"));
        let cases = [
            (
                serde_json::json!([{"name": "app", "image": "x"}]),
                "spec.containers[0].name \"app\": must be a DNS-1123 label unique",
            ),
            (
                serde_json::json!([{"name": "prep", "image": ""}]),
                "spec.initContainers[0].image",
            ),
            (
                serde_json::json!([{"name": "prep", "image": "x", "volumeMounts": [{"name": "nope", "mountPath": "/n"}]}]),
                "spec.initContainers[0].volumeMounts[0].name",
            ),
            (
                serde_json::json!([{"name": "prep", "image": "x", "restartPolicy": "Always"}]),
                "spec.initContainers[0].restartPolicy \"Always\" (prep): sidecar containers are not supported",
            ),
            (
                serde_json::json!([{"name": "prep", "image": "x", "readinessProbe": {"exec": {"command": ["true"]}}}]),
                "spec.initContainers[0].readinessProbe (prep)",
            ),
        ];
        for (init, expected) in cases {
            let e = with_init(init).unwrap_err();
            assert!(e.message.contains(expected), "{expected}: {e}");
        }
    }

    #[test]
    fn the_grace_period_follows_kubelet() {
        use std::time::Duration;
        let mut p = pod(good());
        assert!(!p.is_terminating());
        assert_eq!(p.termination_grace(), Duration::from_secs(30));
        p.spec.termination_grace_period_seconds = Some(5);
        assert_eq!(p.termination_grace(), Duration::from_secs(5));
        let mut deleting = good();
        deleting["metadata"]["deletionTimestamp"] = "2026-11-23T10:00:00Z".into();
        deleting["metadata"]["deletionGracePeriodSeconds"] = 0.into();
        let p = pod(deleting);
        assert!(p.is_terminating());
        // A forced deletion (grace 0) still gets kubelet's minimum.
        assert_eq!(p.termination_grace(), Duration::from_secs(2));
    }

    #[test]
    fn bad_specs_name_the_field() {
        let cases: [(&str, serde_json::Value, &str); 7] = [
            ("/metadata/name", "Web_1".into(), "metadata.name \"Web_1\""),
            ("/spec/containers/0/image", "".into(), "image \"\" (app)"),
            (
                "/spec/restartPolicy",
                "Sometimes".into(),
                "spec.restartPolicy",
            ),
            (
                "/spec/volumes/0",
                serde_json::json!({"name": "scratch", "nfs": {"server": "x"}}),
                "volume source \"nfs\" is not supported",
            ),
            (
                "/spec/containers/0/volumeMounts/0/name",
                "other".into(),
                "volumeMounts[0].name \"other\": no such volume",
            ),
            (
                "/spec/containers/0/resources/limits/memory",
                "lots".into(),
                "resources.limits.memory",
            ),
            (
                "/spec/containers",
                serde_json::json!([]),
                "at least one container",
            ),
        ];
        for (pointer, value, expected) in cases {
            let mut json = good();
            *json.pointer_mut(pointer).unwrap() = value;
            let err = validate(&pod(json)).unwrap_err();
            assert!(err.message.contains(expected), "{pointer}: {err}");
        }
        let mut json = good();
        json["spec"]["containers"][0]["image"] = "".into();
        assert_eq!(validate(&pod(json)).unwrap_err().reason, "InvalidImageName");
    }

    #[test]
    fn pull_policy_defaults_follow_kubernetes() {
        let c = |image: &str| Container {
            image: image.into(),
            ..Container::default()
        };
        assert_eq!(c("busybox").pull_policy(), "Always");
        assert_eq!(c("busybox:latest").pull_policy(), "Always");
        assert_eq!(c("busybox:1.36").pull_policy(), "IfNotPresent");
        assert_eq!(c("registry:5000/busybox").pull_policy(), "Always");
        assert_eq!(c("registry:5000/busybox:2").pull_policy(), "IfNotPresent");
        assert_eq!(c("busybox@sha256:abc").pull_policy(), "IfNotPresent");
    }
}
