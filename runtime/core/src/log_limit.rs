//! Rate limits for a warning that repeats while a condition lasts (a cloud that cannot be
//! dialled, a runtime that does not answer): the first occurrence is said at once, then at
//! most one line per period, carrying how many were held back. A node left alone during a
//! long outage writes a few lines an hour instead of one per retry, and nothing is lost: the
//! count says how many attempts there were.

use std::time::{Duration, Instant};

/// One repeating warning's limiter.
#[derive(Debug)]
pub struct RepeatLimit {
    period: Duration,
    last_said: Option<Instant>,
    held_back: u64,
}

impl RepeatLimit {
    /// At most one line per `period` after the first.
    pub fn new(period: Duration) -> RepeatLimit {
        RepeatLimit {
            period,
            last_said: None,
            held_back: 0,
        }
    }

    /// Whether to say this occurrence at `now`: `Some(n)` with the `n` occurrences held back
    /// since the last line said, `None` to hold it back (say it at debug level, if at all).
    pub fn check(&mut self, now: Instant) -> Option<u64> {
        match self.last_said {
            Some(at) if now.saturating_duration_since(at) < self.period => {
                self.held_back += 1;
                None
            }
            _ => {
                self.last_said = Some(now);
                Some(std::mem::take(&mut self.held_back))
            }
        }
    }

    /// The condition ended (the dial succeeded): the next occurrence is said at once.
    pub fn reset(&mut self) {
        self.last_said = None;
        self.held_back = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_is_said_then_one_per_period_with_the_count() {
        let mut l = RepeatLimit::new(Duration::from_secs(60));
        let t0 = Instant::now();
        assert_eq!(l.check(t0), Some(0));
        for s in 1..=59 {
            assert_eq!(l.check(t0 + Duration::from_secs(s)), None);
        }
        assert_eq!(l.check(t0 + Duration::from_secs(60)), Some(59));
        assert_eq!(l.check(t0 + Duration::from_secs(61)), None);
        l.reset();
        assert_eq!(l.check(t0 + Duration::from_secs(62)), Some(0));
    }
}
