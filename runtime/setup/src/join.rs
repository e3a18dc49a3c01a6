//! `wedge join`: from a join token to a node ready to start.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use wedge_edgehub::bootstrap::{CertPaths, bootstrap, parse_token};

use crate::SetupError;
use crate::edgecore_yaml::{self, NodeSettings};
use crate::layout::Layout;

/// CloudHub's WebSocket port when `--cloud` names none (keadm's default).
pub const CLOUDHUB_PORT: u16 = 10000;
/// CloudHub's HTTPS (certificate) port (keadm's `--certport` default).
pub const CERT_PORT: u16 = 10002;

/// What `wedge join` was asked.
#[derive(Debug, Clone)]
pub struct JoinOptions {
    /// CloudHub's WebSocket address: `host` or `host:port`.
    pub cloud: String,
    /// CloudHub's HTTPS port, on the same host.
    pub cert_port: u16,
    /// The join token (`keadm gettoken`).
    pub token: String,
    /// The node's name.
    pub node: String,
    /// Whether edged runs pods.
    pub edged: bool,
    /// `--set key=value` overrides of the config.
    pub sets: Vec<(String, String)>,
    /// Where the files go.
    pub layout: Layout,
    /// Join even though a config exists (a new identity for the node).
    pub force: bool,
}

/// What a join wrote.
#[derive(Debug, Clone)]
pub struct Joined {
    /// The config.
    pub config: PathBuf,
    /// The certificate files, signed for `system:node:<node>`.
    pub certs: CertPaths,
    /// The node's name.
    pub node: String,
    /// CloudHub's HTTPS address the certificate came from.
    pub https_server: String,
}

/// Joins: checks the options and the token, renders and checks the config, has the cloud sign
/// the node's certificate, then writes the config. Nothing is written before the config
/// checks out and the cloud has answered; the token is not kept in the config (the node holds
/// a certificate, which it rotates itself).
pub async fn join(options: &JoinOptions) -> Result<Joined, SetupError> {
    let (host, ws_port) = split_cloud(&options.cloud)?;
    let cloud = format!("{host}:{ws_port}");
    let https_server = format!("https://{host}:{}", options.cert_port);
    parse_token(options.token.trim()).map_err(|source| SetupError::Bootstrap {
        server: https_server.clone(),
        source,
    })?;
    let config = options.layout.config();
    if config.exists() && !options.force {
        return Err(SetupError::AlreadyJoined(config));
    }
    let settings = NodeSettings {
        cloud,
        https_server: https_server.clone(),
        node: options.node.clone(),
        edged: options.edged,
    };
    let text = edgecore_yaml::render(&options.layout, &settings, &options.sets)?;
    let certs = options.layout.certs();
    bootstrap(&https_server, options.token.trim(), &options.node, &certs)
        .await
        .map_err(|source| SetupError::Bootstrap {
            server: https_server.clone(),
            source,
        })?;
    write_whole(&config, text.as_bytes(), 0o600)?;
    Ok(Joined {
        config,
        certs,
        node: options.node.clone(),
        https_server,
    })
}

/// `host[:port]` of `--cloud`, the port defaulting to CloudHub's; a scheme is refused with a
/// hint, since CloudHub is reached over WebSocket by address.
fn split_cloud(cloud: &str) -> Result<(String, u16), SetupError> {
    let cloud = cloud.trim();
    if cloud.contains("://") {
        return Err(SetupError::Invalid(format!(
            "--cloud {cloud:?}: give CloudHub's address as HOST:PORT (e.g. 192.168.1.10:10000), without a scheme"
        )));
    }
    let (host, port) = match cloud.rsplit_once(':') {
        // An IPv6 address without a port has colons but no closing bracket before the last.
        Some((host, port)) if !host.contains(':') || host.ends_with(']') => {
            let port = port.parse::<u16>().map_err(|_| {
                SetupError::Invalid(format!("--cloud {cloud:?}: {port:?} is not a port"))
            })?;
            (host.to_owned(), port)
        }
        _ => (cloud.to_owned(), CLOUDHUB_PORT),
    };
    if host.is_empty() {
        return Err(SetupError::Invalid(format!("--cloud {cloud:?}: no host")));
    }
    Ok((host, port))
}

/// Writes `bytes` to `path` whole: a synced temporary file beside it, renamed over it.
pub(crate) fn write_whole(path: &Path, bytes: &[u8], mode: u32) -> Result<(), SetupError> {
    use std::os::unix::fs::OpenOptionsExt as _;
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).map_err(|e| SetupError::io("cannot create", dir, e))?;
    let temp = path.with_extension("wedge-tmp");
    let write = || -> std::io::Result<()> {
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(mode)
            .open(&temp)?;
        file.write_all(bytes)?;
        file.sync_all()?;
        std::fs::rename(&temp, path)
    };
    write().map_err(|e| {
        let _ = std::fs::remove_file(&temp);
        SetupError::io("cannot write", path, e)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cloud_address_takes_a_default_port_and_refuses_a_scheme() {
        assert_eq!(split_cloud("10.0.0.1").unwrap(), ("10.0.0.1".into(), 10000));
        assert_eq!(
            split_cloud("cloud.example:30000").unwrap(),
            ("cloud.example".into(), 30000)
        );
        assert_eq!(
            split_cloud("[fd00::1]:10000").unwrap(),
            ("[fd00::1]".into(), 10000)
        );
        assert!(split_cloud("wss://cloud:10000").is_err());
        assert!(split_cloud("cloud:http").is_err());
        assert!(split_cloud(":10000").is_err());
    }

    /// Options for a join into `layout` with `token`, toward a cloud nobody answers on.
    fn options(layout: Layout, token: String) -> JoinOptions {
        JoinOptions {
            cloud: "127.0.0.1:1".into(),
            cert_port: 1,
            token,
            node: "edge-1".into(),
            edged: false,
            sets: Vec::new(),
            layout,
            force: false,
        }
    }

    fn run(options: &JoinOptions) -> Result<Joined, SetupError> {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(join(options))
    }

    #[test]
    fn a_malformed_token_fails_before_anything_is_written() {
        let dir = tempfile::tempdir().unwrap();
        let layout = Layout {
            kubeedge_dir: dir.path().join("kubeedge"),
            data_dir: dir.path().join("data"),
        };
        let err = run(&options(layout, "not-a-token".into())).unwrap_err();
        assert!(err.to_string().contains("invalid join token"), "{err}");
        assert!(!dir.path().join("kubeedge").exists());
    }

    #[test]
    fn an_existing_config_is_not_replaced_without_force() {
        let dir = tempfile::tempdir().unwrap();
        let layout = Layout {
            kubeedge_dir: dir.path().to_owned(),
            data_dir: dir.path().join("data"),
        };
        write_whole(&layout.config(), b"kind: EdgeCore\n", 0o600).unwrap();
        // A token of the right shape (expired or not, the existing config is found first).
        let token = format!("{}.e30.e30.sig", "0".repeat(64));
        let err = run(&options(layout, token)).unwrap_err();
        assert!(matches!(err, SetupError::AlreadyJoined(_)), "{err}");
    }
}
