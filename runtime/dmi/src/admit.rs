//! Whether a DMI call may go ahead: a report only from the registrant of its device's mapper
//! and within that mapper's rate, a registration within the node's registration rate and only
//! when the protocol is free or its holder may be replaced (`owner.rs`). Each refusal is a
//! gRPC status that says why, a counter, and a log line at most every ten seconds per key.

use std::time::Instant;

use tonic::{Request, Status};

use crate::owner::{self, Takeover};
use crate::pb;
use crate::peer::Peer;
use crate::server::Manager;
use crate::state::State;
use crate::stats::Stats;

/// The credentials of the connection a request came on. Every connection the node serves
/// carries them (`accept.rs`); a request without is refused rather than trusted.
pub(crate) fn caller<T>(request: &Request<T>) -> Result<Peer, Status> {
    request
        .extensions()
        .get::<Peer>()
        .copied()
        .ok_or_else(|| Status::permission_denied("the DMI connection has no peer credentials"))
}

/// Why a report is refused.
enum Refusal {
    /// Not from the registrant of the device's mapper (or the device has none).
    NotOwner(String),
    /// Over the mapper's report rate.
    Rate { mapper: String, message: String },
}

impl Manager {
    /// Whether `peer` may report for device `id` now: it must be the registrant of the
    /// mapper of the device's protocol, and within that mapper's report rate.
    pub(crate) fn admit_report(&self, peer: &Peer, id: &str) -> Result<(), Status> {
        let same_process = self.shared.settings.access.reports_from_registering_process;
        let refusal = {
            let mut guard = self.shared.lock();
            let State {
                definitions,
                mappers,
                ..
            } = &mut *guard;
            let protocol = definitions.get(id).map(|d| d.protocol.as_str());
            match protocol.map(|p| (p, mappers.get_mut(p))) {
                None => Refusal::NotOwner(format!(
                    "device {id} is not defined on this node, so no DMI mapper reports for it"
                )),
                Some((protocol, None)) => Refusal::NotOwner(format!(
                    "device {id} (protocol {protocol:?}) has no registered DMI mapper; its \
                     mapper must call MapperRegister first"
                )),
                Some((protocol, Some(link))) => {
                    if !owner::may_report(&link.owner, peer, same_process) {
                        Refusal::NotOwner(format!(
                            "device {id} belongs to DMI mapper {:?} (protocol {protocol:?}), \
                             registered by another {}; this client is {peer}",
                            link.info.name,
                            if link.owner.uid == peer.uid {
                                "process"
                            } else {
                                "user"
                            }
                        ))
                    } else if !link.bucket.take(Instant::now()) {
                        let rate = link.bucket.rate();
                        Refusal::Rate {
                            mapper: link.info.name.clone(),
                            message: format!(
                                "DMI mapper {:?} (protocol {protocol:?}) reports faster than \
                                 {}/s (burst {}); report {id} again later",
                                link.info.name, rate.per_second, rate.burst
                            ),
                        }
                    } else {
                        return Ok(());
                    }
                }
            }
        };
        let stats = &self.shared.stats;
        let throttle = &self.shared.throttle;
        match refusal {
            Refusal::NotOwner(message) => {
                Stats::bump(&stats.refused_not_owner);
                if let Some(skipped) = throttle.allow(&format!("not_owner {}", peer.uid)) {
                    tracing::warn!(
                        peer = %peer,
                        "DMI report refused: {message} ({skipped} more from this uid since the \
                         last warning; counted in wedge_dmi_refused_total{{reason=\"not_owner\"}})"
                    );
                }
                Err(Status::permission_denied(message))
            }
            Refusal::Rate { mapper, message } => {
                Stats::bump(&stats.refused_rate);
                if let Some(skipped) = throttle.allow(&format!("rate {mapper}")) {
                    tracing::warn!(
                        "DMI report refused: {message} ({skipped} more since the last warning; \
                         counted in wedge_dmi_refused_total{{reason=\"rate\"}})"
                    );
                }
                Err(Status::resource_exhausted(message))
            }
        }
    }

    /// Whether the node takes another registration now (its registration rate).
    pub(crate) fn admit_registration(&self, peer: &Peer) -> Result<(), Status> {
        let taken = self
            .shared
            .register_bucket
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take(Instant::now());
        if taken {
            return Ok(());
        }
        Stats::bump(&self.shared.stats.refused_register_rate);
        if let Some(skipped) = self.shared.throttle.allow("register_rate") {
            tracing::warn!(
                peer = %peer,
                "DMI MapperRegister refused: over the node's registration rate ({skipped} more \
                 since the last warning)"
            );
        }
        let rate = self.shared.settings.limits.registrations;
        Err(Status::resource_exhausted(format!(
            "the node takes {}/s mapper registrations (burst {}); register again later",
            rate.per_second, rate.burst
        )))
    }

    /// Whether `peer` may take `protocol` from the mapper holding it, if any (see `owner.rs`).
    pub(crate) async fn admit_holder(
        &self,
        peer: &Peer,
        info: &pb::MapperInfo,
    ) -> Result<(), Status> {
        let holder = self
            .shared
            .lock()
            .mappers
            .get(&info.protocol)
            .map(|link| (link.owner, link.info.clone()));
        let Some((holder, held)) = holder else {
            return Ok(());
        };
        let socket = owner::socket_of(&held.address);
        let listener = owner::listener_of(&socket).await;
        let refusal = match owner::takeover(&holder, listener, peer, self.gate.trusted(peer.uid)) {
            Takeover::Allowed => {
                if holder != *peer {
                    tracing::info!(
                        protocol = %info.protocol,
                        old = %held.name,
                        new = %info.name,
                        peer = %peer,
                        "DMI protocol taken over: its mapper {} no longer answers on {}",
                        held.name,
                        socket.display()
                    );
                }
                return Ok(());
            }
            Takeover::Live => Status::already_exists(format!(
                "protocol {:?} is held by the running DMI mapper {:?} (its socket {} answers); \
                 stop that mapper first, or give this one another protocol",
                info.protocol,
                held.name,
                socket.display()
            )),
            Takeover::OtherUser => Status::permission_denied(format!(
                "protocol {:?} was registered by uid {} (DMI mapper {:?}); only that user or \
                 root may register for it (this client is {peer})",
                info.protocol, holder.uid, held.name
            )),
        };
        Stats::bump(&self.shared.stats.refused_protocol_held);
        if let Some(skipped) = self
            .shared
            .throttle
            .allow(&format!("protocol_held {}", info.protocol))
        {
            tracing::warn!(
                mapper = %info.name,
                peer = %peer,
                "DMI MapperRegister refused: {} ({skipped} more since the last warning)",
                refusal.message()
            );
        }
        Err(refusal)
    }
}
