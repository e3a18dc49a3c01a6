//! The files a run needs, all inside one temporary directory: the daemon's edgecore.yaml, the
//! devices directory (one DeviceModel plus N Devices) and, for an external broker, mosquitto's
//! config.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

/// Namespace of the load devices: ids are `default/load-<i>`.
pub const NAMESPACE: &str = "default";
/// Name of the one DeviceModel every load device uses.
pub const MODEL: &str = "load-model";
/// The twin property every update writes (model type INT, twin type `int`).
pub const PROPERTY: &str = "temperature";
/// Node name written into the config and every Device's `nodeName`, so that a loader which
/// keeps only the devices of its own node keeps all of them, whatever the machine's hostname.
pub const NODE: &str = "twin-load-node";
/// Protocol name of the load devices. No mapper serves it: the load generator plays the
/// mapper over MQTT.
pub const PROTOCOL: &str = "twin-load";

/// Name of device `i`.
pub fn device_name(i: usize) -> String {
    format!("load-{i}")
}

/// Where everything of one run lives.
#[derive(Debug, Clone)]
pub struct Layout {
    /// The temporary directory itself.
    pub root: PathBuf,
}

impl Layout {
    /// The daemon's edgecore.yaml.
    pub fn config(&self) -> PathBuf {
        self.root.join("edgecore.yaml")
    }
    /// The daemon's `--data-dir`.
    pub fn data_dir(&self) -> PathBuf {
        self.root.join("data")
    }
    /// `wedge.devices.dir`.
    pub fn devices_dir(&self) -> PathBuf {
        self.root.join("devices")
    }
    /// The daemon's stdout and stderr.
    pub fn wedge_log(&self) -> PathBuf {
        self.root.join("wedge.log")
    }
    /// mosquitto's config file.
    pub fn mosquitto_conf(&self) -> PathBuf {
        self.root.join("mosquitto.conf")
    }
    /// mosquitto's stdout and stderr.
    pub fn mosquitto_log(&self) -> PathBuf {
        self.root.join("mosquitto.log")
    }
    /// `deviceTwin.dmiSockPath`: inside the run directory, because the default
    /// (/etc/kubeedge/dmi.sock) is not writable by a normal user and may belong to a real node.
    pub fn dmi_sock(&self) -> PathBuf {
        self.root.join("dmi.sock")
    }
}

/// Which broker the daemon uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BrokerSetting {
    /// `mqttMode: 0`, the embedded broker listening on this loopback port.
    Embedded {
        /// `mqttServerInternal` port.
        port: u16,
    },
    /// `mqttMode: 2`, an external broker (mosquitto) on this loopback port.
    External {
        /// `mqttServerExternal` port.
        port: u16,
    },
}

impl BrokerSetting {
    /// The port MQTT clients connect to.
    pub fn port(self) -> u16 {
        match self {
            BrokerSetting::Embedded { port } | BrokerSetting::External { port } => port,
        }
    }
}

/// A path as a YAML double-quoted scalar (JSON string syntax is valid YAML), so no character of
/// a temporary path can change the document's meaning.
fn yaml_path(path: &Path) -> Result<String> {
    let text = path
        .to_str()
        .with_context(|| format!("path {} is not UTF-8", path.display()))?;
    Ok(serde_json::Value::from(text).to_string())
}

/// The daemon's edgecore.yaml: defaults everywhere except the broker, the queue size, the node
/// name, the paths of this run and `wedge.store.synchronous` (`full`, the default, unless the
/// run asks for `normal`).
pub fn wedge_config(
    layout: &Layout,
    broker: BrokerSetting,
    session_queue: u32,
    synchronous: &str,
    users_file: Option<&Path>,
) -> Result<String> {
    let mqtt = match users_file {
        Some(path) => format!("\x20 mqtt:\n\x20   usersFile: {}\n", yaml_path(path)?),
        None => String::new(),
    };
    let (mode, server_key, port) = match broker {
        BrokerSetting::Embedded { port } => (0, "mqttServerInternal", port),
        BrokerSetting::External { port } => (2, "mqttServerExternal", port),
    };
    Ok(format!(
        "# Written by twin-load for one load run.\n\
         apiVersion: edgecore.config.kubeedge.io/v1alpha2\n\
         kind: EdgeCore\n\
         modules:\n\
         \x20 eventBus:\n\
         \x20   mqttMode: {mode}\n\
         \x20   {server_key}: tcp://127.0.0.1:{port}\n\
         \x20   mqttSessionQueueSize: {session_queue}\n\
         \x20 deviceTwin:\n\
         \x20   dmiSockPath: {dmi}\n\
         \x20 edged:\n\
         \x20   hostnameOverride: {NODE}\n\
         wedge:\n\
         \x20 store:\n\
         \x20   synchronous: {synchronous}\n\
         \x20 devices:\n\
         \x20   dir: {devices}\n\
         {mqtt}",
        dmi = yaml_path(&layout.dmi_sock())?,
        devices = yaml_path(&layout.devices_dir())?,
    ))
}

/// The DeviceModel all load devices share: one INT property.
pub fn device_model_yaml() -> String {
    format!(
        "apiVersion: devices.kubeedge.io/v1beta1\n\
         kind: DeviceModel\n\
         metadata:\n\
         \x20 name: {MODEL}\n\
         \x20 namespace: {NAMESPACE}\n\
         spec:\n\
         \x20 protocol: {PROTOCOL}\n\
         \x20 properties:\n\
         \x20   - name: {PROPERTY}\n\
         \x20     description: written by twin-load publishers\n\
         \x20     type: INT\n\
         \x20     accessMode: ReadWrite\n"
    )
}

/// Device `i`, bound to [`MODEL`] on [`NODE`].
pub fn device_yaml(i: usize) -> String {
    format!(
        "apiVersion: devices.kubeedge.io/v1beta1\n\
         kind: Device\n\
         metadata:\n\
         \x20 name: {name}\n\
         \x20 namespace: {NAMESPACE}\n\
         spec:\n\
         \x20 deviceModelRef:\n\
         \x20   name: {MODEL}\n\
         \x20 nodeName: {NODE}\n\
         \x20 protocol:\n\
         \x20   protocolName: {PROTOCOL}\n\
         \x20 properties:\n\
         \x20   - name: {PROPERTY}\n",
        name = device_name(i)
    )
}

/// Writes the model and `count` devices, one object per file (a loader need not handle
/// multi-document YAML). The model's file name sorts first, so a loader reading files in
/// name order meets it before the devices that use it.
pub fn write_devices(dir: &Path, count: usize) -> Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let write = |name: String, text: String| {
        let path = dir.join(name);
        std::fs::write(&path, text).with_context(|| format!("cannot write {}", path.display()))
    };
    write(format!("00-{MODEL}.yaml"), device_model_yaml())?;
    for i in 0..count {
        write(format!("{}.yaml", device_name(i)), device_yaml(i))?;
    }
    Ok(())
}

/// mosquitto's config: anonymous clients on one loopback listener, no persistence, and a
/// per-client queue of `queue` messages so that a backlog shows up as latency, not as loss.
///
/// Started by root, mosquitto would switch to its own user, and any change of credentials
/// clears the parent-death signal that stops it should twin-load be killed; `as_root` keeps
/// it as root (loopback only, for the length of a run).
pub fn mosquitto_config(port: u16, queue: u32, as_root: bool) -> String {
    let user = if as_root { "user root\n" } else { "" };
    format!(
        "# Written by twin-load for one load run.\n\
         {user}\
         listener {port} 127.0.0.1\n\
         allow_anonymous true\n\
         max_queued_messages {queue}\n\
         persistence false\n\
         log_dest stderr\n\
         log_type error\n\
         log_type warning\n"
    )
}

/// The user `--auth` runs log in as: name and password.
pub fn load_login() -> (String, String) {
    ("twin-load".to_owned(), "twin-load-password".to_owned())
}

/// Writes the `--auth` users file (mode 600, as the broker requires): the load user may
/// publish the devices' twin updates and subscribe to their results (and the foreign filters'
/// topics), nothing else; no anonymous access.
pub fn write_users_file(layout: &Layout) -> Result<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let (user, password) = load_login();
    let hash = wedge_eventbus::access::PasswordHash::derive(
        password.as_bytes(),
        b"twin-load-salt",
        100_000,
    );
    let path = layout.root.join("mqtt-users.yaml");
    std::fs::write(
        &path,
        format!(
            "users:\n\
             - name: {user}\n\
             \x20 passwordHash: \"{hash}\"\n\
             \x20 publish: [\"$hw/events/device/{NAMESPACE}/+/twin/update\"]\n\
             \x20 subscribe: [\"$hw/events/device/+/twin/update/result\", \"$hw/events/device/+/+/twin/update/result\", \"$hw/events/device/+/+/twin/+/result\"]\n"
        ),
    )
    .with_context(|| format!("cannot write {}", path.display()))?;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))
        .with_context(|| format!("cannot restrict {}", path.display()))?;
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use wedge_core::config::EdgeCoreConfig;

    fn layout() -> Layout {
        Layout {
            root: PathBuf::from("/tmp/twin load \"x\""),
        }
    }

    #[test]
    fn embedded_config_is_valid_and_sets_what_it_should() {
        let text = wedge_config(
            &layout(),
            BrokerSetting::Embedded { port: 41883 },
            5000,
            "full",
            Some(Path::new("/tmp/users.yaml")),
        )
        .unwrap();
        let config = EdgeCoreConfig::from_yaml_str(&text).unwrap();
        let yaml = config.to_yaml();
        assert!(yaml.contains("mqttMode: 0"), "{yaml}");
        assert!(
            yaml.contains("mqttServerInternal: tcp://127.0.0.1:41883"),
            "{yaml}"
        );
        assert!(yaml.contains("mqttSessionQueueSize: 5000"), "{yaml}");
        assert!(yaml.contains("hostnameOverride: twin-load-node"), "{yaml}");
        // The odd path survives quoting.
        assert!(
            yaml.contains("  devices:\n    dir: /tmp/twin load \"x\"/devices\n"),
            "{yaml}"
        );
        assert!(
            yaml.contains("dmiSockPath: /tmp/twin load \"x\"/dmi.sock\n"),
            "{yaml}"
        );
        assert!(yaml.contains("synchronous: full"), "{yaml}");
        assert!(yaml.contains("usersFile: /tmp/users.yaml"), "{yaml}");
    }

    #[test]
    fn external_config_is_valid_and_sets_mode_2() {
        let text = wedge_config(
            &layout(),
            BrokerSetting::External { port: 41999 },
            100,
            "normal",
            None,
        )
        .unwrap();
        let yaml = EdgeCoreConfig::from_yaml_str(&text).unwrap().to_yaml();
        assert!(yaml.contains("synchronous: normal"), "{yaml}");
        assert!(yaml.contains("mqttMode: 2"), "{yaml}");
        assert!(
            yaml.contains("mqttServerExternal: tcp://127.0.0.1:41999"),
            "{yaml}"
        );
    }

    #[test]
    fn devices_are_written_one_per_file() {
        let dir = tempfile::tempdir().unwrap();
        write_devices(dir.path(), 3).unwrap();
        let mut names: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        assert_eq!(
            names,
            [
                "00-load-model.yaml",
                "load-0.yaml",
                "load-1.yaml",
                "load-2.yaml"
            ]
        );
        let device = std::fs::read_to_string(dir.path().join("load-2.yaml")).unwrap();
        assert!(device.contains("  name: load-2\n  namespace: default\n"));
        assert!(device.contains("  deviceModelRef:\n    name: load-model\n"));
        let model = std::fs::read_to_string(dir.path().join("00-load-model.yaml")).unwrap();
        assert!(model.contains("    - name: temperature\n"));
        assert!(model.contains("      type: INT\n"));
    }

    #[test]
    fn mosquitto_listens_on_loopback_only() {
        let conf = mosquitto_config(1999, 70000, false);
        assert!(conf.contains("\nlistener 1999 127.0.0.1\n"));
        assert!(!conf.contains("user"));
        assert!(conf.contains("\nallow_anonymous true\n"));
        assert!(conf.contains("\nmax_queued_messages 70000\n"));
        let root = mosquitto_config(1999, 70000, true);
        assert!(root.contains("\nuser root\nlistener 1999 127.0.0.1\n"));
    }
}
