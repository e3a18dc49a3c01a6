//! The HTTP side of the upgrade: sub-protocol negotiation and the 101 / refusal answers.
//!
//! Mirrors kubelet: `httpstream.Handshake` (apimachinery `pkg/util/httpstream/httpstream.go`)
//! picks the protocol, then `spdy.responseUpgrader.UpgradeResponse` (`.../httpstream/spdy/
//! upgrade.go`) checks the `Connection` / `Upgrade` headers and answers 101.

use http::header::{CONNECTION, CONTENT_TYPE, HeaderName, HeaderValue, UPGRADE};
use http::{HeaderMap, StatusCode};

/// Request and response header naming the remotecommand sub-protocol(s).
pub const HEADER_PROTOCOL_VERSION: HeaderName =
    HeaderName::from_static("x-stream-protocol-version");
/// Response header listing the protocols we accept, sent with a 403.
pub const HEADER_ACCEPTED_PROTOCOL_VERSIONS: HeaderName =
    HeaderName::from_static("x-accepted-stream-protocol-versions");
/// The `Upgrade` token of SPDY/3.1.
pub const SPDY_31: &str = "SPDY/3.1";

/// A remotecommand sub-protocol version.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Protocol {
    /// `channel.k8s.io`: plain-text errors; the server closes its side of stdin at once.
    V1,
    /// `v2.channel.k8s.io`: plain-text errors.
    V2,
    /// `v3.channel.k8s.io`: adds the `resize` stream.
    V3,
    /// `v4.channel.k8s.io`: the error stream carries a JSON `metav1.Status` with the exit code.
    V4,
    /// `v5.channel.k8s.io`: over SPDY identical to v4 (its CLOSE signal is WebSocket-only;
    /// kubelet's `httpstream.go` serves it with the v4 handler, and so do we).
    V5,
}

impl Protocol {
    /// The protocols we serve, in kubelet's order (`remotecommand.SupportedStreamingProtocols`).
    pub const SUPPORTED: [Protocol; 5] = [
        Protocol::V5,
        Protocol::V4,
        Protocol::V3,
        Protocol::V2,
        Protocol::V1,
    ];

    /// The protocol's name as it appears in `X-Stream-Protocol-Version`.
    pub fn name(self) -> &'static str {
        match self {
            Protocol::V1 => "channel.k8s.io",
            Protocol::V2 => "v2.channel.k8s.io",
            Protocol::V3 => "v3.channel.k8s.io",
            Protocol::V4 => "v4.channel.k8s.io",
            Protocol::V5 => "v5.channel.k8s.io",
        }
    }

    /// The protocol called `name`, if we serve it.
    pub fn from_name(name: &str) -> Option<Protocol> {
        Protocol::SUPPORTED.into_iter().find(|p| p.name() == name)
    }

    /// Whether the client opens a `resize` stream for a tty session (v3 and later).
    pub fn supports_resize(self) -> bool {
        self >= Protocol::V3
    }

    /// Whether the error stream carries a JSON `metav1.Status` (v4 and later) rather than text.
    pub fn structured_status(self) -> bool {
        self >= Protocol::V4
    }
}

impl std::fmt::Display for Protocol {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Why an upgrade request is refused: what the HTTP layer should answer instead of 101.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// 400 (missing headers) or 403 (no common protocol).
    pub status: StatusCode,
    /// The error text (the body is this plus a newline, as Go's `http.Error` writes it).
    pub message: String,
}

impl Refusal {
    fn new(status: StatusCode, message: String) -> Refusal {
        Refusal { status, message }
    }

    /// The response body.
    pub fn body(&self) -> String {
        format!("{}\n", self.message)
    }

    /// The response headers: `Content-Type: text/plain; charset=utf-8`,
    /// `X-Content-Type-Options: nosniff` and, on 403, one `X-Accepted-Stream-Protocol-Versions`
    /// per protocol we serve (kubelet's `Handshake` + `http.Error`).
    pub fn headers(&self) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(
            CONTENT_TYPE,
            HeaderValue::from_static("text/plain; charset=utf-8"),
        );
        headers.insert(
            HeaderName::from_static("x-content-type-options"),
            HeaderValue::from_static("nosniff"),
        );
        if self.status == StatusCode::FORBIDDEN {
            for protocol in Protocol::SUPPORTED {
                headers.append(
                    HEADER_ACCEPTED_PROTOCOL_VERSIONS,
                    HeaderValue::from_static(protocol.name()),
                );
            }
        }
        headers
    }
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.status.as_u16(), self.message)
    }
}

impl std::error::Error for Refusal {}

/// Chooses the sub-protocol for an exec/attach upgrade request, or says how to refuse it.
///
/// As kubelet does: every `X-Stream-Protocol-Version` value is split on commas and trimmed; the
/// FIRST CLIENT protocol that we serve wins (kubelet's `negotiateProtocol` walks the client's
/// list in order). No match: 403 naming both lists, with `X-Accepted-Stream-Protocol-Versions`.
/// Then the `Connection` header must contain `upgrade` and `Upgrade` must contain `spdy/3.1`
/// (case-insensitive), else 400.
///
/// One deliberate difference: without any `X-Stream-Protocol-Version`, kubelet's `Handshake`
/// fails without writing a response (Go then sends an empty 200); we answer 400 with its message.
pub fn negotiate(headers: &HeaderMap) -> Result<Protocol, Refusal> {
    let client: Vec<&str> = headers
        .get_all(&HEADER_PROTOCOL_VERSION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|p| p.trim_matches(' '))
        .filter(|p| !p.is_empty())
        .collect();
    if client.is_empty() {
        return Err(Refusal::new(
            StatusCode::BAD_REQUEST,
            "unable to upgrade: X-Stream-Protocol-Version is required".to_owned(),
        ));
    }
    let Some(protocol) = client.iter().find_map(|name| Protocol::from_name(name)) else {
        let server: Vec<&str> = Protocol::SUPPORTED.iter().map(|p| p.name()).collect();
        return Err(Refusal::new(
            StatusCode::FORBIDDEN,
            format!(
                "unable to upgrade: unable to negotiate protocol: client supports [{}], server accepts [{}]",
                client.join(" "),
                server.join(" ")
            ),
        ));
    };
    let first_lower = |name: HeaderName| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_ascii_lowercase)
            .unwrap_or_default()
    };
    if !first_lower(CONNECTION).contains("upgrade")
        || !first_lower(UPGRADE).contains(&SPDY_31.to_ascii_lowercase())
    {
        return Err(Refusal::new(
            StatusCode::BAD_REQUEST,
            "unable to upgrade: missing upgrade headers in request".to_owned(),
        ));
    }
    Ok(protocol)
}

/// The headers of the `101 Switching Protocols` answer: `X-Stream-Protocol-Version: <chosen>`,
/// `Connection: Upgrade`, `Upgrade: SPDY/3.1`.
pub fn upgrade_response_headers(protocol: Protocol) -> HeaderMap {
    let mut headers = HeaderMap::new();
    headers.insert(
        HEADER_PROTOCOL_VERSION,
        HeaderValue::from_static(protocol.name()),
    );
    headers.insert(CONNECTION, HeaderValue::from_static("Upgrade"));
    headers.insert(UPGRADE, HeaderValue::from_static(SPDY_31));
    headers
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(protocols: &[&str]) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(CONNECTION, HeaderValue::from_static("Upgrade"));
        h.insert(UPGRADE, HeaderValue::from_static("SPDY/3.1"));
        for p in protocols {
            h.append(
                HEADER_PROTOCOL_VERSION,
                HeaderValue::from_str(p).expect("value"),
            );
        }
        h
    }

    #[test]
    fn apiserver_offer_gets_v5_served_as_v4() {
        let h = request(&[
            "v5.channel.k8s.io",
            "v4.channel.k8s.io",
            "v3.channel.k8s.io",
            "v2.channel.k8s.io",
            "channel.k8s.io",
        ]);
        let p = negotiate(&h).expect("negotiated");
        assert_eq!(p, Protocol::V5);
        assert!(p.structured_status() && p.supports_resize());
    }

    #[test]
    fn client_order_wins_and_comma_lists_are_split() {
        let h = request(&["bogus, v2.channel.k8s.io ,v4.channel.k8s.io"]);
        assert_eq!(negotiate(&h), Ok(Protocol::V2));
        let h = request(&["channel.k8s.io"]);
        assert_eq!(negotiate(&h), Ok(Protocol::V1));
        assert!(!Protocol::V2.supports_resize());
        assert!(!Protocol::V3.structured_status());
    }

    #[test]
    fn no_common_protocol_is_403_listing_ours() {
        let h = request(&["v9.channel.k8s.io", "x"]);
        let r = negotiate(&h).expect_err("refused");
        assert_eq!(r.status, StatusCode::FORBIDDEN);
        assert_eq!(
            r.message,
            "unable to upgrade: unable to negotiate protocol: client supports [v9.channel.k8s.io x], server accepts [v5.channel.k8s.io v4.channel.k8s.io v3.channel.k8s.io v2.channel.k8s.io channel.k8s.io]"
        );
        let headers = r.headers();
        let accepted: Vec<_> = headers
            .get_all(&HEADER_ACCEPTED_PROTOCOL_VERSIONS)
            .iter()
            .map(|v| v.to_str().expect("ascii"))
            .collect();
        assert_eq!(accepted.len(), 5);
        assert_eq!(accepted[0], "v5.channel.k8s.io");
        assert!(r.body().ends_with('\n'));
    }

    #[test]
    fn missing_protocol_or_upgrade_headers_is_400() {
        let r = negotiate(&request(&[])).expect_err("refused");
        assert_eq!(r.status, StatusCode::BAD_REQUEST);
        assert!(r.message.contains("X-Stream-Protocol-Version is required"));

        let mut h = request(&["v4.channel.k8s.io"]);
        h.insert(UPGRADE, HeaderValue::from_static("websocket"));
        let r = negotiate(&h).expect_err("refused");
        assert_eq!(r.status, StatusCode::BAD_REQUEST);

        let mut h = request(&["v4.channel.k8s.io"]);
        h.insert(CONNECTION, HeaderValue::from_static("keep-alive, UPGRADE"));
        h.insert(UPGRADE, HeaderValue::from_static("spdy/3.1"));
        assert_eq!(negotiate(&h), Ok(Protocol::V4));
    }

    #[test]
    fn switching_protocols_headers() {
        let h = upgrade_response_headers(Protocol::V4);
        assert_eq!(h[&HEADER_PROTOCOL_VERSION], "v4.channel.k8s.io");
        assert_eq!(h[CONNECTION], "Upgrade");
        assert_eq!(h[UPGRADE], "SPDY/3.1");
    }
}
