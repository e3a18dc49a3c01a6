//! `keadm ctl restart` and `keadm ctl exec` for MetaServer, done where the containers are.
//!
//! KubeEdge v1.23.1's MetaServer dials the CRI runtime itself for these; in Wedge MetaServer
//! asks edged on the bus (operations [`operation::RESTART_POD`] and [`operation::EXEC_SYNC`],
//! resource `<namespace>/pod/<name>`, synchronous), and edged answers from the engine it runs
//! pods with, Docker or CRI alike.
//!
//! - **restart**: every app container of the pod is stopped (3 s grace, as v1.23's
//!   `StopContainer(…, 3)`), and kept: the pod's restart policy then starts it again, as after
//!   any exit. Answer `{"stopped": n}` or `{"error": "..."}`.
//! - **exec**: content `{"container": "...", "command": [...]}` (no container: the pod's only
//!   one); the command runs to its end for at most 10 s. Answer `{"exitCode": n, "output":
//!   "..."}` (stdout and stderr together, the first 4 KiB) or `{"error": "..."}`.

use std::time::Duration;

use serde_json::{Value, json};
use wedge_core::message::operation;
use wedge_core::{Bus, Content, Message, Resource};

use crate::engine::{Engine, ManagedContainer};

/// Grace of a restart's stop: v1.23.1's.
const RESTART_GRACE: Duration = Duration::from_secs(3);
/// Longest exec: v1.23.1's `ExecSync` timeout.
const EXEC_TIMEOUT: Duration = Duration::from_secs(10);

/// Whether `op` is one of these requests.
pub fn is_ctl(op: &str) -> bool {
    op == operation::RESTART_POD || op == operation::EXEC_SYNC
}

/// The pod's app containers, running or not, newest first.
fn app_containers<'a>(
    all: &'a [ManagedContainer],
    namespace: &str,
    name: &str,
) -> Vec<&'a ManagedContainer> {
    let mut found: Vec<&ManagedContainer> = all
        .iter()
        .filter(|c| !c.sandbox && c.pod_namespace == namespace && c.pod_name == name)
        .collect();
    found.sort_by_key(|c| std::cmp::Reverse(c.created));
    found
}

async fn answer(engine: &Engine, node: &str, msg: &Message) -> Value {
    let Ok(resource) = Resource::parse(&msg.route.resource) else {
        return json!({"error": format!("bad resource {:?}", msg.route.resource)});
    };
    let (namespace, Some(name)) = (resource.namespace, resource.name) else {
        return json!({"error": "no pod named"});
    };
    let all = match engine.list(node).await {
        Ok(all) => all,
        Err(e) => return json!({"error": format!("failed to list containers: {e}")}),
    };
    let containers = app_containers(&all, namespace, name);
    if containers.is_empty() {
        return json!({"error": format!("not found pod:\"/{namespace}/{name}\"")});
    }
    if msg.route.operation == operation::RESTART_POD {
        let mut stopped = 0;
        let mut errors = String::new();
        for c in containers.iter().filter(|c| c.state == "running") {
            match engine.stop(&c.id, RESTART_GRACE).await {
                Ok(()) => stopped += 1,
                Err(e) => errors.push_str(&format!(
                    "failed to stop container {} for pod \"/{namespace}/{name}\" with err:{e}\n",
                    c.container
                )),
            }
        }
        return if errors.is_empty() {
            json!({"stopped": stopped})
        } else {
            json!({"error": errors})
        };
    }
    let request: Value = msg.content.parse().unwrap_or(Value::Null);
    let command: Vec<String> = request["command"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default();
    if command.is_empty() {
        return json!({"error": "You must specify at least one command for the container"});
    }
    let wanted = request["container"].as_str().unwrap_or("");
    let running: Vec<&&ManagedContainer> =
        containers.iter().filter(|c| c.state == "running").collect();
    let target = if wanted.is_empty() {
        let mut names: Vec<&str> = running.iter().map(|c| c.container.as_str()).collect();
        names.dedup();
        if names.len() > 1 {
            return json!({"error": format!("more than one container in pod:\"/{namespace}/{name}\"")});
        }
        running.first()
    } else {
        running.iter().find(|c| c.container == wanted)
    };
    let Some(target) = target else {
        return json!({"error": format!("not found container {wanted} in pod:\"/{namespace}/{name}\"")});
    };
    match engine.exec(&target.id, &command, EXEC_TIMEOUT).await {
        Ok((code, output)) => json!({"exitCode": code, "output": output}),
        Err(e) => json!({"error": format!(
            "failed to exec command {command:?} for container {} for pod \"/{namespace}/{name}\" with err:{e}",
            target.container
        )}),
    }
}

/// Answers a restart or exec request in a task of its own (the sync loop goes on).
pub fn spawn(engine: Engine, bus: Bus, node: String, msg: Message) {
    tokio::spawn(async move {
        let result = answer(&engine, &node, &msg).await;
        let content = Content::json(&result).unwrap_or_else(|_| Content::null());
        let mut reply = msg.response(content);
        reply.route.source = wedge_core::message::module::EDGED.to_owned();
        if let Some(unclaimed) = bus.send_response(reply) {
            tracing::debug!(resource = %unclaimed.route.resource, "ctl answer with nobody waiting");
        }
    });
}
