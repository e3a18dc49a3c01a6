//! The data behind the node server's `/stats/summary` and `/metrics/resource`: what kubelet
//! serves to metrics-server, `kubectl top` and `kubectl get --raw
//! /api/v1/nodes/<node>/proxy/stats/summary`.
//!
//! - [`node`]: the host's CPU, memory, filesystems and network, from `/proc` and `statvfs`;
//! - [`summary`]: the Summary API's types and the pods built from container samples;
//! - [`resource_metrics`]: the Prometheus page metrics-server scrapes;
//! - [`StatsCollector`]: one call gathers everything, and turns cumulative CPU counters into
//!   rates.
//!
//! # CPU rates
//!
//! `usageNanoCores` needs two readings of a counter. kubelet's cAdvisor takes them on its
//! own housekeeping clock; edged has no background sampler, so the collector keeps the
//! previous reading of the node, of each container and of each pod, and each call reports
//! the rate since then. The first call after a container (or the collector) appears reports
//! no `usageNanoCores` — the field is left out, as kubelet does before its second
//! housekeeping — rather than sleeping inside a request to take two readings. A call less
//! than [`MIN_RATE_WINDOW`] after the reading a rate was last computed from reports that
//! same rate and keeps its baseline, so two clients scraping close together do not get a
//! rate over a few milliseconds of noise. A counter that went backwards (a restarted
//! container under the same id) starts over. metrics-server is unaffected by all this: it
//! reads the cumulative counters of `/metrics/resource` and computes its own rates.

pub mod node;
pub mod resource_metrics;
pub mod summary;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::engine::{Engine, EngineError, ManagedContainer};
use node::{FsInfo, NodeStatsError};
use summary::{
    CpuStats, FsCapacity, FsStats, MemoryStats, NetworkStats, NodeStats, PodInputs, PodRef,
    RatedSample, RuntimeStats, Summary, Time,
};

/// The shortest interval a CPU rate is computed over (module docs).
pub const MIN_RATE_WINDOW: Duration = Duration::from_secs(1);

/// Why a Summary could not be gathered; the node server answers 500 and `/metrics/resource`
/// reports a scrape error.
#[derive(Debug, thiserror::Error)]
pub enum StatsError {
    /// The runtime could not list or sample the containers.
    #[error("container stats: {0}")]
    Engine(#[from] EngineError),
    /// The host's own figures could not be read.
    #[error("node stats: {0}")]
    Node(#[from] NodeStatsError),
}

/// How much a Summary holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// Everything: `/stats/summary`.
    Full,
    /// CPU and memory only, without filesystem calls (kubelet's `GetCPUAndMemoryStats`, what
    /// `/metrics/resource` and `/stats/summary?only_cpu_and_memory=true` need).
    CpuAndMemory,
}

/// The previous reading of one counter, and the rate last computed from it.
#[derive(Debug, Clone, Copy)]
struct Reading {
    at_ns: i64,
    usage: u64,
    rate: Option<u64>,
}

/// Keys of the rate cache: the node, a container by engine id, a pod by uid.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Key {
    Node,
    Container(String),
    Pod(String),
}

/// Gathers the node's Summary and keeps what CPU rates need between calls (module docs).
///
/// One collector serves every request of the node server; calls may overlap (the cache is
/// locked only to update it, never across an engine call).
pub struct StatsCollector {
    engine: Engine,
    node_name: String,
    root_dir: PathBuf,
    proc_dir: PathBuf,
    previous: Mutex<HashMap<Key, Reading>>,
}

impl std::fmt::Debug for StatsCollector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StatsCollector")
            .field("node_name", &self.node_name)
            .field("root_dir", &self.root_dir)
            .field("proc_dir", &self.proc_dir)
            .finish_non_exhaustive()
    }
}

/// Nanoseconds since the Unix epoch now.
pub(crate) fn now_ns() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

impl StatsCollector {
    /// A collector for the node `node_name` on `engine`; `root_dir` is edged's root directory
    /// (kubelet's `--root-dir`), whose filesystem is the node filesystem (`fs`) and holds the
    /// pods' volumes.
    pub fn new(engine: Engine, node_name: &str, root_dir: &Path) -> StatsCollector {
        StatsCollector {
            engine,
            node_name: node_name.to_owned(),
            root_dir: root_dir.to_owned(),
            proc_dir: PathBuf::from("/proc"),
            previous: Mutex::new(HashMap::new()),
        }
    }

    /// Reads the host's figures from `dir` instead of `/proc` (tests, or a node agent in a
    /// container with the host's `/proc` mounted elsewhere).
    pub fn with_proc_dir(mut self, dir: &Path) -> StatsCollector {
        self.proc_dir = dir.to_owned();
        self
    }

    /// The Summary of the node: the host, and a pod for each pod among `containers` (the
    /// engine's listing of the node's containers and sandboxes, e.g. [`Engine::list`]) and
    /// each of `extra_pods` (pods without engine containers, such as Wasm pods).
    pub async fn summary(
        &self,
        containers: &[ManagedContainer],
        extra_pods: &[PodRef],
        scope: Scope,
    ) -> Result<Summary, StatsError> {
        let samples = self.engine.container_stats(containers).await?;
        let proc_dir = self.proc_dir.clone();
        let root_dir = self.root_dir.clone();
        let full = scope == Scope::Full;
        let (host, node_fs) = tokio::task::spawn_blocking(move || {
            let host = node::read_host(&proc_dir)?;
            let node_fs = if full {
                existing(&root_dir).and_then(|dir| node::statvfs(dir).ok())
            } else {
                None
            };
            Ok::<_, NodeStatsError>((host, node_fs))
        })
        .await
        .map_err(|e| NodeStatsError::Read {
            path: self.proc_dir.clone(),
            source: std::io::Error::other(e),
        })??;
        let image_fs = if full { self.image_fs().await } else { None };

        let (rated, node_rate, pod_rates) = self.rates(&samples, &host, containers);
        let logs_capacity = node_fs.map(capacity);
        let image_capacity = image_fs.map(|(fs, _)| capacity(fs));
        let pods = summary::build_pods(&PodInputs {
            containers,
            samples: &rated,
            extra_pods,
            pod_nano_cores: &pod_rates,
            image_fs: image_capacity.or(logs_capacity),
            logs_fs: logs_capacity,
        });
        let time = Time::from_unix_ns(host.timestamp_ns);
        let node = NodeStats {
            node_name: self.node_name.clone(),
            system_containers: Vec::new(),
            start_time: Some(Time::from_unix_s(host.boot_time)),
            cpu: Some(CpuStats {
                time,
                usage_nano_cores: node_rate,
                usage_core_nano_seconds: Some(host.cpu_usage_core_nanos),
            }),
            memory: Some(MemoryStats {
                time,
                available_bytes: Some(host.memory.available_bytes),
                usage_bytes: Some(host.memory.usage_bytes),
                working_set_bytes: Some(host.memory.working_set_bytes),
                rss_bytes: host.memory.rss_bytes,
                page_faults: host.page_faults,
                major_page_faults: host.major_page_faults,
            }),
            network: if full {
                host.network
                    .as_ref()
                    .and_then(|n| NetworkStats::from_sample(time, n))
            } else {
                None
            },
            fs: node_fs.map(|fs| fs_stats(time, fs, fs.used_bytes)),
            runtime: image_fs.map(|(fs, images)| RuntimeStats {
                image_fs: Some(fs_stats(time, fs, images)),
            }),
        };
        Ok(Summary { node, pods })
    }

    /// The image filesystem and the bytes its images take: `statvfs` of the runtime's root
    /// directory and the sum of its images' sizes. Best effort: an engine or a directory that
    /// will not say (Docker's root is often root-only) leaves `imageFs` out rather than
    /// failing the Summary.
    async fn image_fs(&self) -> Option<(FsInfo, u64)> {
        let dir = self.engine.root_dir().await.ok()?;
        let images = self.engine.list_images().await.ok()?;
        let used = images
            .iter()
            .fold(0u64, |sum, image| sum.saturating_add(image.size));
        let fs = tokio::task::spawn_blocking(move || {
            existing(&dir).and_then(|dir| node::statvfs(dir).ok())
        })
        .await
        .ok()??;
        Some((fs, used))
    }

    /// Rates of the node, each sample and each pod, updating the cache (module docs).
    fn rates(
        &self,
        samples: &[crate::engine::ContainerStats],
        host: &node::HostSample,
        containers: &[ManagedContainer],
    ) -> (Vec<RatedSample>, Option<u64>, BTreeMap<String, u64>) {
        let mut previous = self
            .previous
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut seen: HashSet<Key> = HashSet::new();
        let mut rate = |key: Key, at_ns: i64, usage: u64| {
            let r = next_rate(previous.get(&key).copied(), at_ns, usage);
            previous.insert(key.clone(), r.0);
            seen.insert(key);
            r.1
        };
        let node_rate = rate(Key::Node, host.timestamp_ns, host.cpu_usage_core_nanos);
        let pod_of: HashMap<&str, &str> = containers
            .iter()
            .map(|c| (c.id.as_str(), c.pod_uid.as_str()))
            .collect();
        // A pod's total: the sum of its members' counters, stamped with the latest of them.
        let mut pod_totals: BTreeMap<String, (i64, u64)> = BTreeMap::new();
        let mut rated = Vec::with_capacity(samples.len());
        for s in samples {
            let nano_cores = s.cpu.and_then(|cpu| {
                if let Some(uid) = pod_of.get(s.id.as_str()) {
                    let total = pod_totals.entry((*uid).to_owned()).or_insert((0, 0));
                    total.0 = total.0.max(s.timestamp_ns);
                    total.1 = total.1.saturating_add(cpu.usage_core_nanos);
                }
                rate(
                    Key::Container(s.id.clone()),
                    s.timestamp_ns,
                    cpu.usage_core_nanos,
                )
            });
            rated.push(RatedSample {
                sample: s.clone(),
                nano_cores,
            });
        }
        let mut pod_rates = BTreeMap::new();
        for (uid, (at_ns, usage)) in pod_totals {
            if let Some(r) = rate(Key::Pod(uid.clone()), at_ns, usage) {
                pod_rates.insert(uid, r);
            }
        }
        previous.retain(|key, _| seen.contains(key));
        (rated, node_rate, pod_rates)
    }
}

/// The reading to keep and the rate to report, given the previous reading (module docs).
fn next_rate(previous: Option<Reading>, at_ns: i64, usage: u64) -> (Reading, Option<u64>) {
    let fresh = Reading {
        at_ns,
        usage,
        rate: None,
    };
    let Some(prev) = previous else {
        return (fresh, None);
    };
    if usage < prev.usage || at_ns <= prev.at_ns {
        return (fresh, None);
    }
    let window = i128::from(at_ns) - i128::from(prev.at_ns);
    if window < MIN_RATE_WINDOW.as_nanos() as i128 {
        return (prev, prev.rate);
    }
    let rate = (i128::from(usage - prev.usage) * 1_000_000_000) / window;
    let rate = u64::try_from(rate).ok();
    (Reading { at_ns, usage, rate }, rate)
}

/// `dir`, or its nearest existing ancestor (a root directory not created yet is on the
/// filesystem of its parent).
fn existing(dir: &Path) -> Option<&Path> {
    dir.ancestors().find(|p| p.exists())
}

fn capacity(fs: FsInfo) -> FsCapacity {
    FsCapacity {
        available_bytes: fs.available_bytes,
        capacity_bytes: fs.capacity_bytes,
        inodes: (fs.inodes > 0).then_some(fs.inodes),
        inodes_free: (fs.inodes > 0).then_some(fs.inodes_free),
    }
}

fn fs_stats(time: Time, fs: FsInfo, used_bytes: u64) -> FsStats {
    let known = fs.inodes > 0;
    FsStats {
        time,
        available_bytes: Some(fs.available_bytes),
        capacity_bytes: Some(fs.capacity_bytes),
        used_bytes: Some(used_bytes),
        inodes_free: known.then_some(fs.inodes_free),
        inodes: known.then_some(fs.inodes),
        inodes_used: known.then(|| fs.inodes.saturating_sub(fs.inodes_free)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECOND: i64 = 1_000_000_000;

    fn assert_send<T: Send>(_: T) {}

    /// Compiled, never run: the node server awaits these inside `Send` tasks.
    #[allow(dead_code)]
    fn futures_are_send(collector: &StatsCollector, engine: &Engine) {
        assert_send(engine.container_stats(&[]));
        assert_send(collector.summary(&[], &[], Scope::Full));
    }

    #[test]
    fn the_first_reading_has_no_rate() {
        let (r, rate) = next_rate(None, 10 * SECOND, 500);
        assert_eq!(rate, None);
        assert_eq!((r.at_ns, r.usage), (10 * SECOND, 500));
    }

    #[test]
    fn a_rate_is_usage_over_time() {
        let (r, _) = next_rate(None, 10 * SECOND, 0);
        // Half a core for two seconds.
        let (r, rate) = next_rate(Some(r), 12 * SECOND, SECOND as u64);
        assert_eq!(rate, Some(500_000_000));
        // Then idle.
        let (_, rate) = next_rate(Some(r), 14 * SECOND, SECOND as u64);
        assert_eq!(rate, Some(0));
    }

    #[test]
    fn a_reading_too_soon_repeats_the_last_rate_and_keeps_the_baseline() {
        let (r, _) = next_rate(None, 10 * SECOND, 0);
        let (r, rate) = next_rate(Some(r), 12 * SECOND, 2 * SECOND as u64);
        assert_eq!(rate, Some(1_000_000_000));
        let (kept, rate) = next_rate(Some(r), 12 * SECOND + 1_000_000, 2 * SECOND as u64 + 1);
        assert_eq!(rate, Some(1_000_000_000));
        assert_eq!(kept.at_ns, 12 * SECOND);
        // Too soon after a first reading: still nothing.
        let (first, _) = next_rate(None, 10 * SECOND, 0);
        let (_, rate) = next_rate(Some(first), 10 * SECOND + 5, 10);
        assert_eq!(rate, None);
    }

    #[test]
    fn a_counter_going_back_starts_over() {
        let (r, _) = next_rate(None, 10 * SECOND, 1000);
        let (r, rate) = next_rate(Some(r), 12 * SECOND, 10);
        assert_eq!(rate, None);
        assert_eq!(r.usage, 10);
        // A clock going back too.
        let (_, rate) = next_rate(Some(r), 11 * SECOND, 20);
        assert_eq!(rate, None);
    }

    #[test]
    fn filesystem_entries() {
        let fs = FsInfo {
            capacity_bytes: 100,
            available_bytes: 30,
            used_bytes: 60,
            inodes: 10,
            inodes_free: 4,
        };
        let s = fs_stats(Time::from_unix_s(1), fs, 60);
        assert_eq!(s.inodes_used, Some(6));
        assert_eq!(s.used_bytes, Some(60));
        let no_inodes = fs_stats(Time::from_unix_s(1), FsInfo { inodes: 0, ..fs }, 5);
        assert_eq!((no_inodes.inodes, no_inodes.inodes_used), (None, None));
        assert_eq!(
            existing(Path::new("/no/such/dir/below")),
            Some(Path::new("/"))
        );
    }
}
