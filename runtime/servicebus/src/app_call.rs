//! Cloud → an app on the node: the router's `rest → servicebus` rules. The message's resource
//! is `<port>:<path>` and its content a [`HttpRequest`]; the app at `127.0.0.1:<port><path>`
//! is called and its answer goes back to the cloud as a [`HttpResponse`] whose parent is the
//! request, as edgecore does.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;
use wedge_core::message::{group, module, operation};
use wedge_core::{Content, Message};

use crate::wire::{Header, HttpRequest, HttpResponse};

/// The largest body read from an app or from an edge client: edgecore's 5 MB.
pub const MAX_BODY: usize = 5_000_000;

/// How long an app may take to answer: edgecore's fixed 10 s client timeout.
pub const APP_TIMEOUT: Duration = Duration::from_secs(10);

/// Why a call to an app failed; each becomes the status edgecore answers with.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum CallError {
    /// The resource is not `<port>:<path>`.
    #[error("the format of resource {0} is incorrect")]
    Resource(String),
    /// The content is not an `HTTPRequest`.
    #[error("error to parse http request: {0}")]
    Request(String),
    /// The app could not be reached or did not answer in time.
    #[error("error to call service: {0}")]
    Unreachable(String),
    /// The app's answer could not be read, or is larger than [`MAX_BODY`].
    #[error("error to receive response, err: {0}")]
    Response(String),
}

impl CallError {
    /// The HTTP status the cloud is told, as edgecore chooses it.
    pub fn status(&self) -> u16 {
        match self {
            CallError::Resource(_) | CallError::Request(_) => 400,
            CallError::Unreachable(_) => 404,
            CallError::Response(_) => 500,
        }
    }
}

/// The app's address and path from a resource `<port>:<path>` (`9000:/url`).
pub fn target(resource: &str) -> Result<(u16, String), CallError> {
    let bad = || CallError::Resource(resource.to_owned());
    let (port, path) = resource.split_once(':').ok_or_else(bad)?;
    if path.contains(':') {
        return Err(bad());
    }
    let port: u16 = port.parse().map_err(|_| bad())?;
    let path = if path.starts_with('/') {
        path.to_owned()
    } else {
        format!("/{path}")
    };
    Ok((port, path))
}

/// Calls the app `msg` names and returns what it answered.
pub async fn call(msg: &Message, timeout: Duration) -> Result<HttpResponse, CallError> {
    let (port, path) = target(&msg.route.resource)?;
    let request: HttpRequest = msg
        .content
        .parse()
        .map_err(|e| CallError::Request(e.to_string()))?;
    match tokio::time::timeout(timeout, send(port, &path, request)).await {
        Ok(answer) => answer,
        Err(_) => Err(CallError::Unreachable(format!(
            "127.0.0.1:{port}{path} did not answer within {timeout:?}"
        ))),
    }
}

async fn send(port: u16, path: &str, request: HttpRequest) -> Result<HttpResponse, CallError> {
    let unreachable = |e: String| CallError::Unreachable(format!("127.0.0.1:{port}{path}: {e}"));
    let method = if request.method.is_empty() {
        "GET"
    } else {
        request.method.as_str()
    };
    let method = http::Method::from_bytes(method.as_bytes())
        .map_err(|e| CallError::Request(e.to_string()))?;
    let mut builder = http::Request::builder()
        .method(method)
        .uri(path)
        .header(http::header::HOST, format!("127.0.0.1:{port}"));
    let mut has_accept = false;
    for (name, values) in &request.header {
        has_accept |= name.eq_ignore_ascii_case("accept");
        for value in values {
            builder = builder.header(name.as_str(), value.as_str());
        }
    }
    if !has_accept {
        // As edgecore's client adds it.
        builder = builder.header(http::header::ACCEPT, "*/*");
    }
    let http_request = builder
        .body(Full::new(Bytes::from(request.body)))
        .map_err(|e| CallError::Request(e.to_string()))?;
    let stream = TcpStream::connect(("127.0.0.1", port))
        .await
        .map_err(|e| unreachable(e.to_string()))?;
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| unreachable(e.to_string()))?;
    let driver = tokio::spawn(async move {
        let _ = conn.await;
    });
    let response = sender
        .send_request(http_request)
        .await
        .map_err(|e| unreachable(e.to_string()));
    let answer = match response {
        Ok(response) => read(response).await,
        Err(e) => Err(e),
    };
    driver.abort();
    answer
}

async fn read(response: http::Response<hyper::body::Incoming>) -> Result<HttpResponse, CallError> {
    let (parts, body) = response.into_parts();
    let body = Limited::new(body, MAX_BODY)
        .collect()
        .await
        .map_err(|e| {
            if e.is::<http_body_util::LengthLimitError>() {
                CallError::Response(format!("response body larger than {MAX_BODY} bytes"))
            } else {
                CallError::Response(e.to_string())
            }
        })?
        .to_bytes();
    let mut header = Header::new();
    for (name, value) in &parts.headers {
        header
            .entry(canonical(name.as_str()))
            .or_default()
            .push(String::from_utf8_lossy(value.as_bytes()).into_owned());
    }
    Ok(HttpResponse {
        header,
        status_code: parts.status.as_u16(),
        body: body.to_vec(),
    })
}

/// Go's canonical header name (`content-type` → `Content-Type`), as `http.Header` keys are.
fn canonical(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    let mut upper = true;
    for c in name.chars() {
        out.push(if upper { c.to_ascii_uppercase() } else { c });
        upper = c == '-';
    }
    out
}

/// The message that answers `request` with the app's `response`: parent = the request, route
/// `servicebus`/`user`, operation `upload`, as edgecore builds it.
pub fn answer(request: &Message, response: &HttpResponse) -> Message {
    reply(request, operation::UPLOAD, response)
}

/// The message that tells the cloud a call failed: status and text in a [`HttpResponse`]
/// (edgecore's error replies carry no operation).
pub fn failure(request: &Message, error: &CallError) -> Message {
    let response = HttpResponse {
        header: Header::from([("Server".to_owned(), vec!["wedge".to_owned()])]),
        status_code: error.status(),
        body: error.to_string().into_bytes(),
    };
    reply(request, "", &response)
}

fn reply(request: &Message, op: &str, response: &HttpResponse) -> Message {
    let content = Content::json(response).unwrap_or_else(|_| Content::null());
    let mut msg = Message::build(module::SERVICEBUS, group::USER, op, "", content);
    msg.header.parent_id = request.header.id.clone();
    msg
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_resource_names_port_and_path() {
        assert_eq!(target("9000:/url").unwrap(), (9000, "/url".to_owned()));
        assert_eq!(target("80:echo").unwrap(), (80, "/echo".to_owned()));
        for bad in ["9000", "x:/a", "1:2:3", "70000:/a"] {
            assert_eq!(
                target(bad),
                Err(CallError::Resource(bad.to_owned())),
                "{bad}"
            );
        }
    }

    #[test]
    fn header_names_are_go_canonical() {
        assert_eq!(canonical("content-type"), "Content-Type");
        assert_eq!(canonical("x-request-id"), "X-Request-Id");
    }

    #[test]
    fn a_failure_carries_edgecores_status() {
        let request = Message::build("router_servicebus", "user", "POST", "1:/a", Content::null());
        let reply = failure(&request, &CallError::Unreachable("refused".into()));
        assert_eq!(reply.header.parent_id, request.header.id);
        assert_eq!(
            (reply.route.source.as_str(), reply.route.group.as_str()),
            ("servicebus", "user")
        );
        let response: HttpResponse = reply.content.parse().unwrap();
        assert_eq!(response.status_code, 404);
        assert_eq!(response.body, b"error to call service: refused");
    }
}
