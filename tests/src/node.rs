//! A `wedge run` node for twin tests: a config file naming its MQTT broker (the embedded one
//! on a free port, or an external one), its node name and a directory of device definitions.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Result, bail};

use crate::{Daemon, free_port};

/// The node name every test node uses.
pub const NODE: &str = "edge-1";

/// Which broker the node's eventbus uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Broker {
    /// The embedded broker (`mqttMode: 0`) on a free port.
    Embedded,
    /// An external broker on this port (`mqttMode: 2`).
    External(u16),
}

/// A running node and where to reach it.
pub struct TwinNode {
    /// The daemon.
    pub daemon: Daemon,
    /// Its admin API.
    pub admin: SocketAddr,
    /// Port of the broker MQTT clients use.
    pub mqtt_port: u16,
    /// Its SQLite file.
    pub db: PathBuf,
    args: Vec<String>,
}

/// Writes the config of a node with state in `dir` and device definitions `devices_yaml`
/// (written to `dir/devices/devices.yaml`); returns (config path, MQTT port).
pub fn write_config(dir: &Path, broker: Broker, devices_yaml: &str) -> Result<(PathBuf, u16)> {
    write_config_with(dir, broker, devices_yaml, &Extra::default())
}

/// Keys a test adds to the node's config, as YAML lines indented for their section.
#[derive(Debug, Clone, Default)]
pub struct Extra {
    /// Lines under `modules.eventBus` (4 spaces), e.g. `"    mqttSessionQueueSize: 1000\n"`.
    pub event_bus: String,
    /// Lines under `wedge` (2 spaces), e.g. `"  broker:\n    idleTimeoutSeconds: 2\n"`.
    pub wedge: String,
    /// Module sections under `modules` (2 spaces), e.g.
    /// `"  deviceTwin:\n    dmiSockPath: /tmp/x/dmi.sock\n"`.
    pub modules: String,
}

/// [`write_config`] with `extra` keys.
pub fn write_config_with(
    dir: &Path,
    broker: Broker,
    devices_yaml: &str,
    extra: &Extra,
) -> Result<(PathBuf, u16)> {
    let devices = dir.join("devices");
    std::fs::create_dir_all(&devices)?;
    std::fs::write(devices.join("devices.yaml"), devices_yaml)?;
    let (mode, port) = match broker {
        Broker::Embedded => (0, free_port()),
        Broker::External(port) => (2, port),
    };
    let config = format!(
        "apiVersion: edgecore.config.kubeedge.io/v1alpha2
kind: EdgeCore
modules:
  edged:
    hostnameOverride: {NODE}
  eventBus:
    mqttMode: {mode}
    mqttServerInternal: tcp://127.0.0.1:{port}
    mqttServerExternal: tcp://127.0.0.1:{port}
{event_bus}{modules}wedge:
  devices:
    dir: {devices}
{wedge}",
        devices = devices.display(),
        event_bus = extra.event_bus,
        modules = extra.modules,
        wedge = extra.wedge,
    );
    let path = dir.join("edgecore.yaml");
    std::fs::write(&path, config)?;
    Ok((path, port))
}

impl TwinNode {
    /// Starts a node with state in `dir` and waits until it is healthy and its broker accepts
    /// connections.
    pub fn start(dir: &Path, broker: Broker, devices_yaml: &str) -> Result<TwinNode> {
        TwinNode::start_with(dir, broker, devices_yaml, &Extra::default())
    }

    /// [`TwinNode::start`] with `extra` config keys.
    pub fn start_with(
        dir: &Path,
        broker: Broker,
        devices_yaml: &str,
        extra: &Extra,
    ) -> Result<TwinNode> {
        let (config, mqtt_port) = write_config_with(dir, broker, devices_yaml, extra)?;
        let admin = SocketAddr::from(([127, 0, 0, 1], free_port()));
        let args = vec![
            "run".to_owned(),
            "--config".to_owned(),
            config.display().to_string(),
            "--data-dir".to_owned(),
            dir.display().to_string(),
            "--admin-addr".to_owned(),
            admin.to_string(),
        ];
        let daemon = launch(&args, admin, mqtt_port)?;
        Ok(TwinNode {
            daemon,
            admin,
            mqtt_port,
            db: dir.join("edgecore.db"),
            args,
        })
    }

    /// Its data directory (which holds `admin.sock`, `admin.token` and `edgecore.db`).
    pub fn data_dir(&self) -> &Path {
        self.db.parent().unwrap_or(Path::new("."))
    }

    /// Its admin unix socket, where `/modules` needs no token.
    pub fn admin_socket(&self) -> PathBuf {
        crate::admin_socket(self.data_dir())
    }

    /// Starts the node again with the same config and state (after it stopped or was killed).
    pub fn restart(&mut self) -> Result<()> {
        self.daemon = launch(&self.args, self.admin, self.mqtt_port)?;
        Ok(())
    }
}

fn launch(args: &[String], admin: SocketAddr, mqtt_port: u16) -> Result<Daemon> {
    let argv: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut daemon = Daemon::start(&argv, &[], false)?;
    daemon.wait_healthy(admin, Duration::from_secs(20))?;
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::net::TcpStream::connect(("127.0.0.1", mqtt_port)).is_err() {
        if Instant::now() > deadline {
            bail!(
                "nothing listens on MQTT port {mqtt_port}:\n{}",
                daemon.log()
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(daemon)
}
