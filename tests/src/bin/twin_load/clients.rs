//! The MQTT side of a run: publishers playing KubeEdge mappers that report twin values, and
//! subscribers collecting `…/twin/update/result`.

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result, bail};
use rumqttc::{AsyncClient, Event, EventLoop, MqttOptions, Packet, QoS, SubscribeFilter};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, oneshot};
use tokio::task::JoinSet;

use crate::setup::{NAMESPACE, PROPERTY, device_name};
use crate::tracker::{Sample, Tally, Tracker};

/// How updates are paced.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Pace {
    /// Open loop: `rate` updates per second in total, sent on schedule whatever the results do.
    Open {
        /// Updates per second, all publishers together.
        rate: f64,
    },
    /// Closed loop: as fast as results come back, with at most `inflight` unanswered updates
    /// per publisher.
    Closed {
        /// Unanswered updates allowed per publisher.
        inflight: usize,
    },
}

/// Everything the clients need to know.
#[derive(Debug, Clone)]
pub struct Plan {
    /// Broker port on 127.0.0.1.
    pub port: u16,
    /// User name and password every client logs in with (`--auth`).
    pub login: Option<(String, String)>,
    /// Devices `default/load-0` … `default/load-<devices-1>`.
    pub devices: usize,
    /// Publishing connections.
    pub publishers: usize,
    /// Result subscriber connections.
    pub subscribers: usize,
    /// One connection does it all (`--one-connection`): it publishes the updates and is
    /// subscribed to every result, as a KubeEdge mapper is.
    pub one_connection: bool,
    /// QoS of the updates.
    pub pub_qos: QoS,
    /// QoS of the result subscriptions.
    pub sub_qos: QoS,
    /// Pacing.
    pub pace: Pace,
    /// Warm-up before the measured window.
    pub warmup: Duration,
    /// Measured window.
    pub duration: Duration,
    /// How long to wait for outstanding results after the last update; also the age at which a
    /// closed-loop update is given up.
    pub drain: Duration,
}

/// How the pre-flight update went.
#[derive(Debug, Clone)]
pub struct Preflight {
    /// Updates sent until a good result came (or the time ran out).
    pub attempts: u32,
    /// The last result received, if any.
    pub result: Option<Sample>,
    /// Whether that result was a success (no `code`).
    pub ok: bool,
}

/// What a run produced.
#[derive(Debug)]
pub struct Outcome {
    /// The counts.
    pub tally: Tally,
    /// The pre-flight.
    pub preflight: Preflight,
    /// Time from the end of the measured window until the publishers had sent everything
    /// scheduled (open loop falling behind shows here).
    pub publish_overrun: Duration,
    /// Time spent waiting for outstanding results after publishing ended.
    pub drained: Duration,
}

/// How long clients may take to connect and subscribe.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long the pre-flight keeps trying for a successful result.
const PREFLIGHT_TIMEOUT: Duration = Duration::from_secs(20);
/// Largest packet either way: a subscriber of many devices sends one big SUBSCRIBE.
const MAX_PACKET: usize = 4 * 1024 * 1024;
/// Result filter for both id generations, so that results on unexpected topics (the empty-id
/// topic of validation errors, one-segment ids) are seen and reported as unmatched.
const RESULT_FILTERS: [&str; 2] = [
    "$hw/events/device/+/+/twin/update/result",
    "$hw/events/device/+/twin/update/result",
];

/// A twin update as a mapper sends it: the value as a decimal string, type `int`.
pub fn update_payload(event_id: &str, timestamp_ms: u128, value: u64) -> String {
    format!(
        "{{\"event_id\":\"{event_id}\",\"timestamp\":{timestamp_ms},\"twin\":{{\"{PROPERTY}\":\
         {{\"actual\":{{\"value\":\"{value}\"}},\"metadata\":{{\"type\":\"int\"}}}}}}}}"
    )
}

/// The update topic of device `i`.
pub fn update_topic(i: usize) -> String {
    format!(
        "$hw/events/device/{NAMESPACE}/{}/twin/update",
        device_name(i)
    )
}

/// The filters subscriber `index` of `count` subscribes to: everything when alone; else the
/// result topics of its share of the devices, with the catch-all for odd topics on the first.
pub fn subscriber_filters(index: usize, count: usize, devices: usize) -> Vec<String> {
    if count <= 1 {
        return RESULT_FILTERS.map(str::to_owned).to_vec();
    }
    let mut filters: Vec<String> = (index..devices)
        .step_by(count)
        .map(|i| format!("{}/result", update_topic(i)))
        .collect();
    if index == 0 {
        filters.push(RESULT_FILTERS[1].to_owned());
    }
    filters
}

fn now_ms() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or(0)
}

fn options(client_id: String, plan: &Plan, inflight: usize) -> MqttOptions {
    let mut o = MqttOptions::new(client_id, "127.0.0.1", plan.port);
    if let Some((user, password)) = &plan.login {
        o.set_credentials(user, password);
    }
    o.set_keep_alive(Duration::from_secs(30))
        .set_clean_session(true)
        .set_max_packet_size(MAX_PACKET, MAX_PACKET)
        .set_inflight(u16::try_from(inflight).unwrap_or(u16::MAX));
    o
}

/// Polls a publisher's event loop forever; reports the first CONNACK on `ready`.
async fn drive_publisher(
    mut events: EventLoop,
    name: String,
    ready: oneshot::Sender<()>,
    tracker: Arc<Tracker>,
) {
    let mut ready = Some(ready);
    loop {
        match events.poll().await {
            Ok(Event::Incoming(Packet::ConnAck(_))) => {
                if let Some(ready) = ready.take() {
                    let _ = ready.send(());
                }
            }
            Ok(_) => {}
            Err(e) => {
                tracker.connection_error(&name, &e);
                // rumqttc reconnects on the next poll; do not spin on a dead broker.
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

/// Polls a subscriber's event loop forever: (re)subscribes on every CONNACK (clean sessions
/// lose subscriptions), reports the first SUBACK on `ready`, hands results to the tracker.
async fn drive_subscriber(
    mut events: EventLoop,
    client: AsyncClient,
    filters: Vec<SubscribeFilter>,
    name: String,
    ready: oneshot::Sender<()>,
    tracker: Arc<Tracker>,
) {
    let mut ready = Some(ready);
    loop {
        match events.poll().await {
            Ok(Event::Incoming(Packet::Publish(publish))) => {
                tracker.on_result(&publish.topic, &publish.payload, Instant::now());
            }
            Ok(Event::Incoming(Packet::ConnAck(_))) => {
                // try_: this task is the one that drains the request channel, so it must not
                // wait for room in it.
                if let Err(e) = client.try_subscribe_many(filters.clone()) {
                    tracker.connection_error(&name, &e);
                }
            }
            Ok(Event::Incoming(Packet::SubAck(_))) => {
                if let Some(ready) = ready.take() {
                    let _ = ready.send(());
                }
            }
            Ok(_) => {}
            Err(e) => {
                tracker.connection_error(&name, &e);
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

/// Waits for every `ready` signal; the error names what did not get ready and the first
/// connection error seen.
async fn all_ready(
    what: &str,
    readies: Vec<oneshot::Receiver<()>>,
    tracker: &Tracker,
) -> Result<()> {
    let wait = async {
        for ready in readies {
            let _ = ready.await;
        }
    };
    if tokio::time::timeout(CONNECT_TIMEOUT, wait).await.is_err() {
        let tally = tracker.finish();
        bail!(
            "{what} not connected after {CONNECT_TIMEOUT:?} (first connection error: {})",
            tally
                .first_connection_error
                .unwrap_or_else(|| "none".to_owned())
        );
    }
    Ok(())
}

/// Publishes update `seq` of publisher `publisher` (global number `global`), registered as
/// scheduled at `scheduled`.
#[allow(clippy::too_many_arguments)] // one call site per pacing mode; a struct would only rename them
async fn send(
    client: &AsyncClient,
    tracker: &Tracker,
    plan: &Plan,
    publisher: usize,
    seq: u64,
    global: u64,
    scheduled: Instant,
    slot: Option<OwnedSemaphorePermit>,
) {
    let id = format!("tl-{publisher}-{seq}");
    let device = (global % plan.devices as u64) as usize;
    let payload = update_payload(&id, now_ms(), global);
    tracker.register(id.clone(), scheduled, slot);
    match client
        .publish(update_topic(device), plan.pub_qos, false, payload)
        .await
    {
        Ok(()) => tracker.sent(scheduled),
        Err(_) => tracker.publish_failed(&id),
    }
}

/// Open loop: update `k` of publisher `p` is due at `start + (k·P + p) / rate`, so the
/// publishers interleave evenly. Late updates are sent at once (never dropped) until `cutoff`;
/// after it the rest of the schedule is only counted.
///
/// Runs on its own OS thread: tokio's timer fires on whole milliseconds, and since latency is
/// measured from the scheduled time (no coordinated omission), up to 1 ms of timer lateness
/// would be charged to the node. `std::thread::sleep` wakes within tens of microseconds.
fn publish_open(
    client: AsyncClient,
    tracker: Arc<Tracker>,
    plan: Arc<Plan>,
    publisher: usize,
    rate: f64,
    (start, end, cutoff): (Instant, Instant, Instant),
) {
    let count = plan.publishers as u64;
    for seq in 0u64.. {
        let global = seq * count + publisher as u64;
        let due = start + Duration::from_secs_f64(global as f64 / rate);
        if due >= end {
            break;
        }
        let now = Instant::now();
        if now >= cutoff {
            tracker.skipped(due);
            continue;
        }
        if due > now {
            std::thread::sleep(due - now);
        }
        let id = format!("tl-{publisher}-{seq}");
        let device = (global % plan.devices as u64) as usize;
        let payload = update_payload(&id, now_ms(), global);
        tracker.register(id.clone(), due, None);
        match client.try_publish(update_topic(device), plan.pub_qos, false, payload) {
            Ok(()) => tracker.sent(due),
            Err(_) => tracker.publish_failed(&id),
        }
    }
}

/// Closed loop: send whenever one of the `inflight` slots is free, until `end`.
async fn publish_closed(
    client: AsyncClient,
    tracker: Arc<Tracker>,
    plan: Arc<Plan>,
    publisher: usize,
    slots: Arc<Semaphore>,
    end: Instant,
) {
    let count = plan.publishers as u64;
    for seq in 0u64.. {
        let slot = tokio::select! {
            slot = slots.clone().acquire_owned() => slot,
            () = tokio::time::sleep_until(end.into()) => break,
        };
        let Ok(slot) = slot else { break };
        let now = Instant::now();
        if now >= end {
            break;
        }
        let global = seq * count + publisher as u64;
        send(
            &client,
            &tracker,
            &plan,
            publisher,
            seq,
            global,
            now,
            Some(slot),
        )
        .await;
    }
}

/// Sends one update to device 0 (once a second) until a success result comes back, so the
/// run starts only when the daemon answers; returns what it saw.
async fn preflight(client: &AsyncClient, tracker: &Tracker, plan: &Plan) -> Result<Preflight> {
    let deadline = Instant::now() + PREFLIGHT_TIMEOUT;
    let mut attempts = 0;
    while Instant::now() < deadline {
        attempts += 1;
        let id = format!("tl-preflight-{attempts}");
        tracker.register(id.clone(), Instant::now(), None);
        client
            .publish(
                update_topic(0),
                plan.pub_qos,
                false,
                update_payload(&id, now_ms(), 0),
            )
            .await
            .context("pre-flight publish failed")?;
        let wait_until = (Instant::now() + Duration::from_secs(1)).min(deadline);
        while tracker.is_outstanding(&id) && Instant::now() < wait_until {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        if !tracker.is_outstanding(&id)
            && let Some(result) = tracker.last_unmeasured()
        {
            let ok = serde_json::from_str::<serde_json::Value>(&result.payload)
                .is_ok_and(|v| v.get("code").is_none());
            if ok {
                return Ok(Preflight {
                    attempts,
                    result: Some(result),
                    ok,
                });
            }
        }
        tokio::time::sleep_until(wait_until.into()).await;
    }
    Ok(Preflight {
        attempts,
        result: tracker.last_unmeasured(),
        ok: false,
    })
}

/// Connects everything, runs the pre-flight, the warm-up and the measured window, drains, and
/// returns the counts. Fails only when the run cannot be done (clients cannot connect, or the
/// pre-flight got no result at all).
pub async fn run(plan: Plan) -> Result<Outcome> {
    let plan = Arc::new(plan);
    let tracker = Arc::new(Tracker::default());
    let mut drivers = JoinSet::new();
    let tag = std::process::id();

    // Subscribers first, so that no result is published before someone listens.
    let mut readies = Vec::new();
    let subscribers = if plan.one_connection {
        0
    } else {
        plan.subscribers
    };
    for index in 0..subscribers {
        let name = format!("twin-load-sub-{tag}-{index}");
        let (client, events) = AsyncClient::new(options(name.clone(), &plan, 100), 1024);
        let filters = subscriber_filters(index, plan.subscribers, plan.devices)
            .into_iter()
            .map(|f| SubscribeFilter::new(f, plan.sub_qos))
            .collect();
        let (ready, readied) = oneshot::channel();
        readies.push(readied);
        drivers.spawn(drive_subscriber(
            events,
            client,
            filters,
            name,
            ready,
            tracker.clone(),
        ));
    }
    all_ready("result subscribers", readies, &tracker).await?;

    let inflight = match plan.pace {
        Pace::Closed { inflight } => inflight.max(100),
        Pace::Open { .. } => 1000,
    };
    let mut clients = Vec::new();
    let mut readies = Vec::new();
    if plan.one_connection {
        let name = format!("twin-load-{tag}");
        let (client, events) = AsyncClient::new(options(name.clone(), &plan, inflight), 10_000);
        let filters = subscriber_filters(0, 1, plan.devices)
            .into_iter()
            .map(|f| SubscribeFilter::new(f, plan.sub_qos))
            .collect();
        let (ready, readied) = oneshot::channel();
        drivers.spawn(drive_subscriber(
            events,
            client.clone(),
            filters,
            name,
            ready,
            tracker.clone(),
        ));
        all_ready("the connection", vec![readied], &tracker).await?;
        clients.push(client);
    }
    let publishers = if plan.one_connection {
        0
    } else {
        plan.publishers
    };
    for index in 0..publishers {
        let name = format!("twin-load-pub-{tag}-{index}");
        let (client, events) = AsyncClient::new(options(name.clone(), &plan, inflight), 10_000);
        let (ready, readied) = oneshot::channel();
        readies.push(readied);
        drivers.spawn(drive_publisher(events, name, ready, tracker.clone()));
        clients.push(client);
    }
    all_ready("publishers", readies, &tracker).await?;

    let first = clients.first().context("no publishers")?;
    let preflight = preflight(first, &tracker, &plan).await?;
    if preflight.result.is_none() {
        bail!(
            "the pre-flight update to {} got no result within {PREFLIGHT_TIMEOUT:?} \
             ({} attempts)",
            update_topic(0),
            preflight.attempts
        );
    }

    let start = Instant::now() + Duration::from_millis(10);
    let from = start + plan.warmup;
    let end = from + plan.duration;
    tracker.set_window(from, end);
    let mut publishers = JoinSet::new();
    let mut reaper = None;
    for (index, client) in clients.iter().enumerate() {
        let (client, tracker, plan2) = (client.clone(), tracker.clone(), plan.clone());
        match plan.pace {
            Pace::Open { rate } => {
                let times = (start, end, end + plan.drain);
                publishers.spawn_blocking(move || {
                    publish_open(client, tracker, plan2, index, rate, times)
                });
            }
            Pace::Closed { inflight } => {
                let slots = Arc::new(Semaphore::new(inflight));
                publishers.spawn(publish_closed(client, tracker, plan2, index, slots, end));
            }
        }
    }
    if let Pace::Closed { .. } = plan.pace {
        let (tracker, max_age) = (tracker.clone(), plan.drain);
        reaper = Some(tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_millis(50)).await;
                tracker.expire(max_age, Instant::now());
            }
        }));
    }
    while publishers.join_next().await.is_some() {}
    let published = Instant::now();

    let drain_until = published + plan.drain;
    while tracker.measured_outstanding() > 0 && Instant::now() < drain_until {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let drained = published.elapsed();
    if let Some(reaper) = reaper {
        reaper.abort();
    }
    drivers.abort_all();
    Ok(Outcome {
        tally: tracker.finish(),
        preflight,
        publish_overrun: published.saturating_duration_since(end),
        drained,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn update_is_a_kubeedge_mapper_twin_update() {
        assert_eq!(
            update_payload("tl-0-7", 1_700_000_000_100, 42),
            r#"{"event_id":"tl-0-7","timestamp":1700000000100,"twin":{"temperature":{"actual":{"value":"42"},"metadata":{"type":"int"}}}}"#
        );
        assert_eq!(
            update_topic(3),
            "$hw/events/device/default/load-3/twin/update"
        );
    }

    #[test]
    fn one_subscriber_takes_everything() {
        assert_eq!(
            subscriber_filters(0, 1, 100),
            [
                "$hw/events/device/+/+/twin/update/result",
                "$hw/events/device/+/twin/update/result"
            ]
        );
    }

    #[test]
    fn several_subscribers_split_the_devices() {
        assert_eq!(
            subscriber_filters(0, 2, 5),
            [
                "$hw/events/device/default/load-0/twin/update/result",
                "$hw/events/device/default/load-2/twin/update/result",
                "$hw/events/device/default/load-4/twin/update/result",
                "$hw/events/device/+/twin/update/result",
            ]
        );
        assert_eq!(
            subscriber_filters(1, 2, 5),
            [
                "$hw/events/device/default/load-1/twin/update/result",
                "$hw/events/device/default/load-3/twin/update/result",
            ]
        );
    }
}
