//! The tunnel's counters: plain atomics, written on `/metrics` by [`Stats`]'s
//! [`MetricsSource`] implementation, so that every failure and refusal is counted somewhere.

use std::sync::atomic::{AtomicU64, Ordering};

use wedge_core::metrics::{MetricsSource, PromWriter};

use crate::session::Kind;

/// Counters of one [`crate::EdgeStream`] (all sessions together). The per-kind arrays are
/// indexed in [`Stats::KINDS`] order.
#[derive(Debug, Default)]
pub struct Stats {
    /// Dials that did not end in a session (TCP, TLS, handshake, credentials).
    pub dial_failures: AtomicU64,
    /// Sessions opened.
    pub sessions: AtomicU64,
    /// 1 while a session is up.
    pub connected: AtomicU64,
    /// Sessions CloudCore refused with `CLOSE_CONNECT`.
    pub refused_by_cloud: AtomicU64,
    /// Sessions ended because CloudCore stopped answering pings.
    pub silent_cloud: AtomicU64,
    /// Local connections opened, per kind (logs, exec, metrics, attach).
    pub opened: [AtomicU64; 4],
    /// Local connections whose kubelet request failed (connect, request, response), per kind.
    pub local_failures: [AtomicU64; 4],
    /// Connect messages refused: a bad payload, an id already open, or over
    /// `max_connections`.
    pub refused_connects: AtomicU64,
    /// Local connections closed because they did not take the cloud's data within the write
    /// deadline.
    pub stalled: AtomicU64,
    /// Cloud messages of an unknown type, that could not be decoded, or too long.
    pub bad_messages: AtomicU64,
    /// Header lines of a connect request left out (not sendable).
    pub dropped_headers: AtomicU64,
    /// Pongs not sent because the writer's queue was full.
    pub dropped_pongs: AtomicU64,
    /// Messages received from / sent to the cloud.
    pub messages_in: AtomicU64,
    /// See `messages_in`.
    pub messages_out: AtomicU64,
    /// Payload bytes of `DATA` messages from / to the cloud.
    pub bytes_in: AtomicU64,
    /// See `bytes_in`.
    pub bytes_out: AtomicU64,
}

impl Stats {
    /// The kinds of connection, in the order of [`Stats::opened`] and
    /// [`Stats::local_failures`].
    pub const KINDS: [&'static str; 4] = ["logs", "exec", "metrics", "attach"];

    pub(crate) fn inc(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }

    /// A counter's value.
    pub fn get(counter: &AtomicU64) -> u64 {
        counter.load(Ordering::Relaxed)
    }
}

impl MetricsSource for Stats {
    fn write_metrics(&self, w: &mut PromWriter) {
        let g = |c: &AtomicU64| Stats::get(c) as f64;
        w.family(
            "wedge_edgestream_connected",
            "1 while the tunnel to CloudCore's cloudstream is up.",
            "gauge",
        );
        w.sample("wedge_edgestream_connected", &[], g(&self.connected));
        w.family(
            "wedge_edgestream_sessions_total",
            "Tunnel sessions, by how they ended or failed to start.",
            "counter",
        );
        for (outcome, c) in [
            ("opened", &self.sessions),
            ("dial_failed", &self.dial_failures),
            ("refused_by_cloud", &self.refused_by_cloud),
            ("cloud_silent", &self.silent_cloud),
        ] {
            w.sample(
                "wedge_edgestream_sessions_total",
                &[("outcome", outcome)],
                g(c),
            );
        }
        w.family(
            "wedge_edgestream_connections_total",
            "Kubelet connections opened for the cloud, and those whose local request failed.",
            "counter",
        );
        for kind in Kind::ALL {
            let i = kind.index();
            for (result, c) in [
                ("opened", &self.opened[i]),
                ("local_failed", &self.local_failures[i]),
            ] {
                w.sample(
                    "wedge_edgestream_connections_total",
                    &[("kind", kind.label()), ("result", result)],
                    g(c),
                );
            }
        }
        w.family(
            "wedge_edgestream_refused_total",
            "What the tunnel refused or dropped, by reason.",
            "counter",
        );
        for (reason, c) in [
            ("connect", &self.refused_connects),
            ("stalled_connection", &self.stalled),
            ("bad_message", &self.bad_messages),
            ("header", &self.dropped_headers),
            ("pong", &self.dropped_pongs),
        ] {
            w.sample(
                "wedge_edgestream_refused_total",
                &[("reason", reason)],
                g(c),
            );
        }
        w.family(
            "wedge_edgestream_messages_total",
            "Tunnel messages, by direction.",
            "counter",
        );
        w.sample(
            "wedge_edgestream_messages_total",
            &[("direction", "in")],
            g(&self.messages_in),
        );
        w.sample(
            "wedge_edgestream_messages_total",
            &[("direction", "out")],
            g(&self.messages_out),
        );
        w.family(
            "wedge_edgestream_data_bytes_total",
            "Payload bytes of DATA messages, by direction.",
            "counter",
        );
        w.sample(
            "wedge_edgestream_data_bytes_total",
            &[("direction", "in")],
            g(&self.bytes_in),
        );
        w.sample(
            "wedge_edgestream_data_bytes_total",
            &[("direction", "out")],
            g(&self.bytes_out),
        );
    }
}
