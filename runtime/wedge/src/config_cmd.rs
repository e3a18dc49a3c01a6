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
            let config = match config {
                Some(path) => load(&path)?,
                None => EdgeCoreConfig::embedded_default(),
            };
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

/// Loads a config file, naming the file in any error.
pub fn load(path: &Path) -> Result<EdgeCoreConfig> {
    EdgeCoreConfig::load(path).with_context(|| format!("invalid config {}", path.display()))
}
