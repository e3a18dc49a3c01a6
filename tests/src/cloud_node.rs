//! A `wedge run` node joined to a [`CloudHub`] simulator over mutual TLS: a node certificate
//! (CN `system:node:<node>`) from the simulator's CA, the thermometer devices of
//! [`crate::twin_fixtures::THERMOMETERS`], and the embedded MQTT broker on a free port. The
//! node can be killed and started again on the same files, as a crash and reboot would.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result};

use crate::cloudhub::CloudHub;
use crate::node::NODE;
use crate::twin_fixtures::THERMOMETERS;
use crate::{Daemon, free_port, http_get};

/// The pod sandbox image edged runs in tests: `bash .ci/setup` imports it (a busybox pause
/// that exits on SIGTERM), since no registry is reachable to pull `kubeedge/pause`.
pub const PAUSE_IMAGE: &str = "wedge-test/pause:1";

/// What a [`CloudNode`] runs beyond the defaults.
#[derive(Debug, Clone, Copy, Default)]
pub struct NodeOptions<'a> {
    /// YAML lines for the `edgeHub:` mapping, indented by four spaces.
    pub edge_hub_extra: &'a str,
    /// Run edged (pods on the local Docker engine).
    pub edged: bool,
    /// A directory of Wasm modules deployed at start (`wedge.modules.dir`).
    pub modules_dir: Option<&'a std::path::Path>,
    /// YAML lines for the `wedge:` mapping, indented by two spaces.
    pub wedge_extra: &'a str,
    /// `RUST_LOG` of the daemon (default: its own, `info`).
    pub log_filter: Option<&'a str>,
}

/// A cloud-joined node and where its files are.
pub struct CloudNode {
    /// The running daemon.
    pub daemon: Daemon,
    /// Its admin API.
    pub admin: SocketAddr,
    /// The port of its embedded MQTT broker.
    pub mqtt_port: u16,
    /// Its data directory (the SQLite file is `edgecore.db` in it).
    pub data: PathBuf,
    config: PathBuf,
    log_filter: Option<String>,
    /// Held while a node runs pods: see [`ONE_EDGED_NODE`].
    _pods: Option<std::sync::MutexGuard<'static, ()>>,
    _dir: tempfile::TempDir,
}

/// Nodes running edged in one test process take turns. They all carry the name [`NODE`] and
/// share the Docker engine, and edged removes at start the containers labelled with its node
/// name that its own state does not hold: a second such node would remove the first one's
/// containers under it.
static ONE_EDGED_NODE: std::sync::Mutex<()> = std::sync::Mutex::new(());

impl CloudNode {
    /// Its admin unix socket, where `/modules` needs no token.
    pub fn admin_socket(&self) -> PathBuf {
        crate::admin_socket(&self.data)
    }

    /// Writes certificates, devices and a config joining `hub` (plus `edge_hub_extra`, YAML
    /// lines indented for the `edgeHub:` mapping, e.g. `"    heartbeat: 2\n"`), starts the node
    /// and waits until it is healthy.
    pub fn start(hub: &CloudHub, edge_hub_extra: &str) -> Result<CloudNode> {
        CloudNode::start_with(
            hub,
            NodeOptions {
                edge_hub_extra,
                ..NodeOptions::default()
            },
        )
    }

    /// Like [`CloudNode::start`], with edged running pods on the local Docker engine (its
    /// `rootDirectory` in the node's temporary directory).
    pub fn start_with_edged(hub: &CloudHub, edge_hub_extra: &str) -> Result<CloudNode> {
        CloudNode::start_with(
            hub,
            NodeOptions {
                edge_hub_extra,
                edged: true,
                ..NodeOptions::default()
            },
        )
    }

    /// A node set up per `options`.
    pub fn start_with(hub: &CloudHub, options: NodeOptions<'_>) -> Result<CloudNode> {
        let NodeOptions {
            edge_hub_extra,
            edged,
            modules_dir,
            wedge_extra,
            log_filter,
        } = options;
        let pods = edged.then(|| ONE_EDGED_NODE.lock().unwrap_or_else(|e| e.into_inner()));
        let dir = tempfile::tempdir()?;
        let certs = dir.path().join("certs");
        std::fs::create_dir_all(&certs)?;
        let client = hub.ca().client_cert(&format!("system:node:{NODE}"))?;
        std::fs::write(certs.join("rootCA.crt"), hub.ca().ca_pem())?;
        std::fs::write(certs.join("server.crt"), &client.cert_pem)?;
        std::fs::write(certs.join("server.key"), &client.key_pem)?;
        let devices = dir.path().join("devices");
        std::fs::create_dir_all(&devices)?;
        std::fs::write(devices.join("devices.yaml"), THERMOMETERS)?;
        let mqtt_port = free_port();
        // Disk thresholds below kubelet's (10 %/15 %): under DiskPressure edged refuses new
        // pods, and the machine CI builds on may be within 15 % of full.
        let edged = if edged {
            format!(
                "    enable: true\n    rootDirectory: {}\n    podSandboxImage: {PAUSE_IMAGE}\n    \
                 tailoredKubeletConfig:\n      evictionHard: {{memory.available: 100Mi, \
                 nodefs.available: 5%, imagefs.available: 5%, nodefs.inodesFree: 5%}}\n",
                dir.path().join("kubelet").display()
            )
        } else {
            String::new()
        };
        let config = format!(
            "apiVersion: edgecore.config.kubeedge.io/v1alpha2
kind: EdgeCore
modules:
  edged:
    hostnameOverride: {NODE}
{edged}  eventBus:
    mqttServerInternal: tcp://127.0.0.1:{mqtt_port}
  edgeHub:
    enable: true
    tlsCaFile: {certs}/rootCA.crt
    tlsCertFile: {certs}/server.crt
    tlsPrivateKeyFile: {certs}/server.key
    websocket:
      server: {ws}
{edge_hub_extra}wedge:
  devices:
    dir: {devices}
  modules:
    dir: \"{modules}\"
{wedge_extra}",
            modules = modules_dir
                .map(|d| d.display().to_string())
                .unwrap_or_default(),
            certs = certs.display(),
            ws = hub.ws_addr(),
            devices = devices.display(),
        );
        let config_path = dir.path().join("edgecore.yaml");
        std::fs::write(&config_path, config)?;
        let data = dir.path().join("data");
        let log_filter = log_filter.map(str::to_owned);
        let (daemon, admin) = start_daemon(&data, &config_path, log_filter.as_deref())?;
        Ok(CloudNode {
            daemon,
            admin,
            mqtt_port,
            data,
            config: config_path,
            log_filter,
            _pods: pods,
            _dir: dir,
        })
    }

    /// Kills the node with SIGKILL (no shutdown at all) and waits for it to be gone.
    pub fn kill(&mut self) -> Result<()> {
        self.daemon.signal(libc::SIGKILL)?;
        self.daemon.wait_exit(Duration::from_secs(10))?;
        Ok(())
    }

    /// Starts the node again on the same config and data, and waits until it is healthy.
    pub fn restart(&mut self) -> Result<()> {
        let (daemon, admin) = start_daemon(&self.data, &self.config, self.log_filter.as_deref())?;
        self.daemon = daemon;
        self.admin = admin;
        Ok(())
    }

    /// The node's `/metrics` text.
    pub fn metrics(&self) -> Result<String> {
        let (status, body) = http_get(self.admin, "/metrics")?;
        anyhow::ensure!(status == 200, "/metrics answered {status}: {body}");
        Ok(body)
    }

    /// The value of the unlabelled sample `name` on `/metrics`.
    pub fn metric(&self, name: &str) -> Result<f64> {
        let text = self.metrics()?;
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
            .with_context(|| format!("no sample {name} on /metrics:\n{text}"))
    }
}

fn start_daemon(
    data: &std::path::Path,
    config: &std::path::Path,
    log_filter: Option<&str>,
) -> Result<(Daemon, SocketAddr)> {
    let config = config.to_str().context("config path is not UTF-8")?;
    let env: Vec<(&str, &std::path::Path)> = log_filter
        .map(|f| ("RUST_LOG", std::path::Path::new(f)))
        .into_iter()
        .collect();
    let (mut daemon, admin) = Daemon::run_local_env(data, &["--config", config], &env)?;
    daemon.wait_healthy(admin, Duration::from_secs(15))?;
    Ok((daemon, admin))
}

/// Writes an edgecore.yaml in `dir` for a node that joins `hub` and bootstraps its certificate
/// with `token` (from the simulator's `httpServer`) when the files under `dir/certs`
/// (`rootCA.crt`, `server.crt`, `server.key`) are missing or unusable; returns its path.
pub fn bootstrap_config(dir: &std::path::Path, hub: &CloudHub, token: &str) -> PathBuf {
    let certs = dir.join("certs");
    let config = format!(
        "apiVersion: edgecore.config.kubeedge.io/v1alpha2
kind: EdgeCore
modules:
  edged:
    hostnameOverride: {NODE}
  eventBus:
    mqttServerInternal: tcp://127.0.0.1:{mqtt}
  edgeHub:
    enable: true
    tlsCaFile: {certs}/rootCA.crt
    tlsCertFile: {certs}/server.crt
    tlsPrivateKeyFile: {certs}/server.key
    httpServer: https://{https}
    token: \"{token}\"
    websocket:
      server: {ws}
",
        mqtt = free_port(),
        certs = certs.display(),
        https = hub.https_addr(),
        ws = hub.ws_addr(),
    );
    let path = dir.join("edgecore.yaml");
    std::fs::write(&path, config).expect("write the node's edgecore.yaml");
    path
}
