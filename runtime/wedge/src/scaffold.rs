//! `wedge module new`: a new guest crate wired to the SDK, ready for `wedge module build`.
//!
//! The crate is standalone (its own `[workspace]`) and carries no toolchain flags, so it builds
//! with a normal rustup (`--target wasm32-wasip2`) as well as with `wedge module build`.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};

use crate::cli::ModuleKindArg;
use crate::module_cmd::kind_name;

/// The SDK this wedge was built from, used when `--sdk-path` is not given and no installed
/// copy is found beside the binary.
const BUILT_WITH_SDK: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../guest-sdk");
/// Where a package installs the SDK source, relative to the binary's directory
/// (`/usr/bin/wedge` → `/usr/share/wedge/guest-sdk`).
const INSTALLED_SDK: &str = "../share/wedge/guest-sdk";

/// The SDK to scaffold against when none is given: an installed copy beside the binary (a
/// package, or a binary copied with its `share/`), else the checkout it was built from.
fn default_sdk() -> PathBuf {
    let installed = std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent().map(|dir| dir.join(INSTALLED_SDK)))
        .filter(|sdk| sdk.join("Cargo.toml").is_file());
    installed.unwrap_or_else(|| PathBuf::from(BUILT_WITH_SDK))
}

pub fn new_module(
    name: &str,
    kind: ModuleKindArg,
    dir: Option<&Path>,
    sdk_path: Option<&Path>,
) -> Result<()> {
    if !wedge_wasm::manifest::valid_module_name(name) {
        bail!("module name {name:?} must be 1-63 characters of a-z, 0-9 and '-'");
    }
    let sdk = match sdk_path {
        Some(path) => path.to_path_buf(),
        None => default_sdk(),
    };
    let sdk = std::fs::canonicalize(&sdk).with_context(|| {
        format!(
            "the guest SDK is not at {}: pass --sdk-path (or set WEDGE_GUEST_SDK) to a wedge-guest checkout, \
             or install the package (it puts the SDK in /usr/share/wedge/guest-sdk)",
            sdk.display()
        )
    })?;
    let root = dir.unwrap_or(Path::new(".")).join(name);
    if root.exists() {
        bail!("{} already exists", root.display());
    }
    std::fs::create_dir_all(root.join("src"))
        .with_context(|| format!("cannot create {}", root.display()))?;
    let feature = kind_name(kind);
    let files = [
        ("Cargo.toml", cargo_toml(name, &sdk, feature)),
        ("wedge.toml", manifest(name, kind)),
        ("src/lib.rs", source(kind).to_owned()),
        (".gitignore", "/target\n".to_owned()),
    ];
    for (file, text) in files {
        let path = root.join(file);
        std::fs::write(&path, text).with_context(|| format!("cannot write {}", path.display()))?;
    }
    // The SDK's lock file pins the versions its tests ran with; cargo adds the new crate to it
    // and keeps the rest, so a module builds against what the SDK was tested with.
    let lock = sdk.join("Cargo.lock");
    if lock.is_file() {
        std::fs::copy(&lock, root.join("Cargo.lock"))
            .with_context(|| format!("cannot copy {}", lock.display()))?;
    }
    println!(
        "created {} ({feature}); build it with `wedge module build {}`",
        root.display(),
        root.display()
    );
    Ok(())
}

fn cargo_toml(name: &str, sdk: &Path, feature: &str) -> String {
    format!(
        r#"[package]
name = "{name}"
version = "0.1.0"
edition = "2024"

[lib]
crate-type = ["cdylib"]

[dependencies]
wedge-guest = {{ path = "{sdk}", features = ["{feature}"] }}
serde = {{ version = "1", features = ["derive"] }}

[profile.release]
opt-level = "s"
lto = true
strip = true
panic = "abort"

# A module is its own workspace.
[workspace]
"#,
        sdk = sdk.display()
    )
}

fn manifest(name: &str, kind: ModuleKindArg) -> String {
    let binding = match kind {
        ModuleKindArg::Mapper => {
            format!("protocol = \"{name}\"         # the device protocol it drives\n")
        }
        ModuleKindArg::TwinHandler => {
            "devices = [\"*\"]              # device ids or * patterns it is bound to\n".to_owned()
        }
    };
    let config = match kind {
        ModuleKindArg::Mapper => "period_ms = 1000\n",
        ModuleKindArg::TwinHandler => "max = 100.0\n",
    };
    format!(
        r#"# The module manifest, embedded in the .wasm by `wedge module build`.
name = "{name}"
version = "0.1.0"
kind = "{kind}"
{binding}
[capabilities]
topics = []                    # MQTT topics it may publish to
endpoints = []                 # ip:port it may connect to

[limits]
memory_mib = 16                # linear memory cap
call_timeout_ms = 100          # per call

# Handed to init() as JSON.
[config]
{config}"#,
        kind = kind_name(kind)
    )
}

fn source(kind: ModuleKindArg) -> &'static str {
    match kind {
        ModuleKindArg::TwinHandler => TWIN_HANDLER_TEMPLATE,
        ModuleKindArg::Mapper => MAPPER_TEMPLATE,
    }
}

const TWIN_HANDLER_TEMPLATE: &str = r#"//! A Wedge twin handler: decides about every twin change of the devices it is bound to.

use wedge_guest::{TwinHandler, TwinUpdate, Verdict};

/// The `[config]` table of wedge.toml.
#[derive(serde::Deserialize)]
struct Config {
    /// Numeric values above this are refused.
    max: f64,
}

struct Handler {
    config: Config,
}

impl TwinHandler for Handler {
    fn init(config: &str) -> Result<Self, String> {
        Ok(Handler {
            config: wedge_guest::parse_config(config)?,
        })
    }

    fn on_update(&mut self, update: &TwinUpdate) -> Verdict {
        match update.value.as_f64() {
            Some(x) if x > self.config.max => Verdict::Reject(format!(
                "{} {x} is above the maximum {}",
                update.property, self.config.max
            )),
            _ => Verdict::Accept,
        }
    }
}

wedge_guest::export_twin_handler!(Handler);
"#;

const MAPPER_TEMPLATE: &str = r#"//! A Wedge mapper: drives the devices of its protocol and reports what it reads.

use std::collections::BTreeMap;

use wedge_guest::{Device, Mapper, TwinValue, report};

/// The `[config]` table of wedge.toml.
#[derive(serde::Deserialize)]
struct Config {
    #[allow(dead_code)]
    period_ms: u64,
}

struct Driver {
    _config: Config,
    /// The last value written to each device property; a real driver talks to the device.
    values: BTreeMap<(String, String), TwinValue>,
    devices: BTreeMap<String, Device>,
}

impl Mapper for Driver {
    fn init(config: &str) -> Result<Self, String> {
        Ok(Driver {
            _config: wedge_guest::parse_config(config)?,
            values: BTreeMap::new(),
            devices: BTreeMap::new(),
        })
    }

    fn add_device(&mut self, device: Device) -> Result<(), String> {
        wedge_guest::info!("driving {}", device.id);
        self.devices.insert(device.id.clone(), device);
        Ok(())
    }

    fn remove_device(&mut self, id: &str) {
        self.devices.remove(id);
    }

    /// Called with the properties whose collect cycle is due (the host keeps the timers).
    fn poll(&mut self, id: &str, properties: &[String]) -> Result<(), String> {
        if !self.devices.contains_key(id) {
            return Err(format!("unknown device {id}"));
        }
        for property in properties {
            let key = (id.to_owned(), property.clone());
            if let Some(value) = self.values.get(&key) {
                report::actual(id, property, value.clone())?;
            }
        }
        Ok(())
    }

    fn write_property(&mut self, id: &str, property: &str, value: TwinValue) -> Result<(), String> {
        self.values.insert((id.to_owned(), property.to_owned()), value);
        Ok(())
    }
}

wedge_guest::export_mapper!(Driver);
"#;
