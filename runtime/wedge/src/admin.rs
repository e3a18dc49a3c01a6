//! The admin HTTP API's routes: `GET /healthz`, `GET /metrics`, `/modules` and `/devices`
//! (`admin_devices.rs`). How clients reach them (unix socket, TCP with a token, limits) is
//! `admin_server.rs`.

use std::sync::Arc;
use std::time::Instant;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use serde::Serialize;
use wedge_core::health::{Health, ModuleHealth};
use wedge_core::metrics::{MetricsSource, PromWriter};
use wedge_wasm::{ModuleKind, WasmError, WasmHost};

use wedge_mappers::WasmTwinHooks;

/// What the handlers read.
#[derive(Clone)]
pub struct AdminState {
    /// The node's name, shown in `/healthz`.
    pub node: String,
    /// Module health from the supervisor.
    pub health: Health,
    /// Everything that writes metrics.
    pub sources: Vec<Arc<dyn MetricsSource>>,
    /// When the daemon started.
    pub started: Instant,
    /// The Wasm host, for `/modules`.
    pub wasm: Option<Arc<WasmHost>>,
    /// devicetwin's hooks: a mapper deployed here is handed the devices of its protocol.
    pub twin_hooks: Option<Arc<WasmTwinHooks>>,
    /// Compiles deployed components in a child process.
    pub precompiler: Option<crate::precompile::Precompiler>,
    /// devicetwin, for `/devices` (when it runs).
    pub twin: Option<Arc<wedge_devicetwin::module::DeviceTwin>>,
    /// The bus, to hand devicetwin a desired value.
    pub bus: wedge_core::Bus,
    /// The node's database, whose writability `/healthz` reports.
    pub store: Option<wedge_core::Store>,
    /// DMI, to name the KubeEdge mapper of a device (when devicetwin runs).
    pub dmi: Option<Arc<wedge_dmi::Dmi>>,
}

#[derive(Serialize)]
struct HealthBody<'a> {
    status: &'static str,
    node: &'a str,
    modules: std::collections::BTreeMap<String, ModuleHealth>,
    /// Why the node's database cannot take writes; absent when it can.
    #[serde(rename = "storeUnwritable", skip_serializing_if = "Option::is_none")]
    store_unwritable: Option<String>,
}

/// 200 when every module runs and the store takes writes; 503 otherwise: a node that cannot
/// store what it acknowledges is not healthy, even if every task is alive.
async fn healthz(State(state): State<AdminState>) -> impl IntoResponse {
    let store_unwritable = state.store.as_ref().and_then(|s| s.unwritable());
    let ok = state.health.all_running() && store_unwritable.is_none();
    let body = HealthBody {
        status: if ok { "ok" } else { "unavailable" },
        node: &state.node,
        modules: state.health.snapshot(),
        store_unwritable,
    };
    let code = if ok {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (
        code,
        axum::Json(serde_json::to_value(&body).unwrap_or_default()),
    )
}

fn wasm_host(
    state: &AdminState,
) -> Result<&Arc<WasmHost>, (StatusCode, axum::Json<serde_json::Value>)> {
    state.wasm.as_ref().ok_or_else(|| {
        error_body(
            StatusCode::SERVICE_UNAVAILABLE,
            "the Wasm host is not running on this node",
        )
    })
}

fn error_body(code: StatusCode, text: &str) -> (StatusCode, axum::Json<serde_json::Value>) {
    (code, axum::Json(serde_json::json!({ "error": text })))
}

fn wasm_error(e: WasmError) -> (StatusCode, axum::Json<serde_json::Value>) {
    let code = match e {
        WasmError::Invalid { .. }
        | WasmError::Init(_)
        | WasmError::Trap { .. }
        | WasmError::Guest(_) => StatusCode::BAD_REQUEST,
        WasmError::NotFound(_) => StatusCode::NOT_FOUND,
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    };
    error_body(code, &e.to_string())
}

/// `GET /modules`: every deployed module with its state.
async fn list_modules(State(state): State<AdminState>) -> impl IntoResponse {
    let host = wasm_host(&state)?;
    Ok::<_, (StatusCode, axum::Json<serde_json::Value>)>(axum::Json(
        serde_json::to_value(host.list()).unwrap_or_default(),
    ))
}

/// `POST /modules`: deploy or upgrade from a packaged component in the body.
async fn deploy_module(
    State(state): State<AdminState>,
    body: axum::body::Bytes,
) -> impl IntoResponse {
    let host = wasm_host(&state)?.clone();
    // A protocol a KubeEdge mapper drives over DMI is not given to a Wasm mapper too.
    if let (Ok(manifest), Some(dmi)) = (wedge_wasm::package::extract(&body), &state.dmi)
        && manifest.kind == ModuleKind::Mapper
        && let Some(protocol) = manifest.protocol.as_deref()
        && let Some((_, mapper)) = dmi.mappers().into_iter().find(|(p, _)| p == protocol)
        && host.get(&manifest.name).is_none()
    {
        return Err(error_body(
            StatusCode::CONFLICT,
            &format!(
                "protocol {protocol:?} is driven by the KubeEdge mapper {mapper:?} over DMI on this node; stop it or give this module another protocol"
            ),
        ));
    }
    if let Some(precompiler) = &state.precompiler
        && let Err(e) = precompiler.run(&body).await
    {
        tracing::debug!("precompile in a child process failed; compiling in-process: {e:#}");
    }
    let status = host.deploy(body.to_vec()).await.map_err(wasm_error)?;
    if status.kind == ModuleKind::Mapper.as_str()
        && let Some(hooks) = &state.twin_hooks
    {
        hooks.mapper_deployed(&status.name).await;
    }
    crate::heap::release_free_memory();
    Ok::<_, (StatusCode, axum::Json<serde_json::Value>)>((
        StatusCode::CREATED,
        axum::Json(serde_json::to_value(status).unwrap_or_default()),
    ))
}

/// `after=N` of a query string (0 when absent); anything else in it is an error.
fn after_of(uri: &axum::http::Uri) -> Result<u64, (StatusCode, axum::Json<serde_json::Value>)> {
    let Some(query) = uri.query().filter(|q| !q.is_empty()) else {
        return Ok(0);
    };
    query
        .strip_prefix("after=")
        .and_then(|n| n.parse().ok())
        .ok_or_else(|| {
            error_body(
                StatusCode::BAD_REQUEST,
                "the only query is after=<line number>",
            )
        })
}

/// `GET /modules/{name}/logs[?after=N]`: the module's last log lines (a bounded ring), oldest
/// first.
async fn module_logs(
    State(state): State<AdminState>,
    axum::extract::Path(name): axum::extract::Path<String>,
    uri: axum::http::Uri,
) -> impl IntoResponse {
    let after = after_of(&uri)?;
    let host = wasm_host(&state)?;
    let deployed = host
        .get(&name)
        .ok_or_else(|| wasm_error(WasmError::NotFound(name.clone())))?;
    Ok::<_, (StatusCode, axum::Json<serde_json::Value>)>(axum::Json(serde_json::json!({
        "module": name,
        "lines": deployed.log_lines(after),
    })))
}

/// `DELETE /modules/{name}`.
async fn remove_module(
    State(state): State<AdminState>,
    axum::extract::Path(name): axum::extract::Path<String>,
) -> impl IntoResponse {
    let host = wasm_host(&state)?.clone();
    host.remove(&name).await.map_err(wasm_error)?;
    Ok::<_, (StatusCode, axum::Json<serde_json::Value>)>(StatusCode::NO_CONTENT)
}

async fn metrics(State(state): State<AdminState>) -> impl IntoResponse {
    let mut w = PromWriter::new();
    for source in &state.sources {
        source.write_metrics(&mut w);
    }
    write_process_metrics(&mut w, state.started);
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        w.finish(),
    )
}

/// Resident memory and uptime, so RSS can be watched without other tools.
fn write_process_metrics(w: &mut PromWriter, started: Instant) {
    if let Some(rss) = resident_bytes() {
        w.family(
            "process_resident_memory_bytes",
            "Resident memory size in bytes.",
            "gauge",
        );
        w.sample("process_resident_memory_bytes", &[], rss as f64);
    }
    w.family(
        "wedge_uptime_seconds",
        "Seconds since the daemon started.",
        "gauge",
    );
    w.sample("wedge_uptime_seconds", &[], started.elapsed().as_secs_f64());
    // The fd budget (row 8 of issue 15): how close the node is to `Too many open files`.
    if let Ok(entries) = std::fs::read_dir("/proc/self/fd") {
        w.family(
            "process_open_fds",
            "Number of open file descriptors.",
            "gauge",
        );
        w.sample("process_open_fds", &[], entries.count() as f64);
    }
    if let Some((soft, _)) = crate::rlimit::nofile() {
        w.family(
            "process_max_fds",
            "Maximum number of open file descriptors (soft RLIMIT_NOFILE).",
            "gauge",
        );
        w.sample("process_max_fds", &[], soft as f64);
    }
}

fn resident_bytes() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    Some(pages * 4096)
}

/// The routes. Bodies arrive already read and capped (`wedge.admin.maxBodyBytes`) by the
/// server, so axum's own default limit is lifted.
pub fn router(state: AdminState) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/metrics", get(metrics))
        .route("/modules", get(list_modules).post(deploy_module))
        .route("/modules/{name}", axum::routing::delete(remove_module))
        .route("/modules/{name}/logs", get(module_logs))
        .route("/devices", get(crate::admin_devices::list))
        .route(
            "/devices/{namespace}/{name}",
            get(crate::admin_devices::get),
        )
        .route(
            "/devices/{namespace}/{name}/twins/{property}",
            axum::routing::put(crate::admin_devices::set_desired),
        )
        .layer(axum::extract::DefaultBodyLimit::disable())
        .with_state(state)
}
