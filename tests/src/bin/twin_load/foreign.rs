//! `--foreign-filters N`: one more MQTT connection that subscribes N filters no load topic
//! matches, and holds them for the whole run — the "one client subscribes 200,000 filters"
//! case of issue 15. The round trip with and without them tells whether the broker's routing
//! cost grows with unrelated subscriptions.

use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use rumqttc::{AsyncClient, Event, MqttOptions, Packet, QoS, SubscribeFilter, SubscribeReasonCode};
use tokio::task::JoinHandle;

/// Filters per SUBSCRIBE packet (well under the broker's packet limit).
const BATCH: usize = 1000;

/// The connection holding the foreign filters; unsubscribes nothing, disconnects on drop.
pub struct Foreign {
    _client: AsyncClient,
    driver: JoinHandle<()>,
    /// How long subscribing them all took.
    pub took: Duration,
}

impl Drop for Foreign {
    fn drop(&mut self) {
        self.driver.abort();
    }
}

/// The `i`-th foreign filter: shaped like the load topics (same `$hw/events/device/` prefix,
/// half with a wildcard), on devices that do not exist.
fn filter(i: usize) -> String {
    if i % 2 == 0 {
        format!("$hw/events/device/default/foreign-{i}/twin/update/result")
    } else {
        format!("$hw/events/device/default/foreign-{i}/twin/+/result")
    }
}

/// Connects to 127.0.0.1:`port` and subscribes `count` foreign filters, waiting for every
/// SUBACK; fails when any is refused.
pub async fn subscribe(port: u16, count: usize) -> Result<Foreign> {
    let started = Instant::now();
    let mut options = MqttOptions::new("twin-load-foreign", "127.0.0.1", port);
    options.set_keep_alive(Duration::from_secs(60));
    options.set_max_packet_size(1024 * 1024, 1024 * 1024);
    let batches = count.div_ceil(BATCH);
    let (client, mut eventloop) = AsyncClient::new(options, batches + 10);
    for b in 0..batches {
        let filters: Vec<SubscribeFilter> = (b * BATCH..((b + 1) * BATCH).min(count))
            .map(|i| SubscribeFilter::new(filter(i), QoS::AtMostOnce))
            .collect();
        client
            .subscribe_many(filters)
            .await
            .context("queue a foreign SUBSCRIBE")?;
    }
    let mut acked = 0;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(300);
    while acked < batches {
        match tokio::time::timeout_at(deadline, eventloop.poll()).await {
            Ok(Ok(Event::Incoming(Packet::SubAck(ack)))) => {
                if ack
                    .return_codes
                    .iter()
                    .any(|c| matches!(c, SubscribeReasonCode::Failure))
                {
                    bail!("the broker refused foreign filters (wedge.broker.maxFiltersPerClient?)");
                }
                acked += 1;
            }
            Ok(Ok(_)) => {}
            Ok(Err(e)) => bail!("foreign-filter connection failed: {e}"),
            Err(_) => bail!("foreign SUBACKs: {acked} of {batches} within 300 s"),
        }
    }
    let took = started.elapsed();
    // Keep the connection (and its subscriptions) alive for the run.
    let driver = tokio::spawn(async move { while eventloop.poll().await.is_ok() {} });
    Ok(Foreign {
        _client: client,
        driver,
        took,
    })
}
