//! KubeEdge's *Application*: how an edge node asks the cloud's dynamicController to read,
//! write or watch a Kubernetes object on its behalf (v1.23.1 `pkg/metaserver/application.go`).
//!
//! An Application is a JSON object with Go's field names (`ID`, `Key`, `Verb`, `Nodename`,
//! `Option`, `ReqBody`, `Subresource`, `RespBody`, `Status`, `Reason`, `Error`); its byte
//! fields are base64, as Go encodes `[]byte`. It travels from `metaserver` to the cloud group
//! `dynamiccontroller` (resource and operation `null`; a watch set as resource
//! `watchapp/sync`), and the cloud answers with the same Application, `Status` `Approved`
//! (with `RespBody`) or `Rejected` (with the apiserver's `Status` in `Error.ErrStatus`).
//!
//! The [`Agent`] sends them. It remembers the watch Applications open (one per distinct
//! request, shared by the watchers asking the same) and tells the cloud the whole set after
//! every reconnect and whenever one closes, so the cloud's listeners follow the edge's
//! watchers. Unlike v1.23, when the cloud does not answer (no dynamicController, a cloud
//! gone quiet) the agent stops asking for [`QUIET`] and answers from the node at once,
//! rather than making every request wait 10 s.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use base64::Engine as _;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};
use wedge_core::message::module;
use wedge_core::{Bus, Content, Message};

/// The source MetaServer's Applications carry.
pub const SOURCE: &str = "metaserver";
/// The cloud group that takes them.
pub const CLOUD_GROUP: &str = "dynamiccontroller";
/// The resource of a watch-set sync.
pub const WATCH_SYNC: &str = "watchapp/sync";
/// How long the cloud has to answer (v1.23's 10 s).
pub const TIMEOUT: Duration = Duration::from_secs(10);
/// How long the agent answers from the node after the cloud failed to answer.
pub const QUIET: Duration = Duration::from_secs(30);

mod go_bytes {
    //! Go's JSON form of `[]byte`: base64, `null` when nil.
    use base64::Engine as _;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(bytes: &[u8], s: S) -> Result<S::Ok, S::Error> {
        if bytes.is_empty() {
            s.serialize_none()
        } else {
            s.serialize_str(&base64::engine::general_purpose::STANDARD.encode(bytes))
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        let text: Option<String> = Option::deserialize(d)?;
        match text {
            None => Ok(Vec::new()),
            Some(t) => base64::engine::general_purpose::STANDARD
                .decode(t)
                .map_err(serde::de::Error::custom),
        }
    }
}

/// `apierrors.StatusError` as Go encodes it.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct StatusError {
    /// The apiserver's `Status`.
    #[serde(rename = "ErrStatus", default)]
    pub err_status: Value,
}

/// One Application (module docs).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct Application {
    /// SHA-256 of what the request is ([`Application::identify`]).
    #[serde(rename = "ID")]
    pub id: String,
    /// `/<group>/<version>/<resource>/<namespace>/<name>`, or the path of a pass-through.
    pub key: String,
    /// `get`, `list`, `watch`, `create`, `update`, `updatestatus`, `patch`, `delete`.
    pub verb: String,
    /// The node asking.
    pub nodename: String,
    /// The request's options (`ListOptions`, `GetOptions`, a `PatchInfo`...), JSON.
    #[serde(with = "go_bytes")]
    pub option: Vec<u8>,
    /// The request's body.
    #[serde(with = "go_bytes")]
    pub req_body: Vec<u8>,
    /// The subresource.
    pub subresource: String,
    /// The cloud's answer.
    #[serde(with = "go_bytes")]
    pub resp_body: Vec<u8>,
    /// `PreApplying` ... `Approved`, `Rejected`, `Failed`, `Completed`.
    pub status: String,
    /// Why it is in that status.
    pub reason: String,
    /// The apiserver's refusal.
    pub error: StatusError,
}

impl Application {
    /// An Application of `verb` on `key` for `node`.
    pub fn new(
        node: &str,
        key: &str,
        verb: &str,
        subresource: &str,
        option: Vec<u8>,
        req_body: Vec<u8>,
    ) -> Application {
        let mut app = Application {
            key: key.to_owned(),
            verb: verb.to_owned(),
            nodename: node.to_owned(),
            option,
            req_body,
            subresource: subresource.to_owned(),
            status: "PreApplying".to_owned(),
            ..Default::default()
        };
        app.id = app.identify();
        app
    }

    /// v1.23's identifier: SHA-256 of node, key, verb, option, body and subresource, in hex.
    pub fn identify(&self) -> String {
        let mut h = Sha256::new();
        h.update(self.nodename.as_bytes());
        h.update(self.key.as_bytes());
        h.update(self.verb.as_bytes());
        h.update(&self.option);
        h.update(&self.req_body);
        h.update(self.subresource.as_bytes());
        h.finalize().iter().map(|b| format!("{b:02x}")).collect()
    }
}

/// What the cloud made of an Application.
#[derive(Debug, Clone)]
pub enum Outcome {
    /// Done; the answer's body.
    Approved(Vec<u8>),
    /// The apiserver said no: its `Status` (code, reason, message).
    Rejected(Value),
    /// The cloud could not be asked or did not answer: why.
    Unreachable(String),
}

struct WatchApp {
    app: Application,
    users: usize,
}

/// Sends Applications and keeps the watch set (module docs).
pub struct Agent {
    bus: Bus,
    node: String,
    connected: AtomicBool,
    quiet_until: Mutex<Option<Instant>>,
    watches: Mutex<HashMap<String, WatchApp>>,
}

/// The text KubeEdge gives a request made while the cloud is away.
pub const CONNECTION_LOST: &str = "connection lost between EdgeCore and CloudCore";

impl Agent {
    /// An agent for node `node`.
    pub fn new(bus: Bus, node: &str) -> Agent {
        Agent {
            bus,
            node: node.to_owned(),
            connected: AtomicBool::new(false),
            quiet_until: Mutex::new(None),
            watches: Mutex::new(HashMap::new()),
        }
    }

    /// The node's name.
    pub fn node(&self) -> &str {
        &self.node
    }

    /// Records EdgeHub's connection broadcast; a new connection ends any quiet period.
    pub fn set_connected(&self, up: bool) {
        self.connected.store(up, Ordering::Release);
        if up {
            *self.quiet_until.lock().unwrap_or_else(|e| e.into_inner()) = None;
        }
    }

    /// Whether the cloud is connected.
    pub fn is_connected(&self) -> bool {
        self.connected.load(Ordering::Acquire)
    }

    /// Whether to ask the cloud now: connected and not in a quiet period.
    pub fn may_ask(&self) -> bool {
        if !self.is_connected() {
            return false;
        }
        let quiet = self.quiet_until.lock().unwrap_or_else(|e| e.into_inner());
        quiet.is_none_or(|until| Instant::now() >= until)
    }

    fn went_quiet(&self, why: &str) {
        let mut quiet = self.quiet_until.lock().unwrap_or_else(|e| e.into_inner());
        if quiet.is_none_or(|until| Instant::now() >= until) {
            tracing::warn!(
                "metaserver: the cloud's dynamicController did not answer ({why}); \
                 answering from the node for {QUIET:?}"
            );
        }
        *quiet = Some(Instant::now() + QUIET);
    }

    /// Sends `app` and waits for the cloud's answer.
    pub async fn apply(&self, app: &Application) -> Outcome {
        if !self.is_connected() {
            return Outcome::Unreachable(CONNECTION_LOST.to_owned());
        }
        let content = match Content::json(app) {
            Ok(c) => c,
            Err(e) => return Outcome::Unreachable(format!("cannot encode the Application: {e}")),
        };
        let msg = Message::build(SOURCE, CLOUD_GROUP, "null", "null", content);
        let reply = match self.bus.send_sync(module::EDGEHUB, msg, TIMEOUT).await {
            Ok(reply) => reply,
            Err(e) => {
                self.went_quiet(&e.to_string());
                return Outcome::Unreachable(e.to_string());
            }
        };
        let answer: Application = match reply.content.parse() {
            Ok(a) => a,
            Err(e) => {
                return Outcome::Unreachable(format!(
                    "the cloud's answer is not an Application: {e}"
                ));
            }
        };
        match answer.status.as_str() {
            "Approved" => Outcome::Approved(answer.resp_body),
            "Rejected" if answer.error.err_status.get("code").is_some() => {
                Outcome::Rejected(answer.error.err_status)
            }
            // dynamicController wraps some apiserver errors in text; an unknown resource is
            // still the apiserver's 404.
            "Rejected"
                if answer
                    .reason
                    .contains("could not find the requested resource") =>
            {
                Outcome::Rejected(crate::status::object(
                    404,
                    "NotFound",
                    "the server could not find the requested resource",
                ))
            }
            "Rejected" => {
                Outcome::Rejected(crate::status::object(500, "InternalError", &answer.reason))
            }
            other => Outcome::Unreachable(format!("the cloud answered {other}: {}", answer.reason)),
        }
    }

    /// Registers a watch Application, shared with the watchers asking the same. Returns its
    /// id (for [`Agent::close_watch`]) and whether it is the first user's, which the caller
    /// sends to the cloud ([`Agent::apply`]); the others are in the set [`Agent::sync_watches`]
    /// sends after every reconnect.
    pub fn register_watch(&self, app: Application) -> (String, bool) {
        let id = app.id.clone();
        let mut watches = self.watches.lock().unwrap_or_else(|e| e.into_inner());
        let entry = watches
            .entry(id.clone())
            .or_insert(WatchApp { app, users: 0 });
        entry.users += 1;
        (id, entry.users == 1)
    }

    /// One user of watch `id` is done; the last one's leaving is told to the cloud.
    pub async fn close_watch(&self, id: &str) {
        let last = {
            let mut watches = self.watches.lock().unwrap_or_else(|e| e.into_inner());
            match watches.get_mut(id) {
                Some(w) if w.users > 1 => {
                    w.users -= 1;
                    false
                }
                Some(_) => {
                    watches.remove(id);
                    true
                }
                None => false,
            }
        };
        if last {
            self.sync_watches().await;
        }
    }

    /// The watch Applications open.
    pub fn watch_apps(&self) -> Vec<Application> {
        self.watches
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .map(|w| w.app.clone())
            .collect()
    }

    /// Watch Applications open.
    pub fn watch_count(&self) -> usize {
        self.watches.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// Tells the cloud every watch Application open (after a reconnect, after one closed):
    /// it adds listeners it lacks and drops those no longer asked for.
    pub async fn sync_watches(&self) {
        if !self.may_ask() {
            return;
        }
        let set: HashMap<String, Application> = {
            let watches = self.watches.lock().unwrap_or_else(|e| e.into_inner());
            watches
                .iter()
                .map(|(id, w)| (id.clone(), w.app.clone()))
                .collect()
        };
        let content = match Content::json(&set) {
            Ok(c) => c,
            Err(e) => return tracing::warn!("metaserver: cannot encode the watch set: {e}"),
        };
        let msg = Message::build(SOURCE, CLOUD_GROUP, "null", WATCH_SYNC, content);
        match self.bus.send_sync(module::EDGEHUB, msg, TIMEOUT).await {
            Ok(reply) => {
                let failed: HashMap<String, Application> =
                    reply.content.parse().unwrap_or_default();
                for app in failed.values() {
                    tracing::warn!(key = %app.key, "metaserver: the cloud did not take a watch: {} {}", app.reason, app.error.err_status["message"]);
                }
                tracing::debug!(
                    watches = set.len(),
                    "metaserver: watch set synced with the cloud"
                );
            }
            Err(e) => self.went_quiet(&e.to_string()),
        }
    }
}

/// The JSON of Go's `metav1.ListOptions` for a list or watch request.
pub fn list_options(label: &str, field: &str, watch: bool) -> Vec<u8> {
    let mut o = serde_json::Map::new();
    if !label.is_empty() {
        o.insert("labelSelector".into(), Value::String(label.to_owned()));
    }
    if !field.is_empty() {
        o.insert("fieldSelector".into(), Value::String(field.to_owned()));
    }
    if watch {
        o.insert("watch".into(), Value::Bool(true));
    }
    Value::Object(o).to_string().into_bytes()
}

/// The JSON of Go's `metaserver.PatchInfo` (what a `patch` Application's option is).
pub fn patch_info(name: &str, patch_type: &str, data: &[u8], subresource: &str) -> Vec<u8> {
    let subresources: Vec<&str> = if subresource.is_empty() {
        Vec::new()
    } else {
        vec![subresource]
    };
    serde_json::json!({
        "Name": name,
        "PatchType": patch_type,
        "Data": base64::engine::general_purpose::STANDARD.encode(data),
        "Options": {},
        "Subresources": subresources,
    })
    .to_string()
    .into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn applications_have_go_field_names_and_base64_bytes() {
        let app = Application::new(
            "n1",
            "/core/v1/pods/default/null",
            "list",
            "",
            list_options("app=a", "", false),
            Vec::new(),
        );
        let v = serde_json::to_value(&app).unwrap();
        assert_eq!(v["Key"], "/core/v1/pods/default/null");
        assert_eq!(v["Nodename"], "n1");
        assert_eq!(v["Option"], "eyJsYWJlbFNlbGVjdG9yIjoiYXBwPWEifQ==");
        assert_eq!(v["ReqBody"], Value::Null);
        assert_eq!(v["ID"].as_str().unwrap().len(), 64);
        // The cloud's answer, as Go writes it.
        let answer: Application = serde_json::from_value(serde_json::json!({
            "ID": app.id, "Key": app.key, "Verb": "list", "Nodename": "n1", "Option": v["Option"],
            "ReqBody": null, "Subresource": "", "RespBody": "eyJpdGVtcyI6W119", "Status": "Approved",
            "Reason": "", "Error": {"ErrStatus": {"metadata": {}}}, "Timestamp": "0001-01-01T00:00:00Z"
        }))
        .unwrap();
        assert_eq!(answer.resp_body, br#"{"items":[]}"#);
        assert_eq!(answer.id, app.identify());
    }
}
