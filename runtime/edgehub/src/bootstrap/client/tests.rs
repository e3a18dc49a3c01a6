//! The network steps against an in-test certificate server over real TLS.

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use rcgen::{
    BasicConstraints, CertificateParams, CertificateSigningRequestParams, DnType, IsCa, Issuer,
    KeyPair,
};
use rustls::ServerConfig;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use sha2::{Digest, Sha256};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;
use x509_parser::prelude::*;

use super::super::{BootstrapError, CertPaths, CertStatus, cert_status, pem_encode};
use super::{CertAuth, bootstrap, fetch_ca, fetch_cert};

const JWT_SIG: &str = "c2ln";

/// One request the server saw.
#[derive(Debug, Clone)]
struct Seen {
    path: String,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
    /// The CN of the client certificate presented, if any.
    client_cn: Option<String>,
}

impl Seen {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

#[derive(Default, Clone)]
struct Options {
    /// Issue certificates with this CN instead of the CSR's.
    cn_override: Option<String>,
    /// Serve TLS with a certificate from a CA other than the one `/ca.crt` returns.
    foreign_server_cert: bool,
}

struct Cloud {
    server: String,
    ca_der: Vec<u8>,
    jwt: String,
    seen: Arc<Mutex<Vec<Seen>>>,
}

impl Cloud {
    fn token(&self) -> String {
        format!("{}.{}", hex(&Sha256::digest(&self.ca_der)), self.jwt)
    }

    fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn jwt(exp: u64) -> String {
    format!(
        "{}.{}.{JWT_SIG}",
        URL_SAFE_NO_PAD.encode(r#"{"alg":"HS256","typ":"JWT"}"#),
        URL_SAFE_NO_PAD.encode(format!(r#"{{"exp":{exp}}}"#))
    )
}

fn now_unix() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

fn ca() -> (Vec<u8>, Issuer<'static, KeyPair>) {
    let key = KeyPair::generate().unwrap();
    let mut params = CertificateParams::default();
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.distinguished_name = rcgen::DistinguishedName::new();
    params
        .distinguished_name
        .push(DnType::CommonName, "KubeEdge");
    let der = params.self_signed(&key).unwrap().der().to_vec();
    (der, Issuer::new(params, key))
}

async fn start(options: Options) -> Cloud {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let (ca_der, issuer) = ca();
    let (_, foreign) = ca();
    let server_key = KeyPair::generate().unwrap();
    let server_params = CertificateParams::new(vec!["127.0.0.1".to_owned()]).unwrap();
    let server_cert = if options.foreign_server_cert {
        server_params.signed_by(&server_key, &foreign).unwrap()
    } else {
        server_params.signed_by(&server_key, &issuer).unwrap()
    };
    let config =
        ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_client_cert_verifier(client_verifier(&ca_der))
            .with_single_cert(
                vec![CertificateDer::from(server_cert.der().to_vec())],
                PrivateKeyDer::Pkcs8(server_key.serialize_der().into()),
            )
            .unwrap();
    let acceptor = TlsAcceptor::from(Arc::new(config));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let server = format!("https://{}", listener.local_addr().unwrap());
    let jwt = jwt(now_unix() + 3600);
    let seen = Arc::new(Mutex::new(Vec::new()));
    let state = Arc::new((issuer, ca_der.clone(), jwt.clone(), seen.clone(), options));
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            let state = state.clone();
            tokio::spawn(async move {
                let Ok(mut tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let Some(mut req) = read_request(&mut tls).await else {
                    return;
                };
                req.client_cn = tls
                    .get_ref()
                    .1
                    .peer_certificates()
                    .and_then(|chain| chain.first())
                    .and_then(|cert| {
                        let (_, cert) = X509Certificate::from_der(cert).ok()?;
                        let cn = cert.subject().iter_common_name().next()?;
                        Some(cn.as_str().ok()?.to_owned())
                    });
                let (issuer, ca_der, jwt, seen, options) = &*state;
                seen.lock().unwrap().push(req.clone());
                let (status, body) = match req.path.as_str() {
                    "/ca.crt" => (200, ca_der.clone()),
                    "/edge.crt" if !authorized(&req, jwt) => (401, b"invalid token\n".to_vec()),
                    "/edge.crt" => {
                        let mut csr =
                            CertificateSigningRequestParams::from_der(&req.body.clone().into())
                                .unwrap();
                        if let Some(cn) = &options.cn_override {
                            csr.params
                                .distinguished_name
                                .push(DnType::CommonName, cn.as_str());
                        }
                        (200, csr.signed_by(issuer).unwrap().der().to_vec())
                    }
                    _ => (404, b"not found".to_vec()),
                };
                let head = format!(
                    "HTTP/1.1 {status} X\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                    body.len()
                );
                let _ = tls.write_all(head.as_bytes()).await;
                let _ = tls.write_all(&body).await;
                let _ = tls.shutdown().await;
            });
        }
    });
    Cloud {
        server,
        ca_der,
        jwt,
        seen,
    }
}

/// Client certificates are optional (the bootstrap has none) but, when presented, must come
/// from the CA.
fn client_verifier(ca_der: &[u8]) -> Arc<dyn rustls::server::danger::ClientCertVerifier> {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(CertificateDer::from(ca_der.to_vec())).unwrap();
    rustls::server::WebPkiClientVerifier::builder_with_provider(
        Arc::new(roots),
        Arc::new(rustls::crypto::ring::default_provider()),
    )
    .allow_unauthenticated()
    .build()
    .unwrap()
}

/// The join token's JWT, or (rotation) a client certificate naming the node asked for.
fn authorized(req: &Seen, jwt: &str) -> bool {
    if let Some(auth) = req.header("authorization") {
        return auth == format!("Bearer {jwt}");
    }
    req.client_cn.is_some()
        && req.client_cn.as_deref()
            == req
                .header("nodename")
                .map(|n| format!("system:node:{n}"))
                .as_deref()
}

async fn read_request<S: tokio::io::AsyncRead + Unpin>(s: &mut S) -> Option<Seen> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let n = s.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
        let mut headers = [httparse::EMPTY_HEADER; 32];
        let mut req = httparse::Request::new(&mut headers);
        if let Ok(httparse::Status::Complete(start)) = req.parse(&buf) {
            let headers: Vec<(String, String)> = req
                .headers
                .iter()
                .map(|h| {
                    (
                        h.name.to_owned(),
                        String::from_utf8_lossy(h.value).into_owned(),
                    )
                })
                .collect();
            let len: usize = headers
                .iter()
                .find(|(n, _)| n.eq_ignore_ascii_case("content-length"))
                .map(|(_, v)| v.parse().unwrap())
                .unwrap_or(0);
            if buf.len() >= start + len {
                return Some(Seen {
                    path: req.path.unwrap_or_default().to_owned(),
                    headers,
                    body: buf[start..start + len].to_vec(),
                    client_cn: None,
                });
            }
        }
    }
}

fn paths(dir: &Path) -> CertPaths {
    CertPaths {
        ca: dir.join("ca/rootCA.crt"),
        cert: dir.join("certs/server.crt"),
        key: dir.join("certs/server.key"),
    }
}

fn assert_untouched(dir: &Path) {
    let p = paths(dir);
    assert_eq!(std::fs::read_to_string(&p.ca).unwrap(), "OLD CA");
    assert_eq!(std::fs::read_to_string(&p.cert).unwrap(), "OLD CERT");
    assert_eq!(std::fs::read_to_string(&p.key).unwrap(), "OLD KEY");
    let mut names: Vec<String> = std::fs::read_dir(dir.join("certs"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, vec!["server.crt", "server.key"]);
}

fn old_files(dir: &Path) {
    let p = paths(dir);
    std::fs::create_dir_all(dir.join("ca")).unwrap();
    std::fs::create_dir_all(dir.join("certs")).unwrap();
    std::fs::write(&p.ca, "OLD CA").unwrap();
    std::fs::write(&p.cert, "OLD CERT").unwrap();
    std::fs::write(&p.key, "OLD KEY").unwrap();
}

#[tokio::test]
async fn bootstrap_writes_ca_cert_and_key() {
    let cloud = start(Options::default()).await;
    let dir = tempfile::tempdir().unwrap();
    let p = paths(dir.path());
    bootstrap(&cloud.server, &cloud.token(), "edge-1", &p)
        .await
        .unwrap();

    assert_eq!(
        std::fs::read_to_string(&p.ca).unwrap(),
        pem_encode("CERTIFICATE", &cloud.ca_der)
    );
    let cert = std::fs::read(&p.cert).unwrap();
    assert!(matches!(
        cert_status(&cert, "edge-1", SystemTime::now()),
        CertStatus::Valid { .. }
    ));
    let key = std::fs::read_to_string(&p.key).unwrap();
    assert!(key.starts_with("-----BEGIN EC PRIVATE KEY-----\n"), "{key}");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        assert_eq!(
            std::fs::metadata(&p.key).unwrap().permissions().mode() & 0o777,
            0o600
        );
    }

    let seen = cloud.seen();
    assert_eq!(seen.len(), 2);
    assert_eq!(seen[0].path, "/ca.crt");
    assert_eq!(seen[0].header("authorization"), None);
    assert_eq!(seen[1].path, "/edge.crt");
    assert_eq!(
        seen[1].header("authorization"),
        Some(format!("Bearer {}", cloud.jwt).as_str())
    );
    assert_eq!(seen[1].header("nodename"), Some("edge-1"));
    let (_, csr) = X509CertificationRequest::from_der(&seen[1].body).unwrap();
    assert_eq!(
        csr.certification_request_info.subject.to_string(),
        "C=CN, ST=Zhejiang, L=Hangzhou, O=system:nodes, CN=system:node:edge-1"
    );
    // The issued certificate carries the key that was written.
    let (_, pem) = x509_parser::pem::parse_x509_pem(&cert).unwrap();
    let issued = pem.parse_x509().unwrap();
    assert_eq!(
        issued.public_key().raw,
        csr.certification_request_info.subject_pki.raw
    );
}

#[tokio::test]
async fn ca_hash_mismatch_is_refused_before_asking_for_a_certificate() {
    let cloud = start(Options::default()).await;
    let dir = tempfile::tempdir().unwrap();
    old_files(dir.path());
    let token = format!("{}.{}", "0f".repeat(32), cloud.jwt);
    let err = bootstrap(&cloud.server, &token, "edge-1", &paths(dir.path()))
        .await
        .unwrap_err();
    assert!(matches!(err, BootstrapError::CaMismatch { .. }), "{err}");
    assert!(err.to_string().ends_with(&format!(
        "does not match the join token's {}; refusing the CA",
        "0f".repeat(32)
    )));
    assert_eq!(cloud.seen().len(), 1);
    assert_untouched(dir.path());
}

#[tokio::test]
async fn expired_token_is_refused_without_contacting_the_cloud() {
    let cloud = start(Options::default()).await;
    let dir = tempfile::tempdir().unwrap();
    old_files(dir.path());
    let token = format!(
        "{}.{}",
        hex(&Sha256::digest(&cloud.ca_der)),
        jwt(now_unix() - 10)
    );
    let err = bootstrap(&cloud.server, &token, "edge-1", &paths(dir.path()))
        .await
        .unwrap_err();
    assert!(matches!(err, BootstrapError::TokenExpired { .. }), "{err}");
    assert!(cloud.seen().is_empty());
    assert_untouched(dir.path());
}

#[tokio::test]
async fn server_certificate_not_from_the_ca_is_refused() {
    let cloud = start(Options {
        foreign_server_cert: true,
        ..Options::default()
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    old_files(dir.path());
    let err = bootstrap(&cloud.server, &cloud.token(), "edge-1", &paths(dir.path()))
        .await
        .unwrap_err();
    let text = err.to_string();
    assert!(
        text.starts_with(&format!(
            "cannot fetch {}/edge.crt: TLS handshake failed: invalid peer certificate: ",
            cloud.server
        )),
        "{text}"
    );
    assert!(
        text.ends_with("the server's certificate does not verify against the cloud's CA, so it is not trusted with the certificate request"),
        "{text}"
    );
    // The CA was fetched (unverified) but the CSR never left.
    assert_eq!(cloud.seen().len(), 1);
    assert_untouched(dir.path());
}

#[tokio::test]
async fn certificate_for_another_cn_is_refused() {
    let cloud = start(Options {
        cn_override: Some("system:node:someone-else".to_owned()),
        ..Options::default()
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    old_files(dir.path());
    let err = bootstrap(&cloud.server, &cloud.token(), "edge-1", &paths(dir.path()))
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "the cloud issued an unusable certificate: issued for CN \"system:node:someone-else\", \
         not \"system:node:edge-1\""
    );
    assert_untouched(dir.path());
}

#[tokio::test]
async fn a_refusal_carries_the_clouds_reason() {
    let cloud = start(Options::default()).await;
    let ca = fetch_ca(&cloud.server).await.unwrap();
    assert_eq!(ca, cloud.ca_der);
    let (_, csr) = super::super::new_key_and_csr("edge-1").unwrap();
    let err = fetch_cert(
        &cloud.server,
        &ca,
        CertAuth::Token("wrong.jwt.sig"),
        "edge-1",
        &csr,
    )
    .await
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        format!("{}/edge.crt refused: HTTP 401: invalid token", cloud.server)
    );
}

#[tokio::test]
async fn unreachable_server_is_named() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    let err = fetch_ca(&addr.to_string()).await.unwrap_err();
    assert!(
        err.to_string().starts_with(&format!(
            "cannot fetch https://{addr}/ca.crt: cannot connect: "
        )),
        "{err}"
    );
    let err = fetch_ca("no-port").await.unwrap_err();
    assert_eq!(
        err.to_string(),
        "cannot fetch https://no-port/ca.crt: server must be host:port"
    );
}

#[tokio::test]
async fn rotation_uses_the_current_certificate_and_replaces_cert_and_key() {
    let cloud = start(Options::default()).await;
    let dir = tempfile::tempdir().unwrap();
    let p = paths(dir.path());
    bootstrap(&cloud.server, &cloud.token(), "edge-1", &p)
        .await
        .unwrap();
    let (old_ca, old_cert, old_key) = (
        std::fs::read(&p.ca).unwrap(),
        std::fs::read(&p.cert).unwrap(),
        std::fs::read(&p.key).unwrap(),
    );
    super::super::rotate(&cloud.server, "edge-1", &p)
        .await
        .unwrap();

    let seen = cloud.seen();
    assert_eq!(seen.len(), 3);
    assert_eq!(seen[2].path, "/edge.crt");
    assert_eq!(seen[2].header("authorization"), None);
    assert_eq!(seen[2].header("nodename"), Some("edge-1"));
    assert_eq!(seen[2].client_cn.as_deref(), Some("system:node:edge-1"));
    // The bootstrap presented no client certificate.
    assert_eq!(seen[1].client_cn, None);
    assert_eq!(std::fs::read(&p.ca).unwrap(), old_ca);
    let new_cert = std::fs::read(&p.cert).unwrap();
    assert_ne!(new_cert, old_cert);
    assert_ne!(std::fs::read(&p.key).unwrap(), old_key);
    assert!(matches!(
        cert_status(&new_cert, "edge-1", SystemTime::now()),
        CertStatus::Valid { .. }
    ));
    // The new key is the one the new certificate carries.
    let (_, csr) = X509CertificationRequest::from_der(&seen[2].body).unwrap();
    let (_, pem) = x509_parser::pem::parse_x509_pem(&new_cert).unwrap();
    assert_eq!(
        pem.parse_x509().unwrap().public_key().raw,
        csr.certification_request_info.subject_pki.raw
    );
}

#[tokio::test]
async fn refused_rotation_keeps_the_current_files() {
    let cloud = start(Options::default()).await;
    let dir = tempfile::tempdir().unwrap();
    let p = paths(dir.path());
    bootstrap(&cloud.server, &cloud.token(), "edge-1", &p)
        .await
        .unwrap();
    let read_all = || -> Vec<Vec<u8>> {
        [&p.ca, &p.cert, &p.key]
            .iter()
            .map(|f| std::fs::read(f).unwrap())
            .collect()
    };
    let before = read_all();
    // edge-1's certificate does not entitle it to a certificate for edge-2.
    let err = super::super::rotate(&cloud.server, "edge-2", &p)
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        format!("{}/edge.crt refused: HTTP 401: invalid token", cloud.server)
    );
    assert_eq!(read_all(), before);
    // A missing file is named.
    std::fs::remove_file(&p.key).unwrap();
    let err = super::super::rotate(&cloud.server, "edge-1", &p)
        .await
        .unwrap_err();
    assert!(
        err.to_string()
            .starts_with(&format!("cannot read {}: ", p.key.display())),
        "{err}"
    );
}
