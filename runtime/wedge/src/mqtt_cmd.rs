//! `wedge mqtt ...`: helpers for the embedded broker's users file.

use std::io::BufRead;

use anyhow::{Context, Result, bail};

use crate::cli::MqttCommand;
use wedge_eventbus::access::{MIN_ITERATIONS, PasswordHash};

/// Runs a `wedge mqtt` subcommand.
pub fn run(cmd: MqttCommand) -> Result<()> {
    match cmd {
        MqttCommand::HashPassword { iterations } => {
            if iterations < MIN_ITERATIONS {
                bail!("--iterations {iterations}: at least {MIN_ITERATIONS} are required");
            }
            let mut password = String::new();
            std::io::stdin()
                .lock()
                .read_line(&mut password)
                .context("reading the password from standard input")?;
            let password = password.trim_end_matches(['\n', '\r']);
            if password.is_empty() {
                bail!(
                    "no password on standard input (one line, e.g. `read -rs pw; printf '%s\\n' \"$pw\" | wedge mqtt hash-password`)"
                );
            }
            println!(
                "{}",
                PasswordHash::with_random_salt(password.as_bytes(), iterations)?
            );
            Ok(())
        }
    }
}
