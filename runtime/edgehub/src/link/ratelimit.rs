//! The outbound token bucket (`messageQPS` / `messageBurst`).
//!
//! `messageQPS: 0` means unlimited (KubeEdge would block forever, which no one wants).
//! `messageBurst: 0` with a positive rate is treated as a burst of 1, otherwise nothing could
//! ever be sent.

use std::time::{Duration, Instant};

/// A token bucket: `qps` tokens per second, at most `burst` stored; starts full.
#[derive(Debug, Clone)]
pub struct TokenBucket {
    qps: f64,
    burst: f64,
    tokens: f64,
    last: Instant,
}

impl TokenBucket {
    /// A full bucket refilled at `qps` per second up to `burst`.
    pub fn new(qps: u32, burst: u32, now: Instant) -> TokenBucket {
        let burst = f64::from(burst.max(1));
        TokenBucket {
            qps: f64::from(qps),
            burst,
            tokens: burst,
            last: now,
        }
    }

    /// True when the bucket never delays (`qps` 0).
    pub fn is_unlimited(&self) -> bool {
        self.qps <= 0.0
    }

    /// Takes one token at `now`, or says how long to wait until one is available.
    pub fn try_take(&mut self, now: Instant) -> Result<(), Duration> {
        if self.is_unlimited() {
            return Ok(());
        }
        self.refill(now);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            Ok(())
        } else {
            Err(Duration::from_secs_f64((1.0 - self.tokens) / self.qps))
        }
    }

    /// How long until a token is available at `now` (zero when one is), without taking it.
    pub fn ready_in(&mut self, now: Instant) -> Duration {
        if self.is_unlimited() {
            return Duration::ZERO;
        }
        self.refill(now);
        if self.tokens >= 1.0 {
            Duration::ZERO
        } else {
            Duration::from_secs_f64((1.0 - self.tokens) / self.qps)
        }
    }

    fn refill(&mut self, now: Instant) {
        let elapsed = now.saturating_duration_since(self.last).as_secs_f64();
        self.last = now.max(self.last);
        self.tokens = (self.tokens + elapsed * self.qps).min(self.burst);
    }

    /// Waits (tokio time) until a token is available and takes it.
    pub async fn take(&mut self) {
        while let Err(wait) = self.try_take(Instant::now()) {
            tokio::time::sleep(wait).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn burst_then_rate() {
        let t0 = Instant::now();
        let mut b = TokenBucket::new(10, 3, t0);
        for _ in 0..3 {
            assert_eq!(b.try_take(t0), Ok(()));
        }
        let wait = b.try_take(t0).unwrap_err();
        assert!((wait.as_secs_f64() - 0.1).abs() < 1e-9, "{wait:?}");
        assert!(b.try_take(t0 + Duration::from_millis(50)).is_err());
        let wait = b.ready_in(t0 + Duration::from_millis(75));
        assert!((wait.as_secs_f64() - 0.025).abs() < 1e-9, "{wait:?}");
        assert_eq!(b.try_take(t0 + Duration::from_millis(100)), Ok(()));
        // A long pause refills only up to the burst.
        let later = t0 + Duration::from_secs(10);
        for _ in 0..3 {
            assert_eq!(b.try_take(later), Ok(()));
        }
        assert!(b.try_take(later).is_err());
    }

    #[test]
    fn zero_qps_is_unlimited_and_zero_burst_is_one() {
        let t0 = Instant::now();
        let mut b = TokenBucket::new(0, 0, t0);
        assert!(b.is_unlimited());
        for _ in 0..1000 {
            assert_eq!(b.try_take(t0), Ok(()));
        }
        let mut b = TokenBucket::new(5, 0, t0);
        assert_eq!(b.try_take(t0), Ok(()));
        assert!(b.try_take(t0).is_err());
    }
}
