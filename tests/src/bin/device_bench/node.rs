//! The node a scenario runs against: a `wedge run` process with the embedded broker, a DMI
//! socket, a `wedge.devices.dir` and the default store durability, in a run directory.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use serde_json::Value;
use wedge_tests::AdminEndpoint;

use crate::procs::{self, Managed};

/// The node name the devices are defined for.
pub const NODE: &str = "device-bench-node";

/// A running node; stopped (SIGTERM) when dropped.
pub struct Node {
    /// The daemon process.
    pub daemon: Managed,
    /// Its admin API on loopback TCP (`/healthz`, `/metrics`).
    pub admin: SocketAddr,
    /// Its embedded broker's port.
    pub mqtt_port: u16,
    /// Its DMI socket.
    pub dmi_socket: PathBuf,
    /// Its data directory.
    pub data_dir: PathBuf,
    /// The wedge binary (for `wedge module deploy`).
    pub wedge: PathBuf,
}

/// A path as a YAML scalar (JSON string syntax is valid YAML).
fn yaml_path(path: &Path) -> Result<String> {
    let text = path
        .to_str()
        .with_context(|| format!("path {} is not UTF-8", path.display()))?;
    Ok(Value::from(text).to_string())
}

impl Node {
    /// Writes `devices_yaml` to `<root>/devices/devices.yaml`, the config, and starts
    /// `wedge run` with state in `<root>/data`; returns once `/healthz` answers 200 and the
    /// broker and the DMI socket accept connections.
    pub async fn start(
        wedge: &Path,
        root: &Path,
        devices_yaml: &str,
        synchronous: &str,
    ) -> Result<Node> {
        let devices = root.join("devices");
        let data_dir = root.join("data");
        let dmi_socket = root.join("dmi").join("dmi.sock");
        for dir in [&devices, &data_dir] {
            std::fs::create_dir_all(dir)
                .with_context(|| format!("cannot create {}", dir.display()))?;
        }
        let file = devices.join("devices.yaml");
        std::fs::write(&file, devices_yaml)
            .with_context(|| format!("cannot write {}", file.display()))?;
        let mqtt_port = procs::free_port()?;
        let config = format!(
            "# Written by device-bench for one run.\n\
             apiVersion: edgecore.config.kubeedge.io/v1alpha2\n\
             kind: EdgeCore\n\
             modules:\n\
             \x20 eventBus:\n\
             \x20   mqttMode: 0\n\
             \x20   mqttServerInternal: tcp://127.0.0.1:{mqtt_port}\n\
             \x20   mqttServerExternal: tcp://127.0.0.1:{mqtt_port}\n\
             \x20   mqttSessionQueueSize: 100000\n\
             \x20 deviceTwin:\n\
             \x20   dmiSockPath: {dmi}\n\
             \x20 edged:\n\
             \x20   hostnameOverride: {NODE}\n\
             wedge:\n\
             \x20 store:\n\
             \x20   synchronous: {synchronous}\n\
             \x20 devices:\n\
             \x20   dir: {devices}\n\
             \x20   dmiReportsPerSecond: 1000000\n\
             \x20   dmiReportBurst: 1000000\n",
            dmi = yaml_path(&dmi_socket)?,
            devices = yaml_path(&devices)?,
        );
        let config_path = root.join("edgecore.yaml");
        std::fs::write(&config_path, config).context("cannot write the node's config")?;
        let admin = SocketAddr::from(([127, 0, 0, 1], procs::free_port()?));
        let mut cmd = Command::new(wedge);
        cmd.arg("run")
            .arg("--config")
            .arg(&config_path)
            .arg("--data-dir")
            .arg(&data_dir)
            .arg("--admin-addr")
            .arg(admin.to_string())
            // A fixed environment: the figures must not depend on RUST_LOG or WEDGE_*.
            .env_clear()
            .env("PATH", "/usr/bin:/bin")
            .env("HOME", root);
        let mut daemon = Managed::spawn("wedge", cmd, &root.join("wedge.log"))?;
        procs::wait_healthy(&mut daemon, admin, Duration::from_secs(30)).await?;
        let broker = SocketAddr::from(([127, 0, 0, 1], mqtt_port));
        procs::wait_listening(&mut daemon, broker, Duration::from_secs(10)).await?;
        let deadline = Instant::now() + Duration::from_secs(10);
        while tokio::net::UnixStream::connect(&dmi_socket).await.is_err() {
            if Instant::now() > deadline {
                return Err(
                    daemon.failure(&format!("does not serve DMI on {}", dmi_socket.display()))
                );
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Ok(Node {
            daemon,
            admin,
            mqtt_port,
            dmi_socket,
            data_dir,
            wedge: wedge.to_owned(),
        })
    }

    /// The admin unix socket (no token needed).
    pub fn admin_socket(&self) -> AdminEndpoint {
        AdminEndpoint::Unix(wedge_tests::admin_socket(&self.data_dir))
    }

    /// Its resident set size in KiB.
    pub fn rss_kib(&self) -> Option<u64> {
        procs::rss_kib(self.daemon.pid())
    }

    /// Deploys the module packaged at `module` with `wedge module deploy`.
    pub fn deploy(&self, module: &Path) -> Result<()> {
        let out = Command::new(&self.wedge)
            .arg("module")
            .arg("deploy")
            .arg(module)
            .arg("--data-dir")
            .arg(&self.data_dir)
            .env_remove("RUST_LOG")
            .output()
            .context("cannot run wedge module deploy")?;
        if !out.status.success() {
            bail!(
                "wedge module deploy {} failed: {}{}",
                module.display(),
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Ok(())
    }

    /// An admin request over the unix socket, on a blocking thread; `Err` unless it answers
    /// 200.
    pub async fn admin(&self, method: &str, path: &str, body: Vec<u8>) -> Result<Value> {
        let endpoint = self.admin_socket();
        let (method, path_owned) = (method.to_owned(), path.to_owned());
        let (code, text) = tokio::task::spawn_blocking(move || {
            let headers: &[(&str, &str)] = if body.is_empty() {
                &[]
            } else {
                &[("Content-Type", "application/json")]
            };
            wedge_tests::http_request(endpoint, &method, &path_owned, headers, &body)
        })
        .await
        .context("admin request task")??;
        if code != 200 {
            bail!("{path} answered {code}: {}", text.trim());
        }
        serde_json::from_str(&text).with_context(|| format!("{path} answered non-JSON: {text}"))
    }

    /// `PUT /devices/<ns>/<name>/twins/<property>` with `{"desired": value}`.
    pub async fn set_desired(&self, device: &str, property: &str, value: &str) -> Result<()> {
        let body = serde_json::json!({ "desired": value }).to_string();
        self.admin(
            "PUT",
            &format!("/devices/{device}/twins/{property}"),
            body.into_bytes(),
        )
        .await
        .map(|_| ())
    }

    /// The `/metrics` lines (no comments) whose name contains one of `parts`.
    pub fn metrics(&self, parts: &[&str]) -> Vec<String> {
        match wedge_tests::http_get(self.admin, "/metrics") {
            Ok((200, body)) => body
                .lines()
                .filter(|l| !l.starts_with('#') && parts.iter().any(|p| l.contains(p)))
                .map(str::to_owned)
                .collect(),
            Ok((code, _)) => vec![format!("/metrics answered {code}")],
            Err(e) => vec![format!("/metrics: {e:#}")],
        }
    }

    /// User + system CPU time the daemon has used.
    pub fn cpu_time(&self) -> Option<Duration> {
        cpu_time(self.daemon.pid())
    }
}

/// User + system CPU time process `pid` has used, from `/proc/<pid>/stat`.
pub fn cpu_time(pid: u32) -> Option<Duration> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name (which may hold spaces) start after the last ')'.
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    // SAFETY: sysconf has no preconditions.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    let ticks = u64::try_from(ticks).ok().filter(|t| *t > 0)?;
    Some(Duration::from_secs_f64(
        (utime + stime) as f64 / ticks as f64,
    ))
}

/// `n` bytes as MiB with one decimal.
pub fn mib(kib: Option<u64>) -> String {
    kib.map_or_else(
        || "?".to_owned(),
        |k| format!("{:.1} MiB", k as f64 / 1024.0),
    )
}
