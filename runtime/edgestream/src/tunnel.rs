//! Dialing CloudCore's tunnel server, and keeping a session up: redial with back-off after
//! every failure or end, until shutdown.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use rustls::pki_types::ServerName;
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::config::{Reconnect, TunnelConfig};
use crate::session::{self, SessionEnd};
use crate::stats::Stats;
use crate::tls::{TlsError, client_config, missing_file};
use crate::ws::{self, WsError};

/// The tunnel server's WebSocket path (CloudCore's `TunnelServer`).
pub const CONNECT_PATH: &str = "/v1/kubeedge/connect";
/// The session key header with the node's name, as Go's `http.Header.Add` spells KubeEdge's
/// `SessionHostNameOverride` on the wire (canonical form).
pub const HEADER_NODE_NAME: &str = "Sessionhostnameoverride";
/// The session key header with the node's address (KubeEdge's `SessionInternalIP`).
pub const HEADER_NODE_IP: &str = "Sessioninternalip";

/// A session that lasted this long resets the redial delays.
const STABLE: Duration = Duration::from_secs(10);

/// Why a dial failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum DialError {
    #[error(transparent)]
    Tls(#[from] TlsError),
    #[error("connect {0}: {1}")]
    Connect(String, std::io::Error),
    #[error(
        "TLS handshake with {0}: {1} (its certificate must be signed by tlsTunnelCAFile's CA, \
         and it must accept the node certificate)"
    )]
    TlsHandshake(String, std::io::Error),
    #[error(transparent)]
    Ws(#[from] WsError),
    #[error("no tunnel within {0:?}")]
    Timeout(Duration),
}

/// TCP, mutual TLS, and the WebSocket handshake with edgecore's session headers, within the
/// handshake timeout.
pub(crate) async fn dial(
    config: &TunnelConfig,
    name: ServerName<'static>,
) -> Result<(TlsStream<TcpStream>, BytesMut), DialError> {
    let tls = client_config(&config.credentials)?;
    let server = config.server.clone();
    let ip = config.node_ip.map(|ip| ip.to_string());
    let mut headers = vec![(HEADER_NODE_NAME, config.node_name.as_str())];
    if let Some(ip) = &ip {
        headers.push((HEADER_NODE_IP, ip.as_str()));
    }
    let all = async {
        let tcp = TcpStream::connect(&server)
            .await
            .map_err(|e| DialError::Connect(server.clone(), e))?;
        let _ = tcp.set_nodelay(true);
        let mut stream = TlsConnector::from(tls)
            .connect(name, tcp)
            .await
            .map_err(|e| DialError::TlsHandshake(server.clone(), e))?;
        let already = ws::handshake(&mut stream, &server, CONNECT_PATH, &headers).await?;
        Ok((stream, already))
    };
    tokio::time::timeout(config.handshake_timeout, all)
        .await
        .map_err(|_| DialError::Timeout(config.handshake_timeout))?
}

/// Redial delays with ±20 % jitter.
pub(crate) struct Backoff {
    settings: Reconnect,
    next: Duration,
}

impl Backoff {
    pub(crate) fn new(settings: Reconnect) -> Backoff {
        Backoff {
            settings,
            next: settings.initial,
        }
    }

    pub(crate) fn next_delay(&mut self) -> Duration {
        let base = self.next;
        self.next = (self.next * 2).min(self.settings.max);
        let factor: f64 = rand::random_range(0.8..1.2);
        base.mul_f64(factor).min(self.settings.max)
    }

    pub(crate) fn reset(&mut self) {
        self.next = self.settings.initial;
    }
}

/// Keeps a session up until `shutdown`.
pub(crate) async fn run(
    config: Arc<TunnelConfig>,
    name: ServerName<'static>,
    stats: Arc<Stats>,
    mut gate: Option<tokio::sync::watch::Receiver<bool>>,
    shutdown: CancellationToken,
) {
    let mut backoff = Backoff::new(config.reconnect);
    let mut last_error = String::new();
    let mut waiting_for_files = false;
    while !shutdown.is_cancelled() {
        if let Some(open) = gate.as_mut()
            && !*open.borrow()
        {
            info!(
                "edgestream: waiting for the node {} to be registered before dialing {}",
                config.node_name, config.server
            );
            let gone = tokio::select! {
                _ = shutdown.cancelled() => return,
                r = open.wait_for(|registered| *registered) => r.is_err(),
            };
            // A sender gone (edged stopped for good) leaves nothing to wait for.
            if gone {
                gate = None;
            }
            continue;
        }
        if let Some(path) = missing_file(&config.credentials) {
            if !waiting_for_files {
                info!(
                    "edgestream: waiting for {} (the node certificate edgeHub gets) before dialing {}",
                    path.display(),
                    config.server
                );
                waiting_for_files = true;
            }
            sleep(&shutdown, backoff.next_delay()).await;
            continue;
        }
        waiting_for_files = false;
        let dialed = tokio::select! {
            _ = shutdown.cancelled() => return,
            d = dial(&config, name.clone()) => d,
        };
        let (stream, already) = match dialed {
            Ok(s) => s,
            Err(e) => {
                Stats::inc(&stats.dial_failures);
                let text = e.to_string();
                if text != last_error {
                    warn!(
                        "edgestream: tunnel to {} failed: {text}; dialing again",
                        config.server
                    );
                    last_error = text;
                } else {
                    debug!(
                        "edgestream: tunnel to {} failed again: {text}",
                        config.server
                    );
                }
                sleep(&shutdown, backoff.next_delay()).await;
                continue;
            }
        };
        last_error.clear();
        Stats::inc(&stats.sessions);
        stats
            .connected
            .store(1, std::sync::atomic::Ordering::Relaxed);
        info!(
            "edgestream: tunnel to {} open (node {}, address {})",
            config.server,
            config.node_name,
            config
                .node_ip
                .map_or_else(|| "from the connection".to_owned(), |ip| ip.to_string())
        );
        let started = Instant::now();
        let end = session::serve(stream, already, config.clone(), stats.clone(), &shutdown).await;
        stats
            .connected
            .store(0, std::sync::atomic::Ordering::Relaxed);
        match &end {
            SessionEnd::Shutdown => {
                info!("edgestream: tunnel closed (shutdown)");
                return;
            }
            SessionEnd::CloudRefused(why) => {
                Stats::inc(&stats.refused_by_cloud);
                warn!("edgestream: CloudCore closed the tunnel: {why}");
            }
            SessionEnd::CloudSilent => warn!(
                "edgestream: CloudCore silent for longer than {:?}; dialing again",
                config.read_deadline
            ),
            SessionEnd::Failed(why) => warn!("edgestream: tunnel broke: {why}; dialing again"),
        }
        if started.elapsed() >= STABLE && !matches!(end, SessionEnd::CloudRefused(_)) {
            backoff.reset();
        }
        sleep(&shutdown, backoff.next_delay()).await;
    }
}

async fn sleep(shutdown: &CancellationToken, d: Duration) {
    tokio::select! {
        _ = shutdown.cancelled() => {}
        _ = tokio::time::sleep(d) => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_to_the_cap_and_resets() {
        let mut b = Backoff::new(Reconnect {
            initial: Duration::from_millis(500),
            max: Duration::from_secs(2),
        });
        let d: Vec<Duration> = (0..5).map(|_| b.next_delay()).collect();
        assert!(d[0] >= Duration::from_millis(400) && d[0] <= Duration::from_millis(600));
        assert!(d[1] >= Duration::from_millis(800) && d[1] <= Duration::from_millis(1200));
        for late in &d[2..] {
            assert!(*late >= Duration::from_millis(1600) && *late <= Duration::from_secs(2));
        }
        b.reset();
        assert!(b.next_delay() <= Duration::from_millis(600));
    }
}
