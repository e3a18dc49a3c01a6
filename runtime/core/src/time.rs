//! Time helpers: KubeEdge stamps messages and twin values in Unix milliseconds, and writes
//! Kubernetes times (last online, lease renewals, node heartbeats) as RFC 3339.

use std::time::{SystemTime, UNIX_EPOCH};

/// Now, in milliseconds since the Unix epoch.
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// Unix ms as UTC RFC 3339 with whole seconds, as Go's `time.RFC3339` writes it
/// (`2023-11-14T22:13:20Z`). Milliseconds are dropped (rounded down, also before 1970).
pub fn rfc3339_utc(unix_ms: i64) -> String {
    let secs = unix_ms.div_euclid(1000);
    let (days, day_secs) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let (year, month, day) = civil_from_days(days);
    // Go pads the year's magnitude to four digits and puts the sign in front.
    let year = if year < 0 {
        format!("-{:04}", -year)
    } else {
        format!("{year:04}")
    };
    format!(
        "{year}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        day_secs / 3600,
        day_secs % 3600 / 60,
        day_secs % 60
    )
}

/// Proleptic Gregorian `(year, month, day)` of a day count since 1970-01-01, computed over
/// 400-year eras (146 097 days each) with years starting in March, so that the leap day falls
/// at the end of a year.
fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468; // days since 0000-03-01
    let era = z.div_euclid(146_097);
    let day_of_era = z.rem_euclid(146_097);
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_from_march = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * month_from_march + 2) / 5 + 1;
    let month = if month_from_march < 10 {
        month_from_march + 3
    } else {
        month_from_march - 9
    };
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    (year, month, day)
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
    }
}
