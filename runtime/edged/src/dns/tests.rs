//! Kubelet's `GetPodDNS` cases, one per rule of the module docs.

use super::*;

fn pod(spec: serde_json::Value) -> Pod {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": "web", "namespace": "apps", "uid": "u-1"},
        "spec": spec,
    }))
    .unwrap()
}

fn node(cluster_dns: &[&str]) -> NodeDns {
    NodeDns {
        cluster_dns: cluster_dns.iter().map(|ip| ip.parse().unwrap()).collect(),
        ..NodeDns::default()
    }
}

fn host() -> ResolverConfig {
    ResolverConfig::parse(
        "# from DHCP\nnameserver 192.168.1.1\nnameserver 192.168.1.2\n\
         search lan. corp.example .\noptions edns0 ndots:2\n",
    )
}

fn strings(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| s.to_string()).collect()
}

#[test]
fn a_resolv_conf_is_read_as_kubelet_reads_it() {
    let parsed = ResolverConfig::parse(
        "; comment\nnameserver 10.0.0.1\nnameserver\nsearch old.example\n\
         search a.example. . b.example\noptions ndots:2 edns0\noptions ndots:3\ndomain x\n",
    );
    assert_eq!(parsed.servers, ["10.0.0.1"]);
    // The last search line wins, trailing dots go, "." alone is left out.
    assert_eq!(parsed.searches, ["a.example", "b.example"]);
    // A later option of the same name replaces the earlier one in its place.
    assert_eq!(parsed.options, ["ndots:3", "edns0"]);
}

#[test]
fn the_file_is_written_as_containerd_writes_it() {
    let config = ResolverConfig {
        servers: strings(&["10.96.0.10", "fd00::10"]),
        searches: strings(&["apps.svc.cluster.local", "svc.cluster.local"]),
        options: strings(&["ndots:5"]),
    };
    assert_eq!(
        config.render(),
        "search apps.svc.cluster.local svc.cluster.local\nnameserver 10.96.0.10\n\
         nameserver fd00::10\noptions ndots:5\n"
    );
    assert_eq!(ResolverConfig::default().render(), "");
}

#[test]
fn cluster_first_uses_the_cluster_servers_its_searches_then_the_nodes_and_ndots_5() {
    let dns = pod_dns(&pod(serde_json::json!({})), &node(&["10.96.0.10"]), host());
    assert_eq!(dns.config.servers, ["10.96.0.10"]);
    assert_eq!(
        dns.config.searches,
        [
            "apps.svc.cluster.local",
            "svc.cluster.local",
            "cluster.local",
            "lan",
            "corp.example"
        ]
    );
    // The node's options are dropped.
    assert_eq!(dns.config.options, ["ndots:5"]);
    assert!(dns.warnings.is_empty());
    // Explicitly, and the same for ClusterFirstWithHostNet.
    for policy in ["ClusterFirst", "ClusterFirstWithHostNet"] {
        let explicit = pod_dns(
            &pod(serde_json::json!({"dnsPolicy": policy})),
            &node(&["10.96.0.10"]),
            host(),
        );
        assert_eq!(explicit, dns, "{policy}");
    }
}

#[test]
fn cluster_first_without_cluster_dns_falls_back_to_default_with_a_warning() {
    let dns = pod_dns(&pod(serde_json::json!({})), &node(&[]), host());
    assert_eq!(dns.config, host());
    assert_eq!(dns.warnings.len(), 1);
    assert_eq!(dns.warnings[0].reason, "MissingClusterDNS");
    assert!(
        dns.warnings[0]
            .message
            .starts_with("pod: \"web_apps(u-1)\". kubelet does not have ClusterDNS IP"),
        "{}",
        dns.warnings[0].message
    );
}

#[test]
fn a_host_network_pod_gets_the_cluster_only_with_cluster_first_with_host_net() {
    let cluster = node(&["10.96.0.10"]);
    let plain = pod_dns(
        &pod(serde_json::json!({"hostNetwork": true, "dnsPolicy": "ClusterFirst"})),
        &cluster,
        host(),
    );
    assert_eq!(plain.config, host());
    assert!(plain.warnings.is_empty());
    let with = pod_dns(
        &pod(serde_json::json!({"hostNetwork": true, "dnsPolicy": "ClusterFirstWithHostNet"})),
        &cluster,
        host(),
    );
    assert_eq!(with.config.servers, ["10.96.0.10"]);
    assert_eq!(with.config.options, ["ndots:5"]);
}

#[test]
fn default_is_the_nodes_file_and_no_file_turns_lookups_off() {
    let dns = pod_dns(
        &pod(serde_json::json!({"dnsPolicy": "Default"})),
        &node(&["10.96.0.10"]),
        host(),
    );
    assert_eq!(dns.config, host());
    let mut without = node(&["10.96.0.10"]);
    without.resolv_conf = None;
    let dns = pod_dns(
        &pod(serde_json::json!({"dnsPolicy": "Default"})),
        &without,
        ResolverConfig::default(),
    );
    assert_eq!(dns.config.servers, ["127.0.0.1"]);
    assert_eq!(dns.config.searches, ["."]);
    without.node_ip = Some("fd00::5".parse().unwrap());
    let dns = pod_dns(
        &pod(serde_json::json!({"dnsPolicy": "Default"})),
        &without,
        ResolverConfig::default(),
    );
    assert_eq!(dns.config.servers, ["::1"]);
}

#[test]
fn none_is_the_pods_dns_config_alone() {
    let dns = pod_dns(
        &pod(serde_json::json!({"dnsPolicy": "None", "dnsConfig": {
            "nameservers": ["1.1.1.1"], "searches": ["my.example"],
            "options": [{"name": "ndots", "value": "2"}, {"name": "edns0"}]}})),
        &node(&["10.96.0.10"]),
        host(),
    );
    assert_eq!(dns.config.servers, ["1.1.1.1"]);
    assert_eq!(dns.config.searches, ["my.example"]);
    assert_eq!(dns.config.options, ["ndots:2", "edns0"]);
}

#[test]
fn dns_config_is_merged_deduplicated_and_its_options_win_by_name() {
    let dns = pod_dns(
        &pod(serde_json::json!({"dnsConfig": {
            "nameservers": ["10.96.0.10", "1.1.1.1"],
            "searches": ["svc.cluster.local", "my.example"],
            "options": [{"name": "ndots", "value": "1"}, {"name": "single-request"}]}})),
        &node(&["10.96.0.10"]),
        host(),
    );
    assert_eq!(dns.config.servers, ["10.96.0.10", "1.1.1.1"]);
    assert_eq!(dns.config.searches.last().unwrap(), "my.example");
    assert_eq!(
        dns.config
            .searches
            .iter()
            .filter(|s| *s == "svc.cluster.local")
            .count(),
        1
    );
    assert_eq!(dns.config.options, ["ndots:1", "single-request"]);
}

#[test]
fn too_much_is_trimmed_with_kubelets_warnings_never_refused() {
    let many: Vec<String> = (0..40).map(|i| format!("d{i}.example")).collect();
    let dns = pod_dns(
        &pod(serde_json::json!({"dnsConfig": {
            "nameservers": ["1.1.1.1", "8.8.8.8", "9.9.9.9"], "searches": many}})),
        &node(&["10.96.0.10"]),
        host(),
    );
    assert_eq!(dns.config.servers, ["10.96.0.10", "1.1.1.1", "8.8.8.8"]);
    assert_eq!(dns.config.searches.len(), MAX_SEARCHES);
    let reasons: Vec<&str> = dns.warnings.iter().map(|w| w.reason).collect();
    assert_eq!(reasons, ["DNSConfigForming", "DNSConfigForming"]);
    assert!(
        dns.warnings[0]
            .message
            .ends_with("the applied nameserver line is: 10.96.0.10 1.1.1.1 8.8.8.8")
    );
    // Too long a line: whole domains off the end; a domain over 253 characters left out.
    let long = |c: char| format!("{}.example", c.to_string().repeat(240));
    let mut searches: Vec<String> = ('a'..='j').map(long).collect();
    searches.insert(1, format!("{}.example", "z".repeat(250)));
    let dns = pod_dns(
        &pod(serde_json::json!({"dnsPolicy": "None", "dnsConfig": {
            "nameservers": ["1.1.1.1"], "searches": searches}})),
        &node(&[]),
        host(),
    );
    assert!(dns.config.searches.join(" ").len() <= MAX_SEARCH_CHARS);
    assert_eq!(dns.config.searches.len(), 8, "{:?}", dns.config.searches);
    assert!(dns.config.searches.iter().all(|s| s.len() <= 253));
    assert_eq!(dns.config.searches[0], long('a'));
    assert_eq!(dns.config.searches[1], long('b'));
}

#[test]
fn a_cluster_without_domain_gives_the_nodes_searches_only() {
    let mut cluster = node(&["10.96.0.10"]);
    cluster.cluster_domain = String::new();
    let dns = pod_dns(&pod(serde_json::json!({})), &cluster, host());
    assert_eq!(dns.config.searches, ["lan", "corp.example"]);
}

#[test]
fn the_host_file_is_read_from_resolv_conf_and_a_missing_one_names_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("resolv.conf");
    std::fs::write(&path, "nameserver 10.1.1.1\n").unwrap();
    let mut n = node(&[]);
    n.resolv_conf = Some(path.clone());
    assert_eq!(host_config(&n).unwrap().servers, ["10.1.1.1"]);
    n.resolv_conf = Some(dir.path().join("missing"));
    let e = host_config(&n).unwrap_err().to_string();
    assert!(e.contains("tailoredKubeletConfig.resolvConf"), "{e}");
    n.resolv_conf = None;
    assert_eq!(host_config(&n).unwrap(), ResolverConfig::default());
}

#[test]
fn validation_names_the_field_of_what_cannot_go_into_a_resolv_conf() {
    let refused = |spec: serde_json::Value| validate(&pod(spec)).unwrap_err().message;
    assert!(refused(serde_json::json!({"dnsPolicy": "Cluster"})).starts_with("spec.dnsPolicy"));
    assert!(refused(serde_json::json!({"dnsPolicy": "None"})).starts_with("spec.dnsConfig"));
    assert!(
        refused(serde_json::json!({"dnsConfig": {"nameservers": ["dns.example"]}}))
            .starts_with("spec.dnsConfig.nameservers[0]")
    );
    assert!(
        refused(serde_json::json!({"dnsConfig": {"searches": ["ok.example", "a b\nnameserver 6.6.6.6"]}}))
            .starts_with("spec.dnsConfig.searches[1]")
    );
    assert!(
        refused(serde_json::json!({"dnsConfig": {"options": [{"name": ""}]}}))
            .starts_with("spec.dnsConfig.options[0].name")
    );
    assert!(
        refused(serde_json::json!({"dnsConfig": {"options": [{"name": "ndots", "value": "1 2"}]}}))
            .starts_with("spec.dnsConfig.options[0].value")
    );
    validate(&pod(serde_json::json!({"dnsPolicy": "None", "dnsConfig": {
        "nameservers": ["1.1.1.1", "fd00::1"], "searches": ["a.example.", "."],
        "options": [{"name": "ndots", "value": "2"}, {"name": "edns0"}]}})))
    .unwrap();
}

#[test]
fn a_loopback_only_or_unreadable_resolv_conf_is_warned_about_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("resolv.conf");
    let mut n = node(&[]);
    n.resolv_conf = Some(path.clone());
    std::fs::write(&path, "nameserver 127.0.0.53\noptions edns0\n").unwrap();
    let warning = unreachable_from_pods(&n).unwrap();
    assert!(warning.contains("127.0.0.53"), "{warning}");
    std::fs::write(&path, "nameserver 127.0.0.53\nnameserver 10.0.0.1\n").unwrap();
    assert_eq!(unreachable_from_pods(&n), None);
    n.resolv_conf = Some(dir.path().join("missing"));
    assert!(unreachable_from_pods(&n).unwrap().contains("cannot start"));
    n.resolv_conf = None;
    assert_eq!(unreachable_from_pods(&n), None);
}
