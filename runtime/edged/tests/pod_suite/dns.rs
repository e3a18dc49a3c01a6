//! Pod DNS as kubelet writes it, read inside the pods' containers: resolv.conf per
//! `dnsPolicy`/`dnsConfig` and the node's `clusterDNS`/`resolvConf`, the hostname, and the
//! managed `/etc/hosts` with the pod's FQDN and `hostAliases`; and a Service name resolved
//! through a DNS server at the node's `clusterDNS`.

use std::net::IpAddr;

use super::dns_server::DnsServer;
use super::*;
use wedge_edged::dns::{NodeDns, ResolverConfig};
use wedge_edged::etc_hosts::{self, HostAlias};

/// What `cmd` (a shell line) prints in the newest container `container` of pod `uid`.
async fn read_in(node: &Node, uid: &str, container: &str, cmd: &str) -> String {
    let c = node
        .containers(uid)
        .await
        .into_iter()
        .rfind(|c| c.container == container)
        .unwrap_or_else(|| panic!("no container {container} of pod {uid}"));
    let (code, output) = node
        .engine
        .exec(
            &c.id,
            &["sh".into(), "-c".into(), cmd.into()],
            Duration::from_secs(10),
        )
        .await
        .unwrap();
    assert_eq!(code, 0, "{cmd}: {output}");
    output
}

/// A node whose `clusterDNS` is `cluster` and whose `resolvConf` is a file of the test's
/// (so what pods inherit from the node is known).
async fn node_with_dns(cluster: IpAddr, resolv: &std::path::Path) -> Node {
    let node_dns = NodeDns {
        cluster_dns: vec![cluster],
        resolv_conf: Some(resolv.to_path_buf()),
        ..NodeDns::default()
    };
    Node::start_with(&[], None, move |s| s.dns = node_dns).await
}

#[tokio::test]
async fn pods_get_kubelets_resolv_conf_hostname_and_hosts_file() {
    let dir = tempfile::tempdir().unwrap();
    let resolv = dir.path().join("resolv.conf");
    std::fs::write(
        &resolv,
        "nameserver 192.168.1.1\nsearch lan.example\noptions edns0\n",
    )
    .unwrap();
    let aliases = vec![
        HostAlias {
            ip: "10.1.2.3".into(),
            hostnames: vec!["foo.local".into(), "bar.local".into()],
        },
        HostAlias {
            ip: "10.1.2.4".into(),
            hostnames: vec!["baz.local".into()],
        },
    ];
    // ClusterFirst (the default), a hostname and subdomain, aliases.
    let cluster_name = unique("cluster");
    let cluster = pod(
        &cluster_name,
        json!({"containers": [sleeper("app", "sleep 3600")],
               "hostname": "db", "subdomain": "sub", "hostAliases": aliases}),
    );
    // None: only its dnsConfig.
    let none_name = unique("none");
    let none = pod(
        &none_name,
        json!({"containers": [sleeper("app", "sleep 3600")], "dnsPolicy": "None",
               "dnsConfig": {"nameservers": ["1.1.1.1"], "searches": ["my.example"],
                             "options": [{"name": "ndots", "value": "2"}, {"name": "edns0"}]}}),
    );
    // The host's network, with the cluster's DNS asked for; its dnsConfig merged.
    let host_name = unique("host");
    let host = pod(
        &host_name,
        json!({"containers": [sleeper("app", "sleep 3600")], "hostNetwork": true,
               "dnsPolicy": "ClusterFirstWithHostNet",
               "dnsConfig": {"searches": ["extra.example"], "options": [{"name": "ndots", "value": "3"}]},
               "hostAliases": [aliases[0]]}),
    );
    let mut node = node_with_dns("10.96.0.10".parse().unwrap(), &resolv).await;
    for p in [&cluster, &none, &host] {
        node.send("insert", p).await;
    }
    let status = node.wait_status(&cluster_name, |s| running(s, 1)).await;
    node.wait_status(&none_name, |s| running(s, 1)).await;
    node.wait_status(&host_name, |s| running(s, 1)).await;

    let cluster_resolv = ResolverConfig {
        servers: vec!["10.96.0.10".into()],
        searches: [
            "default.svc.cluster.local",
            "svc.cluster.local",
            "cluster.local",
        ]
        .iter()
        .map(|s| s.to_string())
        .chain(["lan.example".to_owned()])
        .collect(),
        options: vec!["ndots:5".into()],
    };
    let uid_of = |p: &Value| uid(p).to_owned();
    assert_eq!(
        read_in(&node, &uid_of(&cluster), "app", "cat /etc/resolv.conf").await,
        cluster_resolv.render()
    );
    let pod_ip = status["podIP"].as_str().unwrap().to_owned();
    assert_eq!(
        read_in(&node, &uid_of(&cluster), "app", "cat /etc/hosts").await,
        etc_hosts::managed(
            &[pod_ip],
            "db",
            Some("sub.default.svc.cluster.local"),
            &aliases
        )
    );
    assert_eq!(
        read_in(&node, &uid_of(&cluster), "app", "busybox hostname").await,
        "db\n"
    );
    assert_eq!(
        read_in(&node, &uid_of(&none), "app", "cat /etc/resolv.conf").await,
        "search my.example\nnameserver 1.1.1.1\noptions ndots:2 edns0\n"
    );
    let mut host_resolv = cluster_resolv.clone();
    host_resolv.searches.push("extra.example".into());
    host_resolv.options = vec!["ndots:3".into()];
    assert_eq!(
        read_in(&node, &uid_of(&host), "app", "cat /etc/resolv.conf").await,
        host_resolv.render()
    );
    let node_hosts = std::fs::read_to_string("/etc/hosts").unwrap();
    assert_eq!(
        read_in(&node, &uid_of(&host), "app", "cat /etc/hosts").await,
        etc_hosts::host_network(&node_hosts, &aliases[..1])
    );
    // The file kubelet's way: under the pod's directory, removed with the pod.
    let file = etc_hosts::path(&node.root.path().join("pods"), uid(&cluster));
    assert!(file.is_file(), "{}", file.display());
    for p in [&cluster, &none, &host] {
        node.send("delete", p).await;
    }
    let deadline = Instant::now() + WAIT;
    while file.exists() {
        assert!(Instant::now() < deadline, "the pod's hosts file stayed");
        node.serve_for(Duration::from_millis(100)).await;
    }
    let name = node.name.clone();
    node.stop().await;
    remove_all(&name).await;
}

/// A node opted out of sandboxes (`podSandboxImage: ""`): on Docker each container owns its
/// network namespace and Docker writes its files from the container's settings (its own
/// hosts file format, one alias a line); on CRI the runtime's sandbox is there all the same.
/// Either way the pod gets its resolv.conf, hostname, FQDN and aliases.
#[tokio::test]
async fn a_pod_without_a_sandbox_gets_the_same_names() {
    let dir = tempfile::tempdir().unwrap();
    let resolv = dir.path().join("resolv.conf");
    std::fs::write(&resolv, "nameserver 192.168.1.1\nsearch lan.example\n").unwrap();
    let name = unique("alone");
    let alone = pod(
        &name,
        json!({"containers": [sleeper("app", "sleep 3600")], "hostname": "db", "subdomain": "sub",
               "hostAliases": [{"ip": "10.1.2.3", "hostnames": ["foo.local", "bar.local"]}]}),
    );
    let node_dns = NodeDns {
        cluster_dns: vec!["10.96.0.10".parse().unwrap()],
        resolv_conf: Some(resolv.clone()),
        ..NodeDns::default()
    };
    let mut node = Node::start_with(&[], None, move |s| {
        s.dns = node_dns;
        s.pod_sandbox_image = String::new();
    })
    .await;
    node.send("insert", &alone).await;
    node.wait_status(&name, |s| running(s, 1)).await;
    assert_eq!(
        read_in(&node, uid(&alone), "app", "cat /etc/resolv.conf").await,
        "search default.svc.cluster.local svc.cluster.local cluster.local lan.example\n\
         nameserver 10.96.0.10\noptions ndots:5\n"
    );
    assert_eq!(
        read_in(&node, uid(&alone), "app", "busybox hostname").await,
        "db\n"
    );
    let hosts = read_in(&node, uid(&alone), "app", "cat /etc/hosts").await;
    let lines: Vec<Vec<&str>> = hosts
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert!(
        lines
            .iter()
            .any(|l| l.len() == 3 && l[1..] == ["db.sub.default.svc.cluster.local", "db"]),
        "{hosts}"
    );
    for alias in ["foo.local", "bar.local"] {
        assert!(
            lines
                .iter()
                .any(|l| l.first() == Some(&"10.1.2.3") && l.contains(&alias)),
            "{alias}: {hosts}"
        );
    }
    node.send("delete", &alone).await;
    let name = node.name.clone();
    node.stop().await;
    remove_all(&name).await;
}

/// This host's address on the network the runtime gives pods (Docker's bridge, the CNI
/// bridge): the one address of the host a pod surely reaches (a CNI network may have no
/// default route, and the host's 127.0.0.1 is not the pod's). Found by running a sandbox and
/// asking the kernel which of the host's addresses routes to it.
async fn pod_gateway(engine: &Engine) -> IpAddr {
    let probe: wedge_edged::pod::Pod = serde_json::from_value(json!({
        "metadata": {"name": unique("probe"), "namespace": "default", "uid": unique("uid")},
    }))
    .unwrap();
    engine
        .ensure_sandbox_image(common::PAUSE_IMAGE)
        .await
        .unwrap();
    let plan = wedge_edged::sandbox::plan(&unique("probe-node"), &probe, common::PAUSE_IMAGE, 0);
    let id = engine.run_sandbox(&plan).await.unwrap();
    let ip = engine.sandbox_ip(&id).await;
    engine.remove_sandbox(&id).await.unwrap();
    let ip = ip
        .unwrap()
        .expect("a sandbox on the runtime's network has an IP");
    let socket = std::net::UdpSocket::bind("0.0.0.0:0").unwrap();
    // Connecting a UDP socket only picks the route; nothing is sent.
    socket.connect((ip.as_str(), 53)).unwrap();
    socket.local_addr().unwrap().ip()
}

#[tokio::test]
async fn a_service_name_resolves_through_the_cluster_dns_server() {
    let gateway = pod_gateway(&common::engine_on(RUNTIME).await).await;
    let server = DnsServer::start(
        gateway,
        "web.default.svc.cluster.local",
        [10, 1, 2, 3].into(),
    );
    let dir = tempfile::tempdir().unwrap();
    let resolv = dir.path().join("resolv.conf");
    std::fs::write(&resolv, "nameserver 192.0.2.254\n").unwrap();
    let name = unique("client");
    let client = pod(&name, json!({"containers": [sleeper("app", "sleep 3600")]}));
    let mut node = node_with_dns(server.ip, &resolv).await;
    node.send("insert", &client).await;
    node.wait_status(&name, |s| running(s, 1)).await;
    // The short name, as a pod names a Service of its namespace: the search list and ndots
    // make it web.default.svc.cluster.local, both for busybox's own resolver and for libc's.
    let output = read_in(
        &node,
        uid(&client),
        "app",
        "busybox nslookup web 2>&1; busybox ping -c 1 -W 1 web 2>&1; true",
    )
    .await;
    assert!(output.contains("Address: 10.1.2.3"), "{output}");
    assert!(output.contains("PING web (10.1.2.3)"), "{output}");
    assert!(
        server
            .asked()
            .iter()
            .any(|n| n == "web.default.svc.cluster.local"),
        "{:?}",
        server.asked()
    );
    node.send("delete", &client).await;
    let name = node.name.clone();
    node.stop().await;
    remove_all(&name).await;
}
