//! Redial delays: exponential with jitter.
//!
//! KubeEdge dials 5 times 5 s apart and then sleeps 2×heartbeat (30 s); a node can thus stay
//! offline half a minute after CloudCore is back. Wedge redials sooner: 100 ms doubling to an
//! 800 ms cap, each delay scattered ±20 % (never above the cap) so a fleet of nodes does not
//! reconnect in lock-step. The cap is what bounds the time from the cloud's return to the
//! node's reconnect: a delay under a second keeps that under a second, and a refused dial to a
//! cloud that is down costs next to nothing. Both ends are configurable
//! (`wedge.edgeHub.reconnect*`).

use std::time::Duration;

/// The shape of the redial delays.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BackoffSettings {
    /// The first delay after a failure.
    pub initial: Duration,
    /// The longest delay; jitter never takes a delay above it.
    pub max: Duration,
    /// Relative jitter: each delay is scaled by a factor in `[1 - jitter, 1 + jitter]`.
    pub jitter: f64,
}

impl Eq for BackoffSettings {}

impl Default for BackoffSettings {
    fn default() -> BackoffSettings {
        BackoffSettings {
            initial: Duration::from_millis(100),
            max: Duration::from_millis(800),
            jitter: 0.2,
        }
    }
}

/// The delay sequence of one link; [`Backoff::reset`] after a successful connect.
#[derive(Debug, Clone)]
pub struct Backoff {
    settings: BackoffSettings,
    next: Duration,
    rng: u64,
}

impl Backoff {
    /// A fresh sequence; `seed` feeds the jitter (any value; 0 is replaced).
    pub fn new(settings: BackoffSettings, seed: u64) -> Backoff {
        Backoff {
            settings,
            next: settings.initial,
            rng: seed | 1,
        }
    }

    /// A sequence seeded from the clock, for production use.
    pub fn from_clock(settings: BackoffSettings) -> Backoff {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0x9e37_79b9_7f4a_7c15);
        Backoff::new(settings, nanos)
    }

    /// The next delay: the current base with jitter applied, at most `max`; the base then
    /// doubles up to `max`.
    pub fn next_delay(&mut self) -> Duration {
        let base = self.next;
        self.next = (self.next * 2).min(self.settings.max);
        let jitter = self.settings.jitter.clamp(0.0, 1.0);
        let factor = 1.0 - jitter + 2.0 * jitter * self.unit();
        base.mul_f64(factor).min(self.settings.max)
    }

    /// Starts over at `initial` (after a successful connect).
    pub fn reset(&mut self) {
        self.next = self.settings.initial;
    }

    /// A pseudo-random number in `[0, 1)` (xorshift64*: jitter needs spread, not secrecy).
    fn unit(&mut self) -> f64 {
        let mut x = self.rng;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.rng = x;
        (x.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 11) as f64 / (1u64 << 53) as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_to_the_cap_within_jitter() {
        let mut b = Backoff::new(BackoffSettings::default(), 42);
        let bases = [100u64, 200, 400, 800, 800, 800, 800];
        for base in bases {
            let d = b.next_delay().as_secs_f64() * 1000.0;
            let base = base as f64;
            assert!(
                d >= base * 0.8 - 1e-6 && d <= (base * 1.2).min(800.0) + 1e-6,
                "{d} vs {base}"
            );
        }
        b.reset();
        let d = b.next_delay().as_millis();
        assert!((80..=120).contains(&d), "{d}");
    }

    #[test]
    fn jitter_spreads_and_zero_jitter_is_exact() {
        let mut b = Backoff::new(BackoffSettings::default(), 7);
        let mut seen = std::collections::BTreeSet::new();
        for _ in 0..20 {
            b.reset();
            seen.insert(b.next_delay().as_micros());
        }
        assert!(seen.len() > 10, "{seen:?}");
        let exact = BackoffSettings {
            jitter: 0.0,
            ..BackoffSettings::default()
        };
        let mut b = Backoff::new(exact, 7);
        assert_eq!(b.next_delay(), Duration::from_millis(100));
        assert_eq!(b.next_delay(), Duration::from_millis(200));
    }
}
