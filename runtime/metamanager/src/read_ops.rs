//! `query`, and the remote calls that go through the cloud.
//!
//! Objects the cloud owns and edged needs fresh (configmaps, secrets, tokens, leases...) are
//! asked of the cloud while it is connected; the answer is cached in `meta` so the node can
//! answer the same query from the cache when the cloud is away.

use wedge_core::message::{CloudAnswer, module};
use wedge_core::{Content, Message, Resource};

use std::sync::atomic::Ordering;

use crate::in_flight::question_of;
use crate::meta_table;
use crate::process::Processor;
use crate::routing::Router;

/// Resource types a query asks the cloud for while connected (KubeEdge's remote types).
const REMOTE_TYPES: &[&str] = &[
    "configmap",
    "secret",
    "persistentvolume",
    "persistentvolumeclaim",
    "volumeattachment",
    "serviceaccounttoken",
    "lease",
    "certificatesigningrequest",
];

fn is_remote(resource: &Resource<'_>) -> bool {
    REMOTE_TYPES.contains(&resource.kind)
        || (resource.kind == "k8s" && resource.name == Some("ca.crt"))
}

impl Processor {
    /// `query`: remote types go to the cloud while connected; everything else (and everything
    /// while offline) is answered from SQLite with a JSON array of the stored values.
    pub(crate) async fn query(&self, msg: Message) {
        let Some((key, _)) = self.resource_of(&msg, false).await else {
            return;
        };
        let remote = Resource::parse(&key).is_ok_and(|r| is_remote(&r) && !r.is_list());
        if remote && self.router.is_connected() {
            return self.remote(msg, true).await;
        }
        let (router, store) = (self.router.clone(), self.store.clone());
        // Queued behind earlier writes, so the query sees them.
        self.later(async move { answer_locally(&router, &store, &msg, None).await })
            .await;
    }

    /// Sends `msg` to the cloud under a fresh id and relays the cloud's answer to the requester
    /// (with the requester's id as `parent_msg_id`), acknowledging the answer to the cloud.
    /// With `cache`, the answer is stored (and a failed call falls back to the stored copy),
    /// and a query the same as one already in flight waits for that one's answer
    /// ([`crate::in_flight`]).
    pub(crate) async fn remote(&self, msg: Message, cache: bool) {
        if !self.router.is_connected() {
            let router = self.router.clone();
            return self
                .later(async move {
                    router
                        .reply_error(&msg, "failed to process remote: not connected")
                        .await
                })
                .await;
        }
        let question = cache.then(|| question_of(&msg));
        if let Some(q) = &question
            && self.in_flight.join(q, &msg)
        {
            self.stats.joined.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let (router, store) = (self.router.clone(), self.store.clone());
        let timeout = self.settings.remote_query_timeout;
        let token = self.token.clone();
        let in_flight = self.in_flight.clone();
        // Not on the ordered stage: a 60 s wait for the cloud must not hold up other messages.
        tokio::spawn(async move {
            tokio::select! {
                _ = token.cancelled() => {}
                _ = async {
                    let outcome = ask_cloud(&router, &store, &msg, cache, timeout).await;
                    let mut askers = vec![msg];
                    if let Some(q) = &question {
                        askers.extend(in_flight.close(q));
                    }
                    for asker in &askers {
                        serve(&router, &store, asker, &outcome, cache).await;
                    }
                    if let Outcome::Answer(reply) = outcome {
                        router.to_cloud(reply.response(Content::ok())).await;
                    }
                } => {}
            }
        });
    }
}

/// What came of a remote call.
enum Outcome {
    /// The cloud answered (possibly with its refusal, which is relayed as sent).
    Answer(Box<Message>),
    /// The cloud could not be asked or did not answer in time: why.
    Unreachable(String),
    /// The cloud's answer could not be used: why.
    Unusable(String),
}

/// Asks the cloud `msg` and, with `cache`, stores what it answers.
async fn ask_cloud(
    router: &Router,
    store: &wedge_core::Store,
    msg: &Message,
    cache: bool,
    timeout: std::time::Duration,
) -> Outcome {
    let request = msg.with_new_id();
    let cloud = router.cloud_module().to_owned();
    let reply = match router.bus().send_sync(&cloud, request, timeout).await {
        Ok(reply) if reply.route.operation == wedge_core::message::operation::ERROR => {
            return Outcome::Unreachable(
                String::from_utf8_lossy(&reply.content.to_bytes()).into_owned(),
            );
        }
        Ok(reply) => reply,
        Err(e) => return Outcome::Unreachable(e.to_string()),
    };
    // An answer that carries an error is the cloud's word, not a failure to reach it: no
    // cached copy stands in for it, and the requester gets it as sent (see `CloudAnswer`).
    let refused = CloudAnswer::of(&reply.content).error().cloned();
    match &refused {
        // A lookup of something the cloud does not have is an answer, not a fault (kubelet
        // reads the lease before it creates it).
        Some(e) if e.is_not_found() => tracing::info!(
            resource = %msg.route.resource,
            operation = %msg.route.operation,
            requester = %msg.route.source,
            "the cloud has no such object: {e}"
        ),
        Some(e) => tracing::warn!(
            resource = %msg.route.resource,
            operation = %msg.route.operation,
            requester = %msg.route.source,
            "the cloud refused the request: {e}"
        ),
        None => {}
    }
    if cache && refused.is_none() {
        match cacheable_value(&reply.content) {
            Ok(value) => {
                let key = msg.route.resource.clone();
                let kind = Resource::parse(&key)
                    .map(|r| r.kind.to_owned())
                    .unwrap_or_default();
                let fed =
                    Content::from_raw(value.clone()).unwrap_or_else(|_| Content::string(&value));
                match store
                    .write(move |c| meta_table::upsert(c, &key, &kind, &value))
                    .await
                {
                    Ok(()) => {
                        router
                            .to_metaserver(
                                wedge_core::message::operation::UPDATE,
                                &msg.route.resource,
                                fed,
                            )
                            .await;
                    }
                    Err(e) => {
                        tracing::warn!(resource = %msg.route.resource, "remote answer not cached: {e}")
                    }
                }
            }
            Err(text) => return Outcome::Unusable(text),
        }
    }
    Outcome::Answer(Box::new(reply))
}

/// Answers `asker` with what the remote call came to: the cloud's answer under the asker's id,
/// the cached copy when the cloud was unreachable (with `cache`), else an error.
async fn serve(
    router: &Router,
    store: &wedge_core::Store,
    asker: &Message,
    outcome: &Outcome,
    cache: bool,
) {
    match outcome {
        Outcome::Answer(reply) => {
            let mut relayed = Message::clone(reply);
            relayed.header.parent_id = asker.header.id.clone();
            router.reply(asker, relayed).await;
        }
        Outcome::Unreachable(text) if cache => {
            answer_locally(router, store, asker, Some(text.clone())).await;
        }
        Outcome::Unreachable(text) | Outcome::Unusable(text) => {
            router
                .reply_error(asker, format!("failed to process remote: {text}"))
                .await;
        }
    }
}

/// The value to cache from a cloud answer: the object it carries (`Object` of an
/// `{"Object":…,"Err":…}` envelope, or the answer itself); an error is never cached.
fn cacheable_value(content: &Content) -> Result<String, String> {
    match CloudAnswer::of(content) {
        CloudAnswer::Error(e) => Err(format!("the cloud answered with an error: {e}")),
        CloudAnswer::Object(serde_json::Value::String(text)) => Ok(text),
        CloudAnswer::Object(object) => serde_json::to_string(&object).map_err(|e| e.to_string()),
        CloudAnswer::Ok => Ok(content
            .as_string()
            .unwrap_or_else(|| content.raw().to_owned())),
    }
}

/// Answers a query from SQLite. `remote_failure` is why the cloud could not answer: then an
/// empty cache is an error rather than an empty list.
async fn answer_locally(
    router: &Router,
    store: &wedge_core::Store,
    msg: &Message,
    remote_failure: Option<String>,
) {
    let key = msg.route.resource.clone();
    // The list form `<ns>/<type>` returns every object of the type, in all namespaces.
    let list_of = Resource::parse(&key)
        .ok()
        .filter(|r| r.is_list())
        .map(|r| r.kind.to_owned());
    let values = store
        .read(move |c| match list_of {
            Some(kind) => meta_table::values_of_type(c, &kind),
            None => Ok(meta_table::get(c, &key)?.into_iter().collect()),
        })
        .await;
    let values = match (values, remote_failure) {
        (Ok(values), Some(why)) if values.is_empty() => {
            return router
                .reply_error(
                    msg,
                    format!("failed to process remote: {why}; no cached copy"),
                )
                .await;
        }
        (Ok(values), _) => values,
        (Err(e), _) => {
            return router
                .reply_error(msg, format!("query meta failed, {e}"))
                .await;
        }
    };
    let content = match Content::json(&values) {
        Ok(c) => c,
        Err(e) => {
            return router
                .reply_error(msg, format!("query meta failed, {e}"))
                .await;
        }
    };
    let mut reply = msg.response(content);
    reply.route.source = module::METAMANAGER.to_owned();
    router.reply(msg, reply).await;
}
