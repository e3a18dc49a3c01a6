//! The request inside a connect message, and the request the edge replays to the kubelet.
//!
//! CloudCore puts the apiserver's request to the "kubelet" into the payload of every
//! `*_CONNECT` message as JSON (KubeEdge's `Edged*Connection` structs, Go's `encoding/json`):
//!
//! ```json
//! {"MessID":7,
//!  "url":{"Scheme":"http","Opaque":"","User":null,"Host":"127.0.0.1:10350",
//!         "Path":"/containerLogs/default/web/main","RawPath":"","OmitHost":false,
//!         "ForceQuery":false,"RawQuery":"follow=true","Fragment":"","RawFragment":""},
//!  "header":{"Accept":["*/*"],"User-Agent":["kube-apiserver/..."]},
//!  "method":"POST"}
//! ```
//!
//! - `url` is Go's `net/url.URL` with scheme and host replaced by CloudCore with
//!   `http://127.0.0.1:10350` (KubeEdge's fixed edged port); only path and query come from the
//!   apiserver. We keep path and query and send them to our configured local port.
//! - `header` is Go's `http.Header` (canonical names, a list of values each) of the apiserver's
//!   request, without `Host` (Go's server keeps that apart).
//! - `method` exists for exec and attach only; logs and metrics are always `GET`.
//!
//! The request target is rebuilt as Go's `URL.RequestURI` does: the escaped path (`RawPath`
//! when it is a valid encoding of `Path`, else `Path` escaped) and `?RawQuery`. Headers are
//! sent as Go's `Request.Write` sends them: without `Host`, `Content-Length`,
//! `Transfer-Encoding` and `Trailer` (the request has no body; a method other than `GET` and
//! `HEAD` gets `Content-Length: 0`), `Host` being the local address.

use std::collections::BTreeMap;

use bytes::Bytes;
use http::{HeaderName, HeaderValue, Method};
use serde::Deserialize;

/// Why a connect message's payload is not a request the edge can replay.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConnectError {
    /// The payload is not the JSON CloudCore sends.
    #[error("connect payload is not KubeEdge's connection JSON: {0}")]
    Json(String),
    /// The method is not an HTTP token.
    #[error("invalid method {0:?}")]
    Method(String),
    /// The path and query do not make a request target.
    #[error("invalid request target {0:?}")]
    Target(String),
}

/// Go's `net/url.URL` as `encoding/json` writes it (exported fields, Go's names).
#[derive(Debug, Default, Deserialize)]
#[serde(default, rename_all = "PascalCase")]
struct GoUrl {
    opaque: String,
    scheme: String,
    path: String,
    raw_path: String,
    force_query: bool,
    raw_query: String,
}

/// The JSON of KubeEdge's `EdgedLogsConnection`, `EdgedMetricsConnection`,
/// `EdgedExecConnection` and `EdgedAttachConnection`.
#[derive(Debug, Deserialize)]
struct Wire {
    #[serde(rename = "MessID", default)]
    mess_id: u64,
    url: GoUrl,
    #[serde(default)]
    header: Option<BTreeMap<String, Option<Vec<String>>>>,
    #[serde(default)]
    method: Option<String>,
}

/// A request to replay to the kubelet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectRequest {
    /// The `MessID` CloudCore wrote (equal to the message's connection id).
    pub mess_id: u64,
    /// The method.
    pub method: Method,
    /// Path and query, as sent on the request line.
    pub target: String,
    /// Header lines in order (a name once per value), names as CloudCore spelled them.
    pub headers: Vec<(HeaderName, String, HeaderValue)>,
    /// Header lines left out because their name or value cannot be sent.
    pub dropped_headers: usize,
}

/// Headers Go's `Request.Write` never copies from `Request.Header`.
const NOT_COPIED: [&str; 4] = ["host", "content-length", "transfer-encoding", "trailer"];

impl ConnectRequest {
    /// Reads a connect message's payload. `upgrade` is true for exec and attach, whose
    /// method is CloudCore's; logs and metrics are `GET` whatever it says.
    pub fn parse(data: &[u8], upgrade: bool) -> Result<ConnectRequest, ConnectError> {
        let wire: Wire =
            serde_json::from_slice(data).map_err(|e| ConnectError::Json(e.to_string()))?;
        let method = match wire.method.as_deref() {
            Some(m) if upgrade && !m.is_empty() => {
                Method::from_bytes(m.as_bytes()).map_err(|_| ConnectError::Method(m.to_owned()))?
            }
            _ => Method::GET,
        };
        let target = request_uri(&wire.url);
        if !target.starts_with('/') || target.bytes().any(|b| b <= b' ' || b == 0x7f) {
            return Err(ConnectError::Target(target));
        }
        let mut headers = Vec::new();
        let mut dropped_headers = 0;
        for (name, values) in wire.header.unwrap_or_default() {
            if NOT_COPIED.contains(&name.to_ascii_lowercase().as_str()) {
                continue;
            }
            let values = values.unwrap_or_default();
            let Ok(parsed) = HeaderName::from_bytes(name.as_bytes()) else {
                dropped_headers += values.len();
                continue;
            };
            for value in values {
                match HeaderValue::from_str(&value) {
                    Ok(v) => headers.push((parsed.clone(), name.clone(), v)),
                    Err(_) => dropped_headers += 1,
                }
            }
        }
        Ok(ConnectRequest {
            mess_id: wire.mess_id,
            method,
            target,
            headers,
            dropped_headers,
        })
    }

    /// Replaces every `name` header by one with `value` (e.g. `Accept-Encoding: identity`).
    pub fn set_header(&mut self, name: &'static str, value: &'static str) {
        let parsed = HeaderName::from_static(name);
        self.headers.retain(|(n, _, _)| *n != parsed);
        self.headers
            .push((parsed, canonical(name), HeaderValue::from_static(value)));
    }

    /// The request head as bytes, for a connection that is upgraded and then piped: request
    /// line, `Host: <host>`, the headers with CloudCore's spelling, `Content-Length: 0` for
    /// methods other than `GET` and `HEAD`, blank line.
    pub fn head_bytes(&self, host: &str) -> Vec<u8> {
        let mut out = Vec::with_capacity(256);
        out.extend_from_slice(self.method.as_str().as_bytes());
        out.push(b' ');
        out.extend_from_slice(self.target.as_bytes());
        out.extend_from_slice(b" HTTP/1.1\r\nHost: ");
        out.extend_from_slice(host.as_bytes());
        out.extend_from_slice(b"\r\n");
        for (_, spelled, value) in &self.headers {
            out.extend_from_slice(spelled.as_bytes());
            out.extend_from_slice(b": ");
            out.extend_from_slice(value.as_bytes());
            out.extend_from_slice(b"\r\n");
        }
        if self.method != Method::GET && self.method != Method::HEAD {
            out.extend_from_slice(b"Content-Length: 0\r\n");
        }
        out.extend_from_slice(b"\r\n");
        out
    }

    /// The request for an HTTP client (hyper), `Host: <host>`, no body.
    pub fn to_http(
        &self,
        host: &str,
    ) -> Result<http::Request<http_body_util::Empty<Bytes>>, ConnectError> {
        let mut builder = http::Request::builder()
            .method(self.method.clone())
            .uri(self.target.as_str())
            .header(http::header::HOST, host);
        for (name, _, value) in &self.headers {
            builder = builder.header(name, value);
        }
        builder
            .body(http_body_util::Empty::new())
            .map_err(|_| ConnectError::Target(self.target.clone()))
    }
}

/// Go's `URL.RequestURI`: `Opaque` or the escaped path (`/` when empty), then `?RawQuery` when
/// there is a query or `ForceQuery`.
fn request_uri(url: &GoUrl) -> String {
    let mut out = if url.opaque.is_empty() {
        let p = escaped_path(url);
        if p.is_empty() { "/".to_owned() } else { p }
    } else if url.opaque.starts_with("//") {
        format!("{}:{}", url.scheme, url.opaque)
    } else {
        url.opaque.clone()
    };
    if url.force_query || !url.raw_query.is_empty() {
        out.push('?');
        out.push_str(&url.raw_query);
    }
    out
}

/// Go's `URL.EscapedPath`: `RawPath` when it is a valid encoding of `Path`, else `Path`
/// escaped.
fn escaped_path(url: &GoUrl) -> String {
    if !url.raw_path.is_empty()
        && valid_encoded(&url.raw_path)
        && unescape(&url.raw_path).as_deref() == Some(url.path.as_bytes())
    {
        return url.raw_path.clone();
    }
    if url.path == "*" {
        return "*".to_owned();
    }
    escape_path(&url.path)
}

/// Go's `shouldEscape(c, encodePath)`: letters, digits, `-_.~` and the reserved characters
/// other than `?` stay; everything else is percent-encoded.
fn should_escape(c: u8) -> bool {
    !(c.is_ascii_alphanumeric()
        || matches!(
            c,
            b'-' | b'_'
                | b'.'
                | b'~'
                | b'$'
                | b'&'
                | b'+'
                | b','
                | b'/'
                | b':'
                | b';'
                | b'='
                | b'@'
        ))
}

fn escape_path(path: &str) -> String {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    let mut out = String::with_capacity(path.len());
    for &b in path.as_bytes() {
        if should_escape(b) {
            out.push('%');
            out.push(HEX[usize::from(b >> 4)] as char);
            out.push(HEX[usize::from(b & 15)] as char);
        } else {
            out.push(b as char);
        }
    }
    out
}

/// Go's `validEncoded(s, encodePath)`.
fn valid_encoded(s: &str) -> bool {
    s.bytes().all(|b| {
        matches!(
            b,
            b'!' | b'$'
                | b'&'
                | b'\''
                | b'('
                | b')'
                | b'*'
                | b'+'
                | b','
                | b';'
                | b'='
                | b':'
                | b'@'
                | b'['
                | b']'
                | b'%'
        ) || !should_escape(b)
    })
}

/// Percent-decoding; `None` for a bad escape.
fn unescape(s: &str) -> Option<Vec<u8>> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = bytes.get(i + 1..i + 3)?;
            let text = std::str::from_utf8(hex).ok()?;
            out.push(u8::from_str_radix(text, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    Some(out)
}

/// Go's canonical spelling of a header name (`accept-encoding` → `Accept-Encoding`).
pub(crate) fn canonical(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    let mut upper = true;
    for c in name.chars() {
        out.push(if upper {
            c.to_ascii_uppercase()
        } else {
            c.to_ascii_lowercase()
        });
        upper = c == '-';
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A logs connect payload as CloudCore v1.23.1 sent it (`kubectl logs --tail=5
    /// --timestamps`, captured from the real cloud).
    const LOGS: &str = r#"{"MessID":4,"url":{"Scheme":"http","Opaque":"","User":null,"Host":"127.0.0.1:10350","Path":"/containerLogs/default/probe-pod/main","Fragment":"","RawQuery":"tailLines=5\u0026timestamps=true","RawPath":"","RawFragment":"","ForceQuery":false,"OmitHost":false},"header":{"Accept-Encoding":["gzip"],"User-Agent":["Go-http-client/2.0"]}}"#;

    /// An exec connect payload as CloudCore v1.23.1 sent it (an `Upgrade: SPDY/3.1` exec
    /// through the apiserver, captured from the real cloud).
    const EXEC: &str = r#"{"MessID":6,"url":{"Scheme":"http","Opaque":"","User":null,"Host":"127.0.0.1:10350","Path":"/exec/default/probe-pod/main","Fragment":"","RawQuery":"command=sh\u0026command=-c\u0026command=echo+hi\u0026input=1\u0026output=1","RawPath":"","RawFragment":"","ForceQuery":false,"OmitHost":false},"header":{"Accept":["*/*"],"Connection":["Upgrade"],"Content-Length":["0"],"Upgrade":["SPDY/3.1"],"User-Agent":["curl/7.88.1"],"X-Forwarded-For":["127.0.0.1"],"X-Stream-Protocol-Version":["v4.channel.k8s.io"]},"method":"POST"}"#;

    #[test]
    fn reads_a_logs_connect() {
        let r = ConnectRequest::parse(LOGS.as_bytes(), false).unwrap();
        assert_eq!(r.mess_id, 4);
        assert_eq!(r.method, Method::GET);
        assert_eq!(
            r.target,
            "/containerLogs/default/probe-pod/main?tailLines=5&timestamps=true"
        );
        let names: Vec<&str> = r.headers.iter().map(|(_, s, _)| s.as_str()).collect();
        assert_eq!(names, ["Accept-Encoding", "User-Agent"]);
        assert_eq!(r.dropped_headers, 0);
    }

    #[test]
    fn an_exec_head_is_what_go_writes() {
        let r = ConnectRequest::parse(EXEC.as_bytes(), true).unwrap();
        assert_eq!(r.mess_id, 6);
        let head = String::from_utf8(r.head_bytes("127.0.0.1:10350")).unwrap();
        assert_eq!(
            head,
            "POST /exec/default/probe-pod/main?command=sh&command=-c&command=echo+hi&input=1&output=1 HTTP/1.1\r\n\
             Host: 127.0.0.1:10350\r\n\
             Accept: */*\r\n\
             Connection: Upgrade\r\n\
             Upgrade: SPDY/3.1\r\n\
             User-Agent: curl/7.88.1\r\n\
             X-Forwarded-For: 127.0.0.1\r\n\
             X-Stream-Protocol-Version: v4.channel.k8s.io\r\n\
             Content-Length: 0\r\n\r\n"
        );
    }

    #[test]
    fn logs_and_metrics_ignore_a_method() {
        let r = ConnectRequest::parse(EXEC.as_bytes(), false).unwrap();
        assert_eq!(r.method, Method::GET);
        assert!(
            !String::from_utf8(r.head_bytes("h"))
                .unwrap()
                .contains("Content-Length")
        );
    }

    #[test]
    fn paths_are_escaped_as_go_does() {
        let url = |path: &str, raw: &str| GoUrl {
            path: path.into(),
            raw_path: raw.into(),
            ..GoUrl::default()
        };
        assert_eq!(request_uri(&url("/a b/c?d", "")), "/a%20b/c%3Fd");
        assert_eq!(request_uri(&url("/a/b:c@d;e=f", "")), "/a/b:c@d;e=f");
        // RawPath wins when it is an encoding of Path, and only then.
        assert_eq!(request_uri(&url("/a/b", "/a%2Fb")), "/a%2Fb");
        assert_eq!(request_uri(&url("/a/c", "/a%2Fb")), "/a/c");
        assert_eq!(request_uri(&url("/a/b", "/a%zzb")), "/a/b");
        assert_eq!(request_uri(&url("/a/b%c", "/a/b%25c")), "/a/b%25c");
        assert_eq!(request_uri(&url("/x y", "/x%20y")), "/x%20y");
        assert_eq!(request_uri(&url("", "")), "/");
        assert_eq!(
            request_uri(&GoUrl {
                path: "/stats/summary".into(),
                force_query: true,
                ..GoUrl::default()
            }),
            "/stats/summary?"
        );
    }

    #[test]
    fn bad_payloads_are_refused() {
        assert!(matches!(
            ConnectRequest::parse(b"not json", false),
            Err(ConnectError::Json(_))
        ));
        let bad_method = EXEC.replace("\"POST\"", "\"PO ST\"");
        assert_eq!(
            ConnectRequest::parse(bad_method.as_bytes(), true),
            Err(ConnectError::Method("PO ST".into()))
        );
        let bad_query = LOGS.replace("tailLines=5", "tailLines=5 \\r\\n");
        assert!(matches!(
            ConnectRequest::parse(bad_query.as_bytes(), false),
            Err(ConnectError::Target(_))
        ));
    }

    #[test]
    fn unsendable_headers_are_dropped_and_counted() {
        let json = LOGS.replace(
            r#""Accept-Encoding":["gzip"]"#,
            r#""Accept":["*/*","a\r\nEvil: 1"],"Bad Name":["x","y"],"Host":["h"],"Transfer-Encoding":["chunked"],"Accept-Encoding":["gzip"]"#,
        );
        let r = ConnectRequest::parse(json.as_bytes(), false).unwrap();
        assert_eq!(r.dropped_headers, 3);
        let names: Vec<&str> = r.headers.iter().map(|(_, s, _)| s.as_str()).collect();
        assert_eq!(names, ["Accept", "Accept-Encoding", "User-Agent"]);
    }

    #[test]
    fn set_header_replaces_every_value() {
        let mut r = ConnectRequest::parse(LOGS.as_bytes(), false).unwrap();
        r.set_header("accept-encoding", "identity");
        let req = r.to_http("127.0.0.1:1").unwrap();
        assert_eq!(req.headers().get_all("accept-encoding").iter().count(), 1);
        assert_eq!(req.headers()["accept-encoding"], "identity");
        assert_eq!(req.headers()["host"], "127.0.0.1:1");
        assert_eq!(
            req.uri(),
            "/containerLogs/default/probe-pod/main?tailLines=5&timestamps=true"
        );
    }

    #[test]
    fn canonical_names() {
        assert_eq!(canonical("accept-encoding"), "Accept-Encoding");
        assert_eq!(canonical("x-STREAM-protocol"), "X-Stream-Protocol");
    }
}
