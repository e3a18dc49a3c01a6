//! What the error stream says at the end of a session (kubelet's `ServeExec` + `writeStatus`).

use serde::Serialize;

use crate::Protocol;

/// How the command ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExitOutcome {
    /// Exit code 0.
    Success,
    /// The command exited with this code (0 is reported as success). Clients (client-go's
    /// `errorDecoderV4`) parse the code as an unsigned 8-bit number, so it should be 0..=255.
    ExitCode(i32),
    /// The command could not be run or followed (the text says why).
    Error(String),
}

/// `metav1.Status`, with the field order and `omitempty` behaviour of Go's JSON encoding.
#[derive(Serialize)]
struct Status<'a> {
    metadata: Empty,
    status: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    message: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    reason: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    details: Option<Details>,
    #[serde(skip_serializing_if = "Option::is_none")]
    code: Option<u16>,
}

#[derive(Serialize)]
struct Empty {}

#[derive(Serialize)]
struct Details {
    causes: Vec<Cause>,
}

#[derive(Serialize)]
struct Cause {
    #[serde(skip_serializing_if = "Option::is_none")]
    reason: Option<&'static str>,
    message: String,
}

impl ExitOutcome {
    fn normalized(&self) -> &ExitOutcome {
        match self {
            ExitOutcome::ExitCode(0) => &ExitOutcome::Success,
            other => other,
        }
    }

    /// The `metav1.Status` JSON that v4/v5 put on the error stream:
    ///
    /// * success: `{"metadata":{},"status":"Success"}`;
    /// * exit code N: status `Failure`, reason `NonZeroExitCode`, one cause with reason
    ///   `ExitCode` and message `"N"` (what client-go turns into `CodeExitError`);
    /// * error: `apierrors.NewInternalError` of `"error executing command in container: ..."`
    ///   (code 500, reason `InternalError`).
    pub fn status_json(&self) -> String {
        let status = match self.normalized() {
            ExitOutcome::Success => Status {
                metadata: Empty {},
                status: "Success",
                message: None,
                reason: None,
                details: None,
                code: None,
            },
            ExitOutcome::ExitCode(code) => Status {
                metadata: Empty {},
                status: "Failure",
                message: self.error_message(),
                reason: Some("NonZeroExitCode"),
                details: Some(Details {
                    causes: vec![Cause {
                        reason: Some("ExitCode"),
                        message: code.to_string(),
                    }],
                }),
                code: None,
            },
            ExitOutcome::Error(text) => Status {
                metadata: Empty {},
                status: "Failure",
                message: self.error_message(),
                reason: Some("InternalError"),
                details: Some(Details {
                    causes: vec![Cause {
                        reason: None,
                        message: format!("error executing command in container: {text}"),
                    }],
                }),
                code: Some(500),
            },
        };
        // Serializing plain structs of strings and integers cannot fail.
        serde_json::to_string(&status).unwrap_or_else(|_| String::from("{}"))
    }

    /// The status message (`StatusError.Error()`), which v1-v3 put on the error stream as plain
    /// text; `None` on success (nothing is written then).
    pub fn error_message(&self) -> Option<String> {
        match self.normalized() {
            ExitOutcome::Success => None,
            ExitOutcome::ExitCode(code) => Some(format!(
                "command terminated with non-zero exit code: exit status {code}"
            )),
            ExitOutcome::Error(text) => Some(format!(
                "Internal error occurred: error executing command in container: {text}"
            )),
        }
    }

    /// The bytes written on the error stream for `protocol` (possibly none).
    pub fn error_stream_payload(&self, protocol: Protocol) -> Vec<u8> {
        if protocol.structured_status() {
            self.status_json().into_bytes()
        } else {
            self.error_message()
                .map(String::into_bytes)
                .unwrap_or_default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn success_status() {
        assert_eq!(
            ExitOutcome::Success.status_json(),
            r#"{"metadata":{},"status":"Success"}"#
        );
        assert_eq!(
            ExitOutcome::ExitCode(0).status_json(),
            r#"{"metadata":{},"status":"Success"}"#
        );
        assert!(
            ExitOutcome::Success
                .error_stream_payload(Protocol::V3)
                .is_empty()
        );
    }

    #[test]
    fn exit_code_status_is_what_client_go_decodes() {
        assert_eq!(
            ExitOutcome::ExitCode(42).status_json(),
            r#"{"metadata":{},"status":"Failure","message":"command terminated with non-zero exit code: exit status 42","reason":"NonZeroExitCode","details":{"causes":[{"reason":"ExitCode","message":"42"}]}}"#
        );
        let v: serde_json::Value =
            serde_json::from_slice(&ExitOutcome::ExitCode(7).error_stream_payload(Protocol::V5))
                .expect("json");
        assert_eq!(v["details"]["causes"][0]["message"], "7");
    }

    #[test]
    fn internal_error_status_and_text() {
        let o = ExitOutcome::Error("no such container".into());
        assert_eq!(
            o.status_json(),
            r#"{"metadata":{},"status":"Failure","message":"Internal error occurred: error executing command in container: no such container","reason":"InternalError","details":{"causes":[{"message":"error executing command in container: no such container"}]},"code":500}"#
        );
        assert_eq!(
            o.error_stream_payload(Protocol::V2),
            b"Internal error occurred: error executing command in container: no such container"
        );
    }
}
