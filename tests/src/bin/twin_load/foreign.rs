//! `--foreign-filters N`: more MQTT connections that subscribe N filters no load topic matches,
//! and hold them for the whole run — the "200,000 filters" case of issue 15. The round trip
//! with and without them tells whether the broker's routing cost grows with unrelated
//! subscriptions. They are spread over connections of [`PER_CONNECTION`] filters, under the
//! embedded broker's default `maxFiltersPerClient`, so the same run works against any broker
//! and any Wedge build (routing used to scan every filter of every client alike).

use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use rumqttc::{AsyncClient, Event, MqttOptions, Packet, QoS, SubscribeFilter, SubscribeReasonCode};
use tokio::task::JoinHandle;

/// Filters per SUBSCRIBE packet (well under the broker's packet limit).
const BATCH: usize = 1000;

/// Filters per connection.
pub const PER_CONNECTION: usize = 4000;

/// The connections holding the foreign filters; unsubscribe nothing, close on drop.
pub struct Foreign {
    _clients: Vec<AsyncClient>,
    drivers: Vec<JoinHandle<()>>,
    /// How long subscribing them all took.
    pub took: Duration,
}

impl Drop for Foreign {
    fn drop(&mut self) {
        for driver in &self.drivers {
            driver.abort();
        }
    }
}

/// The `i`-th foreign filter: shaped like the load topics (same `$hw/events/device/` prefix,
/// half with a wildcard), on devices that do not exist.
fn filter(i: usize) -> String {
    if i.is_multiple_of(2) {
        format!("$hw/events/device/default/foreign-{i}/twin/update/result")
    } else {
        format!("$hw/events/device/default/foreign-{i}/twin/+/result")
    }
}

/// Connects to 127.0.0.1:`port` and subscribes `count` foreign filters, waiting for every
/// SUBACK, logged in as `login` when given; fails when any is refused.
pub async fn subscribe(
    port: u16,
    count: usize,
    login: Option<(String, String)>,
) -> Result<Foreign> {
    let started = Instant::now();
    let mut foreign = Foreign {
        _clients: Vec::new(),
        drivers: Vec::new(),
        took: Duration::ZERO,
    };
    for (c, first) in (0..count).step_by(PER_CONNECTION).enumerate() {
        let last = (first + PER_CONNECTION).min(count);
        let (client, driver) = connection(port, c, first..last, login.as_ref()).await?;
        foreign._clients.push(client);
        foreign.drivers.push(driver);
    }
    foreign.took = started.elapsed();
    Ok(foreign)
}

/// One connection subscribing filters `range`, then kept alive by its driver task.
async fn connection(
    port: u16,
    index: usize,
    range: std::ops::Range<usize>,
    login: Option<&(String, String)>,
) -> Result<(AsyncClient, JoinHandle<()>)> {
    let mut options = MqttOptions::new(format!("twin-load-foreign-{index}"), "127.0.0.1", port);
    if let Some((user, password)) = login {
        options.set_credentials(user, password);
    }
    options.set_keep_alive(Duration::from_secs(60));
    options.set_max_packet_size(1024 * 1024, 1024 * 1024);
    let ids: Vec<usize> = range.collect();
    let batches: Vec<&[usize]> = ids.chunks(BATCH).collect();
    let (client, mut eventloop) = AsyncClient::new(options, batches.len() + 10);
    for batch in &batches {
        let filters: Vec<SubscribeFilter> = batch
            .iter()
            .map(|i| SubscribeFilter::new(filter(*i), QoS::AtMostOnce))
            .collect();
        client
            .subscribe_many(filters)
            .await
            .context("queue a foreign SUBSCRIBE")?;
    }
    let mut acked = 0;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(300);
    while acked < batches.len() {
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
            Ok(Err(e)) => bail!("foreign-filter connection {index} failed: {e}"),
            Err(_) => bail!(
                "foreign connection {index}: {acked} of {} SUBACKs within 300 s",
                batches.len()
            ),
        }
    }
    let driver = tokio::spawn(async move { while eventloop.poll().await.is_ok() {} });
    Ok((client, driver))
}
