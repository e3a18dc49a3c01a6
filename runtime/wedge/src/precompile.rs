//! Compiling deployed components in a child process.
//!
//! Cranelift needs tens of MiB while it compiles, and touches much of the compiler's code in
//! this binary; done in the daemon, that memory stays counted in the node's RSS long after the
//! deploy. So `POST /modules` first runs `wedge module precompile` (this same binary) to compile
//! the component into the node's disk cache, and the daemon then only loads the cached machine
//! code. If the child fails for any reason the daemon compiles in-process as before, and that
//! path reports the module's real error.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{Context, Result, bail};
use wedge_wasm::{EngineSettings, WasmEngine, package};

/// What the child needs to produce a cache entry the daemon's engine accepts.
#[derive(Debug, Clone)]
pub struct Precompiler {
    /// The engine's disk cache (`<dataDir>/modules/cache`).
    pub cache_dir: PathBuf,
    /// The engine's instance pool size (part of its compatibility hash).
    pub max_instances: u32,
}

impl Precompiler {
    /// Compiles the packaged module `bytes` into the cache in a child process. Errors are for
    /// the log only; the caller goes on either way.
    pub async fn run(&self, bytes: &[u8]) -> Result<()> {
        let this = self.clone();
        let bytes = bytes.to_vec();
        tokio::task::spawn_blocking(move || this.run_blocking(&bytes))
            .await
            .context("precompile task")?
    }

    fn run_blocking(&self, bytes: &[u8]) -> Result<()> {
        wedge_core::private_fs::ensure_private_dir(&self.cache_dir)?;
        let file = tempfile::Builder::new()
            .prefix("incoming-")
            .suffix(".wasm")
            .tempfile_in(&self.cache_dir)?;
        std::fs::write(file.path(), bytes)?;
        let exe = std::env::current_exe().context("cannot find the wedge binary")?;
        let output = Command::new(exe)
            .args(["module", "precompile", "--cache-dir"])
            .arg(&self.cache_dir)
            .arg("--max-instances")
            .arg(self.max_instances.to_string())
            .arg(file.path())
            .stdin(Stdio::null())
            .output()
            .context("cannot start the compiler process")?;
        if !output.status.success() {
            bail!(
                "compiler process exited with {}: {}",
                output.status,
                String::from_utf8_lossy(&output.stderr).trim()
            );
        }
        Ok(())
    }
}

/// `wedge module precompile`: compiles a packaged module into `cache_dir`.
pub fn precompile(file: &Path, cache_dir: &Path, max_instances: u32) -> Result<()> {
    let bytes = std::fs::read(file).with_context(|| format!("cannot read {}", file.display()))?;
    let code = package::without_manifest(&bytes).map_err(|e| anyhow::anyhow!("{e}"))?;
    let engine = WasmEngine::new(cache_dir, &EngineSettings { max_instances })?;
    engine.component(&code)?;
    Ok(())
}
