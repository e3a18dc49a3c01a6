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
    /// Admin HTTP address for /healthz and /metrics (overrides `wedge.adminAddr`).
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
