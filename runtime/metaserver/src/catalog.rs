//! Which Kubernetes resource a stored object is, and back.
//!
//! metamanager keys objects as KubeEdge does, `<namespace>/<type>/<name>`, where `<type>` is
//! the lowercase kind (`pod`, `configmap`, `endpointslice`): that is how edgecontroller and
//! dynamicController name them on the wire. MetaServer serves them by API group and resource
//! plural (`/apis/discovery.k8s.io/v1/namespaces/default/endpointslices`). The resources named
//! here are the ones KubeEdge's cloud sends an edge node; any other kind dynamicController
//! sends (an edge app watching Deployments) is served by the same rules (`deployment` ↔
//! `deployments`, group and version from the object's own `apiVersion`).

/// What a resource is: its API group, version, kind and scope.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResourceType {
    /// The API group (`""` for core).
    pub group: String,
    /// The version served.
    pub version: String,
    /// The resource plural (`pods`).
    pub resource: String,
    /// The kind (`Pod`).
    pub kind: String,
    /// Whether objects live in namespaces.
    pub namespaced: bool,
}

impl ResourceType {
    /// `apiVersion` of its objects (`v1`, `discovery.k8s.io/v1`).
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// metamanager's type name for it (the lowercase kind).
    pub fn store_type(&self) -> String {
        self.kind.to_ascii_lowercase()
    }
}

/// `(store type, group, version, resource, kind, namespaced)` of what KubeEdge's cloud sends.
const KNOWN: &[(&str, &str, &str, &str, &str, bool)] = &[
    ("pod", "", "v1", "pods", "Pod", true),
    ("configmap", "", "v1", "configmaps", "ConfigMap", true),
    ("secret", "", "v1", "secrets", "Secret", true),
    ("service", "", "v1", "services", "Service", true),
    ("endpoints", "", "v1", "endpoints", "Endpoints", true),
    ("node", "", "v1", "nodes", "Node", false),
    ("namespace", "", "v1", "namespaces", "Namespace", false),
    (
        "serviceaccount",
        "",
        "v1",
        "serviceaccounts",
        "ServiceAccount",
        true,
    ),
    (
        "persistentvolume",
        "",
        "v1",
        "persistentvolumes",
        "PersistentVolume",
        false,
    ),
    (
        "persistentvolumeclaim",
        "",
        "v1",
        "persistentvolumeclaims",
        "PersistentVolumeClaim",
        true,
    ),
    (
        "endpointslice",
        "discovery.k8s.io",
        "v1",
        "endpointslices",
        "EndpointSlice",
        true,
    ),
    (
        "lease",
        "coordination.k8s.io",
        "v1",
        "leases",
        "Lease",
        true,
    ),
    (
        "volumeattachment",
        "storage.k8s.io",
        "v1",
        "volumeattachments",
        "VolumeAttachment",
        false,
    ),
    (
        "device",
        "devices.kubeedge.io",
        "v1beta1",
        "devices",
        "Device",
        true,
    ),
    (
        "devicemodel",
        "devices.kubeedge.io",
        "v1beta1",
        "devicemodels",
        "DeviceModel",
        true,
    ),
];

/// The store types loaded from metamanager when MetaServer starts.
pub fn known_store_types() -> impl Iterator<Item = &'static str> {
    KNOWN.iter().map(|k| k.0)
}

fn known(entry: &(&str, &str, &str, &str, &str, bool)) -> ResourceType {
    ResourceType {
        group: entry.1.to_owned(),
        version: entry.2.to_owned(),
        resource: entry.3.to_owned(),
        kind: entry.4.to_owned(),
        namespaced: entry.5,
    }
}

/// The resource type of group `group` and plural `resource`, when it is one of the known.
pub fn by_resource(group: &str, resource: &str) -> Option<ResourceType> {
    KNOWN
        .iter()
        .find(|k| k.1 == group && k.3 == resource)
        .map(known)
}

/// The resource type of a stored object of metamanager type `store_type`, its group and
/// version taken from `api_version` when the type is not a known one (then `None` when the
/// object names no `apiVersion`/`kind`).
pub fn by_store_type(
    store_type: &str,
    api_version: Option<&str>,
    kind: Option<&str>,
) -> Option<ResourceType> {
    if let Some(k) = KNOWN.iter().find(|k| k.0 == store_type) {
        return Some(known(k));
    }
    let (group, version) = split_api_version(api_version?);
    let kind = kind?.to_owned();
    if kind.to_ascii_lowercase() != store_type {
        return None;
    }
    Some(ResourceType {
        group,
        version,
        resource: plural(store_type),
        kind,
        // Unknown kinds: namespaced unless the object says otherwise (see `ingest`).
        namespaced: true,
    })
}

/// `(group, version)` of an `apiVersion`.
pub fn split_api_version(api_version: &str) -> (String, String) {
    match api_version.split_once('/') {
        Some((g, v)) => (g.to_owned(), v.to_owned()),
        None => (String::new(), api_version.to_owned()),
    }
}

/// The plural Kubernetes gives a lowercase kind (`deployment` → `deployments`, `ingress` →
/// `ingresses`, `networkpolicy` → `networkpolicies`), as KubeEdge's own rule does.
pub fn plural(kind: &str) -> String {
    if kind == "endpoints" {
        return kind.to_owned();
    }
    if let Some(stem) = kind.strip_suffix('y')
        && !stem.ends_with(['a', 'e', 'i', 'o', 'u'])
    {
        return format!("{stem}ies");
    }
    if kind.ends_with('s') || kind.ends_with("ch") || kind.ends_with("sh") || kind.ends_with('x') {
        return format!("{kind}es");
    }
    format!("{kind}s")
}

/// The lowercase kind of a plural (the reverse of [`plural`]), for resources not known.
pub fn singular(resource: &str) -> String {
    if resource == "endpoints" {
        return resource.to_owned();
    }
    if let Some(stem) = resource.strip_suffix("ies") {
        return format!("{stem}y");
    }
    for suffix in ["sses", "ches", "shes", "xes"] {
        if resource.ends_with(suffix) {
            return resource[..resource.len() - 2].to_owned();
        }
    }
    resource.strip_suffix('s').unwrap_or(resource).to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plurals_follow_kubernetes() {
        for (kind, res) in [
            ("pod", "pods"),
            ("endpoints", "endpoints"),
            ("ingress", "ingresses"),
            ("networkpolicy", "networkpolicies"),
            ("gateway", "gateways"),
            ("deployment", "deployments"),
        ] {
            assert_eq!(plural(kind), res);
            assert_eq!(singular(res), kind);
        }
    }

    #[test]
    fn known_and_unknown_types_resolve() {
        let slice = by_store_type("endpointslice", None, None).unwrap();
        assert_eq!(slice.api_version(), "discovery.k8s.io/v1");
        assert_eq!(slice.resource, "endpointslices");
        let d = by_store_type("deployment", Some("apps/v1"), Some("Deployment")).unwrap();
        assert_eq!(
            (d.group.as_str(), d.resource.as_str()),
            ("apps", "deployments")
        );
        assert!(by_store_type("podpatch", None, None).is_none());
        assert!(by_store_type("podstatus", Some("v1"), Some("Pod")).is_none());
        assert!(by_resource("", "nodes").is_some_and(|n| !n.namespaced));
    }
}
