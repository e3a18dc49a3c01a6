//! What the node reports of the machine it runs on: CPUs, memory, the root filesystem, its
//! address and identity (machine id, boot id, system UUID), as a kubelet reads them.

use std::path::Path;

/// What the node reports of the machine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostInfo {
    /// Logical CPUs.
    pub cpus: usize,
    /// Memory in KiB (`MemTotal`).
    pub memory_kib: u64,
    /// Size in bytes of the filesystem that holds the node's root directory (kubelet's
    /// `ephemeral-storage` capacity); 0 when it cannot be read.
    pub ephemeral_bytes: u64,
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
    /// The kernel's boot id: a new one tells the cloud the node rebooted.
    pub boot_id: String,
    /// The firmware's system UUID (DMI `product_uuid`), else the machine id, as kubelet
    /// reports where DMI is unreadable.
    pub system_uuid: String,
}

impl HostInfo {
    /// Reads the host's figures, the filesystem of `root` for ephemeral storage; what cannot
    /// be read is left empty rather than failing.
    pub fn read(root: &Path) -> HostInfo {
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
        let machine_id = read("/etc/machine-id").trim().to_owned();
        let system_uuid = match read("/sys/class/dmi/id/product_uuid").trim() {
            "" => machine_id.clone(),
            uuid => uuid.to_lowercase(),
        };
        // The root directory may not exist yet on a first start: measure the nearest parent.
        let ephemeral_bytes = root
            .ancestors()
            .find(|p| p.exists())
            .and_then(|p| crate::disk::statvfs(p).ok())
            .map_or(0, |usage| usage.capacity);
        HostInfo {
            cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
            memory_kib,
            ephemeral_bytes,
            ip: host_ipv4(),
            kernel: read("/proc/sys/kernel/osrelease").trim().to_owned(),
            os_image,
            arch,
            machine_id,
            boot_id: read("/proc/sys/kernel/random/boot_id").trim().to_owned(),
            system_uuid,
        }
    }
}

/// The first IPv4 address of an up, non-loopback interface that is not a container bridge
/// or veth (those are Docker's, not the node's).
pub fn host_ipv4() -> Option<String> {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_host_is_read() {
        let host = HostInfo::read(Path::new("/no/such/dir/yet"));
        assert!(host.cpus >= 1);
        assert!(host.memory_kib > 0, "{host:?}");
        // Measured on the nearest existing parent: "/".
        assert!(host.ephemeral_bytes > 0, "{host:?}");
        assert!(!host.boot_id.is_empty(), "{host:?}");
        assert!(!host.system_uuid.is_empty() || host.machine_id.is_empty());
    }
}
