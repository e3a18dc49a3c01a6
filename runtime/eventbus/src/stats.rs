//! The eventbus's counters, written on `/metrics` scrapes.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use wedge_core::metrics::{MetricsSource, PromWriter};

/// Why a message was dropped; one counter each.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DropReason {
    /// An MQTT payload above the configured cap.
    Oversized,
    /// The destination module is not on the bus.
    NoDestination,
    /// A bus message that cannot be published (null content, unknown operation, bad topic...).
    Unpublishable,
    /// A broker connection's queue was full, or the connection is closed.
    QueueFull,
}

const DROPS: [(DropReason, &str); 4] = [
    (DropReason::Oversized, "oversized"),
    (DropReason::NoDestination, "no_destination"),
    (DropReason::Unpublishable, "unpublishable"),
    (DropReason::QueueFull, "queue_full"),
];

/// Counters shared by the module's tasks and the embedded broker.
#[derive(Debug, Default)]
pub struct Stats {
    /// MQTT messages received from the brokers.
    pub(crate) mqtt_received: AtomicU64,
    /// Messages sent to `twin`.
    pub(crate) to_twin: AtomicU64,
    /// Messages sent to the cloud module.
    pub(crate) to_cloud: AtomicU64,
    /// Messages published into the embedded broker.
    pub(crate) published_internal: AtomicU64,
    /// Messages handed to the external broker's connection.
    pub(crate) published_external: AtomicU64,
    drops: [AtomicU64; 4],
    /// Whether the external subscribing connection is up.
    pub(crate) external_connected: AtomicBool,
    /// Whether the embedded broker is listening.
    pub(crate) internal_listening: AtomicBool,
    /// Clients connected to the embedded broker.
    pub(crate) broker_clients: AtomicU64,
    /// Deliveries the embedded broker dropped because a client's queue was full.
    pub(crate) broker_dropped: AtomicU64,
    /// PUBLISHes and SUBSCRIBE filters the access policy refused.
    pub(crate) access_denied: AtomicU64,
    /// The embedded broker's limits at work.
    pub(crate) broker: crate::broker::BrokerStats,
}

impl Stats {
    /// Counts one dropped message.
    pub(crate) fn count_drop(&self, why: DropReason) {
        let i = DROPS.iter().position(|(d, _)| *d == why).unwrap_or(0);
        self.drops[i].fetch_add(1, Ordering::Relaxed);
    }

    /// How many messages were dropped for `why`.
    pub fn dropped(&self, why: DropReason) -> u64 {
        let i = DROPS.iter().position(|(d, _)| *d == why).unwrap_or(0);
        self.drops[i].load(Ordering::Relaxed)
    }

    /// The embedded broker's own counters.
    pub fn broker(&self) -> &crate::broker::BrokerStats {
        &self.broker
    }

    /// Whether the external broker is connected now.
    pub fn external_connected(&self) -> bool {
        self.external_connected.load(Ordering::Relaxed)
    }
}

fn get(a: &AtomicU64) -> f64 {
    a.load(Ordering::Relaxed) as f64
}

impl MetricsSource for Stats {
    /// Writes message, drop and connection metrics.
    fn write_metrics(&self, w: &mut PromWriter) {
        w.family(
            "wedge_eventbus_mqtt_received_total",
            "MQTT messages received from the brokers.",
            "counter",
        );
        w.sample(
            "wedge_eventbus_mqtt_received_total",
            &[],
            get(&self.mqtt_received),
        );
        w.family(
            "wedge_eventbus_forwarded_total",
            "MQTT messages forwarded onto the bus, by destination module.",
            "counter",
        );
        w.sample(
            "wedge_eventbus_forwarded_total",
            &[("module", "twin")],
            get(&self.to_twin),
        );
        w.sample(
            "wedge_eventbus_forwarded_total",
            &[("module", "cloud")],
            get(&self.to_cloud),
        );
        w.family(
            "wedge_eventbus_published_total",
            "Bus messages published to MQTT, by broker.",
            "counter",
        );
        w.sample(
            "wedge_eventbus_published_total",
            &[("broker", "internal")],
            get(&self.published_internal),
        );
        w.sample(
            "wedge_eventbus_published_total",
            &[("broker", "external")],
            get(&self.published_external),
        );
        w.family(
            "wedge_eventbus_dropped_total",
            "Messages dropped, by reason.",
            "counter",
        );
        for (i, (_, reason)) in DROPS.iter().enumerate() {
            w.sample(
                "wedge_eventbus_dropped_total",
                &[("reason", reason)],
                get(&self.drops[i]),
            );
        }
        w.family(
            "wedge_eventbus_external_connected",
            "1 while the external MQTT broker is connected.",
            "gauge",
        );
        w.sample(
            "wedge_eventbus_external_connected",
            &[],
            f64::from(u8::from(self.external_connected.load(Ordering::Relaxed))),
        );
        w.family(
            "wedge_eventbus_broker_listening",
            "1 while the embedded MQTT broker is listening.",
            "gauge",
        );
        w.sample(
            "wedge_eventbus_broker_listening",
            &[],
            f64::from(u8::from(self.internal_listening.load(Ordering::Relaxed))),
        );
        w.family(
            "wedge_eventbus_broker_clients",
            "Clients connected to the embedded MQTT broker.",
            "gauge",
        );
        w.sample(
            "wedge_eventbus_broker_clients",
            &[],
            get(&self.broker_clients),
        );
        w.family(
            "wedge_eventbus_broker_dropped_total",
            "Deliveries the embedded broker dropped because a client's queue was full.",
            "counter",
        );
        w.sample(
            "wedge_eventbus_broker_dropped_total",
            &[],
            get(&self.broker_dropped),
        );
        w.family(
            "wedge_eventbus_broker_access_denied_total",
            "PUBLISHes and SUBSCRIBE filters the embedded broker's access policy refused.",
            "counter",
        );
        w.sample(
            "wedge_eventbus_broker_access_denied_total",
            &[],
            get(&self.access_denied),
        );
        self.broker.write_metrics(w);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_every_family() {
        let stats = Stats::default();
        stats.count_drop(DropReason::Oversized);
        stats.count_drop(DropReason::Oversized);
        stats.external_connected.store(true, Ordering::Relaxed);
        stats.broker_clients.store(3, Ordering::Relaxed);
        let mut w = PromWriter::new();
        stats.write_metrics(&mut w);
        let page = w.finish();
        assert!(
            page.contains("wedge_eventbus_dropped_total{reason=\"oversized\"} 2"),
            "{page}"
        );
        assert!(
            page.contains("wedge_eventbus_external_connected 1"),
            "{page}"
        );
        assert!(page.contains("wedge_eventbus_broker_clients 3"), "{page}");
        assert!(
            page.contains("wedge_eventbus_forwarded_total{module=\"twin\"} 0"),
            "{page}"
        );
        assert_eq!(stats.dropped(DropReason::Oversized), 2);
    }
}
