//! A client of the real kube-apiserver with the cloud's admin certificate, for what kubectl
//! cannot do: an upgraded (`Upgrade: SPDY/3.1`) exec/attach request whose bytes the test
//! reads and writes itself, and many requests at once.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, bail, ensure};
use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::TokioIo;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::{ClientConfig, RootCertStore};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;

/// The apiserver of a test cloud.
#[derive(Clone)]
pub struct Api {
    port: u16,
    tls: Arc<ClientConfig>,
}

/// An upgraded connection through the apiserver.
pub struct Upgraded {
    /// The response head the client got (the kubelet's, passed on by the apiserver).
    pub head: String,
    /// Bytes read past the head.
    pub early: Vec<u8>,
    /// The connection.
    pub stream: TlsStream<TcpStream>,
}

impl Api {
    /// The apiserver on `port`, trusted by the cluster CA in `state/pki`, as its admin.
    pub fn new(state: &Path, port: u16) -> Result<Api> {
        let pki = state.join("pki");
        let mut roots = RootCertStore::empty();
        for cert in CertificateDer::pem_file_iter(pki.join("ca.crt"))? {
            roots.add(cert?)?;
        }
        let chain =
            CertificateDer::pem_file_iter(pki.join("admin.crt"))?.collect::<Result<Vec<_>, _>>()?;
        let key = PrivateKeyDer::from_pem_file(pki.join("admin.key"))?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let tls = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .with_root_certificates(roots)
            .with_client_auth_cert(chain, key)?;
        Ok(Api {
            port,
            tls: Arc::new(tls),
        })
    }

    async fn connect(&self) -> Result<TlsStream<TcpStream>> {
        let tcp = TcpStream::connect(("127.0.0.1", self.port))
            .await
            .context("connect to the apiserver")?;
        let name = ServerName::try_from("127.0.0.1")?;
        Ok(TlsConnector::from(self.tls.clone())
            .connect(name, tcp)
            .await?)
    }

    /// `GET path`: status and body.
    pub async fn get(&self, path: &str) -> Result<(u16, String)> {
        let stream = self.connect().await?;
        let (mut sender, conn) =
            hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
        tokio::spawn(conn);
        let req = http::Request::get(path)
            .header("host", format!("127.0.0.1:{}", self.port))
            .body(Empty::<Bytes>::new())?;
        let response = tokio::time::timeout(Duration::from_secs(30), sender.send_request(req))
            .await
            .context("no answer in 30 s")??;
        let status = response.status().as_u16();
        let body = tokio::time::timeout(Duration::from_secs(30), response.into_body().collect())
            .await
            .context("no whole body in 30 s")??
            .to_bytes();
        Ok((status, String::from_utf8_lossy(&body).into_owned()))
    }

    /// A `POST path` asking to upgrade to SPDY/3.1, as kubectl's SPDY executor sends it; the
    /// answer's head (whatever its status) and the connection.
    pub async fn upgrade(&self, path: &str) -> Result<Upgraded> {
        let mut stream = self.connect().await?;
        let request = format!(
            "POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\n\
             X-Stream-Protocol-Version: v4.channel.k8s.io\r\nContent-Length: 0\r\n\r\n",
            self.port
        );
        stream.write_all(request.as_bytes()).await?;
        stream.flush().await?;
        let mut buf = Vec::new();
        let head_len = tokio::time::timeout(Duration::from_secs(30), async {
            loop {
                if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                    return Ok::<usize, anyhow::Error>(i + 4);
                }
                let mut chunk = [0u8; 4096];
                let n = stream.read(&mut chunk).await?;
                if n == 0 {
                    bail!(
                        "the apiserver closed before a response head; got {:?}",
                        String::from_utf8_lossy(&buf)
                    );
                }
                buf.extend_from_slice(&chunk[..n]);
            }
        })
        .await
        .context("no response head in 30 s")??;
        Ok(Upgraded {
            head: String::from_utf8_lossy(&buf[..head_len]).into_owned(),
            early: buf[head_len..].to_vec(),
            stream,
        })
    }
}

impl Upgraded {
    /// Reads until `want` has been seen (in what came after the head), within 15 s; all read.
    pub async fn read_until(&mut self, want: &[u8]) -> Result<Vec<u8>> {
        let mut got = std::mem::take(&mut self.early);
        tokio::time::timeout(Duration::from_secs(15), async {
            while !got.windows(want.len()).any(|w| w == want) {
                let mut chunk = [0u8; 4096];
                let n = self.stream.read(&mut chunk).await?;
                ensure!(
                    n > 0,
                    "end of stream; read {:?}",
                    String::from_utf8_lossy(&got)
                );
                got.extend_from_slice(&chunk[..n]);
            }
            Ok(())
        })
        .await
        .with_context(|| format!("{:?} not read in 15 s", String::from_utf8_lossy(want)))??;
        Ok(got)
    }

    /// Waits for the end of the stream (within 15 s); what came before it.
    pub async fn read_to_end(&mut self) -> Result<Vec<u8>> {
        let mut got = std::mem::take(&mut self.early);
        tokio::time::timeout(Duration::from_secs(15), async {
            loop {
                let mut chunk = [0u8; 4096];
                match self.stream.read(&mut chunk).await {
                    Ok(0) | Err(_) => return,
                    Ok(n) => got.extend_from_slice(&chunk[..n]),
                }
            }
        })
        .await
        .context("the connection stayed open 15 s")?;
        Ok(got)
    }

    /// The body of a response that was not an upgrade: `Content-Length` bytes, or up to the
    /// end of the stream.
    pub async fn body(&mut self) -> Result<String> {
        let length = self.head.lines().find_map(|l| {
            let (name, value) = l.split_once(':')?;
            name.eq_ignore_ascii_case("content-length")
                .then(|| value.trim().parse::<usize>().ok())
                .flatten()
        });
        let body = match length {
            Some(n) => {
                let mut got = std::mem::take(&mut self.early);
                tokio::time::timeout(Duration::from_secs(15), async {
                    while got.len() < n {
                        let mut chunk = [0u8; 4096];
                        let r = self.stream.read(&mut chunk).await?;
                        ensure!(r > 0, "end of stream inside the body");
                        got.extend_from_slice(&chunk[..r]);
                    }
                    Ok(())
                })
                .await
                .context("no whole body in 15 s")??;
                got
            }
            None => self.read_to_end().await?,
        };
        Ok(String::from_utf8_lossy(&body).into_owned())
    }
}
