//! Kubernetes resource quantities (`100Mi`, `0`, `1.5`): as config values ([`Quantity`], kept
//! as written) and as numbers ([`bytes`], [`nano_cpus`]). The parsers live here so that
//! config validation and edged, which acts on the values, read a quantity the same way.

use std::fmt;

use serde::de::{self, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A quantity kept as written. KubeEdge writes some as strings (`"0"`) and
/// YAML lets users write plain numbers; both load, and Wedge acts on none of
/// them, so the text is all that is needed.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Quantity(pub String);

impl From<&str> for Quantity {
    fn from(text: &str) -> Self {
        Quantity(text.to_owned())
    }
}

impl fmt::Display for Quantity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl Serialize for Quantity {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for Quantity {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct QuantityVisitor;
        impl Visitor<'_> for QuantityVisitor {
            type Value = Quantity;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a quantity such as 100Mi or 0")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Quantity, E> {
                Ok(Quantity(v.to_owned()))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Quantity, E> {
                Ok(Quantity(v.to_string()))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Quantity, E> {
                Ok(Quantity(v.to_string()))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Quantity, E> {
                Ok(Quantity(v.to_string()))
            }
        }
        deserializer.deserialize_any(QuantityVisitor)
    }
}

/// Bytes of a memory quantity: a plain number, or with a binary (`Ki`, `Mi`, `Gi`, `Ti`) or
/// decimal (`k`, `M`, `G`, `T`) suffix; fractions are allowed (`1.5Gi`).
pub fn bytes(q: &str) -> Result<i64, String> {
    const UNITS: [(&str, f64); 8] = [
        ("Ki", 1024.0),
        ("Mi", 1024.0 * 1024.0),
        ("Gi", 1024.0 * 1024.0 * 1024.0),
        ("Ti", 1024.0 * 1024.0 * 1024.0 * 1024.0),
        ("k", 1e3),
        ("M", 1e6),
        ("G", 1e9),
        ("T", 1e12),
    ];
    let (number, scale) = UNITS
        .iter()
        .find_map(|(suffix, scale)| q.strip_suffix(suffix).map(|n| (n, *scale)))
        .unwrap_or((q, 1.0));
    let value = parse_number(number, q)? * scale;
    if value < 1.0 || value > i64::MAX as f64 {
        return Err(format!("{q:?} is not a usable memory quantity"));
    }
    Ok(value as i64)
}

/// Nano-CPUs of a CPU quantity: cores (`1`, `0.5`) or millicores (`250m`).
pub fn nano_cpus(q: &str) -> Result<i64, String> {
    let (number, scale) = match q.strip_suffix('m') {
        Some(n) => (n, 1e6),
        None => (q, 1e9),
    };
    let value = parse_number(number, q)? * scale;
    if !(1e6..=1e15).contains(&value) {
        return Err(format!("{q:?} is not a usable CPU quantity"));
    }
    Ok(value as i64)
}

fn parse_number(number: &str, whole: &str) -> Result<f64, String> {
    match number.parse::<f64>() {
        Ok(v) if v.is_finite() && !number.starts_with(['+', '-']) => Ok(v),
        _ => Err(format!("{whole:?} is not a quantity")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory() {
        assert_eq!(bytes("64Mi"), Ok(64 * 1024 * 1024));
        assert_eq!(bytes("1.5Gi"), Ok(1536 * 1024 * 1024));
        assert_eq!(bytes("128M"), Ok(128_000_000));
        assert_eq!(bytes("1000"), Ok(1000));
        assert!(bytes("lots").is_err());
        assert!(bytes("-1Mi").is_err());
        assert!(bytes("0").is_err());
    }

    #[test]
    fn cpu() {
        assert_eq!(nano_cpus("250m"), Ok(250_000_000));
        assert_eq!(nano_cpus("2"), Ok(2_000_000_000));
        assert_eq!(nano_cpus("0.5"), Ok(500_000_000));
        assert!(nano_cpus("fast").is_err());
        assert!(nano_cpus("0").is_err());
    }
}
