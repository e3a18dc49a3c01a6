//! Counters of the devicetwin module, exported on `/metrics`.

use std::sync::atomic::{AtomicU64, Ordering};

use wedge_core::metrics::PromWriter;

/// Request kinds counted separately.
pub(crate) const KINDS: [&str; 9] = [
    "twin_update",
    "twin_get",
    "state_update",
    "attributes",
    "membership",
    "cloud_sync",
    "definition",
    "confirm",
    "ignored",
];

/// The module's counters.
#[derive(Default)]
pub struct Stats {
    pub(crate) requests: [AtomicU64; KINDS.len()],
    /// Requests answered with an error result.
    pub(crate) errors: AtomicU64,
    /// Writes that failed (answered 500, cache reloaded).
    pub(crate) write_failures: AtomicU64,
    /// Messages sent to the cloud.
    pub(crate) to_cloud: AtomicU64,
    /// Cloud messages re-sent after an idle period.
    pub(crate) resent: AtomicU64,
    /// Cloud messages not sent because the cloud was not connected.
    pub(crate) cloud_dropped: AtomicU64,
    /// Requests from local clients refused whole because their cloud messages could not be
    /// stored (the outbox, or its share, was full).
    pub(crate) cloud_refused: AtomicU64,
    /// Twin updates refused because they would give a device more than its twin cap, and
    /// membership changes refused because they would give the node more than its device cap.
    pub(crate) over_limit: AtomicU64,
    /// MQTT messages handed to eventbus.
    pub(crate) published: AtomicU64,
}

impl Stats {
    pub(crate) fn count(&self, kind: &str) {
        let i = KINDS
            .iter()
            .position(|k| *k == kind)
            .unwrap_or(KINDS.len() - 1);
        self.requests[i].fetch_add(1, Ordering::Relaxed);
    }

    /// Requests of one kind handled so far.
    pub fn requests(&self, kind: &str) -> u64 {
        KINDS
            .iter()
            .position(|k| *k == kind)
            .map(|i| self.requests[i].load(Ordering::Relaxed))
            .unwrap_or(0)
    }

    pub(crate) fn write(&self, w: &mut PromWriter, devices: usize, pending: usize) {
        w.family(
            "wedge_devicetwin_requests_total",
            "Requests handled by devicetwin, by kind.",
            "counter",
        );
        for (kind, n) in KINDS.iter().zip(&self.requests) {
            w.sample(
                "wedge_devicetwin_requests_total",
                &[("kind", kind)],
                n.load(Ordering::Relaxed) as f64,
            );
        }
        let counters = [
            (
                "wedge_devicetwin_error_results_total",
                "Requests answered with an error result.",
                &self.errors,
            ),
            (
                "wedge_devicetwin_write_failures_total",
                "Writes that failed; their requests were answered 500.",
                &self.write_failures,
            ),
            (
                "wedge_devicetwin_published_total",
                "MQTT messages handed to eventbus.",
                &self.published,
            ),
            (
                "wedge_devicetwin_cloud_sent_total",
                "Messages sent to the cloud.",
                &self.to_cloud,
            ),
            (
                "wedge_devicetwin_cloud_resent_total",
                "Cloud messages re-sent after an idle period.",
                &self.resent,
            ),
            (
                "wedge_devicetwin_cloud_dropped_total",
                "Cloud messages dropped while disconnected, or refused by a full outbox for a change the cloud asked for.",
                &self.cloud_dropped,
            ),
            (
                "wedge_devicetwin_cloud_refused_total",
                "Requests of local clients refused whole because their cloud messages could not be stored.",
                &self.cloud_refused,
            ),
            (
                "wedge_devicetwin_over_limit_total",
                "Requests refused because they would exceed the twins-per-device or devices-per-node cap.",
                &self.over_limit,
            ),
        ];
        for (name, help, value) in counters {
            w.family(name, help, "counter");
            w.sample(name, &[], value.load(Ordering::Relaxed) as f64);
        }
        w.family(
            "wedge_devicetwin_devices",
            "Devices known to this node.",
            "gauge",
        );
        w.sample("wedge_devicetwin_devices", &[], devices as f64);
        w.family(
            "wedge_devicetwin_cloud_pending",
            "Cloud messages waiting for confirmation.",
            "gauge",
        );
        w.sample("wedge_devicetwin_cloud_pending", &[], pending as f64);
    }
}
