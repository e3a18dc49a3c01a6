//! What the embedded broker refused, shed or waited for, so every limit of `wedge.broker` that
//! bites shows on `/metrics` rather than only in a log line.

use std::sync::atomic::{AtomicU64, Ordering};

use wedge_core::metrics::PromWriter;

/// Why the broker closed a connection itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Closed {
    /// A packet over `maxPacketBytes` (or a publish that could never be delivered under it).
    PacketTooLarge,
    /// A partial packet not completed within `packetTimeoutMs`.
    PacketTimeout,
    /// No CONNECT within `connectTimeoutMs`.
    ConnectTimeout,
    /// Silent past the keep-alive grace or `idleTimeoutSeconds`.
    Idle,
    /// Accepted while `maxConnections` were connected.
    ConnectionLimit,
    /// A failed (or too slow) TLS handshake on the TLS listener.
    TlsHandshake,
    /// Read slower than its messages arrived: its queue passed its byte cap, or a write to it
    /// stalled past the deadline.
    SlowReader,
}

const CLOSED: [(Closed, &str); 7] = [
    (Closed::PacketTooLarge, "packet_too_large"),
    (Closed::PacketTimeout, "packet_timeout"),
    (Closed::ConnectTimeout, "connect_timeout"),
    (Closed::Idle, "idle"),
    (Closed::ConnectionLimit, "connection_limit"),
    (Closed::TlsHandshake, "tls_handshake"),
    (Closed::SlowReader, "slow_reader"),
];

/// Why the broker refused a CONNECT (the CONNACK's return code in brackets).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LoginRefused {
    /// Unknown user, wrong password, or no user name where one is required (bad user name or
    /// password).
    BadCredentials,
    /// Too many failed log-ins from the address or with the user name; no password was
    /// checked (server unavailable).
    Throttled,
    /// A client id the broker does not take: `%c` cannot stand for it, the module's own, or
    /// empty without a clean session (identifier rejected).
    ClientId,
    /// A user name `%u` cannot stand for (bad user name or password).
    UserName,
    /// A will outside the client's publish patterns (not authorized).
    Will,
}

const LOGINS_REFUSED: [(LoginRefused, &str); 5] = [
    (LoginRefused::BadCredentials, "bad_credentials"),
    (LoginRefused::Throttled, "throttled"),
    (LoginRefused::ClientId, "client_id"),
    (LoginRefused::UserName, "user_name"),
    (LoginRefused::Will, "will"),
];

/// The embedded broker's own counters.
#[derive(Debug, Default)]
pub struct BrokerStats {
    closed: [AtomicU64; 7],
    logins_refused: [AtomicU64; 5],
    /// `accept` failures (EMFILE and the like); the loop backs off and goes on.
    pub(crate) accept_errors: AtomicU64,
    /// QoS 1/2 publishes whose PUBACK/PUBREC waited for room in the eventbus's queue.
    pub(crate) backpressure_waits: AtomicU64,
    /// QoS 0 messages for the eventbus dropped because its queue was full.
    pub(crate) shed_qos0: AtomicU64,
    /// Messages for a client away from its persistent session not kept: its queue was full.
    pub(crate) session_overflow: AtomicU64,
    /// Persistent sessions kept for clients that are away.
    pub(crate) sessions_parked: AtomicU64,
    /// Retained publishes delivered but not kept (topic or byte cap).
    pub(crate) retained_refused: AtomicU64,
    /// Payload bytes of the retained messages held.
    pub(crate) retained_bytes: AtomicU64,
    /// Filters refused with SUBACK failure because of `maxFiltersPerClient`.
    pub(crate) filters_refused: AtomicU64,
    /// Deliveries skipped because they would exceed the packet limit.
    pub(crate) undeliverable: AtomicU64,
    /// The connection limit in force.
    pub(crate) max_connections: AtomicU64,
}

impl BrokerStats {
    /// Counts one connection closed for `why`.
    pub(crate) fn closed(&self, why: Closed) {
        let i = CLOSED.iter().position(|(c, _)| *c == why).unwrap_or(0);
        self.closed[i].fetch_add(1, Ordering::Relaxed);
    }

    /// How many connections were closed for `why`.
    pub fn closed_count(&self, why_label: &str) -> u64 {
        CLOSED
            .iter()
            .position(|(_, l)| *l == why_label)
            .map_or(0, |i| self.closed[i].load(Ordering::Relaxed))
    }

    /// Counts one CONNECT refused for `why`.
    pub(crate) fn login_refused(&self, why: LoginRefused) {
        let i = LOGINS_REFUSED
            .iter()
            .position(|(r, _)| *r == why)
            .unwrap_or(0);
        self.logins_refused[i].fetch_add(1, Ordering::Relaxed);
    }

    /// How many CONNECTs were refused for the reason labelled `why_label` on `/metrics`
    /// (`bad_credentials`, `throttled`, `client_id`, `user_name`, `will`).
    pub fn logins_refused(&self, why_label: &str) -> u64 {
        LOGINS_REFUSED
            .iter()
            .position(|(_, l)| *l == why_label)
            .map_or(0, |i| self.logins_refused[i].load(Ordering::Relaxed))
    }

    /// Deliveries skipped because they exceed the receiving client's packet limit.
    pub fn undeliverable(&self) -> u64 {
        self.undeliverable.load(Ordering::Relaxed)
    }

    /// Writes the broker's families.
    pub(crate) fn write_metrics(&self, w: &mut PromWriter) {
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed) as f64;
        w.family(
            "wedge_eventbus_broker_closed_total",
            "Connections the embedded broker closed itself, by reason.",
            "counter",
        );
        for (i, (_, reason)) in CLOSED.iter().enumerate() {
            w.sample(
                "wedge_eventbus_broker_closed_total",
                &[("reason", reason)],
                get(&self.closed[i]),
            );
        }
        w.family(
            "wedge_eventbus_broker_logins_refused_total",
            "CONNECTs the embedded broker refused, by reason (throttled: refused without checking the password).",
            "counter",
        );
        for (i, (_, reason)) in LOGINS_REFUSED.iter().enumerate() {
            w.sample(
                "wedge_eventbus_broker_logins_refused_total",
                &[("reason", reason)],
                get(&self.logins_refused[i]),
            );
        }
        for (name, help, kind, value) in [
            (
                "wedge_eventbus_broker_accept_errors_total",
                "accept() failures (out of file descriptors...); the broker backs off and retries.",
                "counter",
                &self.accept_errors,
            ),
            (
                "wedge_eventbus_broker_backpressure_waits_total",
                "QoS 1/2 publishes acknowledged only after waiting for room in the eventbus queue.",
                "counter",
                &self.backpressure_waits,
            ),
            (
                "wedge_eventbus_broker_shed_qos0_total",
                "QoS 0 messages for the eventbus dropped because its queue was full.",
                "counter",
                &self.shed_qos0,
            ),
            (
                "wedge_eventbus_broker_session_overflow_total",
                "QoS 1 messages for a client away from its persistent session not kept: its queue was full.",
                "counter",
                &self.session_overflow,
            ),
            (
                "wedge_eventbus_broker_sessions_parked",
                "Persistent sessions (CleanSession=0) kept for clients that are away.",
                "gauge",
                &self.sessions_parked,
            ),
            (
                "wedge_eventbus_broker_retained_refused_total",
                "Retained publishes delivered but not kept (wedge.broker.maxRetainedTopics/Bytes).",
                "counter",
                &self.retained_refused,
            ),
            (
                "wedge_eventbus_broker_retained_bytes",
                "Payload bytes of the retained messages held.",
                "gauge",
                &self.retained_bytes,
            ),
            (
                "wedge_eventbus_broker_filters_refused_total",
                "Subscriptions refused (SUBACK 0x80) by wedge.broker.maxFiltersPerClient.",
                "counter",
                &self.filters_refused,
            ),
            (
                "wedge_eventbus_broker_undeliverable_total",
                "Deliveries skipped because they exceed wedge.broker.maxPacketBytes.",
                "counter",
                &self.undeliverable,
            ),
            (
                "wedge_eventbus_broker_max_connections",
                "The embedded broker's connection limit.",
                "gauge",
                &self.max_connections,
            ),
        ] {
            w.family(name, help, kind);
            w.sample(name, &[], get(value));
        }
    }
}
