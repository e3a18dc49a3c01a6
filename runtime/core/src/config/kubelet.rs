//! `modules.edged.tailoredKubeletConfig`: the kubelet settings KubeEdge's
//! edged takes from a KubeletConfiguration subset.
//!
//! The key set is the union of what KubeEdge v1.12 – v1.23 accept there
//! (their JSON names). v1.12 embedded the whole upstream KubeletConfiguration
//! of Kubernetes 1.22; v1.13 replaced it with KubeEdge's own subset, which
//! later releases grew. Keys are kept even when a later release dropped them,
//! so a file written by any of those releases loads; keys that no release had
//! stay errors. The defaults are those `edgecore --defaultconfig` of v1.23.1
//! prints, except the container runtime endpoints, which are Wedge's (Docker).
//!
//! Which keys Wedge acts on is decided in one place, [`super::compat`];
//! the effective values edged uses are [`KubeletSettings`], from
//! [`EdgeCoreConfig::kubelet`](super::EdgeCoreConfig::kubelet).

use std::collections::BTreeMap;

use super::duration::GoDuration;
use super::optional::optional_section;
use super::quantity::Quantity;

/// Where kubelet serves its read-only API; KubeEdge's edged listens here for
/// the cloud's stream server (`address`).
pub const DEFAULT_ADDRESS: &str = "127.0.0.1";
/// KubeEdge's edged read-only port (kubelet's is 10255).
pub const DEFAULT_READ_ONLY_PORT: i32 = 10350;
/// Kubernetes' default cluster domain.
pub const DEFAULT_CLUSTER_DOMAIN: &str = "cluster.local";
/// Kubelet's default `resolvConf`: the host's resolver configuration is pods' base.
pub const DEFAULT_RESOLV_CONF: &str = "/etc/resolv.conf";
/// Kubelet's default: compare the node status this often.
pub const DEFAULT_NODE_STATUS_UPDATE_FREQUENCY: GoDuration = GoDuration::from_secs(10);
/// Kubelet's default: send the node status at least this often.
pub const DEFAULT_NODE_STATUS_REPORT_FREQUENCY: GoDuration = GoDuration::from_secs(300);
/// Kubelet's default node lease duration, in seconds.
pub const DEFAULT_NODE_LEASE_DURATION_SECONDS: i32 = 40;
/// Kubelet's default: an image younger than this is never collected.
pub const DEFAULT_IMAGE_MINIMUM_GC_AGE: GoDuration = GoDuration::from_secs(120);
/// Kubelet's default disk usage percent that starts image GC.
pub const DEFAULT_IMAGE_GC_HIGH_THRESHOLD_PERCENT: i32 = 85;
/// Kubelet's default disk usage percent image GC frees down to.
pub const DEFAULT_IMAGE_GC_LOW_THRESHOLD_PERCENT: i32 = 80;
/// Kubelet's default pod capacity.
pub const DEFAULT_MAX_PODS: i32 = 110;
/// Wedge's container engine socket: edged talks to Docker (`DOCKER_HOST`,
/// else this socket), so this is the default instead of KubeEdge's containerd.
pub const DEFAULT_RUNTIME_ENDPOINT: &str = "unix:///var/run/docker.sock";
/// KubeEdge's static pod directory.
pub const DEFAULT_STATIC_POD_PATH: &str = "/etc/kubeedge/manifests";
/// Kubelet's default: read the static pod directory this often.
pub const DEFAULT_FILE_CHECK_FREQUENCY: GoDuration = GoDuration::from_secs(20);

/// Kubelet's default hard eviction thresholds (Kubernetes 1.32, KubeEdge v1.23).
pub(crate) fn default_eviction_hard() -> BTreeMap<String, String> {
    [
        ("imagefs.available", "15%"),
        ("imagefs.inodesFree", "5%"),
        ("memory.available", "100Mi"),
        ("nodefs.available", "10%"),
        ("nodefs.inodesFree", "5%"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect()
}

optional_section! {
    /// `modules.edged.tailoredKubeletConfig`. Each key is `None` when the file
    /// leaves it out and KubeEdge has no default for it.
    pub struct TailoredKubeletConfig {
        /// Directory of static pod manifests. v1.12, v1.15+.
        static_pod_path: String = DEFAULT_STATIC_POD_PATH,
        /// Where container logs are linked. v1.20+.
        pod_logs_dir: String = "/var/log/pods",
        /// Period of the full pod resync.
        sync_frequency: GoDuration = GoDuration::from_secs(60),
        /// Period of the static pod directory check. v1.12, v1.17+.
        file_check_frequency: GoDuration = DEFAULT_FILE_CHECK_FREQUENCY,
        /// Address of the node's read-only server.
        address: String = DEFAULT_ADDRESS,
        /// Port of the node's read-only server; 0 disables it.
        read_only_port: i32 = DEFAULT_READ_ONLY_PORT,
        /// Image pull rate limit (pulls per second).
        #[serde(rename = "registryPullQPS")]
        registry_pull_qps: i32 = 5,
        /// Burst of `registryPullQPS`.
        registry_burst: i32 = 10,
        /// Event rate limit (events per second).
        #[serde(rename = "eventRecordQPS")]
        event_record_qps: i32 = 50,
        /// Burst of `eventRecordQPS`.
        event_burst: i32 = 100,
        /// Serve logs, exec and port-forward.
        enable_debugging_handlers: bool = true,
        /// Lock contention profiling.
        enable_contention_profiling: bool,
        /// oom_score_adj of the node agent.
        oom_score_adj: i32 = -999,
        /// DNS domain of the cluster, appended to pods' search list.
        cluster_domain: String = DEFAULT_CLUSTER_DOMAIN,
        /// DNS server IPs given to pods.
        #[serde(rename = "clusterDNS")]
        cluster_dns: Vec<String>,
        /// Idle timeout of streaming connections.
        streaming_connection_idle_timeout: GoDuration = GoDuration::from_secs(4 * 3600),
        /// How often the node status is computed and sent when changed.
        node_status_update_frequency: GoDuration = DEFAULT_NODE_STATUS_UPDATE_FREQUENCY,
        /// How often the node status is sent when unchanged.
        node_status_report_frequency: GoDuration = DEFAULT_NODE_STATUS_REPORT_FREQUENCY,
        /// Duration of the node lease, in seconds.
        node_lease_duration_seconds: i32 = DEFAULT_NODE_LEASE_DURATION_SECONDS,
        /// An unused image younger than this is not collected.
        #[serde(rename = "imageMinimumGCAge")]
        image_minimum_gc_age: GoDuration = DEFAULT_IMAGE_MINIMUM_GC_AGE,
        /// An unused image older than this is collected; 0s disables. v1.18+.
        #[serde(rename = "imageMaximumGCAge")]
        image_maximum_gc_age: GoDuration = GoDuration::ZERO,
        /// Disk usage percent that starts image GC.
        #[serde(rename = "imageGCHighThresholdPercent")]
        image_gc_high_threshold_percent: i32 = DEFAULT_IMAGE_GC_HIGH_THRESHOLD_PERCENT,
        /// Disk usage percent image GC frees down to.
        #[serde(rename = "imageGCLowThresholdPercent")]
        image_gc_low_threshold_percent: i32 = DEFAULT_IMAGE_GC_LOW_THRESHOLD_PERCENT,
        /// Period of volume usage statistics.
        volume_stats_agg_period: GoDuration = GoDuration::from_secs(60),
        /// Cgroup of the node agent.
        kubelet_cgroups: String,
        /// Cgroup of non-pod system processes.
        system_cgroups: String,
        /// Root cgroup of pods.
        cgroup_root: String,
        /// Create QoS cgroups.
        #[serde(rename = "cgroupsPerQOS")]
        cgroups_per_qos: bool = true,
        /// `cgroupfs` or `systemd`; must match the container runtime.
        cgroup_driver: String = "cgroupfs",
        /// Kill a whole container, not one process, on OOM. v1.23+.
        #[serde(rename = "singleProcessOOMKill")]
        single_process_oom_kill: bool,
        /// CPU manager policy.
        cpu_manager_policy: String = "none",
        /// CPU manager policy options.
        cpu_manager_policy_options: BTreeMap<String, String>,
        /// CPU manager reconcile period.
        cpu_manager_reconcile_period: GoDuration = GoDuration::from_secs(10),
        /// Memory manager policy.
        memory_manager_policy: String = "None",
        /// Topology manager policy.
        topology_manager_policy: String = "none",
        /// Topology manager scope.
        topology_manager_scope: String = "container",
        /// Topology manager policy options. v1.16+.
        topology_manager_policy_options: BTreeMap<String, String>,
        /// Resources reserved per QoS class.
        qos_reserved: BTreeMap<String, String>,
        /// Timeout of container runtime calls.
        runtime_request_timeout: GoDuration = GoDuration::from_secs(120),
        /// How hairpin traffic is set up.
        hairpin_mode: String = "promiscuous-bridge",
        /// Most pods the node runs.
        max_pods: i32 = DEFAULT_MAX_PODS,
        /// Pod CIDR of the node.
        #[serde(rename = "podCIDR")]
        pod_cidr: String,
        /// Most PIDs per pod; -1 = no limit.
        pod_pids_limit: i64 = -1_i64,
        /// resolv.conf given to pods as the base of their DNS.
        resolv_conf: String = DEFAULT_RESOLV_CONF,
        /// Enforce CPU limits with CFS quota.
        #[serde(rename = "cpuCFSQuota")]
        cpu_cfs_quota: bool = true,
        /// CFS quota period.
        #[serde(rename = "cpuCFSQuotaPeriod")]
        cpu_cfs_quota_period: GoDuration = GoDuration::from_millis(100),
        /// Images listed in the node status; 0 = none.
        node_status_max_images: i32 = 0,
        /// Open files limit of the node agent.
        max_open_files: i64 = 1_000_000_i64,
        /// Content type of API requests.
        content_type: String = "application/json",
        /// Pull images one at a time.
        serialize_image_pulls: bool = true,
        /// Most parallel image pulls. v1.16+.
        max_parallel_image_pulls: i32,
        /// Hard eviction thresholds, signal -> quantity or percent.
        eviction_hard: BTreeMap<String, String> = default_eviction_hard(),
        /// Soft eviction thresholds.
        eviction_soft: BTreeMap<String, String>,
        /// Grace periods of the soft thresholds.
        eviction_soft_grace_period: BTreeMap<String, String>,
        /// How long a pressure condition stays after it ends.
        eviction_pressure_transition_period: GoDuration = GoDuration::from_secs(300),
        /// Longest grace period of a pod evicted under soft thresholds.
        eviction_max_pod_grace_period: i32,
        /// Least amount reclaimed per eviction.
        eviction_minimum_reclaim: BTreeMap<String, String>,
        /// Most pods per CPU core.
        pods_per_core: i32,
        /// Let the attach/detach controller manage volumes.
        enable_controller_attach_detach: bool = true,
        /// Fail when kernel tunables differ from kubelet's.
        protect_kernel_defaults: bool,
        /// Create iptables utility chains.
        #[serde(rename = "makeIPTablesUtilChains")]
        make_iptables_util_chains: bool = true,
        /// fwmark bit for SNAT.
        iptables_masquerade_bit: i32 = 14,
        /// fwmark bit for dropped packets.
        iptables_drop_bit: i32 = 15,
        /// Kubelet feature gates.
        feature_gates: BTreeMap<String, bool>,
        /// Refuse to start with swap on.
        fail_swap_on: bool = false,
        /// Swap use of workloads.
        memory_swap: MemorySwap = MemorySwap::default(),
        /// Size at which a container log is rotated.
        container_log_max_size: String = "10Mi",
        /// Rotated container log files kept.
        container_log_max_files: i32 = 5,
        /// Workers rotating container logs. v1.20+.
        container_log_max_workers: i32 = 1,
        /// Period of the container log check. v1.20+.
        container_log_monitor_interval: GoDuration = GoDuration::from_secs(10),
        /// How ConfigMaps and Secrets are kept fresh.
        config_map_and_secret_change_detection_strategy: String = "Get",
        /// Resources reserved for the system.
        system_reserved: BTreeMap<String, String>,
        /// Resources reserved for Kubernetes daemons.
        kube_reserved: BTreeMap<String, String>,
        /// CPUs reserved for the system.
        #[serde(rename = "reservedSystemCPUs")]
        reserved_system_cpus: String,
        /// Previous version whose hidden metrics are shown.
        show_hidden_metrics_for_version: String,
        /// Cgroup of `systemReserved`.
        system_reserved_cgroup: String,
        /// Cgroup of `kubeReserved`.
        kube_reserved_cgroup: String,
        /// Which allocatable limits are enforced.
        enforce_node_allocatable: Vec<String> = vec!["pods".to_owned()],
        /// Unsafe sysctls pods may set.
        allowed_unsafe_sysctls: Vec<String>,
        /// Directory of flex volume plugins.
        volume_plugin_dir: String = "/usr/libexec/kubernetes/kubelet-plugins/volume/exec/",
        /// Use kernel memcg notifications for eviction.
        kernel_memcg_notification: bool,
        /// Log format and verbosity of the node agent.
        logging: Logging = Logging::default(),
        /// Serve /logs.
        enable_system_log_handler: bool = true,
        /// Serve node log queries. v1.16+.
        enable_system_log_query: bool,
        /// How long node shutdown is delayed for pods.
        shutdown_grace_period: GoDuration = GoDuration::ZERO,
        /// Part of `shutdownGracePeriod` kept for critical pods.
        shutdown_grace_period_critical_pods: GoDuration = GoDuration::ZERO,
        /// Shutdown grace periods by pod priority. v1.13+.
        shutdown_grace_period_by_pod_priority: Vec<ShutdownGracePeriodByPodPriority>,
        /// Container restart back-off limits. v1.23+.
        crash_loop_back_off: CrashLoopBackOff = CrashLoopBackOff::default(),
        /// Memory reserved per NUMA node.
        reserved_memory: Vec<MemoryReservation>,
        /// Serve /debug/pprof.
        enable_profiling_handler: bool = true,
        /// Serve /debug/flags/v.
        enable_debug_flags_handler: bool = true,
        /// Use the runtime's default seccomp profile.
        seccomp_default: bool = false,
        /// Memory throttling factor of memory QoS.
        memory_throttling_factor: f64 = 0.9,
        /// Taints the node registers with. v1.13+.
        register_with_taints: Vec<Taint>,
        /// Register the Node object with the cloud. v1.13+.
        register_node: bool = true,
        /// Local ephemeral storage isolation. v1.16+.
        local_storage_capacity_isolation: bool = true,
        /// CRI endpoint of the container runtime. v1.16+. Wedge's default is
        /// the Docker socket it uses.
        container_runtime_endpoint: String = DEFAULT_RUNTIME_ENDPOINT,
        /// CRI endpoint of the image service. v1.16+.
        image_service_endpoint: String = DEFAULT_RUNTIME_ENDPOINT,
        /// Refuse to start on cgroup v1. v1.22+.
        #[serde(rename = "failCgroupV1")]
        fail_cgroup_v1: bool = false,
        // Keys of v1.12 only (the full upstream KubeletConfiguration).
        /// Object kind (v1.12).
        kind: String,
        /// Object API version (v1.12).
        api_version: String,
        /// Run the secured server (v1.12).
        enable_server: bool,
        /// Period of the static pod URL check (v1.12).
        http_check_frequency: GoDuration,
        /// URL of static pod manifests (v1.12).
        #[serde(rename = "staticPodURL")]
        static_pod_url: String,
        /// Headers of `staticPodURL` requests (v1.12).
        #[serde(rename = "staticPodURLHeader")]
        static_pod_url_header: BTreeMap<String, Vec<String>>,
        /// Port of the secured server (v1.12).
        port: i32,
        /// Serving certificate (v1.12).
        tls_cert_file: String,
        /// Serving key (v1.12).
        tls_private_key_file: String,
        /// TLS cipher suites (v1.12).
        tls_cipher_suites: Vec<String>,
        /// Minimum TLS version (v1.12).
        tls_min_version: String,
        /// Rotate the client certificate (v1.12).
        rotate_certificates: bool,
        /// Bootstrap the serving certificate (v1.12).
        #[serde(rename = "serverTLSBootstrap")]
        server_tls_bootstrap: bool,
        /// Authentication of the secured server (v1.12).
        authentication: KubeletAuthentication,
        /// Authorization of the secured server (v1.12).
        authorization: KubeletAuthorization,
        /// Port of the healthz server (v1.12).
        healthz_port: i32,
        /// Address of the healthz server (v1.12).
        healthz_bind_address: String,
        /// Run once and exit (v1.12).
        run_once: bool,
        /// API request rate (v1.12).
        #[serde(rename = "kubeAPIQPS")]
        kube_api_qps: i32,
        /// API request burst (v1.12).
        #[serde(rename = "kubeAPIBurst")]
        kube_api_burst: i32,
        /// Cloud provider id of the node (v1.12).
        #[serde(rename = "providerID")]
        provider_id: String,
    }
}

optional_section! {
    /// `memorySwap`.
    pub struct MemorySwap {
        /// `LimitedSwap`, `UnlimitedSwap` or `NoSwap`.
        swap_behavior: String,
    }
}

optional_section! {
    /// `crashLoopBackOff` (v1.23+).
    pub struct CrashLoopBackOff {
        /// Longest container restart back-off.
        max_container_restart_period: GoDuration,
    }
}

optional_section! {
    /// One `shutdownGracePeriodByPodPriority` entry.
    pub struct ShutdownGracePeriodByPodPriority {
        /// Lowest priority of the class.
        priority: i32,
        /// Grace period of the class, in seconds.
        shutdown_grace_period_seconds: i64,
    }
}

optional_section! {
    /// One `reservedMemory` entry.
    pub struct MemoryReservation {
        /// NUMA node id.
        numa_node: i32,
        /// Resource name -> quantity.
        limits: BTreeMap<String, Quantity>,
    }
}

optional_section! {
    /// One `registerWithTaints` entry (a Kubernetes Taint).
    pub struct Taint {
        /// Taint key.
        key: String,
        /// Taint value.
        value: String,
        /// `NoSchedule`, `PreferNoSchedule` or `NoExecute`.
        effect: String,
        /// When the taint was added (RFC 3339).
        time_added: String,
    }
}

optional_section! {
    /// `logging`: the node agent's log settings (component-base).
    pub struct Logging {
        /// `text` or `json`.
        format: String = "text",
        /// Period of log flushes. v1.13+.
        flush_frequency: GoDuration = GoDuration::from_secs(5),
        /// Verbosity. v1.13+.
        verbosity: u32 = 0_u32,
        /// Per-file verbosity. v1.13+.
        vmodule: Vec<VModuleItem>,
        /// Per-format options. v1.13+.
        options: LoggingOptions = LoggingOptions::default(),
        /// Hide sensitive fields (v1.12 – v1.13).
        sanitization: bool,
    }
}

optional_section! {
    /// One `logging.vmodule` entry.
    pub struct VModuleItem {
        /// File name pattern.
        file_pattern: String,
        /// Verbosity for matching files.
        verbosity: u32,
    }
}

optional_section! {
    /// `logging.options`.
    pub struct LoggingOptions {
        /// JSON format options.
        json: LogOutputOptions = LogOutputOptions::default(),
        /// Text format options. v1.20+.
        text: LogOutputOptions = LogOutputOptions::default(),
    }
}

optional_section! {
    /// `logging.options.json` and `logging.options.text`.
    pub struct LogOutputOptions {
        /// Info messages to stdout, errors to stderr.
        split_stream: bool,
        /// Buffer size of info messages.
        info_buffer_size: Quantity = Quantity::from("0"),
    }
}

optional_section! {
    /// `authentication` (v1.12).
    pub struct KubeletAuthentication {
        /// Client certificate authentication.
        x509: KubeletX509Authentication,
        /// Token review authentication.
        webhook: KubeletWebhookAuthentication,
        /// Anonymous requests.
        anonymous: KubeletAnonymousAuthentication,
    }
}

optional_section! {
    /// `authentication.x509` (v1.12).
    pub struct KubeletX509Authentication {
        /// CA of client certificates.
        #[serde(rename = "clientCAFile")]
        client_ca_file: String,
    }
}

optional_section! {
    /// `authentication.webhook` (v1.12).
    pub struct KubeletWebhookAuthentication {
        /// Use token review.
        enabled: bool,
        /// Cache time of reviews.
        #[serde(rename = "cacheTTL")]
        cache_ttl: GoDuration,
    }
}

optional_section! {
    /// `authentication.anonymous` (v1.12).
    pub struct KubeletAnonymousAuthentication {
        /// Allow anonymous requests.
        enabled: bool,
    }
}

optional_section! {
    /// `authorization` (v1.12).
    pub struct KubeletAuthorization {
        /// `AlwaysAllow` or `Webhook`.
        mode: String,
        /// Webhook authorization.
        webhook: KubeletWebhookAuthorization,
    }
}

optional_section! {
    /// `authorization.webhook` (v1.12).
    pub struct KubeletWebhookAuthorization {
        /// Cache time of allowed requests.
        #[serde(rename = "cacheAuthorizedTTL")]
        cache_authorized_ttl: GoDuration,
        /// Cache time of denied requests.
        #[serde(rename = "cacheUnauthorizedTTL")]
        cache_unauthorized_ttl: GoDuration,
    }
}
