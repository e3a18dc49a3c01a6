//! Outgoing HTTP(S) requests for mappers (`wasi:http/outgoing-handler`), for REST devices.
//!
//! The host sends a request only to an endpoint its manifest grants under
//! `capabilities.endpoints` (the URL's host and port; 80 for `http`, 443 for `https` when the
//! URL names none). A request outside the grants fails with
//! [`PermissionDenied`](std::io::ErrorKind::PermissionDenied) before anything is sent.
//!
//! ```no_run
//! use std::time::Duration;
//! let reply = wedge_guest::http::get("http://10.0.0.7:8080/api/v1/state", Duration::from_secs(2))?;
//! assert_eq!(reply.status, 200);
//! let text = reply.text();
//! # Ok::<(), std::io::Error>(())
//! ```

use std::io::{self, ErrorKind};
use std::time::{Duration, Instant};

use wasip2::http::outgoing_handler;
use wasip2::http::types::{
    ErrorCode, Fields, Method, OutgoingBody, OutgoingRequest, RequestOptions, Scheme,
};
use wasip2::io::streams::StreamError;

use crate::net::wait;

/// Largest response body read; a longer one fails with
/// [`InvalidData`](ErrorKind::InvalidData).
pub const MAX_BODY: usize = 4 * 1024 * 1024;

/// A response, read whole.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    /// Status code.
    pub status: u16,
    /// Header fields, names in lowercase, in the order received.
    pub headers: Vec<(String, Vec<u8>)>,
    /// The body.
    pub body: Vec<u8>,
}

impl Response {
    /// The body as text (invalid UTF-8 replaced).
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// The first value of header `name` (any case), as text.
    pub fn header(&self, name: &str) -> Option<String> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| String::from_utf8_lossy(v).into_owned())
    }
}

/// `GET url`, waiting at most `timeout` in all.
pub fn get(url: &str, timeout: Duration) -> io::Result<Response> {
    send("GET", url, &[], &[], timeout)
}

/// Sends a request (`method` such as `GET`, `PUT`, `POST`) with `headers` and `body` and reads
/// the whole response, waiting at most `timeout` in all.
///
/// Errors: [`InvalidInput`](ErrorKind::InvalidInput) for a URL that is not
/// `http(s)://host[:port][/path]` or a bad method or header;
/// [`PermissionDenied`](ErrorKind::PermissionDenied) outside the grants;
/// [`TimedOut`](ErrorKind::TimedOut); [`ConnectionRefused`](ErrorKind::ConnectionRefused),
/// [`NotFound`](ErrorKind::NotFound) (a name that does not resolve) and other network errors.
///
/// ```no_run
/// # use std::time::Duration;
/// let reply = wedge_guest::http::send(
///     "PUT",
///     "http://10.0.0.7:8080/api/v1/setpoint",
///     &[("content-type", "application/json")],
///     br#"{"value":21.5}"#,
///     Duration::from_secs(2),
/// )?;
/// # Ok::<(), std::io::Error>(())
/// ```
pub fn send(
    method: &str,
    url: &str,
    headers: &[(&str, &str)],
    body: &[u8],
    timeout: Duration,
) -> io::Result<Response> {
    let invalid = |what: String| io::Error::new(ErrorKind::InvalidInput, what);
    if timeout.is_zero() {
        return Err(invalid("the timeout must not be zero".to_owned()));
    }
    let deadline = Instant::now().checked_add(timeout);
    let (scheme, rest) = if let Some(rest) = url.strip_prefix("http://") {
        (Scheme::Http, rest)
    } else if let Some(rest) = url.strip_prefix("https://") {
        (Scheme::Https, rest)
    } else {
        return Err(invalid(format!(
            "URL {url:?} must start with http:// or https://"
        )));
    };
    let (authority, path) = match rest.find(['/', '?']) {
        Some(i) if rest.as_bytes()[i] == b'/' => (&rest[..i], rest[i..].to_owned()),
        Some(i) => (&rest[..i], format!("/{}", &rest[i..])),
        None => (rest, "/".to_owned()),
    };
    if authority.is_empty() || authority.contains('@') {
        return Err(invalid(format!("URL {url:?} has no usable host")));
    }
    let fields = Fields::new();
    for (name, value) in headers {
        fields
            .append(&name.to_ascii_lowercase(), value.as_bytes())
            .map_err(|e| invalid(format!("header {name:?}: {e:?}")))?;
    }
    if !body.is_empty() {
        fields
            .append("content-length", &body.len().to_string().into_bytes())
            .map_err(|e| invalid(format!("content-length: {e:?}")))?;
    }
    let request = OutgoingRequest::new(fields);
    let method = match method.to_ascii_uppercase().as_str() {
        "GET" => Method::Get,
        "HEAD" => Method::Head,
        "POST" => Method::Post,
        "PUT" => Method::Put,
        "DELETE" => Method::Delete,
        "PATCH" => Method::Patch,
        "OPTIONS" => Method::Options,
        other => Method::Other(other.to_owned()),
    };
    let bad = |what: &str| invalid(format!("{what} of {url:?} refused"));
    request.set_method(&method).map_err(|()| bad("method"))?;
    request
        .set_scheme(Some(&scheme))
        .map_err(|()| bad("scheme"))?;
    request
        .set_authority(Some(authority))
        .map_err(|()| bad("authority"))?;
    request
        .set_path_with_query(Some(&path))
        .map_err(|()| bad("path"))?;
    let outgoing = request.body().map_err(|()| bad("body"))?;
    let options = RequestOptions::new();
    let nanos = u64::try_from(timeout.as_nanos()).unwrap_or(u64::MAX);
    // The host may not support setting these; the overall deadline below still holds.
    let _ = options.set_connect_timeout(Some(nanos));
    let _ = options.set_first_byte_timeout(Some(nanos));
    let _ = options.set_between_bytes_timeout(Some(nanos));
    let what = format!("{} {url}", method_name(&method));
    let pending = outgoing_handler::handle(request, Some(options)).map_err(|e| error(e, &what))?;
    {
        let stream = outgoing.write().map_err(|()| bad("body"))?;
        for chunk in body.chunks(4096) {
            stream
                .blocking_write_and_flush(chunk)
                .map_err(|e| io::Error::other(format!("{what}: sending the body: {e:?}")))?;
        }
    }
    OutgoingBody::finish(outgoing, None).map_err(|e| error(e, &what))?;
    let ready = pending.subscribe();
    let response = loop {
        match pending.get() {
            Some(Ok(Ok(response))) => break response,
            Some(Ok(Err(e))) => return Err(error(e, &what)),
            Some(Err(())) => return Err(io::Error::other(format!("{what}: response taken twice"))),
            None => {
                if !wait(&ready, deadline) {
                    return Err(timed_out(&what, timeout));
                }
            }
        }
    };
    drop(ready);
    let status = response.status();
    let headers = response
        .headers()
        .entries()
        .into_iter()
        .map(|(name, value)| (name.to_ascii_lowercase(), value))
        .collect();
    let incoming = response
        .consume()
        .map_err(|()| io::Error::other(format!("{what}: body taken twice")))?;
    let mut body = Vec::new();
    {
        let stream = incoming
            .stream()
            .map_err(|()| io::Error::other(format!("{what}: body stream taken twice")))?;
        let ready = stream.subscribe();
        loop {
            match stream.read(64 * 1024) {
                Ok(chunk) if chunk.is_empty() => {
                    if !wait(&ready, deadline) {
                        return Err(timed_out(&what, timeout));
                    }
                }
                Ok(chunk) => {
                    body.extend_from_slice(&chunk);
                    if body.len() > MAX_BODY {
                        return Err(io::Error::new(
                            ErrorKind::InvalidData,
                            format!("{what}: response body over {MAX_BODY} bytes"),
                        ));
                    }
                }
                Err(StreamError::Closed) => break,
                Err(StreamError::LastOperationFailed(e)) => {
                    return Err(io::Error::other(format!(
                        "{what}: reading the body: {}",
                        e.to_debug_string()
                    )));
                }
            }
        }
    }
    Ok(Response {
        status,
        headers,
        body,
    })
}

fn method_name(method: &Method) -> &str {
    match method {
        Method::Get => "GET",
        Method::Head => "HEAD",
        Method::Post => "POST",
        Method::Put => "PUT",
        Method::Delete => "DELETE",
        Method::Connect => "CONNECT",
        Method::Options => "OPTIONS",
        Method::Trace => "TRACE",
        Method::Patch => "PATCH",
        Method::Other(other) => other,
    }
}

fn timed_out(what: &str, timeout: Duration) -> io::Error {
    io::Error::new(
        ErrorKind::TimedOut,
        format!("{what}: timed out after {timeout:?}"),
    )
}

fn error(code: ErrorCode, what: &str) -> io::Error {
    let kind = match code {
        ErrorCode::HttpRequestDenied => ErrorKind::PermissionDenied,
        ErrorCode::DestinationNotFound | ErrorCode::DnsError(_) => ErrorKind::NotFound,
        ErrorCode::ConnectionRefused => ErrorKind::ConnectionRefused,
        ErrorCode::ConnectionTimeout
        | ErrorCode::ConnectionReadTimeout
        | ErrorCode::ConnectionWriteTimeout
        | ErrorCode::DnsTimeout => ErrorKind::TimedOut,
        ErrorCode::ConnectionTerminated => ErrorKind::ConnectionReset,
        ErrorCode::HttpRequestUriInvalid | ErrorCode::HttpRequestMethodInvalid => {
            ErrorKind::InvalidInput
        }
        _ => ErrorKind::Other,
    };
    let text = match code {
        ErrorCode::HttpRequestDenied => {
            "refused: not granted by the manifest's capabilities.endpoints".to_owned()
        }
        other => format!("{other:?}"),
    };
    io::Error::new(kind, format!("{what}: {text}"))
}
