//! Pod events like kubelet's (`Pulled`, `Created`, `Started`, `Killing`, `BackOff`,
//! `Unhealthy`, `FailedMount`, ...), sent through the cloud when `modules.edged.reportEvent` is
//! on, so `kubectl describe pod` and `kubectl get events` explain what happened on the node.
//!
//! The wire is edgecore's: metamanager gets `insert <ns>/event/<name>` with the `v1.Event` as
//! content, and `patch` with `{"Event": …, "Data": "<strategic merge patch>"}` when the same
//! event repeats; it relays both to CloudCore, which creates or patches the Event.
//!
//! As kubelet's recorder does, a repeat of the same event (same object, container, type,
//! reason and message) within [`REPEAT_WINDOW`] bumps the `count` and `lastTimestamp` of the
//! first instead of making another, and a token bucket of `eventRecordQPS`/`eventBurst` limits
//! what reaches the cloud. Events are best-effort, as they are for kubelet: those over the
//! limit, or recorded while the recorder's queue is full, are dropped and counted
//! (`wedge_edged_events_dropped_total`), never waited for.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use wedge_core::message::{group, module, operation};
use wedge_core::{Bus, Content, Message};

use crate::pod::Pod;

/// A repeat within this window patches the first event (kubelet's correlator keeps its
/// aggregation records for 10 minutes).
pub const REPEAT_WINDOW: Duration = Duration::from_secs(600);
/// Distinct events remembered for aggregation (kubelet's LRU holds 4,096).
const REMEMBERED: usize = 4096;
/// Events waiting for the sender task.
const QUEUE: usize = 1024;
/// The longest message kept: the apiserver refuses an event that names its reporting
/// component and says more than 1,024 bytes.
const MAX_MESSAGE: usize = 1024;

/// Kubernetes' two event types.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EventType {
    /// What went as it should.
    Normal,
    /// What needs a look.
    Warning,
}

impl EventType {
    fn as_str(self) -> &'static str {
        match self {
            EventType::Normal => "Normal",
            EventType::Warning => "Warning",
        }
    }
}

/// How events are reported.
#[derive(Debug, Clone, PartialEq)]
pub struct EventSettings {
    /// `modules.edged.reportEvent`: send events to the cloud at all (KubeEdge's default:
    /// false).
    pub report: bool,
    /// `eventRecordQPS`: events per second sent at most, on average (50); 0 means no limit,
    /// as for kubelet.
    pub qps: f64,
    /// `eventBurst`: events sent at once at most (100).
    pub burst: u32,
    /// The node's name, the events' `source.host`.
    pub node: String,
}

impl Default for EventSettings {
    fn default() -> EventSettings {
        EventSettings {
            report: false,
            qps: 50.0,
            burst: 100,
            node: String::new(),
        }
    }
}

/// Counters of the recorder.
#[derive(Debug, Default)]
pub struct EventStats {
    /// Events sent as new.
    pub sent: AtomicU64,
    /// Repeats sent as a patch of the first.
    pub aggregated: AtomicU64,
    /// Events dropped: over the rate limit or the queue full.
    pub dropped: AtomicU64,
}

/// One event as recorded, before it is made an object.
#[derive(Debug, Clone)]
struct Record {
    namespace: String,
    pod: String,
    uid: String,
    container: Option<String>,
    kind: EventType,
    reason: String,
    message: String,
}

/// Where pod workers and the loop record events; cheap to clone. A recorder whose node does
/// not report events records nothing.
#[derive(Debug, Clone)]
pub struct Recorder {
    queue: Option<mpsc::Sender<Record>>,
    stats: Arc<EventStats>,
}

impl Recorder {
    /// A recorder that records nothing (reportEvent off, or tests).
    pub fn off() -> Recorder {
        Recorder {
            queue: None,
            stats: Arc::default(),
        }
    }

    /// A recorder sending through `bus` per `settings`, counting in `stats`, with its sender
    /// task running until `stop`; one that records nothing when `settings.report` is off.
    pub fn start(
        bus: Bus,
        settings: EventSettings,
        stats: Arc<EventStats>,
        stop: CancellationToken,
    ) -> Recorder {
        if !settings.report {
            return Recorder::off();
        }
        let (queue, records) = mpsc::channel(QUEUE);
        tokio::spawn(send_loop(bus, settings, records, stats.clone(), stop));
        Recorder {
            queue: Some(queue),
            stats,
        }
    }

    /// The recorder's counters.
    pub fn stats(&self) -> &Arc<EventStats> {
        &self.stats
    }

    /// Records an event about `pod` (and its `container`, if any). Never waits.
    pub fn record(
        &self,
        pod: &Pod,
        container: Option<&str>,
        kind: EventType,
        reason: &str,
        message: impl Into<String>,
    ) {
        let Some(queue) = &self.queue else {
            return;
        };
        let mut message = message.into();
        if message.len() > MAX_MESSAGE {
            let mut end = MAX_MESSAGE;
            while !message.is_char_boundary(end) {
                end -= 1;
            }
            message.truncate(end);
        }
        let record = Record {
            namespace: pod.namespace().to_owned(),
            pod: pod.metadata.name.clone(),
            uid: pod.metadata.uid.clone(),
            container: container.map(str::to_owned),
            kind,
            reason: reason.to_owned(),
            message,
        };
        if queue.try_send(record).is_err() {
            self.stats.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// A token bucket: `burst` tokens, refilled at `qps` a second.
#[derive(Debug)]
struct Bucket {
    qps: f64,
    burst: f64,
    tokens: f64,
    at: Instant,
}

impl Bucket {
    fn new(qps: f64, burst: u32, now: Instant) -> Bucket {
        let burst = f64::from(burst.max(1));
        Bucket {
            qps,
            burst,
            tokens: burst,
            at: now,
        }
    }

    fn take(&mut self, now: Instant) -> bool {
        if self.qps <= 0.0 {
            return true;
        }
        let elapsed = now.saturating_duration_since(self.at).as_secs_f64();
        self.tokens = (self.tokens + elapsed * self.qps).min(self.burst);
        self.at = now;
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

/// What the correlator remembers of an event sent: its name, count and first time.
#[derive(Debug, Clone)]
struct Sent {
    name: String,
    count: u64,
    first: String,
    at: Instant,
}

/// kubelet's aggregation: the first of a kind is created, its repeats patch it.
#[derive(Debug, Default)]
struct Correlator {
    sent: HashMap<(String, Option<String>, EventType, String, String), Sent>,
}

/// What to send for one record.
#[derive(Debug, PartialEq)]
enum Outgoing {
    /// A new Event object.
    Create(Value),
    /// The Event repeated: the object as it now is, and the patch to apply.
    Patch(Value, Value),
}

impl Correlator {
    fn next(&mut self, r: Record, node: &str, now: Instant, now_ms: i64) -> Outgoing {
        let key = (
            r.uid.clone(),
            r.container.clone(),
            r.kind,
            r.reason.clone(),
            r.message.clone(),
        );
        let stamp = wedge_core::time::rfc3339_utc(now_ms);
        if let Some(seen) = self.sent.get_mut(&key)
            && now.saturating_duration_since(seen.at) < REPEAT_WINDOW
        {
            seen.count += 1;
            seen.at = now;
            let event = event_object(&r, node, &seen.name, seen.count, &seen.first, &stamp);
            let patch = json!({"count": seen.count, "lastTimestamp": stamp, "message": r.message});
            return Outgoing::Patch(event, patch);
        }
        if self.sent.len() >= REMEMBERED {
            // Forget the oldest half: a repeat of a forgotten event starts a new one.
            let mut ages: Vec<Instant> = self.sent.values().map(|s| s.at).collect();
            ages.sort_unstable();
            let cut = ages[ages.len() / 2];
            self.sent.retain(|_, s| s.at > cut);
        }
        // kubelet names an event after its object and the time in nanoseconds, in hex.
        let name = format!("{}.{:x}", r.pod, now_nanos());
        let event = event_object(&r, node, &name, 1, &stamp, &stamp);
        self.sent.insert(
            key,
            Sent {
                name,
                count: 1,
                first: stamp,
                at: now,
            },
        );
        Outgoing::Create(event)
    }
}

fn now_nanos() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default()
}

/// The `v1.Event` kubelet would write for `r`.
fn event_object(r: &Record, node: &str, name: &str, count: u64, first: &str, last: &str) -> Value {
    let mut involved = json!({
        "kind": "Pod",
        "namespace": r.namespace,
        "name": r.pod,
        "uid": r.uid,
        "apiVersion": "v1",
    });
    if let Some(container) = &r.container {
        involved["fieldPath"] = json!(format!("spec.containers{{{container}}}"));
    }
    json!({
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": name, "namespace": r.namespace},
        "involvedObject": involved,
        "reason": r.reason,
        "message": r.message,
        "source": {"component": "kubelet", "host": node},
        "firstTimestamp": first,
        "lastTimestamp": last,
        "count": count,
        "type": r.kind.as_str(),
        "reportingComponent": "kubelet",
        "reportingInstance": node,
    })
}

/// The message metamanager relays to the cloud for `out`.
fn message_for(out: &Outgoing) -> Option<Message> {
    let (op, event, content) = match out {
        Outgoing::Create(event) => (operation::INSERT, event, Content::json(event).ok()?),
        Outgoing::Patch(event, patch) => (
            operation::PATCH,
            event,
            Content::json(&json!({"Event": event, "Data": patch.to_string()})).ok()?,
        ),
    };
    let resource = format!(
        "{}/event/{}",
        event["metadata"]["namespace"].as_str()?,
        event["metadata"]["name"].as_str()?
    );
    Some(Message::build(
        module::EDGED,
        group::META,
        op,
        &resource,
        content,
    ))
}

async fn send_loop(
    bus: Bus,
    settings: EventSettings,
    mut records: mpsc::Receiver<Record>,
    stats: Arc<EventStats>,
    stop: CancellationToken,
) {
    let mut bucket = Bucket::new(settings.qps, settings.burst, Instant::now());
    let mut correlator = Correlator::default();
    loop {
        let record = tokio::select! {
            _ = stop.cancelled() => return,
            r = records.recv() => match r {
                Some(r) => r,
                None => return,
            },
        };
        let now = Instant::now();
        if !bucket.take(now) {
            stats.dropped.fetch_add(1, Ordering::Relaxed);
            continue;
        }
        let out = correlator.next(record, &settings.node, now, wedge_core::time::now_ms());
        let counter = match out {
            Outgoing::Create(_) => &stats.sent,
            Outgoing::Patch(..) => &stats.aggregated,
        };
        let Some(msg) = message_for(&out) else {
            continue;
        };
        match bus.send(module::METAMANAGER, msg).await {
            Ok(()) => {
                counter.fetch_add(1, Ordering::Relaxed);
            }
            Err(e) => {
                stats.dropped.fetch_add(1, Ordering::Relaxed);
                tracing::debug!("event not sent: {e}");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(reason: &str, message: &str) -> Record {
        Record {
            namespace: "default".into(),
            pod: "web".into(),
            uid: "u-1".into(),
            container: Some("app".into()),
            kind: EventType::Warning,
            reason: reason.into(),
            message: message.into(),
        }
    }

    #[test]
    fn an_event_looks_like_kubelets() {
        let mut c = Correlator::default();
        let Outgoing::Create(e) = c.next(
            record("BackOff", "Back-off restarting failed container app"),
            "edge-1",
            Instant::now(),
            1_700_000_000_000,
        ) else {
            panic!("a first event is created");
        };
        assert_eq!(e["involvedObject"]["fieldPath"], "spec.containers{app}");
        assert_eq!(e["involvedObject"]["uid"], "u-1");
        assert_eq!(
            e["source"],
            json!({"component": "kubelet", "host": "edge-1"})
        );
        assert_eq!(e["type"], "Warning");
        assert_eq!(e["count"], 1);
        assert!(e["metadata"]["name"].as_str().unwrap().starts_with("web."));
        let msg = message_for(&Outgoing::Create(e.clone())).unwrap();
        assert_eq!(msg.route.operation, "insert");
        assert_eq!(msg.route.group, "meta");
        assert_eq!(
            msg.route.resource,
            format!("default/event/{}", e["metadata"]["name"].as_str().unwrap())
        );
    }

    #[test]
    fn a_repeat_patches_the_first_and_another_reason_is_another_event() {
        let mut c = Correlator::default();
        let t0 = Instant::now();
        let Outgoing::Create(first) = c.next(record("Unhealthy", "probe failed"), "n", t0, 0)
        else {
            panic!("created");
        };
        let Outgoing::Patch(again, patch) = c.next(
            record("Unhealthy", "probe failed"),
            "n",
            t0 + Duration::from_secs(5),
            5_000,
        ) else {
            panic!("a repeat is a patch");
        };
        assert_eq!(again["metadata"]["name"], first["metadata"]["name"]);
        assert_eq!(again["count"], 2);
        assert_eq!(patch["count"], 2);
        assert_eq!(patch["lastTimestamp"], "1970-01-01T00:00:05Z");
        assert_eq!(again["firstTimestamp"], first["firstTimestamp"]);
        let msg = message_for(&Outgoing::Patch(again, patch)).unwrap();
        assert_eq!(msg.route.operation, "patch");
        let body: Value = serde_json::from_str(msg.content.raw()).unwrap();
        assert_eq!(body["Event"]["count"], 2);
        assert!(body["Data"].as_str().unwrap().contains("\"count\":2"));
        // Another reason, or the same long after: new events.
        assert!(matches!(
            c.next(record("Killing", "probe failed"), "n", t0, 0),
            Outgoing::Create(_)
        ));
        assert!(matches!(
            c.next(
                record("Unhealthy", "probe failed"),
                "n",
                t0 + REPEAT_WINDOW * 2,
                0
            ),
            Outgoing::Create(_)
        ));
    }

    #[test]
    fn the_bucket_allows_a_burst_then_qps() {
        let t0 = Instant::now();
        let mut b = Bucket::new(2.0, 3, t0);
        assert!((0..3).all(|_| b.take(t0)));
        assert!(!b.take(t0));
        assert!(b.take(t0 + Duration::from_millis(500)));
        assert!(!b.take(t0 + Duration::from_millis(500)));
        let mut unlimited = Bucket::new(0.0, 1, t0);
        assert!((0..1000).all(|_| unlimited.take(t0)));
    }

    #[tokio::test]
    async fn an_off_recorder_records_nothing_and_a_full_queue_counts_its_drops() {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "web", "namespace": "default", "uid": "u-1"},
            "spec": {"containers": [{"name": "app", "image": "img"}]}
        }))
        .unwrap();
        Recorder::off().record(&pod, None, EventType::Normal, "Scheduled", "x");
        let (queue, _records) = mpsc::channel(1);
        let recorder = Recorder {
            queue: Some(queue),
            stats: Arc::default(),
        };
        for _ in 0..3 {
            recorder.record(&pod, Some("app"), EventType::Normal, "Pulled", "x");
        }
        assert_eq!(recorder.stats().dropped.load(Ordering::Relaxed), 2);
    }
}
