//! Command-line arguments.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

/// Wedge: a WebAssembly-extensible edge runtime compatible with KubeEdge's edgecore.
#[derive(Debug, Parser)]
#[command(name = "wedge", version, about)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the node daemon (embedded defaults: internal MQTT broker, local SQLite, no cloud).
    Run(RunArgs),
    /// Show or check configuration.
    #[command(subcommand)]
    Config(ConfigCommand),
    /// Write, build and deploy Wasm modules (device mappers and twin handlers).
    #[command(subcommand)]
    Module(ModuleCommand),
    /// The embedded MQTT broker's users file (`wedge.mqtt.usersFile`).
    #[command(subcommand)]
    Mqtt(MqttCommand),
    /// The devices of a running node.
    #[command(subcommand)]
    Device(DeviceCommand),
    /// The twins of a device on a running node: read them, set a desired value.
    #[command(subcommand)]
    Twin(TwinCommand),
    /// Join this node to a KubeEdge cloud with a join token (as `keadm join` does for
    /// edgecore): certificate, edgecore.yaml, and the systemd unit, started.
    Join(JoinArgs),
    /// Undo a join: stop the service, remove its unit, the config, the certificates and the
    /// node's data.
    Reset(ResetArgs),
    /// Check what this node needs: config, data directory, ports, the cloud and its
    /// certificate, the container runtime, the DMI socket, the guest toolchain, and a running
    /// node's modules. Exits non-zero when something fails.
    Check {
        /// edgecore.yaml to check (default: /etc/kubeedge/config/edgecore.yaml when it
        /// exists, else the built-in defaults).
        #[arg(long, short, env = "WEDGE_CONFIG")]
        config: Option<PathBuf>,
    },
    /// Print a shell completion script (e.g. `wedge completions bash > /etc/bash_completion.d/wedge`).
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
}

/// `wedge join`.
#[derive(Debug, Args)]
pub struct JoinArgs {
    /// CloudHub's WebSocket address, HOST[:PORT] (port 10000 when left out).
    #[arg(long)]
    pub cloud: String,
    /// The join token (`keadm gettoken` on the cloud).
    #[arg(long, env = "WEDGE_JOIN_TOKEN", hide_env_values = true)]
    pub token: String,
    /// The node's name (default: this machine's hostname).
    #[arg(long)]
    pub node: Option<String>,
    /// CloudHub's HTTPS port for certificates, on the same host.
    #[arg(long, default_value_t = wedge_setup::join::CERT_PORT)]
    pub cert_port: u16,
    /// Run pods on this node (edged on Docker).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub edged: bool,
    /// Set a config key, as `keadm join --set`: `modules.edged.podSandboxImage=kubeedge/pause:3.6`
    /// (repeatable; values read as YAML).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub sets: Vec<String>,
    /// Write the config and certificates only; do not install or start the service.
    #[arg(long)]
    pub no_start: bool,
    /// Join again over an existing config (the node gets a new certificate).
    #[arg(long)]
    pub force: bool,
    /// Where the files go.
    #[command(flatten)]
    pub layout: LayoutArgs,
}

/// `wedge reset`.
#[derive(Debug, Args)]
pub struct ResetArgs {
    /// Remove without asking.
    #[arg(long, short)]
    pub force: bool,
    /// Where the files are.
    #[command(flatten)]
    pub layout: LayoutArgs,
}

/// Where a joined node's files are.
#[derive(Debug, Args)]
pub struct LayoutArgs {
    /// KubeEdge's directory: config/edgecore.yaml, ca/, certs/, dmi.sock.
    #[arg(long, default_value = wedge_setup::layout::KUBEEDGE_DIR)]
    pub kubeedge_dir: PathBuf,
    /// The node's data directory.
    #[arg(long, default_value = wedge_setup::layout::DATA_DIR)]
    pub data_dir: PathBuf,
    /// Where the systemd unit goes.
    #[arg(long, default_value = wedge_setup::layout::UNIT_DIR)]
    pub unit_dir: PathBuf,
}

/// `wedge mqtt ...`.
#[derive(Debug, Subcommand)]
pub enum MqttCommand {
    /// Read a password on standard input (one line) and print its `passwordHash` for the users
    /// file (PBKDF2-HMAC-SHA256, random salt).
    HashPassword {
        /// PBKDF2 iterations (at least 1,000; checking a log-in costs about this many).
        #[arg(long, default_value_t = 100_000)]
        iterations: u32,
    },
}

/// Where `wedge module ...` reaches a node's admin API: its unix socket by default (found
/// exactly as `wedge run` resolves it from the same `--config` and `--data-dir`), or TCP with
/// a bearer token.
#[derive(Debug, Clone, Args)]
pub struct AdminArgs {
    /// The node's edgecore.yaml: its `wedge.dataDir` and `wedge.admin.socket`/`tokenFile` say
    /// where the admin socket and token are (default: the built-in defaults, as `wedge run`).
    #[arg(long, short, env = "WEDGE_CONFIG")]
    pub config: Option<PathBuf>,
    /// The node's data directory, which holds its admin socket and token (overrides the
    /// config's `wedge.dataDir`, as for `wedge run`).
    #[arg(long, env = "WEDGE_DATA_DIR")]
    pub data_dir: Option<PathBuf>,
    /// The node's admin socket (default: the config's `wedge.admin.socket`, or
    /// <data dir>/admin.sock).
    #[arg(long, env = "WEDGE_ADMIN_SOCKET")]
    pub admin_socket: Option<PathBuf>,
    /// Reach the node over TCP at this address (its `wedge.adminAddr`) instead of the socket.
    #[arg(long, env = "WEDGE_ADMIN_ADDR", conflicts_with = "admin_socket")]
    pub admin_addr: Option<SocketAddr>,
    /// File with the bearer token for TCP (default: the config's `wedge.admin.tokenFile`, or
    /// <data dir>/admin.token, when readable).
    #[arg(long, env = "WEDGE_ADMIN_TOKEN_FILE")]
    pub token_file: Option<PathBuf>,
}

/// `wedge module ...`.
#[derive(Debug, Subcommand)]
pub enum ModuleCommand {
    /// Scaffold a new module crate that uses the guest SDK.
    New {
        /// Module name ([a-z0-9-]); also the crate's directory name.
        name: String,
        /// Which world it implements.
        #[arg(long, value_enum)]
        kind: ModuleKindArg,
        /// Parent directory of the new crate (default: current directory).
        #[arg(long)]
        dir: Option<PathBuf>,
        /// Path of the `wedge-guest` SDK crate (default: the SDK this wedge was built with).
        #[arg(long, env = "WEDGE_GUEST_SDK")]
        sdk_path: Option<PathBuf>,
    },
    /// Build a module crate into one deployable .wasm (component + embedded manifest).
    Build {
        /// The crate directory (holding Cargo.toml and wedge.toml).
        #[arg(default_value = ".")]
        path: PathBuf,
        /// Where to write the packaged module (default: <crate>/target/wedge/).
        #[arg(long)]
        out_dir: Option<PathBuf>,
        /// cargo's target directory (default: `CARGO_TARGET_DIR` when set, else one directory
        /// shared by every module under the user's cache, ~/.cache/wedge/modules-target, so
        /// std and the SDK compile once).
        #[arg(long)]
        target_dir: Option<PathBuf>,
    },
    /// Try a packaged module without a node: a twin handler reviews the updates given, a
    /// mapper drives the devices of a Device YAML file for a while (what it reports, states
    /// and publishes is printed, then its log).
    #[command(after_help = TEST_EXAMPLES)]
    Test {
        /// The packaged .wasm file (`wedge module build` prints its path).
        file: PathBuf,
        /// An update for a twin handler to review, JSON, or @FILE holding it (repeatable; a
        /// JSON array is several updates). Keys: device, property, value, type
        /// (int|float|boolean|string, default string), and optional desired (bool), previous,
        /// source (mapper|cloud), twins (list of {device, property, actual, desired} the
        /// handler may read).
        #[arg(long = "update", value_name = "JSON")]
        updates: Vec<String>,
        /// A Device YAML file (Devices with their DeviceModels, as in wedge.devices.dir)
        /// whose devices of the mapper's protocol it drives (repeatable).
        #[arg(long = "device", value_name = "FILE")]
        devices: Vec<PathBuf>,
        /// A desired value for the mapper to write once it drives the devices:
        /// [DEVICE:]PROPERTY=VALUE, without DEVICE for every device that has the property
        /// (repeatable).
        #[arg(long = "set", value_name = "[DEVICE:]PROPERTY=VALUE")]
        sets: Vec<String>,
        /// How long a mapper runs, in seconds.
        #[arg(long, default_value_t = 3.0)]
        seconds: f64,
    },
    /// Build, deploy, then rebuild and redeploy whenever the crate's sources change, printing
    /// the module's log in between (until interrupted). A failed build leaves the deployed
    /// version running.
    Dev {
        /// The crate directory (holding Cargo.toml and wedge.toml).
        #[arg(default_value = ".")]
        path: PathBuf,
        /// cargo's target directory (as for `wedge module build`).
        #[arg(long)]
        target_dir: Option<PathBuf>,
        /// How to reach the node.
        #[command(flatten)]
        admin: AdminArgs,
    },
    /// Deploy (or upgrade) a packaged module on a running node.
    Deploy {
        /// The packaged .wasm file.
        file: PathBuf,
        /// How to reach the node.
        #[command(flatten)]
        admin: AdminArgs,
    },
    /// List the modules deployed on a running node.
    List {
        /// How to reach the node.
        #[command(flatten)]
        admin: AdminArgs,
    },
    /// Show a module's last log lines (the node keeps its last 512), oldest first.
    Logs {
        /// Module name.
        name: String,
        /// Keep printing new lines as the module writes them (until interrupted).
        #[arg(short, long)]
        follow: bool,
        /// How to reach the node.
        #[command(flatten)]
        admin: AdminArgs,
    },
    /// Remove a module from a running node.
    Remove {
        /// Module name.
        name: String,
        /// How to reach the node.
        #[command(flatten)]
        admin: AdminArgs,
    },
    /// Compile a packaged module into a node's component cache (run by the daemon itself, so
    /// the compiler's memory is never the daemon's).
    #[command(hide = true)]
    Precompile {
        /// The packaged .wasm file.
        file: PathBuf,
        /// The node's component cache.
        #[arg(long)]
        cache_dir: PathBuf,
        /// The node's `wedge.modules.maxInstances`.
        #[arg(long)]
        max_instances: u32,
    },
}

/// Examples under `wedge module test --help`.
const TEST_EXAMPLES: &str = "Examples:
  wedge module test threshold.wasm --update '{\"device\":\"default/thermo-1\",\"property\":\"temperature\",\"value\":\"120\",\"type\":\"float\"}'
  wedge module test virtual-thermometer.wasm --device conf/examples/virtual-thermometer.yaml --set setpoint=30 --seconds 5";

/// Module kinds on the command line.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum ModuleKindArg {
    /// A device driver (`wedge:device/mapper`).
    Mapper,
    /// A hook in the twin update path (`wedge:device/twin-handler`).
    TwinHandler,
}

/// Options of `wedge run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// edgecore.yaml to use; without it the built-in defaults apply.
    #[arg(long, short, env = "WEDGE_CONFIG")]
    pub config: Option<PathBuf>,
    /// Directory for the node's state (overrides `wedge.dataDir`).
    #[arg(long, env = "WEDGE_DATA_DIR")]
    pub data_dir: Option<PathBuf>,
    /// Also serve the admin API on this loopback TCP address (overrides `wedge.adminAddr`):
    /// /healthz and /metrics open, /modules with the token of `wedge.admin.tokenFile`.
    #[arg(long)]
    pub admin_addr: Option<SocketAddr>,
    /// Log format (overrides `wedge.logFormat`).
    #[arg(long, value_enum)]
    pub log_format: Option<LogFormatArg>,
}

/// Log output formats.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum LogFormatArg {
    /// Readable lines.
    Human,
    /// One JSON object per line.
    Json,
}

/// `wedge config ...`.
#[derive(Debug, Subcommand)]
pub enum ConfigCommand {
    /// Print the effective configuration as YAML.
    Print {
        /// edgecore.yaml to merge over the defaults.
        #[arg(long, short, env = "WEDGE_CONFIG")]
        config: Option<PathBuf>,
        /// Print the commented default file instead.
        #[arg(long, conflicts_with = "config")]
        defaults: bool,
    },
    /// Check a configuration file; exits non-zero and names each bad key when it is invalid.
    Check {
        /// The file to check.
        file: PathBuf,
    },
}

/// How a command prints what it read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Output {
    /// A table for people.
    Table,
    /// JSON, as the admin API answers.
    Json,
    /// YAML.
    Yaml,
}

/// `wedge device ...`.
#[derive(Debug, Subcommand)]
pub enum DeviceCommand {
    /// List the node's devices.
    List {
        /// Output format.
        #[arg(short, long, value_enum, default_value = "table")]
        output: Output,
        /// How to reach the node.
        #[command(flatten)]
        admin: AdminArgs,
    },
    /// Show one device: state, attributes and twins.
    Get {
        /// The device, `<namespace>/<name>`.
        device: String,
        /// Output format.
        #[arg(short, long, value_enum, default_value = "table")]
        output: Output,
        /// How to reach the node.
        #[command(flatten)]
        admin: AdminArgs,
    },
}

/// `wedge twin ...`.
#[derive(Debug, Subcommand)]
pub enum TwinCommand {
    /// Show a device's twins (desired and reported values).
    Get {
        /// The device, `<namespace>/<name>`.
        device: String,
        /// Output format.
        #[arg(short, long, value_enum, default_value = "table")]
        output: Output,
        /// How to reach the node.
        #[command(flatten)]
        admin: AdminArgs,
    },
    /// Set a desired value, delivered as one from the cloud: twin handlers review it, and the
    /// device's mapper gets it.
    Set {
        /// The device, `<namespace>/<name>`.
        device: String,
        /// `PROPERTY=VALUE`.
        assignment: String,
        /// How to reach the node.
        #[command(flatten)]
        admin: AdminArgs,
    },
}
