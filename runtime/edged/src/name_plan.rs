//! Which engine settings carry a pod's names (its resolver configuration, hostname and hosts
//! file; [`crate::dns`] and [`crate::etc_hosts`] compute them), depending on who owns the
//! pod's network namespace.
//!
//! - A sandbox (every pod on CRI, a pod not on the host's network on Docker) gets the
//!   resolver configuration and the kernel hostname: containerd writes resolv.conf and
//!   hostname from `PodSandboxConfig`, Docker from the pause container's settings, and the
//!   containers joining it share those files (Docker refuses DNS settings and a hostname on a
//!   container that joins another's network).
//! - A Docker container without a sandbox owns its namespace (or runs on the host's): it
//!   gets the resolver configuration itself, and off the host's network the hostname, the
//!   pod's domain and its aliases, for Docker to write its hosts file.
//! - Every app container of a pod with a sandbox, or on the host's network, gets the pod's
//!   hosts file (`<pods>/<uid>/etc-hosts`) bound at `/etc/hosts`, as kubelet binds it,
//!   unless it mounts a volume there.

use std::path::{Path, PathBuf};

use crate::dns::{NodeDns, ResolverConfig};
use crate::engine::ContainerPlan;
use crate::etc_hosts;
use crate::pod::{Container, Pod, SpecError};

/// Gives a sandbox's plan the pod's resolver configuration `resolver` and, off the host's
/// network, its kernel hostname (the FQDN with `setHostnameAsFQDN`).
pub fn for_sandbox(
    plan: &mut ContainerPlan,
    pod: &Pod,
    node: &NodeDns,
    resolver: ResolverConfig,
) -> Result<(), SpecError> {
    if !pod.spec.host_network {
        plan.hostname = Some(etc_hosts::kernel_hostname(pod, &node.cluster_domain)?);
    }
    plan.dns.resolver = Some(resolver);
    Ok(())
}

/// Gives the plan of `container` its names (module docs); `sandbox` is the id of the
/// sandbox it joins, and `resolver` the pod's resolver configuration, needed only without a
/// sandbox. Returns the pod's hosts file when the plan binds it: the caller writes it before
/// the container is created (a missing bind source would be made a directory).
pub fn for_container(
    plan: &mut ContainerPlan,
    pod: &Pod,
    container: &Container,
    sandbox: Option<&str>,
    resolver: Option<ResolverConfig>,
    pods_root: &Path,
    node: &NodeDns,
) -> Result<Option<PathBuf>, SpecError> {
    let host = pod.spec.host_network;
    if sandbox.is_none() {
        plan.dns.resolver = resolver;
        if !host {
            let kernel = etc_hosts::kernel_hostname(pod, &node.cluster_domain)?;
            let domain = etc_hosts::host_domain(pod, &node.cluster_domain);
            // An FQDN hostname already tells Docker the domain.
            plan.dns.domainname = domain.filter(|_| !kernel.contains('.'));
            plan.hostname = Some(kernel);
            plan.dns.extra_hosts = etc_hosts::extra_hosts(&pod.spec.host_aliases);
        }
    }
    if !(sandbox.is_some() || host) || !etc_hosts::bound_in(container) {
        return Ok(None);
    }
    let uid = &pod.metadata.uid;
    let plain = matches!(
        Path::new(uid).components().collect::<Vec<_>>().as_slice(),
        [std::path::Component::Normal(_)]
    );
    if !plain {
        return Err(SpecError {
            reason: "InvalidPodSpec",
            message: format!(
                "metadata.uid {:?}: not a plain name, so no pod directory",
                uid
            ),
        });
    }
    let file = etc_hosts::path(pods_root, uid);
    plan.binds
        .push(format!("{}:{}", file.display(), etc_hosts::ETC_HOSTS));
    Ok(Some(file))
}

/// The content of the pod's hosts file for a pod whose addresses are `pod_ips` (none yet
/// while its new sandbox starts): the node's hosts file for a `hostNetwork` pod, read at
/// each write as kubelet reads it.
pub fn hosts_content(
    pod: &Pod,
    pod_ips: &[String],
    node: &NodeDns,
) -> Result<String, std::io::Error> {
    let aliases = &pod.spec.host_aliases;
    if pod.spec.host_network {
        let node_hosts = std::fs::read_to_string(etc_hosts::NODE_HOSTS)?;
        return Ok(etc_hosts::host_network(&node_hosts, aliases));
    }
    let domain = etc_hosts::host_domain(pod, &node.cluster_domain);
    Ok(etc_hosts::managed(
        pod_ips,
        &etc_hosts::hostname(pod),
        domain.as_deref(),
        aliases,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(spec: serde_json::Value) -> Pod {
        let mut spec = spec;
        spec["containers"] = serde_json::json!([{"name": "app", "image": "img"}]);
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "web", "namespace": "apps", "uid": "u-1"},
            "spec": spec,
        }))
        .unwrap()
    }

    fn plan_of(p: &Pod, sandbox: Option<&str>) -> (ContainerPlan, Option<PathBuf>) {
        let mut plan = crate::plan::container_plan(
            "edge-1",
            p,
            &p.spec.containers[0],
            0,
            Path::new("/pods"),
            &[],
            sandbox,
        )
        .unwrap();
        let resolver = ResolverConfig {
            servers: vec!["10.96.0.10".into()],
            ..Default::default()
        };
        let file = for_container(
            &mut plan,
            p,
            &p.spec.containers[0],
            sandbox,
            sandbox.is_none().then_some(resolver),
            Path::new("/pods"),
            &NodeDns::default(),
        )
        .unwrap();
        (plan, file)
    }

    #[test]
    fn a_container_in_a_sandbox_gets_the_hosts_file_and_nothing_else() {
        let p = pod(serde_json::json!({"subdomain": "sub"}));
        let (plan, file) = plan_of(&p, Some("s1"));
        assert_eq!(file.as_deref(), Some(Path::new("/pods/u-1/etc-hosts")));
        assert!(
            plan.binds
                .contains(&"/pods/u-1/etc-hosts:/etc/hosts".to_owned())
        );
        assert_eq!(plan.dns, crate::dns::DnsPlan::default());
        assert_eq!(plan.hostname, None);
    }

    #[test]
    fn a_container_without_a_sandbox_has_docker_write_its_names() {
        let p = pod(serde_json::json!({"subdomain": "sub",
            "hostAliases": [{"ip": "10.1.2.3", "hostnames": ["foo"]}]}));
        let (plan, file) = plan_of(&p, None);
        assert_eq!(file, None);
        assert!(plan.binds.is_empty());
        assert_eq!(plan.hostname.as_deref(), Some("web"));
        assert_eq!(
            plan.dns.domainname.as_deref(),
            Some("sub.apps.svc.cluster.local")
        );
        assert_eq!(plan.dns.extra_hosts, ["foo:10.1.2.3"]);
        assert_eq!(plan.dns.resolver.unwrap().servers, ["10.96.0.10"]);
    }

    #[test]
    fn a_host_network_container_gets_the_resolver_and_the_hosts_file() {
        let p = pod(serde_json::json!({"hostNetwork": true, "subdomain": "sub"}));
        let (plan, file) = plan_of(&p, None);
        assert!(file.is_some());
        assert_eq!(plan.hostname, None);
        assert_eq!(plan.dns.domainname, None);
        assert!(plan.dns.resolver.is_some());
    }

    #[test]
    fn a_sandbox_gets_the_resolver_and_the_kernel_hostname() {
        let p = pod(
            serde_json::json!({"hostname": "db", "subdomain": "sub", "setHostnameAsFQDN": true}),
        );
        let mut plan = crate::sandbox::plan("edge-1", &p, "pause", 0);
        for_sandbox(
            &mut plan,
            &p,
            &NodeDns::default(),
            ResolverConfig::default(),
        )
        .unwrap();
        assert_eq!(
            plan.hostname.as_deref(),
            Some("db.sub.apps.svc.cluster.local")
        );
        assert_eq!(plan.dns.resolver, Some(ResolverConfig::default()));
    }

    #[test]
    fn the_hosts_content_has_the_pod_ip_and_fqdn() {
        let p = pod(serde_json::json!({"subdomain": "sub"}));
        let content = hosts_content(&p, &["10.88.0.9".into()], &NodeDns::default()).unwrap();
        assert!(
            content.ends_with("10.88.0.9\tweb.sub.apps.svc.cluster.local\tweb\n"),
            "{content}"
        );
    }
}
