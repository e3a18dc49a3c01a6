//! The admin API's device routes, behind `wedge device ...` and `wedge twin ...`:
//! `GET /devices`, `GET /devices/{namespace}/{name}`, and
//! `PUT /devices/{namespace}/{name}/twins/{property}` with `{"desired": "<value>"}`, which
//! sets a desired value as the cloud would (see `wedge_devicetwin::admin`) and answers once it
//! is stored, with the twin as stored (a twin handler may have changed the value).

use std::time::Duration;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use serde::Deserialize;
use serde_json::{Value, json};
use wedge_core::message::module;
use wedge_devicetwin::admin::DesiredError;
use wedge_devicetwin::module::DeviceTwin;

use crate::admin::AdminState;

type Answer = (StatusCode, axum::Json<Value>);

/// How long a desired value may take to be stored before the request says so.
const APPLY_WAIT: Duration = Duration::from_secs(5);

fn error(code: StatusCode, text: impl std::fmt::Display) -> Answer {
    (code, axum::Json(json!({ "error": text.to_string() })))
}

fn twin(state: &AdminState) -> Result<&std::sync::Arc<DeviceTwin>, Answer> {
    state.twin.as_ref().ok_or_else(|| {
        error(
            StatusCode::SERVICE_UNAVAILABLE,
            "devicetwin does not run on this node (modules.deviceTwin.enable)",
        )
    })
}

/// Which mapper of this node drives devices of `protocol`: `wasm:<module>`, `dmi:<mapper>`,
/// or `""` (none here: an MQTT mapper may still drive it).
fn mapper_of(state: &AdminState, protocol: &str) -> String {
    if protocol.is_empty() {
        return String::new();
    }
    if let Some(m) = state
        .wasm
        .as_ref()
        .and_then(|w| w.mapper_for_protocol(protocol))
    {
        return format!("wasm:{}", m.manifest().name);
    }
    state
        .dmi
        .as_ref()
        .and_then(|d| d.mappers().into_iter().find(|(p, _)| p == protocol))
        .map(|(_, name)| format!("dmi:{name}"))
        .unwrap_or_default()
}

/// A device view with the mapper that drives it.
fn with_mapper(state: &AdminState, view: &wedge_devicetwin::admin::DeviceView) -> Value {
    let mut value = json!(view);
    value["mapper"] = json!(mapper_of(state, &view.protocol));
    value
}

/// `GET /devices`.
pub async fn list(State(state): State<AdminState>) -> Result<axum::Json<Value>, Answer> {
    let twin = twin(&state)?;
    let views: Vec<Value> = twin
        .device_views()
        .iter()
        .map(|v| with_mapper(&state, v))
        .collect();
    Ok(axum::Json(json!(views)))
}

/// `GET /devices/{namespace}/{name}`.
pub async fn get(
    State(state): State<AdminState>,
    Path((namespace, name)): Path<(String, String)>,
) -> Result<axum::Json<Value>, Answer> {
    let twin = twin(&state)?;
    let id = format!("{namespace}/{name}");
    match twin.device_view(&id) {
        Some(view) => Ok(axum::Json(with_mapper(&state, &view))),
        None => Err(error(
            StatusCode::NOT_FOUND,
            format!("no device {id:?} on this node"),
        )),
    }
}

/// The body of a desired value.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Desired {
    desired: String,
}

/// `PUT /devices/{namespace}/{name}/twins/{property}`.
pub async fn set_desired(
    State(state): State<AdminState>,
    Path((namespace, name, property)): Path<(String, String, String)>,
    body: axum::body::Bytes,
) -> Result<axum::Json<Value>, Answer> {
    let twin = twin(&state)?.clone();
    let desired: Desired = serde_json::from_slice(&body).map_err(|e| {
        error(
            StatusCode::BAD_REQUEST,
            format!("the body must be {{\"desired\": \"<value>\"}}: {e}"),
        )
    })?;
    let id = format!("{namespace}/{name}");
    let request = twin
        .desired_request(&id, &property, &desired.desired)
        .map_err(|e| {
            let code = match e {
                DesiredError::NoDevice(_) | DesiredError::NoTwin { .. } => StatusCode::NOT_FOUND,
                DesiredError::Invalid { .. } => StatusCode::BAD_REQUEST,
            };
            error(code, e)
        })?;
    state
        .bus
        .send(module::TWIN, request.message)
        .await
        .map_err(|e| error(StatusCode::SERVICE_UNAVAILABLE, format!("devicetwin: {e}")))?;
    let deadline = tokio::time::Instant::now() + APPLY_WAIT;
    loop {
        let stored = twin
            .device_view(&id)
            .and_then(|d| d.twins.get(&property).cloned());
        if let Some(stored) = stored
            && stored.expected_version >= request.version
        {
            return Ok(axum::Json(
                json!({ "device": id, "property": property, "twin": stored }),
            ));
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(error(
                StatusCode::CONFLICT,
                format!(
                    "{id} {property}={:?} was not applied within {APPLY_WAIT:?}: a twin handler refused it, or a newer desired value came first (see the node's log)",
                    desired.desired
                ),
            ));
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
