//! The Kubernetes REST side of MetaServer: GET, LIST, WATCH, writes and discovery, the way
//! KubeEdge v1.23.1's MetaServer answers them.
//!
//! - **GET and LIST** ask the cloud first (an Application to dynamicController) while the
//!   node is connected, so an edge app sees what it would see at the apiserver, and answer
//!   from the node's store when the cloud is away or does not answer.
//! - **WATCH** is always served from the node's store, after its resource version
//!   (`cache` docs: history, `410 Gone`, bookmarks). The watch is also registered with the
//!   cloud, which then sends the node the objects it covers, through metamanager's SQLite
//!   and into the store: so the watch keeps working offline and catches up after.
//! - **Writes** (create, update, patch, delete) go to the cloud; with the cloud away they
//!   fail with v1.23's `connection lost between EdgeCore and CloudCore`.
//! - **Discovery** (`/api`, `/apis`, `/version`, OpenAPI) is passed through to the cloud and
//!   the last answer kept for when it is away.
//!
//! kubectl's `Table` answers are made here from the objects (`table`).

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use axum::body::{Body, Bytes};
use axum::http::{HeaderMap, Method, StatusCode, Uri, header};
use axum::response::Response;
use serde_json::{Value, json};

use crate::application::{self, Agent, Application, CONNECTION_LOST, Outcome};
use crate::cache::{Cache, Stored, WatchEvent, WatchRefused, WatchSpec};
use crate::catalog::{self, ResourceType};
use crate::request::{self, Request, ResourceRequest, Verb};
use crate::selector::{FieldSelector, LabelSelector};
use crate::status;
use crate::table::{self, IncludeObject, TableVersion};

/// The largest request body read: v1.23.1's 3 MiB.
pub const MAX_BODY: usize = 3 * 1024 * 1024;
/// Requests other than watches served at once; more are answered `429`.
pub const MAX_IN_FLIGHT: usize = 256;
/// A watch's length when the client names none (kube-apiserver's minimum request timeout).
pub const DEFAULT_WATCH: Duration = Duration::from_secs(1800);

/// What the REST handlers share.
pub struct Api {
    /// The node's objects.
    pub cache: Arc<Cache>,
    /// The cloud's Application center, through EdgeHub.
    pub agent: Arc<Agent>,
    /// The last discovery answers, by path.
    discovery: Mutex<HashMap<String, Bytes>>,
    in_flight: Arc<tokio::sync::Semaphore>,
    ctl: crate::ctl::Ctl,
}

impl Api {
    /// The REST side over `cache`, asking the cloud through `agent` and edged through `ctl`
    /// (the `keadm ctl` extensions).
    pub fn new(cache: Arc<Cache>, agent: Arc<Agent>, ctl: crate::ctl::Ctl) -> Api {
        Api {
            cache,
            agent,
            discovery: Mutex::new(HashMap::new()),
            in_flight: Arc::new(tokio::sync::Semaphore::new(MAX_IN_FLIGHT)),
            ctl,
        }
    }

    /// Answers one request.
    pub async fn handle(
        self: Arc<Self>,
        method: Method,
        uri: Uri,
        headers: HeaderMap,
        body: Body,
    ) -> Response {
        let query = request::query_map(uri.query());
        let parsed = request::parse(method.as_str(), uri.path(), &query);
        if let Request::Resource(r) = &parsed
            && r.verb == Verb::Watch
        {
            return self.watch(r, &query, &headers);
        }
        let Ok(_permit) = self.in_flight.clone().try_acquire_owned() else {
            return status::too_many(
                "too many requests in flight on this MetaServer, please try again later",
            );
        };
        if let Request::Resource(r) = &parsed
            && crate::ctl::handles(r)
        {
            let body = match axum::body::to_bytes(body, MAX_BODY).await {
                Ok(b) => b,
                Err(e) => return status::refuse(500, "InternalError", &e.to_string()),
            };
            let raw_query = uri.query().unwrap_or("");
            return self.ctl.serve(&self.cache, r, raw_query, &body).await;
        }
        match parsed {
            Request::PassThrough => self.pass_through(uri.path()).await,
            Request::Unknown => status::refuse(
                404,
                "NotFound",
                "the server could not find the requested resource",
            ),
            Request::Resource(r) => match r.verb {
                Verb::Get => self.get(&r, &query, &headers).await,
                Verb::List => self.list(&r, &query, &headers).await,
                Verb::DeleteCollection => status::refuse(
                    405,
                    "MethodNotAllowed",
                    "deletecollection is not served by MetaServer",
                ),
                _ => self.write(&r, &query, &headers, body).await,
            },
        }
    }

    async fn pass_through(&self, path: &str) -> Response {
        let key = path.trim_end_matches('/').to_owned();
        if self.agent.may_ask() {
            let app = Application::new(
                self.agent.node(),
                &key,
                "get",
                "",
                b"{}".to_vec(),
                Vec::new(),
            );
            match self.agent.apply(&app).await {
                Outcome::Approved(body) => {
                    let body = Bytes::from(crate::discovery::readable(body));
                    self.discovery
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .insert(key, body.clone());
                    return status::json_response(StatusCode::OK, body);
                }
                Outcome::Rejected(s) => return status::answer(&s),
                Outcome::Unreachable(_) => {}
            }
        }
        let kept = self
            .discovery
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&key)
            .cloned();
        match kept {
            Some(body) => status::json_response(StatusCode::OK, body),
            None => status::refuse(
                503,
                "ServiceUnavailable",
                &format!("{CONNECTION_LOST}, and no earlier answer for {key} is kept"),
            ),
        }
    }

    /// The resource type a request names, if the node knows or holds it.
    fn resource_type(&self, r: &ResourceRequest) -> Option<ResourceType> {
        catalog::by_resource(&r.group, &r.resource).or_else(|| {
            let (_, held) = self.cache.list(&r.group, &r.resource, "", &|_| true);
            held.first().map(|s| ResourceType::clone(&s.rtype))
        })
    }

    async fn get(
        &self,
        r: &ResourceRequest,
        query: &HashMap<String, String>,
        headers: &HeaderMap,
    ) -> Response {
        let table = match table_request(headers, query) {
            Ok(t) => t,
            Err(text) => return status::bad_request(&text),
        };
        if self.agent.may_ask() {
            let app = Application::new(
                self.agent.node(),
                &r.key(),
                "get",
                &r.subresource,
                b"{}".to_vec(),
                Vec::new(),
            );
            match self.agent.apply(&app).await {
                Outcome::Approved(body) => return object_answer(r, body, table),
                Outcome::Rejected(s) => return status::answer(&s),
                Outcome::Unreachable(_) => {}
            }
        }
        let namespace = if self.resource_type(r).is_some_and(|t| !t.namespaced) {
            ""
        } else {
            r.namespace.as_str()
        };
        match self.cache.get(&r.group, &r.resource, namespace, &r.name) {
            Some(stored) => match table {
                Some((version, include)) => {
                    let t = table::table(
                        &r.resource,
                        &[&stored.object],
                        &stored.rv.to_string(),
                        include,
                        version,
                        SystemTime::now(),
                    );
                    status::json_response(StatusCode::OK, t.to_string())
                }
                None => status::json_response(StatusCode::OK, stored.text.to_string()),
            },
            None => status::not_found(&r.group, &r.resource, &r.name),
        }
    }

    async fn list(
        &self,
        r: &ResourceRequest,
        query: &HashMap<String, String>,
        headers: &HeaderMap,
    ) -> Response {
        let ReadParams {
            table,
            label,
            field,
            selects,
        } = match read_params(&r.resource, query, headers) {
            Ok(p) => p,
            Err(text) => return status::bad_request(&text),
        };
        if self.agent.may_ask() {
            let app = Application::new(
                self.agent.node(),
                &r.key(),
                "list",
                "",
                application::list_options(label, field, false),
                Vec::new(),
            );
            match self.agent.apply(&app).await {
                Outcome::Approved(body) => return list_answer(r, body, table),
                Outcome::Rejected(s) => return status::answer(&s),
                Outcome::Unreachable(_) => {}
            }
        }
        let Some(rtype) = self.resource_type(r) else {
            return status::refuse(
                404,
                "NotFound",
                "the server could not find the requested resource",
            );
        };
        let namespace = if rtype.namespaced {
            r.namespace.as_str()
        } else {
            ""
        };
        let (revision, items) = self.cache.list(&r.group, &r.resource, namespace, &*selects);
        local_list(r, &rtype, revision, &items, table)
    }

    async fn write(
        &self,
        r: &ResourceRequest,
        query: &HashMap<String, String>,
        headers: &HeaderMap,
        body: Body,
    ) -> Response {
        let body = match axum::body::to_bytes(body, MAX_BODY).await {
            Ok(b) => b,
            Err(_) => {
                return status::refuse(
                    413,
                    "RequestEntityTooLarge",
                    &format!("the request body is larger than {MAX_BODY} bytes"),
                );
            }
        };
        if !self.agent.is_connected() {
            return status::refuse(
                500,
                "InternalError",
                &format!("Internal error occurred: {CONNECTION_LOST}"),
            );
        }
        let mut options = serde_json::Map::new();
        for (q, o) in [("fieldManager", "fieldManager"), ("dryRun", "dryRun")] {
            if let Some(v) = query.get(q) {
                let v = if q == "dryRun" { json!([v]) } else { json!(v) };
                options.insert(o.to_owned(), v);
            }
        }
        let (verb, option, req_body) = match r.verb {
            Verb::Create | Verb::Update => (
                r.verb.application_verb(&r.subresource),
                Value::Object(options).to_string().into_bytes(),
                body.to_vec(),
            ),
            Verb::Patch => {
                let patch_type = headers
                    .get(header::CONTENT_TYPE)
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or("application/merge-patch+json");
                let patch_type = patch_type.split(';').next().unwrap_or("").trim();
                (
                    "patch",
                    application::patch_info(&r.name, patch_type, &body, &r.subresource),
                    Vec::new(),
                )
            }
            _ => {
                let option = if body.is_empty() {
                    b"{}".to_vec()
                } else {
                    body.to_vec()
                };
                ("delete", option, Vec::new())
            }
        };
        let app = Application::new(
            self.agent.node(),
            &r.key(),
            verb,
            &r.subresource,
            option,
            req_body,
        );
        match self.agent.apply(&app).await {
            Outcome::Approved(body) if r.verb == Verb::Delete => {
                let answer = if body.is_empty() || body == b"null" {
                    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success"})
                        .to_string()
                        .into_bytes()
                } else {
                    body
                };
                status::json_response(StatusCode::OK, answer)
            }
            Outcome::Approved(body) => {
                let code = if r.verb == Verb::Create {
                    StatusCode::CREATED
                } else {
                    StatusCode::OK
                };
                status::json_response(code, body)
            }
            Outcome::Rejected(s) => status::answer(&s),
            Outcome::Unreachable(why) => status::refuse(
                500,
                "InternalError",
                &format!("Internal error occurred: {why}"),
            ),
        }
    }

    fn watch(
        self: Arc<Self>,
        r: &ResourceRequest,
        query: &HashMap<String, String>,
        headers: &HeaderMap,
    ) -> Response {
        let ReadParams {
            table,
            label,
            field,
            selects,
        } = match read_params(&r.resource, query, headers) {
            Ok(p) => p,
            Err(text) => return status::bad_request(&text),
        };
        let from = match query.get("resourceVersion").map(String::as_str) {
            None | Some("" | "0") => None,
            Some(text) => match text.parse::<u64>() {
                Ok(rv) => Some(rv),
                Err(_) => {
                    return status::bad_request(&format!(
                        "invalid resource version {text:?}: not a number"
                    ));
                }
            },
        };
        let lasts = match query.get("timeoutSeconds").map(|t| t.parse::<u64>()) {
            None => DEFAULT_WATCH,
            Some(Ok(s)) => Duration::from_secs(s),
            Some(Err(_)) => return status::bad_request("timeoutSeconds is not a number"),
        };
        let rtype = self.resource_type(r);
        let namespace = if rtype.as_ref().is_some_and(|t| !t.namespaced) {
            String::new()
        } else {
            r.namespace.clone()
        };
        let spec = WatchSpec {
            group: r.group.clone(),
            resource: r.resource.clone(),
            namespace,
            name: r.name.clone(),
            selects,
            bookmarks: query
                .get("allowWatchBookmarks")
                .is_some_and(|v| request::go_bool(v)),
        };
        let watch = match self.cache.watch(spec, from) {
            Ok(w) => w,
            Err(WatchRefused::TooMany(n)) => {
                return status::too_many(&format!(
                    "too many watches open on this MetaServer ({n}), please try again later"
                ));
            }
            Err(gone @ WatchRefused::Gone { .. }) => {
                let line = format!(
                    "{{\"type\":\"ERROR\",\"object\":{}}}\n",
                    status::object(410, "Expired", &gone.to_string())
                );
                return status::json_response(StatusCode::OK, line);
            }
        };
        // The cloud is asked to send what this watch covers; the node's store is what is
        // served, so this never holds the answer up.
        let app = Application::new(
            self.agent.node(),
            &ResourceRequest {
                name: String::new(),
                ..r.clone()
            }
            .key(),
            "watch",
            "",
            application::list_options(label, field, true),
            Vec::new(),
        );
        let (app_id, first) = self.agent.register_watch(app.clone());
        if first && self.agent.may_ask() {
            let agent = self.agent.clone();
            tokio::spawn(async move {
                if let Outcome::Rejected(s) = agent.apply(&app).await {
                    tracing::warn!(key = %app.key, "metaserver: the cloud refused the watch: {}", s["message"]);
                }
            });
        }
        let kind = rtype.map_or_else(|| "Status".to_owned(), |t| t.kind);
        let state = WatchStream {
            initial: watch.initial.into(),
            events: watch.events,
            deadline: tokio::time::Instant::now() + lasts,
            lines: Lines {
                api_version: if r.group.is_empty() {
                    r.version.clone()
                } else {
                    format!("{}/{}", r.group, r.version)
                },
                kind,
                resource: r.resource.clone(),
                table,
            },
            _guard: WatchGuard {
                api: self.clone(),
                id: watch.id,
                app_id,
            },
        };
        let stream = futures_util::stream::unfold(state, |mut s| async move {
            let event = match s.initial.pop_front() {
                Some(e) => e,
                None => tokio::select! {
                    e = s.events.recv() => e?,
                    _ = tokio::time::sleep_until(s.deadline) => return None,
                },
            };
            let line = s.lines.line(&event);
            Some((Ok::<_, std::convert::Infallible>(Bytes::from(line)), s))
        });
        let mut response = status::json_response(StatusCode::OK, Body::from_stream(stream));
        response.headers_mut().insert(
            header::TRANSFER_ENCODING,
            header::HeaderValue::from_static("chunked"),
        );
        response
    }
}

/// Ends the cache's watch and the cloud watch when the client goes away or the watch ends.
struct WatchGuard {
    api: Arc<Api>,
    id: u64,
    app_id: String,
}

impl Drop for WatchGuard {
    fn drop(&mut self) {
        self.api.cache.unwatch(self.id);
        let (agent, id) = (self.api.agent.clone(), std::mem::take(&mut self.app_id));
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            handle.spawn(async move { agent.close_watch(&id).await });
        }
    }
}

struct WatchStream {
    initial: VecDeque<WatchEvent>,
    events: tokio::sync::mpsc::Receiver<WatchEvent>,
    deadline: tokio::time::Instant,
    lines: Lines,
    _guard: WatchGuard,
}

/// How a watch's events are written.
struct Lines {
    api_version: String,
    kind: String,
    resource: String,
    table: Option<(TableVersion, IncludeObject)>,
}

impl Lines {
    fn line(&self, event: &WatchEvent) -> String {
        match event {
            WatchEvent::Bookmark(rv) => format!(
                "{{\"type\":\"BOOKMARK\",\"object\":{}}}\n",
                json!({"kind": self.kind, "apiVersion": self.api_version,
                       "metadata": {"resourceVersion": rv.to_string()}})
            ),
            WatchEvent::Object(kind, text) => match self.table {
                None => format!("{{\"type\":\"{kind}\",\"object\":{text}}}\n"),
                Some((version, include)) => {
                    let object: Value = serde_json::from_str(text).unwrap_or(Value::Null);
                    let rv = object["metadata"]["resourceVersion"]
                        .as_str()
                        .unwrap_or("")
                        .to_owned();
                    let t = table::table(
                        &self.resource,
                        &[&object],
                        &rv,
                        include,
                        version,
                        SystemTime::now(),
                    );
                    format!("{{\"type\":\"{kind}\",\"object\":{t}}}\n")
                }
            },
        }
    }
}

/// What a LIST or WATCH reads from its query and headers.
struct ReadParams<'q> {
    table: Option<(TableVersion, IncludeObject)>,
    label: &'q str,
    field: &'q str,
    selects: Selects,
}

/// A LIST's or WATCH's table request and selectors, or why they are bad (a `400`).
fn read_params<'q>(
    resource: &str,
    query: &'q HashMap<String, String>,
    headers: &HeaderMap,
) -> Result<ReadParams<'q>, String> {
    let table = table_request(headers, query)?;
    let label = query.get("labelSelector").map_or("", String::as_str);
    let field = query.get("fieldSelector").map_or("", String::as_str);
    let selects = selection(resource, label, field)?;
    Ok(ReadParams {
        table,
        label,
        field,
        selects,
    })
}

/// Label and field selectors as one predicate over objects.
pub(crate) type Selects = Box<dyn Fn(&Value) -> bool + Send + Sync>;

/// The label and field selectors of a request as one predicate, or why they are bad.
pub(crate) fn selection(resource: &str, label: &str, field: &str) -> Result<Selects, String> {
    let label = LabelSelector::parse(label).map_err(|e| e.to_string())?;
    let field = FieldSelector::parse(resource, field).map_err(|e| e.to_string())?;
    Ok(Box::new(move |o: &Value| {
        label.matches(o["metadata"].get("labels")) && field.matches(o)
    }))
}

/// Whether the client asked for a `Table` (and how), or why its `includeObject` is bad.
fn table_request(
    headers: &HeaderMap,
    query: &HashMap<String, String>,
) -> Result<Option<(TableVersion, IncludeObject)>, String> {
    let accept = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let Some(version) = table::wants_table(accept) else {
        return Ok(None);
    };
    let include = IncludeObject::parse(query.get("includeObject").map(String::as_str))
        .map_err(|e| e.to_string())?;
    Ok(Some((version, include)))
}

/// The cloud's answer to a GET, as JSON or a Table.
fn object_answer(
    r: &ResourceRequest,
    body: Vec<u8>,
    table: Option<(TableVersion, IncludeObject)>,
) -> Response {
    let Some((version, include)) = table else {
        return status::json_response(StatusCode::OK, body);
    };
    let object: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let rv = object["metadata"]["resourceVersion"]
        .as_str()
        .unwrap_or("")
        .to_owned();
    let t = table::table(
        &r.resource,
        &[&object],
        &rv,
        include,
        version,
        SystemTime::now(),
    );
    status::json_response(StatusCode::OK, t.to_string())
}

/// The cloud's answer to a LIST, as JSON or a Table.
fn list_answer(
    r: &ResourceRequest,
    body: Vec<u8>,
    table: Option<(TableVersion, IncludeObject)>,
) -> Response {
    let Some((version, include)) = table else {
        return status::json_response(StatusCode::OK, body);
    };
    let list: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let items: Vec<&Value> = list["items"]
        .as_array()
        .map(|a| a.iter().collect())
        .unwrap_or_default();
    let rv = list["metadata"]["resourceVersion"].as_str().unwrap_or("");
    let t = table::table(&r.resource, &items, rv, include, version, SystemTime::now());
    status::json_response(StatusCode::OK, t.to_string())
}

/// A LIST answered from the node's store.
fn local_list(
    r: &ResourceRequest,
    rtype: &ResourceType,
    revision: u64,
    items: &[Arc<Stored>],
    table: Option<(TableVersion, IncludeObject)>,
) -> Response {
    let rv = revision.to_string();
    if let Some((version, include)) = table {
        let objects: Vec<&Value> = items.iter().map(|s| &s.object).collect();
        let t = table::table(
            &r.resource,
            &objects,
            &rv,
            include,
            version,
            SystemTime::now(),
        );
        return status::json_response(StatusCode::OK, t.to_string());
    }
    // The items' texts are made once per change; the list is only joined here.
    let api_version = rtype.api_version();
    let mut out =
        String::with_capacity(items.iter().map(|s| s.text.len() + 1).sum::<usize>() + 128);
    out.push_str(&format!(
        "{{\"kind\":\"{}List\",\"apiVersion\":\"{api_version}\",\"metadata\":{{\"resourceVersion\":\"{rv}\"}},\"items\":[",
        rtype.kind
    ));
    for (i, s) in items.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str(&s.text);
    }
    out.push_str("]}");
    status::json_response(StatusCode::OK, out)
}
