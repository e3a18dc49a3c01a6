//! Deletes made in the cloud while the node was away, found after it reconnects.
//!
//! When a watch is registered again after a reconnect, CloudCore's dynamicController sends
//! the node every object the watch covers (as `insert`s), so objects created or changed during
//! the outage arrive; an object *deleted* during it is simply not sent, and KubeEdge v1.23.1
//! keeps it at the edge for good (its watchers never see the `DELETED`). Wedge asks the cloud
//! for the list each watch covers once the watch set is synced, and removes what the node
//! holds in that scope that the cloud no longer has and that is older than the list: through
//! metamanager, as a cloud delete is, so SQLite, edged and every watcher see it.
//!
//! The node's own pods are left out: edgecontroller owns them and delivers their deletion
//! itself, reliably.

use std::collections::HashSet;
use std::time::Duration;

use serde_json::Value;
use wedge_core::message::{group, module, operation};
use wedge_core::{Bus, Content, Message};

use crate::application::{Agent, Application, Outcome, list_options};
use crate::cache::{Cache, rv_of};
use crate::catalog;

/// How long metamanager has for one delete.
const DELETE_TIMEOUT: Duration = Duration::from_secs(10);

/// `(group, version, resource, namespace)` of a watch key
/// (`/<group or core>/<version>/<resource>/<namespace or null>/<name or null>`).
fn scope(key: &str) -> Option<(String, String, String, String)> {
    let parts: Vec<&str> = key.trim_start_matches('/').split('/').collect();
    let [group, version, resource, namespace, ..] = parts.as_slice() else {
        return None;
    };
    let group = if *group == "core" { "" } else { group };
    let namespace = if *namespace == "null" { "" } else { namespace };
    Some((
        group.to_owned(),
        version.to_string(),
        resource.to_string(),
        namespace.to_owned(),
    ))
}

/// Removes, for every open watch, what the cloud no longer has; returns how many.
pub async fn deletions(agent: &Agent, cache: &Cache, bus: &Bus) -> usize {
    let mut removed = 0;
    for app in agent.watch_apps() {
        let Some((group, _, resource, namespace)) = scope(&app.key) else {
            continue;
        };
        let options: Value = serde_json::from_slice(&app.option).unwrap_or(Value::Null);
        let label = options["labelSelector"].as_str().unwrap_or("");
        let field = options["fieldSelector"].as_str().unwrap_or("");
        let Ok(selects) = crate::api::selection(&resource, label, field) else {
            continue;
        };
        let list = Application::new(
            agent.node(),
            &app.key,
            "list",
            "",
            list_options(label, field, false),
            Vec::new(),
        );
        let Outcome::Approved(body) = agent.apply(&list).await else {
            continue;
        };
        let Ok(list) = serde_json::from_slice::<Value>(&body) else {
            continue;
        };
        let list_rv: u64 = list["metadata"]["resourceVersion"]
            .as_str()
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        let in_cloud: HashSet<(String, String)> = list["items"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|o| {
                (
                    o["metadata"]["namespace"].as_str().unwrap_or("").to_owned(),
                    o["metadata"]["name"].as_str().unwrap_or("").to_owned(),
                )
            })
            .collect();
        let (_, held) = cache.list(&group, &resource, &namespace, &*selects);
        for stored in held {
            let meta = &stored.object["metadata"];
            let ns = meta["namespace"].as_str().unwrap_or("").to_owned();
            let name = meta["name"].as_str().unwrap_or("").to_owned();
            let ours = resource == "pods" && stored.object["spec"]["nodeName"] == agent.node();
            if ours
                || in_cloud.contains(&(ns.clone(), name.clone()))
                || rv_of(&stored.object) >= list_rv
            {
                continue;
            }
            let store_type = catalog::by_resource(&group, &resource)
                .map(|t| t.store_type())
                .unwrap_or_else(|| catalog::singular(&resource));
            let key = format!(
                "{}/{store_type}/{name}",
                if ns.is_empty() { "default" } else { &ns }
            );
            let content = Content::json(&stored.object).unwrap_or_else(|_| Content::null());
            let msg = Message::build(
                crate::server::NAME,
                group::META,
                operation::DELETE,
                &key,
                content,
            );
            match bus
                .send_sync(module::METAMANAGER, msg, DELETE_TIMEOUT)
                .await
            {
                Ok(reply) if reply.route.operation != operation::ERROR => {
                    tracing::info!(object = %key, "metaserver: deleted in the cloud while the node was away; removed");
                    removed += 1;
                }
                Ok(reply) => {
                    tracing::warn!(object = %key, "metaserver: metamanager refused the delete: {}", reply.content.raw())
                }
                Err(e) => tracing::warn!(object = %key, "metaserver: delete not done: {e}"),
            }
        }
    }
    removed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn watch_keys_name_their_scope() {
        assert_eq!(
            scope("/core/v1/configmaps/default/null"),
            Some((
                "".into(),
                "v1".into(),
                "configmaps".into(),
                "default".into()
            ))
        );
        assert_eq!(
            scope("/discovery.k8s.io/v1/endpointslices/null/null"),
            Some((
                "discovery.k8s.io".into(),
                "v1".into(),
                "endpointslices".into(),
                "".into()
            ))
        );
        assert_eq!(scope("/api"), None);
    }
}
