//! A pod's hostname and its `/etc/hosts`, as kubelet makes them (`kubelet_pods.go`).
//!
//! - The hostname is `spec.hostname`, else the pod's name, cut to 63 characters; with
//!   `spec.subdomain` the pod also has the FQDN `<hostname>.<subdomain>.<ns>.svc.<domain>`,
//!   which becomes the kernel's hostname only with `setHostnameAsFQDN` (at most 64
//!   characters, else the sandbox is not made).
//! - Kubelet writes a hosts file per pod, `<pods>/<uid>/etc-hosts`, and binds it at
//!   `/etc/hosts` in every app container that does not mount something there itself. For a
//!   pod on its own network it is the managed file (header, localhost lines, `<pod IP>
//!   <fqdn> <hostname>`); for a `hostNetwork` pod it is the node's `/etc/hosts` under a header
//!   of its own. Either ends with the pod's `hostAliases`. Edged does the same on both
//!   engines, so a pod's `/etc/hosts` is kubelet's whether Docker or containerd runs it (left
//!   to themselves, Docker would write its own file into the sandbox and containerd would copy
//!   the node's).
//! - On Docker a pod without a sandbox (`podSandboxImage: ""`) and not on the host's network
//!   is the exception: each container has its own IP, known only once it runs, so Docker
//!   writes that container's hosts file and gets the hostname, the domain and the aliases
//!   (`Hostname`, `Domainname`, `ExtraHosts`) to put in it.
//!
//! The file is written in place (truncated, not replaced), so a bind of it that a container
//! already holds sees the new content, as kubelet's `os.WriteFile` does.

use std::net::IpAddr;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::pod::{Container, Pod, SpecError, is_dns1123_label, is_dns1123_subdomain};

/// Where kubelet mounts the file.
pub const ETC_HOSTS: &str = "/etc/hosts";
/// The node's hosts file, the base of a `hostNetwork` pod's.
pub const NODE_HOSTS: &str = "/etc/hosts";
/// The first line of the managed file.
pub const MANAGED_HEADER: &str = "# Kubernetes-managed hosts file.\n";
/// The first line of a `hostNetwork` pod's file.
pub const HOST_NETWORK_HEADER: &str = "# Kubernetes-managed hosts file (host network).\n";
/// The longest kernel hostname (64 bytes less the terminating NUL is kubelet's count of 64
/// for an FQDN; a plain hostname is cut at 63).
const MAX_FQDN: usize = 64;
/// A hostname is cut to a DNS label's length.
const MAX_HOSTNAME: usize = 63;

/// One of `spec.hostAliases`: names the pod's hosts file maps to `ip`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize)]
pub struct HostAlias {
    /// The address.
    #[serde(default)]
    pub ip: String,
    /// The names, written on one line after the address.
    #[serde(default)]
    pub hostnames: Vec<String>,
}

/// The pod's hostname: `spec.hostname`, else its name, cut to 63 characters without a
/// trailing `-` or `.` the cut may leave (kubelet's `truncatePodHostnameIfNeeded`).
pub fn hostname(pod: &Pod) -> String {
    let base = pod
        .spec
        .hostname
        .as_deref()
        .filter(|h| !h.is_empty())
        .unwrap_or(&pod.metadata.name);
    if base.len() <= MAX_HOSTNAME {
        return base.to_owned();
    }
    let cut: String = base.chars().take(MAX_HOSTNAME).collect();
    cut.trim_end_matches(['-', '.']).to_owned()
}

/// The pod's domain with `spec.subdomain`: `<subdomain>.<ns>.svc.<cluster domain>`.
pub fn host_domain(pod: &Pod, cluster_domain: &str) -> Option<String> {
    let sub = pod.spec.subdomain.as_deref().filter(|s| !s.is_empty())?;
    Some(format!("{sub}.{}.svc.{cluster_domain}", pod.namespace()))
}

/// The hostname the pod's kernel gets: the FQDN with `setHostnameAsFQDN` and a subdomain,
/// else [`hostname`]. An FQDN over 64 characters cannot be a hostname: kubelet refuses to
/// make the sandbox, naming it.
pub fn kernel_hostname(pod: &Pod, cluster_domain: &str) -> Result<String, SpecError> {
    let short = hostname(pod);
    match host_domain(pod, cluster_domain) {
        Some(domain) if pod.spec.set_hostname_as_fqdn == Some(true) => {
            let fqdn = format!("{short}.{domain}");
            if fqdn.len() > MAX_FQDN {
                return Err(SpecError {
                    reason: "InvalidPodSpec",
                    message: format!(
                        "spec.setHostnameAsFQDN: failed to construct FQDN from pod hostname and \
                         cluster domain, FQDN {fqdn} is too long ({MAX_FQDN} characters is the \
                         max, {} characters requested)",
                        fqdn.len()
                    ),
                });
            }
            Ok(fqdn)
        }
        _ => Ok(short),
    }
}

/// The managed file of a pod on its own network with addresses `pod_ips` (kubelet's
/// `managedHostsFileContent`).
pub fn managed(
    pod_ips: &[String],
    hostname: &str,
    domain: Option<&str>,
    aliases: &[HostAlias],
) -> String {
    let mut out = String::from(MANAGED_HEADER);
    out.push_str("127.0.0.1\tlocalhost\n");
    out.push_str("::1\tlocalhost ip6-localhost ip6-loopback\n");
    out.push_str("fe00::0\tip6-localnet\n");
    out.push_str("fe00::0\tip6-mcastprefix\n");
    out.push_str("fe00::1\tip6-allnodes\n");
    out.push_str("fe00::2\tip6-allrouters\n");
    for ip in pod_ips {
        match domain {
            Some(domain) => out.push_str(&format!("{ip}\t{hostname}.{domain}\t{hostname}\n")),
            None => out.push_str(&format!("{ip}\t{hostname}\n")),
        }
    }
    out.push_str(&alias_lines(aliases));
    out
}

/// A `hostNetwork` pod's file: the node's hosts file `node_hosts` under its header, then the
/// aliases (kubelet's `nodeHostsFileContent`).
pub fn host_network(node_hosts: &str, aliases: &[HostAlias]) -> String {
    format!("{HOST_NETWORK_HEADER}{node_hosts}{}", alias_lines(aliases))
}

/// The aliases' section: a blank line, its comment, one `ip\tname\tname...` line per alias;
/// nothing without aliases.
fn alias_lines(aliases: &[HostAlias]) -> String {
    if aliases.is_empty() {
        return String::new();
    }
    let mut out = String::from("\n# Entries added by HostAliases.\n");
    for alias in aliases {
        out.push_str(&format!("{}\t{}\n", alias.ip, alias.hostnames.join("\t")));
    }
    out
}

/// The aliases as Docker's `ExtraHosts` (`name:ip`, one per name), for a container whose
/// hosts file Docker writes.
pub fn extra_hosts(aliases: &[HostAlias]) -> Vec<String> {
    aliases
        .iter()
        .flat_map(|a| a.hostnames.iter().map(move |h| format!("{h}:{}", a.ip)))
        .collect()
}

/// The pod's hosts file on the node: `<pods_root>/<uid>/etc-hosts` (kubelet's name).
pub fn path(pods_root: &Path, uid: &str) -> PathBuf {
    pods_root.join(uid).join("etc-hosts")
}

/// Whether `container` gets the pod's hosts file bound at `/etc/hosts`: not when it mounts
/// a volume there itself (kubelet's rule).
pub fn bound_in(container: &Container) -> bool {
    !container
        .volume_mounts
        .iter()
        .any(|m| m.mount_path == ETC_HOSTS)
}

/// Writes the pod's hosts file in place with `content` (0644), making the pod's directory
/// when needed.
pub fn write(path: &Path, content: &str) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o644)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)?;
    file.write_all(content.as_bytes())?;
    file.set_permissions(std::fs::Permissions::from_mode(0o644))
}

/// Checks `spec.hostname`, `spec.subdomain` and `spec.hostAliases` as the apiserver and
/// kubelet do, so that nothing but a name or an address reaches a hosts file (a static pod
/// skips the apiserver).
pub fn validate(pod: &Pod) -> Result<(), SpecError> {
    let invalid = |message: String| SpecError {
        reason: "InvalidPodSpec",
        message,
    };
    for (field, value) in [
        ("hostname", &pod.spec.hostname),
        ("subdomain", &pod.spec.subdomain),
    ] {
        if let Some(value) = value.as_deref().filter(|v| !v.is_empty())
            && !is_dns1123_label(value)
        {
            return Err(invalid(format!(
                "spec.{field} {value:?}: must be a DNS-1123 label"
            )));
        }
    }
    for (i, alias) in pod.spec.host_aliases.iter().enumerate() {
        if alias.ip.parse::<IpAddr>().is_err() {
            return Err(invalid(format!(
                "spec.hostAliases[{i}].ip {:?}: must be an IP address",
                alias.ip
            )));
        }
        for (j, name) in alias.hostnames.iter().enumerate() {
            if !is_dns1123_subdomain(name) {
                return Err(invalid(format!(
                    "spec.hostAliases[{i}].hostnames[{j}] {name:?}: must be a DNS-1123 subdomain"
                )));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(spec: serde_json::Value) -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "web-0", "namespace": "apps", "uid": "u-1"},
            "spec": spec,
        }))
        .unwrap()
    }

    fn aliases() -> Vec<HostAlias> {
        vec![
            HostAlias {
                ip: "10.1.2.3".into(),
                hostnames: vec!["foo.local".into(), "bar.local".into()],
            },
            HostAlias {
                ip: "fd00::3".into(),
                hostnames: vec!["six.local".into()],
            },
        ]
    }

    #[test]
    fn the_managed_file_is_kubelets_byte_for_byte() {
        let p = pod(serde_json::json!({"hostname": "db", "subdomain": "cluster"}));
        let domain = host_domain(&p, "cluster.local");
        assert_eq!(domain.as_deref(), Some("cluster.apps.svc.cluster.local"));
        let content = managed(
            &["10.88.0.5".to_owned()],
            &hostname(&p),
            domain.as_deref(),
            &aliases(),
        );
        assert_eq!(
            content,
            "# Kubernetes-managed hosts file.\n\
             127.0.0.1\tlocalhost\n\
             ::1\tlocalhost ip6-localhost ip6-loopback\n\
             fe00::0\tip6-localnet\n\
             fe00::0\tip6-mcastprefix\n\
             fe00::1\tip6-allnodes\n\
             fe00::2\tip6-allrouters\n\
             10.88.0.5\tdb.cluster.apps.svc.cluster.local\tdb\n\
             \n\
             # Entries added by HostAliases.\n\
             10.1.2.3\tfoo.local\tbar.local\n\
             fd00::3\tsix.local\n"
        );
        // Without a subdomain: the hostname alone; without aliases: no section.
        let plain = managed(&["10.88.0.5".to_owned()], "web-0", None, &[]);
        assert!(
            plain.ends_with("fe00::2\tip6-allrouters\n10.88.0.5\tweb-0\n"),
            "{plain}"
        );
    }

    #[test]
    fn a_host_network_pod_gets_the_nodes_file_and_its_aliases() {
        let content = host_network("127.0.0.1 localhost\n10.0.0.2 node-1\n", &aliases()[..1]);
        assert_eq!(
            content,
            "# Kubernetes-managed hosts file (host network).\n127.0.0.1 localhost\n\
             10.0.0.2 node-1\n\n# Entries added by HostAliases.\n10.1.2.3\tfoo.local\tbar.local\n"
        );
        assert_eq!(
            extra_hosts(&aliases()),
            [
                "foo.local:10.1.2.3",
                "bar.local:10.1.2.3",
                "six.local:fd00::3"
            ]
        );
    }

    #[test]
    fn the_hostname_is_spec_hostname_or_the_name_cut_to_a_label() {
        assert_eq!(hostname(&pod(serde_json::json!({}))), "web-0");
        assert_eq!(hostname(&pod(serde_json::json!({"hostname": "db"}))), "db");
        let mut long = pod(serde_json::json!({}));
        long.metadata.name = format!("{}-{}", "a".repeat(62), "b".repeat(10));
        assert_eq!(hostname(&long), "a".repeat(62));
    }

    #[test]
    fn the_kernel_hostname_is_the_fqdn_only_when_asked_and_short_enough() {
        let p = pod(serde_json::json!({"hostname": "db", "subdomain": "cluster"}));
        assert_eq!(kernel_hostname(&p, "cluster.local").unwrap(), "db");
        let fqdn = pod(
            serde_json::json!({"hostname": "db", "subdomain": "cluster", "setHostnameAsFQDN": true}),
        );
        assert_eq!(
            kernel_hostname(&fqdn, "cluster.local").unwrap(),
            "db.cluster.apps.svc.cluster.local"
        );
        // No subdomain: nothing to make an FQDN of.
        let alone = pod(serde_json::json!({"setHostnameAsFQDN": true}));
        assert_eq!(kernel_hostname(&alone, "cluster.local").unwrap(), "web-0");
        let e = kernel_hostname(&fqdn, &format!("{}.local", "x".repeat(40))).unwrap_err();
        assert!(
            e.message.starts_with("spec.setHostnameAsFQDN"),
            "{}",
            e.message
        );
    }

    #[test]
    fn a_container_mounting_etc_hosts_keeps_its_own() {
        let p = pod(serde_json::json!({"containers": [
            {"name": "a", "image": "i"},
            {"name": "b", "image": "i", "volumeMounts": [{"name": "h", "mountPath": "/etc/hosts"}]}
        ]}));
        assert!(bound_in(&p.spec.containers[0]));
        assert!(!bound_in(&p.spec.containers[1]));
    }

    #[test]
    fn the_file_is_rewritten_in_place() {
        use std::os::unix::fs::MetadataExt;
        let dir = tempfile::tempdir().unwrap();
        let file = path(dir.path(), "u-1");
        write(&file, "first, longer content\n").unwrap();
        let inode = std::fs::metadata(&file).unwrap().ino();
        write(&file, "second\n").unwrap();
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "second\n");
        let meta = std::fs::metadata(&file).unwrap();
        assert_eq!(meta.ino(), inode, "a bind of the file sees the new content");
        assert_eq!(meta.mode() & 0o777, 0o644);
    }

    #[test]
    fn validation_names_the_field_of_what_cannot_go_into_a_hosts_file() {
        let refused = |spec: serde_json::Value| validate(&pod(spec)).unwrap_err().message;
        assert!(refused(serde_json::json!({"hostname": "Db"})).starts_with("spec.hostname"));
        assert!(refused(serde_json::json!({"subdomain": "a.b"})).starts_with("spec.subdomain"));
        assert!(
            refused(serde_json::json!({"hostAliases": [{"ip": "host", "hostnames": ["a"]}]}))
                .starts_with("spec.hostAliases[0].ip")
        );
        assert!(
            refused(serde_json::json!({"hostAliases": [{"ip": "10.0.0.1", "hostnames": ["ok", "a\n6.6.6.6 evil"]}]}))
                .starts_with("spec.hostAliases[0].hostnames[1]")
        );
        validate(&pod(
            serde_json::json!({"hostname": "db", "subdomain": "sub", "hostAliases": aliases()}),
        ))
        .unwrap();
    }
}
