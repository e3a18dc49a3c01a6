//! Which of KubeEdge's keys Wedge acts on, and the start-up list of the ones
//! it accepts but ignores.
//!
//! A KubeEdge file loads whole, so an operator can start Wedge on the file
//! `keadm join` wrote; but a key that loads is not a key that works. Wedge
//! therefore names, once at start, the keys of the file that it does not act
//! on. Only keys worth a line are named:
//! - the value must differ from Wedge's default, and from every default
//!   KubeEdge v1.12 – v1.23 itself writes ([`KUBEEDGE_DEFAULTS`]): such a
//!   value was put there by the generator, not chosen by the operator, and
//!   naming the ~100 kubelet keys every generated file carries would bury the
//!   few that matter;
//! - a section switched off (`enable: false`) says nothing, since its keys
//!   would do nothing in KubeEdge either;
//! - leaf keys are named, with free-form maps (`evictionHard`, ...) named as
//!   a whole.
//!
//! When edged starts acting on one more key, move it to [`ACTED_ON`].

use serde_norway::{Mapping, Value};

use super::model::EdgeCoreConfig;

/// Start of the line that lists the ignored keys (the log line and
/// `wedge config check` print it).
pub const NOT_IMPLEMENTED_PREFIX: &str = "accepted, not implemented: ";

/// Keys (and everything under them) that Wedge accepts and ignores.
const IGNORED: &[&str] = &[
    "database.aliasName",
    "featureGates",
    "modules.dbTest",
    "modules.edgeHub.quic",
    "modules.edged",
    "modules.metaManager.contextSendGroup",
    "modules.metaManager.metaServer",
    "modules.taskManager",
];

/// Keys Wedge acts on inside an [`IGNORED`] section. The longest matching
/// entry of the two lists decides; a key in neither is acted on.
const ACTED_ON: &[&str] = &[
    // MetaServer serves the Kubernetes API (get, list, watch, writes through the cloud) and
    // KubeEdge's unhold-upgrade extension on this address (plain HTTP).
    "modules.metaManager.metaServer.enable",
    "modules.metaManager.metaServer.server",
    "modules.edged.enable",
    "modules.edged.hostnameOverride",
    "modules.edged.maxContainerCount",
    "modules.edged.maxPerPodContainerCount",
    "modules.edged.minimumGCAge",
    "modules.edged.nodeIP",
    "modules.edged.podSandboxImage",
    "modules.edged.registerNodeNamespace",
    "modules.edged.rootDirectory",
    "modules.edged.seccompDefault",
    // Pods' resolv.conf, hostnames and hosts files are made from these, as kubelet makes them.
    "modules.edged.tailoredKubeletConfig.clusterDNS",
    "modules.edged.tailoredKubeletConfig.clusterDomain",
    "modules.edged.tailoredKubeletConfig.resolvConf",
    // Docker's socket runs pods on Docker, any other endpoint on a CRI runtime.
    "modules.edged.tailoredKubeletConfig.containerRuntimeEndpoint",
    // CRI container logs are rotated by these (Docker keeps its own).
    "modules.edged.tailoredKubeletConfig.containerLogMaxFiles",
    "modules.edged.tailoredKubeletConfig.containerLogMaxSize",
    "modules.edged.tailoredKubeletConfig.containerLogMonitorInterval",
    // The node's kubelet port (logs, exec, attach, stats) listens here.
    "modules.edged.tailoredKubeletConfig.address",
    // Kubelet's eviction manager: thresholds raise the pressure conditions (held for the
    // transition period), refuse new pods under them, and evict pods for memory.available,
    // nodefs.available and imagefs.available (image GC first for the disk).
    "modules.edged.tailoredKubeletConfig.evictionHard",
    "modules.edged.tailoredKubeletConfig.evictionMaxPodGracePeriod",
    "modules.edged.tailoredKubeletConfig.evictionMinimumReclaim",
    "modules.edged.tailoredKubeletConfig.evictionPressureTransitionPeriod",
    "modules.edged.tailoredKubeletConfig.evictionSoft",
    "modules.edged.tailoredKubeletConfig.evictionSoftGracePeriod",
    "modules.edged.tailoredKubeletConfig.fileCheckFrequency",
    "modules.edged.tailoredKubeletConfig.imageGCHighThresholdPercent",
    "modules.edged.tailoredKubeletConfig.imageGCLowThresholdPercent",
    "modules.edged.tailoredKubeletConfig.imageMinimumGCAge",
    "modules.edged.tailoredKubeletConfig.maxPods",
    "modules.edged.tailoredKubeletConfig.nodeLeaseDurationSeconds",
    "modules.edged.tailoredKubeletConfig.nodeStatusReportFrequency",
    "modules.edged.tailoredKubeletConfig.nodeStatusUpdateFrequency",
    "modules.edged.tailoredKubeletConfig.readOnlyPort",
    // The deadline of edged's container listing (relist), which runs beside its loop.
    "modules.edged.tailoredKubeletConfig.runtimeRequestTimeout",
    // Unset: containers without a seccomp profile run unconfined, as kubelet runs them.
    "modules.edged.tailoredKubeletConfig.seccompDefault",
];

/// Maps whose keys are data, not config keys: compared and named whole.
const FREE_FORM: &[&str] = &[
    "modules.edged.nodeLabels",
    "modules.edged.tailoredKubeletConfig.cpuManagerPolicyOptions",
    "modules.edged.tailoredKubeletConfig.evictionHard",
    "modules.edged.tailoredKubeletConfig.evictionMinimumReclaim",
    "modules.edged.tailoredKubeletConfig.evictionSoft",
    "modules.edged.tailoredKubeletConfig.evictionSoftGracePeriod",
    "modules.edged.tailoredKubeletConfig.featureGates",
    "modules.edged.tailoredKubeletConfig.kubeReserved",
    "modules.edged.tailoredKubeletConfig.qosReserved",
    "modules.edged.tailoredKubeletConfig.staticPodURLHeader",
    "modules.edged.tailoredKubeletConfig.systemReserved",
    "modules.edged.tailoredKubeletConfig.topologyManagerPolicyOptions",
];

/// Values KubeEdge v1.12 – v1.23 write by default where they differ from
/// Wedge's default (key, YAML value), from each release's `default.go` and
/// the upstream kubelet defaults it applied. Not listed on purpose: the
/// container runtime endpoints (KubeEdge's containerd socket is not what
/// Wedge talks to, which the operator should learn) and values of keys
/// Wedge acts on.
const KUBEEDGE_DEFAULTS: &[(&str, &str)] = &[
    ("modules.edgeHub.quic.server", "''"),
    ("modules.edged.cniBinDir", "/opt/cni/bin"),
    ("modules.edged.cniCacheDir", "/var/lib/cni/cache"),
    ("modules.edged.cniConfDir", "/etc/cni/net.d"),
    ("modules.edged.containerRuntime", "docker"),
    ("modules.edged.containerRuntime", "remote"),
    (
        "modules.edged.dockerEndpoint",
        "unix:///var/run/docker.sock",
    ),
    ("modules.edged.imagePullProgressDeadline", "1m0s"),
    (
        "modules.edged.kubeConfig",
        "/etc/kubeedge/config/kubeconfig",
    ),
    ("modules.edged.masterServiceNamespace", "default"),
    ("modules.edged.networkPluginMTU", "1500"),
    ("modules.edged.nodeIP", "''"),
    ("modules.edged.nonMasqueradeCidr", "10.0.0.0/8"),
    ("modules.edged.registerNode", "true"),
    (
        "modules.edged.remoteImageEndpoint",
        "unix:///var/run/dockershim.sock",
    ),
    (
        "modules.edged.remoteRuntimeEndpoint",
        "unix:///var/run/dockershim.sock",
    ),
    (
        "modules.edged.seccompProfileRoot",
        "/var/lib/kubelet/seccomp",
    ),
    ("modules.edged.seccompProfileRoot", "/var/lib/edged/seccomp"),
    ("modules.edged.windowsPriorityClass", "''"),
    ("modules.edged.windowsService", "false"),
    ("modules.edged.tailoredKubeletConfig.enableServer", "false"),
    ("modules.edged.tailoredKubeletConfig.eventBurst", "10"),
    ("modules.edged.tailoredKubeletConfig.eventRecordQPS", "5"),
    (
        "modules.edged.tailoredKubeletConfig.evictionHard",
        "{imagefs.available: 15%, memory.available: 100Mi, nodefs.available: 10%, nodefs.inodesFree: 5%}",
    ),
    (
        "modules.edged.tailoredKubeletConfig.healthzBindAddress",
        "127.0.0.1",
    ),
    ("modules.edged.tailoredKubeletConfig.healthzPort", "10248"),
    (
        "modules.edged.tailoredKubeletConfig.httpCheckFrequency",
        "20s",
    ),
    ("modules.edged.tailoredKubeletConfig.kubeAPIBurst", "10"),
    ("modules.edged.tailoredKubeletConfig.kubeAPIQPS", "5"),
    (
        "modules.edged.tailoredKubeletConfig.memoryThrottlingFactor",
        "0.8",
    ),
    (
        "modules.edged.tailoredKubeletConfig.nodeStatusMaxImages",
        "50",
    ),
    ("modules.edged.tailoredKubeletConfig.port", "10250"),
];

impl EdgeCoreConfig {
    /// The dotted keys of this config that Wedge accepts but does not act
    /// on, in file-schema order; see the module docs for which are named.
    pub fn not_implemented(&self) -> Vec<String> {
        let mut found = Vec::new();
        let user = as_value(self);
        let default = as_value(&EdgeCoreConfig::default());
        walk("", &user, Some(&default), &mut found);
        found
    }

    /// [`NOT_IMPLEMENTED_PREFIX`] and the keys of
    /// [`not_implemented`](Self::not_implemented) on one line, or `None`
    /// when every key the file sets is acted on.
    pub fn not_implemented_line(&self) -> Option<String> {
        let keys = self.not_implemented();
        (!keys.is_empty()).then(|| format!("{NOT_IMPLEMENTED_PREFIX}{}", keys.join(", ")))
    }
}

fn as_value(config: &EdgeCoreConfig) -> Value {
    // Every field is a string, number, bool, list or map: always serializable.
    serde_norway::to_value(config).unwrap_or(Value::Null)
}

/// Collects the ignored keys under `path` whose value differs from `default`.
fn walk(path: &str, user: &Value, default: Option<&Value>, found: &mut Vec<String>) {
    if let Value::Mapping(map) = user
        && !FREE_FORM.contains(&path)
    {
        if switched_off(map) {
            return;
        }
        let empty = Mapping::new();
        let defaults = match default {
            Some(Value::Mapping(d)) => d,
            _ => &empty,
        };
        for (key, value) in map {
            let Some(name) = key.as_str() else { continue };
            let child = if path.is_empty() {
                name.to_owned()
            } else {
                format!("{path}.{name}")
            };
            walk(&child, value, defaults.get(key), found);
        }
        return;
    }
    if default == Some(user) || !ignored(path) || is_kubeedge_default(path, user) {
        return;
    }
    found.push(path.to_owned());
}

/// A section with `enable: false`.
fn switched_off(map: &Mapping) -> bool {
    map.get("enable").and_then(Value::as_bool) == Some(false)
}

/// Whether the longest rule matching `path` is in [`IGNORED`].
fn ignored(path: &str) -> bool {
    let matches = |rule: &str| {
        path == rule
            || path
                .strip_prefix(rule)
                .is_some_and(|rest| rest.starts_with('.'))
    };
    let longest = |rules: &[&str]| {
        rules
            .iter()
            .filter(|rule| matches(rule))
            .map(|rule| rule.len())
            .max()
    };
    match (longest(IGNORED), longest(ACTED_ON)) {
        (Some(ignored), Some(acted)) => ignored > acted,
        (Some(_), None) => true,
        (None, _) => false,
    }
}

fn is_kubeedge_default(path: &str, user: &Value) -> bool {
    KUBEEDGE_DEFAULTS.iter().any(|(key, text)| {
        *key == path && serde_norway::from_str::<Value>(text).is_ok_and(|v| v == *user)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn listed(text: &str) -> Vec<String> {
        EdgeCoreConfig::from_yaml_str(text)
            .unwrap()
            .not_implemented()
    }

    #[test]
    fn defaults_list_nothing() {
        assert!(EdgeCoreConfig::default().not_implemented().is_empty());
        assert_eq!(EdgeCoreConfig::default().not_implemented_line(), None);
    }

    #[test]
    fn names_only_ignored_keys_with_chosen_values() {
        let keys = listed(
            "modules:\n  edgeStream: {enable: true, server: 10.0.0.1:10004}\n  edged:\n    enable: true\n    \
             tailoredKubeletConfig:\n      cpuManagerPolicy: static\n      \
             imageGCHighThresholdPercent: 90\n      kubeReserved: {cpu: 500m}\n      \
             eventRecordQPS: 5\n      logging: {verbosity: 4}\n",
        );
        assert_eq!(
            keys,
            [
                "modules.edged.tailoredKubeletConfig.cpuManagerPolicy",
                "modules.edged.tailoredKubeletConfig.kubeReserved",
                "modules.edged.tailoredKubeletConfig.logging.verbosity",
            ]
        );
    }

    #[test]
    fn switched_off_sections_say_nothing() {
        assert!(
            listed("modules:\n  edgeStream: {enable: false, server: 10.0.0.1:10004}\n").is_empty()
        );
        assert!(
            listed("modules:\n  edged:\n    tailoredKubeletConfig: {cpuManagerPolicy: static}\n")
                .is_empty(),
            "edged is off by default"
        );
    }

    #[test]
    fn legacy_keys_at_kubeedge_defaults_say_nothing() {
        let keys = listed(
            "modules:\n  edged:\n    enable: true\n    containerRuntime: remote\n    registerNode: true\n    \
             remoteRuntimeEndpoint: unix:///run/containerd/containerd.sock\n",
        );
        assert_eq!(keys, ["modules.edged.remoteRuntimeEndpoint"]);
    }

    #[test]
    fn line_is_one_line_with_the_prefix() {
        let c = EdgeCoreConfig::from_yaml_str(
            "featureGates: {requireAuthorization: true}\nmodules: {taskManager: {enable: true}}\n",
        )
        .unwrap();
        assert_eq!(
            c.not_implemented_line().unwrap(),
            "accepted, not implemented: modules.taskManager.enable, featureGates.requireAuthorization"
        );
    }
}
