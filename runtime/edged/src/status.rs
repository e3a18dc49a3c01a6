//! A pod's status, Kubernetes-shaped, from what the engine says of its containers, and the
//! `podpatch` content KubeEdge v1.12+ edged sends for it.

use serde_json::{Value, json};

use crate::engine::ContainerRun;
use crate::pod::Pod;

/// What edged knows of one container of a pod.
#[derive(Debug, Clone, PartialEq)]
pub struct Observed {
    /// The container's name in the pod.
    pub name: String,
    /// Its image.
    pub image: String,
    /// Its `containerID` (`docker://<engine id>` of its newest container, or
    /// `wasm://<module>`), if it has one.
    pub id: Option<String>,
    /// That container's last run.
    pub run: Option<ContainerRun>,
    /// Times it was restarted.
    pub restart_count: u32,
    /// Why it is not running yet (`ErrImagePull`, `CrashLoopBackOff`...), with a message.
    pub waiting: Option<(String, String)>,
    /// While running: whether its probes let it count as ready (startup passed, readiness
    /// succeeding; true without probes).
    pub ready: bool,
}

/// Phase of the pod from its containers and restart policy (Kubernetes' rules).
pub fn phase(policy: &str, containers: &[Observed]) -> &'static str {
    let running = containers
        .iter()
        .filter(|c| c.run.as_ref().is_some_and(|r| r.running))
        .count();
    let terminated: Vec<i64> = containers
        .iter()
        .filter_map(|c| {
            let run = c.run.as_ref()?;
            (!run.running && !never_started(run)).then_some(run.exit_code)
        })
        .collect();
    if running + terminated.len() < containers.len() {
        // Some container has not run yet.
        return if running > 0 { "Running" } else { "Pending" };
    }
    if running > 0 {
        return "Running";
    }
    let all_ok = terminated.iter().all(|code| *code == 0);
    match (policy, all_ok) {
        ("Always", _) => "Running",
        (_, true) => "Succeeded",
        ("OnFailure", false) => "Running",
        _ => "Failed",
    }
}

fn never_started(run: &ContainerRun) -> bool {
    run.started_at.is_empty() || run.started_at.starts_with("0001-")
}

fn container_status(c: &Observed) -> Value {
    let container_id = c.id.clone();
    let (state, ready, started) = match (&c.waiting, &c.run) {
        (Some((reason, message)), _) => (
            json!({"waiting": {"reason": reason, "message": message}}),
            false,
            false,
        ),
        (None, Some(run)) if run.running => (
            json!({"running": {"startedAt": run.started_at}}),
            c.ready,
            true,
        ),
        (None, Some(run)) if !never_started(run) => {
            let reason = if run.oom_killed {
                "OOMKilled"
            } else if run.exit_code == 0 {
                "Completed"
            } else {
                "Error"
            };
            let mut terminated = json!({
                "exitCode": run.exit_code,
                "reason": reason,
                "startedAt": run.started_at,
                "finishedAt": run.finished_at,
            });
            if let Some(id) = &container_id {
                terminated["containerID"] = json!(id);
            }
            (json!({"terminated": terminated}), false, false)
        }
        _ => (
            json!({"waiting": {"reason": "ContainerCreating"}}),
            false,
            false,
        ),
    };
    let mut status = json!({
        "name": c.name,
        "state": state,
        "ready": ready,
        "restartCount": c.restart_count,
        "image": c.image,
        "imageID": c.run.as_ref().map(|r| r.image_id.clone()).unwrap_or_default(),
        "started": started,
    });
    if let Some(id) = container_id {
        status["containerID"] = json!(id);
    }
    status
}

/// The pod's status. `problem` is a spec or volume error that keeps the pod from starting
/// (reason, message); `host_ip` is the node's address when known; `sandbox_ip` is the address
/// of the pod's running sandbox, which is the pod's IP when it has one (its containers then
/// have no network of their own for the engine to report).
pub fn pod_status(
    pod: &Pod,
    containers: &[Observed],
    problem: Option<(&str, &str)>,
    host_ip: Option<&str>,
    sandbox_ip: Option<&str>,
) -> Value {
    let phase = match problem {
        Some(_) => "Pending",
        None => phase(pod.restart_policy(), containers),
    };
    let all_ready = problem.is_none()
        && !containers.is_empty()
        && containers
            .iter()
            .all(|c| c.ready && c.waiting.is_none() && c.run.as_ref().is_some_and(|r| r.running));
    let flag = |b: bool| if b { "True" } else { "False" };
    let mut status = json!({
        "phase": phase,
        "conditions": [
            {"type": "Initialized", "status": "True"},
            {"type": "Ready", "status": flag(all_ready)},
            {"type": "ContainersReady", "status": flag(all_ready)},
            {"type": "PodScheduled", "status": "True"},
        ],
        "containerStatuses": containers.iter().map(container_status).collect::<Vec<_>>(),
        "qosClass": "BestEffort",
    });
    if let Some((reason, message)) = problem {
        status["reason"] = json!(reason);
        status["message"] = json!(message);
    }
    let pod_ip = if pod.spec.host_network {
        host_ip.map(str::to_owned)
    } else if let Some(ip) = sandbox_ip.filter(|ip| !ip.is_empty()) {
        Some(ip.to_owned())
    } else {
        containers
            .iter()
            .filter_map(|c| c.run.as_ref())
            .find(|r| r.running && !r.ip.is_empty())
            .map(|r| r.ip.clone())
    };
    if let Some(ip) = pod_ip {
        status["podIP"] = json!(ip);
        status["podIPs"] = json!([{"ip": ip}]);
    }
    if let Some(ip) = host_ip {
        status["hostIP"] = json!(ip);
    }
    status
}

/// The `podpatch` content: a merge patch naming the pod's uid and replacing its status.
pub fn pod_patch(pod: &Pod, status: &Value) -> String {
    json!({"metadata": {"uid": pod.metadata.uid}, "status": status}).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn observed(run: Option<(bool, i64)>) -> Observed {
        Observed {
            name: "app".into(),
            image: "img".into(),
            id: run.map(|_| "docker://abc".into()),
            run: run.map(|(running, exit_code)| ContainerRun {
                running,
                exit_code,
                started_at: "2026-11-23T10:00:00Z".into(),
                finished_at: if running {
                    String::new()
                } else {
                    "2026-11-23T10:01:00Z".into()
                },
                ..ContainerRun::default()
            }),
            restart_count: 0,
            waiting: None,
            ready: true,
        }
    }

    #[test]
    fn phases_follow_kubernetes() {
        let running = observed(Some((true, 0)));
        let ok = observed(Some((false, 0)));
        let failed = observed(Some((false, 1)));
        let none = observed(None);
        let one = std::slice::from_ref;
        assert_eq!(phase("Always", one(&none)), "Pending");
        assert_eq!(phase("Always", &[running, none]), "Running");
        assert_eq!(phase("Never", one(&ok)), "Succeeded");
        assert_eq!(phase("Never", &[ok.clone(), failed.clone()]), "Failed");
        assert_eq!(phase("OnFailure", one(&failed)), "Running");
        assert_eq!(phase("OnFailure", one(&ok)), "Succeeded");
        assert_eq!(phase("Always", one(&ok)), "Running");
    }

    #[test]
    fn status_of_a_running_pod_and_of_a_waiting_one() {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "web", "uid": "u-1"}, "spec": {"containers": [{"name": "app", "image": "img"}]}
        }))
        .unwrap();
        let mut c = observed(Some((true, 0)));
        c.run.as_mut().unwrap().ip = "172.17.0.5".into();
        let s = pod_status(&pod, &[c.clone()], None, Some("10.0.0.2"), None);
        assert_eq!(s["phase"], "Running");
        assert_eq!(
            s["conditions"][1],
            json!({"type": "Ready", "status": "True"})
        );
        assert_eq!(s["podIP"], "172.17.0.5");
        assert_eq!(s["hostIP"], "10.0.0.2");
        // In a sandbox the containers have no address; the sandbox's is the pod's.
        c.run.as_mut().unwrap().ip = String::new();
        let s = pod_status(&pod, &[c], None, Some("10.0.0.2"), Some("172.17.0.9"));
        assert_eq!(s["podIP"], "172.17.0.9");
        assert_eq!(s["podIPs"], json!([{"ip": "172.17.0.9"}]));
        assert_eq!(s["containerStatuses"][0]["containerID"], "docker://abc");
        assert_eq!(
            s["containerStatuses"][0]["state"],
            json!({"running": {"startedAt": "2026-11-23T10:00:00Z"}})
        );

        let mut pulling = observed(None);
        pulling.waiting = Some(("ErrImagePull".into(), "no registry".into()));
        let s = pod_status(&pod, &[pulling], None, None, None);
        assert_eq!(s["phase"], "Pending");
        assert_eq!(
            s["containerStatuses"][0]["state"]["waiting"]["reason"],
            "ErrImagePull"
        );
        let patch: Value = serde_json::from_str(&pod_patch(&pod, &s)).unwrap();
        assert_eq!(patch["metadata"]["uid"], "u-1");
        assert_eq!(patch["status"], s);
    }
}
