//! Who holds a protocol, and who may take it or report for its devices.
//!
//! edgecore gives a protocol to whoever registered for it last and takes reports for any
//! device from anyone on the socket. Here the kernel's credentials of the registering process
//! (see `peer.rs`) are stored with its mapper, and:
//! - a device's reports count only from that user (and, by default, that process);
//! - a protocol whose mapper is live (its socket answers, served by the same user) is not
//!   taken by another process; once that mapper is gone, the same user may register again
//!   (a restarted mapper), and so may root or the node's user, but no other user;
//! - a mapper remembered from before a restart is re-verified before the node trusts it: its
//!   socket must be served by the user that registered it, and every later connection the
//!   node makes to it is checked the same way (`client.rs`).

use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::net::UnixStream;

use crate::peer::Peer;

/// How long the node waits for a mapper's socket to accept a probe connection.
pub(crate) const PROBE_TIMEOUT: Duration = Duration::from_secs(1);

/// The socket path a mapper gave as `MapperInfo.address`.
pub(crate) fn socket_of(address: &[u8]) -> PathBuf {
    PathBuf::from(String::from_utf8_lossy(address).into_owned())
}

/// The credentials of the process serving the mapper socket at `socket`, or `None` when
/// nothing answers there (for a listening socket the kernel reports who called `listen`).
pub(crate) async fn listener_of(socket: &Path) -> Option<Peer> {
    let stream = tokio::time::timeout(PROBE_TIMEOUT, UnixStream::connect(socket))
        .await
        .ok()?
        .ok()?;
    Peer::of(&stream).ok()
}

/// Whether a report from `caller` counts for a device of the mapper registered by `owner`:
/// the same uid, and the same pid when `same_process` (and the registering pid is known).
pub(crate) fn may_report(owner: &Peer, caller: &Peer, same_process: bool) -> bool {
    owner.uid == caller.uid && (!same_process || owner.pid.is_none() || owner.pid == caller.pid)
}

/// What a registration for a protocol someone holds may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Takeover {
    /// It may take the protocol: it is the holder itself, or the holder is gone and it is the
    /// same user (or a trusted one).
    Allowed,
    /// The holder is live: its socket answers, served by its user, and not by the registrant.
    Live,
    /// The holder is gone but registered as another user.
    OtherUser,
}

/// Whether `registrant` may take a protocol held by `holder`, whose socket is served by
/// `listener` now (`None`: nothing answers); `registrant_trusted` for root and the node user.
pub(crate) fn takeover(
    holder: &Peer,
    listener: Option<Peer>,
    registrant: &Peer,
    registrant_trusted: bool,
) -> Takeover {
    if holder.uid == registrant.uid && holder.pid.is_some() && holder.pid == registrant.pid {
        return Takeover::Allowed;
    }
    // A registrant serving the holder's socket itself has replaced it there (a restarted
    // mapper binds its old path before it registers).
    let live = listener
        .is_some_and(|l| l.uid == holder.uid && (l.pid.is_none() || l.pid != registrant.pid));
    if live {
        Takeover::Live
    } else if holder.uid == registrant.uid || registrant_trusted {
        Takeover::Allowed
    } else {
        Takeover::OtherUser
    }
}

/// What becomes of a mapper remembered from before a restart.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Verified {
    /// Kept, held by this owner.
    Keep(Peer),
    /// Forgotten, for this reason.
    Forget(String),
}

/// Re-verifies a remembered mapper: `stored` is the owner recorded at its registration
/// (`None` for a registration older than owner records), `listener` who serves its socket
/// now, `admitted` whether a user may use the DMI socket at all, `alive` whether a pid still
/// runs.
pub(crate) fn verify(
    stored: Option<Peer>,
    listener: Option<Peer>,
    admitted: impl Fn(&Peer) -> bool,
    alive: impl Fn(i32) -> bool,
) -> Verified {
    match (stored, listener) {
        (Some(owner), Some(listener)) if listener.uid == owner.uid => {
            // The registering process may have been replaced by the one serving now (it could
            // not register while the node was down); reports are then taken from that one.
            let pid = match owner.pid {
                Some(pid) if alive(pid) => Some(pid),
                _ => listener.pid,
            };
            Verified::Keep(Peer { pid, ..owner })
        }
        (Some(owner), Some(listener)) => Verified::Forget(format!(
            "its socket is now served by uid {}, not by uid {} that registered it",
            listener.uid, owner.uid
        )),
        // Not running now: kept (it is reached when it comes back, each connection checked for
        // its uid), and its reports wait for it to register again if its process changed.
        (Some(owner), None) => Verified::Keep(owner),
        (None, Some(listener)) if admitted(&listener) => Verified::Keep(listener),
        (None, Some(listener)) => Verified::Forget(format!(
            "it was registered before the node recorded mapper owners, and its socket is served \
             by uid {}, which may not use the DMI socket",
            listener.uid
        )),
        (None, None) => Verified::Forget(
            "it was registered before the node recorded mapper owners and does not answer now; \
             it gets its devices again when it registers"
                .to_owned(),
        ),
    }
}

/// Whether process `pid` still runs (Linux: `/proc/<pid>` exists).
pub(crate) fn alive(pid: i32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn peer(uid: u32, pid: i32) -> Peer {
        Peer {
            uid,
            gid: uid,
            pid: Some(pid),
        }
    }

    #[test]
    fn reports_count_from_the_registering_user_and_process() {
        let owner = peer(1000, 10);
        assert!(may_report(&owner, &peer(1000, 10), true));
        assert!(
            !may_report(&owner, &peer(1000, 11), true),
            "another process"
        );
        assert!(may_report(&owner, &peer(1000, 11), false), "uid only");
        assert!(!may_report(&owner, &peer(1001, 10), false), "another user");
        assert!(!may_report(&owner, &peer(0, 10), false), "not even root");
    }

    #[test]
    fn a_live_holder_keeps_its_protocol() {
        let holder = peer(1000, 10);
        // Its socket answers, served by it: nobody else takes the protocol, root included.
        for registrant in [peer(1000, 11), peer(0, 12), peer(1001, 13)] {
            assert_eq!(
                takeover(&holder, Some(holder), &registrant, registrant.uid == 0),
                Takeover::Live
            );
        }
        // The holder registering again is itself.
        assert_eq!(
            takeover(&holder, Some(holder), &peer(1000, 10), false),
            Takeover::Allowed
        );
    }

    #[test]
    fn a_gone_holder_is_replaced_by_its_user_or_a_trusted_one() {
        let holder = peer(1000, 10);
        // Nothing answers on its socket.
        assert_eq!(
            takeover(&holder, None, &peer(1000, 11), false),
            Takeover::Allowed
        );
        assert_eq!(
            takeover(&holder, None, &peer(0, 11), true),
            Takeover::Allowed
        );
        assert_eq!(
            takeover(&holder, None, &peer(1001, 11), false),
            Takeover::OtherUser
        );
        // A restarted mapper already serving the old path itself.
        assert_eq!(
            takeover(&holder, Some(peer(1000, 11)), &peer(1000, 11), false),
            Takeover::Allowed
        );
        // Another user serving the old path does not make the holder live, nor theirs.
        assert_eq!(
            takeover(&holder, Some(peer(1001, 11)), &peer(1001, 11), false),
            Takeover::OtherUser
        );
    }

    #[test]
    fn remembered_mappers_are_kept_only_when_their_socket_is_their_users() {
        let owner = peer(1000, 10);
        let yes = |_: &Peer| true;
        let no = |_: &Peer| false;
        let running = |_: i32| true;
        let gone = |_: i32| false;
        assert_eq!(
            verify(Some(owner), Some(peer(1000, 10)), no, running),
            Verified::Keep(owner)
        );
        assert_eq!(
            verify(Some(owner), Some(peer(1000, 20)), no, gone),
            Verified::Keep(peer(1000, 20)),
            "the process serving now, when the registering one is gone"
        );
        assert!(matches!(
            verify(Some(owner), Some(peer(1001, 20)), yes, running),
            Verified::Forget(_)
        ));
        assert_eq!(verify(Some(owner), None, no, gone), Verified::Keep(owner));
        assert_eq!(
            verify(None, Some(peer(1000, 20)), yes, running),
            Verified::Keep(peer(1000, 20))
        );
        assert!(matches!(
            verify(None, Some(peer(1001, 20)), no, running),
            Verified::Forget(_)
        ));
        assert!(matches!(
            verify(None, None, yes, running),
            Verified::Forget(_)
        ));
    }

    #[test]
    fn this_process_is_alive() {
        assert!(alive(std::process::id() as i32));
    }
}
