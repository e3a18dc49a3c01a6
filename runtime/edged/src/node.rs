//! The node itself, as KubeEdge's edged reports it through metamanager (§6): registration
//! (`insert null/node/<node>`, a remote call), status (`patch null/nodepatch/<node>` when it
//! changes, at least every 5 minutes), and the node lease (`kube-node-lease/lease/<node>`,
//! renewed every 40 s). Capacity and addresses come from the host.
//!
//! These calls wait for the cloud (up to a minute) and fail while it is away; they run in
//! their own task so pods never wait for them, and are simply tried again on the next tick.

use std::time::Duration;

use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use wedge_core::message::{group, module, operation};
use wedge_core::time::{now_ms, rfc3339_utc};
use wedge_core::{Bus, Content, Message};

/// What the node reports of the machine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostInfo {
    /// Logical CPUs.
    pub cpus: usize,
    /// Memory in KiB (`MemTotal`).
    pub memory_kib: u64,
    /// The first non-loopback IPv4 address of an interface that is up (not a container
    /// bridge), if any.
    pub ip: Option<String>,
    /// `uname -r`.
    pub kernel: String,
    /// `PRETTY_NAME` of /etc/os-release.
    pub os_image: String,
    /// Kubernetes' architecture name (`amd64`, `arm64`...).
    pub arch: String,
    /// /etc/machine-id.
    pub machine_id: String,
}

impl HostInfo {
    /// Reads the host's figures; what cannot be read is left empty rather than failing.
    pub fn read() -> HostInfo {
        let read = |p: &str| std::fs::read_to_string(p).unwrap_or_default();
        let memory_kib = read("/proc/meminfo")
            .lines()
            .find_map(|l| l.strip_prefix("MemTotal:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or(0);
        let os_image = read("/etc/os-release")
            .lines()
            .find_map(|l| l.strip_prefix("PRETTY_NAME="))
            .map(|v| v.trim_matches('"').to_owned())
            .unwrap_or_else(|| "Linux".to_owned());
        let arch = match std::env::consts::ARCH {
            "x86_64" => "amd64",
            "aarch64" => "arm64",
            "arm" => "arm",
            other => other,
        }
        .to_owned();
        HostInfo {
            cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
            memory_kib,
            ip: host_ipv4(),
            kernel: read("/proc/sys/kernel/osrelease").trim().to_owned(),
            os_image,
            arch,
            machine_id: read("/etc/machine-id").trim().to_owned(),
        }
    }
}

/// The first IPv4 address of an up, non-loopback interface that is not a container bridge
/// or veth (those are Docker's, not the node's).
fn host_ipv4() -> Option<String> {
    let mut found = None;
    let mut addrs: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs fills `addrs` with a list we only read and then free once.
    if unsafe { libc::getifaddrs(&mut addrs) } != 0 {
        return None;
    }
    let mut cursor = addrs;
    while !cursor.is_null() {
        // SAFETY: `cursor` walks the list getifaddrs returned; each entry is valid until
        // freeifaddrs below.
        let entry = unsafe { &*cursor };
        cursor = entry.ifa_next;
        if entry.ifa_addr.is_null() || entry.ifa_flags & (libc::IFF_UP as u32) == 0 {
            continue;
        }
        // SAFETY: ifa_name is a NUL-terminated string owned by the list.
        let name = unsafe { std::ffi::CStr::from_ptr(entry.ifa_name) }.to_string_lossy();
        if name == "lo"
            || name.starts_with("docker")
            || name.starts_with("veth")
            || name.starts_with("br-")
        {
            continue;
        }
        // SAFETY: ifa_addr is non-null; sa_family says whether it is a sockaddr_in.
        let family = unsafe { (*entry.ifa_addr).sa_family };
        if i32::from(family) != libc::AF_INET {
            continue;
        }
        // SAFETY: an AF_INET address is a sockaddr_in.
        let sin = unsafe { &*(entry.ifa_addr as *const libc::sockaddr_in) };
        let ip = std::net::Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr));
        if !ip.is_loopback() {
            found = Some(ip.to_string());
            break;
        }
    }
    // SAFETY: freed once, after the last read.
    unsafe { libc::freeifaddrs(addrs) };
    found
}

/// The Node object registered with the cloud.
pub fn node_object(node: &str, host: &HostInfo, runtime_version: &str) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": node,
            "labels": {
                "kubernetes.io/hostname": node,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": host.arch,
                "node-role.kubernetes.io/edge": "",
                "node-role.kubernetes.io/agent": "",
            },
        },
        "spec": {},
        "status": node_status(host, runtime_version, now_ms()),
    })
}

/// The node's status at `now_ms`: capacity and allocatable from the host, addresses,
/// conditions, and what runs it.
pub fn node_status(host: &HostInfo, runtime_version: &str, now_ms: i64) -> Value {
    let capacity = json!({
        "cpu": host.cpus.to_string(),
        "memory": format!("{}Ki", host.memory_kib),
        "pods": "110",
    });
    let mut addresses = Vec::new();
    if let Some(ip) = &host.ip {
        addresses.push(json!({"type": "InternalIP", "address": ip}));
    }
    let now = rfc3339_utc(now_ms);
    json!({
        "capacity": capacity,
        "allocatable": capacity,
        "addresses": addresses,
        "conditions": [{
            "type": "Ready",
            "status": "True",
            "reason": "EdgeReady",
            "message": "edge is posting ready status",
            "lastHeartbeatTime": now,
        }],
        "nodeInfo": {
            "machineID": host.machine_id,
            "kernelVersion": host.kernel,
            "osImage": host.os_image,
            "operatingSystem": "linux",
            "architecture": host.arch,
            "containerRuntimeVersion": format!("docker://{runtime_version}"),
            "kubeletVersion": format!("v1.29.5-kubeedge-wedge-{}", env!("CARGO_PKG_VERSION")),
        },
    })
}

/// The node's lease renewed at `now_ms`.
pub fn lease_object(node: &str, now_ms: i64, duration: Duration) -> Value {
    // Kubernetes' MicroTime: RFC 3339 with microseconds.
    let base = rfc3339_utc(now_ms);
    let renew = format!(
        "{}.{:06}Z",
        base.trim_end_matches('Z'),
        now_ms.rem_euclid(1000) * 1000
    );
    json!({
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": node, "namespace": "kube-node-lease"},
        "spec": {
            "holderIdentity": node,
            "leaseDurationSeconds": duration.as_secs(),
            "renewTime": renew,
        },
    })
}

/// Timing of the node reports.
#[derive(Debug, Clone)]
pub struct NodeReportSettings {
    /// The node's name.
    pub node: String,
    /// How often the status is compared and sent when changed (10 s).
    pub status_every: Duration,
    /// The status is sent at least this often even unchanged (5 min).
    pub report_every: Duration,
    /// Lease renewal period and duration (40 s).
    pub lease_every: Duration,
    /// How long one call may wait for the cloud (1 min).
    pub call_timeout: Duration,
    /// Registration is retried this soon while the cloud has not taken it (2 s).
    pub register_retry: Duration,
}

impl NodeReportSettings {
    /// KubeEdge's timings for `node`.
    pub fn new(node: impl Into<String>) -> NodeReportSettings {
        NodeReportSettings {
            node: node.into(),
            status_every: Duration::from_secs(10),
            report_every: Duration::from_secs(300),
            lease_every: Duration::from_secs(40),
            call_timeout: Duration::from_secs(60),
            register_retry: Duration::from_secs(2),
        }
    }
}

async fn call(
    bus: &Bus,
    op: &str,
    resource: &str,
    content: Content,
    timeout: Duration,
) -> Result<Message, String> {
    let msg = Message::build(module::EDGED, group::META, op, resource, content);
    let reply = bus
        .send_sync(module::METAMANAGER, msg, timeout)
        .await
        .map_err(|e| e.to_string())?;
    if reply.route.operation == operation::ERROR {
        return Err(reply
            .content
            .as_string()
            .unwrap_or_else(|| reply.content.raw().to_owned()));
    }
    Ok(reply)
}

/// Renews the lease (creating it the first time); returns whether it exists now.
async fn renew_lease(bus: &Bus, settings: &NodeReportSettings, created: bool) -> bool {
    let node = &settings.node;
    let lease = lease_object(node, now_ms(), settings.lease_every);
    let content = Content::json(&lease).unwrap_or_else(|_| Content::null());
    let op = if created {
        operation::UPDATE
    } else {
        operation::INSERT
    };
    let key = format!("kube-node-lease/lease/{node}");
    match call(bus, op, &key, content, settings.call_timeout).await {
        Ok(_) => true,
        Err(e) if e.contains("already exists") => true,
        Err(e) if e.contains("not found") => false,
        Err(e) => {
            tracing::debug!(node = %node, "lease not renewed: {e}");
            created
        }
    }
}

/// Registers the node (retrying every status period until the cloud takes it), then keeps its
/// status and lease fresh until `cancel`.
pub async fn report(
    bus: Bus,
    settings: NodeReportSettings,
    runtime_version: String,
    cancel: CancellationToken,
) {
    let node = settings.node.clone();
    let mut registered = false;
    let mut lease_created = false;
    let mut last_sent: Option<(Value, std::time::Instant)> = None;
    let mut status_tick = tokio::time::interval(settings.status_every);
    let mut lease_tick = tokio::time::interval(settings.lease_every);
    status_tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    lease_tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = status_tick.tick() => {
                let host = HostInfo::read();
                if !registered {
                    registered = register(&bus, &settings, &host, &runtime_version).await;
                    if !registered {
                        let retry = settings.register_retry.min(settings.status_every);
                        status_tick.reset_at(tokio::time::Instant::now() + retry);
                        continue;
                    }
                    lease_created = renew_lease(&bus, &settings, lease_created).await;
                    lease_tick.reset();
                }
                let status = node_status(&host, &runtime_version, now_ms());
                let due = match &last_sent {
                    None => true,
                    Some((sent, at)) => {
                        without_heartbeat(sent) != without_heartbeat(&status)
                            || at.elapsed() >= settings.report_every
                    }
                };
                if due {
                    let patch = json!({"status": status}).to_string();
                    let key = format!("null/nodepatch/{node}");
                    match call(&bus, operation::PATCH, &key, Content::string(patch), settings.call_timeout).await {
                        Ok(_) => last_sent = Some((status, std::time::Instant::now())),
                        Err(e) => tracing::debug!(node = %node, "node status not sent: {e}"),
                    }
                }
            }
            _ = lease_tick.tick(), if registered => {
                lease_created = renew_lease(&bus, &settings, lease_created).await;
            }
        }
    }
}

/// Sends the Node object; true once the cloud has it.
async fn register(
    bus: &Bus,
    settings: &NodeReportSettings,
    host: &HostInfo,
    version: &str,
) -> bool {
    let node = &settings.node;
    let object = node_object(node, host, version);
    let content = Content::json(&object).unwrap_or_else(|_| Content::null());
    match call(
        bus,
        operation::INSERT,
        &format!("null/node/{node}"),
        content,
        settings.call_timeout,
    )
    .await
    {
        Ok(_) => {
            tracing::info!(node = %node, "node registered with the cloud");
            true
        }
        // A node registered before: fine.
        Err(e) if e.contains("already exists") => true,
        Err(e) => {
            tracing::debug!(node = %node, "node not registered yet: {e}");
            false
        }
    }
}

/// A node status without its heartbeat times, which differ at every report.
fn without_heartbeat(status: &Value) -> Value {
    let mut s = status.clone();
    if let Some(conditions) = s["conditions"].as_array_mut() {
        for c in conditions {
            c["lastHeartbeatTime"] = Value::Null;
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_host_is_read_and_reported() {
        let host = HostInfo::read();
        assert!(host.cpus >= 1);
        assert!(host.memory_kib > 0, "{host:?}");
        let node = node_object("edge-1", &host, "20.10.24");
        assert_eq!(node["metadata"]["name"], "edge-1");
        assert_eq!(node["status"]["capacity"]["cpu"], host.cpus.to_string());
        assert_eq!(node["status"]["capacity"], node["status"]["allocatable"]);
        assert_eq!(
            node["status"]["nodeInfo"]["containerRuntimeVersion"],
            "docker://20.10.24"
        );
        assert!(node["metadata"]["labels"]["node-role.kubernetes.io/edge"].is_string());
    }

    #[test]
    fn lease_renew_time_is_micro_time() {
        let lease = lease_object("edge-1", 1_700_000_000_123, Duration::from_secs(40));
        assert_eq!(lease["spec"]["renewTime"], "2023-11-14T22:13:20.123000Z");
        assert_eq!(lease["spec"]["leaseDurationSeconds"], 40);
        assert_eq!(lease["metadata"]["namespace"], "kube-node-lease");
    }
}
