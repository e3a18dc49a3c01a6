//! MetaSync: the periodic push of stored pod statuses to the cloud.
//!
//! Statuses edged stored as `<ns>/podstatus/<pod>` are sent to the cloud as one
//! `update <ns>/podstatus` per namespace (an array of statuses), so the cloud converges even if
//! single status updates were lost; statuses of pods that are no longer stored are dropped.

use std::collections::BTreeMap;

use serde_json::value::RawValue;
use wedge_core::message::{group, module, operation};
use wedge_core::{Content, Message, Resource};

use crate::meta_table;
use crate::process::Processor;

const PODSTATUS: &str = "podstatus";

impl Processor {
    /// Runs one sync, in order with other work.
    pub(crate) async fn sync_pod_status(&self) {
        let pending = self
            .store
            .submit(|c| {
                let mut kept: BTreeMap<String, Vec<String>> = BTreeMap::new();
                for (key, value) in meta_table::rows_of_type(c, PODSTATUS)? {
                    let Ok(res) = Resource::parse(&key) else {
                        continue;
                    };
                    if res.is_list() {
                        continue;
                    }
                    if meta_table::get(c, &res.sibling("pod"))?.is_none() {
                        meta_table::delete(c, &key)?;
                        continue;
                    }
                    kept.entry(res.namespace.to_owned())
                        .or_default()
                        .push(value);
                }
                Ok(kept)
            })
            .await;
        let pending = match pending {
            Ok(p) => p,
            Err(e) => return tracing::warn!("pod status sync skipped: {e}"),
        };
        let router = self.router.clone();
        self.later(async move {
            let by_namespace = match pending.await {
                Ok(kept) => kept,
                Err(e) => return tracing::warn!("pod status sync failed: {e}"),
            };
            if !router.is_connected() {
                return;
            }
            for (namespace, statuses) in by_namespace {
                let valid: Vec<&RawValue> = statuses
                    .iter()
                    .filter_map(|s| serde_json::from_str::<&RawValue>(s).ok())
                    .collect();
                let Ok(content) = Content::json(&valid) else {
                    continue;
                };
                let msg = Message::build(
                    module::METAMANAGER,
                    group::RESOURCE,
                    operation::UPDATE,
                    &format!("{namespace}/{PODSTATUS}"),
                    content,
                );
                router.to_cloud(msg).await;
            }
        })
        .await;
    }
}
