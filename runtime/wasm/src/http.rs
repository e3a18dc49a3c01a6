//! Outgoing HTTP(S) for mappers (`wasi:http/outgoing-handler`), under the endpoint grants.
//!
//! wasmtime's `wasi:http` connects on the host's side, past the socket check that guards
//! `wasi:sockets`; so every request's authority is checked here first, with the same
//! `capabilities.endpoints` grants (port 80 for `http`, 443 for `https` when the URL names
//! none). A name is resolved and every address it resolves to must be granted; a request
//! outside the grants fails with `HTTP-request-denied` before anything is sent. The request
//! then runs as wasmtime's default client runs it (TLS with the web's root certificates).

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use wasmtime_wasi::sockets::SocketAddrUse;
use wasmtime_wasi_http::{Error, RequestOptions, WasiHttpHooks};

use crate::grants::Grants;

/// The hooks of one instance: its module's name and grants.
pub(crate) struct GrantedHttp {
    pub(crate) module: Arc<str>,
    pub(crate) grants: Arc<Grants>,
}

type ResponseFuture = Box<
    dyn Future<
            Output = Result<
                (
                    http::Response<wasmtime_wasi_http::WasiBody>,
                    Box<dyn Future<Output = Result<(), Error>> + Send>,
                ),
                Error,
            >,
        > + Send,
>;

impl WasiHttpHooks for GrantedHttp {
    fn send_request(
        &mut self,
        request: http::Request<wasmtime_wasi_http::WasiBody>,
        options: Option<RequestOptions>,
        fut: Box<dyn Future<Output = Result<(), Error>> + Send>,
    ) -> ResponseFuture {
        _ = fut;
        let grants = self.grants.clone();
        let module = self.module.clone();
        Box::new(async move {
            use http_body_util::BodyExt;
            let uri = request.uri();
            let Some(host) = uri.host() else {
                return Err(Error::HttpRequestUriInvalid);
            };
            let tls = uri.scheme() == Some(&http::uri::Scheme::HTTPS);
            let port = uri.port_u16().unwrap_or(if tls { 443 } else { 80 });
            let host = host
                .trim_start_matches('[')
                .trim_end_matches(']')
                .to_owned();
            if !authority_granted(&grants, &host, port).await? {
                tracing::debug!(
                    %module,
                    host,
                    port,
                    grants = %grants.describe(),
                    "HTTP request refused: not granted by capabilities.endpoints"
                );
                return Err(Error::HttpRequestDenied);
            }
            let (response, io) = wasmtime_wasi_http::default_send_request(request, options).await?;
            Ok((
                response.map(BodyExt::boxed_unsync),
                Box::new(io) as Box<dyn Future<Output = _> + Send>,
            ))
        })
    }
}

/// Whether `host:port` is granted: an address directly, a name when every address it resolves
/// to now is (a name granted as such covers exactly its own addresses).
async fn authority_granted(grants: &Grants, host: &str, port: u16) -> Result<bool, Error> {
    if let Ok(ip) = host.parse::<IpAddr>() {
        return Ok(grants
            .allows(SocketAddr::new(ip, port), SocketAddrUse::TcpConnect)
            .await);
    }
    let addrs: Vec<SocketAddr> = match tokio::net::lookup_host((host, port)).await {
        Ok(addrs) => addrs.collect(),
        Err(_) => return Err(Error::DestinationNotFound),
    };
    if addrs.is_empty() {
        return Err(Error::DestinationNotFound);
    }
    for addr in addrs {
        if !grants.allows(addr, SocketAddrUse::TcpConnect).await {
            return Ok(false);
        }
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn authorities_are_checked_against_the_grants() {
        let grants = Grants::parse(&["127.0.0.1:8080", "localhost:9090"]).expect("grants");
        assert!(authority_granted(&grants, "127.0.0.1", 8080).await.unwrap());
        assert!(!authority_granted(&grants, "127.0.0.1", 80).await.unwrap());
        assert!(authority_granted(&grants, "localhost", 9090).await.unwrap());
        assert!(!authority_granted(&grants, "localhost", 9091).await.unwrap());
        assert!(matches!(
            authority_granted(&grants, "no-such-host.invalid", 80).await,
            Err(Error::DestinationNotFound)
        ));
    }
}
