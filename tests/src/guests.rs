//! Real guest components for tests, built from `modules/` with the same code as
//! `wedge module build`.
//!
//! Each module is built at most once per test process; cargo's own incremental build makes later
//! processes fast. When no toolchain can build `wasm32-wasip2`, the test fails and says which
//! packages are missing.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

use wedge_wasm::guest_build::{Toolchain, build_module};

/// The repository's root (this crate lives in `<root>/tests`).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ has a parent")
        .to_path_buf()
}

/// Builds (once) and returns the packaged module of the crate at `modules/<relative>`, e.g.
/// `threshold` or `test-guests/spin`.
pub fn module(relative: &str) -> PathBuf {
    try_module(relative).unwrap_or_else(|e| panic!("{e}"))
}

/// [`module`] for programs that report a failed build instead of panicking (the benchmark
/// binaries).
pub fn try_module(relative: &str) -> Result<PathBuf, String> {
    static BUILT: OnceLock<Mutex<HashMap<String, PathBuf>>> = OnceLock::new();
    let built = BUILT.get_or_init(Default::default);
    // One build at a time: cargo would serialise them on its lock anyway.
    let mut built = built.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(path) = built.get(relative) {
        return Ok(path.clone());
    }
    let toolchain = Toolchain::detect().map_err(|e| e.to_string())?;
    let crate_dir = repo_root().join("modules").join(relative);
    let out_dir = repo_root().join("modules/target/wedge");
    let module = build_module(&crate_dir, &toolchain, Some(&out_dir), None, &mut |line| {
        eprintln!("[guest build] {line}")
    })
    .map_err(|e| format!("building guest {relative} failed: {e}"))?;
    built.insert(relative.to_owned(), module.path.clone());
    Ok(module.path)
}

/// The packaged bytes of [`module`].
pub fn module_bytes(relative: &str) -> Vec<u8> {
    std::fs::read(module(relative)).expect("read built module")
}
