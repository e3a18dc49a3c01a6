//! The `keadm ctl` extensions of KubeEdge v1.23.1's MetaServer: restart, logs and exec of the
//! node's pods, answered with v1.23's JSON so `keadm ctl` prints what it prints for edgecore.
//!
//! - `POST /api/v1/namespaces/{ns}/pods/restart`, body a JSON list of pod names →
//!   `{"LogMessages": [...], "errMessages": [...]}` (v1.23's casing). Each pod's app
//!   containers are stopped by edged (bus operation `restart`); its restart policy starts them.
//! - `GET /api/v1/namespaces/{ns}/pods/{name}/log` (`container`, `follow`, `tailLines`,
//!   `sinceSeconds`, `timestamps`, `limitBytes`, `previous`) → `{"logMessages": [text]}`, or
//!   with `follow=true` the log as `text/plain`, streamed. Read from edged's kubelet server
//!   over the in-process link (never a TCP port), the way edgeStream reads it.
//! - `POST /api/v1/namespaces/{ns}/pods/{name}/exec?command=...&container=...` →
//!   `{"runOutMessages": [...], "errMessages": [...]}`: the command runs to its end in the
//!   container (edged, bus operation `exec-sync`, 10 s). An interactive exec (`tty=true`, which
//!   v1.23 upgrades to SPDY) is refused, naming the field.

use std::time::Duration;

use axum::body::Body;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::Response;
use http_body_util::BodyExt;
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use wedge_core::message::{module, operation};
use wedge_core::{Bus, Content, Message};

use crate::cache::Cache;
use crate::request::ResourceRequest;
use crate::status;

/// How long edged has for a restart or an exec (the exec's own 10 s, and some).
const EDGED_TIMEOUT: Duration = Duration::from_secs(15);
/// The most log text a non-following answer carries.
const MAX_LOG: usize = 16 * 1024 * 1024;

/// What the extensions need.
#[derive(Clone)]
pub struct Ctl {
    /// The bus (to edged).
    pub bus: Bus,
    /// edged's kubelet server, in this process; `None` when edged does not run.
    pub kubelet: Option<wedge_core::kubelet_link::KubeletLink>,
}

fn json_answer(value: &Value) -> Response {
    status::json_response(StatusCode::OK, value.to_string())
}

/// Whether `r` is one of the extensions.
pub fn handles(r: &ResourceRequest) -> bool {
    r.group.is_empty()
        && r.resource == "pods"
        && ((r.name == "restart" && r.subresource.is_empty())
            || r.subresource == "log"
            || r.subresource == "exec")
}

/// Every value of `name` in a raw query string (`command` repeats).
fn all_values(raw_query: &str, name: &str) -> Vec<String> {
    raw_query
        .split('&')
        .filter_map(|pair| {
            let (k, v) = pair.split_once('=')?;
            (k == name).then(|| crate::request::decode(v))
        })
        .collect()
}

async fn ask_edged(bus: &Bus, op: &str, resource: &str, content: Content) -> Result<Value, String> {
    let msg = Message::build(crate::server::NAME, "edged", op, resource, content);
    let reply = bus
        .send_sync(module::EDGED, msg, EDGED_TIMEOUT)
        .await
        .map_err(|e| format!("edged did not answer: {e}"))?;
    reply
        .content
        .parse()
        .map_err(|e| format!("edged's answer is not JSON: {e}"))
}

impl Ctl {
    /// Answers an extension request (see [`handles`]).
    pub async fn serve(
        &self,
        cache: &Cache,
        r: &ResourceRequest,
        raw_query: &str,
        body: &[u8],
    ) -> Response {
        if r.name == "restart" {
            return self.restart(&r.namespace, body).await;
        }
        if r.subresource == "exec" {
            return self.exec(&r.namespace, &r.name, raw_query).await;
        }
        self.logs(cache, &r.namespace, &r.name, raw_query).await
    }

    async fn restart(&self, namespace: &str, body: &[u8]) -> Response {
        let names: Vec<String> = match serde_json::from_slice(body) {
            Ok(n) => n,
            Err(e) => {
                return status::refuse(500, "InternalError", &format!("{e}"));
            }
        };
        let (mut logs, mut errors) = (Vec::new(), Vec::new());
        for name in names {
            let resource = format!("{namespace}/pod/{name}");
            match ask_edged(
                &self.bus,
                operation::RESTART_POD,
                &resource,
                Content::null(),
            )
            .await
            {
                Ok(answer) => match answer["error"].as_str() {
                    Some(e) => errors.push(e.to_owned()),
                    None => logs.push(format!("the pod \"{namespace}/{name}\" restart successful")),
                },
                Err(e) => errors.push(e),
            }
        }
        let mut out = serde_json::Map::new();
        if !errors.is_empty() {
            out.insert("errMessages".into(), json!(errors));
        }
        if !logs.is_empty() {
            out.insert("LogMessages".into(), json!(logs));
        }
        json_answer(&Value::Object(out))
    }

    async fn exec(&self, namespace: &str, name: &str, raw_query: &str) -> Response {
        let commands = all_values(raw_query, "command");
        let container = all_values(raw_query, "container").pop().unwrap_or_default();
        if all_values(raw_query, "tty").iter().any(|t| t == "true") {
            return status::bad_request(
                "tty: an interactive exec is not served by Wedge's MetaServer; run the command \
                 without -t, or use kubectl exec through the cloud",
            );
        }
        let request = json!({"container": container, "command": commands});
        let resource = format!("{namespace}/pod/{name}");
        let content = Content::json(&request).unwrap_or_else(|_| Content::null());
        let answer = match ask_edged(&self.bus, operation::EXEC_SYNC, &resource, content).await {
            Ok(a) => a,
            Err(e) => return json_answer(&json!({"errMessages": [e]})),
        };
        if let Some(e) = answer["error"].as_str() {
            return json_answer(&json!({"errMessages": [e]}));
        }
        let output = answer["output"].as_str().unwrap_or("").to_owned();
        match answer["exitCode"].as_i64() {
            Some(0) if output.is_empty() => json_answer(&json!({})),
            Some(0) => json_answer(&json!({"runOutMessages": [output]})),
            code => json_answer(&json!({"errMessages": [format!(
                "failed to exec command {commands:?} for container {container} for pod \"/{namespace}/{name}\": command exited with {}: {output}",
                code.unwrap_or(-1)
            )]})),
        }
    }

    async fn logs(&self, cache: &Cache, namespace: &str, name: &str, raw_query: &str) -> Response {
        let error = |e: String| json_answer(&json!({"errMessages": [e]}));
        let mut container = all_values(raw_query, "container").pop().unwrap_or_default();
        if container.is_empty() {
            let pod = cache.get("", "pods", namespace, name);
            match pod.and_then(|p| {
                p.object["spec"]["containers"][0]["name"]
                    .as_str()
                    .map(str::to_owned)
            }) {
                Some(c) => container = c,
                None => return error(format!("not found pod:\"/{namespace}/{name}\"")),
            }
        }
        let Some(link) = &self.kubelet else {
            return error("edged is not enabled".to_owned());
        };
        let kept: Vec<String> = raw_query
            .split('&')
            .filter(|p| {
                let k = p.split('=').next().unwrap_or("");
                matches!(
                    k,
                    "follow"
                        | "tailLines"
                        | "sinceSeconds"
                        | "sinceTime"
                        | "timestamps"
                        | "limitBytes"
                        | "previous"
                )
            })
            .map(str::to_owned)
            .collect();
        let follow = all_values(raw_query, "follow").iter().any(|f| f == "true");
        let path = format!(
            "/containerLogs/{namespace}/{name}/{container}?{}",
            kept.join("&")
        );
        let response = match fetch(link, &path).await {
            Ok(r) => r,
            Err(e) => {
                return error(format!(
                    "failed to get logs for container {container} for pod \"/{namespace}/{name}\" with err:{e}"
                ));
            }
        };
        if response.status() != StatusCode::OK {
            return status::refuse(
                500,
                "InternalError",
                &format!(
                    "Unexpected status code from edged: {}",
                    response.status().as_u16()
                ),
            );
        }
        if follow {
            let mut out = Response::new(Body::new(response.into_body()));
            out.headers_mut()
                .insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain"));
            return out;
        }
        let limited = http_body_util::Limited::new(response.into_body(), MAX_LOG);
        match limited.collect().await {
            Ok(text) => {
                json_answer(&json!({"logMessages": [String::from_utf8_lossy(&text.to_bytes())]}))
            }
            Err(e) => error(format!("failed to read logs with err:{e}")),
        }
    }
}

/// A GET to edged's kubelet server over the in-process link.
async fn fetch(
    link: &wedge_core::kubelet_link::KubeletLink,
    path: &str,
) -> Result<hyper::Response<hyper::body::Incoming>, String> {
    let conn = tokio::time::timeout(Duration::from_secs(5), link.connect())
        .await
        .map_err(|_| "edged's kubelet server did not take the connection".to_owned())?
        .map_err(|e| e.to_string())?;
    let (mut sender, driver) = hyper::client::conn::http1::handshake(TokioIo::new(conn))
        .await
        .map_err(|e| e.to_string())?;
    tokio::spawn(async move {
        let _ = driver.await;
    });
    let request = hyper::Request::get(path)
        .header(header::HOST, "localhost")
        .body(http_body_util::Empty::<bytes::Bytes>::new())
        .map_err(|e| e.to_string())?;
    sender
        .send_request(request)
        .await
        .map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repeated_query_values_are_all_read() {
        assert_eq!(
            all_values(
                "command=sh&command=-c&command=echo%20hi&container=c",
                "command"
            ),
            ["sh", "-c", "echo hi"]
        );
        assert_eq!(all_values("a=1", "command"), Vec::<String>::new());
    }
}
