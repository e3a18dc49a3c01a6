//! KubeEdge's rules for twin keys, values and types, with its exact error strings: one
//! definition for devicetwin (what mappers and the cloud send), the Wasm host (what handlers
//! return) and DMI (what KubeEdge mappers report), so the three never disagree.

use std::fmt;

/// Reason for a bad key.
pub const BAD_KEY: &str = "The key of twin must only include upper or lowercase letters, number, english, and special letter - _ . , : / @ # and the length of key should be less than 128 bytes";
/// Reason for a bad value.
pub const BAD_VALUE: &str = "The value of twin must only include upper or lowercase letters, number, english, and special letter - _ . , : / @ # and the length of value should be less than 512 bytes";

/// `[A-Za-z0-9_.,:/@#-]`: the characters KubeEdge allows in keys and values.
fn allowed(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | ',' | ':' | '/' | '@' | '#')
}

/// `^[a-zA-Z0-9-_.,:/@#]{1,128}$`.
pub fn valid_key(key: &str) -> bool {
    (1..=128).contains(&key.len()) && key.chars().all(allowed)
}

/// Non-empty values must match `^[a-zA-Z0-9-_.,:/@#]{1,512}$`; the empty value is allowed.
pub fn valid_value(value: &str) -> bool {
    value.is_empty() || (value.len() <= 512 && value.chars().all(allowed))
}

/// Checks `value` against the twin's type (stored type, or the request's for new or deleted
/// twins; `""` means `string`). Returns KubeEdge's reason on failure.
pub fn check_type(value: &str, twin_type: &str) -> Result<(), &'static str> {
    match twin_type {
        "" | "string" | "deleted" => Ok(()),
        "int" | "integer" => value
            .parse::<i64>()
            .map(|_| ())
            .map_err(|_| "the value is not int or integer"),
        "float" => match value.parse::<f64>() {
            Ok(f) if f.is_finite() && go_float_syntax(value) => Ok(()),
            _ => Err("the value is not float"),
        },
        "boolean" => match value {
            "true" | "false" => Ok(()),
            _ => Err("the bool value must be true or false"),
        },
        _ => Err("the value type is not allowed"),
    }
}

/// Rust accepts a few spellings Go's `ParseFloat` does not (`inf`, `nan`, `infinity`), which
/// the finite check already refuses; the rest (decimal and exponent forms) agree.
fn go_float_syntax(value: &str) -> bool {
    !value.is_empty() && !value.contains(|c: char| c.is_ascii_alphabetic() && c != 'e' && c != 'E')
}

/// A typed twin value, as guests see it (`wedge:device/types.twin-value`).
#[derive(Debug, Clone, PartialEq)]
pub enum TwinValue {
    /// KubeEdge type `string` (and any type Wedge does not know).
    Text(String),
    /// KubeEdge types `int` / `integer`.
    Integer(i64),
    /// KubeEdge type `float`.
    Float(f64),
    /// KubeEdge type `boolean`.
    Boolean(bool),
}

impl TwinValue {
    /// Parses KubeEdge's string form given the twin's declared type. Errors use KubeEdge's
    /// wording, since they end up in twin update results.
    ///
    /// The check is [`check_type`]'s, so a value devicetwin stores is a value guests can read
    /// and the other way round. Types other than `int`, `integer`, `float` and `boolean` are
    /// text.
    pub fn from_kubeedge(value: &str, value_type: &str) -> Result<TwinValue, String> {
        let typed = matches!(value_type, "int" | "integer" | "float" | "boolean");
        if !typed {
            return Ok(TwinValue::Text(value.to_owned()));
        }
        check_type(value, value_type).map_err(str::to_owned)?;
        // check_type accepted it, so it parses.
        let not = || String::from("the value does not parse as its type");
        Ok(match value_type {
            "float" => TwinValue::Float(value.parse().map_err(|_| not())?),
            "boolean" => TwinValue::Boolean(value == "true"),
            _ => TwinValue::Integer(value.parse().map_err(|_| not())?),
        })
    }

    /// KubeEdge's type name for this value.
    pub fn kubeedge_type(&self) -> &'static str {
        match self {
            TwinValue::Text(_) => "string",
            TwinValue::Integer(_) => "int",
            TwinValue::Float(_) => "float",
            TwinValue::Boolean(_) => "boolean",
        }
    }

    /// KubeEdge's string form.
    pub fn to_kubeedge(&self) -> String {
        self.to_string()
    }
}

impl fmt::Display for TwinValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TwinValue::Text(s) => f.write_str(s),
            TwinValue::Integer(i) => write!(f, "{i}"),
            TwinValue::Float(x) => write!(f, "{x}"),
            TwinValue::Boolean(b) => write!(f, "{b}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_and_values() {
        assert!(valid_key("temperature"));
        assert!(valid_key("a-b_c.d,e:f/g@h#1"));
        assert!(!valid_key(""));
        assert!(!valid_key(&"k".repeat(129)));
        assert!(valid_key(&"k".repeat(128)));
        assert!(!valid_key("has space"));
        assert!(!valid_key("ünïcode"));
        assert!(valid_value(""));
        assert!(valid_value(&"v".repeat(512)));
        assert!(!valid_value(&"v".repeat(513)));
        assert!(!valid_value("semi;colon"));
    }

    #[test]
    fn types_with_kubeedge_reasons() {
        assert_eq!(check_type("22", "int"), Ok(()));
        assert_eq!(check_type("-9223372036854775808", "integer"), Ok(()));
        assert_eq!(
            check_type("hot", "int"),
            Err("the value is not int or integer")
        );
        assert_eq!(
            check_type("9223372036854775808", "int"),
            Err("the value is not int or integer")
        );
        assert_eq!(check_type("2.5e3", "float"), Ok(()));
        assert_eq!(check_type("inf", "float"), Err("the value is not float"));
        assert_eq!(check_type("NaN", "float"), Err("the value is not float"));
        assert_eq!(check_type("1e400", "float"), Err("the value is not float"));
        assert_eq!(check_type("true", "boolean"), Ok(()));
        assert_eq!(
            check_type("True", "boolean"),
            Err("the bool value must be true or false")
        );
        assert_eq!(check_type("anything", ""), Ok(()));
        assert_eq!(check_type("anything", "deleted"), Ok(()));
        assert_eq!(
            check_type("1", "double"),
            Err("the value type is not allowed")
        );
        assert_eq!(
            check_type("1", "bytes"),
            Err("the value type is not allowed")
        );
    }

    #[test]
    fn twin_values_parse_and_print_kubeedge_forms() {
        assert_eq!(
            TwinValue::from_kubeedge("22", "int"),
            Ok(TwinValue::Integer(22))
        );
        assert_eq!(
            TwinValue::from_kubeedge("2.5", "float"),
            Ok(TwinValue::Float(2.5))
        );
        assert_eq!(
            TwinValue::from_kubeedge("true", "boolean"),
            Ok(TwinValue::Boolean(true))
        );
        assert_eq!(
            TwinValue::from_kubeedge("hot", "string"),
            Ok(TwinValue::Text("hot".into()))
        );
        assert_eq!(
            TwinValue::from_kubeedge("hot", "int").unwrap_err(),
            "the value is not int or integer"
        );
        assert_eq!(
            TwinValue::from_kubeedge("inf", "float").unwrap_err(),
            "the value is not float"
        );
        assert_eq!(
            TwinValue::from_kubeedge("yes", "boolean").unwrap_err(),
            "the bool value must be true or false"
        );
        assert_eq!(TwinValue::Float(25.0).to_kubeedge(), "25");
        assert_eq!(TwinValue::Float(2.5).kubeedge_type(), "float");
    }

    #[test]
    fn twin_values_use_the_same_check_as_the_twins() {
        // Rust parses these as floats; KubeEdge's rules (Go's ParseFloat) do not.
        for value in ["inf", "NaN", "infinity", "1e400"] {
            assert_eq!(check_type(value, "float"), Err("the value is not float"));
            assert!(TwinValue::from_kubeedge(value, "float").is_err(), "{value}");
        }
        assert_eq!(
            TwinValue::from_kubeedge("anything", "double"),
            Ok(TwinValue::Text("anything".into()))
        );
    }
}
