//! `wedge check`: what a node needs, each a pass, warning or failure with the reason.
//!
//! These are the checks that need only the config and the machine; the binary adds the ones
//! that need its other parts (the guest toolchain, a running node's module health).

use std::io::{Read as _, Write as _};
use std::net::{TcpListener, TcpStream, ToSocketAddrs as _};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::{Duration, SystemTime};

use wedge_core::config::EdgeCoreConfig;
use wedge_edgehub::bootstrap::{CertStatus, authority, read_cert_status};

/// How long a network check waits.
pub const TIMEOUT: Duration = Duration::from_secs(3);
/// A certificate closer than this to its end is a warning (rotation should have replaced it).
const CERT_WARN: Duration = Duration::from_secs(7 * 24 * 3600);

/// How a check came out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    /// Fine.
    Pass,
    /// Works, but worth a look.
    Warn,
    /// The node cannot do this part of its job.
    Fail,
}

/// One check's outcome.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    /// The outcome.
    pub level: Level,
    /// What was checked.
    pub what: String,
    /// What was found, or what to do.
    pub detail: String,
}

impl Finding {
    /// A finding.
    pub fn new(level: Level, what: impl Into<String>, detail: impl Into<String>) -> Finding {
        Finding {
            level,
            what: what.into(),
            detail: detail.into(),
        }
    }

    /// The line `wedge check` prints.
    pub fn line(&self) -> String {
        let tag = match self.level {
            Level::Pass => "ok  ",
            Level::Warn => "warn",
            Level::Fail => "FAIL",
        };
        format!("{tag}  {}: {}", self.what, self.detail)
    }
}

/// The machine-side checks for `config`. `node_running` skips the listen-port checks (the
/// running node holds those ports).
pub fn machine(config: &EdgeCoreConfig, node_running: bool) -> Vec<Finding> {
    let mut out = vec![data_dir(&config.data_dir())];
    if !node_running {
        out.extend(listen_ports(config));
    }
    if config.modules.edge_hub.enable {
        out.extend(cloud(config));
    } else {
        out.push(Finding::new(
            Level::Pass,
            "cloud",
            "modules.edgeHub is off: the node runs without a cloud",
        ));
    }
    if config.modules.edged.enable {
        out.push(container_runtime(
            &config.kubelet().container_runtime_endpoint,
        ));
    }
    out
}

/// Makes `dir` when it is missing and checks that this process may create files in it (write
/// and search access): what the node needs of its data directory and of the DMI socket's
/// directory. The daemon decides its DMI fallback on the same test, so `wedge check` says what
/// the node will do.
pub fn usable_dir(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    std::fs::create_dir_all(dir)?;
    let path = std::ffi::CString::new(dir.as_os_str().as_bytes())
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
    // SAFETY: `path` is a valid NUL-terminated string that outlives the call.
    if unsafe { libc::access(path.as_ptr(), libc::W_OK | libc::X_OK) } == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// The data directory exists or can be made, and files can be created in it.
pub fn data_dir(dir: &Path) -> Finding {
    let what = format!("data directory {}", dir.display());
    match usable_dir(dir) {
        Ok(()) => Finding::new(Level::Pass, what, "writable"),
        Err(e) => Finding::new(
            Level::Fail,
            what,
            format!("not writable ({e}); set wedge.dataDir or run as its owner"),
        ),
    }
}

/// The addresses the node listens on are free.
fn listen_ports(config: &EdgeCoreConfig) -> Vec<Finding> {
    let mut addresses = Vec::new();
    let mqtt = &config.modules.event_bus.mqtt_server_internal;
    if let Some(address) = mqtt.strip_prefix("tcp://") {
        addresses.push(("modules.eventBus.mqttServerInternal", address.to_owned()));
    }
    if !config.wedge.admin_addr.is_empty() {
        addresses.push(("wedge.adminAddr", config.wedge.admin_addr.clone()));
    }
    addresses
        .into_iter()
        .map(|(key, address)| {
            let what = format!("listen address {address} ({key})");
            match TcpListener::bind(&address) {
                Ok(_) => Finding::new(Level::Pass, what, "free"),
                Err(e) => Finding::new(
                    Level::Fail,
                    what,
                    format!("cannot listen ({e}): another process holds it, or set {key}"),
                ),
            }
        })
        .collect()
}

/// CloudHub answers on both addresses, and the node's certificate is usable.
fn cloud(config: &EdgeCoreConfig) -> Vec<Finding> {
    let hub = &config.modules.edge_hub;
    let mut out = vec![
        reachable("cloud WebSocket", &hub.websocket.server),
        reachable("cloud HTTPS (certificates)", authority(&hub.http_server)),
    ];
    let node = config.node_name().unwrap_or_default();
    let what = format!("certificate {}", hub.tls_cert_file);
    out.push(
        match read_cert_status(Path::new(&hub.tls_cert_file), &node, SystemTime::now()) {
            CertStatus::Valid { not_after, .. } => {
                let left = not_after
                    .duration_since(SystemTime::now())
                    .unwrap_or_default();
                let days = left.as_secs() / 86_400;
                if left < CERT_WARN {
                    Finding::new(
                        Level::Warn,
                        what,
                        format!("ends in {days} day(s); the node rotates it while the cloud is reachable"),
                    )
                } else {
                    Finding::new(Level::Pass, what, format!("valid for system:node:{node}, {days} day(s) left"))
                }
            }
            status if !hub.token.is_empty() => Finding::new(
                Level::Pass,
                what,
                format!("{}: the node will get one with modules.edgeHub.token", describe(&status)),
            ),
            status => Finding::new(
                Level::Fail,
                what,
                format!("{}, and no join token to get one: run `wedge join`", describe(&status)),
            ),
        },
    );
    out
}

fn describe(status: &CertStatus) -> String {
    match status {
        CertStatus::Missing => "missing".to_owned(),
        CertStatus::Unreadable(why) => format!("unreadable ({why})"),
        CertStatus::WrongCn { found } => format!("issued for {found:?}, not this node"),
        CertStatus::Expired { .. } => "expired".to_owned(),
        CertStatus::Valid { .. } => "valid".to_owned(),
    }
}

/// A TCP connection to `address` opens within [`TIMEOUT`].
pub fn reachable(what: &str, address: &str) -> Finding {
    let what = format!("{what} {address}");
    let resolved = match address.to_socket_addrs() {
        Ok(mut all) => all.next(),
        Err(e) => return Finding::new(Level::Fail, what, format!("cannot resolve: {e}")),
    };
    let Some(resolved) = resolved else {
        return Finding::new(Level::Fail, what, "resolves to no address");
    };
    match TcpStream::connect_timeout(&resolved, TIMEOUT) {
        Ok(_) => Finding::new(Level::Pass, what, "reachable"),
        Err(e) => Finding::new(Level::Fail, what, format!("unreachable: {e}")),
    }
}

/// The container engine edged uses answers a Docker ping on its socket.
pub fn container_runtime(endpoint: &str) -> Finding {
    let what = format!("container runtime {endpoint}");
    let Some(path) = endpoint.strip_prefix("unix://") else {
        return Finding::new(Level::Fail, what, "only unix:// endpoints are supported");
    };
    if !path.ends_with("/docker.sock") {
        // A CRI runtime (edged speaks CRI to any endpoint but Docker's socket): the socket
        // must accept; its Version is asked when edged starts.
        return match UnixStream::connect(path) {
            Ok(_) => Finding::new(
                Level::Pass,
                what,
                "a CRI runtime's socket accepts connections",
            ),
            Err(e) => Finding::new(
                Level::Fail,
                what,
                format!(
                    "no answer ({e}); pods cannot run: start the CRI runtime (containerd) or set modules.edged.tailoredKubeletConfig.containerRuntimeEndpoint"
                ),
            ),
        };
    }
    let ping = || -> std::io::Result<String> {
        let mut stream = UnixStream::connect(path)?;
        stream.set_read_timeout(Some(TIMEOUT))?;
        stream.set_write_timeout(Some(TIMEOUT))?;
        stream.write_all(b"GET /_ping HTTP/1.0\r\nHost: docker\r\n\r\n")?;
        let mut answer = String::new();
        stream.take(4096).read_to_string(&mut answer)?;
        Ok(answer)
    };
    match ping() {
        Ok(answer) if answer.starts_with("HTTP/1.") && answer.contains(" 200 ") => {
            Finding::new(Level::Pass, what, "Docker answers")
        }
        Ok(answer) => Finding::new(
            Level::Fail,
            what,
            format!(
                "answers, but not as Docker ({:?}); edged speaks the Docker Engine API",
                answer.lines().next().unwrap_or("")
            ),
        ),
        Err(e) => Finding::new(
            Level::Fail,
            what,
            format!(
                "no answer ({e}); pods cannot run: start Docker or set modules.edged.tailoredKubeletConfig.containerRuntimeEndpoint"
            ),
        ),
    }
}

/// The directory of the DMI socket (`socket`, as the node resolves `dmiSockPath`) exists or
/// can be made (else the node falls back to its data directory, where KubeEdge mappers do
/// not look).
pub fn dmi_socket_dir(socket: &Path) -> Finding {
    let dir = socket.parent().unwrap_or(Path::new("/"));
    let what = format!("DMI socket {}", socket.display());
    match usable_dir(dir) {
        Ok(()) => Finding::new(Level::Pass, what, "its directory is writable"),
        Err(e) => Finding::new(
            Level::Warn,
            what,
            format!(
                "cannot write in {} ({e}): the node serves DMI in its data directory, where KubeEdge mappers do not look",
                dir.display()
            ),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_free_port_passes_and_a_held_one_fails() {
        let held = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = held.local_addr().unwrap().port();
        let mut config = EdgeCoreConfig::default();
        config.modules.event_bus.mqtt_server_internal = format!("tcp://127.0.0.1:{port}");
        let found = listen_ports(&config);
        assert_eq!(found[0].level, Level::Fail, "{found:?}");
        assert!(found[0].detail.contains("mqttServerInternal"));
        drop(held);
        assert_eq!(listen_ports(&config)[0].level, Level::Pass);
    }

    #[test]
    fn an_unreachable_cloud_and_a_missing_certificate_fail_with_what_to_do() {
        let dir = tempfile::tempdir().unwrap();
        let closed = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap();
        let mut config = EdgeCoreConfig::default();
        config.modules.edge_hub.enable = true;
        config.modules.edge_hub.websocket.server = closed.to_string();
        config.modules.edge_hub.http_server = format!("https://{closed}");
        config.modules.edge_hub.tls_cert_file = dir.path().join("server.crt").display().to_string();
        let found = cloud(&config);
        assert!(found.iter().all(|f| f.level == Level::Fail), "{found:?}");
        assert!(found[2].detail.contains("wedge join"), "{found:?}");
    }

    #[test]
    fn a_missing_cri_socket_fails_naming_the_endpoint() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("not-docker.sock");
        let found = container_runtime(&format!("unix://{}", path.display()));
        assert_eq!(found.level, Level::Fail);
        assert!(found.what.contains("not-docker.sock"));
        assert!(
            found.detail.contains("containerRuntimeEndpoint"),
            "{found:?}"
        );
    }

    #[test]
    fn an_unwritable_data_dir_fails() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("a-file");
        std::fs::write(&file, b"x").unwrap();
        assert_eq!(data_dir(&file.join("below")).level, Level::Fail);
        assert_eq!(data_dir(&dir.path().join("new")).level, Level::Pass);
    }
}
