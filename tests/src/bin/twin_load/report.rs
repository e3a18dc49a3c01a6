//! The run's figures as plain text or as one JSON object.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::Duration;

use serde_json::{Value, json};

use crate::clients::{Outcome, Pace, Plan};
use crate::stats::Percentiles;
use crate::tracker::Sample;

/// Everything printed about one run.
#[derive(Debug)]
pub struct Report {
    /// `embedded` or `mosquitto`.
    pub broker: &'static str,
    /// The broker URL clients and daemon used.
    pub broker_url: String,
    /// Queue size given to the broker (per-client queue).
    pub queue: u32,
    /// Unrelated filters held by one extra connection during the run.
    pub foreign_filters: u32,
    /// The daemon's `wedge.store.synchronous`.
    pub synchronous: String,
    /// The daemon binary.
    pub wedge: PathBuf,
    /// The daemon's pid.
    pub wedge_pid: u32,
    /// What the clients did.
    pub plan: Plan,
    /// What they saw.
    pub outcome: Outcome,
    /// Latency figures of the measured results.
    pub latency: Option<Percentiles>,
    /// Daemon RSS in KiB once healthy, before any load.
    pub rss_start_kib: Option<u64>,
    /// Daemon RSS in KiB after the drain.
    pub rss_end_kib: Option<u64>,
    /// `/metrics` lines mentioning `store`, or why there are none.
    pub store_metrics: Result<Vec<String>, String>,
    /// How the daemon ended when stopped with SIGTERM.
    pub daemon_exit: String,
    /// Tail of the daemon's log, when something looks wrong.
    pub daemon_log_tail: Option<String>,
    /// The run directory, when kept.
    pub kept_dir: Option<PathBuf>,
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn mib(kib: Option<u64>) -> String {
    kib.map_or_else(
        || "?".to_owned(),
        |k| format!("{:.1} MiB", k as f64 / 1024.0),
    )
}

fn sample_json(sample: &Option<Sample>) -> Value {
    match sample {
        Some(s) => json!({"topic": s.topic, "payload": s.payload}),
        None => Value::Null,
    }
}

impl Report {
    /// Results per second that arrived inside the measured window.
    pub fn throughput(&self) -> f64 {
        self.outcome.tally.results_in_window as f64 / self.plan.duration.as_secs_f64()
    }

    /// Updates handed to the client per second of measured window.
    fn send_rate(&self) -> f64 {
        self.outcome.tally.sent as f64 / self.plan.duration.as_secs_f64()
    }

    fn pace_text(&self) -> String {
        match self.plan.pace {
            Pace::Open { rate } => format!("open loop, {rate} updates/s in total"),
            Pace::Closed { inflight } => {
                format!("closed loop, at most {inflight} unanswered updates per publisher")
            }
        }
    }

    /// The plain-text report.
    pub fn text(&self) -> String {
        let (p, t) = (&self.plan, &self.outcome.tally);
        let mut out = String::new();
        let mut line = |s: String| {
            out.push_str(&s);
            out.push('\n');
        };
        line(format!(
            "twin-load: {} broker {} (per-client queue {}, foreign filters {}), store synchronous {}, wedge {} (pid {})",
            self.broker,
            self.broker_url,
            self.queue,
            self.foreign_filters,
            self.synchronous,
            self.wedge.display(),
            self.wedge_pid
        ));
        line(format!(
            "  {} devices, {} publishers (QoS {}), {} result subscribers (QoS {}), {}",
            p.devices,
            p.publishers,
            p.pub_qos as u8,
            p.subscribers,
            p.sub_qos as u8,
            self.pace_text()
        ));
        line(format!(
            "  warm-up {:.1} s, measured {:.1} s, drain up to {:.1} s",
            p.warmup.as_secs_f64(),
            p.duration.as_secs_f64(),
            p.drain.as_secs_f64()
        ));
        let pf = &self.outcome.preflight;
        line(format!(
            "pre-flight     {} after {} update(s){}",
            if pf.ok { "ok" } else { "NO SUCCESS RESULT" },
            pf.attempts,
            pf.result
                .as_ref()
                .map(|s| format!(": {} {}", s.topic, s.payload))
                .unwrap_or_default()
        ));
        line(format!(
            "sent           {} of {} scheduled ({:.1}/s); {} refused by the client; \
             publishing ended {:.3} s after the window",
            t.sent,
            t.scheduled,
            self.send_rate(),
            t.publish_errors,
            self.outcome.publish_overrun.as_secs_f64()
        ));
        line(format!(
            "results        {} (error results {})",
            t.results, t.error_results
        ));
        line(format!(
            "missing        {} ({} given up after {:.1} s in closed loop; drain took {:.3} s)",
            t.missing,
            t.expired,
            p.drain.as_secs_f64(),
            self.outcome.drained.as_secs_f64()
        ));
        line(format!("unmatched      {}", t.unmatched));
        line(format!(
            "throughput     {:.1} results/s (arrivals inside the measured window)",
            self.throughput()
        ));
        match &self.latency {
            Some(l) => {
                line(format!(
                    "latency ms     p50 {:.3}  p90 {:.3}  p99 {:.3}  p99.9 {:.3}  max {:.3}  \
                     ({} samples, from scheduled send to result)",
                    ms(l.p50),
                    ms(l.p90),
                    ms(l.p99),
                    ms(l.p999),
                    ms(l.max),
                    l.count
                ));
                if let Some((_, at)) = t.worst {
                    line(format!(
                        "               (the max was the update scheduled {:.3} s into the \
                         measured window)",
                        at.as_secs_f64()
                    ));
                }
            }
            None => line("latency ms     no samples".to_owned()),
        }
        line(format!(
            "daemon RSS     {} at the end ({} when idle before the load)",
            mib(self.rss_end_kib),
            mib(self.rss_start_kib)
        ));
        match &self.store_metrics {
            Ok(lines) if lines.is_empty() => line("store metrics  none in /metrics".to_owned()),
            Ok(lines) => {
                line("store metrics  (/metrics at the end)".to_owned());
                for l in lines {
                    line(format!("  {l}"));
                }
            }
            Err(e) => line(format!("store metrics  unavailable: {e}")),
        }
        line(format!("daemon stop    {}", self.daemon_exit));
        line(format!(
            "conn. errors   {}{}",
            t.connection_errors,
            t.first_connection_error
                .as_ref()
                .map(|e| format!(" (first: {e})"))
                .unwrap_or_default()
        ));
        for (label, sample) in [
            ("first result  ", &t.first_result),
            ("first error   ", &t.first_error),
            ("first unmatched", &t.first_unmatched),
        ] {
            if let Some(s) = sample {
                line(format!("{label} {} {}", s.topic, s.payload));
            }
        }
        if let Some(dir) = &self.kept_dir {
            line(format!("run directory  {} (kept)", dir.display()));
        }
        if let Some(tail) = &self.daemon_log_tail {
            let _ = write!(out, "daemon log tail:\n{tail}\n");
        }
        out
    }

    /// The report as one JSON object; durations in milliseconds, memory in KiB.
    pub fn json(&self) -> Value {
        let (p, t) = (&self.plan, &self.outcome.tally);
        let (mode, rate, inflight) = match p.pace {
            Pace::Open { rate } => ("open", Value::from(rate), Value::Null),
            Pace::Closed { inflight } => ("closed", Value::from(0), Value::from(inflight)),
        };
        let worst_at_s = t.worst.map(|(_, at)| at.as_secs_f64());
        let latency = self.latency.map_or(Value::Null, |l| {
            json!({
                "samples": l.count,
                "max_scheduled_at_s": worst_at_s,
                "p50_ms": ms(l.p50),
                "p90_ms": ms(l.p90),
                "p99_ms": ms(l.p99),
                "p99_9_ms": ms(l.p999),
                "max_ms": ms(l.max),
            })
        });
        let (store_metrics, store_metrics_error) = match &self.store_metrics {
            Ok(lines) => (json!(lines), Value::Null),
            Err(e) => (Value::Null, Value::from(e.as_str())),
        };
        // Grouped, which also keeps each json! below serde_json's macro recursion limit.
        let config = json!({
            "broker": self.broker,
            "broker_url": self.broker_url,
            "queue": self.queue,
            "foreign_filters": self.foreign_filters,
            "synchronous": self.synchronous,
            "wedge": self.wedge.display().to_string(),
            "wedge_pid": self.wedge_pid,
            "devices": p.devices,
            "publishers": p.publishers,
            "subscribers": p.subscribers,
            "qos": p.pub_qos as u8,
            "sub_qos": p.sub_qos as u8,
            "mode": mode,
            "rate": rate,
            "inflight": inflight,
            "warmup_s": p.warmup.as_secs_f64(),
            "duration_s": p.duration.as_secs_f64(),
            "drain_s": p.drain.as_secs_f64(),
        });
        let counts = json!({
            "scheduled": t.scheduled,
            "sent": t.sent,
            "publish_errors": t.publish_errors,
            "results": t.results,
            "error_results": t.error_results,
            "missing": t.missing,
            "expired": t.expired,
            "unmatched": t.unmatched,
            "results_in_window": t.results_in_window,
            "connection_errors": t.connection_errors,
        });
        let daemon = json!({
            "rss_start_kib": self.rss_start_kib,
            "rss_end_kib": self.rss_end_kib,
            "store_metrics": store_metrics,
            "store_metrics_error": store_metrics_error,
            "exit": self.daemon_exit,
            "log_tail": self.daemon_log_tail,
        });
        let samples = json!({
            "first_result": sample_json(&t.first_result),
            "first_error": sample_json(&t.first_error),
            "first_unmatched": sample_json(&t.first_unmatched),
            "first_connection_error": t.first_connection_error,
        });
        json!({
            "config": config,
            "preflight": {
                "ok": self.outcome.preflight.ok,
                "attempts": self.outcome.preflight.attempts,
                "result": sample_json(&self.outcome.preflight.result),
            },
            "counts": counts,
            "throughput_per_s": self.throughput(),
            "send_rate_per_s": self.send_rate(),
            "publish_overrun_ms": ms(self.outcome.publish_overrun),
            "drain_ms": ms(self.outcome.drained),
            "latency": latency,
            "daemon": daemon,
            "samples": samples,
            "kept_dir": self.kept_dir.as_ref().map(|d| d.display().to_string()),
        })
    }
}
