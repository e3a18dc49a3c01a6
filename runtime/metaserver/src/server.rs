//! The HTTP side: KubeEdge's unhold-upgrade paths, and the Kubernetes API (`api`) for the
//! rest.

use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use serde_json::Value;
use wedge_core::message::{group, module, operation};
use wedge_core::{Bus, Content, Message};

use crate::settings::MetaServerSettings;
use crate::unhold::{self, Refusal};

/// The module's name on the bus (and the source of its queries).
pub const NAME: &str = "metaserver";

/// What the handlers share.
#[derive(Clone)]
pub struct Shared {
    /// The node's bus.
    pub bus: Bus,
    /// The settings.
    pub settings: Arc<MetaServerSettings>,
    /// The Kubernetes API.
    pub api: Arc<crate::api::Api>,
}

/// The routes.
pub fn router(shared: Shared) -> axum::Router {
    axum::Router::new()
        .route("/api/v1/pods/unhold-upgrade", post(unhold_pod))
        .route("/api/v1/nodes/unhold-upgrade", post(unhold_node))
        .fallback(kubernetes_api)
        .with_state(shared)
}

async fn kubernetes_api(
    State(shared): State<Shared>,
    method: axum::http::Method,
    uri: axum::http::Uri,
    headers: axum::http::HeaderMap,
    body: Body,
) -> Response {
    shared.api.clone().handle(method, uri, headers, body).await
}

fn refused(r: &Refusal) -> Response {
    let status = StatusCode::from_u16(r.status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    (status, format!("{r}\n")).into_response()
}

async fn body_text(body: Body) -> Result<String, Response> {
    let bytes: Bytes = axum::body::to_bytes(body, unhold::MAX_BODY)
        .await
        .map_err(|e| (StatusCode::INTERNAL_SERVER_ERROR, format!("{e}\n")).into_response())?;
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

/// The stored objects metamanager answers `resource` with.
async fn stored(shared: &Shared, resource: &str) -> Result<Vec<Value>, Refusal> {
    let query = Message::build(
        NAME,
        group::META,
        operation::QUERY,
        resource,
        Content::null(),
    );
    let reply = shared
        .bus
        .send_sync(module::METAMANAGER, query, shared.settings.query_timeout)
        .await
        .map_err(|e| Refusal::Store(e.to_string()))?;
    if reply.route.operation == operation::ERROR {
        return Err(Refusal::Store(
            reply.content.as_string().unwrap_or_default(),
        ));
    }
    let texts: Vec<String> = reply
        .content
        .parse()
        .map_err(|e| Refusal::Store(format!("metamanager's answer is not a list: {e}")))?;
    Ok(texts
        .iter()
        .filter_map(|t| serde_json::from_str(t).ok())
        .collect())
}

async fn release(shared: &Shared, namespace: &str, name: &str) -> Result<(), Refusal> {
    shared
        .bus
        .send(module::EDGED, unhold::release(namespace, name))
        .await
        .map_err(|e| Refusal::Store(format!("edged did not take the release: {e}")))
}

async fn unhold_pod(State(shared): State<Shared>, body: Body) -> Response {
    let text = match body_text(body).await {
        Ok(t) => t,
        Err(r) => return r,
    };
    let outcome = async {
        let (namespace, name) = unhold::pod_key(&text)?;
        let pods = stored(&shared, &format!("{namespace}/pod/{name}")).await?;
        let pod = pods.first().ok_or_else(|| {
            Refusal::NotFound(format!("pod not found: pods \"{name}\" not found"))
        })?;
        unhold::check(pod)?;
        release(&shared, &namespace, &name).await?;
        tracing::info!(pod = %text, "unhold-upgrade: released");
        Ok(())
    }
    .await;
    match outcome {
        Ok(()) => StatusCode::OK.into_response(),
        Err(r) => refused(&r),
    }
}

async fn unhold_node(State(shared): State<Shared>, body: Body) -> Response {
    let text = match body_text(body).await {
        Ok(t) => t,
        Err(r) => return r,
    };
    let node = text.trim();
    let outcome = async {
        if node.is_empty() {
            return Err(Refusal::NoNode);
        }
        if node != shared.settings.node_name {
            return Err(Refusal::NotFound(format!(
                "node not found: nodes \"{node}\" not found"
            )));
        }
        let pods = stored(&shared, "default/pod").await?;
        let mut released = 0;
        for pod in &pods {
            if pod["spec"]["nodeName"] != node || unhold::check(pod).is_err() {
                continue;
            }
            let meta = &pod["metadata"];
            let namespace = meta["namespace"].as_str().unwrap_or("default");
            let Some(name) = meta["name"].as_str() else {
                continue;
            };
            release(&shared, namespace, name).await?;
            released += 1;
        }
        tracing::info!(node, released, "unhold-upgrade: node-wide");
        Ok(())
    }
    .await;
    match outcome {
        Ok(()) => StatusCode::OK.into_response(),
        Err(r) => refused(&r),
    }
}
