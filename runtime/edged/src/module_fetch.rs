//! Module files of Wasm pods whose image is an HTTPS URL pinned by SHA-256
//! (`https://<host>/<path>@sha256:<hex>`, [`crate::wasm_pods::ModuleRef::Https`]): this file's
//! one job is to hand over module bytes whose digest is the pinned one.
//!
//! A verified file is kept as `<cache>/<sha256>.wasm`, so a pod comes back after a reboot with
//! no network: the pin says what the content must be, so a cached copy that hashes to it is
//! as good as a fresh download and the server is not asked again. Otherwise the file is
//! downloaded over HTTPS (server certificate verified against the system's roots plus an
//! optional extra CA file), bounded in size and time, hashed, and refused unless it matches.
//! A failed fetch is not tried again for a back-off (10 s doubling to 5 min, as kubelet's
//! image pulls), so a wrong pin does not download the file again on every relist.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use http_body_util::{BodyExt, Empty};
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;
use rustls::RootCertStore;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use sha2::{Digest, Sha256};
use tokio_rustls::TlsConnector;

/// Redirects followed before a fetch gives up (each only to another `https://` URL).
const MAX_REDIRECTS: usize = 5;

/// Longest wait before a failed fetch is tried again.
const MAX_RETRY_BACKOFF: Duration = Duration::from_secs(300);

/// How module files are fetched and where they are kept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchSettings {
    /// Verified module files, as `<sha256>.wasm` (`wedge.edged.moduleCacheDir`, by default
    /// `<rootDirectory>/wasm-modules`).
    pub cache_dir: PathBuf,
    /// A PEM bundle of CA certificates trusted besides the system's roots
    /// (`wedge.edged.moduleCaFile`), for module servers with a private CA.
    pub ca_file: Option<PathBuf>,
    /// Largest module file accepted: 64 MiB, well above any real module and low enough that a
    /// wrong URL cannot fill the node's memory.
    pub max_bytes: u64,
    /// Longest a download may take, redirects included: 60 s.
    pub timeout: Duration,
    /// First wait before a failed fetch is tried again (10 s); doubles up to 5 min.
    pub retry_backoff: Duration,
}

impl FetchSettings {
    /// The defaults, with files kept in `cache_dir`.
    pub fn new(cache_dir: impl Into<PathBuf>) -> FetchSettings {
        FetchSettings {
            cache_dir: cache_dir.into(),
            ca_file: None,
            max_bytes: 64 * 1024 * 1024,
            timeout: Duration::from_secs(60),
            retry_backoff: Duration::from_secs(10),
        }
    }
}

/// A fetch that failed: its error is given again, without trying, until `retry_at`.
struct Failure {
    error: String,
    retry_at: Instant,
    backoff: Duration,
}

/// Gets verified module bytes for HTTPS module references (see the module docs).
pub struct ModuleFetcher {
    settings: FetchSettings,
    /// The TLS client configuration, made at the first download (reading the roots once).
    tls: Mutex<Option<Arc<rustls::ClientConfig>>>,
    /// Recent failures by (URL, digest).
    failures: Mutex<HashMap<(String, String), Failure>>,
}

impl ModuleFetcher {
    /// A fetcher per `settings`. Nothing is read until the first fetch.
    pub fn new(settings: FetchSettings) -> ModuleFetcher {
        ModuleFetcher {
            settings,
            tls: Mutex::new(None),
            failures: Mutex::new(HashMap::new()),
        }
    }

    /// Removes cached module files whose digest is not in `in_use` (the pins of the pods
    /// desired now) and that are older than a minute (one just downloaded for a pod that
    /// arrived after `in_use` was taken stays); returns how many went. Without this the cache
    /// only grows: every pod ever run with a new pin leaves its file.
    pub async fn remove_unused(&self, in_use: std::collections::HashSet<String>) -> usize {
        let dir = self.settings.cache_dir.clone();
        blocking(move || remove_unused_files(&dir, &in_use))
            .await
            .unwrap_or(0)
    }

    /// The module file at `url` whose SHA-256 is `sha256` (64 lowercase hex digits): from the
    /// cache when a copy there still hashes to it, otherwise downloaded, checked and cached
    /// first. The error says precisely what failed; it becomes the container's message.
    pub async fn fetch(&self, url: &str, sha256: &str) -> Result<Vec<u8>, String> {
        let path = self.settings.cache_dir.join(format!("{sha256}.wasm"));
        let (cached, max) = (path.clone(), self.settings.max_bytes);
        let pin = sha256.to_owned();
        match blocking(move || read_cached(&cached, &pin, max))
            .await
            .and_then(|r| r)
        {
            Ok(Some(bytes)) => return Ok(bytes),
            Ok(None) => {}
            Err(e) => tracing::warn!(url, "cached module not used, downloading again: {e}"),
        }
        let key = (url.to_owned(), sha256.to_owned());
        if let Some(failure) = self.lock_failures().get(&key)
            && Instant::now() < failure.retry_at
        {
            return Err(failure.error.clone());
        }
        let result = self.download_verified(url, sha256, &path).await;
        let mut failures = self.lock_failures();
        match &result {
            Ok(_) => {
                failures.remove(&key);
            }
            Err(error) => {
                let now = Instant::now();
                // Forget failures nobody asked about again for a while (pods deleted).
                failures.retain(|_, f| now < f.retry_at + MAX_RETRY_BACKOFF);
                let backoff = failures
                    .get(&key)
                    .map(|f| (f.backoff * 2).min(MAX_RETRY_BACKOFF))
                    .unwrap_or(self.settings.retry_backoff);
                failures.insert(
                    key,
                    Failure {
                        error: error.clone(),
                        retry_at: now + backoff,
                        backoff,
                    },
                );
            }
        }
        result
    }

    /// Downloads `url`, checks it against `sha256` and writes it to `path`.
    async fn download_verified(
        &self,
        url: &str,
        sha256: &str,
        path: &Path,
    ) -> Result<Vec<u8>, String> {
        let timeout = self.settings.timeout;
        let bytes = tokio::time::timeout(timeout, self.download(url))
            .await
            .map_err(|_| format!("GET {url}: no complete answer within {timeout:?}"))??;
        let (bytes, got) = blocking(move || {
            let got = hex_sha256(&bytes);
            (bytes, got)
        })
        .await?;
        if got != sha256 {
            return Err(format!(
                "GET {url}: digest mismatch: the image pins sha256:{sha256} but the server sent a file with sha256:{got}"
            ));
        }
        let path = path.to_owned();
        let bytes = blocking(move || write_atomically(&path, &bytes).map(|()| bytes)).await??;
        tracing::info!(url, sha256, size = bytes.len(), "Wasm module downloaded");
        Ok(bytes)
    }

    /// GET `url`, following up to [`MAX_REDIRECTS`] redirects to `https://` URLs.
    async fn download(&self, url: &str) -> Result<Vec<u8>, String> {
        let connector = TlsConnector::from(self.client_config()?);
        let mut current = url.to_owned();
        for _ in 0..=MAX_REDIRECTS {
            let uri: hyper::Uri = current
                .parse()
                .map_err(|e| format!("GET {current}: not a URL: {e}"))?;
            if uri.scheme_str() != Some("https") {
                return Err(format!(
                    "GET {url}: redirected to {current}, which is not https://; refused"
                ));
            }
            let response = get(&connector, &uri).await?;
            let status = response.status();
            if status.is_redirection() {
                let location = response
                    .headers()
                    .get(hyper::header::LOCATION)
                    .and_then(|l| l.to_str().ok())
                    .ok_or_else(|| format!("GET {current}: {status} without a usable Location"))?;
                current = resolve(&uri, location);
                continue;
            }
            if status != hyper::StatusCode::OK {
                return Err(format!("GET {current}: the server answered {status}"));
            }
            return self.read_body(&current, response).await;
        }
        Err(format!("GET {url}: more than {MAX_REDIRECTS} redirects"))
    }

    /// The body of `response`, refused past the size limit (announced or streamed).
    async fn read_body(
        &self,
        url: &str,
        response: hyper::Response<hyper::body::Incoming>,
    ) -> Result<Vec<u8>, String> {
        let max = self.settings.max_bytes;
        let too_big = || format!("GET {url}: the module is larger than the limit of {max} bytes");
        let announced = response
            .headers()
            .get(hyper::header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
        if announced.is_some_and(|n| n > max) {
            return Err(too_big());
        }
        let capacity = announced.unwrap_or(0).min(max);
        let mut bytes = Vec::with_capacity(usize::try_from(capacity).unwrap_or(0));
        let mut body = response.into_body();
        while let Some(frame) = body.frame().await {
            let frame = frame.map_err(|e| format!("GET {url}: reading the body failed: {e}"))?;
            if let Ok(data) = frame.into_data() {
                if (bytes.len() + data.len()) as u64 > max {
                    return Err(too_big());
                }
                bytes.extend_from_slice(&data);
            }
        }
        Ok(bytes)
    }

    /// The TLS client configuration (made once): system roots plus the extra CA file.
    fn client_config(&self) -> Result<Arc<rustls::ClientConfig>, String> {
        let mut cached = self.tls.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(config) = cached.as_ref() {
            return Ok(config.clone());
        }
        let mut roots = RootCertStore::empty();
        let native = rustls_native_certs::load_native_certs();
        for e in &native.errors {
            tracing::warn!("system CA certificates partly unreadable: {e}");
        }
        let (added, _) = roots.add_parsable_certificates(native.certs);
        tracing::debug!(added, "system CA certificates for module downloads");
        if let Some(file) = &self.settings.ca_file {
            for cert in load_ca_file(file)? {
                roots.add(cert).map_err(|e| {
                    format!(
                        "module CA file {}: unusable certificate: {e}",
                        file.display()
                    )
                })?;
            }
        }
        if roots.is_empty() {
            return Err("no trusted CA certificates for module downloads: none in the system store and no wedge.edged.moduleCaFile".into());
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| format!("TLS setup for module downloads failed: {e}"))?
            .with_root_certificates(roots)
            .with_no_client_auth();
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        let config = Arc::new(config);
        *cached = Some(config.clone());
        Ok(config)
    }

    fn lock_failures(&self) -> std::sync::MutexGuard<'_, HashMap<(String, String), Failure>> {
        self.failures.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The certificates of a PEM bundle; an error when it cannot be read or holds none. The
/// daemon calls it at start so a wrong `wedge.edged.moduleCaFile` is reported then, not at
/// the first pod.
pub fn load_ca_file(file: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let pem = std::fs::read(file)
        .map_err(|e| format!("module CA file {}: cannot read it: {e}", file.display()))?;
    let certs = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("module CA file {}: not PEM: {e}", file.display()))?;
    if certs.is_empty() {
        return Err(format!(
            "module CA file {}: no CERTIFICATE in it",
            file.display()
        ));
    }
    Ok(certs)
}

/// One GET of `uri` on a connection of its own.
async fn get(
    connector: &TlsConnector,
    uri: &hyper::Uri,
) -> Result<hyper::Response<hyper::body::Incoming>, String> {
    let host = uri.host().unwrap_or_default();
    // `[::1]` in a URL is `::1` on the wire and in the certificate.
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    let port = uri.port_u16().unwrap_or(443);
    let tcp = tokio::net::TcpStream::connect((bare, port))
        .await
        .map_err(|e| format!("GET {uri}: cannot connect to {host}:{port}: {e}"))?;
    let name = ServerName::try_from(bare.to_owned())
        .map_err(|e| format!("GET {uri}: {host:?} is not a server name: {e}"))?;
    let tls = connector
        .connect(name, tcp)
        .await
        .map_err(|e| format!("GET {uri}: TLS handshake with {host}:{port} failed: {e}"))?;
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
        .await
        .map_err(|e| format!("GET {uri}: HTTP handshake failed: {e}"))?;
    // Ends when the response body has been read (or dropped) and the sender is gone.
    tokio::spawn(async move {
        if let Err(e) = connection.await {
            tracing::debug!("module download connection ended: {e}");
        }
    });
    let authority = uri.authority().map(|a| a.as_str()).unwrap_or(host);
    let path = uri.path_and_query().map(|p| p.as_str()).unwrap_or("/");
    let request = hyper::Request::get(path)
        .header(hyper::header::HOST, authority)
        .header(hyper::header::USER_AGENT, "wedge-edged")
        .body(Empty::<Bytes>::new())
        .map_err(|e| format!("GET {uri}: bad request: {e}"))?;
    sender
        .send_request(request)
        .await
        .map_err(|e| format!("GET {uri}: no answer: {e}"))
}

/// Where a redirect from `base` to `location` goes: absolute URLs as they are, absolute paths
/// on the same server. Anything else is returned unchanged and refused as not `https://`.
fn resolve(base: &hyper::Uri, location: &str) -> String {
    match (location.starts_with('/'), base.authority()) {
        (true, Some(authority)) if !location.starts_with("//") => {
            format!("https://{authority}{location}")
        }
        _ => location.to_owned(),
    }
}

/// The cached file at `path` if it holds the module pinned by `sha256`; `None` when there is
/// none. A corrupt copy is removed (and reported as an error so it is logged).
fn read_cached(path: &Path, sha256: &str, max: u64) -> Result<Option<Vec<u8>>, String> {
    let bytes = match std::fs::metadata(path) {
        Ok(meta) if meta.len() > max => None,
        Ok(_) => {
            Some(std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?)
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("cannot read {}: {e}", path.display())),
    };
    if let Some(bytes) = bytes
        && hex_sha256(&bytes) == sha256
    {
        return Ok(Some(bytes));
    }
    let removed = std::fs::remove_file(path)
        .map(|()| "removed")
        .unwrap_or("could not be removed");
    Err(format!(
        "{} does not hash to its name; {removed}",
        path.display()
    ))
}

/// Writes `bytes` to `path` whole, in a directory only this user controls (see
/// [`wedge_core::private_fs`]): a cache directory others can write into is refused, naming it.
fn write_atomically(path: &Path, bytes: &[u8]) -> Result<(), String> {
    let fail = |e: wedge_core::private_fs::PrivateFsError| {
        format!("cannot cache the module as {}: {e}", path.display())
    };
    let dir = path.parent().unwrap_or(Path::new("."));
    wedge_core::private_fs::ensure_private_dir(dir).map_err(fail)?;
    wedge_core::private_fs::write_atomically(path, bytes).map_err(fail)
}

/// See [`ModuleFetcher::remove_unused`].
fn remove_unused_files(dir: &Path, in_use: &std::collections::HashSet<String>) -> usize {
    const MIN_AGE: Duration = Duration::from_secs(60);
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    let mut removed = 0;
    for entry in entries.flatten() {
        let path = entry.path();
        let Some(stem) = path
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.strip_suffix(".wasm"))
        else {
            continue;
        };
        let pinned_name = stem.len() == 64 && stem.bytes().all(|b| b.is_ascii_hexdigit());
        let old_enough = entry
            .metadata()
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| t.elapsed().ok())
            .is_some_and(|age| age >= MIN_AGE);
        if pinned_name && !in_use.contains(stem) && old_enough {
            match std::fs::remove_file(&path) {
                Ok(()) => removed += 1,
                Err(e) => {
                    tracing::warn!(file = %path.display(), "unused cached module not removed: {e}")
                }
            }
        }
    }
    removed
}

/// SHA-256 of `bytes`, lowercase hex.
fn hex_sha256(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Runs file I/O and hashing (up to the size limit) off the async workers.
async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> Result<T, String> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| format!("module fetch task failed: {e}"))
}

#[cfg(test)]
mod tests;
