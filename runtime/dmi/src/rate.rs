//! A token bucket: how the node bounds what a mapper may report (and how often mappers may
//! register) without a timer per mapper — tokens are added lazily from the time elapsed.

use std::time::Instant;

use crate::settings::Rate;

/// `burst` tokens at most, refilled at `per_second`; one taken per request.
#[derive(Debug, Clone)]
pub(crate) struct TokenBucket {
    rate: Rate,
    tokens: f64,
    last: Instant,
}

impl TokenBucket {
    /// A full bucket: a mapper that just registered may report a burst at once (its first
    /// cycle reports every device).
    pub(crate) fn new(rate: Rate, now: Instant) -> TokenBucket {
        TokenBucket {
            rate,
            tokens: f64::from(rate.burst),
            last: now,
        }
    }

    /// Takes a token if there is one (`true`), after refilling for the time since the last
    /// call. A clock that went backwards adds nothing.
    pub(crate) fn take(&mut self, now: Instant) -> bool {
        let elapsed = now.saturating_duration_since(self.last).as_secs_f64();
        self.last = self.last.max(now);
        self.tokens =
            (self.tokens + elapsed * self.rate.per_second).min(f64::from(self.rate.burst));
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }

    /// The bucket's rate, for messages.
    pub(crate) fn rate(&self) -> Rate {
        self.rate
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn a_burst_then_the_rate() {
        let start = Instant::now();
        let mut bucket = TokenBucket::new(
            Rate {
                per_second: 10.0,
                burst: 5,
            },
            start,
        );
        let taken = (0..8).filter(|_| bucket.take(start)).count();
        assert_eq!(taken, 5, "the burst, no more");
        assert!(
            !bucket.take(start + Duration::from_millis(50)),
            "half a token"
        );
        assert!(
            bucket.take(start + Duration::from_millis(100)),
            "one token in 100 ms"
        );
        // A long pause refills to the burst, not beyond.
        let later = start + Duration::from_secs(60);
        let taken = (0..8).filter(|_| bucket.take(later)).count();
        assert_eq!(taken, 5);
        // An earlier instant (clock skew between callers) adds nothing and breaks nothing.
        assert!(!bucket.take(start));
    }
}
