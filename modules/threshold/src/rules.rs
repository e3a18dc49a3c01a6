//! Rule parsing and evaluation, free of host calls so it is unit-tested on the host.

use serde::Deserialize;
use wedge_guest::{TwinUpdate, TwinValue, UpdateSource, Verdict};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Config {
    #[serde(default)]
    rules: Vec<RuleConfig>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RuleConfig {
    property: String,
    min: Option<f64>,
    max: Option<f64>,
    action: Option<Action>,
    from_unit: Option<String>,
    to_unit: Option<String>,
    decimals: Option<u8>,
    side: Option<Side>,
    source: Option<Source>,
}

#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(rename_all = "lowercase")]
enum Action {
    Reject,
    Clamp,
}

#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(rename_all = "lowercase")]
enum Side {
    Actual,
    Desired,
}

#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(rename_all = "lowercase")]
enum Source {
    Mapper,
    Cloud,
}

/// A linear unit conversion: `to = from * factor + offset`.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Conversion {
    factor: f64,
    offset: f64,
}

#[derive(Debug)]
struct Rule {
    property: String,
    min: Option<f64>,
    max: Option<f64>,
    action: Action,
    conversion: Option<Conversion>,
    decimals: Option<u8>,
    side: Option<Side>,
    source: Option<Source>,
}

/// The parsed rule set.
#[derive(Debug)]
pub struct Rules(Vec<Rule>);

/// A unit: `(name, factor, offset)` into its dimension's base unit
/// (`base = value * factor + offset`).
type Unit = (&'static str, f64, f64);

/// Units by dimension.
const UNITS: &[(&str, &[Unit])] = &[
    (
        "temperature",
        &[
            ("c", 1.0, 0.0),
            ("f", 5.0 / 9.0, -32.0 * 5.0 / 9.0),
            ("k", 1.0, -273.15),
        ],
    ),
    (
        "pressure",
        &[
            ("pa", 1.0, 0.0),
            ("hpa", 100.0, 0.0),
            ("kpa", 1000.0, 0.0),
            ("mpa", 1.0e6, 0.0),
            ("bar", 1.0e5, 0.0),
            ("mbar", 100.0, 0.0),
            ("psi", 6_894.757_293_168_361, 0.0),
            ("atm", 101_325.0, 0.0),
        ],
    ),
    (
        "length",
        &[
            ("m", 1.0, 0.0),
            ("cm", 0.01, 0.0),
            ("mm", 0.001, 0.0),
            ("in", 0.0254, 0.0),
            ("ft", 0.3048, 0.0),
        ],
    ),
];

fn unit(name: &str) -> Option<(&'static str, f64, f64)> {
    let name = name.trim().to_ascii_lowercase();
    let name = match name.as_str() {
        "celsius" | "°c" | "degc" => "c",
        "fahrenheit" | "°f" | "degf" => "f",
        "kelvin" => "k",
        n => n,
    };
    UNITS.iter().find_map(|(dim, units)| {
        units
            .iter()
            .find(|(n, _, _)| *n == name)
            .map(|&(_, f, o)| (*dim, f, o))
    })
}

fn conversion(from: &str, to: &str) -> Result<Conversion, String> {
    let (from_dim, f1, o1) = unit(from).ok_or_else(|| format!("unknown unit {from:?}"))?;
    let (to_dim, f2, o2) = unit(to).ok_or_else(|| format!("unknown unit {to:?}"))?;
    if from_dim != to_dim {
        return Err(format!(
            "cannot convert {from} ({from_dim}) to {to} ({to_dim})"
        ));
    }
    // base = x * f1 + o1;  to = (base - o2) / f2
    Ok(Conversion {
        factor: f1 / f2,
        offset: (o1 - o2) / f2,
    })
}

impl Rules {
    /// Parses and checks the handler's config.
    pub fn from_json(config: &str) -> Result<Rules, String> {
        let config: Config = wedge_guest::parse_config(config)?;
        let mut rules = Vec::with_capacity(config.rules.len());
        for (i, r) in config.rules.into_iter().enumerate() {
            let at = |e: String| format!("rule {} ({}): {e}", i + 1, r.property);
            if r.property.is_empty() {
                return Err(format!("rule {}: property must not be empty", i + 1));
            }
            let conversion = match (&r.from_unit, &r.to_unit) {
                (Some(from), Some(to)) => Some(conversion(from, to).map_err(at)?),
                (None, None) => None,
                _ => return Err(at("from_unit and to_unit go together".to_string())),
            };
            for (name, bound) in [("min", r.min), ("max", r.max)] {
                if bound.is_some_and(|b| !b.is_finite()) {
                    return Err(at(format!("{name} must be a finite number")));
                }
            }
            if let (Some(min), Some(max)) = (r.min, r.max)
                && min > max
            {
                return Err(at(format!("min {min} is above max {max}")));
            }
            if r.min.is_none() && r.max.is_none() {
                if r.action.is_some() {
                    return Err(at("action needs min or max".to_string()));
                }
                if conversion.is_none() {
                    return Err(at("a rule needs min/max or from_unit/to_unit".to_string()));
                }
            }
            if r.decimals.is_some() && conversion.is_none() {
                return Err(at("decimals applies to a unit conversion only".to_string()));
            }
            rules.push(Rule {
                property: r.property,
                min: r.min,
                max: r.max,
                action: r.action.unwrap_or(Action::Reject),
                conversion,
                decimals: r.decimals,
                side: r.side,
                source: r.source,
            });
        }
        Ok(Rules(rules))
    }

    /// Number of rules.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Decides about one update.
    pub fn apply(&self, update: &TwinUpdate) -> Verdict {
        let mut value = update.value.clone();
        for rule in self.0.iter().filter(|r| r.applies_to(update)) {
            match rule.apply(value) {
                Ok(v) => value = v,
                Err(reason) => return Verdict::Reject(reason),
            }
        }
        if value == update.value {
            Verdict::Accept
        } else {
            Verdict::Replace(value)
        }
    }
}

impl Rule {
    fn applies_to(&self, u: &TwinUpdate) -> bool {
        let side = if u.desired {
            Side::Desired
        } else {
            Side::Actual
        };
        let source = match u.source {
            UpdateSource::Mapper => Source::Mapper,
            UpdateSource::Cloud => Source::Cloud,
        };
        self.property == u.property
            && self.side.is_none_or(|s| s == side)
            && self.source.is_none_or(|s| s == source)
    }

    fn apply(&self, value: TwinValue) -> Result<TwinValue, String> {
        let Some(x) = value.as_f64() else {
            return Err(format!(
                "{} must be numeric, got {} {}",
                self.property,
                value.type_name(),
                match &value {
                    TwinValue::Text(s) => format!("{s:?}"),
                    v => v.to_string(),
                }
            ));
        };
        let integer = matches!(value, TwinValue::Integer(_));
        let mut x = x;
        if let Some(c) = self.conversion {
            x = x * c.factor + c.offset;
            if let Some(d) = self.decimals {
                let p = 10f64.powi(i32::from(d));
                x = (x * p).round() / p;
            }
        }
        if let Some(max) = self.max.filter(|&m| x > m) {
            match self.action {
                Action::Reject => {
                    return Err(format!(
                        "{} {} is above the maximum {max}",
                        self.property,
                        fmt_num(x)
                    ));
                }
                Action::Clamp => x = if integer { max.floor() } else { max },
            }
        }
        if let Some(min) = self.min.filter(|&m| x < m) {
            match self.action {
                Action::Reject => {
                    return Err(format!(
                        "{} {} is below the minimum {min}",
                        self.property,
                        fmt_num(x)
                    ));
                }
                Action::Clamp => x = if integer { min.ceil() } else { min },
            }
        }
        Ok(if integer {
            TwinValue::Integer(x.round() as i64)
        } else {
            TwinValue::Float(x)
        })
    }
}

/// Formats a number for a message: no trailing `.0` noise, at most 6 decimals.
fn fmt_num(x: f64) -> String {
    let rounded = (x * 1e6).round() / 1e6;
    format!("{rounded}")
}

#[cfg(test)]
mod tests {
    use super::*;

    const CONFIG: &str = r#"{"rules":[
        {"property":"temperature","min":-40.0,"max":85.0,"action":"reject"},
        {"property":"humidity","min":0,"max":100,"action":"clamp"},
        {"property":"pressure","from_unit":"psi","to_unit":"kpa"},
        {"property":"oven","from_unit":"f","to_unit":"c","decimals":1,"max":250,"action":"clamp"},
        {"property":"setpoint","max":30,"side":"desired"}
    ]}"#;

    fn update(property: &str, value: impl Into<TwinValue>) -> TwinUpdate {
        TwinUpdate {
            device: "default/d1".into(),
            property: property.into(),
            desired: false,
            value: value.into(),
            previous: None,
            source: UpdateSource::Mapper,
        }
    }

    fn rules() -> Rules {
        Rules::from_json(CONFIG).unwrap()
    }

    #[test]
    fn rejects_out_of_range() {
        let r = rules();
        assert_eq!(
            r.apply(&update("temperature", 120)),
            Verdict::Reject("temperature 120 is above the maximum 85".into())
        );
        assert_eq!(
            r.apply(&update("temperature", -50.5)),
            Verdict::Reject("temperature -50.5 is below the minimum -40".into())
        );
        assert_eq!(r.apply(&update("temperature", 85.0)), Verdict::Accept);
        assert_eq!(r.apply(&update("temperature", 21)), Verdict::Accept);
    }

    #[test]
    fn clamps() {
        let r = rules();
        assert_eq!(
            r.apply(&update("humidity", 120.5)),
            Verdict::Replace(TwinValue::Float(100.0))
        );
        assert_eq!(
            r.apply(&update("humidity", -3)),
            Verdict::Replace(TwinValue::Integer(0))
        );
        assert_eq!(r.apply(&update("humidity", 55)), Verdict::Accept);
    }

    #[test]
    fn converts_units() {
        let r = rules();
        let Verdict::Replace(TwinValue::Float(kpa)) = r.apply(&update("pressure", 14.5038)) else {
            panic!("expected a float replacement");
        };
        assert!((kpa - 100.0).abs() < 1e-3, "{kpa}");
        assert_eq!(
            r.apply(&update("pressure", 30)),
            Verdict::Replace(TwinValue::Integer(207))
        );
        assert_eq!(
            r.apply(&update("oven", 212.0)),
            Verdict::Replace(TwinValue::Float(100.0))
        );
        assert_eq!(
            r.apply(&update("oven", 98.6)),
            Verdict::Replace(TwinValue::Float(37.0))
        );
        // converted first, then clamped in the target unit
        assert_eq!(
            r.apply(&update("oven", 600.0)),
            Verdict::Replace(TwinValue::Float(250.0))
        );
        let c = conversion("kpa", "psi").unwrap();
        assert!((100.0 * c.factor + c.offset - 14.5038).abs() < 1e-3);
        let c = conversion("c", "f").unwrap();
        assert!((100.0 * c.factor + c.offset - 212.0).abs() < 1e-9);
        let c = conversion("K", "celsius").unwrap();
        assert!((0.0 * c.factor + c.offset + 273.15).abs() < 1e-9);
    }

    #[test]
    fn non_numeric_rejected_and_unruled_accepted() {
        let r = rules();
        assert_eq!(
            r.apply(&update("temperature", "hot")),
            Verdict::Reject(r#"temperature must be numeric, got string "hot""#.into())
        );
        assert_eq!(
            r.apply(&update("pressure", true)),
            Verdict::Reject("pressure must be numeric, got boolean true".into())
        );
        assert_eq!(r.apply(&update("colour", "red")), Verdict::Accept);
        assert_eq!(r.apply(&update("colour", 1e9)), Verdict::Accept);
    }

    #[test]
    fn filters_by_side() {
        let r = rules();
        assert_eq!(r.apply(&update("setpoint", 40)), Verdict::Accept);
        let mut u = update("setpoint", 40);
        u.desired = true;
        assert_eq!(
            r.apply(&u),
            Verdict::Reject("setpoint 40 is above the maximum 30".into())
        );
    }

    #[test]
    fn bad_configs() {
        for (config, needle) in [
            (
                r#"{"rules":[{"property":"p","min":5,"max":1}]}"#,
                "is above max",
            ),
            (
                r#"{"rules":[{"property":"p","from_unit":"psi","to_unit":"c"}]}"#,
                "cannot convert",
            ),
            (
                r#"{"rules":[{"property":"p","from_unit":"psi"}]}"#,
                "go together",
            ),
            (
                r#"{"rules":[{"property":"p","from_unit":"psi","to_unit":"furlong"}]}"#,
                "unknown unit",
            ),
            (r#"{"rules":[{"property":"p"}]}"#, "needs min/max"),
            (
                r#"{"rules":[{"property":"p","max":1,"action":"explode"}]}"#,
                "unknown variant",
            ),
            (r#"{"rules":[{"property":"p","mx":1}]}"#, "unknown field"),
        ] {
            let err = Rules::from_json(config).unwrap_err();
            assert!(err.contains(needle), "{config}: {err}");
        }
        assert_eq!(Rules::from_json("").unwrap().len(), 0);
        assert_eq!(Rules::from_json("{}").unwrap().len(), 0);
    }
}
