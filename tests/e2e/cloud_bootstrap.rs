//! The node certificate's life through `wedge run` against the cloud-hub simulator: a bootstrap
//! the node must refuse (a certificate server the CA does not vouch for, a certificate issued to
//! another CN) stops the start and leaves the existing files byte for byte; and a short-lived
//! certificate is rotated on schedule, twice, each time followed by a new session presenting
//! the new certificate.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result, bail};
use sha2::{Digest, Sha256};
use wedge_tests::Daemon;
use wedge_tests::cloud_node::bootstrap_config;
use wedge_tests::cloudhub::{CloudHub, CloudHubOptions, Connection, Issuing};

const NODE: &str = "edge-1";
const WAIT: Duration = Duration::from_secs(15);

/// The three certificate files of a node under `dir/certs`.
struct Files {
    ca: PathBuf,
    cert: PathBuf,
    key: PathBuf,
}

impl Files {
    fn new(dir: &Path) -> Files {
        let certs = dir.join("certs");
        std::fs::create_dir_all(&certs).unwrap();
        Files {
            ca: certs.join("rootCA.crt"),
            cert: certs.join("server.crt"),
            key: certs.join("server.key"),
        }
    }

    fn contents(&self) -> [Vec<u8>; 3] {
        [&self.ca, &self.cert, &self.key].map(|p| std::fs::read(p).unwrap())
    }
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// Pre-creates a bogus but well-formed set: a real CA and a certificate/key pair from it whose
/// CN is another node's, so the node must bootstrap; returns the files.
fn bogus_files(dir: &Path, hub: &CloudHub) -> Files {
    let files = Files::new(dir);
    let wrong = hub.ca().client_cert("system:node:someone-else").unwrap();
    std::fs::write(&files.ca, hub.ca().ca_pem()).unwrap();
    std::fs::write(&files.cert, &wrong.cert_pem).unwrap();
    std::fs::write(&files.key, &wrong.key_pem).unwrap();
    files
}

/// Runs `wedge run` with `config` and expects it to stop with an error; returns its log.
fn refused_start(dir: &Path, config: &Path) -> String {
    let (mut node, _) =
        Daemon::run_local(&dir.join("data"), &["--config", config.to_str().unwrap()]).unwrap();
    let status = node.wait_exit(WAIT).unwrap();
    let log = node.log();
    assert!(!status.success(), "wedge exited with {status}:\n{log}");
    assert!(log.contains("certificate bootstrap"), "{log}");
    log
}

#[test]
fn a_bootstrap_server_whose_certificate_the_ca_does_not_vouch_for_is_refused() {
    let hub = CloudHub::start(CloudHubOptions {
        foreign_bootstrap_cert: true,
        ..CloudHubOptions::default()
    })
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let files = bogus_files(dir.path(), &hub);
    let before = files.contents();
    // The token names the CA that `/ca.crt` serves, so only the server's certificate is wrong.
    let config = bootstrap_config(dir.path(), &hub, &hub.ca().token(NODE, unix_now() + 3600));
    let log = refused_start(dir.path(), &config);
    assert!(
        // The impostor's CA has the real one's name (`CN=KubeEdge`), so rustls reports a bad
        // signature rather than an unknown issuer; either way the certificate does not verify.
        log.contains("/edge.crt: TLS handshake failed: invalid peer certificate: "),
        "{log}"
    );
    assert!(
        log.contains("the server's certificate does not verify against the cloud's CA"),
        "{log}"
    );
    // The CA was fetched, the CSR never sent (the handshake failed first).
    assert_eq!(hub.bootstrap_requests(), vec!["/ca.crt 200".to_owned()]);
    assert!(files.contents() == before, "a certificate file was changed");
}

#[test]
fn a_certificate_issued_to_another_cn_is_refused_before_anything_is_written() {
    let hub = CloudHub::start(CloudHubOptions {
        issuing: Issuing {
            cn: Some("system:node:someone-else".to_owned()),
            ..Issuing::default()
        },
        ..CloudHubOptions::default()
    })
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let files = bogus_files(dir.path(), &hub);
    let before = files.contents();
    let config = bootstrap_config(dir.path(), &hub, &hub.ca().token(NODE, unix_now() + 3600));
    let log = refused_start(dir.path(), &config);
    assert!(
        log.contains(
            "the cloud issued an unusable certificate: issued for CN \"system:node:someone-else\", \
             not \"system:node:edge-1\""
        ),
        "{log}"
    );
    assert_eq!(
        hub.bootstrap_requests(),
        vec!["/ca.crt 200".to_owned(), "/edge.crt 200".to_owned()]
    );
    assert!(files.contents() == before, "a certificate file was changed");
}

/// Hex SHA-256 of the DER inside a PEM certificate file.
fn cert_sha256(path: &Path) -> Result<String> {
    let pem = std::fs::read(path)?;
    let (_, block) = x509_parser::pem::parse_x509_pem(&pem).context("not PEM")?;
    Ok(Sha256::digest(&block.contents)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect())
}

/// Waits until a session presenting the certificate with fingerprint `sha256` is open.
fn wait_session_with(hub: &CloudHub, sha256: &str, timeout: Duration) -> Result<Connection> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(c) = hub
            .connections()
            .into_iter()
            .find(|c| c.cert_sha256 == sha256 && c.closed.is_none())
        {
            return Ok(c);
        }
        if Instant::now() >= deadline {
            bail!(
                "no session with certificate {sha256} within {timeout:?}; sessions: {:?}",
                hub.connections()
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Waits until the certificate file no longer has fingerprint `old`; returns the new one.
fn wait_cert_changed(path: &Path, old: &str, timeout: Duration) -> Result<String> {
    let deadline = Instant::now() + timeout;
    loop {
        // A rename replaces the file at once; a read never sees half of it.
        let now = cert_sha256(path)?;
        if now != old {
            return Ok(now);
        }
        if Instant::now() >= deadline {
            bail!("certificate not rotated within {timeout:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_short_lived_certificate_is_rotated_on_schedule_and_presented_on_a_new_session() {
    // Certificates valid for 8 s: rotation at 5.6–7.2 s after NotBefore (which X.509 rounds
    // down to the second, so up to 1 s earlier than issued).
    let validity = Duration::from_secs(8);
    let hub = CloudHub::start(CloudHubOptions {
        require_node_cn: true,
        issuing: Issuing {
            validity: Some(validity),
            ..Issuing::default()
        },
        ..CloudHubOptions::default()
    })
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let files = Files::new(dir.path());
    let first = hub
        .ca()
        .client_cert_valid_for(&format!("system:node:{NODE}"), validity)
        .unwrap();
    let issued = Instant::now();
    std::fs::write(&files.ca, hub.ca().ca_pem()).unwrap();
    std::fs::write(&files.cert, &first.cert_pem).unwrap();
    std::fs::write(&files.key, &first.key_pem).unwrap();
    let config = bootstrap_config(dir.path(), &hub, "");
    let (mut node, admin) = Daemon::run_local(
        &dir.path().join("data"),
        &["--config", config.to_str().unwrap()],
    )
    .unwrap();
    node.wait_healthy(admin, WAIT).unwrap();
    let sha1 = cert_sha256(&files.cert).unwrap();
    let session1 =
        wait_session_with(&hub, &sha1, WAIT).unwrap_or_else(|e| panic!("{e}\n{}", node.log()));
    let key1 = std::fs::read(&files.key).unwrap();

    // First rotation: inside the 70–90 % window, by client certificate (no token is set).
    let sha2 = wait_cert_changed(&files.cert, &sha1, Duration::from_secs(12))
        .unwrap_or_else(|e| panic!("{e}\n{}", node.log()));
    let at = issued.elapsed();
    assert!(
        at >= Duration::from_millis(4500) && at <= Duration::from_millis(8500),
        "rotated {at:?} after issue\n{}",
        node.log()
    );
    assert_eq!(hub.bootstrap_requests(), vec!["/edge.crt 200".to_owned()]);

    // The old session is ended and a new one presents the new certificate (the redial comes
    // after all three files are in place).
    let session2 = wait_session_with(&hub, &sha2, Duration::from_secs(5))
        .unwrap_or_else(|e| panic!("{e}\n{}", node.log()));
    assert_eq!(session2.cn, format!("system:node:{NODE}"));
    let old = hub
        .connections()
        .into_iter()
        .find(|c| c.cert_sha256 == sha1)
        .unwrap();
    assert!(old.closed.is_some(), "the old session is still open");
    assert!(session2.opened > session1.opened);
    let key2 = std::fs::read(&files.key).unwrap();
    assert_ne!(
        key1, key2,
        "the rotated certificate must come with a new key"
    );
    assert!(String::from_utf8_lossy(&key2).contains("EC PRIVATE KEY"));
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&files.key).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);

    // The next rotation is scheduled from the new certificate.
    let sha3 = wait_cert_changed(&files.cert, &sha2, Duration::from_secs(12))
        .unwrap_or_else(|e| panic!("{e}\n{}", node.log()));
    wait_session_with(&hub, &sha3, Duration::from_secs(5))
        .unwrap_or_else(|e| panic!("{e}\n{}", node.log()));
    assert_eq!(
        hub.bootstrap_requests(),
        vec!["/edge.crt 200".to_owned(), "/edge.crt 200".to_owned()]
    );
    let log = node.log();
    assert!(log.contains("node certificate rotated"), "{log}");
    node.stop(libc::SIGTERM, Duration::from_secs(10)).unwrap();
}

/// Waits until the simulator has recorded `line` among the bootstrap requests.
fn wait_request(hub: &CloudHub, line: &str, timeout: Duration) -> Result<()> {
    let deadline = Instant::now() + timeout;
    while !hub.bootstrap_requests().iter().any(|l| l == line) {
        if Instant::now() >= deadline {
            bail!(
                "no {line:?} within {timeout:?}; requests: {:?}",
                hub.bootstrap_requests()
            );
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    Ok(())
}

#[test]
fn a_refused_rotation_keeps_the_files_and_is_retried_two_seconds_later() {
    // Valid 25 s: the first try at 17.5–22.5 s, the retry 2 s later, while the current
    // certificate (which proves the node) still holds.
    let validity = Duration::from_secs(25);
    let hub = CloudHub::start(CloudHubOptions {
        require_node_cn: true,
        issuing: Issuing {
            refuse_first: 1,
            ..Issuing::default()
        },
        ..CloudHubOptions::default()
    })
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let files = Files::new(dir.path());
    let first = hub
        .ca()
        .client_cert_valid_for(&format!("system:node:{NODE}"), validity)
        .unwrap();
    std::fs::write(&files.ca, hub.ca().ca_pem()).unwrap();
    std::fs::write(&files.cert, &first.cert_pem).unwrap();
    std::fs::write(&files.key, &first.key_pem).unwrap();
    let before = files.contents();
    let config = bootstrap_config(dir.path(), &hub, "");
    let (mut node, admin) = Daemon::run_local(
        &dir.path().join("data"),
        &["--config", config.to_str().unwrap()],
    )
    .unwrap();
    node.wait_healthy(admin, WAIT).unwrap();
    let sha1 = cert_sha256(&files.cert).unwrap();
    wait_session_with(&hub, &sha1, WAIT).unwrap_or_else(|e| panic!("{e}\n{}", node.log()));

    wait_request(&hub, "/edge.crt 503", Duration::from_secs(25))
        .unwrap_or_else(|e| panic!("{e}\n{}", node.log()));
    let refused = Instant::now();
    assert!(
        files.contents() == before,
        "a refused rotation changed a file"
    );
    let sha2 = wait_cert_changed(&files.cert, &sha1, Duration::from_secs(5))
        .unwrap_or_else(|e| panic!("{e}\n{}", node.log()));
    let retried_after = refused.elapsed();
    assert!(
        retried_after >= Duration::from_millis(1500) && retried_after < Duration::from_secs(4),
        "retried {retried_after:?} after the refusal"
    );
    assert_eq!(
        hub.bootstrap_requests(),
        vec!["/edge.crt 503".to_owned(), "/edge.crt 200".to_owned()]
    );
    wait_session_with(&hub, &sha2, Duration::from_secs(5))
        .unwrap_or_else(|e| panic!("{e}\n{}", node.log()));
    let log = node.log();
    assert!(
        log.contains(
            "HTTP 503: unavailable (simulated); the current files are kept; retrying in 2s"
        ),
        "{log}"
    );
    node.stop(libc::SIGTERM, Duration::from_secs(10)).unwrap();
}
