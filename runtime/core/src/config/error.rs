//! The one error type of the config module.
//!
//! Every variant except `Read` names the offending key as a full dotted path
//! (`modules.edgeHub.heartbeat`), because "invalid value" without the key is
//! useless in a 150-line file.

use std::io;
use std::path::PathBuf;

/// One broken rule found by [`EdgeCoreConfig::validate`](super::EdgeCoreConfig::validate):
/// the dotted key and what is allowed there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// Full dotted key, e.g. `modules.edgeHub.heartbeat`.
    pub key: String,
    /// What is wrong and what is allowed, e.g. `must be >= 1 (seconds), got 0`.
    pub message: String,
}

impl std::fmt::Display for Violation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&keyed(&self.key, &self.message))
    }
}

/// Why a config could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read (missing, permissions, not UTF-8).
    #[error("cannot read config file {}: {source}", .path.display())]
    Read {
        /// The file we tried to read.
        path: PathBuf,
        /// The underlying I/O error.
        source: io::Error,
    },
    /// The text is not valid YAML, or does not fit the schema: unknown key,
    /// wrong type, duplicate key. `key` is empty for errors that have no key
    /// (YAML syntax errors, which carry line and column in `message` instead).
    #[error("{}", keyed(.key, .message))]
    Parse {
        /// Full dotted key, or empty.
        key: String,
        /// What went wrong, including line and column where known.
        message: String,
    },
    /// The config parsed but breaks a rule. `key`/`message` are the first
    /// violation (in file order); `others` holds the rest so that one run
    /// reports every problem. `Display` prints all of them, one per line.
    #[error("{}", list(.key, .message, .others))]
    Invalid {
        /// Full dotted key of the first violation.
        key: String,
        /// What is wrong with it and what is allowed.
        message: String,
        /// Further violations, possibly empty.
        others: Vec<Violation>,
    },
}

impl ConfigError {
    /// Builds `Invalid` from a non-empty list of violations (first one leads).
    pub(crate) fn from_violations(mut all: Vec<Violation>) -> Option<ConfigError> {
        if all.is_empty() {
            return None;
        }
        let first = all.remove(0);
        Some(ConfigError::Invalid {
            key: first.key,
            message: first.message,
            others: all,
        })
    }

    /// A single-violation `Invalid`.
    pub(crate) fn invalid(key: impl Into<String>, message: impl Into<String>) -> ConfigError {
        ConfigError::Invalid {
            key: key.into(),
            message: message.into(),
            others: Vec::new(),
        }
    }
}

fn keyed(key: &str, message: &str) -> String {
    if key.is_empty() {
        message.to_owned()
    } else {
        format!("{key}: {message}")
    }
}

fn list(key: &str, message: &str, others: &[Violation]) -> String {
    let mut out = keyed(key, message);
    for v in others {
        out.push('\n');
        out.push_str(&v.to_string());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn invalid_lists_every_violation_on_its_own_line() {
        let err = ConfigError::from_violations(vec![
            Violation {
                key: "a.b".into(),
                message: "bad".into(),
            },
            Violation {
                key: "c".into(),
                message: "worse".into(),
            },
        ])
        .unwrap();
        assert_eq!(err.to_string(), "a.b: bad\nc: worse");
        assert!(ConfigError::from_violations(Vec::new()).is_none());
    }

    #[test]
    fn parse_without_key_prints_message_only() {
        let err = ConfigError::Parse {
            key: String::new(),
            message: "invalid YAML".into(),
        };
        assert_eq!(err.to_string(), "invalid YAML");
    }

    #[test]
    fn read_names_the_path() {
        let err = ConfigError::Read {
            path: "/nope/edgecore.yaml".into(),
            source: io::Error::from(io::ErrorKind::NotFound),
        };
        assert!(err.to_string().contains("/nope/edgecore.yaml"));
    }
}
