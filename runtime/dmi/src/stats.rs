//! The module's counters: what it did and, for every protection, what it refused. They are
//! exported on `/metrics` through [`crate::Dmi`]'s `MetricsSource` (the daemon already adds
//! the module to the node's metric sources) and read whole with [`crate::Dmi::counters`].

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use wedge_core::metrics::PromWriter;

/// Counters for `/metrics`.
#[derive(Debug, Default)]
pub(crate) struct Stats {
    /// Reports handed to devicetwin.
    pub reports: AtomicU64,
    /// Reports refused because devicetwin's mailbox was full (the mapper reports again).
    pub reports_refused: AtomicU64,
    /// Calls to mappers that succeeded.
    pub calls: AtomicU64,
    /// Calls to mappers that failed (each is tried again).
    pub calls_failed: AtomicU64,
    /// Connections admitted to the gRPC server.
    pub connections: AtomicU64,
    /// Connections closed before any gRPC: the peer's uid/gid is not allowed (or its
    /// credentials could not be read).
    pub refused_peer: AtomicU64,
    /// Connections closed because `maxConnections` were open for a second.
    pub refused_connections: AtomicU64,
    /// Reports refused: the client is not the mapper registered for the device's protocol.
    pub refused_not_owner: AtomicU64,
    /// Reports refused: over the mapper's report rate.
    pub refused_rate: AtomicU64,
    /// Registrations refused: over the node's registration rate.
    pub refused_register_rate: AtomicU64,
    /// Registrations refused: the protocol is held by a live mapper, or by another user's.
    pub refused_protocol_held: AtomicU64,
    /// Messages over `maxMessageSize`, and HTTP/2 frames or header blocks over the limits the
    /// node announces (the connection is closed).
    pub refused_oversized: AtomicU64,
    /// Mappers remembered from before a restart that failed re-verification and were
    /// forgotten.
    pub forgotten_unverified: AtomicU64,
}

/// A snapshot of the module's counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DmiCounters {
    /// Reports handed to devicetwin.
    pub reports: u64,
    /// Reports devicetwin did not take (its mailbox was full).
    pub reports_busy: u64,
    /// Connections admitted.
    pub connections: u64,
    /// Connections refused by the peer check.
    pub refused_peer: u64,
    /// Connections refused at the connection cap.
    pub refused_connections: u64,
    /// Reports refused: not from the device's registered mapper.
    pub refused_not_owner: u64,
    /// Reports refused: over the mapper's rate.
    pub refused_rate: u64,
    /// Registrations refused: over the registration rate.
    pub refused_register_rate: u64,
    /// Registrations refused: the protocol is held.
    pub refused_protocol_held: u64,
    /// Messages, frames or header blocks refused for their size.
    pub refused_oversized: u64,
    /// Remembered mappers forgotten at start because they failed re-verification.
    pub forgotten_unverified: u64,
}

fn load(a: &AtomicU64) -> u64 {
    a.load(Ordering::Relaxed)
}

impl Stats {
    /// Adds one to `counter` (a field of `self`).
    pub(crate) fn bump(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// The counters now.
    pub(crate) fn snapshot(&self) -> DmiCounters {
        DmiCounters {
            reports: load(&self.reports),
            reports_busy: load(&self.reports_refused),
            connections: load(&self.connections),
            refused_peer: load(&self.refused_peer),
            refused_connections: load(&self.refused_connections),
            refused_not_owner: load(&self.refused_not_owner),
            refused_rate: load(&self.refused_rate),
            refused_register_rate: load(&self.refused_register_rate),
            refused_protocol_held: load(&self.refused_protocol_held),
            refused_oversized: load(&self.refused_oversized),
            forgotten_unverified: load(&self.forgotten_unverified),
        }
    }

    /// Writes the counters in Prometheus form; `mappers` is the number registered now.
    pub(crate) fn write(&self, w: &mut PromWriter, mappers: usize) {
        let f = |a: &AtomicU64| load(a) as f64;
        w.family(
            "wedge_dmi_reports_total",
            "DMI reports of KubeEdge mappers, by what became of them (refused: devicetwin was busy; the mapper reports again).",
            "counter",
        );
        w.sample(
            "wedge_dmi_reports_total",
            &[("result", "accepted")],
            f(&self.reports),
        );
        w.sample(
            "wedge_dmi_reports_total",
            &[("result", "refused")],
            f(&self.reports_refused),
        );
        w.family(
            "wedge_dmi_mapper_calls_total",
            "Calls to DMI mappers (RegisterDevice, UpdateDevice, ...); failed ones are tried again.",
            "counter",
        );
        w.sample(
            "wedge_dmi_mapper_calls_total",
            &[("result", "ok")],
            f(&self.calls),
        );
        w.sample(
            "wedge_dmi_mapper_calls_total",
            &[("result", "failed")],
            f(&self.calls_failed),
        );
        w.family("wedge_dmi_mappers", "DMI mappers registered.", "gauge");
        w.sample("wedge_dmi_mappers", &[], mappers as f64);
        w.family(
            "wedge_dmi_connections_total",
            "Connections to the DMI socket admitted to the gRPC server.",
            "counter",
        );
        w.sample("wedge_dmi_connections_total", &[], f(&self.connections));
        w.family(
            "wedge_dmi_refused_total",
            "What the DMI socket refused, by reason: peer (uid/gid not allowed), connections (over maxConnections), not_owner (a report not from the device's registered mapper), rate (over the mapper's report rate), register_rate, protocol_held (a registration for a protocol another live or other-user mapper holds), oversized (message, frame or header block over the limits), unverified (a remembered mapper that failed re-verification at start).",
            "counter",
        );
        for (reason, counter) in [
            ("peer", &self.refused_peer),
            ("connections", &self.refused_connections),
            ("not_owner", &self.refused_not_owner),
            ("rate", &self.refused_rate),
            ("register_rate", &self.refused_register_rate),
            ("protocol_held", &self.refused_protocol_held),
            ("oversized", &self.refused_oversized),
            ("unverified", &self.forgotten_unverified),
        ] {
            w.sample("wedge_dmi_refused_total", &[("reason", reason)], f(counter));
        }
    }
}

/// How many distinct keys [`Throttle`] remembers before it starts over.
const THROTTLE_KEYS: usize = 1_024;

/// Logs a kind of refusal at most once per `every` per key (a mapper, a uid), so a client
/// that is refused thousands of times a second costs a counter, not a log line each.
#[derive(Debug)]
pub(crate) struct Throttle {
    every: Duration,
    last: Mutex<HashMap<String, (Instant, u64)>>,
}

impl Throttle {
    /// At most one line per key per `every`.
    pub(crate) fn new(every: Duration) -> Throttle {
        Throttle {
            every,
            last: Mutex::new(HashMap::new()),
        }
    }

    /// `Some(n)` when a line for `key` may be logged now, `n` being the lines suppressed since
    /// the last one; `None` when it must be skipped.
    pub(crate) fn allow(&self, key: &str) -> Option<u64> {
        self.allow_at(key, Instant::now())
    }

    fn allow_at(&self, key: &str, now: Instant) -> Option<u64> {
        let mut last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((at, suppressed)) = last.get_mut(key) {
            if now.saturating_duration_since(*at) < self.every {
                *suppressed += 1;
                return None;
            }
            let n = *suppressed;
            *at = now;
            *suppressed = 0;
            return Some(n);
        }
        if last.len() >= THROTTLE_KEYS {
            last.clear();
        }
        last.insert(key.to_owned(), (now, 0));
        Some(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_logs_once_per_period_and_tells_what_it_skipped() {
        let throttle = Throttle::new(Duration::from_secs(10));
        let start = Instant::now();
        assert_eq!(throttle.allow_at("m", start), Some(0));
        assert_eq!(throttle.allow_at("m", start + Duration::from_secs(1)), None);
        assert_eq!(throttle.allow_at("m", start + Duration::from_secs(2)), None);
        assert_eq!(throttle.allow_at("other", start), Some(0));
        assert_eq!(
            throttle.allow_at("m", start + Duration::from_secs(11)),
            Some(2)
        );
    }

    #[test]
    fn every_refusal_reason_is_exported() {
        let stats = Stats::default();
        Stats::bump(&stats.refused_rate);
        let mut w = PromWriter::new();
        stats.write(&mut w, 0);
        let text = w.finish();
        for reason in [
            "peer",
            "connections",
            "not_owner",
            "rate",
            "register_rate",
            "protocol_held",
            "oversized",
            "unverified",
        ] {
            assert!(
                text.contains(&format!("wedge_dmi_refused_total{{reason=\"{reason}\"}}")),
                "{reason} missing from {text}"
            );
        }
        assert_eq!(stats.snapshot().refused_rate, 1);
    }
}
