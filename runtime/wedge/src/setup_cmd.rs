//! `wedge join` and `wedge reset`: flags in, lines out; the work is `wedge-setup`'s.

use std::io::{BufRead as _, IsTerminal as _, Write as _};

use anyhow::{Context, Result, bail};
use wedge_setup::{JoinOptions, Layout, systemd};

use crate::cli::{JoinArgs, LayoutArgs, ResetArgs};

fn layout(args: &LayoutArgs) -> Layout {
    Layout {
        kubeedge_dir: args.kubeedge_dir.clone(),
        data_dir: args.data_dir.clone(),
    }
}

/// `wedge join`.
pub fn join(args: JoinArgs) -> Result<()> {
    let node = match args.node {
        Some(node) => node,
        None => wedge_core::config::EdgeCoreConfig::default()
            .node_name()
            .context("no --node given and the hostname is not a node name")?,
    };
    let sets = args
        .sets
        .iter()
        .map(|s| wedge_setup::edgecore_yaml::parse_set(s))
        .collect::<Result<Vec<_>, _>>()?;
    let options = JoinOptions {
        cloud: args.cloud,
        cert_port: args.cert_port,
        token: args.token,
        node,
        edged: args.edged,
        sets,
        layout: layout(&args.layout),
        force: args.force,
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let joined = runtime.block_on(wedge_setup::join(&options))?;
    println!(
        "joined node {} to the cloud at {}",
        joined.node, joined.https_server
    );
    println!(
        "wrote {} (certificate for system:node:{})",
        joined.certs.cert.display(),
        joined.node
    );
    println!(
        "wrote {} and {}",
        joined.certs.key.display(),
        joined.certs.ca.display()
    );
    println!("wrote {}", joined.config.display());
    let binary = std::env::current_exe().context("cannot find this binary's path")?;
    let by_hand = format!(
        "{} run --config {} --data-dir {}",
        binary.display(),
        joined.config.display(),
        options.layout.data_dir.display()
    );
    if args.no_start {
        println!("not started (--no-start); start it with:\n  {by_hand}");
        return Ok(());
    }
    if !systemd::running() {
        // The package's service user gets the files all the same, so the unit's command can
        // be run by hand as that user (or the unit used once systemd runs).
        let root = wedge_core::private_fs::effective_uid() == 0;
        if systemd::service_user_exists() && root {
            for step in systemd::hand_over(&options.layout)? {
                println!("{step}");
            }
            println!(
                "systemd does not run here, so no service was installed; start the node as the service's user with:\n  runuser -u {user} -g {user}{docker} -- {by_hand}",
                user = systemd::SERVICE_USER,
                docker = if options.edged && systemd::group_exists("docker") {
                    " -G docker"
                } else {
                    ""
                }
            );
        } else {
            println!(
                "systemd does not run here, so no service was installed; start the node with:\n  {by_hand}"
            );
        }
        return Ok(());
    }
    for step in systemd::install(
        &binary,
        &options.layout,
        &args.layout.unit_dir,
        options.edged,
    )? {
        println!("{step}");
    }
    println!(
        "the node is starting: `systemctl status wedge`, `journalctl -u wedge -f`; `kubectl get node {}` on the cloud",
        options.node
    );
    Ok(())
}

/// `wedge reset`.
pub fn reset(args: ResetArgs) -> Result<()> {
    let plan = wedge_setup::reset_plan(&layout(&args.layout), &args.layout.unit_dir);
    let lines = plan.describe();
    if lines.is_empty() {
        println!("nothing to reset: no unit, config, certificates or data at the given paths");
        return Ok(());
    }
    println!("wedge reset will:");
    for line in &lines {
        println!("  {line}");
    }
    if !args.force {
        if !std::io::stdin().is_terminal() {
            bail!("not a terminal to ask on: pass --force to reset");
        }
        print!("go on? [y/N] ");
        std::io::stdout().flush()?;
        let mut answer = String::new();
        std::io::stdin().lock().read_line(&mut answer)?;
        if !matches!(answer.trim(), "y" | "Y" | "yes") {
            println!("nothing changed");
            return Ok(());
        }
    }
    for step in plan.execute()? {
        println!("{step}");
    }
    println!(
        "containers edged started are left to the container runtime; the Node object stays in the cloud (`kubectl delete node` there)"
    );
    Ok(())
}
