//! The fetcher against a real HTTPS server on 127.0.0.1 (rustls, certificates from a CA made
//! with rcgen for the test), with real files in a temporary cache directory.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_rustls::TlsAcceptor;

use super::*;

/// What the server answers for a path.
#[derive(Clone)]
enum Reply {
    /// 200 with a Content-Length.
    File(Vec<u8>),
    /// 200 with no length: the body ends when the connection closes.
    Unsized(Vec<u8>),
    /// 302 to this Location.
    Redirect(String),
}

/// A CA and a server certificate for 127.0.0.1 signed by it.
struct Pki {
    ca_pem: String,
    server_der: Vec<u8>,
    server_key: Vec<u8>,
}

fn pki() -> Pki {
    let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca_key = KeyPair::generate().expect("CA key");
    let ca = CertifiedIssuer::self_signed(params, ca_key).expect("CA");
    let key = KeyPair::generate().expect("server key");
    let server = CertificateParams::new(vec!["127.0.0.1".to_owned()])
        .expect("server params")
        .signed_by(&key, &ca)
        .expect("server certificate");
    Pki {
        ca_pem: ca.pem(),
        server_der: server.der().to_vec(),
        server_key: key.serialize_der(),
    }
}

/// A real HTTPS server on 127.0.0.1:0 answering `routes` (404 otherwise), counting requests.
/// Dropping it closes the listener.
struct Server {
    addr: SocketAddr,
    requests: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl Server {
    async fn start(pki: &Pki, routes: Vec<(&str, Reply)>) -> Server {
        let routes: Arc<HashMap<String, Reply>> =
            Arc::new(routes.into_iter().map(|(p, r)| (p.to_owned(), r)).collect());
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .expect("TLS versions")
            .with_no_client_auth()
            .with_single_cert(
                vec![CertificateDer::from(pki.server_der.clone())],
                PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(pki.server_key.clone())),
            )
            .expect("server TLS config");
        let acceptor = TlsAcceptor::from(Arc::new(config));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind 127.0.0.1:0");
        let addr = listener.local_addr().expect("local address");
        let requests = Arc::new(AtomicUsize::new(0));
        let counted = requests.clone();
        let task = tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let (acceptor, routes, counted) =
                    (acceptor.clone(), routes.clone(), counted.clone());
                tokio::spawn(async move {
                    let Ok(mut tls) = acceptor.accept(tcp).await else {
                        return;
                    };
                    let Some(path) = read_path(&mut tls).await else {
                        return;
                    };
                    counted.fetch_add(1, Ordering::SeqCst);
                    let (head, body) = match routes.get(&path) {
                        Some(Reply::File(body)) => (
                            format!("200 OK\r\nContent-Length: {}", body.len()),
                            body.clone(),
                        ),
                        Some(Reply::Unsized(body)) => ("200 OK".to_owned(), body.clone()),
                        Some(Reply::Redirect(to)) => (
                            format!("302 Found\r\nLocation: {to}\r\nContent-Length: 0"),
                            Vec::new(),
                        ),
                        None => ("404 Not Found\r\nContent-Length: 0".to_owned(), Vec::new()),
                    };
                    let head = format!("HTTP/1.1 {head}\r\nConnection: close\r\n\r\n");
                    let _ = tls.write_all(head.as_bytes()).await;
                    let _ = tls.write_all(&body).await;
                    let _ = tls.shutdown().await;
                });
            }
        });
        Server {
            addr,
            requests,
            task,
        }
    }

    fn url(&self, path: &str) -> String {
        format!("https://{}{path}", self.addr)
    }

    fn requests(&self) -> usize {
        self.requests.load(Ordering::SeqCst)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The path of the request on `stream`, once its head has arrived.
async fn read_path(stream: &mut (impl AsyncReadExt + Unpin)) -> Option<String> {
    let mut head = Vec::new();
    let mut chunk = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        head.extend_from_slice(&chunk[..n]);
    }
    let line = String::from_utf8_lossy(&head);
    line.split(' ').nth(1).map(str::to_owned)
}

/// A module file (any bytes: the fetcher does not look inside) and its digest.
fn module() -> (Vec<u8>, String) {
    let bytes: Vec<u8> = (0..100_000u32).map(|i| (i * 7 % 251) as u8).collect();
    let sha = hex_sha256(&bytes);
    (bytes, sha)
}

/// A fetcher trusting `pki`'s CA (written to a file, as `moduleCaFile`), caching in `dir`.
fn fetcher(pki: &Pki, dir: &Path) -> ModuleFetcher {
    let ca_file = dir.join("ca.pem");
    std::fs::write(&ca_file, &pki.ca_pem).expect("write the CA file");
    let mut settings = FetchSettings::new(dir.join("cache"));
    settings.ca_file = Some(ca_file);
    ModuleFetcher::new(settings)
}

fn cached(dir: &Path, sha: &str) -> PathBuf {
    dir.join("cache").join(format!("{sha}.wasm"))
}

#[tokio::test]
async fn the_pinned_file_is_returned_and_cached() {
    let (pki, dir) = (pki(), tempfile::tempdir().expect("temp dir"));
    let (bytes, sha) = module();
    let server = Server::start(&pki, vec![("/m.wasm", Reply::File(bytes.clone()))]).await;
    let got = fetcher(&pki, dir.path())
        .fetch(&server.url("/m.wasm"), &sha)
        .await
        .expect("fetch");
    assert_eq!(got, bytes);
    assert_eq!(
        std::fs::read(cached(dir.path(), &sha)).expect("cache file"),
        bytes
    );
    let leftovers: Vec<_> = std::fs::read_dir(dir.path().join("cache"))
        .expect("cache dir")
        .map(|e| e.expect("entry").file_name())
        .collect();
    assert_eq!(leftovers.len(), 1, "no temporary files left: {leftovers:?}");
}

#[tokio::test]
async fn a_wrong_pin_is_refused_naming_both_digests_and_nothing_is_cached() {
    let (pki, dir) = (pki(), tempfile::tempdir().expect("temp dir"));
    let (bytes, sha) = module();
    let server = Server::start(&pki, vec![("/m.wasm", Reply::File(bytes))]).await;
    let wrong = "ab".repeat(32);
    let fetcher = fetcher(&pki, dir.path());
    let err = fetcher
        .fetch(&server.url("/m.wasm"), &wrong)
        .await
        .expect_err("a wrong pin must be refused");
    assert!(err.contains("digest mismatch"), "{err}");
    assert!(err.contains(&format!("sha256:{wrong}")), "{err}");
    assert!(err.contains(&format!("sha256:{sha}")), "{err}");
    assert!(!cached(dir.path(), &wrong).exists());
    assert!(!cached(dir.path(), &sha).exists());

    // Asked again within the back-off: the same error, without downloading again.
    assert_eq!(server.requests(), 1);
    let again = fetcher
        .fetch(&server.url("/m.wasm"), &wrong)
        .await
        .expect_err("still refused");
    assert_eq!(again, err);
    assert_eq!(
        server.requests(),
        1,
        "no second download within the back-off"
    );
}

#[tokio::test]
async fn an_oversize_file_is_refused_announced_or_streamed() {
    let (pki, dir) = (pki(), tempfile::tempdir().expect("temp dir"));
    let (bytes, sha) = module();
    let server = Server::start(
        &pki,
        vec![
            ("/sized.wasm", Reply::File(bytes.clone())),
            ("/unsized.wasm", Reply::Unsized(bytes.clone())),
        ],
    )
    .await;
    let mut fetcher = fetcher(&pki, dir.path());
    fetcher.settings.max_bytes = bytes.len() as u64 - 1;
    fetcher.settings.retry_backoff = Duration::ZERO;
    for path in ["/sized.wasm", "/unsized.wasm"] {
        let err = fetcher
            .fetch(&server.url(path), &sha)
            .await
            .expect_err("over the limit");
        assert!(
            err.contains(&format!(
                "larger than the limit of {} bytes",
                bytes.len() - 1
            )),
            "{path}: {err}"
        );
    }
    assert!(!cached(dir.path(), &sha).exists());
    // At the limit exactly, a file with no announced length is whole.
    fetcher.settings.max_bytes = bytes.len() as u64;
    let got = fetcher
        .fetch(&server.url("/unsized.wasm"), &sha)
        .await
        .expect("at the limit");
    assert_eq!(got, bytes);
}

#[tokio::test]
async fn a_server_certificate_from_an_untrusted_ca_is_refused() {
    let (pki, dir) = (pki(), tempfile::tempdir().expect("temp dir"));
    let (bytes, sha) = module();
    let server = Server::start(&pki, vec![("/m.wasm", Reply::File(bytes))]).await;
    // System roots only: the test CA is not among them.
    let fetcher = ModuleFetcher::new(FetchSettings::new(dir.path().join("cache")));
    let err = fetcher
        .fetch(&server.url("/m.wasm"), &sha)
        .await
        .expect_err("untrusted certificate");
    assert!(err.contains("TLS handshake"), "{err}");
    assert!(err.contains("certificate"), "{err}");
    assert!(!cached(dir.path(), &sha).exists());
}

#[tokio::test]
async fn the_cached_file_is_used_when_the_server_is_gone() {
    let (pki, dir) = (pki(), tempfile::tempdir().expect("temp dir"));
    let (bytes, sha) = module();
    let server = Server::start(&pki, vec![("/m.wasm", Reply::File(bytes.clone()))]).await;
    let url = server.url("/m.wasm");
    fetcher(&pki, dir.path())
        .fetch(&url, &sha)
        .await
        .expect("first fetch");
    drop(server);
    tokio::task::yield_now().await;
    // A new fetcher on the same directory: the node after a reboot with no network.
    let got = fetcher(&pki, dir.path())
        .fetch(&url, &sha)
        .await
        .expect("from the cache");
    assert_eq!(got, bytes);
    // Without the cache, the same fetch needs the server, which is gone.
    std::fs::remove_file(cached(dir.path(), &sha)).expect("remove the cache file");
    let err = fetcher(&pki, dir.path())
        .fetch(&url, &sha)
        .await
        .expect_err("no server, no cache");
    assert!(err.contains("cannot connect"), "{err}");
}

#[tokio::test]
async fn a_corrupt_cache_file_is_fetched_again() {
    let (pki, dir) = (pki(), tempfile::tempdir().expect("temp dir"));
    let (bytes, sha) = module();
    let server = Server::start(&pki, vec![("/m.wasm", Reply::File(bytes.clone()))]).await;
    let path = cached(dir.path(), &sha);
    std::fs::create_dir_all(path.parent().expect("parent")).expect("cache dir");
    std::fs::write(&path, b"not the module").expect("corrupt file");
    let got = fetcher(&pki, dir.path())
        .fetch(&server.url("/m.wasm"), &sha)
        .await
        .expect("fetched again");
    assert_eq!(got, bytes);
    assert_eq!(server.requests(), 1);
    assert_eq!(std::fs::read(&path).expect("cache file"), bytes);
}

#[tokio::test]
async fn redirects_are_followed_to_https_only() {
    let (pki, dir) = (pki(), tempfile::tempdir().expect("temp dir"));
    let (bytes, sha) = module();
    let server = Server::start(
        &pki,
        vec![
            ("/m.wasm", Reply::File(bytes.clone())),
            ("/moved", Reply::Redirect("/m.wasm".into())),
            (
                "/plain",
                Reply::Redirect("http://127.0.0.1:1/m.wasm".into()),
            ),
            ("/loop", Reply::Redirect("/loop".into())),
        ],
    )
    .await;
    let fetcher = fetcher(&pki, dir.path());
    let got = fetcher
        .fetch(&server.url("/moved"), &sha)
        .await
        .expect("redirected");
    assert_eq!(got, bytes);
    std::fs::remove_file(cached(dir.path(), &sha)).expect("remove the cache file");
    let err = fetcher
        .fetch(&server.url("/plain"), &sha)
        .await
        .expect_err("not https");
    assert!(err.contains("not https://"), "{err}");
    let err = fetcher
        .fetch(&server.url("/loop"), &sha)
        .await
        .expect_err("endless");
    assert!(err.contains("more than 5 redirects"), "{err}");
    let err = fetcher
        .fetch(&server.url("/missing.wasm"), &sha)
        .await
        .expect_err("404");
    assert!(err.contains("404"), "{err}");
}

#[test]
fn a_ca_file_without_certificates_is_an_error() {
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("ca.pem");
    std::fs::write(&file, "nothing here").expect("write");
    let err = load_ca_file(&file).expect_err("no certificate");
    assert!(err.contains("no CERTIFICATE"), "{err}");
    let err = load_ca_file(&dir.path().join("missing.pem")).expect_err("missing");
    assert!(err.contains("cannot read"), "{err}");
}

#[test]
fn unused_old_module_files_are_removed_and_pinned_or_fresh_ones_stay() {
    let dir = tempfile::tempdir().unwrap();
    let name = |c: char| format!("{}.wasm", c.to_string().repeat(64));
    let old = std::time::SystemTime::now() - Duration::from_secs(120);
    for (c, age) in [('a', Some(old)), ('b', Some(old)), ('c', None)] {
        let file = std::fs::File::create(dir.path().join(name(c))).unwrap();
        if let Some(t) = age {
            file.set_modified(t).unwrap();
        }
    }
    std::fs::write(dir.path().join("notes.txt"), b"not a module").unwrap();
    let in_use = std::collections::HashSet::from(["b".repeat(64)]);
    assert_eq!(super::remove_unused_files(dir.path(), &in_use), 1);
    assert!(
        !dir.path().join(name('a')).exists(),
        "unused and old: removed"
    );
    assert!(dir.path().join(name('b')).exists(), "pinned: kept");
    assert!(dir.path().join(name('c')).exists(), "just written: kept");
    assert!(dir.path().join("notes.txt").exists());
}
