//! Twin values: typed for guests, strings plus a type name for KubeEdge.

use std::fmt;

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
    pub fn from_kubeedge(value: &str, value_type: &str) -> Result<TwinValue, String> {
        match value_type {
            "int" | "integer" => value
                .parse()
                .map(TwinValue::Integer)
                .map_err(|_| "the value is not int or integer".to_owned()),
            "float" => match value.parse::<f64>() {
                Ok(f) if f.is_finite() => Ok(TwinValue::Float(f)),
                _ => Err("the value is not float".to_owned()),
            },
            "boolean" => match value {
                "true" => Ok(TwinValue::Boolean(true)),
                "false" => Ok(TwinValue::Boolean(false)),
                _ => Err("the bool value must be true or false".to_owned()),
            },
            _ => Ok(TwinValue::Text(value.to_owned())),
        }
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
    fn parses_and_prints_kubeedge_forms() {
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
}
