//! The module manifest: what a module is and what it may do.
//!
//! Authors write it as `wedge.toml` beside the guest crate; `wedge module build` embeds it as
//! JSON in the component (see `package`), so a deployable module is one file. Nothing a guest
//! may do — topics, endpoints, memory, time — is granted outside the manifest.

use serde::{Deserialize, Serialize};

/// Which world a module implements.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ModuleKind {
    /// `wedge:device/mapper`: a device driver.
    Mapper,
    /// `wedge:device/twin-handler`: a hook in the twin update path.
    TwinHandler,
}

impl ModuleKind {
    /// The name used in manifests and listings.
    pub fn as_str(self) -> &'static str {
        match self {
            ModuleKind::Mapper => "mapper",
            ModuleKind::TwinHandler => "twin-handler",
        }
    }
}

/// What a module may touch.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Capabilities {
    /// MQTT topics it may publish to (`+` and `#` wildcards).
    #[serde(default)]
    pub topics: Vec<String>,
    /// Endpoints it may reach over TCP and UDP, as grants (`ip:port`, `10.0.0.0/8:502`,
    /// `plc.lan:502`, `*:502`, port ranges; see [`crate::grants`]).
    #[serde(default)]
    pub endpoints: Vec<String>,
    /// Serial ports it may open, as device path patterns (`/dev/ttyUSB*`,
    /// `/dev/serial/by-id/*`; `*` stands for one path segment or part of one).
    #[serde(default)]
    pub serial: Vec<String>,
}

/// Resource limits of every call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Limits {
    /// Linear memory cap in MiB.
    #[serde(default = "default_memory_mib")]
    pub memory_mib: u32,
    /// Wall-clock budget of one call in milliseconds (enforced on guest code by epochs).
    #[serde(default = "default_call_timeout_ms")]
    pub call_timeout_ms: u32,
}

fn default_memory_mib() -> u32 {
    16
}
fn default_call_timeout_ms() -> u32 {
    100
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            memory_mib: default_memory_mib(),
            call_timeout_ms: default_call_timeout_ms(),
        }
    }
}

/// Largest memory limit a manifest may ask for.
pub const MAX_MEMORY_MIB: u32 = 256;
/// Longest call timeout a manifest may ask for.
pub const MAX_CALL_TIMEOUT_MS: u32 = 60_000;

/// A module's manifest.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    /// Unique name on the node: `[a-z0-9-]`, 1 to 63 characters, starting with a letter or digit.
    pub name: String,
    /// Semantic version.
    pub version: String,
    /// Which world the component implements.
    pub kind: ModuleKind,
    /// Mappers: the device protocol it drives.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub protocol: Option<String>,
    /// Twin handlers: device ids or `*` patterns it is bound to.
    #[serde(default)]
    pub devices: Vec<String>,
    /// What it may touch.
    #[serde(default)]
    pub capabilities: Capabilities,
    /// Limits of each call.
    #[serde(default)]
    pub limits: Limits,
    /// Free-form configuration, handed to the module's `init` as JSON.
    #[serde(default = "empty_config")]
    pub config: serde_json::Value,
}

fn empty_config() -> serde_json::Value {
    serde_json::Value::Object(Default::default())
}

/// Why a manifest is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid manifest: {0}")]
pub struct ManifestError(pub String);

impl Manifest {
    /// Parses `wedge.toml` text and validates it.
    pub fn from_toml(text: &str) -> Result<Manifest, ManifestError> {
        let manifest: Manifest =
            toml::from_str(text).map_err(|e| ManifestError(e.message().to_owned()))?;
        manifest.validate()?;
        Ok(manifest)
    }

    /// Parses the embedded JSON form and validates it.
    pub fn from_json(bytes: &[u8]) -> Result<Manifest, ManifestError> {
        let manifest: Manifest =
            serde_json::from_slice(bytes).map_err(|e| ManifestError(e.to_string()))?;
        manifest.validate()?;
        Ok(manifest)
    }

    /// The embedded JSON form.
    pub fn to_json(&self) -> Vec<u8> {
        serde_json::to_vec(self).unwrap_or_default()
    }

    /// The `config` table as JSON text, for `init`.
    pub fn config_json(&self) -> String {
        self.config.to_string()
    }

    /// The endpoint grants (validated by [`Manifest::validate`]; an invalid entry grants
    /// nothing).
    pub fn endpoint_grants(&self) -> crate::grants::Grants {
        crate::grants::Grants::parse(&self.capabilities.endpoints).unwrap_or_default()
    }

    /// Checks every field; the error names the field and what is allowed.
    pub fn validate(&self) -> Result<(), ManifestError> {
        let fail = |msg: String| Err(ManifestError(msg));
        if !valid_module_name(&self.name) {
            return fail(format!(
                "name {:?} must be 1-63 characters of a-z, 0-9 and '-', not starting or ending with '-'",
                self.name
            ));
        }
        if !is_semver(&self.version) {
            return fail(format!(
                "version {:?} is not a semantic version like 1.2.3",
                self.version
            ));
        }
        match (self.kind, &self.protocol) {
            (ModuleKind::Mapper, None) => {
                return fail("a mapper must name the `protocol` it drives".to_owned());
            }
            (ModuleKind::Mapper, Some(p)) if p.trim().is_empty() => {
                return fail("`protocol` must not be empty".to_owned());
            }
            _ => {}
        }
        if self.kind == ModuleKind::TwinHandler && self.devices.is_empty() {
            return fail(
                "a twin handler must bind at least one device in `devices` (\"*\" for all)"
                    .to_owned(),
            );
        }
        for topic in &self.capabilities.topics {
            if !crate::capabilities::valid_topic_filter(topic) {
                return fail(format!(
                    "capabilities.topics: {topic:?} is not an MQTT topic filter"
                ));
            }
        }
        if let Err(e) = crate::grants::Grants::parse(&self.capabilities.endpoints) {
            return fail(format!("capabilities.endpoints: {e}"));
        }
        for pattern in &self.capabilities.serial {
            crate::serial::check_pattern(pattern).map_err(ManifestError)?;
        }
        if self.kind == ModuleKind::TwinHandler && !self.capabilities.serial.is_empty() {
            return fail("capabilities.serial: only mappers open serial ports".to_owned());
        }
        if self.limits.memory_mib == 0 || self.limits.memory_mib > MAX_MEMORY_MIB {
            return fail(format!(
                "limits.memory_mib {} must be 1..={MAX_MEMORY_MIB}",
                self.limits.memory_mib
            ));
        }
        if self.limits.call_timeout_ms == 0 || self.limits.call_timeout_ms > MAX_CALL_TIMEOUT_MS {
            return fail(format!(
                "limits.call_timeout_ms {} must be 1..={MAX_CALL_TIMEOUT_MS}",
                self.limits.call_timeout_ms
            ));
        }
        if !self.config.is_object() {
            return fail("config must be a table".to_owned());
        }
        Ok(())
    }
}

/// A module name: 1 to 63 characters of `a-z`, `0-9` and `-`, not starting or ending with `-`
/// (it names files, crates and metrics labels).
pub fn valid_module_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 63
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !name.starts_with('-')
        && !name.ends_with('-')
}

fn is_semver(v: &str) -> bool {
    let core = v.split(['-', '+']).next().unwrap_or_default();
    let parts: Vec<&str> = core.split('.').collect();
    parts.len() == 3
        && parts
            .iter()
            .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"
name = "modbus-tcp"
version = "0.1.0"
kind = "mapper"
protocol = "modbus-tcp"
[capabilities]
endpoints = ["127.0.0.1:1502"]
topics = ["wedge/+/alerts/#"]
[limits]
memory_mib = 8
call_timeout_ms = 500
[config]
retries = 3
"#;

    #[test]
    fn parses_toml_and_round_trips_json() {
        let m = Manifest::from_toml(GOOD).unwrap();
        assert_eq!(m.kind, ModuleKind::Mapper);
        assert_eq!(m.endpoint_grants().describe(), "127.0.0.1:1502");
        assert_eq!(m.config_json(), r#"{"retries":3}"#);
        assert_eq!(Manifest::from_json(&m.to_json()).unwrap(), m);
    }

    #[test]
    fn defaults_apply() {
        let m = Manifest::from_toml(
            "name = \"t\"\nversion = \"1.0.0\"\nkind = \"twin-handler\"\ndevices = [\"*\"]\n",
        )
        .unwrap();
        assert_eq!(m.limits, Limits::default());
        assert_eq!(m.config_json(), "{}");
    }

    #[test]
    fn each_bad_field_is_named() {
        for (text, expected) in [
            (
                GOOD.replace("modbus-tcp\"\nversion", "Modbus\"\nversion"),
                "name",
            ),
            (GOOD.replace("0.1.0", "one"), "version"),
            (
                GOOD.replace("kind = \"mapper\"", "kind = \"driver\""),
                "unknown variant",
            ),
            (GOOD.replace("protocol = \"modbus-tcp\"\n", ""), "protocol"),
            (
                GOOD.replace("127.0.0.1:1502", "plc.local:port"),
                "capabilities.endpoints",
            ),
            (
                GOOD.replace("wedge/+/alerts/#", "a/#/b"),
                "capabilities.topics",
            ),
            (
                GOOD.replace("[limits]", "serial = [\"/etc/*\"]\n[limits]"),
                "capabilities.serial",
            ),
            (
                GOOD.replace("memory_mib = 8", "memory_mib = 4096"),
                "limits.memory_mib",
            ),
            (
                GOOD.replace("call_timeout_ms = 500", "call_timeout_ms = 0"),
                "limits.call_timeout_ms",
            ),
            (
                GOOD.replace("[limits]", "sneaky = true\n[limits]"),
                "sneaky",
            ),
        ] {
            let err = Manifest::from_toml(&text).unwrap_err().to_string();
            assert!(err.contains(expected), "{err:?} lacks {expected:?}");
        }
        let handler = "name = \"t\"\nversion = \"1.0.0\"\nkind = \"twin-handler\"\n";
        assert!(
            Manifest::from_toml(handler)
                .unwrap_err()
                .to_string()
                .contains("devices")
        );
    }
}
