//! Durations written the way Go writes them (`10s`, `1m0s`, `2h45m`, `100ms`).
//!
//! KubeEdge's config stores kubelet periods as Go `time.Duration` strings, and
//! `edgecore --defaultconfig` prints them in Go's canonical form (`5m0s`,
//! `4h0m0s`). A file written by KubeEdge must load unchanged, and a config
//! Wedge prints must read the same in KubeEdge, so both directions follow Go:
//! parsing accepts everything Go's `ParseDuration` accepts (signs, decimal
//! fractions, several units in a row, `us`/`µs`), and printing produces Go's
//! `Duration.String` form.

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A signed duration in nanoseconds, as Go's `time.Duration`.
///
/// Signed because Go accepts `-5s`; kubelet settings treat negative values as
/// zero or reject them, which is validation's business, not the parser's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct GoDuration(i64);

/// Nanoseconds per unit, longest unit names first where prefixes overlap.
const UNITS: &[(&str, i64)] = &[
    ("ns", 1),
    ("us", 1_000),
    ("µs", 1_000),
    ("μs", 1_000),
    ("ms", 1_000_000),
    ("s", 1_000_000_000),
    ("m", 60_000_000_000),
    ("h", 3_600_000_000_000),
];

impl GoDuration {
    /// Zero, which Go prints as `0s`.
    pub const ZERO: GoDuration = GoDuration(0);

    /// `secs` whole seconds.
    pub const fn from_secs(secs: i64) -> GoDuration {
        GoDuration(secs.saturating_mul(1_000_000_000))
    }

    /// `ms` milliseconds.
    pub const fn from_millis(ms: i64) -> GoDuration {
        GoDuration(ms.saturating_mul(1_000_000))
    }

    /// The value in nanoseconds (negative for negative durations).
    pub const fn as_nanos(self) -> i64 {
        self.0
    }

    /// As a `std` duration; a negative value becomes zero, which is how
    /// kubelet treats a negative period.
    pub fn to_std(self) -> Duration {
        Duration::from_nanos(u64::try_from(self.0).unwrap_or(0))
    }

    /// Parses Go's duration syntax: an optional sign, then one or more
    /// `<decimal number><unit>` groups; a bare `0` is allowed.
    pub fn parse(text: &str) -> Result<GoDuration, String> {
        let bad = || {
            format!("invalid duration {text:?}: expected a Go duration such as 10s, 1m0s or 2h45m")
        };
        let (negative, mut rest) = match text.as_bytes().first() {
            Some(b'-') => (true, &text[1..]),
            Some(b'+') => (false, &text[1..]),
            _ => (false, text),
        };
        if rest == "0" {
            return Ok(GoDuration::ZERO);
        }
        if rest.is_empty() {
            return Err(bad());
        }
        let mut total: i128 = 0;
        while !rest.is_empty() {
            let digits_end = rest
                .find(|c: char| !(c.is_ascii_digit() || c == '.'))
                .ok_or_else(bad)?;
            let number = &rest[..digits_end];
            if number.is_empty() || number == "." || number.matches('.').count() > 1 {
                return Err(bad());
            }
            rest = &rest[digits_end..];
            let unit_end = rest
                .find(|c: char| c.is_ascii_digit() || c == '.')
                .unwrap_or(rest.len());
            let unit = &rest[..unit_end];
            let scale = UNITS
                .iter()
                .find(|(name, _)| *name == unit)
                .map(|(_, scale)| *scale)
                .ok_or_else(|| format!("{}: unknown unit {unit:?}", bad()))?;
            rest = &rest[unit_end..];
            total += scaled(number, scale).ok_or_else(bad)?;
            if total > i128::from(i64::MAX) {
                return Err(format!("{}: out of range", bad()));
            }
        }
        let total = i64::try_from(total).map_err(|_| bad())?;
        Ok(GoDuration(if negative { -total } else { total }))
    }
}

/// `number` (decimal, maybe with a fraction) times `scale` nanoseconds.
fn scaled(number: &str, scale: i64) -> Option<i128> {
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    let whole: i128 = if whole.is_empty() {
        0
    } else {
        whole.parse().ok()?
    };
    let mut value = whole.checked_mul(i128::from(scale))?;
    let mut place = i128::from(scale);
    for digit in fraction.chars() {
        place /= 10;
        if place == 0 {
            break;
        }
        value += i128::from(digit.to_digit(10)?) * place;
    }
    Some(value)
}

impl fmt::Display for GoDuration {
    /// Go's `Duration.String`: `0s`; below a second the largest of `ns`, `µs`,
    /// `ms`; else `[<h>h][<m>m]<s>s` with the seconds' fraction trimmed.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let nanos = self.0.unsigned_abs();
        let sign = if self.0 < 0 { "-" } else { "" };
        if nanos == 0 {
            return f.write_str("0s");
        }
        if nanos < 1_000_000_000 {
            let (unit, scale) = if nanos < 1_000 {
                ("ns", 1)
            } else if nanos < 1_000_000 {
                ("µs", 1_000)
            } else {
                ("ms", 1_000_000)
            };
            return write!(f, "{sign}{}{unit}", decimal(nanos, scale));
        }
        let hours = nanos / 3_600_000_000_000;
        let minutes = nanos / 60_000_000_000 % 60;
        let seconds = decimal(nanos % 60_000_000_000, 1_000_000_000);
        f.write_str(sign)?;
        if hours > 0 {
            write!(f, "{hours}h")?;
        }
        if hours > 0 || minutes > 0 {
            write!(f, "{minutes}m")?;
        }
        write!(f, "{seconds}s")
    }
}

/// `value / scale` with the fraction's trailing zeros removed (`1.5`, `2`).
fn decimal(value: u64, scale: u64) -> String {
    let whole = value / scale;
    let fraction = value % scale;
    if fraction == 0 {
        return whole.to_string();
    }
    let width = scale.ilog10() as usize;
    let digits = format!("{fraction:0width$}");
    format!("{whole}.{}", digits.trim_end_matches('0'))
}

impl Serialize for GoDuration {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for GoDuration {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        GoDuration::parse(&text).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(text: &str) -> GoDuration {
        GoDuration::parse(text).unwrap()
    }

    #[test]
    fn parses_what_kubeedge_writes() {
        assert_eq!(d("0s"), GoDuration::ZERO);
        assert_eq!(d("0"), GoDuration::ZERO);
        assert_eq!(d("10s"), GoDuration::from_secs(10));
        assert_eq!(d("1m0s"), GoDuration::from_secs(60));
        assert_eq!(d("5m0s"), GoDuration::from_secs(300));
        assert_eq!(d("4h0m0s"), GoDuration::from_secs(4 * 3600));
        assert_eq!(d("2h45m"), GoDuration::from_secs(2 * 3600 + 45 * 60));
        assert_eq!(d("100ms"), GoDuration::from_millis(100));
        assert_eq!(d("1.5s"), GoDuration::from_millis(1500));
        assert_eq!(d(".5m"), GoDuration::from_secs(30));
        assert_eq!(d("-3s"), GoDuration::from_secs(-3));
        assert_eq!(d("+3s"), GoDuration::from_secs(3));
        assert_eq!(d("1us").as_nanos(), 1_000);
        assert_eq!(d("1µs").as_nanos(), 1_000);
        assert_eq!(d("7ns").as_nanos(), 7);
        assert_eq!(d("1h1m1s1ms").as_nanos(), 3_661_001_000_000);
    }

    #[test]
    fn refuses_what_go_refuses() {
        for bad in [
            "",
            "10",
            "s",
            "1x",
            "1.2.3s",
            "-",
            "1 s",
            "ten seconds",
            "9999999999h",
        ] {
            assert!(GoDuration::parse(bad).is_err(), "{bad:?} was accepted");
        }
        assert!(
            GoDuration::parse("1d")
                .unwrap_err()
                .contains("unknown unit \"d\"")
        );
    }

    #[test]
    fn prints_like_go() {
        for (text, want) in [
            ("0s", "0s"),
            ("10s", "10s"),
            ("60s", "1m0s"),
            ("300s", "5m0s"),
            ("4h", "4h0m0s"),
            ("2h45m", "2h45m0s"),
            ("100ms", "100ms"),
            ("1.5s", "1.5s"),
            ("1500us", "1.5ms"),
            ("7ns", "7ns"),
            ("-90s", "-1m30s"),
        ] {
            assert_eq!(d(text).to_string(), want, "{text}");
            assert_eq!(d(want), d(text), "{want} round-trips");
        }
    }

    #[test]
    fn negative_is_zero_as_std() {
        assert_eq!(d("-5s").to_std(), Duration::ZERO);
        assert_eq!(d("2m").to_std(), Duration::from_secs(120));
    }
}
