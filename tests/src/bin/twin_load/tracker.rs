//! Matching results to updates by `event_id`, and the counts a run reports.
//!
//! Every update is registered *before* it is published (a result can arrive before `publish`
//! returns), with the time it was scheduled for: in open-loop mode that is the planned send
//! time, not the moment the client got round to it, so a stalled daemon shows up as latency
//! instead of silently delaying the clock (coordinated omission).

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tokio::sync::OwnedSemaphorePermit;

/// One received message, kept as an example for the report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sample {
    /// MQTT topic.
    pub topic: String,
    /// Payload, lossily decoded as UTF-8.
    pub payload: String,
}

/// What a run counted. Counts named "measured" cover only updates scheduled inside the
/// measured window (after the warm-up).
#[derive(Debug, Default)]
pub struct Tally {
    /// Measured updates scheduled.
    pub scheduled: u64,
    /// Measured updates handed to the MQTT client.
    pub sent: u64,
    /// Measured updates the MQTT client refused (connection gone).
    pub publish_errors: u64,
    /// Results received for measured updates (error results included).
    pub results: u64,
    /// Of `results`, those carrying a `code` (an error result).
    pub error_results: u64,
    /// Measured updates given up in closed-loop mode because no result came within the drain
    /// time (their slot is freed so the loop goes on).
    pub expired: u64,
    /// Measured updates still without a result when the run ended (after the drain).
    pub missing: u64,
    /// Results of any update (warm-up included) that arrived inside the measured window.
    pub results_in_window: u64,
    /// Results on the subscribed topics that matched no outstanding update (not JSON, unknown
    /// or empty `event_id`, duplicates, or late after expiry).
    pub unmatched: u64,
    /// MQTT connection errors of any client.
    pub connection_errors: u64,
    /// The first of them.
    pub first_connection_error: Option<String>,
    /// Latency of every measured result, from scheduled send to arrival.
    pub latencies: Vec<Duration>,
    /// The largest latency and when its update was scheduled, counted from the start of the
    /// measured window: tells a one-off stall from a steady tail.
    pub worst: Option<(Duration, Duration)>,
    /// First result of a measured update.
    pub first_result: Option<Sample>,
    /// First error result of a measured update.
    pub first_error: Option<Sample>,
    /// First unmatched message.
    pub first_unmatched: Option<Sample>,
}

/// An update awaiting its result.
struct Outstanding {
    scheduled: Instant,
    measured: bool,
    /// Closed-loop mode: the in-flight slot, freed when the entry goes.
    slot: Option<OwnedSemaphorePermit>,
}

#[derive(Default)]
struct State {
    outstanding: HashMap<String, Outstanding>,
    measured_outstanding: u64,
    /// Measured window `[from, to)`; `None` before the run proper starts (pre-flight).
    window: Option<(Instant, Instant)>,
    tally: Tally,
    /// Latest result of an unmeasured update (pre-flight and warm-up).
    last_unmeasured: Option<Sample>,
}

impl State {
    fn is_measured(&self, at: Instant) -> bool {
        self.window.is_some_and(|(from, to)| at >= from && at < to)
    }
}

/// Shared by all publishers and subscribers of a run.
#[derive(Default)]
pub struct Tracker {
    state: Mutex<State>,
}

/// Whether a result payload is an error result, and its `event_id`.
fn parse_result(payload: &[u8]) -> Option<(String, bool)> {
    let value: serde_json::Value = serde_json::from_slice(payload).ok()?;
    let id = value.get("event_id")?.as_str()?.to_owned();
    Some((id, value.get("code").is_some()))
}

fn sample(topic: &str, payload: &[u8]) -> Sample {
    Sample {
        topic: topic.to_owned(),
        payload: String::from_utf8_lossy(payload).into_owned(),
    }
}

impl Tracker {
    fn lock(&self) -> MutexGuard<'_, State> {
        // A panicking client task must not hide the counts of the others.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Starts measuring: updates scheduled in `[from, to)` count, and results arriving then
    /// make up the throughput.
    pub fn set_window(&self, from: Instant, to: Instant) {
        self.lock().window = Some((from, to));
    }

    /// Registers update `id` scheduled at `scheduled`, before it is published.
    pub fn register(&self, id: String, scheduled: Instant, slot: Option<OwnedSemaphorePermit>) {
        let mut state = self.lock();
        let measured = state.is_measured(scheduled);
        if measured {
            state.tally.scheduled += 1;
            state.measured_outstanding += 1;
        }
        let entry = Outstanding {
            scheduled,
            measured,
            slot,
        };
        if let Some(old) = state.outstanding.insert(id, entry)
            && old.measured
        {
            // Ids are unique per run; a clash would be a bug here, so keep the counts straight.
            state.measured_outstanding -= 1;
        }
    }

    /// Counts an update scheduled at `scheduled` that was never published because the
    /// publisher fell too far behind its schedule.
    pub fn skipped(&self, scheduled: Instant) {
        let mut state = self.lock();
        if state.is_measured(scheduled) {
            state.tally.scheduled += 1;
        }
    }

    /// Records that update `id` (scheduled at `scheduled`) was handed to the client.
    pub fn sent(&self, scheduled: Instant) {
        let mut state = self.lock();
        if state.is_measured(scheduled) {
            state.tally.sent += 1;
        }
    }

    /// Forgets update `id`, which the client refused.
    pub fn publish_failed(&self, id: &str) {
        let mut state = self.lock();
        if let Some(entry) = state.outstanding.remove(id)
            && entry.measured
        {
            state.measured_outstanding -= 1;
            state.tally.publish_errors += 1;
        }
    }

    /// Handles a message on a result topic that arrived at `arrived`.
    pub fn on_result(&self, topic: &str, payload: &[u8], arrived: Instant) {
        let parsed = parse_result(payload);
        let mut state = self.lock();
        if state.is_measured(arrived) {
            state.tally.results_in_window += 1;
        }
        let found = parsed
            .as_ref()
            .and_then(|(id, _)| state.outstanding.remove(id));
        let (Some(entry), Some((_, is_error))) = (found, parsed) else {
            state.tally.unmatched += 1;
            if state.tally.first_unmatched.is_none() {
                state.tally.first_unmatched = Some(sample(topic, payload));
            }
            return;
        };
        if !entry.measured {
            state.last_unmeasured = Some(sample(topic, payload));
            return;
        }
        state.measured_outstanding -= 1;
        let window_start = state.window.map_or(entry.scheduled, |(from, _)| from);
        let tally = &mut state.tally;
        tally.results += 1;
        let latency = arrived.saturating_duration_since(entry.scheduled);
        tally.latencies.push(latency);
        if tally.worst.is_none_or(|(worst, _)| latency > worst) {
            let at = entry.scheduled.saturating_duration_since(window_start);
            tally.worst = Some((latency, at));
        }
        if tally.first_result.is_none() {
            tally.first_result = Some(sample(topic, payload));
        }
        if is_error {
            tally.error_results += 1;
            if tally.first_error.is_none() {
                tally.first_error = Some(sample(topic, payload));
            }
        }
        // `entry.slot` drops here: closed-loop publishers may send the next update.
    }

    /// Closed-loop mode: gives up on slotted updates older than `max_age`, freeing their slots.
    pub fn expire(&self, max_age: Duration, now: Instant) {
        let mut state = self.lock();
        let mut expired_measured = 0;
        state.outstanding.retain(|_, entry| {
            let keep =
                entry.slot.is_none() || now.saturating_duration_since(entry.scheduled) < max_age;
            if !keep && entry.measured {
                expired_measured += 1;
            }
            keep
        });
        state.measured_outstanding -= expired_measured;
        state.tally.expired += expired_measured;
    }

    /// Whether update `id` still awaits its result.
    pub fn is_outstanding(&self, id: &str) -> bool {
        self.lock().outstanding.contains_key(id)
    }

    /// Measured updates still awaiting their result.
    pub fn measured_outstanding(&self) -> u64 {
        self.lock().measured_outstanding
    }

    /// The latest result of an unmeasured update (pre-flight).
    pub fn last_unmeasured(&self) -> Option<Sample> {
        self.lock().last_unmeasured.clone()
    }

    /// Counts a connection error of client `who`.
    pub fn connection_error(&self, who: &str, error: &dyn std::fmt::Display) {
        let mut state = self.lock();
        state.tally.connection_errors += 1;
        if state.tally.first_connection_error.is_none() {
            state.tally.first_connection_error = Some(format!("{who}: {error}"));
        }
    }

    /// The counts so far, with every measured update still outstanding counted as missing.
    pub fn finish(&self) -> Tally {
        let mut state = self.lock();
        let missing = state.measured_outstanding + state.tally.expired;
        let mut tally = std::mem::take(&mut state.tally);
        tally.missing = missing;
        tally
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use tokio::sync::Semaphore;

    const OK: &[u8] = br#"{"event_id":"a","timestamp":1,"twin":{}}"#;

    fn windowed(from: Instant, len_ms: u64) -> Tracker {
        let t = Tracker::default();
        t.set_window(from, from + Duration::from_millis(len_ms));
        t
    }

    #[test]
    fn result_matches_by_event_id_and_measures_from_schedule() {
        let t0 = Instant::now();
        let t = windowed(t0, 1000);
        t.register("a".into(), t0 + Duration::from_millis(10), None);
        t.sent(t0 + Duration::from_millis(10));
        t.on_result("r/a", OK, t0 + Duration::from_millis(35));
        let tally = t.finish();
        assert_eq!((tally.scheduled, tally.sent, tally.results), (1, 1, 1));
        assert_eq!(tally.latencies, [Duration::from_millis(25)]);
        assert_eq!(
            tally.worst,
            Some((Duration::from_millis(25), Duration::from_millis(10)))
        );
        assert_eq!(
            (tally.error_results, tally.missing, tally.unmatched),
            (0, 0, 0)
        );
        assert_eq!(tally.results_in_window, 1);
        assert_eq!(
            tally.first_result,
            Some(Sample {
                topic: "r/a".into(),
                payload: String::from_utf8_lossy(OK).into_owned()
            })
        );
    }

    #[test]
    fn worst_latency_remembers_its_schedule() {
        let t0 = Instant::now();
        let t = windowed(t0, 1000);
        for (id, at, arrives) in [("a", 0, 5), ("b", 100, 400), ("c", 200, 210)] {
            t.register(id.into(), t0 + Duration::from_millis(at), None);
            let payload = format!(r#"{{"event_id":"{id}"}}"#);
            t.on_result("r", payload.as_bytes(), t0 + Duration::from_millis(arrives));
        }
        assert_eq!(
            t.finish().worst,
            Some((Duration::from_millis(300), Duration::from_millis(100)))
        );
    }

    #[test]
    fn error_results_are_results_with_a_code() {
        let t0 = Instant::now();
        let t = windowed(t0, 1000);
        t.register("e".into(), t0, None);
        let error = br#"{"event_id":"e","timestamp":1,"code":404,"reason":"x"}"#;
        t.on_result("r/e", error, t0);
        let tally = t.finish();
        assert_eq!((tally.results, tally.error_results), (1, 1));
        assert!(tally.first_error.unwrap().payload.contains("404"));
    }

    #[test]
    fn warm_up_updates_are_matched_but_not_counted() {
        let t0 = Instant::now();
        let t = windowed(t0 + Duration::from_millis(100), 1000);
        t.register("a".into(), t0, None);
        t.on_result("r/a", OK, t0 + Duration::from_millis(150));
        let tally = t.finish();
        assert_eq!((tally.scheduled, tally.results, tally.unmatched), (0, 0, 0));
        assert!(tally.latencies.is_empty());
        // Arrived inside the window: part of the throughput.
        assert_eq!(tally.results_in_window, 1);
    }

    #[test]
    fn unknown_empty_duplicate_and_garbage_results_are_unmatched() {
        let t0 = Instant::now();
        let t = windowed(t0, 1000);
        t.register("a".into(), t0, None);
        t.on_result("r", OK, t0);
        t.on_result("r", OK, t0); // duplicate
        t.on_result("r", br#"{"event_id":"","code":400,"reason":"x"}"#, t0);
        t.on_result("r", b"not json", t0);
        let tally = t.finish();
        assert_eq!((tally.results, tally.unmatched), (1, 3));
        assert_eq!(
            tally.first_unmatched.unwrap().payload,
            String::from_utf8_lossy(OK)
        );
    }

    #[test]
    fn unanswered_measured_updates_are_missing() {
        let t0 = Instant::now();
        let t = windowed(t0, 1000);
        t.register("a".into(), t0, None);
        t.register("b".into(), t0, None);
        t.on_result("r", OK, t0);
        assert_eq!(t.measured_outstanding(), 1);
        assert!(t.is_outstanding("b"));
        assert_eq!(t.finish().missing, 1);
    }

    #[test]
    fn refused_publish_is_an_error_not_missing() {
        let t0 = Instant::now();
        let t = windowed(t0, 1000);
        t.register("a".into(), t0, None);
        t.publish_failed("a");
        let tally = t.finish();
        assert_eq!(
            (tally.scheduled, tally.publish_errors, tally.missing),
            (1, 1, 0)
        );
    }

    #[test]
    fn skipped_updates_are_scheduled_but_not_sent() {
        let t0 = Instant::now();
        let t = windowed(t0, 1000);
        t.skipped(t0);
        t.skipped(t0 + Duration::from_secs(5)); // after the window
        let tally = t.finish();
        assert_eq!((tally.scheduled, tally.sent, tally.missing), (1, 0, 0));
    }

    #[test]
    fn expiry_frees_slots_and_counts_as_missing() {
        let t0 = Instant::now();
        let t = windowed(t0, 1000);
        let slots = Arc::new(Semaphore::new(2));
        t.register(
            "old".into(),
            t0,
            Some(slots.clone().try_acquire_owned().unwrap()),
        );
        t.register(
            "new".into(),
            t0 + Duration::from_millis(900),
            Some(slots.clone().try_acquire_owned().unwrap()),
        );
        t.register("open-loop".into(), t0, None);
        assert_eq!(slots.available_permits(), 0);
        t.expire(Duration::from_millis(500), t0 + Duration::from_millis(1000));
        assert_eq!(slots.available_permits(), 1);
        assert!(!t.is_outstanding("old"));
        assert!(t.is_outstanding("new") && t.is_outstanding("open-loop"));
        // A result for the expired one is late: unmatched.
        t.on_result("r", br#"{"event_id":"old"}"#, t0);
        let tally = t.finish();
        assert_eq!((tally.expired, tally.missing, tally.unmatched), (1, 3, 1));
    }

    #[test]
    fn pre_flight_result_is_kept_as_a_sample() {
        let t = Tracker::default();
        let t0 = Instant::now();
        t.register("pf".into(), t0, None);
        t.on_result("r/pf", br#"{"event_id":"pf","twin":{}}"#, t0);
        assert_eq!(t.last_unmeasured().unwrap().topic, "r/pf");
        assert_eq!(t.finish().results, 0);
    }
}
