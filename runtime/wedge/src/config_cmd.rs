//! `wedge config print` and `wedge config check`.

use std::path::Path;

use anyhow::{Context, Result};
use wedge_core::config::{DEFAULT_CONFIG_YAML, EdgeCoreConfig};

use crate::cli::ConfigCommand;

pub fn run(cmd: ConfigCommand) -> Result<()> {
    match cmd {
        ConfigCommand::Print { defaults: true, .. } => {
            print!("{DEFAULT_CONFIG_YAML}");
            Ok(())
        }
        ConfigCommand::Print { config, .. } => {
            let config = node_config(config.as_deref(), None)?;
            print!("{}", config.to_yaml());
            Ok(())
        }
        ConfigCommand::Check { file } => {
            let config = load(&file)?;
            let node = config.node_name()?;
            println!("{}: valid (node name {node})", file.display());
            if let Some(line) = config.not_implemented_line() {
                println!("{line}");
            }
            Ok(())
        }
    }
}

/// The config a node command starts from, as `wedge run` makes it: the file (or the built-in
/// defaults without one), then `--data-dir` when given. `wedge run` and the client commands
/// both build it here, so a client finds the socket and token the node it names uses.
pub fn node_config(path: Option<&Path>, data_dir: Option<&Path>) -> Result<EdgeCoreConfig> {
    let mut config = match path {
        Some(path) => load(path)?,
        None => EdgeCoreConfig::embedded_default(),
    };
    if let Some(dir) = data_dir {
        config.wedge.data_dir = dir.to_string_lossy().into_owned();
    }
    Ok(config)
}

/// Loads a config file, naming the file in any error.
pub fn load(path: &Path) -> Result<EdgeCoreConfig> {
    EdgeCoreConfig::load(path).with_context(|| format!("invalid config {}", path.display()))
}
