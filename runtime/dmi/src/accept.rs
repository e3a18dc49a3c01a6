//! Accepting connections on the DMI socket: the peer check and the connection cap, before any
//! byte reaches the gRPC server.
//!
//! A connection whose peer is not allowed (see `peer.rs`) is closed at once and counted; one
//! past `maxConnections` waits up to a second for a slot (mapper-framework dials once per
//! report, so a burst of reports queues rather than fails) and is closed if none frees. An
//! admitted one goes through the `:authority` shim (`authority.rs`) to tonic, with its peer's
//! credentials attached so the handlers know who is calling.

use std::sync::Arc;
use std::time::Duration;

use tokio::net::UnixListener;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc};
use tokio_util::sync::CancellationToken;

use crate::module::Shared;
use crate::peer::{Gate, Peer, PeerIo};
use crate::stats::Stats;

/// How long a connection past the cap waits for a slot.
const SLOT_WAIT: Duration = Duration::from_secs(1);
/// The pipe between the shim and tonic, per connection.
const PIPE: usize = 64 * 1024;
/// Pause after an accept error (out of descriptors, ...), so the loop does not spin.
const ACCEPT_PAUSE: Duration = Duration::from_millis(100);

/// What the accept loop needs.
pub(crate) struct Acceptor {
    /// The node's DMI socket.
    pub listener: UnixListener,
    /// The peer check of this run.
    pub gate: Arc<Gate>,
    /// Counters and log throttle.
    pub shared: Arc<Shared>,
    /// One permit per open connection.
    pub slots: Arc<Semaphore>,
    /// Where admitted connections go (tonic's incoming stream).
    pub connections: mpsc::Sender<std::io::Result<PeerIo>>,
}

impl Acceptor {
    /// Accepts until `token` is cancelled or tonic stops taking connections.
    pub(crate) async fn run(self, token: CancellationToken) {
        loop {
            let accepted = tokio::select! {
                _ = token.cancelled() => return,
                accepted = self.listener.accept() => accepted,
            };
            let stream = match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    if let Some(skipped) = self.shared.throttle.allow("accept") {
                        tracing::warn!("DMI socket accept failed ({skipped} more since): {e}");
                    }
                    tokio::time::sleep(ACCEPT_PAUSE).await;
                    continue;
                }
            };
            let peer = match Peer::of(&stream) {
                Ok(peer) => peer,
                Err(e) => {
                    Stats::bump(&self.shared.stats.refused_peer);
                    tracing::debug!("DMI connection refused: its credentials cannot be read: {e}");
                    continue;
                }
            };
            if !self.gate.admits(&peer) {
                Stats::bump(&self.shared.stats.refused_peer);
                self.gate.log_refusal(&peer);
                continue;
            }
            let Some(slot) = self.slot(&token).await else {
                if token.is_cancelled() {
                    return;
                }
                Stats::bump(&self.shared.stats.refused_connections);
                if let Some(skipped) = self.shared.throttle.allow("connections") {
                    tracing::warn!(
                        peer = %peer,
                        "DMI connection refused: the socket's maxConnections are open \
                         ({skipped} more refused since the last warning; counted in \
                         wedge_dmi_refused_total{{reason=\"connections\"}})"
                    );
                }
                continue;
            };
            Stats::bump(&self.shared.stats.connections);
            let (ours, tonics) = tokio::io::duplex(PIPE);
            let shared = self.shared.clone();
            tokio::spawn(async move {
                let result = crate::authority::relay(stream, ours).await;
                drop(slot);
                if let Err(e) = result
                    && crate::authority::is_oversized(&e)
                {
                    Stats::bump(&shared.stats.refused_oversized);
                    if let Some(skipped) = shared.throttle.allow("oversized frame") {
                        tracing::warn!(
                            peer = %peer,
                            "DMI connection closed: {e} ({skipped} more since the last warning)"
                        );
                    }
                }
            });
            if self
                .connections
                .send(Ok(PeerIo { io: tonics, peer }))
                .await
                .is_err()
            {
                return;
            }
        }
    }

    /// A connection slot: at once when one is free, else within [`SLOT_WAIT`]; `None` when
    /// none freed (or the module is stopping).
    async fn slot(&self, token: &CancellationToken) -> Option<OwnedSemaphorePermit> {
        if let Ok(slot) = self.slots.clone().try_acquire_owned() {
            return Some(slot);
        }
        tokio::select! {
            _ = token.cancelled() => None,
            slot = tokio::time::timeout(SLOT_WAIT, self.slots.clone().acquire_owned()) => {
                slot.ok().and_then(Result::ok)
            }
        }
    }
}
