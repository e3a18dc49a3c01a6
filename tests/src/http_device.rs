//! A real HTTP/1.1 device for the `http-json` mapper's tests, built on hyper: `GET <path>`
//! answers the JSON document stored at that path, `PUT`/`POST`/`PATCH <path>` merges the JSON
//! object of the body into the document at that path. Every request is recorded.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use anyhow::Result;
use http_body_util::{BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use serde_json::Value;

/// One request as the device received it.
#[derive(Debug, Clone, PartialEq)]
pub struct Seen {
    /// Method, e.g. `GET`.
    pub method: String,
    /// Path and query.
    pub path: String,
    /// The body, parsed as JSON (`null` when empty or not JSON).
    pub body: Value,
}

#[derive(Default)]
struct State {
    documents: HashMap<String, Value>,
    seen: Vec<Seen>,
}

/// A running device; dropping it stops it.
pub struct HttpDevice {
    /// Where it listens.
    pub addr: SocketAddr,
    state: Arc<Mutex<State>>,
    task: tokio::task::JoinHandle<()>,
}

impl HttpDevice {
    /// Listens on a free loopback port and serves `documents` (path → JSON); needs a tokio
    /// runtime.
    pub async fn start(documents: Vec<(&str, Value)>) -> Result<HttpDevice> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let state = Arc::new(Mutex::new(State {
            documents: documents
                .into_iter()
                .map(|(p, v)| (p.to_owned(), v))
                .collect(),
            seen: Vec::new(),
        }));
        let shared = state.clone();
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let state = shared.clone();
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |req| {
                        let state = state.clone();
                        async move { Ok::<_, hyper::Error>(answer(&state, req).await) }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        Ok(HttpDevice { addr, state, task })
    }

    /// `http://127.0.0.1:<port>`.
    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The document at `path` now.
    pub fn document(&self, path: &str) -> Option<Value> {
        self.lock().documents.get(path).cloned()
    }

    /// Replaces the document at `path`.
    pub fn set_document(&self, path: &str, value: Value) {
        self.lock().documents.insert(path.to_owned(), value);
    }

    /// Every request so far, in order.
    pub fn seen(&self) -> Vec<Seen> {
        self.lock().seen.clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Drop for HttpDevice {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn answer(state: &Mutex<State>, req: Request<Incoming>) -> Response<Full<Bytes>> {
    let method = req.method().as_str().to_owned();
    let path = req
        .uri()
        .path_and_query()
        .map(|p| p.as_str().to_owned())
        .unwrap_or_default();
    let body = match req.into_body().collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(_) => return reply(StatusCode::BAD_REQUEST, "unreadable body".into()),
    };
    let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let mut state = state.lock().unwrap_or_else(|e| e.into_inner());
    state.seen.push(Seen {
        method: method.clone(),
        path: path.clone(),
        body: body.clone(),
    });
    match method.as_str() {
        "GET" => match state.documents.get(&path) {
            Some(doc) => reply(StatusCode::OK, doc.to_string()),
            None => reply(StatusCode::NOT_FOUND, "{}".into()),
        },
        "PUT" | "POST" | "PATCH" => {
            let doc = state
                .documents
                .entry(path)
                .or_insert_with(|| Value::Object(Default::default()));
            match (doc, body) {
                (Value::Object(doc), Value::Object(fields)) => {
                    doc.extend(fields);
                    reply(StatusCode::OK, "{}".into())
                }
                (doc, value) => {
                    *doc = value;
                    reply(StatusCode::OK, "{}".into())
                }
            }
        }
        _ => reply(StatusCode::METHOD_NOT_ALLOWED, "{}".into()),
    }
}

fn reply(status: StatusCode, body: String) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    response.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/json"),
    );
    response
}
