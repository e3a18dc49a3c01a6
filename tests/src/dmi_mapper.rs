//! The real KubeEdge mapper of `../shared/dmi/` (`virtualdevice-mapper`, built from KubeEdge
//! v1.23.1's mapper-framework), run as a process against a node's DMI socket.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use crate::guests::repo_root;

/// `../shared/dmi/`.
pub fn shared_dmi() -> PathBuf {
    repo_root().join("..").join("shared").join("dmi")
}

/// The example DeviceModel and Device of `../shared/dmi/devices.yaml` (`default/vdev-1`,
/// protocol `virtualProtocol`, node `edge-1`).
pub fn example_devices() -> Result<String> {
    let path = shared_dmi().join("devices.yaml");
    std::fs::read_to_string(&path).with_context(|| {
        format!(
            "{}: the DMI tests need ../shared/dmi beside the checkout",
            path.display()
        )
    })
}

/// A running mapper; killed when dropped.
pub struct DmiMapper {
    child: Child,
    log: PathBuf,
    http_port: u16,
}

impl DmiMapper {
    /// Unpacks the mapper into `dir` (once) and starts it with its own socket in `dir`,
    /// registering with the node's DMI socket `node_socket`.
    pub fn start(dir: &Path, node_socket: &Path) -> Result<DmiMapper> {
        let binary = dir.join("virtualdevice-mapper");
        if !binary.exists() {
            let packed = shared_dmi().join("bin").join("virtualdevice-mapper.xz");
            let out = std::fs::File::create(&binary)?;
            let status = Command::new("xz")
                .arg("-dc")
                .arg(&packed)
                .stdout(out)
                .status()
                .context("xz (package xz-utils) unpacks the mapper")?;
            if !status.success() {
                bail!("xz -dc {} failed", packed.display());
            }
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&binary, std::fs::Permissions::from_mode(0o755))?;
        }
        let http_port = crate::free_port();
        let config = dir.join("mapper.yaml");
        std::fs::write(
            &config,
            format!(
                "grpc_server:\n  socket_path: {}\ncommon:\n  name: virtualdevice-mapper\n  version: v1.23.1\n  api_version: v1.0.0\n  protocol: virtualProtocol\n  address: 127.0.0.1\n  edgecore_sock: {}\n  http_port: \"{}\"\n",
                dir.join("virtualdevice.sock").display(),
                node_socket.display(),
                http_port,
            ),
        )?;
        let log = dir.join(format!("mapper-{}.log", crate::free_port()));
        // A test running beside this one may fork while the binary was open for writing; the
        // child holds that descriptor until it execs, and exec of the binary then fails with
        // ETXTBSY for a moment. Such a start is tried again.
        let mut tries = 0;
        let child = loop {
            let started = Command::new(&binary)
                .arg("--config-file")
                .arg(&config)
                .arg("--v")
                .arg("2")
                .stdout(Stdio::null())
                .stderr(std::fs::File::create(&log)?)
                .spawn();
            match started {
                Err(e) if e.raw_os_error() == Some(libc::ETXTBSY) && tries < 50 => {
                    tries += 1;
                    std::thread::sleep(Duration::from_millis(20));
                }
                other => {
                    break other.with_context(|| format!("cannot start {}", binary.display()))?;
                }
            }
        };
        Ok(DmiMapper {
            child,
            log,
            http_port,
        })
    }

    /// The body of `GET <path>` on the mapper's REST API (mapper-framework's
    /// `/api/v1/device/<ns>/<name>/<property>` reads a device it drives).
    pub fn rest_get(&self, path: &str) -> Result<String> {
        let api = std::net::SocketAddr::from(([127, 0, 0, 1], self.http_port));
        Ok(crate::http_get(api, path)?.1)
    }

    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// What it logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Waits until its log has a line containing `text`.
    pub fn wait_log(&mut self, text: &str, timeout: Duration) -> Result<()> {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if self.log().contains(text) {
                return Ok(());
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                bail!(
                    "the mapper exited ({status}) before logging {text:?}:\n{}",
                    self.log()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        bail!(
            "the mapper did not log {text:?} within {timeout:?}:\n{}",
            self.log()
        )
    }

    /// Stops it (SIGTERM, then SIGKILL).
    pub fn stop(&mut self) {
        // SAFETY: plain syscall on a pid we own.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if matches!(self.child.try_wait(), Ok(Some(_))) {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for DmiMapper {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}
