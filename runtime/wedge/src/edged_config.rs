//! edged's settings from KubeEdge's keys: `modules.edged` and the effective
//! `tailoredKubeletConfig` values ([`EdgeCoreConfig::kubelet`]).
//!
//! Only keys edged acts on are mapped here; the rest are exposed by
//! `kubelet()` and listed at start as accepted but not implemented (see
//! `wedge_core::config`'s `compat.rs`, which must agree with this file).

use wedge_core::config::EdgeCoreConfig;
use wedge_edged::EdgedSettings;
use wedge_edged::node::NodeReportSettings;

/// edged's settings for `node`, from the config's KubeEdge keys (Wedge's own
/// `wedge.edged` keys are the caller's).
pub fn edged_settings(config: &EdgeCoreConfig, node: &str) -> EdgedSettings {
    let edged = &config.modules.edged;
    let kubelet = config.kubelet();
    let mut settings = EdgedSettings::new(node.to_owned(), edged.root_directory.clone());
    settings.namespace = edged.register_node_namespace.clone();
    settings.container_gc.min_age = kubelet.minimum_gc_age;
    settings.container_gc.max_containers = edged.max_container_count;
    settings.container_gc.max_per_pod_container = edged.max_per_pod_container_count;
    settings.image_gc.high_threshold = kubelet.image_gc_high_threshold_percent;
    settings.image_gc.low_threshold = kubelet.image_gc_low_threshold_percent;
    settings.image_gc.min_age = kubelet.image_minimum_gc_age;
    // Pods cannot start without the sandbox image, and a node may have no registry.
    settings.image_gc.pinned = vec![edged.pod_sandbox_image.clone()];
    settings.pod_sandbox_image = edged.pod_sandbox_image.clone();
    settings.runtime_endpoint = kubelet.container_runtime_endpoint.clone();
    settings.static_check = kubelet.file_check_frequency;
    settings.runtime_request_timeout = kubelet.runtime_request_timeout;
    settings.events = wedge_edged::events::EventSettings {
        report: edged.report_event,
        qps: f64::from(kubelet.event_record_qps.max(0)),
        burst: u32::try_from(kubelet.event_burst).unwrap_or(0),
        node: node.to_owned(),
    };
    settings.seccomp_default = kubelet.seccomp_default;
    settings.dns = wedge_edged::dns::NodeDns {
        cluster_dns: kubelet.cluster_dns.clone(),
        cluster_domain: kubelet.cluster_domain.clone(),
        resolv_conf: (!kubelet.resolv_conf.is_empty())
            .then(|| std::path::PathBuf::from(&kubelet.resolv_conf)),
        node_ip: kubelet.node_ip,
    };
    if let Some(warning) = wedge_edged::dns::unreachable_from_pods(&settings.dns) {
        tracing::warn!("{warning}");
    }
    settings.node_report = Some(node_report_settings(config, node));
    settings.eviction = kubelet.eviction.clone();
    for signal in kubelet.eviction.unread_signals() {
        tracing::warn!(
            signal,
            "eviction threshold on a signal edged does not read: it raises no pressure"
        );
    }
    // Validation checked the keys as kubelet does; a policy edged still refuses keeps
    // kubelet's defaults rather than growing logs without bound.
    settings.log_rotation = Some(
        wedge_edged::log_rotation::LogRotationPolicy::from_kubelet(
            &kubelet.container_log_max_size,
            kubelet.container_log_max_files,
            kubelet.container_log_monitor_interval,
        )
        .unwrap_or_else(|e| {
            tracing::warn!("container log rotation at kubelet's defaults: {e}");
            wedge_edged::log_rotation::LogRotationPolicy::default()
        }),
    );
    // The server always runs: edgeStream reaches it in process. `readOnlyPort: 0` only
    // leaves out its TCP port, as kubelet does.
    let mut server = wedge_edged::server::ServerSettings::new(
        node.to_owned(),
        std::net::SocketAddr::new(std::net::Ipv4Addr::LOCALHOST.into(), 0),
    );
    server.addr = (kubelet.read_only_port != 0).then(|| {
        // KubeEdge's `address` is an IP; anything else falls back to loopback.
        let ip = kubelet
            .address
            .parse()
            .unwrap_or(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST));
        std::net::SocketAddr::new(ip, kubelet.read_only_port)
    });
    server.read_only_logs = config.wedge.edged.read_only_port_logs;
    settings.server = Some(server);
    settings
}

/// Node status and lease timing from `tailoredKubeletConfig`, the node's address
/// (`modules.edged.nodeIP`) and pod capacity (`maxPods`).
fn node_report_settings(config: &EdgeCoreConfig, node: &str) -> NodeReportSettings {
    let kubelet = config.kubelet();
    let mut report = NodeReportSettings::new(node.to_owned());
    report.status_every = kubelet.node_status_update_frequency;
    report.report_every = kubelet.node_status_report_frequency;
    report.lease_duration = kubelet.node_lease_duration;
    report.root_directory = config.modules.edged.root_directory.clone().into();
    report.node_ip = kubelet.node_ip.map(|ip| ip.to_string());
    if kubelet.read_only_port != 0 {
        report.kubelet_port = kubelet.read_only_port;
    }
    report.max_pods = kubelet.max_pods;
    report
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn tailored_values_reach_edged() {
        let config = EdgeCoreConfig::from_yaml_str(
            "modules:\n  edged:\n    rootDirectory: /srv/kubelet\n    minimumGCAge: 30s\n    \
             maxContainerCount: 50\n    tailoredKubeletConfig:\n      \
             imageGCHighThresholdPercent: 70\n      imageGCLowThresholdPercent: 60\n      \
             imageMinimumGCAge: 5m0s\n      nodeStatusUpdateFrequency: 5s\n      \
             nodeStatusReportFrequency: 1m0s\n      nodeLeaseDurationSeconds: 20\n      \
             fileCheckFrequency: 1m0s\n      containerLogMaxSize: 1Mi\n      \
             containerLogMaxFiles: 3\n      containerLogMonitorInterval: 5s\n",
        )
        .unwrap();
        let s = edged_settings(&config, "edge-1");
        assert_eq!(s.pods_root, std::path::Path::new("/srv/kubelet/pods"));
        assert_eq!(s.image_gc.high_threshold, 70);
        assert_eq!(s.image_gc.low_threshold, 60);
        assert_eq!(s.image_gc.min_age, Duration::from_secs(300));
        assert_eq!(s.container_gc.min_age, Duration::from_secs(30));
        assert_eq!(s.container_gc.max_containers, 50);
        assert_eq!(s.static_check, Duration::from_secs(60));
        let rotation = s.log_rotation.unwrap();
        assert_eq!(
            (rotation.max_size, rotation.max_files, rotation.interval),
            (1 << 20, 3, Duration::from_secs(5))
        );
        assert_eq!(s.dns.cluster_domain, "cluster.local");
        let report = s.node_report.unwrap();
        assert_eq!(report.status_every, Duration::from_secs(5));
        assert_eq!(report.report_every, Duration::from_secs(60));
        assert_eq!(report.lease_duration, Duration::from_secs(20));
    }

    #[test]
    fn the_nodes_dns_reaches_edged_and_an_empty_resolv_conf_is_none() {
        let config = EdgeCoreConfig::from_yaml_str(
            "modules:\n  edged:\n    tailoredKubeletConfig:\n      \
             clusterDNS: [169.254.96.16]\n      clusterDomain: edge.local\n      resolvConf: ''\n",
        )
        .unwrap();
        let s = edged_settings(&config, "edge-1");
        assert_eq!(
            s.dns.cluster_dns,
            ["169.254.96.16".parse::<std::net::IpAddr>().unwrap()]
        );
        assert_eq!(s.dns.cluster_domain, "edge.local");
        assert_eq!(s.dns.resolv_conf, None);
        let s = edged_settings(&EdgeCoreConfig::default(), "edge-1");
        assert!(s.dns.cluster_dns.is_empty());
        assert_eq!(
            s.dns.resolv_conf.as_deref(),
            Some(std::path::Path::new("/etc/resolv.conf"))
        );
    }

    #[test]
    fn defaults_are_kubeedge_s() {
        let s = edged_settings(&EdgeCoreConfig::default(), "edge-1");
        assert_eq!(
            (s.image_gc.high_threshold, s.image_gc.low_threshold),
            (85, 80)
        );
        assert_eq!(s.image_gc.min_age, Duration::from_secs(120));
        assert_eq!(s.image_gc.pinned, ["kubeedge/pause:3.6"]);
        let report = s.node_report.unwrap();
        assert_eq!(report.status_every, Duration::from_secs(10));
        assert_eq!(report.report_every, Duration::from_secs(300));
        assert_eq!(report.lease_duration, Duration::from_secs(40));
    }
}
