//! What the operator may tune about the DMI socket: who may connect, who may report for a
//! device, and how much one client may make the node hold or do.
//!
//! Every default is safe on its own: the socket is the node user's (mode 0600), only that user
//! and root get past the peer check, a device's reports are taken only from the process that
//! registered its mapper, and the HTTP/2 and rate limits bound what an admitted client costs.

use std::path::PathBuf;

use crate::error::DmiError;

/// Settings of the module.
#[derive(Debug, Clone, PartialEq)]
pub struct DmiSettings {
    /// The socket DMI is served on (see [`crate::socket_path`]).
    pub socket: PathBuf,
    /// Group of the socket. `None` (the default): the socket is mode 0600, so only the node's
    /// user (and root) can connect. `Some(gid)`: mode 0660 and chowned to `gid`, for mappers
    /// run as another user of that group; the gid is then also admitted by the peer check
    /// (it compares the peer's *effective* gid, so run such mappers with that primary group).
    /// No KubeEdge config key sets it yet.
    pub socket_group: Option<u32>,
    /// Who may connect and report.
    pub access: Access,
    /// What one client may cost the node.
    pub limits: Limits,
}

impl DmiSettings {
    /// Settings with the safe defaults ([`Access::default`], [`Limits::default`]) for the
    /// socket at `socket`.
    pub fn new(socket: PathBuf) -> DmiSettings {
        DmiSettings {
            socket,
            socket_group: None,
            access: Access::default(),
            limits: Limits::default(),
        }
    }

    /// Refuses values that would disable a protection or that HTTP/2 cannot carry, so a bad
    /// setting fails the module's start with its name instead of weakening it unseen.
    pub fn check(&self) -> Result<(), DmiError> {
        let bad = |what: String| Err(DmiError::Settings(what));
        if let Some(uids) = &self.access.allowed_uids
            && uids.is_empty()
            && self.access.allowed_gids.is_empty()
            && self.socket_group.is_none()
        {
            return bad(
                "access.allowedUids is empty and no gid is allowed: no mapper could connect".into(),
            );
        }
        let l = &self.limits;
        if l.max_connections == 0 || l.max_connections > 65_536 {
            return bad(format!(
                "limits.maxConnections {} must be 1..=65536",
                l.max_connections
            ));
        }
        if l.max_requests_in_flight == 0 || l.max_requests_in_flight > 65_536 {
            return bad(format!(
                "limits.maxRequestsInFlight {} must be 1..=65536",
                l.max_requests_in_flight
            ));
        }
        if l.max_concurrent_streams == 0 || l.max_concurrent_streams > 1_024 {
            return bad(format!(
                "limits.maxConcurrentStreams {} must be 1..=1024",
                l.max_concurrent_streams
            ));
        }
        if !(1_024..=1 << 20).contains(&l.max_header_list_size) {
            return bad(format!(
                "limits.maxHeaderListSize {} must be 1 KiB..=1 MiB",
                l.max_header_list_size
            ));
        }
        // HTTP/2's initial windows are 65,535 bytes; h2 cannot shrink a connection window
        // below it, and more than 16 MiB is what the limits are here to prevent.
        for (name, value) in [
            ("limits.streamWindow", l.stream_window),
            ("limits.connectionWindow", l.connection_window),
        ] {
            if !(65_535..=16 << 20).contains(&value) {
                return bad(format!("{name} {value} must be 65535..=16 MiB"));
            }
        }
        if !(1_024..=16 << 20).contains(&l.max_message_size) {
            return bad(format!(
                "limits.maxMessageSize {} must be 1 KiB..=16 MiB",
                l.max_message_size
            ));
        }
        for (name, rate) in [
            ("limits.reports", l.reports),
            ("limits.registrations", l.registrations),
        ] {
            if !(rate.per_second.is_finite() && rate.per_second > 0.0) || rate.burst == 0 {
                return bad(format!(
                    "{name}: {} per second with burst {} must both be above 0",
                    rate.per_second, rate.burst
                ));
            }
        }
        Ok(())
    }
}

/// Who may connect, judged by the kernel's credentials of the peer (`SO_PEERCRED`), and whose
/// reports count for a device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Access {
    /// Users whose processes may connect. `None` (the default): the node's own user and root,
    /// the same users the 0600 socket admits, checked again so a socket made reachable by
    /// its directory or a later chmod still admits no one else.
    pub allowed_uids: Option<Vec<u32>>,
    /// Effective gids whose processes may connect too (default none); [`DmiSettings::
    /// socket_group`] is added to them.
    pub allowed_gids: Vec<u32>,
    /// Reports for a device are taken only from the *process* (pid) that registered the
    /// device's mapper, not only from its user (default: true). mapper-framework mappers
    /// register and report from one process; turn it off for a mapper that reports from
    /// helper processes of the same user.
    pub reports_from_registering_process: bool,
}

impl Default for Access {
    fn default() -> Access {
        Access {
            allowed_uids: None,
            allowed_gids: Vec::new(),
            reports_from_registering_process: true,
        }
    }
}

/// A token bucket's rate: `burst` tokens at most, refilled at `per_second`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rate {
    /// Tokens added per second (sustained rate).
    pub per_second: f64,
    /// Tokens the bucket holds when full (largest burst).
    pub burst: u32,
}

/// Bounds on what one client of the socket can make the node hold or do.
///
/// With the defaults the node holds at most about 0.4 MiB per connection (the `:authority`
/// shim's 64 KiB read and write buffers, a 64 KiB pipe to the gRPC server, the 128 KiB
/// connection window, a 64 KiB header block) and 256 KiB per request being decoded: with 64
/// connections and 32 requests in flight, some 32 MiB in all, whatever the clients announce
/// (before: one 16 MiB buffer per announced DATA frame, kept).
#[derive(Debug, Clone, PartialEq)]
pub struct Limits {
    /// Connections open at once (default 64). A connection past it waits up to a second for
    /// a slot, then is closed (mapper-framework dials once per report, so a burst of reports
    /// queues briefly instead of failing).
    pub max_connections: usize,
    /// Requests being decoded or answered at once, over all connections (default 32); more
    /// wait, their bytes held back by HTTP/2 flow control.
    pub max_requests_in_flight: usize,
    /// HTTP/2 streams one connection may have open (default 32).
    pub max_concurrent_streams: u32,
    /// Largest HTTP/2 header list (default 16 KiB, what grpc-go sends is a few hundred bytes).
    pub max_header_list_size: u32,
    /// HTTP/2 initial stream window: bytes a client may send on a stream before the node reads
    /// them (default 64 KiB).
    pub stream_window: u32,
    /// HTTP/2 initial connection window: bytes a client may send on a connection before the
    /// node reads them (default 128 KiB).
    pub connection_window: u32,
    /// Largest gRPC message decoded (default 256 KiB, devicetwin's largest twin update); a
    /// larger one is refused (`OUT_OF_RANGE`) from its length prefix, before it is read.
    pub max_message_size: usize,
    /// Reports (ReportDeviceStatus, ReportDeviceStates) per registered mapper (default 100/s,
    /// burst 200); past it `RESOURCE_EXHAUSTED`. edgecore v1.23.1 has one bucket for every
    /// mapper and registration: 1 per second, burst 100 (`rate.Every(1000ms)`), which a
    /// mapper with more than a hundred twins already exceeds; this one is per mapper, so one
    /// chatty mapper does not starve the others.
    pub reports: Rate,
    /// MapperRegister calls for the whole node (default 5/s, burst 20): each one writes the
    /// store and probes the mapper's socket.
    pub registrations: Rate,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_connections: 64,
            max_requests_in_flight: 32,
            max_concurrent_streams: 32,
            max_header_list_size: 16 * 1024,
            stream_window: 64 * 1024,
            connection_window: 128 * 1024,
            max_message_size: 256 * 1024,
            reports: Rate {
                per_second: 100.0,
                burst: 200,
            },
            registrations: Rate {
                per_second: 5.0,
                burst: 20,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_pass_and_disabling_values_are_refused() {
        let ok = DmiSettings::new("/tmp/dmi.sock".into());
        ok.check().expect("defaults are valid");
        let mut s = ok.clone();
        s.access.allowed_uids = Some(Vec::new());
        assert!(s.check().is_err(), "nobody admitted");
        s.access.allowed_gids = vec![1000];
        s.check().expect("a gid is admitted");
        let mut s = ok.clone();
        s.limits.max_message_size = 0;
        assert!(s.check().is_err());
        let mut s = ok.clone();
        s.limits.reports.per_second = f64::NAN;
        assert!(s.check().is_err());
        let mut s = ok;
        s.limits.connection_window = 1 << 30;
        assert!(s.check().is_err());
    }
}
