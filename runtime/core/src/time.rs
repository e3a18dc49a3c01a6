//! Time helpers: KubeEdge stamps messages and twin values in Unix milliseconds, and writes
//! Kubernetes times (last online, lease renewals, node heartbeats) as RFC 3339.

use std::time::{SystemTime, UNIX_EPOCH};

use time::UtcDateTime;

/// Now, in milliseconds since the Unix epoch.
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// Unix ms as UTC RFC 3339 with whole seconds, as Go's `time.RFC3339` writes it
/// (`2023-11-14T22:13:20Z`). Milliseconds are dropped (rounded down, also before 1970).
///
/// The calendar is the `time` crate's (proleptic Gregorian). An instant outside what it
/// represents (years -9999..=9999 unless its `large-dates` feature is on) is clamped to the
/// nearest one it does, so `i64::MIN` gives `-9999-01-01T00:00:00Z` and `i64::MAX`
/// `9999-12-31T23:59:59Z`; no real clock or Kubernetes timestamp comes near those years.
pub fn rfc3339_utc(unix_ms: i64) -> String {
    let secs = unix_ms.div_euclid(1000);
    let t = UtcDateTime::from_unix_timestamp(secs).unwrap_or(if secs < 0 {
        UtcDateTime::MIN
    } else {
        UtcDateTime::MAX
    });
    // Written by hand rather than with a format description: Go pads the year's magnitude to
    // four digits and puts a sign in front only when negative (`time`'s `[year]` would add `+`
    // past 9999 with `large-dates`).
    let year = t.year();
    let sign = if year < 0 { "-" } else { "" };
    format!(
        "{sign}{:04}-{:02}-{:02}T{:02}:{:02}:{:02}Z",
        year.unsigned_abs(),
        u8::from(t.month()),
        t.day(),
        t.hour(),
        t.minute(),
        t.second()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_like_go() {
        assert_eq!(rfc3339_utc(1700000000000), "2023-11-14T22:13:20Z");
        assert_eq!(rfc3339_utc(1700000000999), "2023-11-14T22:13:20Z");
        assert_eq!(rfc3339_utc(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339_utc(-1), "1969-12-31T23:59:59Z");
        assert_eq!(rfc3339_utc(951782400000), "2000-02-29T00:00:00Z");
        assert_eq!(rfc3339_utc(951868799000), "2000-02-29T23:59:59Z");
        assert_eq!(rfc3339_utc(4107542400000), "2100-03-01T00:00:00Z");
        assert_eq!(rfc3339_utc(1709164800000), "2024-02-29T00:00:00Z");
        assert_eq!(rfc3339_utc(253402300799000), "9999-12-31T23:59:59Z");
        assert_eq!(rfc3339_utc(-62135596800000), "0001-01-01T00:00:00Z");
        assert_eq!(rfc3339_utc(-62167219200000), "0000-01-01T00:00:00Z");
        assert_eq!(rfc3339_utc(-62167219201000), "-0001-12-31T23:59:59Z");
        assert_eq!(rfc3339_utc(-62167219201001), "-0001-12-31T23:59:58Z");
    }

    #[test]
    fn rfc3339_clamps_outside_the_calendar() {
        let (min, max) = (UtcDateTime::MIN, UtcDateTime::MAX);
        assert_eq!(
            rfc3339_utc(i64::MIN),
            rfc3339_utc(min.unix_timestamp() * 1000)
        );
        assert_eq!(
            rfc3339_utc(i64::MAX),
            rfc3339_utc(max.unix_timestamp() * 1000)
        );
        // Without `time`'s `large-dates` (nothing in the tree turns it on) the range ends at
        // year 9999 either way.
        if max.year() == 9999 {
            assert_eq!(rfc3339_utc(i64::MIN), "-9999-01-01T00:00:00Z");
            assert_eq!(rfc3339_utc(i64::MAX), "9999-12-31T23:59:59Z");
            assert_eq!(rfc3339_utc(-377705116800000), "-9999-01-01T00:00:00Z");
            assert_eq!(rfc3339_utc(253402300799999), "9999-12-31T23:59:59Z");
        }
    }
}
