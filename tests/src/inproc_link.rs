//! The node side of the cloud link built in-process (no `wedge` binary): the real `EdgeHub`
//! module with its durable outbox, joined to a [`CloudHub`] over mutual TLS. For tests of
//! modules the binary does not wire yet (edged's queries) and for the link load generator.

use std::path::Path;
use std::sync::Arc;

use anyhow::{Context, Result};
use wedge_core::Store;
use wedge_core::config::EdgeHub as EdgeHubConfig;
use wedge_edgehub::link::{EdgeHub, LinkSettings};
use wedge_edgehub::outbox::{self, Outbox};

use crate::cloudhub::CloudHub;

/// Writes a client certificate for `system:node:<node>` issued by `hub`'s CA, with that CA,
/// into `dir`, and returns the `modules.edgeHub` section that dials `hub` with them.
pub fn edgehub_config(hub: &CloudHub, dir: &Path, node: &str) -> Result<EdgeHubConfig> {
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let client = hub.ca().client_cert(&format!("system:node:{node}"))?;
    let (ca, cert, key) = (
        dir.join("rootCA.crt"),
        dir.join("server.crt"),
        dir.join("server.key"),
    );
    std::fs::write(&ca, hub.ca().ca_pem()).context("cannot write the CA")?;
    std::fs::write(&cert, &client.cert_pem).context("cannot write the certificate")?;
    std::fs::write(&key, &client.key_pem).context("cannot write the key")?;
    let mut config = EdgeHubConfig {
        enable: true,
        tls_ca_file: ca.to_string_lossy().into_owned(),
        tls_cert_file: cert.to_string_lossy().into_owned(),
        tls_private_key_file: key.to_string_lossy().into_owned(),
        ..EdgeHubConfig::default()
    };
    config.websocket.server = hub.ws_addr().to_string();
    Ok(config)
}

/// Migrates the outbox's table on `store`, opens the outbox (at most `cap` messages) and
/// builds the `EdgeHub` module for `node`, as `wedge run` does. Spawn it on a supervisor; the
/// returned outbox handle shares the module's queue (for depth readings).
pub async fn edgehub(
    store: &Store,
    config: &EdgeHubConfig,
    node: &str,
    cap: usize,
) -> Result<(Arc<EdgeHub>, Outbox)> {
    store
        .migrate(outbox::COMPONENT, outbox::MIGRATIONS)
        .await
        .context("cannot migrate the outbox")?;
    let outbox = Outbox::open(store.clone(), cap)
        .await
        .context("cannot open the outbox")?;
    let settings = LinkSettings::from_config(config, node).context("modules.edgeHub")?;
    Ok((Arc::new(EdgeHub::new(settings, outbox.clone())), outbox))
}
