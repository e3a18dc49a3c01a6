//! One usage sample of each running container and sandbox, from whichever runtime is behind
//! the [`Engine`](super::Engine): the raw material of kubelet's Summary API and of
//! `/metrics/resource` (see `crate::stats`, which turns samples into rates and pods).
//!
//! - Docker: `GET /containers/<id>/stats?stream=false&one-shot=true` for each running
//!   container, at most [`DOCKER_CONCURRENCY`] at a time. `one-shot` (API 1.41+) takes the
//!   engine's next reading instead of waiting for two (the CPU rate is the caller's, from
//!   successive calls); the sample is stamped when it arrives. The memory keys differ by cgroup version: v1 has
//!   `total_inactive_file`, `total_rss`, `total_pgfault`, `total_pgmajfault`; v2 has
//!   `inactive_file`, `anon`, `pgfault`, `pgmajfault`. The working set is kubelet's
//!   `usage - inactive_file`. Docker's writable-layer size (`SizeRw`) costs a walk of the
//!   layer and is not taken.
//! - CRI: one `ListContainerStats` for the app containers (CPU, memory, writable layer) and,
//!   when sandboxes are asked for, one `ListPodSandboxStats` for the sandboxes (their own
//!   CPU and memory, and the pod's network). A runtime that does not serve the latter, or
//!   refuses it (containerd 1.6 fails the whole call with "cgroupPath is empty" as soon as
//!   one sandbox was run without `linux.cgroup_parent`), leaves the sandboxes without a
//!   sample: their pods are the sums of their containers. Container log usage is the size
//!   of the container's directory under the pod log directory (kubelet's layout).
//!
//! A container that is gone between the listing and its sample is skipped, not an error.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bollard::query_parameters::StatsOptions;
use futures_util::StreamExt;
use wedge_cri::v1 as cri;

use super::{Backend, EngineError, EngineOptions, ManagedContainer};

/// How many Docker stats requests run at once. A `one-shot` request is cheap for the engine
/// (it subscribes to the container's stats publisher) but waits for that publisher's next
/// tick, up to a second on Docker 20.10 (measured: 0.05 s for the first request of a
/// container, 0.99 s for the next; 2 s without `one-shot`). Every container's publisher ticks
/// on the same clock, so requests in parallel share the wait: this bound lets a node's pods
/// be sampled in about a second without opening one connection per container.
pub const DOCKER_CONCURRENCY: usize = 16;

/// How long one runtime stats request may take before the whole sample fails: a stuck engine
/// must not stall the HTTP handler that asked.
pub const STATS_TIMEOUT: Duration = Duration::from_secs(10);

/// One usage sample of a running container or sandbox.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerStats {
    /// The engine id: the key the caller matches against its [`ManagedContainer`] list and
    /// keeps its previous sample under.
    pub id: String,
    /// A pod's sandbox rather than an app container: its usage counts towards the pod but it
    /// is not listed among the pod's containers.
    pub sandbox: bool,
    /// When the sample was taken, nanoseconds since the Unix epoch (the runtime's stamp when it
    /// gives one, the local clock otherwise): the denominator of CPU rates.
    pub timestamp_ns: i64,
    /// CPU usage, when the runtime reported it.
    pub cpu: Option<CpuSample>,
    /// Memory usage, when the runtime reported it.
    pub memory: Option<MemorySample>,
    /// The writable layer's usage, where the runtime tells it cheaply (CRI).
    pub rootfs: Option<ContainerFsUsage>,
    /// The container's log files, where they live in kubelet's layout (CRI).
    pub logs: Option<ContainerFsUsage>,
    /// The network of a sandbox (the pod's network namespace).
    pub network: Option<NetworkSample>,
}

/// Cumulative CPU usage of a container.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CpuSample {
    /// CPU time used since the container started, in nanoseconds summed over cores
    /// (Summary's `usageCoreNanoSeconds`). The rate is the caller's to compute: containerd's
    /// own `usage_nano_cores` is 0 on its first reading and otherwise spans whatever window
    /// its previous caller left.
    pub usage_core_nanos: u64,
}

/// Memory usage of a container, in kubelet's terms.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemorySample {
    /// All memory charged to the container, page cache included.
    pub usage_bytes: u64,
    /// `usage - inactive_file`: what cannot be reclaimed easily, the figure evictions and
    /// `kubectl top` use.
    pub working_set_bytes: u64,
    /// Anonymous memory and swap cache, when the runtime reports it.
    pub rss_bytes: Option<u64>,
    /// Cumulative minor page faults, when reported.
    pub page_faults: Option<u64>,
    /// Cumulative major page faults, when reported.
    pub major_page_faults: Option<u64>,
}

/// Bytes (and inodes) a container uses on a filesystem.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ContainerFsUsage {
    /// Bytes used.
    pub used_bytes: u64,
    /// Inodes used, when known.
    pub inodes_used: Option<u64>,
}

/// Network counters of a pod's network namespace.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct NetworkSample {
    /// Every interface but loopback, `eth0` (the pod's default interface) first when present.
    pub interfaces: Vec<InterfaceSample>,
}

/// Counters of one network interface.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct InterfaceSample {
    /// The interface's name (`eth0`).
    pub name: String,
    /// Bytes received.
    pub rx_bytes: Option<u64>,
    /// Receive errors.
    pub rx_errors: Option<u64>,
    /// Bytes sent.
    pub tx_bytes: Option<u64>,
    /// Send errors.
    pub tx_errors: Option<u64>,
}

/// Nanoseconds since the Unix epoch now.
fn now_ns() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

fn timed_out(what: String) -> EngineError {
    EngineError::Call {
        what,
        source: Box::new(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            format!("no answer within {STATS_TIMEOUT:?}"),
        )),
    }
}

/// Samples the running ones among `containers` on `backend` (module docs).
pub(super) async fn collect(
    backend: &Backend,
    options: &EngineOptions,
    containers: &[ManagedContainer],
) -> Result<Vec<ContainerStats>, EngineError> {
    let running: Vec<&ManagedContainer> =
        containers.iter().filter(|c| c.state == "running").collect();
    if running.is_empty() {
        return Ok(Vec::new());
    }
    match backend {
        Backend::Docker(e) => docker(e.docker(), &running).await,
        Backend::Cri(e) => cri_stats(e.client(), &options.pod_logs_dir, &running).await,
    }
}

async fn docker(
    docker: &bollard::Docker,
    running: &[&ManagedContainer],
) -> Result<Vec<ContainerStats>, EngineError> {
    // Tasks over owned data (the client is a handle): the future stays `Send` for the HTTP
    // server that awaits it, which a stream of borrowing closures would not be.
    let mut tasks = tokio::task::JoinSet::new();
    let mut out = Vec::with_capacity(running.len());
    let mut first_error = None;
    for c in running {
        while tasks.len() >= DOCKER_CONCURRENCY {
            collect_one(tasks.join_next().await, &mut out, &mut first_error);
        }
        let (docker, id, sandbox) = (docker.clone(), c.id.clone(), c.sandbox);
        tasks.spawn(async move { docker_one(&docker, id, sandbox).await });
    }
    while let Some(done) = tasks.join_next().await {
        collect_one(Some(done), &mut out, &mut first_error);
    }
    match first_error {
        Some(e) => Err(e),
        None => Ok(out),
    }
}

/// Files one finished Docker sample: kept, skipped (gone), or the first error.
fn collect_one(
    done: Option<Result<Result<Option<ContainerStats>, EngineError>, tokio::task::JoinError>>,
    out: &mut Vec<ContainerStats>,
    first_error: &mut Option<EngineError>,
) {
    let error = match done {
        None | Some(Ok(Ok(None))) => return,
        Some(Ok(Ok(Some(sample)))) => {
            out.push(sample);
            return;
        }
        Some(Ok(Err(e))) => e,
        Some(Err(e)) => EngineError::Call {
            what: "a container stats task".to_owned(),
            source: Box::new(e),
        },
    };
    first_error.get_or_insert(error);
}

async fn docker_one(
    docker: &bollard::Docker,
    id: String,
    sandbox: bool,
) -> Result<Option<ContainerStats>, EngineError> {
    let options = StatsOptions {
        stream: false,
        one_shot: true,
    };
    let what = || format!("stats of container {id}");
    let mut answers = docker.stats(&id, Some(options));
    let answer = match tokio::time::timeout(STATS_TIMEOUT, answers.next()).await {
        Err(_) => return Err(timed_out(what())),
        Ok(None) => return Ok(None),
        Ok(Some(Err(bollard::errors::Error::DockerResponseServerError {
            status_code: 404,
            ..
        }))) => return Ok(None),
        Ok(Some(Err(e))) => {
            return Err(EngineError::Call {
                what: what(),
                source: Box::new(e),
            });
        }
        Ok(Some(Ok(answer))) => answer,
    };
    let timestamp_ns = now_ns();
    let cpu = answer
        .cpu_stats
        .and_then(|s| s.cpu_usage)
        .and_then(|u| u.total_usage)
        .map(|usage_core_nanos| CpuSample { usage_core_nanos });
    let memory = answer.memory_stats.and_then(|m| {
        let stats = m.stats.unwrap_or_default();
        m.usage.map(|usage| docker_memory(usage, &stats))
    });
    // A container stopped since the listing answers with empty figures.
    if cpu.is_none() && memory.is_none() {
        return Ok(None);
    }
    let network = sandbox
        .then(|| docker_network(answer.networks.unwrap_or_default()))
        .filter(|n| !n.interfaces.is_empty());
    Ok(Some(ContainerStats {
        id,
        sandbox,
        timestamp_ns,
        cpu,
        memory,
        rootfs: None,
        logs: None,
        network,
    }))
}

/// Docker's `memory_stats` in kubelet's terms, for either cgroup version (module docs).
fn docker_memory(usage: u64, stats: &HashMap<String, u64>) -> MemorySample {
    // cgroup v1 names the hierarchical figures `total_*`; v2 has only the plain names (and
    // on v1 the plain ones count the cgroup alone, without children).
    let key = |v1: &str, v2: &str| stats.get(v1).or_else(|| stats.get(v2)).copied();
    let inactive_file = key("total_inactive_file", "inactive_file").unwrap_or(0);
    MemorySample {
        usage_bytes: usage,
        working_set_bytes: usage.saturating_sub(inactive_file),
        rss_bytes: key("total_rss", "anon"),
        page_faults: key("total_pgfault", "pgfault"),
        major_page_faults: key("total_pgmajfault", "pgmajfault"),
    }
}

/// Docker's `networks` map: loopback never appears; `eth0` first.
fn docker_network(
    networks: HashMap<String, bollard::models::ContainerNetworkStats>,
) -> NetworkSample {
    let mut interfaces: Vec<InterfaceSample> = networks
        .into_iter()
        .map(|(name, n)| InterfaceSample {
            name,
            rx_bytes: n.rx_bytes,
            rx_errors: n.rx_errors,
            tx_bytes: n.tx_bytes,
            tx_errors: n.tx_errors,
        })
        .collect();
    sort_interfaces(&mut interfaces);
    NetworkSample { interfaces }
}

/// `eth0` (kubelet's default interface name) first, the rest by name.
fn sort_interfaces(interfaces: &mut [InterfaceSample]) {
    interfaces.sort_by(|a, b| (a.name != "eth0", &a.name).cmp(&(b.name != "eth0", &b.name)));
}

async fn cri_stats(
    client: &wedge_cri::Cri,
    pod_logs_dir: &Path,
    running: &[&ManagedContainer],
) -> Result<Vec<ContainerStats>, EngineError> {
    let wanted_containers: HashSet<&str> = running
        .iter()
        .filter(|c| !c.sandbox)
        .map(|c| c.id.as_str())
        .collect();
    let wanted_sandboxes: HashSet<&str> = running
        .iter()
        .filter(|c| c.sandbox)
        .map(|c| c.id.as_str())
        .collect();
    let mut out = Vec::with_capacity(running.len());
    if !wanted_containers.is_empty() {
        let listed = tokio::time::timeout(STATS_TIMEOUT, client.list_container_stats(None))
            .await
            .map_err(|_| timed_out("list container stats".to_owned()))?
            .map_err(|e| EngineError::Call {
                what: "list container stats".to_owned(),
                source: Box::new(e),
            })?;
        for s in listed {
            let Some(id) = s.attributes.as_ref().map(|a| a.id.as_str()) else {
                continue;
            };
            if wanted_containers.contains(id)
                && let Some(sample) = cri_container(&s)
            {
                out.push(sample);
            }
        }
        let logs: Vec<(usize, PathBuf)> = out
            .iter()
            .enumerate()
            .filter_map(|(i, s)| {
                let c = running.iter().find(|c| c.id == s.id)?;
                Some((i, log_dir(pod_logs_dir, c)))
            })
            .collect();
        let sizes = tokio::task::spawn_blocking(move || {
            logs.into_iter()
                .map(|(i, dir)| (i, dir_usage(&dir)))
                .collect::<Vec<_>>()
        })
        .await
        .unwrap_or_default();
        for (i, usage) in sizes {
            if let Some(sample) = out.get_mut(i) {
                sample.logs = usage;
            }
        }
    }
    if !wanted_sandboxes.is_empty() {
        match tokio::time::timeout(STATS_TIMEOUT, client.list_pod_sandbox_stats(None)).await {
            Ok(Ok(listed)) => {
                for s in listed {
                    let Some(id) = s.attributes.as_ref().map(|a| a.id.clone()) else {
                        continue;
                    };
                    if wanted_sandboxes.contains(id.as_str())
                        && let Some(sample) = cri_sandbox(id, s.linux.as_ref())
                    {
                        out.push(sample);
                    }
                }
            }
            // Not served (Unimplemented), or refused as a whole because one sandbox has no
            // cgroup (containerd 1.6 without `linux.cgroup_parent`: "cgroupPath is empty"):
            // the pods are then the sums of their containers, without network figures.
            Ok(Err(e)) => {
                tracing::debug!("pod sandbox stats unavailable, pods summed from containers: {e}");
            }
            Err(_) => {
                tracing::debug!("pod sandbox stats: no answer within {STATS_TIMEOUT:?}");
            }
        }
    }
    Ok(out)
}

/// The pod's log directory of `c`'s container: `<dir>/<ns>_<pod>_<uid>/<container>`.
fn log_dir(pod_logs_dir: &Path, c: &ManagedContainer) -> PathBuf {
    pod_logs_dir
        .join(format!("{}_{}_{}", c.pod_namespace, c.pod_name, c.pod_uid))
        .join(&c.container)
}

/// Bytes and files directly in `dir` (a container's log directory is flat); `None` when it
/// cannot be read.
fn dir_usage(dir: &Path) -> Option<ContainerFsUsage> {
    let mut used = 0u64;
    let mut files = 0u64;
    for entry in std::fs::read_dir(dir).ok()?.flatten() {
        if let Ok(meta) = entry.metadata() {
            used = used.saturating_add(meta.len());
            files += 1;
        }
    }
    Some(ContainerFsUsage {
        used_bytes: used,
        inodes_used: Some(files),
    })
}

fn value(v: Option<&cri::UInt64Value>) -> Option<u64> {
    v.map(|v| v.value)
}

/// CRI's memory usage; `None` without a working set (a runtime that could not read the
/// cgroup sends an empty message).
fn cri_memory(m: &cri::MemoryUsage) -> Option<MemorySample> {
    let working_set_bytes = value(m.working_set_bytes.as_ref())?;
    Some(MemorySample {
        usage_bytes: value(m.usage_bytes.as_ref()).unwrap_or(working_set_bytes),
        working_set_bytes,
        rss_bytes: value(m.rss_bytes.as_ref()),
        page_faults: value(m.page_faults.as_ref()),
        major_page_faults: value(m.major_page_faults.as_ref()),
    })
}

fn cri_cpu(c: &cri::CpuUsage) -> Option<CpuSample> {
    Some(CpuSample {
        usage_core_nanos: value(c.usage_core_nano_seconds.as_ref())?,
    })
}

/// The runtime's stamp of a sample, or now.
fn stamp(candidates: &[i64]) -> i64 {
    candidates
        .iter()
        .copied()
        .find(|t| *t > 0)
        .unwrap_or_else(now_ns)
}

/// One `ListContainerStats` entry; `None` when it carries neither CPU nor memory.
fn cri_container(s: &cri::ContainerStats) -> Option<ContainerStats> {
    let cpu = s.cpu.as_ref().and_then(cri_cpu);
    let memory = s.memory.as_ref().and_then(cri_memory);
    if cpu.is_none() && memory.is_none() {
        return None;
    }
    let rootfs = s.writable_layer.as_ref().and_then(|w| {
        Some(ContainerFsUsage {
            used_bytes: value(w.used_bytes.as_ref())?,
            inodes_used: value(w.inodes_used.as_ref()),
        })
    });
    Some(ContainerStats {
        id: s.attributes.as_ref()?.id.clone(),
        sandbox: false,
        timestamp_ns: stamp(&[
            s.cpu.as_ref().map_or(0, |c| c.timestamp),
            s.memory.as_ref().map_or(0, |m| m.timestamp),
        ]),
        cpu,
        memory,
        rootfs,
        logs: None,
        network: None,
    })
}

/// One `ListPodSandboxStats` entry as the sandbox's sample.
fn cri_sandbox(id: String, linux: Option<&cri::LinuxPodSandboxStats>) -> Option<ContainerStats> {
    let linux = linux?;
    let cpu = linux.cpu.as_ref().and_then(cri_cpu);
    let memory = linux.memory.as_ref().and_then(cri_memory);
    let network = linux.network.as_ref().map(|n| {
        let iface = |i: &cri::NetworkInterfaceUsage| InterfaceSample {
            name: i.name.clone(),
            rx_bytes: value(i.rx_bytes.as_ref()),
            rx_errors: value(i.rx_errors.as_ref()),
            tx_bytes: value(i.tx_bytes.as_ref()),
            tx_errors: value(i.tx_errors.as_ref()),
        };
        let mut interfaces: Vec<InterfaceSample> = n.interfaces.iter().map(iface).collect();
        if let Some(default) = n.default_interface.as_ref()
            && !interfaces.iter().any(|i| i.name == default.name)
        {
            interfaces.push(iface(default));
        }
        interfaces.retain(|i| !i.name.is_empty() && i.name != "lo");
        sort_interfaces(&mut interfaces);
        NetworkSample { interfaces }
    });
    let network = network.filter(|n| !n.interfaces.is_empty());
    if cpu.is_none() && memory.is_none() && network.is_none() {
        return None;
    }
    Some(ContainerStats {
        id,
        sandbox: true,
        timestamp_ns: stamp(&[
            linux.cpu.as_ref().map_or(0, |c| c.timestamp),
            linux.memory.as_ref().map_or(0, |m| m.timestamp),
            linux.network.as_ref().map_or(0, |n| n.timestamp),
        ]),
        cpu,
        memory,
        rootfs: None,
        logs: None,
        network,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stats(pairs: &[(&str, u64)]) -> HashMap<String, u64> {
        pairs.iter().map(|(k, v)| ((*k).to_owned(), *v)).collect()
    }

    #[test]
    fn docker_memory_on_cgroup_v1_uses_the_hierarchical_keys() {
        // The figures of a busybox container on this host's cgroup v1 Docker 20.10.
        let m = docker_memory(
            1_241_088,
            &stats(&[
                ("inactive_file", 4096),
                ("total_inactive_file", 8192),
                ("rss", 49152),
                ("total_rss", 53248),
                ("total_pgfault", 1191),
                ("total_pgmajfault", 1),
            ]),
        );
        assert_eq!(m.usage_bytes, 1_241_088);
        assert_eq!(m.working_set_bytes, 1_241_088 - 8192);
        assert_eq!(m.rss_bytes, Some(53248));
        assert_eq!(m.page_faults, Some(1191));
        assert_eq!(m.major_page_faults, Some(1));
    }

    #[test]
    fn docker_memory_on_cgroup_v2_uses_the_plain_keys() {
        let m = docker_memory(
            10_000,
            &stats(&[
                ("inactive_file", 3000),
                ("anon", 5000),
                ("pgfault", 7),
                ("pgmajfault", 0),
            ]),
        );
        assert_eq!(m.working_set_bytes, 7000);
        assert_eq!(m.rss_bytes, Some(5000));
        assert_eq!((m.page_faults, m.major_page_faults), (Some(7), Some(0)));
        // More inactive file pages than usage (the counters are read apart) is no underflow.
        let m = docker_memory(10, &stats(&[("inactive_file", 30)]));
        assert_eq!(m.working_set_bytes, 0);
        assert_eq!(m.rss_bytes, None);
    }

    #[test]
    fn eth0_comes_first() {
        let mut interfaces: Vec<InterfaceSample> = ["net1", "eth0", "abc"]
            .iter()
            .map(|n| InterfaceSample {
                name: (*n).to_owned(),
                ..Default::default()
            })
            .collect();
        sort_interfaces(&mut interfaces);
        let names: Vec<&str> = interfaces.iter().map(|i| i.name.as_str()).collect();
        assert_eq!(names, ["eth0", "abc", "net1"]);
    }

    #[test]
    fn empty_cri_stats_are_no_sample() {
        let empty = cri::ContainerStats {
            attributes: Some(cri::ContainerAttributes {
                id: "c1".to_owned(),
                ..Default::default()
            }),
            cpu: Some(cri::CpuUsage::default()),
            memory: Some(cri::MemoryUsage::default()),
            writable_layer: None,
        };
        assert!(cri_container(&empty).is_none());
        let full = cri::ContainerStats {
            cpu: Some(cri::CpuUsage {
                timestamp: 42,
                usage_core_nano_seconds: Some(cri::UInt64Value { value: 5 }),
                usage_nano_cores: None,
            }),
            memory: Some(cri::MemoryUsage {
                working_set_bytes: Some(cri::UInt64Value { value: 9 }),
                ..Default::default()
            }),
            ..empty
        };
        let s = cri_container(&full).unwrap();
        assert_eq!(s.timestamp_ns, 42);
        assert_eq!(s.cpu.unwrap().usage_core_nanos, 5);
        let m = s.memory.unwrap();
        assert_eq!((m.usage_bytes, m.working_set_bytes), (9, 9));
    }
}
