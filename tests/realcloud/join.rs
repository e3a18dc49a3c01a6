//! `wedge join` against the real cloud: the node of every other check was joined with it (see
//! `RealNode::join`); here, what it wrote, and a token for another cloud refused.

use std::process::Command;

use anyhow::{Context, Result, ensure};
use wedge_tests::wedge_bin;

use crate::Bed;

/// The joined node's config keeps no token and names the certificate the cloud signed for it;
/// a token whose CA hash is not this cloud's CA is refused before anything is written.
pub fn join_writes_a_certificate_and_refuses_another_clouds_token(bed: &mut Bed) -> Result<()> {
    let config = bed.node.dir().join("kubeedge/config/edgecore.yaml");
    let text = std::fs::read_to_string(&config).context("the joined node's config")?;
    ensure!(
        !text.contains("token: "),
        "the token was kept in the config:\n{text}"
    );
    let check = Command::new(wedge_bin())
        .args(["config", "check"])
        .arg(&config)
        .output()?;
    ensure!(
        check.status.success(),
        "wedge config check refused what join wrote"
    );
    let cert = bed.node.dir().join("kubeedge/certs/server.crt");
    let subject = Command::new("openssl")
        .args(["x509", "-noout", "-subject", "-in"])
        .arg(&cert)
        .output()
        .context("openssl")?;
    let subject = String::from_utf8_lossy(&subject.stdout);
    ensure!(
        subject.contains(&format!("system:node:{}", bed.node.name)),
        "certificate subject {subject:?}"
    );

    let token = bed.cloud.token()?;
    let (_, jwt) = token.split_once('.').context("token has no CA hash")?;
    let other_cloud = format!("{}.{jwt}", "0".repeat(64));
    let dir = tempfile::tempdir()?;
    let refused = Command::new(wedge_bin())
        .args(["join", "--cloud", &bed.cloud.cloudhub_ws()])
        .args(["--cert-port", &bed.cloud.ports.cloudhub_https.to_string()])
        .args([
            "--node",
            "wedge-other-cloud",
            "--no-start",
            "--kubeedge-dir",
        ])
        .arg(dir.path().join("kubeedge"))
        .arg("--data-dir")
        .arg(dir.path().join("data"))
        .env("WEDGE_JOIN_TOKEN", other_cloud)
        .output()?;
    let stderr = String::from_utf8_lossy(&refused.stderr);
    ensure!(!refused.status.success(), "a token for another CA joined");
    ensure!(
        stderr.contains("does not match"),
        "unclear refusal: {stderr}"
    );
    ensure!(
        !dir.path().join("kubeedge").exists(),
        "a refused join wrote files"
    );
    Ok(())
}
