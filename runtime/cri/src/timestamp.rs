//! RFC 3339 timestamps, as CRI log lines carry them and as `kubectl logs --since-time` sends
//! them. Our own few lines rather than a date crate: only this one format is needed.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Parses an RFC 3339 timestamp with optional fractional seconds (up to nanoseconds; further
/// digits are dropped) and a `Z` or `±hh:mm` offset, e.g. `2024-05-01T10:20:30.123456789Z`
/// (what containerd writes, Go's RFC3339Nano). `None` when it is not one.
pub fn parse_rfc3339(text: &str) -> Option<SystemTime> {
    let b = text.as_bytes();
    if b.len() < 20 {
        return None;
    }
    let year = number(&b[0..4])?;
    let month = number(&b[5..7])?;
    let day = number(&b[8..10])?;
    let hour = number(&b[11..13])?;
    let minute = number(&b[14..16])?;
    let second = number(&b[17..19])?;
    if b[4] != b'-'
        || b[7] != b'-'
        || !matches!(b[10], b'T' | b't')
        || b[13] != b':'
        || b[16] != b':'
    {
        return None;
    }
    if !(1..=12).contains(&month)
        || day < 1
        || day > days_in_month(year, month)
        || hour > 23
        || minute > 59
        || second > 59
    {
        return None;
    }
    let mut rest = &b[19..];
    let mut nanos = 0u32;
    if let Some(fraction) = rest.strip_prefix(b".") {
        let digits = fraction.iter().take_while(|c| c.is_ascii_digit()).count();
        if digits == 0 {
            return None;
        }
        for (i, digit) in fraction[..digits].iter().enumerate().take(9) {
            nanos += u32::from(digit - b'0') * 10u32.pow(8 - i as u32);
        }
        rest = &fraction[digits..];
    }
    let offset: i64 = match rest {
        [b'Z' | b'z'] => 0,
        [sign @ (b'+' | b'-'), h1, h2, b':', m1, m2] => {
            let hours = number(&[*h1, *h2])?;
            let minutes = number(&[*m1, *m2])?;
            if hours > 23 || minutes > 59 {
                return None;
            }
            let offset = i64::from(hours * 3600 + minutes * 60);
            if *sign == b'-' { -offset } else { offset }
        }
        _ => return None,
    };
    let days = days_from_civil(i64::from(year), month, day);
    let secs = days * 86_400 + i64::from(hour * 3600 + minute * 60 + second) - offset;
    let time = if secs >= 0 {
        UNIX_EPOCH.checked_add(Duration::from_secs(secs.unsigned_abs()))?
    } else {
        UNIX_EPOCH.checked_sub(Duration::from_secs(secs.unsigned_abs()))?
    };
    time.checked_add(Duration::from_nanos(u64::from(nanos)))
}

/// ASCII digits as a number; `None` for anything else.
fn number(digits: &[u8]) -> Option<u32> {
    digits.iter().try_fold(0u32, |n, c| {
        c.is_ascii_digit().then(|| n * 10 + u32::from(c - b'0'))
    })
}

fn days_in_month(year: u32, month: u32) -> u32 {
    match month {
        2 if year.is_multiple_of(4) && (!year.is_multiple_of(100) || year.is_multiple_of(400)) => {
            29
        }
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days from 1970-01-01 to the given (proleptic Gregorian) date.
fn days_from_civil(year: i64, month: u32, day: u32) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let year_of_era = year - era * 400;
    let month = i64::from(month);
    let day_of_year = (153 * (month + if month > 2 { -3 } else { 9 }) + 2) / 5 + i64::from(day) - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(secs: u64, nanos: u32) -> SystemTime {
        UNIX_EPOCH + Duration::new(secs, nanos)
    }

    #[test]
    fn utc_with_nanoseconds() {
        // date -u -d 2016-10-06T00:17:09Z +%s -> 1475713029
        assert_eq!(
            parse_rfc3339("2016-10-06T00:17:09.669794202Z"),
            Some(at(1_475_713_029, 669_794_202))
        );
        assert_eq!(parse_rfc3339("1970-01-01T00:00:00Z"), Some(UNIX_EPOCH));
        assert_eq!(
            parse_rfc3339("2016-10-06T00:17:09.5Z"),
            Some(at(1_475_713_029, 500_000_000))
        );
    }

    #[test]
    fn offsets_and_leap_days() {
        assert_eq!(
            parse_rfc3339("2016-10-06T02:17:09+02:00"),
            Some(at(1_475_713_029, 0))
        );
        assert_eq!(
            parse_rfc3339("2016-10-05T19:47:09-04:30"),
            Some(at(1_475_713_029, 0))
        );
        // date -u -d 2024-02-29T12:00:00Z +%s -> 1709208000
        assert_eq!(
            parse_rfc3339("2024-02-29T12:00:00Z"),
            Some(at(1_709_208_000, 0))
        );
        assert_eq!(parse_rfc3339("2023-02-29T12:00:00Z"), None);
        assert_eq!(
            parse_rfc3339("1969-12-31T23:59:59Z"),
            UNIX_EPOCH.checked_sub(Duration::from_secs(1))
        );
    }

    #[test]
    fn extra_fraction_digits_are_dropped() {
        assert_eq!(
            parse_rfc3339("2016-10-06T00:17:09.1234567891Z"),
            Some(at(1_475_713_029, 123_456_789))
        );
    }

    #[test]
    fn not_timestamps() {
        for text in [
            "",
            "2016-10-06",
            "2016-10-06T00:17:09",
            "2016-10-06 00:17:09Z",
            "2016-13-06T00:17:09Z",
            "2016-10-06T24:00:00Z",
            "2016-10-06T00:17:60Z",
            "2016-10-06T00:17:09.Z",
            "2016-10-06T00:17:09+0200",
            "2016-10-06T00:17:09Zjunk",
            "2016-1x-06T00:17:09Z",
            "２016-10-06T00:17:09Z",
        ] {
            assert_eq!(parse_rfc3339(text), None, "{text:?}");
        }
    }
}
