//! insert, update, patch, delete and pushed responses (KubeEdge v1.23 behaviour).

use wedge_core::message::{module, operation};
use wedge_core::{Message, StoreError};

use crate::meta_table;
use crate::process::Processor;

/// Resource types whose insert/update is only relayed to the cloud, never stored.
const EVENT: &str = "event";
const POD: &str = "pod";
const PODPATCH: &str = "podpatch";
const LEASE: &str = "lease";
const NODE: &str = "node";

/// What a guarded pod delete found.
enum PodDelete {
    Deleted,
    NotStored,
    UidMismatch,
}

/// The text stored for a message's content: a JSON string's text (KubeEdge ships patches and
/// some objects as strings), or the JSON itself.
fn stored_value(msg: &Message) -> Result<String, String> {
    if msg.content.is_null() {
        return Err(format!(
            "message for {:?} carries no content to store",
            msg.route.resource
        ));
    }
    Ok(match msg.content.as_string() {
        Some(text) => text,
        None => msg.content.raw().to_owned(),
    })
}

fn write_failed(e: &StoreError) -> String {
    format!("insert or update meta failed, {e}")
}

impl Processor {
    /// Relays `msg` to the cloud unchanged, in order with other outputs.
    async fn relay_to_cloud(&self, msg: Message) {
        let router = self.router.clone();
        self.later(async move { router.to_cloud(msg).await }).await;
    }

    /// Queues an upsert of `msg`'s content under its resource; `None` if the message was
    /// rejected instead.
    async fn queue_upsert(
        &self,
        msg: &Message,
        key: String,
        kind: String,
    ) -> Option<wedge_core::store::PendingWrite<()>> {
        let value = match stored_value(msg) {
            Ok(v) => v,
            Err(text) => {
                self.reject(msg.clone(), text).await;
                return None;
            }
        };
        match self
            .store
            .submit(move |c| meta_table::upsert(c, &key, &kind, &value))
            .await
        {
            Ok(pending) => Some(pending),
            Err(e) => {
                self.reject(msg.clone(), write_failed(&e)).await;
                None
            }
        }
    }

    /// `insert`: events go to the cloud; edged's inserts are remote calls; everything else is
    /// stored, handed to edged (or twin, for devices) and acknowledged.
    pub(crate) async fn insert(&self, msg: Message) {
        let Some((key, kind)) = self.resource_of(&msg, true).await else {
            return;
        };
        if kind == EVENT {
            return self.relay_to_cloud(msg).await;
        }
        if msg.route.source == module::EDGED {
            return self.remote(msg, false).await;
        }
        let Some(pending) = self.queue_upsert(&msg, key.clone(), kind).await else {
            return;
        };
        let router = self.router.clone();
        self.later(async move {
            if let Err(e) = pending.await {
                return router.reply_error(&msg, write_failed(&e)).await;
            }
            router
                .to_metaserver(operation::INSERT, &key, msg.content.clone())
                .await;
            match msg.route.source.as_str() {
                module::DEVICECONTROLLER => router.to_twin(&msg).await,
                module::POLICYCONTROLLER => {}
                _ => router.to_edged(msg.clone()).await,
            }
            router.ok_to(&msg).await;
        })
        .await;
    }

    /// `update`: like insert, with KubeEdge's per-source forwarding.
    pub(crate) async fn update(&self, msg: Message) {
        let Some((key, kind)) = self.resource_of(&msg, true).await else {
            return;
        };
        if kind == EVENT {
            return self.relay_to_cloud(msg).await;
        }
        if msg.route.source == module::EDGED && kind == LEASE {
            return self.remote(msg, false).await;
        }
        let Some(pending) = self.queue_upsert(&msg, key.clone(), kind.clone()).await else {
            return;
        };
        let router = self.router.clone();
        self.later(async move {
            if let Err(e) = pending.await {
                return router.reply_error(&msg, write_failed(&e)).await;
            }
            router
                .to_metaserver(operation::UPDATE, &key, msg.content.clone())
                .await;
            match msg.route.source.as_str() {
                module::EDGED => {
                    router.to_cloud(msg.clone()).await;
                }
                // Node objects from the cloud are stored but not handed to edged.
                module::EDGECONTROLLER | module::DYNAMICCONTROLLER if kind != NODE => {
                    router.to_edged(msg.clone()).await;
                }
                module::DEVICECONTROLLER => router.to_twin(&msg).await,
                _ => {}
            }
            router.ok_to(&msg).await;
        })
        .await;
    }

    /// `patch`: stored, then relayed to the cloud with edged's id so the cloud's answer reaches
    /// edged directly; refused when the cloud is not connected. An event's patch (a repeat of
    /// it) goes to the cloud unstored, as its insert does.
    pub(crate) async fn patch(&self, msg: Message) {
        let Some((key, kind)) = self.resource_of(&msg, true).await else {
            return;
        };
        if kind == EVENT {
            return self.relay_to_cloud(msg).await;
        }
        let Some(pending) = self.queue_upsert(&msg, key, kind).await else {
            return;
        };
        let router = self.router.clone();
        self.later(async move {
            if let Err(e) = pending.await {
                return router.reply_error(&msg, write_failed(&e)).await;
            }
            if router.is_connected() {
                router.to_cloud(msg).await;
            } else {
                router
                    .reply_error(&msg, "connection lost between EdgeCore and CloudCore")
                    .await;
            }
        })
        .await;
    }

    /// `delete`: edged's pod deletes go to the cloud; a pod is deleted only if the stored pod
    /// has the UID the delete names (a stale delete must not remove a re-created pod).
    pub(crate) async fn delete(&self, msg: Message) {
        let Some((key, kind)) = self.resource_of(&msg, true).await else {
            return;
        };
        if kind == POD && msg.route.source == module::EDGED {
            return self.relay_to_cloud(msg).await;
        }
        let fed_key = key.clone();
        let submitted = if kind == POD {
            let Some(uid) = pod_uid(&msg) else {
                let text =
                    format!("delete of pod {key:?} carries no metadata.uid; nothing deleted");
                return self.reject(msg, text).await;
            };
            let patch_key = match wedge_core::Resource::parse(&key) {
                Ok(r) => r.sibling(PODPATCH),
                Err(_) => String::new(),
            };
            self.store
                .submit(move |c| {
                    let Some(stored) = meta_table::get(c, &key)? else {
                        return Ok(PodDelete::NotStored);
                    };
                    if !stored.contains(uid.as_str()) {
                        return Ok(PodDelete::UidMismatch);
                    }
                    meta_table::delete(c, &key)?;
                    // The pod's patch row goes with it.
                    meta_table::delete(c, &patch_key)?;
                    Ok(PodDelete::Deleted)
                })
                .await
        } else {
            self.store
                .submit(move |c| meta_table::delete(c, &key).map(|_| PodDelete::Deleted))
                .await
        };
        let pending = match submitted {
            Ok(p) => p,
            Err(e) => return self.reject(msg, format!("delete meta failed, {e}")).await,
        };
        let router = self.router.clone();
        self.later(async move {
            match pending.await {
                Err(e) => {
                    router
                        .reply_error(&msg, format!("delete meta failed, {e}"))
                        .await
                }
                Ok(PodDelete::UidMismatch) => {
                    tracing::warn!(
                        resource = %msg.route.resource,
                        "pod delete names another UID than the stored pod; kept"
                    );
                    router.ok_to(&msg).await;
                }
                Ok(PodDelete::Deleted | PodDelete::NotStored) => {
                    router
                        .to_metaserver(operation::DELETE, &fed_key, msg.content.clone())
                        .await;
                    if msg.route.source == module::DEVICECONTROLLER {
                        router.to_twin(&msg).await;
                    }
                    router.to_edged(msg.clone()).await;
                    router.ok_to(&msg).await;
                }
            }
        })
        .await;
    }

    /// `response` without a waiting request: a resource pushed by the cloud (stored, then to
    /// edged) or by edged (stored, then to the cloud). List responses are relayed, not stored.
    pub(crate) async fn response(&self, msg: Message) {
        let msg = match self.router.bus().send_response(msg) {
            None => return,
            Some(unclaimed) => unclaimed,
        };
        let Some((key, kind)) = self.resource_of(&msg, false).await else {
            return;
        };
        let is_list = wedge_core::Resource::parse(&key).is_ok_and(|r| r.is_list());
        let fed_key = (!is_list).then(|| key.clone());
        let pending = if is_list {
            None
        } else {
            match self.queue_upsert(&msg, key, kind).await {
                Some(p) => Some(p),
                None => return,
            }
        };
        let router = self.router.clone();
        self.later(async move {
            if let Some(pending) = pending
                && let Err(e) = pending.await
            {
                return router.reply_error(&msg, write_failed(&e)).await;
            }
            if let Some(key) = &fed_key {
                router
                    .to_metaserver(operation::UPDATE, key, msg.content.clone())
                    .await;
            }
            if msg.route.source == module::EDGECONTROLLER {
                router.to_edged(msg).await;
            } else {
                router.to_cloud(msg).await;
            }
        })
        .await;
    }
}

/// `metadata.uid` of the pod a delete carries.
fn pod_uid(msg: &Message) -> Option<String> {
    let pod: serde_json::Value = msg.content.parse().ok()?;
    let uid = pod.get("metadata")?.get("uid")?.as_str()?;
    (!uid.is_empty()).then(|| uid.to_owned())
}
