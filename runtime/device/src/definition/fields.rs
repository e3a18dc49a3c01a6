//! Reading a Kubernetes object field by field, so every error names the field's path
//! (`spec.properties[1].collectCycle: expected an integer, found a string`).
//!
//! The same code reads the cloud's JSON and YAML files: YAML documents are first turned into
//! JSON values. Missing and `null` fields are treated alike, as Go's decoder does.

use serde_json::{Map, Value};

use super::DefinitionError;

/// A field of an object (or the object itself), with the path that leads to it.
pub(crate) struct Field<'a> {
    value: Option<&'a Value>,
    path: String,
}

fn describe(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "a mapping",
    }
}

impl<'a> Field<'a> {
    /// The whole object.
    pub(crate) fn root(value: &'a Value) -> Field<'a> {
        Field {
            value: Some(value),
            path: String::new(),
        }
    }

    /// An error about this field.
    pub(crate) fn error(&self, reason: impl std::fmt::Display) -> DefinitionError {
        if self.path.is_empty() {
            DefinitionError::new(reason.to_string())
        } else {
            DefinitionError::new(format!("{}: {reason}", self.path))
        }
    }

    fn wrong(&self, expected: &str) -> DefinitionError {
        let found = self.value.map(describe).unwrap_or("nothing");
        self.error(format!("expected {expected}, found {found}"))
    }

    /// The value, `None` when missing or `null`.
    fn present(&self) -> Option<&'a Value> {
        self.value.filter(|v| !v.is_null())
    }

    /// The mapping this field holds (`None` when missing or `null`).
    pub(crate) fn mapping(&self) -> Result<Option<&'a Map<String, Value>>, DefinitionError> {
        match self.present() {
            None => Ok(None),
            Some(Value::Object(map)) => Ok(Some(map)),
            Some(_) => Err(self.wrong("a mapping")),
        }
    }

    /// A member of this mapping. A field that is not a mapping has no members; asking for one
    /// is an error.
    pub(crate) fn get(&self, name: &str) -> Result<Field<'a>, DefinitionError> {
        let value = self.mapping()?.and_then(|m| m.get(name));
        let path = if self.path.is_empty() {
            name.to_owned()
        } else {
            format!("{}.{name}", self.path)
        };
        Ok(Field { value, path })
    }

    /// The items of this list (none when missing or `null`).
    pub(crate) fn items(&self) -> Result<Vec<Field<'a>>, DefinitionError> {
        match self.present() {
            None => Ok(Vec::new()),
            Some(Value::Array(items)) => Ok(items
                .iter()
                .enumerate()
                .map(|(i, value)| Field {
                    value: Some(value),
                    path: format!("{}[{i}]", self.path),
                })
                .collect()),
            Some(_) => Err(self.wrong("a list")),
        }
    }

    /// A string field, `""` when missing or `null`.
    pub(crate) fn string(&self) -> Result<String, DefinitionError> {
        match self.present() {
            None => Ok(String::new()),
            Some(Value::String(s)) => Ok(s.clone()),
            Some(_) => Err(self.wrong("a string")),
        }
    }

    /// A string field that must be present and non-empty.
    pub(crate) fn required_string(&self) -> Result<String, DefinitionError> {
        let s = self.string()?;
        if s.is_empty() {
            return Err(self.error("required"));
        }
        Ok(s)
    }

    /// A scalar as text: strings as they are, numbers and booleans in their usual spelling.
    /// YAML readers write `value: 30` unquoted; the API's type is a string either way.
    pub(crate) fn scalar_text(&self) -> Result<Option<String>, DefinitionError> {
        match self.present() {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(Value::Number(n)) => Ok(Some(n.to_string())),
            Some(Value::Bool(b)) => Ok(Some(b.to_string())),
            Some(_) => Err(self.wrong("a string")),
        }
    }

    /// A non-negative integer field, 0 when missing or `null`.
    pub(crate) fn unsigned(&self) -> Result<u64, DefinitionError> {
        match self.present() {
            None => Ok(0),
            Some(Value::Number(n)) => n
                .as_u64()
                .ok_or_else(|| self.error(format!("expected a non-negative integer, found {n}"))),
            Some(_) => Err(self.wrong("an integer")),
        }
    }

    /// A boolean field, false when missing or `null`.
    pub(crate) fn boolean(&self) -> Result<bool, DefinitionError> {
        match self.present() {
            None => Ok(false),
            Some(Value::Bool(b)) => Ok(*b),
            Some(_) => Err(self.wrong("a boolean")),
        }
    }

    /// A free-form mapping (`configData`) as compact JSON text, `{}` when missing or `null`.
    pub(crate) fn json_text(&self) -> Result<String, DefinitionError> {
        match self.mapping()? {
            None => Ok("{}".to_owned()),
            Some(map) => Ok(Value::Object(map.clone()).to_string()),
        }
    }

    /// A `map[string]string` field (labels), empty when missing or `null`.
    pub(crate) fn string_map_entry(&self, key: &str) -> Result<Option<String>, DefinitionError> {
        let Some(map) = self.mapping()? else {
            return Ok(None);
        };
        match map.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(other) => Err(self.error(format!(
                "{key}: expected a string, found {}",
                describe(other)
            ))),
        }
    }
}
