//! The kubelet values edged runs with, resolved from `modules.edged` and
//! `modules.edged.tailoredKubeletConfig` the way KubeEdge v1.23 resolves them.
//!
//! KubeEdge v1.23 reads kubelet settings only from `tailoredKubeletConfig`
//! (plus the flag keys it still has directly under `modules.edged`). Flag
//! keys of older releases that moved into `tailoredKubeletConfig`
//! (`registerNode`, `remoteRuntimeEndpoint`, ...) are not read by v1.23 even
//! when present, and not here either: the tailored key, or its default, wins.

use super::duration::GoDuration;
use std::collections::BTreeMap;
use std::net::IpAddr;
use std::time::Duration;

use super::kubelet::{
    DEFAULT_ADDRESS, DEFAULT_CLUSTER_DOMAIN, DEFAULT_FILE_CHECK_FREQUENCY,
    DEFAULT_IMAGE_GC_HIGH_THRESHOLD_PERCENT, DEFAULT_IMAGE_GC_LOW_THRESHOLD_PERCENT,
    DEFAULT_IMAGE_MINIMUM_GC_AGE, DEFAULT_MAX_PODS, DEFAULT_NODE_LEASE_DURATION_SECONDS,
    DEFAULT_NODE_STATUS_REPORT_FREQUENCY, DEFAULT_NODE_STATUS_UPDATE_FREQUENCY,
    DEFAULT_READ_ONLY_PORT, DEFAULT_RESOLV_CONF, DEFAULT_RUNTIME_ENDPOINT, DEFAULT_STATIC_POD_PATH,
};
use super::model::EdgeCoreConfig;

/// Effective kubelet settings, every value resolved (the file's, else
/// KubeEdge's default). Validation has checked ranges, so the conversions
/// here never need to fail.
#[derive(Debug, Clone, PartialEq)]
pub struct KubeletSettings {
    /// `nodeStatusUpdateFrequency`: how often the node status is computed and
    /// sent when it changed (10 s).
    pub node_status_update_frequency: Duration,
    /// `nodeStatusReportFrequency`: the node status is sent at least this
    /// often even unchanged (5 min).
    pub node_status_report_frequency: Duration,
    /// `nodeLeaseDurationSeconds`: the node lease's duration (40 s); kubelet
    /// renews it every quarter of that.
    pub node_lease_duration: Duration,
    /// `address`: where the read-only server listens (127.0.0.1).
    pub address: String,
    /// `readOnlyPort`: the read-only server's port, also the kubelet endpoint
    /// the node reports to the cloud (10350 in KubeEdge); 0 = none.
    pub read_only_port: u16,
    /// `maxPods`: the node's pod capacity (110).
    pub max_pods: u32,
    /// `clusterDNS`: DNS servers given to pods (none by default).
    pub cluster_dns: Vec<IpAddr>,
    /// `clusterDomain`: the cluster's DNS domain (`cluster.local`).
    pub cluster_domain: String,
    /// `resolvConf`: the node's resolver configuration, the base of pods' DNS
    /// (`/etc/resolv.conf`); empty for none.
    pub resolv_conf: String,
    /// `registerNode`: whether the Node object is registered (true).
    pub register_node: bool,
    /// `imageGCHighThresholdPercent`: disk usage that starts image GC (85).
    pub image_gc_high_threshold_percent: u8,
    /// `imageGCLowThresholdPercent`: disk usage image GC frees down to (80).
    pub image_gc_low_threshold_percent: u8,
    /// `imageMinimumGCAge`: an unused image younger than this stays (2 min).
    pub image_minimum_gc_age: Duration,
    /// `imageMaximumGCAge`: an unused image older than this goes whatever the
    /// disk usage; `None` (KubeEdge's `0s`) disables it.
    pub image_maximum_gc_age: Option<Duration>,
    /// `evictionHard`: hard eviction thresholds, signal -> quantity or percent.
    pub eviction_hard: BTreeMap<String, String>,
    /// `containerRuntimeEndpoint`: the runtime's endpoint (Wedge's default is
    /// the Docker socket it uses).
    pub container_runtime_endpoint: String,
    /// `cgroupDriver`: `cgroupfs` or `systemd`.
    pub cgroup_driver: String,
    /// `staticPodPath`: KubeEdge's static pod directory.
    pub static_pod_path: String,
    /// `fileCheckFrequency`: how often the static pod directory is read (20 s).
    pub file_check_frequency: Duration,
    /// `runtimeRequestTimeout`: the deadline of container runtime listings (2 min).
    pub runtime_request_timeout: Duration,
    /// `eventRecordQPS`: pod events sent per second at most (50; 0: no limit).
    pub event_record_qps: i32,
    /// `eventBurst`: pod events sent at once at most (100).
    pub event_burst: i32,
    /// `modules.edged.nodeIP`: the node's address; `None` = the host's first.
    pub node_ip: Option<IpAddr>,
    /// `containerLogMaxSize`: a CRI container log this large is rotated (`10Mi`).
    pub container_log_max_size: String,
    /// `containerLogMaxFiles`: log files kept per container, the current one included (5).
    pub container_log_max_files: i32,
    /// `containerLogMonitorInterval`: how often container logs are checked (10 s).
    pub container_log_monitor_interval: Duration,
    /// `seccompDefault` (or the flag form `modules.edged.seccompDefault`, which wins when
    /// given): containers that name no seccomp profile get the runtime's default (false:
    /// they run unconfined, as under kubelet).
    pub seccomp_default: bool,
    /// `modules.edged.minimumGCAge`: a dead container younger than this stays.
    pub minimum_gc_age: Duration,
    /// `modules.edged.nodeLabels`: labels of the registered Node.
    pub node_labels: BTreeMap<String, String>,
    /// The eviction policy (`evictionHard`, `evictionSoft`, ...); validation has checked it,
    /// so a problem here only comes from a config that skipped validation, and leaves the
    /// policy without the keys in question.
    pub eviction: super::eviction::EvictionPolicy,
}

/// `value` in `0..=max` (validation guarantees it; out of range is clamped).
fn bounded<T: TryFrom<i64> + Copy>(value: i64, max: T) -> T {
    T::try_from(value.max(0)).unwrap_or(max)
}

impl EdgeCoreConfig {
    /// The kubelet settings edged runs with, KubeEdge's defaults filling
    /// every key the file leaves out.
    pub fn kubelet(&self) -> KubeletSettings {
        let edged = &self.modules.edged;
        let k = &edged.tailored_kubelet_config;
        let text =
            |v: &Option<String>, default: &str| v.clone().unwrap_or_else(|| default.to_owned());
        let lease_secs = k
            .node_lease_duration_seconds
            .unwrap_or(DEFAULT_NODE_LEASE_DURATION_SECONDS);
        let max_age = k.image_maximum_gc_age.unwrap_or_default();
        KubeletSettings {
            node_status_update_frequency: k
                .node_status_update_frequency
                .unwrap_or(DEFAULT_NODE_STATUS_UPDATE_FREQUENCY)
                .to_std(),
            node_status_report_frequency: k
                .node_status_report_frequency
                .unwrap_or(DEFAULT_NODE_STATUS_REPORT_FREQUENCY)
                .to_std(),
            node_lease_duration: Duration::from_secs(bounded(i64::from(lease_secs), u64::MAX)),
            address: text(&k.address, DEFAULT_ADDRESS),
            read_only_port: bounded(
                i64::from(k.read_only_port.unwrap_or(DEFAULT_READ_ONLY_PORT)),
                u16::MAX,
            ),
            max_pods: bounded(i64::from(k.max_pods.unwrap_or(DEFAULT_MAX_PODS)), u32::MAX),
            cluster_dns: k
                .cluster_dns
                .iter()
                .flatten()
                .filter_map(|ip| ip.parse().ok())
                .collect(),
            cluster_domain: text(&k.cluster_domain, DEFAULT_CLUSTER_DOMAIN),
            resolv_conf: text(&k.resolv_conf, DEFAULT_RESOLV_CONF),
            register_node: k.register_node.unwrap_or(true),
            image_gc_high_threshold_percent: bounded(
                i64::from(
                    k.image_gc_high_threshold_percent
                        .unwrap_or(DEFAULT_IMAGE_GC_HIGH_THRESHOLD_PERCENT),
                ),
                100,
            ),
            image_gc_low_threshold_percent: bounded(
                i64::from(
                    k.image_gc_low_threshold_percent
                        .unwrap_or(DEFAULT_IMAGE_GC_LOW_THRESHOLD_PERCENT),
                ),
                100,
            ),
            image_minimum_gc_age: k
                .image_minimum_gc_age
                .unwrap_or(DEFAULT_IMAGE_MINIMUM_GC_AGE)
                .to_std(),
            image_maximum_gc_age: (max_age.as_nanos() > 0).then(|| max_age.to_std()),
            container_log_max_size: text(&k.container_log_max_size, "10Mi"),
            container_log_max_files: k.container_log_max_files.unwrap_or(5),
            container_log_monitor_interval: k
                .container_log_monitor_interval
                .unwrap_or(GoDuration::from_secs(10))
                .to_std(),
            seccomp_default: edged.seccomp_default.or(k.seccomp_default).unwrap_or(false),
            // Unset (`evictionHard: null`) means kubelet's defaults, as for every other key;
            // only an explicit `{}` turns hard eviction off. It meant none before, and
            // `wedge config print` turned that into the defaults (found by fuzzing).
            eviction_hard: k
                .eviction_hard
                .clone()
                .unwrap_or_else(super::kubelet::default_eviction_hard),
            container_runtime_endpoint: text(
                &k.container_runtime_endpoint,
                DEFAULT_RUNTIME_ENDPOINT,
            ),
            cgroup_driver: text(&k.cgroup_driver, "cgroupfs"),
            static_pod_path: text(&k.static_pod_path, DEFAULT_STATIC_POD_PATH),
            file_check_frequency: k
                .file_check_frequency
                .unwrap_or(DEFAULT_FILE_CHECK_FREQUENCY)
                .to_std(),
            runtime_request_timeout: k
                .runtime_request_timeout
                .unwrap_or(GoDuration::from_secs(120))
                .to_std(),
            event_record_qps: k.event_record_qps.unwrap_or(50),
            event_burst: k.event_burst.unwrap_or(100),
            node_ip: edged.node_ip.parse().ok(),
            minimum_gc_age: edged.minimum_gc_age.to_std(),
            node_labels: edged.node_labels.clone(),
            eviction: super::eviction::EvictionPolicy::from_tailored(k).unwrap_or_default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_kubeedge_v1_23s() {
        let k = EdgeCoreConfig::default().kubelet();
        assert_eq!(k.node_status_update_frequency, Duration::from_secs(10));
        assert_eq!(k.node_status_report_frequency, Duration::from_secs(300));
        assert_eq!(k.node_lease_duration, Duration::from_secs(40));
        assert_eq!(k.read_only_port, 10350);
        assert_eq!(k.address, "127.0.0.1");
        assert_eq!(k.max_pods, 110);
        assert!(k.cluster_dns.is_empty());
        assert_eq!(k.cluster_domain, "cluster.local");
        assert_eq!(k.resolv_conf, "/etc/resolv.conf");
        assert!(k.register_node);
        assert_eq!(
            (
                k.image_gc_high_threshold_percent,
                k.image_gc_low_threshold_percent
            ),
            (85, 80)
        );
        assert_eq!(k.image_minimum_gc_age, Duration::from_secs(120));
        assert_eq!(k.image_maximum_gc_age, None);
        assert_eq!(
            k.eviction_hard.get("memory.available").map(String::as_str),
            Some("100Mi")
        );
        assert_eq!(k.container_runtime_endpoint, "unix:///var/run/docker.sock");
        assert_eq!(k.file_check_frequency, Duration::from_secs(20));
        assert_eq!(k.node_ip, None);
        assert_eq!(k.minimum_gc_age, Duration::ZERO);
    }

    /// Fuzzing regression: `evictionHard: null` gave no thresholds, its printed config the
    /// defaults.
    #[test]
    fn seccomp_default_is_off_and_its_flag_form_wins() {
        assert!(!EdgeCoreConfig::default().kubelet().seccomp_default);
        let tailored =
            "modules:\n  edged:\n    tailoredKubeletConfig:\n      seccompDefault: true\n";
        let c = EdgeCoreConfig::from_yaml_str(tailored).unwrap();
        assert!(c.kubelet().seccomp_default);
        let both = "modules:\n  edged:\n    seccompDefault: false\n    tailoredKubeletConfig:\n      seccompDefault: true\n";
        let c = EdgeCoreConfig::from_yaml_str(both).unwrap();
        assert!(!c.kubelet().seccomp_default);
    }

    #[test]
    fn null_eviction_hard_is_the_default_and_survives_printing() {
        let text = "modules:\n  edged:\n    tailoredKubeletConfig:\n      evictionHard: null\n";
        let c = EdgeCoreConfig::from_yaml_str(text).unwrap();
        let printed = EdgeCoreConfig::from_yaml_str(&c.to_yaml()).unwrap();
        assert_eq!(
            c.kubelet().eviction_hard,
            EdgeCoreConfig::default().kubelet().eviction_hard
        );
        assert_eq!(c.kubelet(), printed.kubelet());
        let off = "modules:\n  edged:\n    tailoredKubeletConfig:\n      evictionHard: {}\n";
        let c = EdgeCoreConfig::from_yaml_str(off).unwrap();
        assert!(c.kubelet().eviction_hard.is_empty());
        let printed = EdgeCoreConfig::from_yaml_str(&c.to_yaml()).unwrap();
        assert!(printed.kubelet().eviction_hard.is_empty());
    }

    #[test]
    fn tailored_values_win() {
        let c = EdgeCoreConfig::from_yaml_str(
            "modules:\n  edged:\n    nodeIP: 10.1.2.3\n    minimumGCAge: 1m30s\n    tailoredKubeletConfig:\n      \
             nodeStatusUpdateFrequency: 5s\n      nodeStatusReportFrequency: 1m0s\n      \
             nodeLeaseDurationSeconds: 20\n      readOnlyPort: 0\n      maxPods: 30\n      \
             clusterDNS: [169.254.96.16, fd00::10]\n      clusterDomain: edge.local\n      \
             resolvConf: ''\n      \
             imageGCHighThresholdPercent: 70\n      imageGCLowThresholdPercent: 50\n      \
             imageMinimumGCAge: 2h45m\n      imageMaximumGCAge: 24h\n      registerNode: false\n      \
             containerRuntimeEndpoint: unix:///run/cri-dockerd.sock\n",
        )
        .unwrap();
        let k = c.kubelet();
        assert_eq!(k.node_status_update_frequency, Duration::from_secs(5));
        assert_eq!(k.node_status_report_frequency, Duration::from_secs(60));
        assert_eq!(k.node_lease_duration, Duration::from_secs(20));
        assert_eq!(k.read_only_port, 0);
        assert_eq!(k.max_pods, 30);
        assert_eq!(
            k.cluster_dns,
            vec![
                "169.254.96.16".parse::<IpAddr>().unwrap(),
                "fd00::10".parse().unwrap()
            ]
        );
        assert_eq!(k.cluster_domain, "edge.local");
        assert_eq!(k.resolv_conf, "");
        assert_eq!(k.image_gc_high_threshold_percent, 70);
        assert_eq!(k.image_gc_low_threshold_percent, 50);
        assert_eq!(
            k.image_minimum_gc_age,
            Duration::from_secs(2 * 3600 + 45 * 60)
        );
        assert_eq!(k.image_maximum_gc_age, Some(Duration::from_secs(24 * 3600)));
        assert!(!k.register_node);
        assert_eq!(k.container_runtime_endpoint, "unix:///run/cri-dockerd.sock");
        assert_eq!(k.node_ip, Some("10.1.2.3".parse().unwrap()));
        assert_eq!(k.minimum_gc_age, Duration::from_secs(90));
    }

    #[test]
    fn legacy_flag_keys_do_not_override_tailored_ones() {
        // A v1.12 – v1.17 file: v1.23 reads only the tailored keys.
        let c = EdgeCoreConfig::from_yaml_str(
            "modules:\n  edged:\n    registerNode: false\n    remoteRuntimeEndpoint: unix:///x.sock\n",
        )
        .unwrap();
        let k = c.kubelet();
        assert!(k.register_node);
        assert_eq!(k.container_runtime_endpoint, "unix:///var/run/docker.sock");
    }
}
