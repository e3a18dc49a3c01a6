//! `wedge module dev`: the edit–build–deploy loop against a running node. Builds and deploys
//! the crate, prints the module's log while waiting, and starts over when a source file
//! changes (`guest_build::source_fingerprint`, compared every [`LOOK_EVERY`]). A build or
//! deploy that fails is reported and leaves the deployed version running.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::Result;
use wedge_wasm::guest_build::source_fingerprint;

use crate::cli::AdminArgs;
use crate::module_cmd::{build_crate, deploy, print_logs};

/// How often the sources are compared (and the module's log read).
const LOOK_EVERY: Duration = Duration::from_millis(400);
/// How long the sources must stay unchanged before a build starts (an editor saving several
/// files, or writing one in steps).
const SETTLE: Duration = Duration::from_millis(300);

pub fn run(path: &Path, target_dir: Option<PathBuf>, admin: &AdminArgs) -> Result<()> {
    // A crate that cannot be read now is an error; later read errors (a file replaced while
    // being read) only wait for the next look.
    let mut seen = source_fingerprint(path)
        .map_err(|e| anyhow::anyhow!("cannot read the crate at {}: {e}", path.display()))?;
    let mut name = round(path, target_dir.clone(), admin);
    let mut after = 0;
    eprintln!("wedge: watching {} (interrupt to stop)", path.display());
    loop {
        std::thread::sleep(LOOK_EVERY);
        if let Some(module) = &name {
            match print_logs(module, after, admin) {
                Ok(last) => after = last,
                Err(e) => eprintln!("wedge: {e:#}"),
            }
        }
        let Ok(now) = source_fingerprint(path) else {
            continue;
        };
        if now == seen {
            continue;
        }
        // Wait for the sources to settle, then build what they are then.
        let mut settled = now;
        loop {
            std::thread::sleep(SETTLE);
            match source_fingerprint(path) {
                Ok(again) if again == settled => break,
                Ok(again) => settled = again,
                Err(_) => continue,
            }
        }
        seen = settled;
        eprintln!("wedge: sources changed; rebuilding");
        if let Some(deployed) = round(path, target_dir.clone(), admin) {
            // A new deployment starts a new log.
            name = Some(deployed);
            after = 0;
        }
    }
}

/// One build and deploy; the module's name when it was deployed.
fn round(path: &Path, target_dir: Option<PathBuf>, admin: &AdminArgs) -> Option<String> {
    let started = Instant::now();
    let built = match build_crate(path, None, target_dir) {
        Ok(built) => built,
        Err(e) => {
            eprintln!("wedge: build failed: {e:#}\nwedge: waiting for a change");
            return None;
        }
    };
    let build_time = started.elapsed();
    match deploy(&built.path, admin) {
        Ok(()) => {
            eprintln!(
                "wedge: built in {:.1} s, deployed in {:.1} s",
                build_time.as_secs_f64(),
                (started.elapsed() - build_time).as_secs_f64()
            );
            Some(built.manifest.name)
        }
        Err(e) => {
            eprintln!("wedge: deploy failed: {e:#}\nwedge: waiting for a change");
            None
        }
    }
}
