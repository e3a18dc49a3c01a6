//! Where a joined node keeps its files: KubeEdge's layout, so mappers, scripts and operators
//! that know edgecore find them where they look.

use std::path::PathBuf;

use wedge_edgehub::bootstrap::CertPaths;

/// KubeEdge's directory (`/etc/kubeedge`).
pub const KUBEEDGE_DIR: &str = "/etc/kubeedge";
/// The node's state when it runs as a service (systemd's `StateDirectory=wedge`).
pub const DATA_DIR: &str = "/var/lib/wedge";
/// Where systemd units installed by an administrator go.
pub const UNIT_DIR: &str = "/etc/systemd/system";

/// The files of one node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    /// KubeEdge's directory: `config/edgecore.yaml`, `ca/rootCA.crt`, `certs/server.{crt,key}`,
    /// `dmi.sock`.
    pub kubeedge_dir: PathBuf,
    /// The node's data directory (`wedge.dataDir`).
    pub data_dir: PathBuf,
}

impl Default for Layout {
    fn default() -> Self {
        Layout {
            kubeedge_dir: PathBuf::from(KUBEEDGE_DIR),
            data_dir: PathBuf::from(DATA_DIR),
        }
    }
}

impl Layout {
    /// `edgecore.yaml`, where keadm puts it.
    pub fn config(&self) -> PathBuf {
        self.kubeedge_dir.join("config").join("edgecore.yaml")
    }

    /// The CA, certificate and key, where edgecore's defaults put them.
    pub fn certs(&self) -> CertPaths {
        CertPaths {
            ca: self.kubeedge_dir.join("ca").join("rootCA.crt"),
            cert: self.kubeedge_dir.join("certs").join("server.crt"),
            key: self.kubeedge_dir.join("certs").join("server.key"),
        }
    }

    /// The DMI socket KubeEdge mappers dial (their default `/etc/kubeedge/dmi.sock`).
    pub fn dmi_socket(&self) -> PathBuf {
        self.kubeedge_dir.join("dmi.sock")
    }
}
