//! A real HTTPS file server on 127.0.0.1 for module downloads (Wasm pods whose image is
//! `https://<host>/<path>@sha256:<hex>`): a certificate from a [`CloudCa`], fixed files by
//! path (404 otherwise), one request per connection. It counts the requests it answered.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use anyhow::Result;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::cloudhub::CloudCa;

/// A running file server; dropping it stops it.
pub struct HttpsFiles {
    addr: SocketAddr,
    requests: Arc<AtomicUsize>,
    rt: Option<tokio::runtime::Runtime>,
}

impl HttpsFiles {
    /// Serves `files` (path such as `/threshold.wasm`, content) on a free loopback port with a
    /// certificate for 127.0.0.1 signed by `ca`.
    pub fn start(ca: &CloudCa, files: Vec<(String, Vec<u8>)>) -> Result<HttpsFiles> {
        let server = ca.server_cert(&["127.0.0.1"])?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .with_no_client_auth()
            .with_single_cert(
                vec![CertificateDer::from(server.cert_der)],
                PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(server.key_der)),
            )?;
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        let files: Arc<HashMap<String, Vec<u8>>> = Arc::new(files.into_iter().collect());
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()?;
        let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let requests = Arc::new(AtomicUsize::new(0));
        let counted = requests.clone();
        let _guard = rt.enter();
        let listener = tokio::net::TcpListener::from_std(listener)?;
        rt.spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let (acceptor, files, counted) = (acceptor.clone(), files.clone(), counted.clone());
                tokio::spawn(async move {
                    let Ok(mut tls) = acceptor.accept(tcp).await else {
                        return;
                    };
                    let Some(path) = request_path(&mut tls).await else {
                        return;
                    };
                    counted.fetch_add(1, Ordering::SeqCst);
                    let (status, body) = match files.get(&path) {
                        Some(body) => ("200 OK", body.as_slice()),
                        None => ("404 Not Found", &b""[..]),
                    };
                    let head = format!(
                        "HTTP/1.1 {status}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                        body.len()
                    );
                    let _ = tls.write_all(head.as_bytes()).await;
                    let _ = tls.write_all(body).await;
                    let _ = tls.shutdown().await;
                });
            }
        });
        Ok(HttpsFiles {
            addr,
            requests,
            rt: Some(rt),
        })
    }

    /// `https://127.0.0.1:<port><path>`.
    pub fn url(&self, path: &str) -> String {
        format!("https://{}{path}", self.addr)
    }

    /// Requests answered so far.
    pub fn requests(&self) -> usize {
        self.requests.load(Ordering::SeqCst)
    }
}

impl Drop for HttpsFiles {
    fn drop(&mut self) {
        if let Some(rt) = self.rt.take() {
            rt.shutdown_background();
        }
    }
}

/// The path of the request on `stream`, once its head has arrived.
async fn request_path(stream: &mut (impl AsyncReadExt + Unpin)) -> Option<String> {
    let mut head = Vec::new();
    let mut chunk = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 || head.len() > 64 * 1024 {
            return None;
        }
        head.extend_from_slice(&chunk[..n]);
    }
    let line = String::from_utf8_lossy(&head);
    line.split(' ').nth(1).map(str::to_owned)
}
