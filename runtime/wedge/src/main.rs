//! `wedge`: the Wedge edge-node daemon and its command line.
//!
//! `wedge run` starts the node; `wedge config print|check` show and check configuration. This
//! crate is the only place that knows every module: it opens the store, wires the modules onto
//! the bus under supervision, and serves the admin API.

mod admin;
mod admin_client;
mod admin_devices;
mod admin_guard;
mod admin_server;
mod admin_token;
mod cert_rotation;
mod check_cmd;
mod cli;
mod config_cmd;
mod daemon;
mod device_cmd;
mod edged_config;
mod heap;
mod logging;
mod module_cmd;
mod module_dev;
mod module_test;
mod mqtt_cmd;
mod precompile;
mod reload;
mod rlimit;
mod scaffold;
mod setup_cmd;
mod wasm_bridge;
mod wasm_pods;

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let cli = cli::Cli::parse();
    let result = match cli.command {
        cli::Command::Run(args) => daemon::run(args),
        cli::Command::Config(cmd) => config_cmd::run(cmd),
        cli::Command::Module(cmd) => module_cmd::run(cmd),
        cli::Command::Mqtt(cmd) => mqtt_cmd::run(cmd),
        cli::Command::Device(cmd) => device_cmd::device(cmd),
        cli::Command::Twin(cmd) => device_cmd::twin(cmd),
        cli::Command::Join(args) => setup_cmd::join(args),
        cli::Command::Reset(args) => setup_cmd::reset(args),
        cli::Command::Check { config } => check_cmd::run(config),
        cli::Command::Completions { shell } => {
            use clap::CommandFactory;
            let mut command = cli::Cli::command();
            clap_complete::generate(shell, &mut command, "wedge", &mut std::io::stdout());
            Ok(())
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("wedge: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
