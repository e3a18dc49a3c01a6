//! `wedge module new`: a new guest crate wired to the SDK.

use std::path::Path;

use anyhow::{Result, bail};

use crate::cli::ModuleKindArg;

pub fn new_module(
    name: &str,
    kind: ModuleKindArg,
    dir: Option<&Path>,
    sdk_path: Option<&Path>,
) -> Result<()> {
    let _ = (name, kind, dir, sdk_path);
    bail!("not yet")
}
