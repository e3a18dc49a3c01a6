//! A pod's resolver configuration (`/etc/resolv.conf`) as kubelet computes it
//! (`pkg/kubelet/network/dns`), from the pod's `dnsPolicy` and `dnsConfig` and the node's
//! `clusterDNS`, `clusterDomain` and `resolvConf`.
//!
//! Pods must resolve names the way they would on any kubelet: a Service by its short name
//! through the cluster's DNS server (`ClusterFirst`), the node's own resolver for `Default`,
//! nothing but their own `dnsConfig` for `None`. The rules:
//! - `ClusterFirst` (the default) with `clusterDNS` set: the cluster servers only, searches
//!   `<ns>.svc.<domain> svc.<domain> <domain>` and then the node's, `options ndots:5` (the
//!   node's options are dropped). Without `clusterDNS` it falls back to `Default`, with a
//!   `MissingClusterDNS` warning. A `hostNetwork` pod's `ClusterFirst` is `Default`; only
//!   `ClusterFirstWithHostNet` gives it the cluster's DNS.
//! - `Default`: the node's `resolvConf` as it is; an empty `resolvConf` means "no DNS from the
//!   host": `nameserver 127.0.0.1` (`::1` on an IPv6 node) and `search .`, kubelet's way to
//!   turn lookups off.
//! - `None`: nothing but `dnsConfig`.
//! - `dnsConfig` is merged onto the others: nameservers and searches appended without
//!   duplicates, options merged by name (the pod's value wins).
//! - Kubelet never refuses a pod for too much DNS: it trims to 3 nameservers, 32 search
//!   domains of at most 253 characters and 2048 characters in all, and says so in a
//!   `DNSConfigForming` warning. So does edged.
//!
//! The order of options is kubelet's only up to Go's map order, which is random; here it is
//! the order of first appearance, so the file is the same at every start. The engines get the
//! result in [`ResolverConfig`]: CRI's `PodSandboxConfig.dns_config` (containerd writes the
//! file from it), Docker's `Dns`/`DnsSearch`/`DnsOptions` on the container that owns the
//! network namespace (containers joining a sandbox share its file).

use std::net::IpAddr;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::pod::{Pod, SpecError, is_dns1123_subdomain};

/// Most nameservers a resolv.conf holds (glibc's `MAXNS`): kubelet keeps the first 3.
pub const MAX_NAMESERVERS: usize = 3;
/// Most search domains kubelet writes (its expanded limit, the only one since v1.28).
pub const MAX_SEARCHES: usize = 32;
/// Most characters of the search line (domains joined by spaces).
pub const MAX_SEARCH_CHARS: usize = 2048;
/// A longer search domain makes some resolvers (glibc 2.28) abort: kubelet leaves it out.
const MAX_SEARCH_LENGTH: usize = 253;
/// The options `ClusterFirst` gives: a name with fewer than 5 dots is tried with the cluster's
/// search domains first, so `web`, `web.ns` and `web.ns.svc` all find a Service.
const CLUSTER_OPTIONS: &str = "ndots:5";

/// `dnsPolicy: ClusterFirst`, the default.
pub const CLUSTER_FIRST: &str = "ClusterFirst";
/// `dnsPolicy: ClusterFirstWithHostNet`: the cluster's DNS for a `hostNetwork` pod too.
pub const CLUSTER_FIRST_WITH_HOST_NET: &str = "ClusterFirstWithHostNet";
/// `dnsPolicy: Default`: the node's resolver configuration.
pub const DEFAULT: &str = "Default";
/// `dnsPolicy: None`: only the pod's `dnsConfig`.
pub const NONE: &str = "None";

/// The node's side of pod DNS, from `tailoredKubeletConfig`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeDns {
    /// `clusterDNS`: the cluster's DNS servers; empty makes `ClusterFirst` fall back to
    /// `Default`.
    pub cluster_dns: Vec<IpAddr>,
    /// `clusterDomain` (`cluster.local`): the suffix of Service names and pod FQDNs.
    pub cluster_domain: String,
    /// `resolvConf` (`/etc/resolv.conf`): the node's resolver configuration that `Default`
    /// pods get and `ClusterFirst` pods take search domains from; `None` (an empty key) for
    /// none.
    pub resolv_conf: Option<PathBuf>,
    /// The node's address: an IPv6 node without `resolvConf` gets `::1` rather than
    /// `127.0.0.1`, as kubelet gives.
    pub node_ip: Option<IpAddr>,
}

impl Default for NodeDns {
    /// Kubelet's defaults: no cluster DNS, `cluster.local`, the host's `/etc/resolv.conf`.
    fn default() -> NodeDns {
        NodeDns {
            cluster_dns: Vec::new(),
            cluster_domain: "cluster.local".to_owned(),
            resolv_conf: Some(PathBuf::from("/etc/resolv.conf")),
            node_ip: None,
        }
    }
}

/// A pod's `spec.dnsConfig`: what it adds to (or, under `None`, is) its resolver config.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize)]
pub struct PodDnsConfig {
    /// Nameserver IPs, appended to the policy's.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub nameservers: Vec<String>,
    /// Search domains, appended to the policy's.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub searches: Vec<String>,
    /// Resolver options, merged by name over the policy's.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub options: Vec<PodDnsOption>,
}

/// One resolver option of a `dnsConfig` (`ndots` = `2`, `edns0` without a value).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize)]
pub struct PodDnsOption {
    /// The option's name.
    #[serde(default)]
    pub name: String,
    /// Its value, if it takes one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
}

/// A resolver configuration: what a resolv.conf says, and what the engines are given.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ResolverConfig {
    /// `nameserver` lines, in order.
    pub servers: Vec<String>,
    /// The `search` line's domains.
    pub searches: Vec<String>,
    /// The `options` line's entries (`ndots:5`, `edns0`).
    pub options: Vec<String>,
}

impl ResolverConfig {
    /// Reads a resolv.conf as kubelet does: `#`/`;` comments, every `nameserver`, the last
    /// `search` line (trailing dots dropped, `.` alone left out), `options` merged by name
    /// (a later one replaces an earlier one). Other keywords (`domain`, `sortlist`) are not
    /// carried over, as kubelet carries none.
    pub fn parse(text: &str) -> ResolverConfig {
        let mut config = ResolverConfig::default();
        for line in text.lines() {
            if line.starts_with(['#', ';']) {
                continue;
            }
            let mut fields = line.split_whitespace();
            match fields.next() {
                Some("nameserver") => config.servers.extend(fields.next().map(str::to_owned)),
                Some("search") => {
                    config.searches = fields
                        .filter(|s| *s != ".")
                        .map(|s| s.trim_end_matches('.').to_owned())
                        .collect();
                }
                Some("options") => {
                    for option in fields {
                        merge_option(&mut config.options, option.to_owned());
                    }
                }
                _ => {}
            }
        }
        config
    }

    /// The file as containerd writes it from a CRI `DNSConfig`: `search`, then one
    /// `nameserver` per server, then `options`; a line only when it has entries.
    pub fn render(&self) -> String {
        let mut out = String::new();
        if !self.searches.is_empty() {
            out.push_str(&format!("search {}\n", self.searches.join(" ")));
        }
        for server in &self.servers {
            out.push_str(&format!("nameserver {server}\n"));
        }
        if !self.options.is_empty() {
            out.push_str(&format!("options {}\n", self.options.join(" ")));
        }
        out
    }
}

/// What the engine applies itself for name resolution, on the container that owns the pod's
/// network namespace (a Docker sandbox, or on Docker a container without one); a CRI sandbox
/// takes only [`DnsPlan::resolver`]. Empty for containers that join a sandbox: Docker refuses
/// DNS settings on them and gives them the sandbox's files.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DnsPlan {
    /// The resolver configuration to write; `None` leaves the engine's default (the host's).
    pub resolver: Option<ResolverConfig>,
    /// Docker's `Domainname`, for a container without a sandbox whose pod has a subdomain:
    /// Docker then writes `<ip> <hostname>.<domain> <hostname>` into its hosts file.
    pub domainname: Option<String>,
    /// Docker's `ExtraHosts` (`name:ip`), the pod's `hostAliases` for a container without a
    /// sandbox, whose hosts file Docker writes (its IP is known only once it runs).
    pub extra_hosts: Vec<String>,
}

/// Something kubelet would say about a pod's DNS in a Warning event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DnsWarning {
    /// Kubelet's event reason (`MissingClusterDNS`, `DNSConfigForming`).
    pub reason: &'static str,
    /// Kubelet's message.
    pub message: String,
}

/// A pod's resolver configuration and what kubelet would warn about in making it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodDns {
    /// What the pod's resolv.conf says.
    pub config: ResolverConfig,
    /// Warnings for the pod's events.
    pub warnings: Vec<DnsWarning>,
}

/// Why the node's resolver configuration could not be read.
#[derive(Debug, thiserror::Error)]
#[error(
    "cannot read the node's resolver configuration {path} (tailoredKubeletConfig.resolvConf): {source}"
)]
pub struct HostDnsError {
    /// The file.
    pub path: PathBuf,
    /// The read's error.
    #[source]
    pub source: std::io::Error,
}

/// The node's resolver configuration: `resolvConf` parsed, or empty without one. Read at each
/// sandbox's creation, as kubelet reads it, so an edited file reaches new pods.
pub fn host_config(node: &NodeDns) -> Result<ResolverConfig, HostDnsError> {
    let Some(path) = &node.resolv_conf else {
        return Ok(ResolverConfig::default());
    };
    std::fs::read_to_string(path)
        .map(|text| ResolverConfig::parse(&text))
        .map_err(|source| HostDnsError {
            path: path.clone(),
            source,
        })
}

/// What to warn about at start when `resolvConf` cannot serve pods: a file that cannot be
/// read (no pod sandbox can be made), or one whose nameservers are all loopback addresses
/// (a local stub resolver such as systemd-resolved's 127.0.0.53, which a pod in its own
/// network namespace cannot reach). Kubelet copies such a file all the same; kubeadm points
/// `resolvConf` at the upstream file instead, which the message suggests.
pub fn unreachable_from_pods(node: &NodeDns) -> Option<String> {
    let path = node.resolv_conf.as_ref()?;
    let host = match host_config(node) {
        Ok(host) => host,
        Err(e) => return Some(format!("{e}: pods cannot start until it can be read")),
    };
    let loopback = |s: &String| s.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback());
    if host.servers.is_empty() || !host.servers.iter().all(loopback) {
        return None;
    }
    Some(format!(
        "{} (tailoredKubeletConfig.resolvConf) names only loopback nameservers ({}), which pods \
         on their own network cannot reach: their Default DNS, and ClusterFirst's without \
         clusterDNS, will not resolve; set resolvConf to the upstream file (e.g. \
         /run/systemd/resolve/resolv.conf under systemd-resolved)",
        path.display(),
        host.servers.join(" ")
    ))
}

/// The pod's effective DNS policy: `ClusterFirst` when unset (the apiserver's default), and a
/// `hostNetwork` pod's `ClusterFirst` is `Default` (module docs).
pub fn effective_policy(pod: &Pod) -> &str {
    match pod.spec.dns_policy.as_deref().unwrap_or(CLUSTER_FIRST) {
        CLUSTER_FIRST if pod.spec.host_network => DEFAULT,
        CLUSTER_FIRST_WITH_HOST_NET => CLUSTER_FIRST,
        other => other,
    }
}

/// The pod's resolver configuration on `node`, whose resolver configuration is `host` (from
/// [`host_config`]): kubelet's `GetPodDNS` (module docs).
pub fn pod_dns(pod: &Pod, node: &NodeDns, host: ResolverConfig) -> PodDns {
    let mut warnings = Vec::new();
    let mut config = host;
    let mut policy = effective_policy(pod);
    if policy == CLUSTER_FIRST && node.cluster_dns.is_empty() {
        warnings.push(DnsWarning {
            reason: "MissingClusterDNS",
            message: format!(
                "pod: \"{}_{}({})\". kubelet does not have ClusterDNS IP configured and cannot \
                 create Pod using \"ClusterFirst\" policy. Falling back to \"Default\" policy.",
                pod.metadata.name,
                pod.namespace(),
                pod.metadata.uid
            ),
        });
        policy = DEFAULT;
    }
    match policy {
        NONE => config = ResolverConfig::default(),
        CLUSTER_FIRST => {
            config.servers = node.cluster_dns.iter().map(IpAddr::to_string).collect();
            config.searches = cluster_searches(pod, &node.cluster_domain, config.searches);
            config.options = vec![CLUSTER_OPTIONS.to_owned()];
        }
        // `Default` (validation refuses any other policy).
        _ => {
            if node.resolv_conf.is_none() {
                let loopback = match node.node_ip {
                    Some(IpAddr::V6(_)) => "::1",
                    _ => "127.0.0.1",
                };
                config.servers.push(loopback.to_owned());
                config.searches = vec![".".to_owned()];
            }
        }
    }
    if let Some(extra) = &pod.spec.dns_config {
        config.servers.extend(extra.nameservers.iter().cloned());
        config.servers = without_duplicates(config.servers);
        config.searches.extend(extra.searches.iter().cloned());
        config.searches = without_duplicates(config.searches);
        for option in &extra.options {
            let entry = match &option.value {
                Some(value) if !value.is_empty() => format!("{}:{value}", option.name),
                _ => option.name.clone(),
            };
            merge_option(&mut config.options, entry);
        }
    }
    fit_limits(&mut config, &mut warnings);
    PodDns { config, warnings }
}

/// `<ns>.svc.<domain> svc.<domain> <domain>` before the node's searches, without duplicates;
/// only the node's without a cluster domain.
fn cluster_searches(pod: &Pod, domain: &str, host: Vec<String>) -> Vec<String> {
    if domain.is_empty() {
        return host;
    }
    let mut searches = vec![
        format!("{}.svc.{domain}", pod.namespace()),
        format!("svc.{domain}"),
        domain.to_owned(),
    ];
    searches.extend(host);
    without_duplicates(searches)
}

/// `items` with each value kept at its first place only.
fn without_duplicates(items: Vec<String>) -> Vec<String> {
    let mut seen = std::collections::HashSet::new();
    items
        .into_iter()
        .filter(|item| seen.insert(item.clone()))
        .collect()
}

/// Adds `option` (`name` or `name:value`) to `options`, replacing one of the same name where
/// it stands.
fn merge_option(options: &mut Vec<String>, option: String) {
    let name = |o: &str| o.split(':').next().unwrap_or_default().to_owned();
    let wanted = name(&option);
    match options.iter_mut().find(|o| name(o) == wanted) {
        Some(existing) => *existing = option,
        None => options.push(option),
    }
}

/// Trims `config` to what a resolver takes, with kubelet's warnings.
fn fit_limits(config: &mut ResolverConfig, warnings: &mut Vec<DnsWarning>) {
    if config.servers.len() > MAX_NAMESERVERS {
        config.servers.truncate(MAX_NAMESERVERS);
        warnings.push(DnsWarning {
            reason: "DNSConfigForming",
            message: format!(
                "Nameserver limits were exceeded, some nameservers have been omitted, the \
                 applied nameserver line is: {}",
                config.servers.join(" ")
            ),
        });
    }
    let mut exceeded = false;
    if config.searches.len() > MAX_SEARCHES {
        config.searches.truncate(MAX_SEARCHES);
        exceeded = true;
    }
    let before = config.searches.len();
    config.searches.retain(|s| s.len() <= MAX_SEARCH_LENGTH);
    exceeded |= config.searches.len() != before;
    // Whole domains off the end until the line fits.
    while config.searches.join(" ").len() > MAX_SEARCH_CHARS {
        config.searches.pop();
        exceeded = true;
    }
    if exceeded {
        warnings.push(DnsWarning {
            reason: "DNSConfigForming",
            message: format!(
                "Search Line limits were exceeded, some search paths have been omitted, the \
                 applied search line is: {}",
                config.searches.join(" ")
            ),
        });
    }
}

/// Checks `spec.dnsPolicy` and `spec.dnsConfig` as the apiserver does, so that nothing but
/// addresses, domains and option words reaches a resolv.conf (a static pod skips the
/// apiserver). Counts are not checked: kubelet trims them after the merge.
pub fn validate(pod: &Pod) -> Result<(), SpecError> {
    let invalid = |message: String| SpecError {
        reason: "InvalidPodSpec",
        message,
    };
    if let Some(policy) = pod.spec.dns_policy.as_deref()
        && ![CLUSTER_FIRST, CLUSTER_FIRST_WITH_HOST_NET, DEFAULT, NONE].contains(&policy)
    {
        return Err(invalid(format!(
            "spec.dnsPolicy {policy:?}: must be ClusterFirst, ClusterFirstWithHostNet, Default or None"
        )));
    }
    let Some(config) = &pod.spec.dns_config else {
        if pod.spec.dns_policy.as_deref() == Some(NONE) {
            return Err(invalid(
                "spec.dnsConfig: required when spec.dnsPolicy is None".into(),
            ));
        }
        return Ok(());
    };
    for (i, server) in config.nameservers.iter().enumerate() {
        if server.parse::<IpAddr>().is_err() {
            return Err(invalid(format!(
                "spec.dnsConfig.nameservers[{i}] {server:?}: must be an IP address"
            )));
        }
    }
    for (i, search) in config.searches.iter().enumerate() {
        let domain = search.strip_suffix('.').unwrap_or(search);
        if search != "." && !is_dns1123_subdomain(domain) {
            return Err(invalid(format!(
                "spec.dnsConfig.searches[{i}] {search:?}: must be a DNS-1123 subdomain"
            )));
        }
    }
    let word = |s: &str| !s.is_empty() && !s.chars().any(|c| c.is_whitespace() || c.is_control());
    for (i, option) in config.options.iter().enumerate() {
        if !word(&option.name) || option.name.contains(':') {
            return Err(invalid(format!(
                "spec.dnsConfig.options[{i}].name {:?}: must be one word without ':'",
                option.name
            )));
        }
        if let Some(value) = &option.value
            && !value.is_empty()
            && !word(value)
        {
            return Err(invalid(format!(
                "spec.dnsConfig.options[{i}].value {value:?} ({}): must be one word",
                option.name
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
