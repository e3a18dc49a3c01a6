//! Latency percentiles from an exact sort of every sample: a run holds at most a few million
//! samples, so sorting costs less than a second and needs no histogram error bounds.

use std::time::Duration;

/// The latency figures the report prints.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Percentiles {
    /// Samples the figures come from.
    pub count: usize,
    /// Median.
    pub p50: Duration,
    /// 90th percentile.
    pub p90: Duration,
    /// 99th percentile.
    pub p99: Duration,
    /// 99.9th percentile.
    pub p999: Duration,
    /// Largest sample.
    pub max: Duration,
}

impl Percentiles {
    /// Percentiles of `samples` (sorted in place); `None` when there are none.
    pub fn of(samples: &mut [Duration]) -> Option<Percentiles> {
        samples.sort_unstable();
        let max = *samples.last()?;
        Some(Percentiles {
            count: samples.len(),
            p50: nearest_rank(samples, 50.0),
            p90: nearest_rank(samples, 90.0),
            p99: nearest_rank(samples, 99.0),
            p999: nearest_rank(samples, 99.9),
            max,
        })
    }
}

/// The nearest-rank percentile of sorted, non-empty `sorted`: the smallest sample that at least
/// `p` percent of the samples do not exceed. No interpolation, so every figure is a latency
/// that was actually seen.
fn nearest_rank(sorted: &[Duration], p: f64) -> Duration {
    let n = sorted.len();
    // Integer arithmetic on per-mille ranks, so that p99.9 of 1000 samples is the 999th and
    // not the 1000th through float rounding.
    let per_mille = (p * 10.0).round() as usize;
    let rank = (per_mille * n).div_ceil(1000).clamp(1, n);
    sorted[rank - 1]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(v: u64) -> Duration {
        Duration::from_millis(v)
    }

    #[test]
    fn empty_has_no_percentiles() {
        assert_eq!(Percentiles::of(&mut []), None);
    }

    #[test]
    fn one_sample_is_every_percentile() {
        let p = Percentiles::of(&mut [ms(7)]).unwrap();
        assert_eq!(
            p,
            Percentiles {
                count: 1,
                p50: ms(7),
                p90: ms(7),
                p99: ms(7),
                p999: ms(7),
                max: ms(7)
            }
        );
    }

    #[test]
    fn nearest_rank_over_1_to_1000() {
        // Shuffled on purpose: the function sorts.
        let mut samples: Vec<Duration> = (1..=1000).rev().map(ms).collect();
        samples.swap(3, 700);
        let p = Percentiles::of(&mut samples).unwrap();
        assert_eq!(p.count, 1000);
        assert_eq!(p.p50, ms(500));
        assert_eq!(p.p90, ms(900));
        assert_eq!(p.p99, ms(990));
        assert_eq!(p.p999, ms(999));
        assert_eq!(p.max, ms(1000));
    }

    #[test]
    fn nearest_rank_rounds_up_between_samples() {
        // 10 samples: p50 is the 5th, p90 the 9th, p99 and p99.9 the 10th.
        let mut samples: Vec<Duration> = (1..=10).map(ms).collect();
        let p = Percentiles::of(&mut samples).unwrap();
        assert_eq!(
            (p.p50, p.p90, p.p99, p.p999),
            (ms(5), ms(9), ms(10), ms(10))
        );
    }
}
