//! `metav1.Status` answers: how a Kubernetes API says no, so kubectl and client libraries
//! print and act on it (`NotFound`, `BadRequest`, `Expired`, `TooManyRequests`...).

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

/// A `Status` object with `code`, `reason` and `message`.
pub fn object(code: u16, reason: &str, message: &str) -> Value {
    json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    })
}

/// An HTTP answer carrying `status` (its `code` is the HTTP status).
pub fn answer(status: &Value) -> Response {
    let code = status["code"]
        .as_u64()
        .and_then(|c| u16::try_from(c).ok())
        .and_then(|c| StatusCode::from_u16(c).ok())
        .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    json_response(code, status.to_string())
}

/// An answer with a `Status` of `code`, `reason` and `message`.
pub fn refuse(code: u16, reason: &str, message: &str) -> Response {
    answer(&object(code, reason, message))
}

/// `404 NotFound` for `resource` `name` (in kube-apiserver's words).
pub fn not_found(group: &str, resource: &str, name: &str) -> Response {
    let what = if group.is_empty() {
        resource.to_owned()
    } else {
        format!("{resource}.{group}")
    };
    let mut s = object(404, "NotFound", &format!("{what} \"{name}\" not found"));
    s["details"] = json!({"name": name, "group": group, "kind": resource});
    answer(&s)
}

/// `429 TooManyRequests` with `Retry-After: 1`, closing the connection: a client told to back
/// off holds nothing on the node while it waits.
pub fn too_many(message: &str) -> Response {
    let mut r = refuse(429, "TooManyRequests", message);
    let headers = r.headers_mut();
    headers.insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    headers.insert(header::CONNECTION, HeaderValue::from_static("close"));
    r
}

/// `400 BadRequest`.
pub fn bad_request(message: &str) -> Response {
    refuse(400, "BadRequest", message)
}

/// A JSON answer.
pub fn json_response(code: StatusCode, body: impl Into<axum::body::Body>) -> Response {
    let mut r = (code, body.into()).into_response();
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    r
}
