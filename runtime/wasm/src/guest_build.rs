//! Building a guest crate into a deployable module: find a toolchain, build, validate, package.
//!
//! Two toolchains can build `wasm32-wasip2` components: rustup with the `wasm32-wasip2` target,
//! or Debian's offline Rust (`rustc-web` and friends), which builds the standard library itself
//! with `-Zbuild-std`. The unstable flags are passed here, never written into the guest crate,
//! so the same crate builds unchanged with either.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::engine::WasmEngine;
use crate::error::WasmError;
use crate::manifest::{Manifest, ModuleKind};
use crate::package;

/// Where Debian's offline toolchain puts its pieces.
const DEBIAN_CARGO: &str = "/usr/bin/cargo";
const DEBIAN_STD_SRC: &str = "/usr/lib/rustlib/src/rust/library";
const DEBIAN_WASI_LIBC: &str = "/usr/lib/wasm32-wasi";
const DEBIAN_COMPONENT_LD: &str = "/usr/lib/rustlib/x86_64-unknown-linux-gnu/bin/wasm-component-ld";

/// A toolchain able to build `wasm32-wasip2` components.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Toolchain {
    /// rustup's cargo with the `wasm32-wasip2` target installed.
    Rustup,
    /// Debian's offline Rust with its standard library sources.
    DebianOffline,
}

impl Toolchain {
    /// Finds a usable toolchain, preferring rustup's; the error lists what each one lacks.
    pub fn detect() -> Result<Toolchain, WasmError> {
        let rustup = rustup_target_installed();
        if rustup.is_ok() {
            return Ok(Toolchain::Rustup);
        }
        let missing_debian: Vec<&str> = [
            (DEBIAN_CARGO, "cargo-web"),
            (DEBIAN_STD_SRC, "rust-web-src"),
            (DEBIAN_WASI_LIBC, "wasi-libc"),
            (DEBIAN_COMPONENT_LD, "rust-web-llvm"),
        ]
        .into_iter()
        .filter(|(path, _)| !Path::new(path).exists())
        .map(|(_, package)| package)
        .collect();
        if missing_debian.is_empty() {
            return Ok(Toolchain::DebianOffline);
        }
        Err(WasmError::io(format!(
            "no toolchain can build wasm32-wasip2 components:\n  - rustup: {}\n  - Debian offline \
             toolchain: missing package(s) {} (apt-get install rustc-web cargo-web rust-web-src \
             rust-web-llvm lld wasi-libc)",
            rustup.unwrap_err(),
            missing_debian.join(", ")
        )))
    }

    /// A human name for progress output.
    pub fn describe(&self) -> &'static str {
        match self {
            Toolchain::Rustup => "rustup (wasm32-wasip2 target)",
            Toolchain::DebianOffline => "Debian offline Rust (build-std)",
        }
    }

    /// The `cargo build` command for `manifest_path`, in release mode.
    fn cargo(&self, manifest_path: &Path) -> Command {
        let mut cmd = match self {
            Toolchain::Rustup => Command::new("cargo"),
            Toolchain::DebianOffline => {
                let mut cmd = Command::new(DEBIAN_CARGO);
                let path = std::env::var("PATH").unwrap_or_default();
                cmd.env("PATH", format!("/usr/bin:{path}"))
                    .env("RUSTC_BOOTSTRAP", "1")
                    .env("RUSTFLAGS", format!("-L {DEBIAN_WASI_LIBC}"))
                    // rustup's proxies must not redirect Debian's cargo to another rustc.
                    .env_remove("RUSTUP_TOOLCHAIN")
                    .env_remove("RUSTC")
                    .env_remove("CARGO");
                cmd
            }
        };
        cmd.arg("build")
            .arg("--release")
            .arg("--target")
            .arg("wasm32-wasip2")
            .arg("--manifest-path")
            .arg(manifest_path)
            .arg("--message-format=json-render-diagnostics");
        if *self == Toolchain::DebianOffline {
            cmd.arg("-Zbuild-std=std,panic_abort");
        }
        cmd
    }
}

fn rustup_target_installed() -> Result<(), String> {
    let out = Command::new("rustup")
        .args(["target", "list", "--installed"])
        .stderr(Stdio::null())
        .output()
        .map_err(|_| "rustup not found".to_owned())?;
    if String::from_utf8_lossy(&out.stdout)
        .lines()
        .any(|l| l.trim() == "wasm32-wasip2")
    {
        Ok(())
    } else {
        Err("target wasm32-wasip2 not installed (rustup target add wasm32-wasip2)".to_owned())
    }
}

/// A built and packaged module.
#[derive(Debug, Clone)]
pub struct BuiltModule {
    /// The packaged file.
    pub path: PathBuf,
    /// Its manifest.
    pub manifest: Manifest,
    /// Its size in bytes.
    pub size: u64,
}

/// Where `wedge module build` puts cargo's output when neither `CARGO_TARGET_DIR` nor
/// `--target-dir` says: one directory under the user's cache for every module crate, so std
/// (built from source by the offline toolchain), the SDK and its dependencies compile once,
/// not once per crate. `None` without a usable cache directory (cargo's default then).
pub fn shared_target_dir() -> Option<PathBuf> {
    let cache = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
        .or_else(|| std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".cache")))?;
    Some(cache.join("wedge").join("modules-target"))
}

/// Whether std for wasm32-wasip2 is already built in `target_dir` (the offline toolchain
/// builds it from source in each target directory).
fn std_built_in(target_dir: &Path) -> bool {
    let deps = target_dir
        .join("wasm32-wasip2")
        .join("release")
        .join("deps");
    std::fs::read_dir(deps)
        .map(|entries| {
            entries.flatten().any(|e| {
                let name = e.file_name();
                let name = name.to_string_lossy();
                name.starts_with("libstd-") && name.ends_with(".rlib")
            })
        })
        .unwrap_or(false)
}

/// Builds the guest crate in `crate_dir` (which holds `Cargo.toml` and `wedge.toml`), checks the
/// component implements the manifest's world, and writes `<crate>/target/wedge/<name>.wasm`
/// (or into `out_dir`). cargo builds in `target_dir` when given (else `CARGO_TARGET_DIR` or
/// cargo's default). `progress` receives one line per step.
pub fn build_module(
    crate_dir: &Path,
    toolchain: &Toolchain,
    out_dir: Option<&Path>,
    target_dir: Option<&Path>,
    progress: &mut dyn FnMut(&str),
) -> Result<BuiltModule, WasmError> {
    let manifest_text = std::fs::read_to_string(crate_dir.join("wedge.toml")).map_err(|e| {
        WasmError::io_from(
            format!("cannot read {}", crate_dir.join("wedge.toml").display()),
            e,
        )
    })?;
    let manifest = Manifest::from_toml(&manifest_text)
        .map_err(|e| WasmError::invalid_from("wedge.toml", e))?;
    progress(&format!(
        "building {} {} ({}) with {}",
        manifest.name,
        manifest.version,
        manifest.kind.as_str(),
        toolchain.describe()
    ));
    if let Some(target_dir) = target_dir
        && *toolchain == Toolchain::DebianOffline
        && !std_built_in(target_dir)
    {
        progress(&format!(
            "first build in {}: Rust's std for wasm32-wasip2 is compiled too (several \
             minutes); later builds of any module there reuse it",
            target_dir.display()
        ));
    }
    let component_path = cargo_build(crate_dir, toolchain, target_dir)?;
    let component = std::fs::read(&component_path)
        .map_err(|e| WasmError::io_from(format!("cannot read {}", component_path.display()), e))?;
    progress(&format!(
        "validating {} ({} KiB) against wedge:device/{}",
        component_path.display(),
        component.len() / 1024,
        manifest.kind.as_str()
    ));
    check_world(&component, manifest.kind)?;
    let packaged = package::embed(&component, &manifest)
        .map_err(|e| WasmError::invalid_from("cannot package the component", e))?;
    let out_dir = out_dir
        .map(Path::to_path_buf)
        .unwrap_or_else(|| crate_dir.join("target").join("wedge"));
    std::fs::create_dir_all(&out_dir)
        .map_err(|e| WasmError::io_from(format!("cannot create {}", out_dir.display()), e))?;
    let path = out_dir.join(format!("{}.wasm", manifest.name));
    std::fs::write(&path, &packaged)
        .map_err(|e| WasmError::io_from(format!("cannot write {}", path.display()), e))?;
    progress(&format!(
        "packaged {} ({} KiB)",
        path.display(),
        packaged.len() / 1024
    ));
    Ok(BuiltModule {
        path,
        manifest,
        size: packaged.len() as u64,
    })
}

/// Runs cargo and returns the path of the `.wasm` it produced for the crate.
fn cargo_build(
    crate_dir: &Path,
    toolchain: &Toolchain,
    target_dir: Option<&Path>,
) -> Result<PathBuf, WasmError> {
    let manifest_path = crate_dir.join("Cargo.toml");
    let mut cmd = toolchain.cargo(&manifest_path);
    if let Some(target_dir) = target_dir {
        cmd.env("CARGO_TARGET_DIR", target_dir);
    }
    // Cargo's own progress goes to our stderr; artifact messages come on stdout.
    cmd.stdout(Stdio::piped()).stderr(Stdio::inherit());
    let out = cmd
        .output()
        .map_err(|e| WasmError::io_from("cannot run cargo", e))?;
    if !out.status.success() {
        return Err(WasmError::io(format!(
            "{} did not compile (cargo: {}); cargo's errors are printed above",
            manifest_path.display(),
            out.status,
        )));
    }
    let wanted = std::fs::canonicalize(&manifest_path).unwrap_or(manifest_path.clone());
    let mut produced = None;
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let Ok(msg) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        if msg["reason"] != "compiler-artifact" {
            continue;
        }
        let same_crate = msg["manifest_path"]
            .as_str()
            .map(|p| std::fs::canonicalize(p).unwrap_or_else(|_| PathBuf::from(p)) == wanted)
            .unwrap_or(false);
        if !same_crate {
            continue;
        }
        if let Some(files) = msg["filenames"].as_array() {
            for file in files.iter().filter_map(|f| f.as_str()) {
                if file.ends_with(".wasm") {
                    produced = Some(PathBuf::from(file));
                }
            }
        }
    }
    produced.ok_or_else(|| {
        WasmError::invalid(format!(
            "cargo built no .wasm for {}: is it a `crate-type = [\"cdylib\"]` crate?",
            manifest_path.display()
        ))
    })
}

/// Checks that `component` implements `kind`'s world with the imports Wedge provides, without
/// running any guest code.
pub fn check_world(component: &[u8], kind: ModuleKind) -> Result<(), WasmError> {
    let scratch = std::env::temp_dir().join(format!("wedge-check-{}", std::process::id()));
    let engine = WasmEngine::new(
        &scratch,
        &crate::engine::EngineSettings { max_instances: 4 },
    )?;
    let compiled = wasmtime::component::Component::new(engine.engine(), component)
        .map_err(|e| WasmError::invalid_from("cannot compile the component", e));
    let _ = std::fs::remove_dir_all(&scratch);
    crate::linking::pre_instantiate(&engine, &compiled?, kind).map(|_| ())
}

/// A value that changes when any source file of the crate at `crate_dir` changes (is added,
/// removed, rewritten or touched): a hash of every file's path, size and modification time,
/// leaving out `target/` and hidden entries (`.git`, editors' swap files). `wedge module dev`
/// compares it every few hundred milliseconds — a crate is a handful of files, so walking it
/// costs less than a file-watching service would, and works on every file system.
pub fn source_fingerprint(crate_dir: &Path) -> std::io::Result<u64> {
    use std::hash::{Hash as _, Hasher as _};
    let mut files = Vec::new();
    collect_sources(crate_dir, crate_dir, &mut files)?;
    files.sort();
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    files.hash(&mut hasher);
    Ok(hasher.finish())
}

/// Adds `(relative path, size, mtime)` of every source file under `dir` to `files`.
fn collect_sources(
    root: &Path,
    dir: &Path,
    files: &mut Vec<(PathBuf, u64, Option<std::time::SystemTime>)>,
) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name();
        if name.to_string_lossy().starts_with('.') || (dir == root && name == "target") {
            continue;
        }
        let path = entry.path();
        let meta = entry.metadata()?;
        if meta.is_dir() {
            collect_sources(root, &path, files)?;
        } else {
            let relative = path.strip_prefix(root).unwrap_or(&path).to_owned();
            files.push((relative, meta.len(), meta.modified().ok()));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::source_fingerprint;

    #[test]
    fn the_fingerprint_follows_sources_not_build_output() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir_all(root.join("src")).unwrap();
        std::fs::create_dir_all(root.join("target/wedge")).unwrap();
        std::fs::write(root.join("Cargo.toml"), "[package]").unwrap();
        std::fs::write(root.join("src/lib.rs"), "fn a() {}").unwrap();
        let first = source_fingerprint(root).unwrap();
        assert_eq!(source_fingerprint(root).unwrap(), first, "stable");

        // Build output and hidden files do not count.
        std::fs::write(root.join("target/wedge/m.wasm"), "x").unwrap();
        std::fs::write(root.join("src/.lib.rs.swp"), "x").unwrap();
        assert_eq!(source_fingerprint(root).unwrap(), first);

        // A rewrite of the same length still changes the size or the time; a new file does.
        std::fs::write(root.join("src/lib.rs"), "fn a() { }").unwrap();
        let second = source_fingerprint(root).unwrap();
        assert_ne!(second, first);
        std::fs::write(root.join("src/more.rs"), "").unwrap();
        assert_ne!(source_fingerprint(root).unwrap(), second);
        assert!(source_fingerprint(&root.join("missing")).is_err());
    }
}
