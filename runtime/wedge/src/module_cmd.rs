//! `wedge module new|build|test|dev|deploy|list|logs|remove` (and the daemon's own `precompile`).

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use wedge_wasm::guest_build::{Toolchain, build_module};

use crate::admin_client::request;
use crate::cli::{AdminArgs, ModuleCommand, ModuleKindArg};

pub fn run(cmd: ModuleCommand) -> Result<()> {
    match cmd {
        ModuleCommand::New {
            name,
            kind,
            dir,
            sdk_path,
        } => crate::scaffold::new_module(&name, kind, dir.as_deref(), sdk_path.as_deref()),
        ModuleCommand::Build {
            path,
            out_dir,
            target_dir,
        } => build(&path, out_dir.as_deref(), target_dir),
        ModuleCommand::Test {
            file,
            updates,
            devices,
            sets,
            seconds,
        } => crate::module_test::run(&file, &updates, &devices, &sets, seconds),
        ModuleCommand::Dev {
            path,
            target_dir,
            admin,
        } => crate::module_dev::run(&path, target_dir, &admin),
        ModuleCommand::Deploy { file, admin } => deploy(&file, &admin),
        ModuleCommand::List { admin } => list(&admin),
        ModuleCommand::Remove { name, admin } => remove(&name, &admin),
        ModuleCommand::Logs {
            name,
            follow,
            admin,
        } => logs(&name, follow, &admin),
        ModuleCommand::Precompile {
            file,
            cache_dir,
            max_instances,
        } => crate::precompile::precompile(&file, &cache_dir, max_instances),
    }
}

fn build(path: &Path, out_dir: Option<&Path>, target_dir: Option<PathBuf>) -> Result<()> {
    let built = build_crate(path, out_dir, target_dir)?;
    println!("{}", built.path.display());
    Ok(())
}

/// Builds the crate at `path` (cargo's progress on stderr) and returns the packaged module.
pub fn build_crate(
    path: &Path,
    out_dir: Option<&Path>,
    target_dir: Option<PathBuf>,
) -> Result<wedge_wasm::guest_build::BuiltModule> {
    let toolchain = Toolchain::detect()?;
    let target_dir = target_dir
        .or_else(|| std::env::var_os("CARGO_TARGET_DIR").map(PathBuf::from))
        .or_else(wedge_wasm::guest_build::shared_target_dir);
    let built = build_module(
        path,
        &toolchain,
        out_dir,
        target_dir.as_deref(),
        &mut |line| eprintln!("wedge: {line}"),
    )?;
    Ok(built)
}

pub fn deploy(file: &Path, admin: &AdminArgs) -> Result<()> {
    let bytes = std::fs::read(file).with_context(|| format!("cannot read {}", file.display()))?;
    let answer = request(admin, "POST", "/modules", &bytes)?;
    if answer.status != 201 {
        bail!(
            "deploy refused ({}): {}",
            answer.status,
            answer.error_text()
        );
    }
    let status = answer.json()?;
    println!(
        "deployed {} {} ({}, {})",
        status["name"].as_str().unwrap_or("?"),
        status["version"].as_str().unwrap_or("?"),
        status["kind"].as_str().unwrap_or("?"),
        status["state"].as_str().unwrap_or("?"),
    );
    Ok(())
}

fn list(admin: &AdminArgs) -> Result<()> {
    let answer = request(admin, "GET", "/modules", b"")?;
    if answer.status != 200 {
        bail!(
            "listing failed ({}): {}",
            answer.status,
            answer.error_text()
        );
    }
    let modules = answer.json()?;
    let rows = modules.as_array().cloned().unwrap_or_default();
    println!(
        "{:<24} {:<10} {:<13} {:<11} {:>8} {:>6} {:>8}",
        "NAME", "VERSION", "KIND", "STATE", "CALLS", "TRAPS", "RESTARTS"
    );
    for m in rows {
        println!(
            "{:<24} {:<10} {:<13} {:<11} {:>8} {:>6} {:>8}",
            m["name"].as_str().unwrap_or("?"),
            m["version"].as_str().unwrap_or("?"),
            m["kind"].as_str().unwrap_or("?"),
            m["state"].as_str().unwrap_or("?"),
            m["calls"],
            m["traps"],
            m["restarts"],
        );
    }
    Ok(())
}

/// How often `logs --follow` asks for new lines.
const FOLLOW_EVERY: std::time::Duration = std::time::Duration::from_millis(500);

fn logs(name: &str, follow: bool, admin: &AdminArgs) -> Result<()> {
    let mut after = 0u64;
    loop {
        after = print_logs(name, after, admin)?;
        if !follow {
            return Ok(());
        }
        std::thread::sleep(FOLLOW_EVERY);
    }
}

/// Prints module `name`'s log lines after line `after`; returns the last line's number.
pub fn print_logs(name: &str, mut after: u64, admin: &AdminArgs) -> Result<u64> {
    let answer = request(
        admin,
        "GET",
        &format!("/modules/{name}/logs?after={after}"),
        b"",
    )?;
    if answer.status != 200 {
        bail!(
            "logs of {name} ({}): {}",
            answer.status,
            answer.error_text()
        );
    }
    let body = answer.json()?;
    for line in body["lines"].as_array().into_iter().flatten() {
        let seq = line["seq"].as_u64().unwrap_or(after);
        if seq > after + 1 && after > 0 {
            println!(
                "... {} line(s) not kept (the node keeps the last 512)",
                seq - after - 1
            );
        }
        after = seq;
        println!(
            "{} {:<5} {}",
            wedge_core::time::rfc3339_utc(line["unixMs"].as_i64().unwrap_or(0)),
            line["level"].as_str().unwrap_or("?").to_uppercase(),
            line["text"].as_str().unwrap_or_default()
        );
    }
    Ok(after)
}

fn remove(name: &str, admin: &AdminArgs) -> Result<()> {
    let answer = request(admin, "DELETE", &format!("/modules/{name}"), b"")?;
    if answer.status != 204 {
        bail!("remove failed ({}): {}", answer.status, answer.error_text());
    }
    println!("removed {name}");
    Ok(())
}

/// Kind names as the manifest spells them.
pub fn kind_name(kind: ModuleKindArg) -> &'static str {
    match kind {
        ModuleKindArg::Mapper => "mapper",
        ModuleKindArg::TwinHandler => "twin-handler",
    }
}
