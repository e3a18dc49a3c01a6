//! What the cloud's answer to a request says: an object, plain success, or an error.
//!
//! CloudCore answers edge requests in three shapes, and an error can hide in two of them:
//! - `{"Object": <object or null>, "Err": <error or null>}` (leases, node registration and
//!   status, pod status): a non-null `Err` is a failure even when the message looks like a
//!   normal `response`. A Kubernetes `StatusError` serialises as `{"ErrStatus": <Status>}`;
//!   any other Go error serialises as `{}`, which still means failure.
//! - a bare `{"ErrStatus": <Status>}` (queries that failed, refused pod deletions);
//! - the string `"OK"` or the object itself (successful queries).
//!
//! Treating every `response` as success is how a node ends up never renewing its lease while
//! the cloud logs the refusal: requesters classify answers with [`CloudAnswer::of`].

use std::fmt;

use serde_json::Value;

use super::Content;

/// A failure the cloud reported, with the Kubernetes `Status` fields when it sent them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CloudError {
    /// HTTP-like status code (`404`, `409`, `422`...); 0 when the cloud sent no Status.
    pub code: i64,
    /// Kubernetes' machine-readable reason (`NotFound`, `AlreadyExists`, `Invalid`,
    /// `Conflict`...); empty when unknown.
    pub reason: String,
    /// The human-readable message.
    pub message: String,
}

impl CloudError {
    /// The object the request named does not exist in the cloud.
    pub fn is_not_found(&self) -> bool {
        self.reason == "NotFound" || self.code == 404
    }

    /// The object a create named exists already.
    pub fn is_already_exists(&self) -> bool {
        self.reason == "AlreadyExists"
    }

    /// An update lost an optimistic-concurrency race (stale `resourceVersion`).
    pub fn is_conflict(&self) -> bool {
        self.reason == "Conflict" || self.code == 409
    }

    fn from_status(status: &Value) -> CloudError {
        let text = |key: &str| {
            status
                .get(key)
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned()
        };
        CloudError {
            code: status.get("code").and_then(Value::as_i64).unwrap_or(0),
            reason: text("reason"),
            message: text("message"),
        }
    }

    fn from_err(err: &Value) -> CloudError {
        match err.get("ErrStatus") {
            Some(status) => CloudError::from_status(status),
            None if err.is_string() => CloudError {
                code: 0,
                reason: String::new(),
                message: err.as_str().unwrap_or_default().to_owned(),
            },
            None => CloudError {
                code: 0,
                reason: String::new(),
                message: format!("the cloud reported an error without details: {err}"),
            },
        }
    }
}

impl fmt::Display for CloudError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.reason.is_empty(), self.code) {
            (true, 0) => write!(f, "{}", self.message),
            (false, 0) => write!(f, "{}: {}", self.reason, self.message),
            (_, code) => write!(f, "{} ({code}): {}", self.reason, self.message),
        }
    }
}

impl std::error::Error for CloudError {}

/// An answer from the cloud, classified.
#[derive(Debug, Clone, PartialEq)]
pub enum CloudAnswer {
    /// Success carrying an object (the `Object` of an object response, or the content).
    Object(Value),
    /// Success without an object (`"OK"`, or an object response whose `Object` is null).
    Ok,
    /// The cloud refused or failed the request.
    Error(CloudError),
}

impl CloudAnswer {
    /// Classifies `content` (see the module docs for the shapes).
    pub fn of(content: &Content) -> CloudAnswer {
        match content.parse::<Value>() {
            Ok(value) => CloudAnswer::of_value(value),
            // Content only ever holds JSON, so this cannot happen; treat it as opaque success.
            Err(_) => CloudAnswer::Ok,
        }
    }

    /// Classifies an already parsed answer.
    pub fn of_value(value: Value) -> CloudAnswer {
        match value {
            Value::Null => CloudAnswer::Ok,
            Value::String(s) if s == "OK" || s.is_empty() => CloudAnswer::Ok,
            Value::Object(map) if map.contains_key("Object") && map.contains_key("Err") => {
                match map.get("Err") {
                    Some(err) if !err.is_null() => CloudAnswer::Error(CloudError::from_err(err)),
                    _ => match map.get("Object") {
                        Some(obj) if !obj.is_null() => CloudAnswer::Object(obj.clone()),
                        _ => CloudAnswer::Ok,
                    },
                }
            }
            Value::Object(map) if map.len() == 1 && map.contains_key("ErrStatus") => {
                CloudAnswer::Error(CloudError::from_err(&Value::Object(map)))
            }
            other => CloudAnswer::Object(other),
        }
    }

    /// The error, if the answer is one.
    pub fn error(&self) -> Option<&CloudError> {
        match self {
            CloudAnswer::Error(e) => Some(e),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(json: &str) -> CloudAnswer {
        CloudAnswer::of(&Content::from_raw(json).unwrap())
    }

    #[test]
    fn an_object_response_with_an_error_is_an_error() {
        // What CloudCore v1.23.1 answers to a lease update without resourceVersion.
        let a = answer(
            r#"{"Object":null,"Err":{"ErrStatus":{"metadata":{},"status":"Failure",
            "message":"Lease.coordination.k8s.io \"n1\" is invalid: metadata.resourceVersion: Invalid value: 0x0: must be specified for an update",
            "reason":"Invalid","code":422}}}"#,
        );
        let e = a.error().expect("an error");
        assert_eq!(e.code, 422);
        assert_eq!(e.reason, "Invalid");
        assert!(
            e.to_string().contains("must be specified for an update"),
            "{e}"
        );
        // A Go error that is not a StatusError marshals as {}: still a failure.
        assert!(answer(r#"{"Object":null,"Err":{}}"#).error().is_some());
        let nf = answer(r#"{"ErrStatus":{"reason":"NotFound","code":404,"message":"x"}}"#);
        assert!(nf.error().unwrap().is_not_found());
    }

    #[test]
    fn successes_carry_their_object() {
        let a = answer(r#"{"Object":{"metadata":{"resourceVersion":"7"}},"Err":null}"#);
        assert_eq!(
            a,
            CloudAnswer::Object(serde_json::json!({"metadata": {"resourceVersion": "7"}}))
        );
        assert_eq!(answer(r#""OK""#), CloudAnswer::Ok);
        assert_eq!(answer(r#"{"Object":null,"Err":null}"#), CloudAnswer::Ok);
        assert!(matches!(
            answer(r#"{"kind":"ConfigMap"}"#),
            CloudAnswer::Object(_)
        ));
    }
}
