//! What can go wrong talking to a container runtime.

use std::error::Error as _;

/// An error from the CRI client. Connection errors name the endpoint, because edged shows them
/// to the operator who configured it; call errors keep the runtime's gRPC status, because edged
/// decides on its code (e.g. NotFound during clean-up is success).
#[derive(Debug, thiserror::Error)]
pub enum CriError {
    /// The endpoint string itself is unusable (wrong scheme, relative path).
    #[error("container runtime endpoint {endpoint:?}: {reason}")]
    BadEndpoint {
        /// The endpoint as configured.
        endpoint: String,
        /// What is wrong with it.
        reason: String,
    },
    /// Nothing accepts connections on the endpoint's socket (missing, refused, no permission).
    #[error("container runtime endpoint {endpoint} is unreachable: {reason}")]
    Unreachable {
        /// The endpoint as configured.
        endpoint: String,
        /// Why, with a hint where one helps.
        reason: String,
    },
    /// Something listens, but it did not answer CRI v1's Version: another protocol (Docker's
    /// API socket speaks HTTP/1), a containerd without the CRI plugin, or a hung runtime.
    #[error("container runtime endpoint {endpoint} does not answer as a CRI v1 runtime: {reason}")]
    NotCri {
        /// The endpoint as configured.
        endpoint: String,
        /// What it answered instead.
        reason: String,
    },
    /// The runtime knows no such sandbox, container or image.
    #[error("CRI {what}: not found: {}", status.message())]
    NotFound {
        /// The call, e.g. "ContainerStatus".
        what: &'static str,
        /// The runtime's answer.
        status: Box<tonic::Status>,
    },
    /// The runtime refused or failed the call (or its deadline passed).
    #[error("CRI {what} failed ({:?}): {}", status.code(), status.message())]
    Call {
        /// The call, e.g. "StartContainer".
        what: &'static str,
        /// The runtime's answer, or the client's (DeadlineExceeded, Unavailable).
        status: Box<tonic::Status>,
    },
    /// We did not send the request: it lacks something the runtime needs, and at least one
    /// runtime (containerd 1.6) crashes as a whole instead of refusing it.
    #[error("CRI {what} not sent: {reason}")]
    Invalid {
        /// The call.
        what: &'static str,
        /// What is missing.
        reason: &'static str,
    },
    /// The runtime answered OK without a part CRI says it must send.
    #[error("CRI {what} answered without {field}")]
    Incomplete {
        /// The call.
        what: &'static str,
        /// The missing field.
        field: &'static str,
    },
}

impl CriError {
    /// A failed call: NotFound gets its own variant, so callers can match on it.
    pub(crate) fn from_status(what: &'static str, status: tonic::Status) -> Self {
        if status.code() == tonic::Code::NotFound {
            Self::NotFound {
                what,
                status: Box::new(status),
            }
        } else {
            Self::Call {
                what,
                status: Box::new(status),
            }
        }
    }

    /// The gRPC status of a failed call, if this is one.
    pub fn status(&self) -> Option<&tonic::Status> {
        match self {
            Self::NotFound { status, .. } | Self::Call { status, .. } => Some(status),
            _ => None,
        }
    }

    /// The gRPC code of a failed call, if this is one: e.g. `Unimplemented` for an RPC the
    /// runtime does not serve, `DeadlineExceeded` when our deadline passed.
    pub fn code(&self) -> Option<tonic::Code> {
        self.status().map(tonic::Status::code)
    }

    /// Whether the runtime said the object does not exist: stop and remove treat it as done.
    pub fn is_not_found(&self) -> bool {
        matches!(self, Self::NotFound { .. })
    }
}

/// An error and its sources as one line ("transport error: No such file or directory"), since
/// tonic's own Display says only "transport error".
pub(crate) fn chain(error: &(dyn std::error::Error + 'static)) -> String {
    with_sources(error.to_string(), error.source())
}

/// `text` followed by each source's message that it does not already contain.
pub(crate) fn with_sources(
    mut text: String,
    mut source: Option<&(dyn std::error::Error + 'static)>,
) -> String {
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}

/// Why dialling failed, with a hint for the usual causes.
pub(crate) fn unreachable_reason(error: &tonic::transport::Error) -> String {
    let mut text = chain(error);
    let mut source = error.source();
    while let Some(cause) = source {
        if let Some(io) = cause.downcast_ref::<std::io::Error>() {
            let hint = match io.kind() {
                std::io::ErrorKind::NotFound => Some("no socket there: is the runtime running?"),
                std::io::ErrorKind::ConnectionRefused => {
                    Some("a socket file is there but nothing listens: the runtime stopped?")
                }
                std::io::ErrorKind::PermissionDenied => Some("not allowed to open the socket"),
                _ => None,
            };
            if let Some(hint) = hint {
                text.push_str(" (");
                text.push_str(hint);
                text.push(')');
            }
            break;
        }
        source = cause.source();
    }
    text
}
