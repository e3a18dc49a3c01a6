//! Edge app → cloud: the HTTP server on `modules.serviceBus.server:port`. An app posts
//! `{"method", "targetURL", "payload"}`; when a `servicebus → rest` rule allows `targetURL`,
//! the request goes to the cloud's router and the cloud endpoint's answer comes back as
//! `{"code", "msg", "body"}` (always HTTP 200, the outcome in `code`, as edgecore answers).
//!
//! Like edgecore, the server listens only while at least one rule allows a URL.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use axum::body::Body;
use axum::extract::State;
use axum::response::IntoResponse;
use serde::{Deserialize, Serialize};
use tokio::sync::{Semaphore, watch};
use tokio_util::sync::CancellationToken;
use wedge_core::message::{group, module, operation};
use wedge_core::{Bus, Content, Message};

use crate::app_call::MAX_BODY;
use crate::stats::Stats;
use crate::target_urls::same_url;
use crate::wire::go_bytes_json;

/// Requests to the cloud in flight at once; more are answered `429` at once.
pub const MAX_IN_FLIGHT: usize = 64;

/// What an edge app sends.
#[derive(Debug, Deserialize)]
struct ServerRequest {
    #[serde(default)]
    #[allow(
        dead_code,
        reason = "part of the request format; the router reads the raw body"
    )]
    method: String,
    #[serde(rename = "targetURL", default)]
    target_url: String,
}

/// What an edge app gets back.
#[derive(Debug, Serialize, PartialEq, Eq)]
pub struct ServerResponse {
    /// The outcome: 200, or the status of what went wrong.
    pub code: u16,
    /// The outcome in words.
    pub msg: String,
    /// The cloud endpoint's answer.
    pub body: String,
}

/// What the server's handler shares.
#[derive(Clone)]
pub struct ServerState {
    /// The node's bus, to reach edgehub.
    pub bus: Bus,
    /// The URLs rules allow.
    pub allowed: watch::Receiver<Arc<Vec<String>>>,
    /// Whether the cloud link is up (edgehub's connection broadcast).
    pub connected: Arc<AtomicBool>,
    /// How long to wait for the cloud's answer (`modules.serviceBus.timeout`).
    pub timeout: Duration,
    /// Requests in flight.
    pub in_flight: Arc<Semaphore>,
    /// Counters.
    pub stats: Arc<Stats>,
}

/// Serves edge apps on `listener` until `stop` fires.
pub async fn serve(listener: tokio::net::TcpListener, state: ServerState, stop: CancellationToken) {
    let app = axum::Router::new().fallback(handle).with_state(state);
    if let Err(e) = axum::serve(listener, app)
        .with_graceful_shutdown(async move { stop.cancelled().await })
        .await
    {
        tracing::error!("servicebus: the HTTP server stopped: {e}");
    }
}

/// Binds `addr`, saying which key to change when it cannot.
pub async fn bind(addr: &str) -> Result<tokio::net::TcpListener, std::io::Error> {
    tokio::net::TcpListener::bind(addr).await.map_err(|e| {
        std::io::Error::new(
            e.kind(),
            format!("cannot listen on {addr} (modules.serviceBus.server/port): {e}"),
        )
    })
}

async fn handle(State(state): State<ServerState>, body: Body) -> impl IntoResponse {
    let answer = answer(&state, body).await;
    state.stats.count_request(answer.code);
    axum::Json(answer)
}

async fn answer(state: &ServerState, body: Body) -> ServerResponse {
    let fail = |code: u16, msg: String| ServerResponse {
        code,
        msg,
        body: String::new(),
    };
    let Ok(_permit) = state.in_flight.clone().try_acquire_owned() else {
        return fail(
            429,
            format!("too many requests in flight (at most {MAX_IN_FLIGHT}); try again"),
        );
    };
    let Ok(raw) = axum::body::to_bytes(body, MAX_BODY).await else {
        return fail(
            400,
            "can't read data from body of the http's request".to_owned(),
        );
    };
    let Ok(request) = serde_json::from_slice::<ServerRequest>(&raw) else {
        return fail(400, "invalid params".to_owned());
    };
    let allowed = state
        .allowed
        .borrow()
        .iter()
        .any(|url| same_url(url, &request.target_url));
    if !allowed {
        return fail(
            400,
            format!(
                "url {} is not allowed and please make a rule for this url in the cloud",
                request.target_url
            ),
        );
    }
    if !state.connected.load(Ordering::Relaxed) {
        // Not queued: the caller would have given up long before a later delivery, which
        // would then call the cloud endpoint for nobody.
        return fail(503, "the node is not connected to the cloud".to_owned());
    }
    let Ok(content) = Content::from_raw(go_bytes_json(&raw)) else {
        return fail(500, "cannot encode the request".to_owned());
    };
    let msg = Message::build(
        module::SERVICEBUS,
        group::USER,
        operation::UPLOAD,
        &request.target_url,
        content,
    );
    match state
        .bus
        .send_sync(module::EDGEHUB, msg, state.timeout)
        .await
    {
        Ok(reply) => ServerResponse {
            code: 200,
            msg: "receive response from cloud successfully".to_owned(),
            body: String::from_utf8_lossy(&reply.content.to_bytes()).into_owned(),
        },
        Err(e) => fail(400, e.to_string()),
    }
}

/// The address `server:port` names.
pub fn address(server: &str, port: u16) -> String {
    match server.parse::<std::net::IpAddr>() {
        Ok(ip) => SocketAddr::new(ip, port).to_string(),
        Err(_) => format!("{server}:{port}"),
    }
}
