//! Prometheus text exposition without a global registry.
//!
//! Each component that has numbers to show writes them into a [`PromWriter`] when `/metrics` is
//! scraped; the counters themselves are plain atomics owned by the component, so recording a
//! sample costs one relaxed atomic add on the hot path.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Anything with numbers to show on `/metrics`.
pub trait MetricsSource: Send + Sync {
    /// Writes this source's families into `w`.
    fn write_metrics(&self, w: &mut PromWriter);
}

/// Accumulates Prometheus text format (version 0.0.4).
#[derive(Debug, Default)]
pub struct PromWriter {
    out: String,
}

impl PromWriter {
    /// An empty page.
    pub fn new() -> PromWriter {
        PromWriter::default()
    }

    /// Starts a metric family: its `# HELP` and `# TYPE` lines.
    pub fn family(&mut self, name: &str, help: &str, kind: &str) {
        let _ = writeln!(self.out, "# HELP {name} {help}");
        let _ = writeln!(self.out, "# TYPE {name} {kind}");
    }

    /// One sample line with labels.
    pub fn sample(&mut self, name: &str, labels: &[(&str, &str)], value: f64) {
        self.out.push_str(name);
        if !labels.is_empty() {
            self.out.push('{');
            for (i, (key, val)) in labels.iter().enumerate() {
                if i > 0 {
                    self.out.push(',');
                }
                let _ = write!(self.out, "{key}=\"{}\"", escape_label(val));
            }
            self.out.push('}');
        }
        let _ = writeln!(self.out, " {value}");
    }

    /// A whole histogram family.
    pub fn histogram(&mut self, name: &str, help: &str, h: &Histogram) {
        self.family(name, help, "histogram");
        let mut cumulative = 0u64;
        for (bound, count) in h.bounds.iter().zip(&h.counts) {
            cumulative += count.load(Ordering::Relaxed);
            let le = format!("{bound}");
            self.sample(&format!("{name}_bucket"), &[("le", &le)], cumulative as f64);
        }
        cumulative += h.counts[h.bounds.len()].load(Ordering::Relaxed);
        self.sample(
            &format!("{name}_bucket"),
            &[("le", "+Inf")],
            cumulative as f64,
        );
        let sum = h.sum_micros.load(Ordering::Relaxed) as f64 / 1e6;
        self.sample(&format!("{name}_sum"), &[], sum);
        self.sample(&format!("{name}_count"), &[], cumulative as f64);
    }

    /// The finished page.
    pub fn finish(self) -> String {
        self.out
    }
}

fn escape_label(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// A latency histogram with fixed bucket bounds in seconds, recorded lock-free.
#[derive(Debug)]
pub struct Histogram {
    bounds: Vec<f64>,
    counts: Vec<AtomicU64>,
    sum_micros: AtomicU64,
}

impl Histogram {
    /// A histogram with the given upper bounds (seconds, ascending).
    pub fn new(bounds: &[f64]) -> Histogram {
        Histogram {
            bounds: bounds.to_vec(),
            counts: (0..=bounds.len()).map(|_| AtomicU64::new(0)).collect(),
            sum_micros: AtomicU64::new(0),
        }
    }

    /// Buckets from 50 µs to 5 s, suited to storage commits and message round trips.
    pub fn latency() -> Histogram {
        Histogram::new(&[
            0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
            0.5, 1.0, 2.5, 5.0,
        ])
    }

    /// Records one observation.
    pub fn observe(&self, d: Duration) {
        let secs = d.as_secs_f64();
        let index = self
            .bounds
            .iter()
            .position(|b| secs <= *b)
            .unwrap_or(self.bounds.len());
        self.counts[index].fetch_add(1, Ordering::Relaxed);
        self.sum_micros
            .fetch_add(d.as_micros() as u64, Ordering::Relaxed);
    }

    /// Number of observations so far.
    pub fn count(&self) -> u64 {
        self.counts.iter().map(|c| c.load(Ordering::Relaxed)).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_families_samples_and_histograms() {
        let h = Histogram::new(&[0.001, 0.01]);
        h.observe(Duration::from_micros(500));
        h.observe(Duration::from_millis(5));
        h.observe(Duration::from_secs(1));
        let mut w = PromWriter::new();
        w.family("x_total", "An x.", "counter");
        w.sample("x_total", &[("module", "a\"b")], 3.0);
        w.histogram("lat_seconds", "Latency.", &h);
        let text = w.finish();
        assert!(text.contains("# TYPE x_total counter\n"));
        assert!(text.contains("x_total{module=\"a\\\"b\"} 3\n"));
        assert!(text.contains("lat_seconds_bucket{le=\"0.001\"} 1\n"));
        assert!(text.contains("lat_seconds_bucket{le=\"0.01\"} 2\n"));
        assert!(text.contains("lat_seconds_bucket{le=\"+Inf\"} 3\n"));
        assert!(text.contains("lat_seconds_count 3\n"));
        assert_eq!(h.count(), 3);
    }
}
