//! The servicebus's counters, written on `/metrics` scrapes.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use wedge_core::metrics::{MetricsSource, PromWriter};

/// Counters shared by the module's loop, its calls and its HTTP server.
#[derive(Debug, Default)]
pub struct Stats {
    /// Cloud calls to apps on the node that the app answered.
    pub(crate) app_calls_answered: AtomicU64,
    /// Cloud calls to apps that failed (bad request, app unreachable, answer too large).
    pub(crate) app_calls_failed: AtomicU64,
    /// Edge app requests to the cloud answered with the cloud's answer.
    pub(crate) requests_answered: AtomicU64,
    /// Edge app requests refused or failed (not allowed, malformed, offline, timed out, busy).
    pub(crate) requests_refused: AtomicU64,
    /// URLs rules allow now.
    pub(crate) allowed_urls: AtomicU64,
    /// Whether the HTTP server listens.
    pub(crate) listening: AtomicBool,
}

impl Stats {
    /// Counts one edge app request by the code it was answered with.
    pub(crate) fn count_request(&self, code: u16) {
        if code == 200 {
            self.requests_answered.fetch_add(1, Ordering::Relaxed);
        } else {
            self.requests_refused.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Whether the HTTP server listens now.
    pub fn listening(&self) -> bool {
        self.listening.load(Ordering::Relaxed)
    }
}

fn get(a: &AtomicU64) -> f64 {
    a.load(Ordering::Relaxed) as f64
}

impl MetricsSource for Stats {
    /// Writes call, request and listener metrics.
    fn write_metrics(&self, w: &mut PromWriter) {
        w.family(
            "wedge_servicebus_app_calls_total",
            "Cloud calls to apps on the node, by outcome.",
            "counter",
        );
        for (outcome, value) in [
            ("answered", &self.app_calls_answered),
            ("failed", &self.app_calls_failed),
        ] {
            w.sample(
                "wedge_servicebus_app_calls_total",
                &[("outcome", outcome)],
                get(value),
            );
        }
        w.family(
            "wedge_servicebus_requests_total",
            "Edge app requests to cloud endpoints, by outcome.",
            "counter",
        );
        for (outcome, value) in [
            ("answered", &self.requests_answered),
            ("refused", &self.requests_refused),
        ] {
            w.sample(
                "wedge_servicebus_requests_total",
                &[("outcome", outcome)],
                get(value),
            );
        }
        w.family(
            "wedge_servicebus_allowed_urls",
            "Cloud URLs that servicebus → rest rules allow edge apps to call.",
            "gauge",
        );
        w.sample(
            "wedge_servicebus_allowed_urls",
            &[],
            get(&self.allowed_urls),
        );
        w.family(
            "wedge_servicebus_listening",
            "1 while the servicebus HTTP server listens.",
            "gauge",
        );
        w.sample(
            "wedge_servicebus_listening",
            &[],
            f64::from(u8::from(self.listening.load(Ordering::Relaxed))),
        );
    }
}
