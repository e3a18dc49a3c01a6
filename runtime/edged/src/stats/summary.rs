//! Kubelet's Summary API (`k8s.io/kubelet/pkg/apis/stats/v1alpha1`), what `/stats/summary`
//! answers: the JSON names are Kubernetes', optional fields are left out when unknown as Go's
//! `omitempty` does, and times are written as `metav1.Time` writes them (RFC 3339, whole
//! seconds; `null` when unknown).
//!
//! [`build_pods`] puts container samples together into pods:
//! - a pod's containers are its running app containers that have a sample; each container's
//!   `startTime` is its creation time, as cAdvisor reports it;
//! - a pod's CPU and memory are the sums over its containers *and its sandbox*: what the pod
//!   cgroup that kubelet reads holds (the pause process included); its CPU rate is computed
//!   on the pod's own total (see `StatsCollector`), so a container starting or ending does
//!   not leave the pod without one;
//! - a pod's network is its sandbox's (the namespace the containers join);
//! - a pod's `startTime` is its sandbox's creation, else its oldest container's;
//! - pods without containers of the engine (Wasm pods) get an entry with their reference
//!   only, so a client listing pods finds them.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::engine::{self, ManagedContainer};

/// A point in time, kept to the millisecond (`/metrics/resource` stamps samples with it) and
/// written in JSON as `metav1.Time` is: RFC 3339 in whole seconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Time {
    /// Milliseconds since the Unix epoch.
    pub unix_ms: i64,
}

impl Time {
    /// The time `unix_ns` nanoseconds after the epoch (what runtimes stamp samples with).
    pub fn from_unix_ns(unix_ns: i64) -> Time {
        Time {
            unix_ms: unix_ns.div_euclid(1_000_000),
        }
    }

    /// The time `unix_s` seconds after the epoch (what engines stamp creations with).
    pub fn from_unix_s(unix_s: i64) -> Time {
        Time {
            unix_ms: unix_s.saturating_mul(1000),
        }
    }
}

impl Serialize for Time {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&wedge_core::time::rfc3339_utc(self.unix_ms))
    }
}

impl<'de> Deserialize<'de> for Time {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Time, D::Error> {
        let text = String::deserialize(d)?;
        let at = wedge_cri::parse_rfc3339(&text)
            .ok_or_else(|| serde::de::Error::custom(format!("not an RFC 3339 time: {text:?}")))?;
        let unix_ms = match at.duration_since(std::time::UNIX_EPOCH) {
            Ok(d) => i64::try_from(d.as_millis()).unwrap_or(i64::MAX),
            Err(e) => -i64::try_from(e.duration().as_millis()).unwrap_or(i64::MAX),
        };
        Ok(Time { unix_ms })
    }
}

/// The whole answer of `/stats/summary`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    /// The node's own usage.
    pub node: NodeStats,
    /// One entry per pod.
    pub pods: Vec<PodStats>,
}

/// The node's usage, from the host (`node.rs`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeStats {
    /// The node's name.
    pub node_name: String,
    /// kubelet's raw system containers (`kubelet`, `runtime`, `pods`...); none here: edged
    /// does not run its own cgroups.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub system_containers: Vec<ContainerStats>,
    /// Since when the figures count: the boot.
    pub start_time: Option<Time>,
    /// CPU.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu: Option<CpuStats>,
    /// Memory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<MemoryStats>,
    /// The host's interfaces.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<NetworkStats>,
    /// The node filesystem (edged's root directory).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fs: Option<FsStats>,
    /// The runtime's image filesystem.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime: Option<RuntimeStats>,
}

/// Stats of the container runtime.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RuntimeStats {
    /// The filesystem images live on; `usedBytes` is the images' size, not the filesystem's
    /// use.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_fs: Option<FsStats>,
}

/// Which pod an entry is about.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct PodRef {
    /// The pod's name.
    pub name: String,
    /// Its namespace.
    pub namespace: String,
    /// Its uid.
    pub uid: String,
}

/// One pod's usage.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodStats {
    /// The pod.
    pub pod_ref: PodRef,
    /// When the pod's sandbox (or first container) was created; `null` when unknown.
    pub start_time: Option<Time>,
    /// Its running containers.
    pub containers: Vec<ContainerStats>,
    /// CPU of the whole pod.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu: Option<CpuStats>,
    /// Memory of the whole pod.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<MemoryStats>,
    /// The pod's network namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<NetworkStats>,
    /// Writable layers and logs of the pod's containers.
    #[serde(
        rename = "ephemeral-storage",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub ephemeral_storage: Option<FsStats>,
}

/// One container's usage.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ContainerStats {
    /// The container's name in its pod.
    pub name: String,
    /// When it was created.
    pub start_time: Time,
    /// CPU.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu: Option<CpuStats>,
    /// Memory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<MemoryStats>,
    /// Its writable layer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rootfs: Option<FsStats>,
    /// Its log files.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub logs: Option<FsStats>,
}

/// CPU usage.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CpuStats {
    /// When it was sampled.
    pub time: Time,
    /// Cores in use, in billionths, over the window since the previous sample; absent until
    /// there is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage_nano_cores: Option<u64>,
    /// CPU time used so far, nanoseconds over all cores.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage_core_nano_seconds: Option<u64>,
}

/// Memory usage.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MemoryStats {
    /// When it was sampled.
    pub time: Time,
    /// Limit minus working set; absent without a known limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub available_bytes: Option<u64>,
    /// Everything charged, page cache included.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage_bytes: Option<u64>,
    /// What cannot be reclaimed easily (usage minus inactive file pages).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub working_set_bytes: Option<u64>,
    /// Anonymous memory and swap cache.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rss_bytes: Option<u64>,
    /// Minor page faults so far.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub page_faults: Option<u64>,
    /// Major page faults so far.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub major_page_faults: Option<u64>,
}

/// Filesystem usage.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FsStats {
    /// When it was read.
    pub time: Time,
    /// Bytes free to unprivileged writers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub available_bytes: Option<u64>,
    /// Size of the filesystem.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity_bytes: Option<u64>,
    /// Bytes used by what the entry is about (the whole filesystem for the node, one
    /// container's layer for a rootfs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub used_bytes: Option<u64>,
    /// Free inodes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inodes_free: Option<u64>,
    /// Inodes of the filesystem.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inodes: Option<u64>,
    /// Inodes used by what the entry is about.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inodes_used: Option<u64>,
}

/// Network usage: the default interface's counters inline, and every interface.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NetworkStats {
    /// When it was read.
    pub time: Time,
    /// The default interface (`eth0` when there is one), inline as Kubernetes writes it.
    #[serde(flatten)]
    pub default_interface: InterfaceStats,
    /// All interfaces.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub interfaces: Vec<InterfaceStats>,
}

/// Counters of one interface.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InterfaceStats {
    /// Its name.
    pub name: String,
    /// Bytes received.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rx_bytes: Option<u64>,
    /// Receive errors.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rx_errors: Option<u64>,
    /// Bytes sent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tx_bytes: Option<u64>,
    /// Send errors.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tx_errors: Option<u64>,
}

impl NetworkStats {
    /// The Summary form of a network sample; `None` without interfaces. The default interface
    /// is the sample's first (`eth0` when present).
    pub fn from_sample(time: Time, sample: &engine::NetworkSample) -> Option<NetworkStats> {
        let interfaces: Vec<InterfaceStats> = sample
            .interfaces
            .iter()
            .map(|i| InterfaceStats {
                name: i.name.clone(),
                rx_bytes: i.rx_bytes,
                rx_errors: i.rx_errors,
                tx_bytes: i.tx_bytes,
                tx_errors: i.tx_errors,
            })
            .collect();
        Some(NetworkStats {
            time,
            default_interface: interfaces.first()?.clone(),
            interfaces,
        })
    }
}

/// A container sample with the CPU rate the collector computed for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RatedSample {
    /// The runtime's sample.
    pub sample: engine::ContainerStats,
    /// Cores in use (billionths) since the previous sample, when there was one.
    pub nano_cores: Option<u64>,
}

/// Capacity figures of a filesystem, to complete a container's `rootfs`/`logs` entries (which
/// the runtime gives only the container's use of).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FsCapacity {
    /// Bytes free.
    pub available_bytes: u64,
    /// Size.
    pub capacity_bytes: u64,
    /// Inodes.
    pub inodes: Option<u64>,
    /// Free inodes.
    pub inodes_free: Option<u64>,
}

/// What [`build_pods`] needs.
#[derive(Debug, Clone)]
pub struct PodInputs<'a> {
    /// Every container and sandbox of the node's pods, as the engine lists them.
    pub containers: &'a [ManagedContainer],
    /// Samples of the running ones, with rates.
    pub samples: &'a [RatedSample],
    /// Pods with no container on the engine (Wasm pods): listed with their reference only.
    pub extra_pods: &'a [PodRef],
    /// CPU rate of each pod's total, by pod uid (the collector's).
    pub pod_nano_cores: &'a BTreeMap<String, u64>,
    /// The image filesystem, for containers' `rootfs`.
    pub image_fs: Option<FsCapacity>,
    /// The filesystem of the pod logs, for containers' `logs`.
    pub logs_fs: Option<FsCapacity>,
}

fn fs_entry(time: Time, used: &engine::ContainerFsUsage, capacity: Option<FsCapacity>) -> FsStats {
    FsStats {
        time,
        available_bytes: capacity.map(|c| c.available_bytes),
        capacity_bytes: capacity.map(|c| c.capacity_bytes),
        used_bytes: Some(used.used_bytes),
        inodes_free: capacity.and_then(|c| c.inodes_free),
        inodes: capacity.and_then(|c| c.inodes),
        inodes_used: used.inodes_used,
    }
}

fn cpu_entry(s: &RatedSample) -> Option<CpuStats> {
    let cpu = s.sample.cpu?;
    Some(CpuStats {
        time: Time::from_unix_ns(s.sample.timestamp_ns),
        usage_nano_cores: s.nano_cores,
        usage_core_nano_seconds: Some(cpu.usage_core_nanos),
    })
}

fn memory_entry(s: &RatedSample) -> Option<MemoryStats> {
    let m = s.sample.memory?;
    Some(MemoryStats {
        time: Time::from_unix_ns(s.sample.timestamp_ns),
        available_bytes: None,
        usage_bytes: Some(m.usage_bytes),
        working_set_bytes: Some(m.working_set_bytes),
        rss_bytes: m.rss_bytes,
        page_faults: m.page_faults,
        major_page_faults: m.major_page_faults,
    })
}

/// `a + b` where either may be unknown: known figures add up, unknown ones do not count.
fn add(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.saturating_add(b)),
        (a, b) => a.or(b),
    }
}

fn later(a: Time, b: Time) -> Time {
    a.max(b)
}

/// What is summed over a pod's containers and sandbox.
#[derive(Default)]
struct PodTotals {
    cpu: Option<CpuStats>,
    memory: Option<MemoryStats>,
    ephemeral: Option<FsStats>,
}

impl PodTotals {
    fn add_usage(&mut self, cpu: Option<CpuStats>, memory: Option<MemoryStats>) {
        if let Some(c) = cpu {
            self.cpu = Some(match self.cpu {
                None => CpuStats {
                    usage_nano_cores: None,
                    ..c
                },
                Some(t) => CpuStats {
                    time: later(t.time, c.time),
                    usage_nano_cores: None,
                    usage_core_nano_seconds: add(
                        t.usage_core_nano_seconds,
                        c.usage_core_nano_seconds,
                    ),
                },
            });
        }
        if let Some(m) = memory {
            self.memory = Some(match self.memory {
                None => m,
                Some(t) => MemoryStats {
                    time: later(t.time, m.time),
                    available_bytes: None,
                    usage_bytes: add(t.usage_bytes, m.usage_bytes),
                    working_set_bytes: add(t.working_set_bytes, m.working_set_bytes),
                    rss_bytes: add(t.rss_bytes, m.rss_bytes),
                    page_faults: add(t.page_faults, m.page_faults),
                    major_page_faults: add(t.major_page_faults, m.major_page_faults),
                },
            });
        }
    }

    fn add_fs(&mut self, fs: Option<&FsStats>, capacity: Option<FsCapacity>) {
        let Some(fs) = fs else { return };
        self.ephemeral = Some(match self.ephemeral {
            None => FsStats {
                available_bytes: capacity.map(|c| c.available_bytes),
                capacity_bytes: capacity.map(|c| c.capacity_bytes),
                inodes_free: capacity.and_then(|c| c.inodes_free),
                inodes: capacity.and_then(|c| c.inodes),
                ..*fs
            },
            Some(t) => FsStats {
                time: later(t.time, fs.time),
                used_bytes: add(t.used_bytes, fs.used_bytes),
                inodes_used: add(t.inodes_used, fs.inodes_used),
                ..t
            },
        });
    }
}

/// The pods of a Summary from the engine's containers and their samples (module docs), in
/// the order namespace, name, uid.
pub fn build_pods(inputs: &PodInputs<'_>) -> Vec<PodStats> {
    let by_id: BTreeMap<&str, &RatedSample> = inputs
        .samples
        .iter()
        .map(|s| (s.sample.id.as_str(), s))
        .collect();
    let with_sandbox: BTreeSet<&str> = inputs
        .containers
        .iter()
        .filter(|c| c.sandbox)
        .map(|c| c.pod_uid.as_str())
        .collect();
    let mut pods: BTreeMap<PodRef, (PodStats, PodTotals)> = BTreeMap::new();
    for c in inputs.containers {
        let pod_ref = PodRef {
            name: c.pod_name.clone(),
            namespace: c.pod_namespace.clone(),
            uid: c.pod_uid.clone(),
        };
        let sample = by_id.get(c.id.as_str()).copied();
        let created = Time::from_unix_s(c.created);
        let (pod, totals) = pods.entry(pod_ref.clone()).or_insert_with(|| {
            (
                PodStats {
                    pod_ref,
                    start_time: None,
                    containers: Vec::new(),
                    cpu: None,
                    memory: None,
                    network: None,
                    ephemeral_storage: None,
                },
                PodTotals::default(),
            )
        });
        // The sandbox's creation starts the pod; without one (a pod of containers only, on
        // Docker with `podSandboxImage: ""`), its oldest container does.
        if c.sandbox {
            if c.state == "running" || pod.start_time.is_none() {
                pod.start_time = Some(created);
            }
        } else if pod.start_time.is_none_or(|t| created < t)
            && !with_sandbox.contains(c.pod_uid.as_str())
        {
            pod.start_time = Some(created);
        }
        let Some(sample) = sample else { continue };
        let cpu = cpu_entry(sample);
        let memory = memory_entry(sample);
        totals.add_usage(cpu, memory);
        let time = Time::from_unix_ns(sample.sample.timestamp_ns);
        if c.sandbox {
            if let Some(network) = &sample.sample.network {
                pod.network = NetworkStats::from_sample(time, network);
            }
            continue;
        }
        let rootfs = sample
            .sample
            .rootfs
            .as_ref()
            .map(|u| fs_entry(time, u, inputs.image_fs));
        let logs = sample
            .sample
            .logs
            .as_ref()
            .map(|u| fs_entry(time, u, inputs.logs_fs));
        totals.add_fs(rootfs.as_ref(), inputs.logs_fs);
        totals.add_fs(logs.as_ref(), inputs.logs_fs);
        pod.containers.push(ContainerStats {
            name: c.container.clone(),
            start_time: created,
            cpu,
            memory,
            rootfs,
            logs,
        });
    }
    for extra in inputs.extra_pods {
        pods.entry(extra.clone()).or_insert_with(|| {
            (
                PodStats {
                    pod_ref: extra.clone(),
                    start_time: None,
                    containers: Vec::new(),
                    cpu: None,
                    memory: None,
                    network: None,
                    ephemeral_storage: None,
                },
                PodTotals::default(),
            )
        });
    }
    pods.into_values()
        .map(|(mut pod, totals)| {
            pod.containers.sort_by(|a, b| a.name.cmp(&b.name));
            pod.cpu = totals.cpu.map(|c| CpuStats {
                usage_nano_cores: inputs.pod_nano_cores.get(&pod.pod_ref.uid).copied(),
                ..c
            });
            pod.memory = totals.memory;
            pod.ephemeral_storage = totals.ephemeral;
            pod
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::{
        ContainerFsUsage, CpuSample, InterfaceSample, MemorySample, NetworkSample,
    };

    fn container(id: &str, pod: &str, name: &str, sandbox: bool, created: i64) -> ManagedContainer {
        ManagedContainer {
            id: id.to_owned(),
            pod_namespace: "default".to_owned(),
            pod_name: pod.to_owned(),
            pod_uid: format!("uid-{pod}"),
            container: name.to_owned(),
            hash: String::new(),
            restart_count: 0,
            state: "running".to_owned(),
            created,
            sandbox,
            sandbox_id: None,
        }
    }

    fn sample(id: &str, cpu: u64, ws: u64, nano_cores: Option<u64>) -> RatedSample {
        RatedSample {
            sample: engine::ContainerStats {
                id: id.to_owned(),
                sandbox: false,
                timestamp_ns: 1_764_180_000_123_000_000,
                cpu: Some(CpuSample {
                    usage_core_nanos: cpu,
                }),
                memory: Some(MemorySample {
                    usage_bytes: ws + 100,
                    working_set_bytes: ws,
                    rss_bytes: Some(ws / 2),
                    page_faults: None,
                    major_page_faults: None,
                }),
                rootfs: None,
                logs: None,
                network: None,
            },
            nano_cores,
        }
    }

    #[test]
    fn times_are_whole_seconds_and_null_when_unknown() {
        let t = Time::from_unix_ns(1_764_180_000_999_000_000);
        assert_eq!(t.unix_ms, 1_764_180_000_999);
        assert_eq!(
            serde_json::to_string(&t).unwrap(),
            "\"2025-11-26T18:00:00Z\""
        );
        let back: Time = serde_json::from_str("\"2025-11-26T18:00:00Z\"").unwrap();
        assert_eq!(back, Time::from_unix_s(1_764_180_000));
        assert!(serde_json::from_str::<Time>("\"yesterday\"").is_err());
        let pod = PodStats {
            pod_ref: PodRef {
                name: "w".to_owned(),
                namespace: "default".to_owned(),
                uid: "u".to_owned(),
            },
            start_time: None,
            containers: Vec::new(),
            cpu: None,
            memory: None,
            network: None,
            ephemeral_storage: None,
        };
        assert_eq!(
            serde_json::to_value(&pod).unwrap(),
            serde_json::json!({
                "podRef": {"name": "w", "namespace": "default", "uid": "u"},
                "startTime": null,
                "containers": []
            })
        );
    }

    #[test]
    fn field_names_are_kubernetes() {
        let t = Time::from_unix_s(1_764_180_000);
        let fs = FsStats {
            time: t,
            available_bytes: Some(1),
            capacity_bytes: Some(2),
            used_bytes: Some(3),
            inodes_free: Some(4),
            inodes: Some(5),
            inodes_used: Some(6),
        };
        let summary = Summary {
            node: NodeStats {
                node_name: "edge-1".to_owned(),
                system_containers: Vec::new(),
                start_time: Some(t),
                cpu: Some(CpuStats {
                    time: t,
                    usage_nano_cores: Some(7),
                    usage_core_nano_seconds: Some(8),
                }),
                memory: Some(MemoryStats {
                    time: t,
                    available_bytes: Some(9),
                    usage_bytes: Some(10),
                    working_set_bytes: Some(11),
                    rss_bytes: Some(12),
                    page_faults: Some(13),
                    major_page_faults: Some(14),
                }),
                network: NetworkStats::from_sample(
                    t,
                    &NetworkSample {
                        interfaces: vec![InterfaceSample {
                            name: "eth0".to_owned(),
                            rx_bytes: Some(15),
                            rx_errors: Some(16),
                            tx_bytes: Some(17),
                            tx_errors: Some(18),
                        }],
                    },
                ),
                fs: Some(fs),
                runtime: Some(RuntimeStats { image_fs: Some(fs) }),
            },
            pods: vec![PodStats {
                pod_ref: PodRef {
                    name: "web".to_owned(),
                    namespace: "default".to_owned(),
                    uid: "u1".to_owned(),
                },
                start_time: Some(t),
                containers: vec![ContainerStats {
                    name: "nginx".to_owned(),
                    start_time: t,
                    cpu: None,
                    memory: None,
                    rootfs: Some(fs),
                    logs: Some(fs),
                }],
                cpu: None,
                memory: None,
                network: None,
                ephemeral_storage: Some(fs),
            }],
        };
        let json = serde_json::to_value(&summary).unwrap();
        let time = "2025-11-26T18:00:00Z";
        let fs_json = serde_json::json!({
            "time": time, "availableBytes": 1, "capacityBytes": 2, "usedBytes": 3,
            "inodesFree": 4, "inodes": 5, "inodesUsed": 6
        });
        let eth0 = serde_json::json!({
            "name": "eth0", "rxBytes": 15, "rxErrors": 16, "txBytes": 17, "txErrors": 18
        });
        assert_eq!(
            json,
            serde_json::json!({
                "node": {
                    "nodeName": "edge-1",
                    "startTime": time,
                    "cpu": {"time": time, "usageNanoCores": 7, "usageCoreNanoSeconds": 8},
                    "memory": {
                        "time": time, "availableBytes": 9, "usageBytes": 10,
                        "workingSetBytes": 11, "rssBytes": 12, "pageFaults": 13,
                        "majorPageFaults": 14
                    },
                    "network": {
                        "time": time, "name": "eth0", "rxBytes": 15, "rxErrors": 16,
                        "txBytes": 17, "txErrors": 18, "interfaces": [eth0]
                    },
                    "fs": fs_json,
                    "runtime": {"imageFs": fs_json}
                },
                "pods": [{
                    "podRef": {"name": "web", "namespace": "default", "uid": "u1"},
                    "startTime": time,
                    "containers": [{
                        "name": "nginx", "startTime": time, "rootfs": fs_json, "logs": fs_json
                    }],
                    "ephemeral-storage": fs_json
                }]
            })
        );
        // What we write reads back as the same Summary (a client's view).
        let back: Summary = serde_json::from_value(json).unwrap();
        assert_eq!(back, summary);
    }

    #[test]
    fn pods_sum_their_containers_and_sandbox() {
        let containers = [
            container("s1", "web", "POD", true, 1000),
            container("c1", "web", "nginx", false, 1001),
            container("c2", "web", "sidecar", false, 1002),
            // Stopped: listed, no sample, not among the pod's containers.
            ManagedContainer {
                state: "exited".to_owned(),
                ..container("c3", "web", "init", false, 990)
            },
            container("c4", "db", "pg", false, 2000),
        ];
        let mut sandbox = sample("s1", 10, 1000, Some(1));
        sandbox.sample.sandbox = true;
        sandbox.sample.network = Some(NetworkSample {
            interfaces: vec![InterfaceSample {
                name: "eth0".to_owned(),
                rx_bytes: Some(5),
                ..Default::default()
            }],
        });
        let mut c1 = sample("c1", 100, 10_000, Some(50));
        c1.sample.rootfs = Some(ContainerFsUsage {
            used_bytes: 4096,
            inodes_used: Some(3),
        });
        c1.sample.logs = Some(ContainerFsUsage {
            used_bytes: 100,
            inodes_used: Some(1),
        });
        let samples = [
            sandbox,
            c1,
            sample("c2", 200, 20_000, None),
            sample("c4", 7, 70, None),
        ];
        let extra = [PodRef {
            name: "mapper".to_owned(),
            namespace: "default".to_owned(),
            uid: "uid-mapper".to_owned(),
        }];
        let rates = BTreeMap::from([("uid-web".to_owned(), 77)]);
        let capacity = FsCapacity {
            available_bytes: 1 << 30,
            capacity_bytes: 1 << 32,
            inodes: Some(1000),
            inodes_free: Some(900),
        };
        let pods = build_pods(&PodInputs {
            containers: &containers,
            samples: &samples,
            extra_pods: &extra,
            pod_nano_cores: &rates,
            image_fs: Some(capacity),
            logs_fs: Some(capacity),
        });
        let names: Vec<&str> = pods.iter().map(|p| p.pod_ref.name.as_str()).collect();
        assert_eq!(names, ["db", "mapper", "web"]);
        let web = &pods[2];
        assert_eq!(web.start_time, Some(Time::from_unix_s(1000)));
        let container_names: Vec<&str> = web.containers.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(container_names, ["nginx", "sidecar"]);
        let cpu = web.cpu.unwrap();
        assert_eq!(cpu.usage_core_nano_seconds, Some(310));
        assert_eq!(cpu.usage_nano_cores, Some(77));
        let memory = web.memory.unwrap();
        assert_eq!(memory.working_set_bytes, Some(31_000));
        assert_eq!(memory.usage_bytes, Some(31_300));
        assert_eq!(memory.rss_bytes, Some(15_500));
        assert_eq!(memory.page_faults, None);
        assert_eq!(
            web.network.as_ref().unwrap().default_interface.rx_bytes,
            Some(5)
        );
        let nginx = &web.containers[0];
        assert_eq!(nginx.cpu.unwrap().usage_nano_cores, Some(50));
        assert_eq!(nginx.start_time, Time::from_unix_s(1001));
        assert_eq!(nginx.rootfs.unwrap().used_bytes, Some(4096));
        assert_eq!(nginx.rootfs.unwrap().capacity_bytes, Some(1 << 32));
        let ephemeral = web.ephemeral_storage.unwrap();
        assert_eq!(ephemeral.used_bytes, Some(4196));
        assert_eq!(ephemeral.inodes_used, Some(4));
        assert!(web.containers[1].cpu.unwrap().usage_nano_cores.is_none());
        // A pod without a sandbox starts with its oldest container; one without a rate has
        // none.
        let db = &pods[0];
        assert_eq!(db.start_time, Some(Time::from_unix_s(2000)));
        assert!(db.cpu.unwrap().usage_nano_cores.is_none());
        assert!(db.ephemeral_storage.is_none());
        // The Wasm pod: its reference only.
        let mapper = &pods[1];
        assert!(
            mapper.containers.is_empty() && mapper.cpu.is_none() && mapper.start_time.is_none()
        );
    }
}
