//! YAML text -> `EdgeCoreConfig`, with errors that name the full key.
//!
//! Three passes over a small file, each for a better error:
//! 1. parse into an untyped `Value`: YAML syntax errors (line/column),
//!    empty document, non-mapping document;
//! 2. check `apiVersion`/`kind` first, so an old v1alpha1 file gets "wrong
//!    apiVersion" rather than a dozen unknown-key errors;
//! 3. typed parse through `serde_path_to_error`, whose path names the key.

use serde_norway::Value;

use super::error::ConfigError;
use super::model::EdgeCoreConfig;
use super::validate::{api_version_problem, kind_problem};

/// Parses `text` (no validation beyond `apiVersion`/`kind`).
pub(crate) fn parse(text: &str) -> Result<EdgeCoreConfig, ConfigError> {
    let doc: Value = serde_norway::from_str(text).map_err(syntax_error)?;
    match &doc {
        // Empty or comment-only file: all defaults.
        Value::Null => return Ok(EdgeCoreConfig::default()),
        Value::Mapping(_) => check_header(&doc)?,
        other => {
            return Err(ConfigError::Parse {
                key: String::new(),
                message: format!(
                    "the config must be a YAML mapping of keys (apiVersion, kind, modules, ...), \
                     found {}",
                    value_kind(other)
                ),
            });
        }
    }
    let de = serde_norway::Deserializer::from_str(text);
    serde_path_to_error::deserialize(de).map_err(typed_error)
}

fn check_header(doc: &Value) -> Result<(), ConfigError> {
    for (key, problem) in [
        (
            "apiVersion",
            api_version_problem as fn(&str) -> Option<String>,
        ),
        ("kind", kind_problem),
    ] {
        let Some(value) = doc.get(key) else { continue };
        // Non-string values are left to the typed pass (it names the type).
        if let Some(msg) = value.as_str().and_then(problem) {
            return Err(ConfigError::invalid(key, msg));
        }
    }
    Ok(())
}

fn value_kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "nothing",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Sequence(_) => "a list",
        Value::Mapping(_) => "a mapping",
        Value::Tagged(_) => "a tagged value",
    }
}

/// Errors of the untyped pass: syntax, or a duplicate key.
fn syntax_error(err: serde_norway::Error) -> ConfigError {
    let full = err.to_string();
    let (path, msg) = split_message(&full, location(&err));
    // `<path>: duplicate entry with key "<name>"` (no path at the top level).
    if let Some(name) = msg
        .strip_prefix("duplicate entry with key \"")
        .and_then(|r| r.strip_suffix('"'))
    {
        return ConfigError::Parse {
            key: join(path.unwrap_or_default(), name),
            message: format!("duplicate key{}", at(&err)),
        };
    }
    ConfigError::Parse {
        key: String::new(),
        message: format!("invalid YAML: {}", err),
    }
}

/// Errors of the typed pass: unknown key, wrong type, bad enum value.
fn typed_error(err: serde_path_to_error::Error<serde_norway::Error>) -> ConfigError {
    let path = err.path().to_string();
    let path = if path == "." { String::new() } else { path };
    let inner = err.into_inner();
    let full = inner.to_string();
    let msg = match split_message(&full, location(&inner)) {
        (Some(head), rest) if path.starts_with(head) => rest,
        (Some(_), _) => strip_location(&full, location(&inner)),
        (None, rest) => rest,
    };
    let (key, message) = rewrite(&path, msg);
    ConfigError::Parse {
        key,
        message: format!("{message}{}", at(&inner)),
    }
}

/// Keys earlier Wedge versions took in KubeEdge v1alpha1's place, which no
/// v1alpha2 release has, and where the setting lives now.
const MOVED: &[(&str, &str)] = &[
    (
        "modules.edged.cgroupDriver",
        "modules.edged.tailoredKubeletConfig.cgroupDriver",
    ),
    (
        "modules.edged.imageGCHighThreshold",
        "modules.edged.tailoredKubeletConfig.imageGCHighThresholdPercent",
    ),
    (
        "modules.edged.imageGCLowThreshold",
        "modules.edged.tailoredKubeletConfig.imageGCLowThresholdPercent",
    ),
];

/// Turns serde's wording into ours, and fixes up the key where serde's path
/// stops at the parent section.
fn rewrite(path: &str, msg: &str) -> (String, String) {
    if let Some(rest) = msg.strip_prefix("unknown field `") {
        let (name, expected) = rest.split_once('`').unwrap_or((rest, ""));
        // An empty or null key (`"": 1`, `? `) is named `""`, so the error still names a key
        // (found by fuzzing: at the top level it named none).
        let (path, name) = if name.is_empty() {
            (path.trim_end_matches('.'), "\"\"")
        } else {
            (path, name)
        };
        let key = with_leaf(path, name);
        if let Some((_, new)) = MOVED.iter().find(|(old, _)| *old == key) {
            return (
                key,
                format!("unknown key; KubeEdge v1alpha2 (and Wedge) read this setting from {new}"),
            );
        }
        let names = backticked(expected);
        let message = if names.is_empty() {
            "unknown key; this section has no keys".to_owned()
        } else {
            format!("unknown key; expected one of: {}", names.join(", "))
        };
        return (with_leaf(path, name), message);
    }
    if let Some(rest) = msg.strip_prefix("duplicate field `") {
        let name = rest.split('`').next().unwrap_or(rest);
        return (with_leaf(path, name), "duplicate key".to_owned());
    }
    if let Some(rest) = msg.strip_prefix("unknown variant `") {
        let (value, expected) = rest.split_once('`').unwrap_or((rest, ""));
        return (
            path.to_owned(),
            format!(
                "unknown value {value:?}; expected one of: {}",
                backticked(expected).join(", ")
            ),
        );
    }
    let mut message = msg.replace("unit value", "null (empty value)");
    if let Some(i) = message.find("expected struct ") {
        message.truncate(i);
        message.push_str("expected a mapping of keys");
    }
    (path.to_owned(), message)
}

/// The `a`, `b` names in serde's "expected one of `a`, `b`".
fn backticked(s: &str) -> Vec<&str> {
    s.split('`').skip(1).step_by(2).collect()
}

/// `path` + `.name`, unless `path` already ends with that key.
fn with_leaf(path: &str, name: &str) -> String {
    if path == name || path.ends_with(&format!(".{name}")) {
        path.to_owned()
    } else {
        join(path, name)
    }
}

fn join(path: &str, name: &str) -> String {
    if path.is_empty() {
        name.to_owned()
    } else {
        format!("{path}.{name}")
    }
}

fn location(err: &serde_norway::Error) -> Option<(usize, usize)> {
    err.location().map(|l| (l.line(), l.column()))
}

/// ` (line L, column C)` or nothing.
fn at(err: &serde_norway::Error) -> String {
    location(err)
        .map(|(l, c)| format!(" (line {l}, column {c})"))
        .unwrap_or_default()
}

/// Splits serde_norway's `<path>: <message> at line L column C` into the
/// optional path and the bare message. A path prefix has no spaces
/// (messages like "invalid type: ..." do); callers that know the path
/// double-check it.
fn split_message(full: &str, loc: Option<(usize, usize)>) -> (Option<&str>, &str) {
    let msg = strip_location(full, loc);
    match msg.split_once(": ") {
        Some((head, rest)) if !head.is_empty() && !head.contains(' ') => (Some(head), rest),
        _ => (None, msg),
    }
}

/// `full` without its trailing ` at line L column C`.
fn strip_location(full: &str, loc: Option<(usize, usize)>) -> &str {
    loc.and_then(|(l, c)| full.strip_suffix(&format!(" at line {l} column {c}")))
        .unwrap_or(full)
}
