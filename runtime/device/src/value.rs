//! KubeEdge's rules for twin keys, values and types, with its exact error strings: one
//! definition for devicetwin (what mappers and the cloud send), the Wasm host (what handlers
//! return) and DMI (what KubeEdge mappers report), so the three never disagree.

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
}
