//! The node's own usage, read from the host: what kubelet takes from cAdvisor's root container.
//!
//! - CPU: the `cpu` line of `/proc/stat`, busy time (`user + nice + system + irq + softirq +
//!   steal`; `guest` is already inside `user`) in clock ticks turned into nanoseconds. It
//!   needs no cgroup file and reads the same on cgroup v1 and v2; its resolution is a tick
//!   (10 ms at the usual `USER_HZ` of 100), plenty for a counter scraped every few seconds.
//! - Memory from `/proc/meminfo`: `workingSetBytes = MemTotal - MemAvailable` and
//!   `availableBytes = MemAvailable`, the same figure the node's eviction signal
//!   `memory.available` is read from (`node/pressure.rs`), so the Summary and the node's
//!   pressure conditions never disagree; `usageBytes = MemTotal - MemFree` (page cache
//!   included, as a cgroup's usage is); `rssBytes = AnonPages`; page faults from
//!   `/proc/vmstat`.
//! - Filesystems: `statvfs` of edged's root directory (the node filesystem) and of the
//!   runtime's image directory.
//! - Network: `/proc/net/dev` without loopback and container-side devices (`veth*`,
//!   `docker*`), the interfaces cAdvisor leaves out of the machine's figures.
//! - Start time: `btime` of `/proc/stat`, the boot.

use std::path::{Path, PathBuf};

use crate::engine::{InterfaceSample, NetworkSample};

/// Why a host file could not be used.
#[derive(Debug, thiserror::Error)]
pub enum NodeStatsError {
    /// A file under `/proc` could not be read.
    #[error("reading {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// A file had no line or field this module needs: a kernel whose format we do not know.
    #[error("{path}: no {what}")]
    Format {
        /// The file.
        path: &'static str,
        /// What was missing.
        what: &'static str,
    },
    /// `statvfs` failed.
    #[error("statvfs {path}: {source}")]
    Statvfs {
        /// The directory.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
}

/// The `cpu` and `btime` lines of `/proc/stat`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcStat {
    /// Busy clock ticks summed over every CPU since boot (module docs).
    pub busy_ticks: u64,
    /// Boot time, Unix seconds (`btime`).
    pub boot_time: i64,
}

/// Parses `/proc/stat` (`proc(5)`).
pub fn parse_proc_stat(text: &str) -> Result<ProcStat, NodeStatsError> {
    let format = |what| NodeStatsError::Format {
        path: "/proc/stat",
        what,
    };
    let cpu = text
        .lines()
        .find_map(|l| l.strip_prefix("cpu "))
        .ok_or(format("cpu line"))?;
    let fields: Vec<u64> = cpu
        .split_whitespace()
        .map(str::parse)
        .collect::<Result<_, _>>()
        .map_err(|_| format("numeric cpu fields"))?;
    // user nice system idle iowait irq softirq steal [guest guest_nice]
    let field = |i: usize| fields.get(i).copied().unwrap_or(0);
    if fields.len() < 4 {
        return Err(format("user, nice, system and idle on the cpu line"));
    }
    let busy_ticks = [0, 1, 2, 5, 6, 7]
        .iter()
        .fold(0u64, |sum, &i| sum.saturating_add(field(i)));
    let boot_time = text
        .lines()
        .find_map(|l| l.strip_prefix("btime "))
        .and_then(|v| v.trim().parse().ok())
        .ok_or(format("btime line"))?;
    Ok(ProcStat {
        busy_ticks,
        boot_time,
    })
}

/// The host's memory in bytes (module docs for how each is derived).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HostMemory {
    /// `MemTotal`: the capacity.
    pub total_bytes: u64,
    /// `MemAvailable`.
    pub available_bytes: u64,
    /// `MemTotal - MemFree`.
    pub usage_bytes: u64,
    /// `MemTotal - MemAvailable`.
    pub working_set_bytes: u64,
    /// `AnonPages`, when the kernel reports it.
    pub rss_bytes: Option<u64>,
}

/// Parses `/proc/meminfo` (`proc(5)`; values in KiB).
pub fn parse_meminfo(text: &str) -> Result<HostMemory, NodeStatsError> {
    let kib = |key: &str| {
        text.lines().find_map(|l| {
            let rest = l.strip_prefix(key)?.strip_prefix(':')?;
            let value: u64 = rest.trim().trim_end_matches("kB").trim().parse().ok()?;
            Some(value.saturating_mul(1024))
        })
    };
    let missing = |what| NodeStatsError::Format {
        path: "/proc/meminfo",
        what,
    };
    let total = kib("MemTotal").ok_or(missing("MemTotal"))?;
    let free = kib("MemFree").ok_or(missing("MemFree"))?;
    // Kernels before 3.14 lack MemAvailable: free memory plus page cache is its old estimate.
    let available = kib("MemAvailable")
        .unwrap_or_else(|| {
            free.saturating_add(kib("Cached").unwrap_or(0))
                .saturating_add(kib("Buffers").unwrap_or(0))
        })
        .min(total);
    Ok(HostMemory {
        total_bytes: total,
        available_bytes: available,
        usage_bytes: total.saturating_sub(free),
        working_set_bytes: total.saturating_sub(available),
        rss_bytes: kib("AnonPages"),
    })
}

/// `pgfault` and `pgmajfault` of `/proc/vmstat`, when present.
pub fn parse_vmstat(text: &str) -> (Option<u64>, Option<u64>) {
    let value = |key: &str| {
        text.lines().find_map(|l| {
            let (name, value) = l.split_once(' ')?;
            (name == key).then(|| value.trim().parse().ok()).flatten()
        })
    };
    (value("pgfault"), value("pgmajfault"))
}

/// Interfaces cAdvisor leaves out of the machine's network: loopback and the host side of
/// containers' links.
const IGNORED_DEVICES: [&str; 3] = ["lo", "veth", "docker"];

/// Parses `/proc/net/dev`: every interface but loopback, `veth*` and `docker*`, `eth0` first.
pub fn parse_net_dev(text: &str) -> NetworkSample {
    let mut interfaces: Vec<InterfaceSample> = text
        .lines()
        .filter_map(|line| {
            let (name, counters) = line.split_once(':')?;
            let name = name.trim();
            if name.is_empty() || IGNORED_DEVICES.iter().any(|p| name.starts_with(p)) {
                return None;
            }
            // Receive: bytes packets errs drop fifo frame compressed multicast; then transmit:
            // bytes packets errs ...
            let fields: Vec<u64> = counters
                .split_whitespace()
                .map(str::parse)
                .collect::<Result<_, _>>()
                .ok()?;
            if fields.len() < 11 {
                return None;
            }
            Some(InterfaceSample {
                name: name.to_owned(),
                rx_bytes: Some(fields[0]),
                rx_errors: Some(fields[2]),
                tx_bytes: Some(fields[8]),
                tx_errors: Some(fields[10]),
            })
        })
        .collect();
    interfaces.sort_by(|a, b| (a.name != "eth0", &a.name).cmp(&(b.name != "eth0", &b.name)));
    NetworkSample { interfaces }
}

/// Size and use of a filesystem, as `statvfs` tells them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FsInfo {
    /// Total bytes.
    pub capacity_bytes: u64,
    /// Bytes free to an unprivileged writer (`f_bavail`).
    pub available_bytes: u64,
    /// Bytes in use (`f_blocks - f_bfree`: reserved blocks are free, not used).
    pub used_bytes: u64,
    /// Total inodes (0 on filesystems without a fixed number, as btrfs).
    pub inodes: u64,
    /// Free inodes.
    pub inodes_free: u64,
}

/// `statvfs` of the filesystem holding `path`.
pub fn statvfs(path: &Path) -> Result<FsInfo, NodeStatsError> {
    let f = crate::disk::StatvfsFigures::of(path).map_err(|source| NodeStatsError::Statvfs {
        path: path.to_owned(),
        source,
    })?;
    Ok(FsInfo {
        capacity_bytes: f.blocks.saturating_mul(f.frsize),
        available_bytes: f.bavail.saturating_mul(f.frsize),
        used_bytes: f.blocks.saturating_sub(f.bfree).saturating_mul(f.frsize),
        inodes: f.files,
        inodes_free: f.ffree,
    })
}

/// Clock ticks per second (`USER_HZ`), the unit of `/proc/stat`.
pub fn clock_ticks() -> u64 {
    // SAFETY: sysconf only reads a constant of the system.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    u64::try_from(hz).ok().filter(|hz| *hz > 0).unwrap_or(100)
}

/// One reading of the host (module docs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostSample {
    /// When it was read, Unix nanoseconds.
    pub timestamp_ns: i64,
    /// Boot time, Unix seconds: the node's `startTime`.
    pub boot_time: i64,
    /// Busy CPU time since boot, nanoseconds over all cores.
    pub cpu_usage_core_nanos: u64,
    /// Memory.
    pub memory: HostMemory,
    /// Minor page faults since boot, when known.
    pub page_faults: Option<u64>,
    /// Major page faults since boot, when known.
    pub major_page_faults: Option<u64>,
    /// Interfaces, when `/proc/net/dev` could be read.
    pub network: Option<NetworkSample>,
}

/// Reads CPU, memory and network of the host from `proc` (`/proc`, or a copy in tests).
pub fn read_host(proc: &Path) -> Result<HostSample, NodeStatsError> {
    let read = |name: &str| {
        let path = proc.join(name);
        std::fs::read_to_string(&path).map_err(|source| NodeStatsError::Read { path, source })
    };
    let timestamp_ns = super::now_ns();
    let stat = parse_proc_stat(&read("stat")?)?;
    let memory = parse_meminfo(&read("meminfo")?)?;
    let (page_faults, major_page_faults) = read("vmstat")
        .map(|t| parse_vmstat(&t))
        .unwrap_or((None, None));
    let network = read("net/dev").ok().map(|t| parse_net_dev(&t));
    let hz = clock_ticks();
    let cpu_usage_core_nanos =
        u64::try_from(u128::from(stat.busy_ticks) * 1_000_000_000 / u128::from(hz))
            .unwrap_or(u64::MAX);
    Ok(HostSample {
        timestamp_ns,
        boot_time: stat.boot_time,
        cpu_usage_core_nanos,
        memory,
        page_faults,
        major_page_faults,
        network,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const PROC_STAT: &str = "\
cpu  10671 3 4616 13866 420 7 100 23 5 0
cpu0 4861 0 1656 8272 31 0 8 10 0 0
cpu1 5810 0 2959 5593 389 0 91 12 0 0
intr 1000 0 0
ctxt 123456
btime 1764180000
processes 4000
procs_running 2
procs_blocked 0
";

    #[test]
    fn proc_stat_busy_time_leaves_idle_and_iowait_out() {
        let s = parse_proc_stat(PROC_STAT).unwrap();
        // user + nice + system + irq + softirq + steal; guest (5) is inside user already.
        assert_eq!(s.busy_ticks, 10671 + 3 + 4616 + 7 + 100 + 23);
        assert_eq!(s.boot_time, 1_764_180_000);
    }

    #[test]
    fn proc_stat_of_an_old_kernel_and_broken_files() {
        // Before 2.6.11 the line ends at softirq.
        let s = parse_proc_stat("cpu  1 2 3 4 5 6 7\nbtime 10\n").unwrap();
        assert_eq!(s.busy_ticks, 1 + 2 + 3 + 6 + 7);
        assert!(parse_proc_stat("cpu0 1 2 3 4\nbtime 1\n").is_err());
        assert!(parse_proc_stat("cpu  1 x 3 4\nbtime 1\n").is_err());
        assert!(parse_proc_stat("cpu  1 2\nbtime 1\n").is_err());
        assert!(parse_proc_stat("cpu  1 2 3 4\n").is_err());
    }

    const MEMINFO: &str = "\
MemTotal:       24684084 kB
MemFree:        19733044 kB
MemAvailable:   23571480 kB
Buffers:           98168 kB
Cached:          3790968 kB
SwapCached:            0 kB
Active:           877512 kB
Inactive:        3416648 kB
AnonPages:        400000 kB
";

    #[test]
    fn meminfo_working_set_is_total_minus_available() {
        let m = parse_meminfo(MEMINFO).unwrap();
        assert_eq!(m.total_bytes, 24_684_084 * 1024);
        assert_eq!(m.available_bytes, 23_571_480 * 1024);
        assert_eq!(m.working_set_bytes, (24_684_084 - 23_571_480) * 1024);
        assert_eq!(m.usage_bytes, (24_684_084 - 19_733_044) * 1024);
        assert_eq!(m.rss_bytes, Some(400_000 * 1024));
        assert!(m.working_set_bytes <= m.usage_bytes);
    }

    #[test]
    fn meminfo_without_mem_available_estimates_it() {
        let m = parse_meminfo("MemTotal: 1000 kB\nMemFree: 100 kB\nCached: 300 kB\n").unwrap();
        assert_eq!(m.available_bytes, 400 * 1024);
        assert_eq!(m.working_set_bytes, 600 * 1024);
        assert_eq!(m.rss_bytes, None);
        assert!(parse_meminfo("MemFree: 1 kB\n").is_err());
        // A key that only starts like another is not it.
        assert!(parse_meminfo("MemTotalX: 5 kB\nMemFree: 1 kB\n").is_err());
    }

    #[test]
    fn vmstat_page_faults() {
        let text = "pgpgin 1\npgfault 1234\npgmajfault 56\npgfaultx 9\n";
        assert_eq!(parse_vmstat(text), (Some(1234), Some(56)));
        assert_eq!(parse_vmstat(""), (None, None));
    }

    #[test]
    fn net_dev_without_loopback_and_container_links() {
        let text = "\
Inter-|   Receive                                                |  Transmit
 face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed
    lo: 100 1 0 0 0 0 0 0 100 1 0 0 0 0 0 0
  ens3: 5000 40 1 0 0 0 0 0 7000 50 2 0 0 0 0 0
  eth0: 1042 11 0 0 0 0 0 0 0 0 0 0 0 0 0 0
vethab12: 1 1 0 0 0 0 0 0 1 1 0 0 0 0 0 0
docker0: 1 1 0 0 0 0 0 0 1 1 0 0 0 0 0 0
";
        let n = parse_net_dev(text);
        let names: Vec<&str> = n.interfaces.iter().map(|i| i.name.as_str()).collect();
        assert_eq!(names, ["eth0", "ens3"]);
        let ens3 = &n.interfaces[1];
        assert_eq!(
            (ens3.rx_bytes, ens3.rx_errors, ens3.tx_bytes, ens3.tx_errors),
            (Some(5000), Some(1), Some(7000), Some(2))
        );
    }

    #[test]
    fn statvfs_of_the_root() {
        let fs = statvfs(Path::new("/")).unwrap();
        assert!(fs.capacity_bytes > 0);
        assert!(fs.used_bytes <= fs.capacity_bytes);
        assert!(fs.available_bytes <= fs.capacity_bytes - fs.used_bytes);
        assert!(statvfs(Path::new("/no/such/dir")).is_err());
    }

    #[test]
    fn this_host_reads() {
        let host = read_host(Path::new("/proc")).unwrap();
        assert!(host.cpu_usage_core_nanos > 0);
        assert!(host.memory.total_bytes > 0);
        assert!(host.memory.working_set_bytes > 0);
        assert!(host.boot_time > 0);
        assert!(clock_ticks() > 0);
    }
}
