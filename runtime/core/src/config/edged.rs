//! `modules.edged`: the node agent's section.
//!
//! KubeEdge v1alpha2 puts kubelet's command-line flags directly here and its
//! config file under `tailoredKubeletConfig` ([`TailoredKubeletConfig`]).
//! The flag keys are the union of KubeEdge v1.12 – v1.23; the `Option` ones
//! are keys an older release wrote that v1.23 no longer has (KubeEdge v1.23
//! ignores them, and so does Wedge, saying so at start when they are set to
//! something other than what KubeEdge wrote by default).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::duration::GoDuration;
use super::kubelet::{TailoredKubeletConfig, Taint};
use super::serde_util::null_as_default;

/// `modules.edged`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct Edged {
    /// Whether the module runs. Wedge: false by default (KubeEdge: true), so
    /// a fresh node needs no container engine.
    pub enable: bool,
    /// Report pod and node events to the cloud. v1.19+.
    pub report_event: bool,
    /// The kubelet settings (a KubeletConfiguration subset).
    #[serde(deserialize_with = "null_as_default")]
    pub tailored_kubelet_config: TailoredKubeletConfig,
    /// Node name; empty means the machine hostname, lower-cased
    /// (see [`EdgeCoreConfig::node_name`](super::EdgeCoreConfig::node_name)).
    pub hostname_override: String,
    /// The node's address; empty means the host's first address.
    #[serde(rename = "nodeIP")]
    pub node_ip: String,
    /// Cgroup of the container runtime.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub runtime_cgroups: Option<String>,
    /// Image of the pod sandbox ("pause") container; empty runs pods without
    /// sandboxes (Wedge only).
    pub pod_sandbox_image: String,
    /// kubelet root directory (pod volumes, plugins).
    pub root_directory: String,
    /// Run as a Windows service.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub windows_service: Option<bool>,
    /// Windows priority class of the process.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub windows_priority_class: Option<String>,
    /// Path of the mount helper binary.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub experimental_mounter_path: Option<String>,
    /// Leave eviction thresholds out of allocatable.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub experimental_node_allocatable_ignore_eviction_threshold: Option<bool>,
    /// Labels the Node object registers with.
    pub node_labels: BTreeMap<String, String>,
    /// A dead container younger than this is kept by container GC.
    #[serde(rename = "minimumGCAge")]
    pub minimum_gc_age: GoDuration,
    /// Max dead containers kept per pod.
    pub max_per_pod_container_count: i32,
    /// Max dead containers kept on the node; -1 = no limit.
    pub max_container_count: i32,
    /// Register the node as schedulable.
    pub register_schedulable: bool,
    /// Use the runtime's default seccomp profile (flag form).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub seccomp_default: Option<bool>,
    /// Network interface whose address is the node's.
    pub custom_interface_name: String,
    /// Namespace the Node object is registered in; a DNS-1123 label.
    pub register_node_namespace: String,
    // Flags only older KubeEdge releases have; v1.23 and Wedge ignore them.
    /// Kubeconfig path (v1.12).
    #[serde(rename = "kubeConfig", skip_serializing_if = "Option::is_none")]
    pub kube_config: Option<String>,
    /// Certificate directory (v1.12).
    #[serde(rename = "certDirectory", skip_serializing_if = "Option::is_none")]
    pub cert_directory: Option<String>,
    /// Kubelet config file (v1.12).
    #[serde(rename = "kubeletConfigFile", skip_serializing_if = "Option::is_none")]
    pub kubelet_config_file: Option<String>,
    /// Lock file (v1.12).
    #[serde(rename = "lockFilePath", skip_serializing_if = "Option::is_none")]
    pub lock_file_path: Option<String>,
    /// Exit when the lock file is contended (v1.12).
    #[serde(
        rename = "exitOnLockContention",
        skip_serializing_if = "Option::is_none"
    )]
    pub exit_on_lock_contention: Option<bool>,
    /// Credential provider config (v1.12).
    #[serde(
        rename = "imageCredentialProviderConfigFile",
        skip_serializing_if = "Option::is_none"
    )]
    pub image_credential_provider_config_file: Option<String>,
    /// Credential provider binaries (v1.12).
    #[serde(
        rename = "imageCredentialProviderBinDir",
        skip_serializing_if = "Option::is_none"
    )]
    pub image_credential_provider_bin_dir: Option<String>,
    /// `docker` or `remote` (v1.12 – v1.17).
    #[serde(rename = "containerRuntime", skip_serializing_if = "Option::is_none")]
    pub container_runtime: Option<String>,
    /// dockershim state (v1.12 – v1.13).
    #[serde(
        rename = "dockershimRootDirectory",
        skip_serializing_if = "Option::is_none"
    )]
    pub dockershim_root_directory: Option<String>,
    /// Docker socket of dockershim (v1.12 – v1.13).
    #[serde(rename = "dockerEndpoint", skip_serializing_if = "Option::is_none")]
    pub docker_endpoint: Option<String>,
    /// Pull stall timeout of dockershim (v1.12 – v1.13).
    #[serde(
        rename = "imagePullProgressDeadline",
        skip_serializing_if = "Option::is_none"
    )]
    pub image_pull_progress_deadline: Option<GoDuration>,
    /// dockershim network plugin (v1.12 – v1.13).
    #[serde(rename = "networkPluginName", skip_serializing_if = "Option::is_none")]
    pub network_plugin_name: Option<String>,
    /// dockershim network MTU (v1.12 – v1.13).
    #[serde(rename = "networkPluginMTU", skip_serializing_if = "Option::is_none")]
    pub network_plugin_mtu: Option<i32>,
    /// CNI config directory (v1.12 – v1.13).
    #[serde(rename = "cniConfDir", skip_serializing_if = "Option::is_none")]
    pub cni_conf_dir: Option<String>,
    /// CNI plugin directory (v1.12 – v1.13).
    #[serde(rename = "cniBinDir", skip_serializing_if = "Option::is_none")]
    pub cni_bin_dir: Option<String>,
    /// CNI cache directory (v1.12 – v1.13).
    #[serde(rename = "cniCacheDir", skip_serializing_if = "Option::is_none")]
    pub cni_cache_dir: Option<String>,
    /// Register the Node object (v1.12 – v1.17; `tailoredKubeletConfig.registerNode` since v1.13, the one v1.23 reads).
    #[serde(rename = "registerNode", skip_serializing_if = "Option::is_none")]
    pub register_node: Option<bool>,
    /// Taints at registration (v1.12 – v1.17; `tailoredKubeletConfig.registerWithTaints` since v1.13).
    #[serde(rename = "registerWithTaints", skip_serializing_if = "Option::is_none")]
    pub register_with_taints: Option<Vec<Taint>>,
    /// CRI endpoint (v1.12 – v1.17; `tailoredKubeletConfig.containerRuntimeEndpoint` since v1.16, the one v1.23 reads).
    #[serde(
        rename = "remoteRuntimeEndpoint",
        skip_serializing_if = "Option::is_none"
    )]
    pub remote_runtime_endpoint: Option<String>,
    /// CRI image endpoint (v1.12 – v1.17; `tailoredKubeletConfig.imageServiceEndpoint` since v1.16).
    #[serde(
        rename = "remoteImageEndpoint",
        skip_serializing_if = "Option::is_none"
    )]
    pub remote_image_endpoint: Option<String>,
    /// Check mount utilities first (v1.12 – v1.13).
    #[serde(
        rename = "experimentalCheckNodeCapabilitiesBeforeMount",
        skip_serializing_if = "Option::is_none"
    )]
    pub experimental_check_node_capabilities_before_mount: Option<bool>,
    /// Namespace of the master service (v1.12 – v1.17).
    #[serde(
        rename = "masterServiceNamespace",
        skip_serializing_if = "Option::is_none"
    )]
    pub master_service_namespace: Option<String>,
    /// Seccomp profile directory (v1.12 – v1.13).
    #[serde(rename = "seccompProfileRoot", skip_serializing_if = "Option::is_none")]
    pub seccomp_profile_root: Option<String>,
    /// Traffic not masqueraded (v1.12 – v1.13).
    #[serde(rename = "nonMasqueradeCidr", skip_serializing_if = "Option::is_none")]
    pub non_masquerade_cidr: Option<String>,
    /// Keep volumes of ended pods (v1.12 – v1.21).
    #[serde(
        rename = "keepTerminatedPodVolumes",
        skip_serializing_if = "Option::is_none"
    )]
    pub keep_terminated_pod_volumes: Option<bool>,
}

impl Default for Edged {
    fn default() -> Self {
        Self {
            enable: false,
            report_event: false,
            tailored_kubelet_config: TailoredKubeletConfig::default(),
            hostname_override: String::new(),
            node_ip: String::new(),
            runtime_cgroups: None,
            pod_sandbox_image: "kubeedge/pause:3.6".to_owned(),
            root_directory: "/var/lib/kubelet".to_owned(),
            windows_service: None,
            windows_priority_class: None,
            experimental_mounter_path: None,
            experimental_node_allocatable_ignore_eviction_threshold: None,
            node_labels: BTreeMap::new(),
            minimum_gc_age: GoDuration::ZERO,
            max_per_pod_container_count: 1,
            max_container_count: -1,
            register_schedulable: true,
            seccomp_default: None,
            custom_interface_name: String::new(),
            register_node_namespace: "default".to_owned(),
            kube_config: None,
            cert_directory: None,
            kubelet_config_file: None,
            lock_file_path: None,
            exit_on_lock_contention: None,
            image_credential_provider_config_file: None,
            image_credential_provider_bin_dir: None,
            container_runtime: None,
            dockershim_root_directory: None,
            docker_endpoint: None,
            image_pull_progress_deadline: None,
            network_plugin_name: None,
            network_plugin_mtu: None,
            cni_conf_dir: None,
            cni_bin_dir: None,
            cni_cache_dir: None,
            register_node: None,
            register_with_taints: None,
            remote_runtime_endpoint: None,
            remote_image_endpoint: None,
            experimental_check_node_capabilities_before_mount: None,
            master_service_namespace: None,
            seccomp_profile_root: None,
            non_masquerade_cidr: None,
            keep_terminated_pod_volumes: None,
        }
    }
}
