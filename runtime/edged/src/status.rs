//! A pod's status, Kubernetes-shaped, from what the engine says of its containers, and the
//! `podpatch` content KubeEdge v1.12+ edged sends for it.

use serde_json::{Value, json};

use crate::engine::ContainerRun;
use crate::pod::{Container, Pod};

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
        .filter_map(|c| match c.run.as_ref() {
            Some(run) if !run.running && !never_started(run) => Some(run.exit_code),
            Some(run) if run.running => None,
            // Made again but not started yet (or not inspectable): its last instance ran and
            // ended, which is what kubelet counts (`lastState.terminated`). Only a failed or
            // restartable container is made again, so it did not succeed for good.
            _ if c.restart_count > 0 => Some(1),
            _ => None,
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

impl Observed {
    /// Ran and ended with exit code 0: an init container that did its job.
    pub fn completed(&self) -> bool {
        self.run
            .as_ref()
            .is_some_and(|r| !r.running && !never_started(r) && r.exit_code == 0)
    }

    /// Ran and ended with a non-zero exit code (it may be waiting to run again).
    pub fn failed(&self) -> bool {
        self.run
            .as_ref()
            .is_some_and(|r| !r.running && !never_started(r) && r.exit_code != 0)
    }

    /// Has run, or runs: for an app container, proof that the pod's init containers
    /// completed (kubelet's rule, which holds even once their records are gone).
    pub fn has_started(&self) -> bool {
        self.run
            .as_ref()
            .is_some_and(|r| r.running || !never_started(r))
    }
}

/// Where a pod's init containers stand, from what was observed of them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Initialization {
    /// Every init container completed (or the pod has none, or its app containers already
    /// started).
    Done,
    /// Some have not completed yet: their names, in order.
    Pending(Vec<String>),
    /// One failed and the pod's restart policy (`Never`) runs it no more: the pod failed.
    Failed(Vec<String>),
}

impl Initialization {
    /// Kubelet's reading of init containers `init` of a pod with restart policy `policy` whose
    /// app containers are `containers`.
    pub fn of(policy: &str, init: &[Observed], containers: &[Observed]) -> Initialization {
        if init.is_empty() || containers.iter().any(Observed::has_started) {
            return Initialization::Done;
        }
        let incomplete: Vec<String> = init
            .iter()
            .filter(|c| !c.completed())
            .map(|c| c.name.clone())
            .collect();
        if incomplete.is_empty() {
            Initialization::Done
        } else if policy == "Never" && init.iter().any(Observed::failed) {
            Initialization::Failed(incomplete)
        } else {
            Initialization::Pending(incomplete)
        }
    }
}

/// One entry of `containerStatuses` (or, with `init`, of `initContainerStatuses`: an init
/// container that completed counts as ready, as kubelet reports it).
fn container_status(c: &Observed, init: bool) -> Value {
    let container_id = c.id.clone();
    let (state, ready, started) = match (&c.waiting, &c.run) {
        (Some((reason, message)), _) if message.is_empty() => {
            (json!({"waiting": {"reason": reason}}), false, false)
        }
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
            (
                json!({"terminated": terminated}),
                init && c.completed(),
                false,
            )
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

/// Adds `volumeMounts` to the statuses of containers that were created (kubelet reports
/// them from the runtime's container, so a container still waiting to be created has none):
/// each spec mount's name and path, and for a read-only one `readOnly` with
/// `recursiveReadOnly: Disabled`, as edgecore v1.23.1 reports them. `statuses` is in the
/// order of `observed`.
fn add_mounts(statuses: &mut Value, specs: &[Container], observed: &[Observed]) {
    let Some(statuses) = statuses.as_array_mut() else {
        return;
    };
    for (status, o) in statuses.iter_mut().zip(observed) {
        let Some(spec) = specs.iter().find(|c| c.name == o.name) else {
            continue;
        };
        if o.run.is_none() || spec.volume_mounts.is_empty() {
            continue;
        }
        let mounts: Vec<Value> = spec
            .volume_mounts
            .iter()
            .map(|m| {
                let mut v = json!({"name": m.name, "mountPath": m.mount_path});
                if m.read_only {
                    v["readOnly"] = json!(true);
                    v["recursiveReadOnly"] = json!("Disabled");
                }
                v
            })
            .collect();
        status["volumeMounts"] = json!(mounts);
    }
}

/// What was observed of a pod's containers: its init containers and its app containers, each
/// in spec order.
#[derive(Debug, Clone, Copy)]
pub struct PodContainers<'a> {
    /// The init containers.
    pub init: &'a [Observed],
    /// The app containers.
    pub app: &'a [Observed],
}

/// The pod's status. `problem` is a spec or volume error that keeps the pod from starting
/// (reason, message); `host_ip` is the node's address when known; `sandbox_ip` is the address
/// of the pod's running sandbox, which is the pod's IP when it has one (its containers then
/// have no network of their own for the engine to report); `sandbox_ready` says the pod's
/// network is up (`PodReadyToStartContainers`). Times are left out: [`PodTimes::stamp`] adds
/// them, so that two computations of an unchanged pod are equal.
///
/// While init containers run the pod is `Pending` with `Initialized` false and its app
/// containers waiting in `PodInitializing`; an init container failed under `restartPolicy:
/// Never` fails the pod (kubelet's `getPhase`).
pub fn pod_status(
    pod: &Pod,
    observed: PodContainers<'_>,
    problem: Option<(&str, &str)>,
    host_ip: Option<&str>,
    sandbox_ip: Option<&str>,
    sandbox_ready: bool,
) -> Value {
    let containers = observed.app;
    let init = Initialization::of(pod.restart_policy(), observed.init, containers);
    let phase = match (problem, &init) {
        // Refused at admission: kubelet's rejected pods are over before they began.
        (Some((reason, _)), _) if crate::admission::REASONS.contains(&reason) => "Failed",
        (Some(_), _) | (None, Initialization::Pending(_)) => "Pending",
        (None, Initialization::Failed(_)) => "Failed",
        (None, Initialization::Done) => phase(pod.restart_policy(), containers),
    };
    let initializing = init != Initialization::Done;
    let app_status = |c: &Observed| {
        if initializing && c.waiting.is_none() && c.run.is_none() {
            let mut waiting = c.clone();
            waiting.waiting = Some(("PodInitializing".into(), String::new()));
            container_status(&waiting, false)
        } else {
            container_status(c, false)
        }
    };
    let initialized = match &init {
        Initialization::Done => json!({"type": "Initialized", "status": "True"}),
        Initialization::Pending(names) | Initialization::Failed(names) => json!({
            "type": "Initialized",
            "status": "False",
            "reason": "ContainersNotInitialized",
            "message": format!("containers with incomplete status: [{}]", names.join(" ")),
        }),
    };
    let is_ready =
        |c: &Observed| c.ready && c.waiting.is_none() && c.run.as_ref().is_some_and(|r| r.running);
    let unready: Vec<&str> = containers
        .iter()
        .filter(|c| !is_ready(c))
        .map(|c| c.name.as_str())
        .collect();
    let all_ready = problem.is_none() && !containers.is_empty() && unready.is_empty();
    let flag = |b: bool| if b { "True" } else { "False" };
    let readiness = |kind: &str| {
        let mut c = json!({"type": kind, "status": flag(all_ready)});
        if !all_ready && !unready.is_empty() {
            c["reason"] = json!("ContainersNotReady");
            c["message"] = json!(format!(
                "containers with unready status: [{}]",
                unready.join(" ")
            ));
        }
        c
    };
    let mut status = json!({
        "phase": phase,
        "conditions": [
            {"type": "PodReadyToStartContainers", "status": flag(sandbox_ready)},
            initialized,
            readiness("Ready"),
            readiness("ContainersReady"),
            {"type": "PodScheduled", "status": "True"},
        ],
        "containerStatuses": containers.iter().map(app_status).collect::<Vec<_>>(),
        "qosClass": qos_class(pod),
    });
    if !observed.init.is_empty() {
        let statuses: Vec<Value> = observed
            .init
            .iter()
            .map(|c| {
                // Not run yet, nothing else to say: waiting for its turn.
                if c.waiting.is_none() && c.run.is_none() {
                    let mut waiting = c.clone();
                    waiting.waiting = Some(("PodInitializing".into(), String::new()));
                    container_status(&waiting, true)
                } else {
                    container_status(c, true)
                }
            })
            .collect();
        status["initContainerStatuses"] = json!(statuses);
        add_mounts(
            &mut status["initContainerStatuses"],
            &pod.spec.init_containers,
            observed.init,
        );
    }
    add_mounts(
        &mut status["containerStatuses"],
        &pod.spec.containers,
        containers,
    );
    match problem {
        Some((reason, message)) => {
            status["reason"] = json!(reason);
            status["message"] = json!(message);
        }
        None => clear(&mut status, &["reason", "message"]),
    }
    // CloudCore applies a podpatch as a strategic merge patch, which merges conditions by
    // type: a reason a condition no longer has must be sent as null (as kubelet's patch,
    // a diff against the old status, does), or the old one stays ("Initialized: True,
    // ContainersNotInitialized" was seen on the real cloud).
    if let Some(conditions) = status["conditions"].as_array_mut() {
        for c in conditions {
            clear(c, &["reason", "message"]);
        }
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
        status["hostIPs"] = json!([{"ip": ip}]);
    }
    status
}

/// Sets each of `keys` that `object` lacks to null: in a strategic merge patch that removes the
/// field, so a value from an earlier status does not stay.
fn clear(object: &mut Value, keys: &[&str]) {
    if let Some(map) = object.as_object_mut() {
        for key in keys {
            map.entry(*key).or_insert(Value::Null);
        }
    }
}

/// Kubernetes' QoS class: `Guaranteed` when every container (init containers included)
/// limits CPU and memory and asks for exactly that, `BestEffort` when none asks for or limits
/// either, else `Burstable`.
pub fn qos_class(pod: &Pod) -> &'static str {
    const TRACKED: [&str; 2] = ["cpu", "memory"];
    let containers: Vec<&crate::pod::Container> = pod.all_containers().collect();
    let mentions = |c: &crate::pod::Container| {
        TRACKED
            .iter()
            .any(|r| c.resources.limits.contains_key(*r) || c.resources.requests.contains_key(*r))
    };
    if !containers.iter().copied().any(mentions) {
        return "BestEffort";
    }
    let guaranteed = containers.iter().all(|c| {
        TRACKED.iter().all(|r| match c.resources.limits.get(*r) {
            None => false,
            // Requests default to limits.
            Some(limit) => c.resources.requests.get(*r).is_none_or(|req| req == limit),
        })
    });
    if guaranteed {
        "Guaranteed"
    } else {
        "Burstable"
    }
}

/// When a pod started on this node and when each of its conditions took its current value:
/// kubelet's `startTime` and `lastTransitionTime`, which stay put while nothing changes (so an
/// idle pod's status is never re-sent) and carry over from the status the cloud holds.
#[derive(Debug, Clone, Default)]
pub struct PodTimes {
    start: String,
    /// Condition type → (status, when it took it).
    transitions: std::collections::HashMap<String, (String, String)>,
}

impl PodTimes {
    /// Times for `pod`: the stored status's, else now.
    pub fn new(pod: &Pod, now_ms: i64) -> PodTimes {
        let now = wedge_core::time::rfc3339_utc(now_ms);
        PodTimes {
            start: pod.status.start_time.clone().unwrap_or(now),
            transitions: pod
                .status
                .conditions
                .iter()
                .filter_map(|c| {
                    let at = c.last_transition_time.clone()?;
                    Some((c.kind.clone(), (c.status.clone(), at)))
                })
                .collect(),
        }
    }

    /// Adds `startTime` and each condition's `lastTransitionTime` (`now_ms` for one whose
    /// status changed) to `status`.
    pub fn stamp(&mut self, status: &mut Value, now_ms: i64) {
        status["startTime"] = json!(self.start);
        let Some(conditions) = status["conditions"].as_array_mut() else {
            return;
        };
        for c in conditions {
            let kind = c["type"].as_str().unwrap_or_default().to_owned();
            let value = c["status"].as_str().unwrap_or_default().to_owned();
            let at = match self.transitions.get(&kind) {
                Some((seen, at)) if *seen == value => at.clone(),
                _ => {
                    let at = wedge_core::time::rfc3339_utc(now_ms);
                    self.transitions.insert(kind, (value, at.clone()));
                    at
                }
            };
            c["lastProbeTime"] = Value::Null;
            c["lastTransitionTime"] = json!(at);
        }
    }
}

/// Status lists that `PodStatus` declares with `patchStrategy: merge` on `ip` and that edged
/// owns whole. `containerStatuses` has no strategy (a strategic merge replaces it anyway);
/// `conditions` (merged by `type`) stay merged, as kubelet keeps the conditions it does not own
/// (`DisruptionTarget`, readiness gates) and always sends the five it does.
const REPLACED_LISTS: [&str; 2] = ["podIPs", "hostIPs"];

/// The `podpatch` content: a strategic merge patch (what CloudCore applies) naming the pod's
/// uid and replacing its status.
///
/// Each of [`REPLACED_LISTS`] carries the `{"$patch": "replace"}` directive, so the list sent is the
/// list kept: merged, a new pod IP joined the old one and the apiserver refused every later
/// status of the pod ("may specify no more than one IP for each IP family"). kubelet gets the
/// same result from a two-way patch against the old status.
pub fn pod_patch(pod: &Pod, status: &Value) -> String {
    let mut status = status.clone();
    for key in REPLACED_LISTS {
        if let Some(list) = status.get_mut(key).and_then(Value::as_array_mut) {
            list.push(json!({"$patch": "replace"}));
        }
    }
    json!({"metadata": {"uid": pod.metadata.uid}, "status": status}).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A pod with app containers `app` and no init containers.
    fn app(app: &[Observed]) -> PodContainers<'_> {
        PodContainers { init: &[], app }
    }

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
    fn a_restarted_container_not_started_yet_keeps_the_pod_running() {
        let mut again = observed(Some((false, 0)));
        again.restart_count = 2;
        again.run.as_mut().unwrap().started_at = String::new();
        assert_eq!(phase("Always", std::slice::from_ref(&again)), "Running");
        assert_eq!(phase("OnFailure", std::slice::from_ref(&again)), "Running");
        let mut uninspected = observed(None);
        uninspected.restart_count = 1;
        assert_eq!(phase("Always", &[uninspected]), "Running");
        assert_eq!(phase("Always", &[observed(None)]), "Pending");
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
    fn created_containers_report_their_mounts_as_edgecore_does() {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "web", "uid": "u-1"},
            "spec": {
                "containers": [{"name": "app", "image": "img", "volumeMounts": [
                    {"name": "data", "mountPath": "/data", "readOnly": true},
                    {"name": "data", "mountPath": "/rw"}
                ]}],
                "volumes": [{"name": "data", "emptyDir": {}}]
            }
        }))
        .unwrap();
        let running = observed(Some((true, 0)));
        let s = pod_status(&pod, app(&[running]), None, None, None, true);
        assert_eq!(
            s["containerStatuses"][0]["volumeMounts"],
            json!([
                {"name": "data", "mountPath": "/data", "readOnly": true, "recursiveReadOnly": "Disabled"},
                {"name": "data", "mountPath": "/rw"}
            ])
        );
        // Not created yet: no mounts to report.
        let s = pod_status(&pod, app(&[observed(None)]), None, None, None, true);
        assert!(
            s["containerStatuses"][0].get("volumeMounts").is_none(),
            "{s}"
        );
    }

    #[test]
    fn the_patch_replaces_the_lists_a_strategic_merge_would_merge() {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "web", "uid": "u-1"}, "spec": {"containers": [{"name": "app", "image": "img"}]}
        }))
        .unwrap();
        let s = pod_status(
            &pod,
            app(&[observed(Some((true, 0)))]),
            None,
            Some("10.0.0.3"),
            Some("172.17.0.3"),
            true,
        );
        let patch: Value = serde_json::from_str(&pod_patch(&pod, &s)).unwrap();
        assert_eq!(patch["metadata"]["uid"], "u-1");
        let replace = json!({"$patch": "replace"});
        assert_eq!(
            patch["status"]["podIPs"],
            json!([{"ip": "172.17.0.3"}, replace])
        );
        assert_eq!(
            patch["status"]["hostIPs"],
            json!([{"ip": "10.0.0.3"}, replace])
        );
        // Conditions merge by type: another owner's condition (DisruptionTarget) stays.
        let conditions = patch["status"]["conditions"].as_array().unwrap();
        assert!(!conditions.contains(&replace));
        // The status itself (what edged books) has no directive.
        assert_eq!(s["podIPs"], json!([{"ip": "172.17.0.3"}]));
    }

    #[test]
    fn status_of_a_running_pod_and_of_a_waiting_one() {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "web", "uid": "u-1"}, "spec": {"containers": [{"name": "app", "image": "img"}]}
        }))
        .unwrap();
        let mut c = observed(Some((true, 0)));
        c.run.as_mut().unwrap().ip = "172.17.0.5".into();
        let s = pod_status(&pod, app(&[c.clone()]), None, Some("10.0.0.2"), None, true);
        assert_eq!(s["phase"], "Running");
        assert_eq!(
            s["conditions"][2],
            json!({"type": "Ready", "status": "True", "reason": null, "message": null})
        );
        // No problem: a reason from an earlier status is removed by the patch.
        assert!(s["reason"].is_null() && s.get("reason").is_some());
        assert_eq!(s["hostIPs"], json!([{"ip": "10.0.0.2"}]));
        assert_eq!(s["qosClass"], "BestEffort");
        assert_eq!(s["podIP"], "172.17.0.5");
        assert_eq!(s["hostIP"], "10.0.0.2");
        // In a sandbox the containers have no address; the sandbox's is the pod's.
        c.run.as_mut().unwrap().ip = String::new();
        let s = pod_status(
            &pod,
            app(&[c]),
            None,
            Some("10.0.0.2"),
            Some("172.17.0.9"),
            true,
        );
        assert_eq!(s["podIP"], "172.17.0.9");
        assert_eq!(s["podIPs"], json!([{"ip": "172.17.0.9"}]));
        assert_eq!(s["containerStatuses"][0]["containerID"], "docker://abc");
        assert_eq!(
            s["containerStatuses"][0]["state"],
            json!({"running": {"startedAt": "2026-11-23T10:00:00Z"}})
        );

        let mut pulling = observed(None);
        pulling.waiting = Some(("ErrImagePull".into(), "no registry".into()));
        let s = pod_status(&pod, app(&[pulling]), None, None, None, false);
        assert_eq!(s["phase"], "Pending");
        assert_eq!(
            s["containerStatuses"][0]["state"]["waiting"]["reason"],
            "ErrImagePull"
        );
        assert_eq!(s["conditions"][2]["reason"], "ContainersNotReady");
        assert_eq!(
            s["conditions"][2]["message"],
            "containers with unready status: [app]"
        );
        let patch: Value = serde_json::from_str(&pod_patch(&pod, &s)).unwrap();
        assert_eq!(patch["metadata"]["uid"], "u-1");
        assert_eq!(patch["status"], s);
    }

    #[test]
    fn times_stay_put_until_a_condition_changes() {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "web", "uid": "u-1"},
            "spec": {"containers": [{"name": "app", "image": "img"}]},
            "status": {"startTime": "2026-11-23T09:00:00Z", "conditions": [
                {"type": "Ready", "status": "True", "lastTransitionTime": "2026-11-23T09:00:05Z"}]}
        }))
        .unwrap();
        let mut times = PodTimes::new(&pod, 1_700_000_000_000);
        let running = observed(Some((true, 0)));
        let mut a = pod_status(
            &pod,
            app(std::slice::from_ref(&running)),
            None,
            None,
            None,
            true,
        );
        times.stamp(&mut a, 1_700_000_000_000);
        assert_eq!(a["startTime"], "2026-11-23T09:00:00Z");
        assert_eq!(
            a["conditions"][2]["lastTransitionTime"],
            "2026-11-23T09:00:05Z"
        );
        assert_eq!(
            a["conditions"][0]["lastTransitionTime"],
            "2023-11-14T22:13:20Z"
        );
        assert!(a["conditions"][0]["lastProbeTime"].is_null());
        // Later, unchanged: the same status, so nothing to send.
        let mut b = pod_status(
            &pod,
            app(std::slice::from_ref(&running)),
            None,
            None,
            None,
            true,
        );
        times.stamp(&mut b, 1_700_000_600_000);
        assert_eq!(a, b);
        // Ready flips: only its times move.
        let mut unready = running.clone();
        unready.ready = false;
        let mut c = pod_status(&pod, app(&[unready]), None, None, None, true);
        times.stamp(&mut c, 1_700_000_600_000);
        assert_eq!(
            c["conditions"][2]["lastTransitionTime"],
            "2023-11-14T22:23:20Z"
        );
        assert_eq!(
            c["conditions"][0]["lastTransitionTime"],
            "2023-11-14T22:13:20Z"
        );
    }

    #[test]
    fn init_containers_hold_the_pod_pending_until_they_complete() {
        let pod = |policy: &str| -> Pod {
            serde_json::from_value(json!({
                "metadata": {"name": "web", "uid": "u-1"},
                "spec": {"restartPolicy": policy,
                         "initContainers": [{"name": "prep", "image": "img"}, {"name": "seed", "image": "img"}],
                         "containers": [{"name": "app", "image": "img"}]}
            }))
            .unwrap()
        };
        let named = |name: &str, mut o: Observed| {
            o.name = name.into();
            o
        };
        let (always, never) = (pod("Always"), pod("Never"));
        let not_yet = named("app", observed(None));
        let condition = |s: &Value, kind: &str| {
            s["conditions"]
                .as_array()
                .unwrap()
                .iter()
                .find(|c| c["type"] == kind)
                .cloned()
                .unwrap()
        };

        // The first init container runs; the second and the app wait their turn.
        let init = [
            named("prep", observed(Some((true, 0)))),
            named("seed", observed(None)),
        ];
        let containers = PodContainers {
            init: &init,
            app: std::slice::from_ref(&not_yet),
        };
        let s = pod_status(&always, containers, None, None, None, true);
        assert_eq!(s["phase"], "Pending");
        assert_eq!(
            condition(&s, "Initialized"),
            json!({"type": "Initialized", "status": "False", "reason": "ContainersNotInitialized",
                   "message": "containers with incomplete status: [prep seed]"})
        );
        assert_eq!(
            s["containerStatuses"][0]["state"],
            json!({"waiting": {"reason": "PodInitializing"}})
        );
        assert!(s["initContainerStatuses"][0]["state"]["running"].is_object());
        assert_eq!(
            s["initContainerStatuses"][1]["state"],
            json!({"waiting": {"reason": "PodInitializing"}})
        );

        // Both completed, the app runs: initialized, and a completed init container is ready.
        let done = [
            named("prep", observed(Some((false, 0)))),
            named("seed", observed(Some((false, 0)))),
        ];
        let running = named("app", observed(Some((true, 0))));
        let containers = PodContainers {
            init: &done,
            app: std::slice::from_ref(&running),
        };
        let s = pod_status(&always, containers, None, None, None, true);
        assert_eq!(s["phase"], "Running");
        assert_eq!(condition(&s, "Initialized")["status"], "True");
        assert_eq!(s["initContainerStatuses"][1]["ready"], true);
        assert_eq!(
            s["initContainerStatuses"][1]["state"]["terminated"]["reason"],
            "Completed"
        );

        // A failed init container: retried under Always (Pending), the pod's end under Never.
        let failed = [
            named("prep", observed(Some((false, 2)))),
            named("seed", observed(None)),
        ];
        let containers = PodContainers {
            init: &failed,
            app: std::slice::from_ref(&not_yet),
        };
        assert_eq!(
            pod_status(&always, containers, None, None, None, true)["phase"],
            "Pending"
        );
        let s = pod_status(&never, containers, None, None, None, true);
        assert_eq!(s["phase"], "Failed");
        assert_eq!(s["initContainerStatuses"][0]["ready"], false);
        assert_eq!(
            s["initContainerStatuses"][0]["state"]["terminated"]["reason"],
            "Error"
        );
    }

    #[test]
    fn qos_classes_follow_kubernetes() {
        let pod = |resources: Value| -> Pod {
            serde_json::from_value(json!({"metadata": {"name": "p"},
                "spec": {"containers": [{"name": "a", "image": "i", "resources": resources}]}}))
            .unwrap()
        };
        assert_eq!(qos_class(&pod(json!({}))), "BestEffort");
        assert_eq!(
            qos_class(&pod(json!({"limits": {"cpu": "1", "memory": "1Gi"}}))),
            "Guaranteed"
        );
        assert_eq!(
            qos_class(&pod(
                json!({"limits": {"cpu": "1", "memory": "1Gi"}, "requests": {"cpu": "500m"}})
            )),
            "Burstable"
        );
        assert_eq!(
            qos_class(&pod(json!({"requests": {"memory": "1Gi"}}))),
            "Burstable"
        );
    }
}
