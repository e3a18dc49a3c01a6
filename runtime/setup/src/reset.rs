//! `wedge reset`: what a join wrote and the node's state, removed.

use std::path::{Path, PathBuf};

use crate::SetupError;
use crate::layout::Layout;
use crate::systemd;

/// What a reset removes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResetPlan {
    /// Where the unit is looked for.
    pub unit_dir: PathBuf,
    /// Files: the config, the certificate files it names, the DMI socket.
    pub files: Vec<PathBuf>,
    /// Directories removed whole: the data directory.
    pub dirs: Vec<PathBuf>,
}

/// The plan for `layout`: the certificate files and DMI socket are read from the config when
/// it parses (they may have been moved with `--set`), else the layout's.
pub fn reset_plan(layout: &Layout, unit_dir: &Path) -> ResetPlan {
    let config = layout.config();
    let certs = layout.certs();
    let mut files = vec![
        config.clone(),
        certs.ca,
        certs.cert,
        certs.key,
        layout.dmi_socket(),
    ];
    let mut dirs = vec![layout.data_dir.clone()];
    if let Ok(parsed) = wedge_core::config::EdgeCoreConfig::load(&config) {
        let hub = &parsed.modules.edge_hub;
        for named in [
            &hub.tls_ca_file,
            &hub.tls_cert_file,
            &hub.tls_private_key_file,
        ] {
            files.push(PathBuf::from(named));
        }
        dirs.push(parsed.data_dir());
    }
    files.sort();
    files.dedup();
    dirs.sort();
    dirs.dedup();
    ResetPlan {
        unit_dir: unit_dir.to_owned(),
        files,
        dirs,
    }
}

impl ResetPlan {
    /// The lines to show before asking.
    pub fn describe(&self) -> Vec<String> {
        let (unit, drop_in) = systemd::unit_paths(&self.unit_dir);
        let mut lines = Vec::new();
        for file in [&unit, &drop_in] {
            if file.exists() {
                lines.push(format!("stop and remove {}", file.display()));
            }
        }
        for file in &self.files {
            if file.exists() {
                lines.push(format!("remove {}", file.display()));
            }
        }
        for dir in &self.dirs {
            if dir.exists() {
                lines.push(format!("remove {} and everything in it", dir.display()));
            }
        }
        lines
    }

    /// Stops the service and removes everything planned; what is already gone is skipped.
    pub fn execute(&self) -> Result<Vec<String>, SetupError> {
        let mut steps = systemd::uninstall(&self.unit_dir)?;
        for file in &self.files {
            match std::fs::remove_file(file) {
                Ok(()) => steps.push(format!("removed {}", file.display())),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(SetupError::io("cannot remove", file, e)),
            }
        }
        for dir in &self.dirs {
            match std::fs::remove_dir_all(dir) {
                Ok(()) => steps.push(format!("removed {}", dir.display())),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(SetupError::io("cannot remove", dir, e)),
            }
        }
        Ok(steps)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::edgecore_yaml::{NodeSettings, parse_set, render};
    use crate::join::write_whole;

    #[test]
    fn reset_removes_the_config_the_files_it_names_and_the_data() {
        let dir = tempfile::tempdir().unwrap();
        let layout = Layout {
            kubeedge_dir: dir.path().join("kubeedge"),
            data_dir: dir.path().join("data"),
        };
        let moved_key = dir.path().join("elsewhere").join("node.key");
        let settings = NodeSettings {
            cloud: "127.0.0.1:10000".into(),
            https_server: "https://127.0.0.1:10002".into(),
            node: "edge-1".into(),
            edged: false,
        };
        let sets = [parse_set(&format!(
            "modules.edgeHub.tlsPrivateKeyFile={}",
            moved_key.display()
        ))
        .unwrap()];
        let text = render(&layout, &settings, &sets).unwrap();
        write_whole(&layout.config(), text.as_bytes(), 0o600).unwrap();
        let certs = layout.certs();
        for file in [&certs.ca, &certs.cert, &moved_key] {
            write_whole(file, b"pem", 0o600).unwrap();
        }
        write_whole(&layout.data_dir.join("edgecore.db"), b"db", 0o600).unwrap();
        let keep = dir.path().join("kubeedge").join("keep.txt");
        write_whole(&keep, b"not ours", 0o600).unwrap();

        let plan = reset_plan(&layout, &dir.path().join("units"));
        let described = plan.describe().join("\n");
        assert!(described.contains("node.key"), "{described}");
        let steps = plan.execute().unwrap();
        assert!(!steps.is_empty());
        for gone in [
            &layout.config(),
            &certs.ca,
            &certs.cert,
            &moved_key,
            &layout.data_dir,
        ] {
            assert!(!gone.exists(), "{} is left", gone.display());
        }
        assert!(keep.exists(), "a file join did not write is kept");
        assert!(
            plan.execute().unwrap().is_empty(),
            "a second reset has nothing to do"
        );
    }
}
