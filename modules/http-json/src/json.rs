//! JSON pointers and the conversion between JSON values and twin values.

use serde_json::{Map, Value};
use wedge_guest::{TwinValue, ValueType};

/// Checks a JSON pointer (RFC 6901): empty, or `/`-separated reference tokens.
pub fn check_pointer(pointer: &str) -> Result<(), String> {
    if pointer.is_empty() || pointer.starts_with('/') {
        Ok(())
    } else {
        Err(format!(
            "pointer {pointer:?} must be empty or start with '/'"
        ))
    }
}

/// The value at `pointer` of `doc`.
pub fn read<'a>(doc: &'a Value, pointer: &str) -> Result<&'a Value, String> {
    doc.pointer(pointer)
        .ok_or_else(|| format!("the answer has no value at {pointer:?}"))
}

/// `value` converted to a twin value of type `kind` (numbers to `int` only when whole, strings
/// holding numbers or booleans parsed).
pub fn to_twin(value: &Value, kind: ValueType) -> Result<TwinValue, String> {
    let wrong = || format!("{value} is not a {}", kind.name());
    match kind {
        ValueType::Float => match value {
            Value::Number(n) => n.as_f64().map(TwinValue::Float).ok_or_else(wrong),
            Value::String(s) => s
                .trim()
                .parse::<f64>()
                .ok()
                .filter(|f| f.is_finite())
                .map(TwinValue::Float)
                .ok_or_else(wrong),
            _ => Err(wrong()),
        },
        ValueType::Int => match value {
            Value::Number(n) => n
                .as_i64()
                .or_else(|| {
                    n.as_f64()
                        .filter(|f| f.fract() == 0.0 && f.abs() < 9.0e15)
                        .map(|f| f as i64)
                })
                .map(TwinValue::Integer)
                .ok_or_else(wrong),
            Value::String(s) => s
                .trim()
                .parse::<i64>()
                .map(TwinValue::Integer)
                .map_err(|_| wrong()),
            _ => Err(wrong()),
        },
        ValueType::Boolean => match value {
            Value::Bool(b) => Ok(TwinValue::Boolean(*b)),
            Value::String(s) if s.eq_ignore_ascii_case("true") => Ok(TwinValue::Boolean(true)),
            Value::String(s) if s.eq_ignore_ascii_case("false") => Ok(TwinValue::Boolean(false)),
            _ => Err(wrong()),
        },
        _ => Ok(TwinValue::Text(match value {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        })),
    }
}

/// A twin value as JSON, following the property's type.
pub fn from_twin(value: &TwinValue, kind: ValueType) -> Result<Value, String> {
    let wrong = || format!("{value} is not a {}", kind.name());
    Ok(match kind {
        ValueType::Float => {
            let f = value.as_f64().ok_or_else(wrong)?;
            serde_json::Number::from_f64(f)
                .map(Value::Number)
                .ok_or_else(wrong)?
        }
        ValueType::Int => Value::from(value.as_i64().ok_or_else(wrong)?),
        ValueType::Boolean => Value::Bool(value.as_bool().ok_or_else(wrong)?),
        _ => Value::String(value.to_string()),
    })
}

/// An object with `value` at `pointer` (the value itself for an empty pointer).
pub fn place(pointer: &str, value: Value) -> Result<Value, String> {
    check_pointer(pointer)?;
    if pointer.is_empty() {
        return Ok(value);
    }
    let tokens: Vec<String> = pointer[1..]
        .split('/')
        .map(|t| t.replace("~1", "/").replace("~0", "~"))
        .collect();
    let mut out = value;
    for token in tokens.iter().rev() {
        let mut object = Map::new();
        object.insert(token.clone(), out);
        out = Value::Object(object);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn values_are_read_at_their_pointer_and_typed() {
        let doc =
            json!({"sensors": {"temperature": 21.5, "count": "7", "on": true}, "mode": "eco"});
        let at = |p: &str| read(&doc, p).unwrap();
        assert_eq!(
            to_twin(at("/sensors/temperature"), ValueType::Float),
            Ok(TwinValue::Float(21.5))
        );
        assert_eq!(
            to_twin(at("/sensors/count"), ValueType::Int),
            Ok(TwinValue::Integer(7))
        );
        assert_eq!(
            to_twin(at("/sensors/on"), ValueType::Boolean),
            Ok(TwinValue::Boolean(true))
        );
        assert_eq!(
            to_twin(at("/mode"), ValueType::Text),
            Ok(TwinValue::Text("eco".into()))
        );
        assert!(to_twin(at("/sensors/temperature"), ValueType::Int).is_err());
        assert!(read(&doc, "/nope").unwrap_err().contains("/nope"));
    }

    #[test]
    fn written_values_are_placed_at_their_pointer() {
        assert_eq!(
            place("/setpoint", json!(44)).unwrap(),
            json!({"setpoint": 44})
        );
        assert_eq!(
            place("/a/b~1c", json!(true)).unwrap(),
            json!({"a": {"b/c": true}})
        );
        assert_eq!(place("", json!(1.5)).unwrap(), json!(1.5));
        assert_eq!(
            from_twin(&TwinValue::Integer(3), ValueType::Float).unwrap(),
            json!(3.0)
        );
        assert!(place("setpoint", json!(1)).is_err());
    }
}
