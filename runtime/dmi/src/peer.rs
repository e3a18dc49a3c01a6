//! Who is at the other end of a DMI connection, as the kernel says (`SO_PEERCRED`), and
//! whether that user may talk to the node at all.
//!
//! The socket's mode keeps other users out; the peer check is the second lock behind it (a
//! socket under a umask-loose directory, a later chmod, a group given to it), and the
//! credentials it reads are what the node later holds a mapper to: the uid (and pid) that
//! registered a protocol is the only one whose reports count for its devices.

use std::collections::HashSet;
use std::io;
use std::pin::Pin;
use std::sync::Mutex;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, DuplexStream, ReadBuf};
use tokio::net::UnixStream;
use tonic::transport::server::Connected;

use crate::settings::Access;

/// The kernel's credentials of a peer, taken when it connected (or, for a listening socket,
/// when it called `listen`): they cannot be forged by what the peer sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Peer {
    /// Effective uid.
    pub uid: u32,
    /// Effective gid.
    pub gid: u32,
    /// Process id, where the kernel gives one (Linux does).
    pub pid: Option<i32>,
}

impl Peer {
    /// The credentials of `stream`'s other end.
    pub(crate) fn of(stream: &UnixStream) -> io::Result<Peer> {
        let cred = stream.peer_cred()?;
        Ok(Peer {
            uid: cred.uid(),
            gid: cred.gid(),
            pid: cred.pid(),
        })
    }

    /// This process's own credentials, read through a socket pair so no `libc` call is
    /// needed: the node's user is the default allowed one.
    pub(crate) fn own() -> io::Result<Peer> {
        let (ours, _theirs) = UnixStream::pair()?;
        Peer::of(&ours)
    }
}

impl std::fmt::Display for Peer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "uid {} gid {}", self.uid, self.gid)?;
        match self.pid {
            Some(pid) => write!(f, " pid {pid}"),
            None => Ok(()),
        }
    }
}

/// How many refused uids are remembered for "warn once per uid"; past it refusals are only
/// counted (and logged at debug), so a flood of uids cannot grow the set.
const WARNED_UIDS: usize = 256;

/// The peer check of one run: allowed uids and gids, and the uids already warned about.
#[derive(Debug)]
pub(crate) struct Gate {
    uids: Vec<u32>,
    gids: Vec<u32>,
    own_uid: u32,
    warned: Mutex<HashSet<u32>>,
}

impl Gate {
    /// The check for `access`, with `socket_group` admitted too and `own_uid` (the node's
    /// user) standing for "the node's own user and root" when no uids are configured.
    pub(crate) fn new(access: &Access, socket_group: Option<u32>, own_uid: u32) -> Gate {
        let uids = match &access.allowed_uids {
            Some(uids) => uids.clone(),
            None => vec![own_uid, 0],
        };
        let mut gids = access.allowed_gids.clone();
        gids.extend(socket_group);
        Gate {
            uids,
            gids,
            own_uid,
            warned: Mutex::new(HashSet::new()),
        }
    }

    /// Whether `peer` may connect: its uid is allowed, or its effective gid is.
    pub(crate) fn admits(&self, peer: &Peer) -> bool {
        self.uids.contains(&peer.uid) || self.gids.contains(&peer.gid)
    }

    /// Whether `uid` is trusted with every protocol (root or the node's own user): such a
    /// user can read the node's store anyway, so it may take over a protocol whose mapper
    /// is gone even if another user registered it.
    pub(crate) fn trusted(&self, uid: u32) -> bool {
        uid == 0 || uid == self.own_uid
    }

    /// Logs a refused peer: a warning the first time its uid is refused, debug after.
    pub(crate) fn log_refusal(&self, peer: &Peer) {
        let first = {
            let mut warned = self.warned.lock().unwrap_or_else(|e| e.into_inner());
            warned.len() < WARNED_UIDS && warned.insert(peer.uid)
        };
        if first {
            tracing::warn!(
                peer = %peer,
                "DMI connection refused: uid {} is not allowed on the DMI socket (allowed uids \
                 {:?}, gids {:?}); further refusals of this uid are only counted \
                 (wedge_dmi_refused_total{{reason=\"peer\"}})",
                peer.uid,
                self.uids,
                self.gids
            );
        } else {
            tracing::debug!(peer = %peer, "DMI connection refused: uid not allowed");
        }
    }
}

/// One admitted connection as tonic sees it: the pipe from the `:authority` shim, and the
/// peer's credentials, which tonic puts in every request's extensions.
pub(crate) struct PeerIo {
    pub io: DuplexStream,
    pub peer: Peer,
}

impl Connected for PeerIo {
    type ConnectInfo = Peer;

    fn connect_info(&self) -> Peer {
        self.peer
    }
}

impl AsyncRead for PeerIo {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl AsyncWrite for PeerIo {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn peer(uid: u32, gid: u32) -> Peer {
        Peer {
            uid,
            gid,
            pid: Some(1),
        }
    }

    #[test]
    fn the_default_admits_the_node_user_and_root_only() {
        let gate = Gate::new(&Access::default(), None, 1000);
        assert!(gate.admits(&peer(1000, 1000)));
        assert!(gate.admits(&peer(0, 0)));
        assert!(!gate.admits(&peer(1001, 1000)));
        assert!(gate.trusted(0) && gate.trusted(1000) && !gate.trusted(1001));
    }

    #[test]
    fn configured_uids_replace_the_default_and_the_socket_group_is_admitted() {
        let access = Access {
            allowed_uids: Some(vec![2000]),
            allowed_gids: vec![3000],
            ..Access::default()
        };
        let gate = Gate::new(&access, Some(4000), 1000);
        assert!(
            !gate.admits(&peer(1000, 1000)),
            "the node's user is not listed"
        );
        assert!(!gate.admits(&peer(0, 0)));
        assert!(gate.admits(&peer(2000, 2000)));
        assert!(gate.admits(&peer(5000, 3000)));
        assert!(gate.admits(&peer(5000, 4000)));
    }

    #[tokio::test]
    async fn own_credentials_are_this_process() {
        let own = Peer::own().expect("a socket pair");
        assert_eq!(own.pid, Some(std::process::id() as i32));
    }
}
