//! The sandbox ("pause") container of a pod: it owns the pod's network namespace, so that all
//! containers of the pod share one IP and reach each other on localhost, as in Kubernetes.
//!
//! The sandbox runs `modules.edged.podSandboxImage` (`kubeedge/pause:3.6` by default), a
//! process that only waits for SIGTERM. It is named and labelled as dockershim does
//! (`k8s_POD_<pod>_<ns>_<uid>_<attempt>`, `io.kubernetes.docker.type=podsandbox`), carries the
//! pod's hostname and resolver configuration (given by `crate::name_plan::for_sandbox`) and
//! publishes every hostPort of the pod (the engine refuses ports, hostnames and DNS settings on
//! a container that joins another's network). App containers join it with
//! `container:<sandbox id>` (`plan::container_plan`) and are labelled with its id.
//!
//! Pods run without a sandbox when the node opts out (`podSandboxImage: ""`, for nodes that
//! cannot get a pause image) and when they use `hostNetwork`: their network is the host's, so a
//! sandbox would own nothing, and such pods (often the node's own agents) then do not depend on
//! the pause image. Their containers keep the network settings of their own, as before
//! sandboxes existed.
//!
//! A pod worker's pass, with [`step`] deciding from the engine's list alone:
//! 1. [`Step::NoSandbox`]: remove `stale` sandboxes, plan containers with no sandbox.
//! 2. [`Step::Create`]: stop the pod's app containers (their namespace is dead or outdated),
//!    then remove the `stale` sandboxes (they may hold the host ports), then
//!    [`Engine::ensure_sandbox_image`], create from [`plan`] with `attempt`, and
//!    [`Engine::start_sandbox`] while the containers are created ([`Engine::run_sandbox`] does
//!    both steps in one).
//! 3. [`Step::Ready`]: remove `stale` sandboxes; containers join `sandbox.id`.
//!
//! In every case an app container whose [`ManagedContainer::sandbox_id`] is not the pod's
//! current sandbox (see [`joined`]) is replaced. The pod's IP is [`Engine::sandbox_ip`].

use std::time::Duration;

use crate::engine::{ContainerPlan, Engine, EngineError, ManagedContainer, labels};
use crate::plan::{host_ports, pod_labels, short_hash};
use crate::pod::Pod;

/// How long a sandbox gets between SIGTERM and SIGKILL. The pause process exits on SIGTERM at
/// once, so this only bounds a sandbox image that does not.
pub const STOP_GRACE: Duration = Duration::from_secs(2);

/// Whether `pod` runs in a sandbox on a node configured with sandbox `image`: always on a CRI
/// runtime (`cri`: every CRI container lives in a sandbox, a `hostNetwork` pod's on the node's
/// network), and on Docker neither when the node opted out (empty image) nor for
/// `hostNetwork` pods (module docs).
pub fn needed(pod: &Pod, image: &str, cri: bool) -> bool {
    cri || (!image.trim().is_empty() && !pod.spec.host_network)
}

/// The pod's hostname: `spec.hostname` or its name, cut to a DNS label's 63 characters
/// (kubelet's rule, [`crate::etc_hosts::hostname`]).
pub fn hostname(pod: &Pod) -> String {
    crate::etc_hosts::hostname(pod)
}

/// `(container port/proto, host port)` of every container's ports that have a host port,
/// sorted and without duplicates: what the sandbox publishes.
fn published(pod: &Pod) -> Vec<(String, u16)> {
    let mut ports: Vec<(String, u16)> = pod.spec.containers.iter().flat_map(host_ports).collect();
    ports.sort();
    ports.dedup();
    ports
}

/// A hash of what the sandbox owns (host network, published ports, hostname, sysctls, the
/// pod's DNS settings): when it changes the sandbox must be recreated. Environment, images, commands belong to the app containers
/// and are left out.
pub fn sandbox_hash(pod: &Pod) -> String {
    let mut relevant = serde_json::json!({
        "hostNetwork": pod.spec.host_network,
        "ports": published(pod),
        "hostname": hostname(pod),
    });
    // Only when set, so a sandbox without them keeps the hash it had before.
    let sysctls = crate::security_context::sandbox_sysctls(pod);
    if !sysctls.is_empty() {
        relevant["sysctls"] = serde_json::json!(sysctls);
    }
    // The pod's side of its resolv.conf and kernel hostname, also only when set (a policy
    // only when it is not the default). The node's side (`clusterDNS`, `resolvConf`) is left
    // out: as under kubelet, a node reconfigured keeps its running sandboxes.
    let spec = &pod.spec;
    if let Some(policy) = spec
        .dns_policy
        .as_deref()
        .filter(|p| *p != crate::dns::CLUSTER_FIRST)
    {
        relevant["dnsPolicy"] = serde_json::json!(policy);
    }
    if let Some(config) = &spec.dns_config {
        relevant["dnsConfig"] = serde_json::json!(config);
    }
    if let Some(subdomain) = spec.subdomain.as_deref().filter(|s| !s.is_empty()) {
        relevant["subdomain"] = serde_json::json!(subdomain);
    }
    if spec.set_hostname_as_fqdn == Some(true) {
        relevant["setHostnameAsFQDN"] = serde_json::json!(true);
    }
    short_hash(&relevant)
}

/// The plan of the `attempt`-th sandbox (0 for the first) of `pod` on node `node`, running
/// `image` with the image's own entrypoint.
pub fn plan(node: &str, pod: &Pod, image: &str, attempt: u32) -> ContainerPlan {
    let ns = pod.namespace();
    let name = &pod.metadata.name;
    let uid = &pod.metadata.uid;
    let host = pod.spec.host_network;
    ContainerPlan {
        name: format!(
            "k8s_{}_{name}_{ns}_{uid}_{attempt}",
            labels::SANDBOX_CONTAINER_NAME
        ),
        image: image.to_owned(),
        entrypoint: None,
        cmd: None,
        env: Vec::new(),
        working_dir: None,
        labels: pod_labels(
            node,
            pod,
            labels::SANDBOX_CONTAINER_NAME,
            labels::TYPE_SANDBOX,
            sandbox_hash(pod),
            attempt,
        ),
        memory: None,
        nano_cpus: None,
        binds: Vec::new(),
        network_mode: host.then(|| "host".to_owned()),
        // On the host's network ports need no publishing and the hostname is the node's.
        published: if host { Vec::new() } else { published(pod) },
        hostname: (!host).then(|| hostname(pod)),
        // The network namespace's sysctls (`net.*`); a host-network pod has none to own.
        security: crate::security_context::SecurityPlan {
            sysctls: if host {
                Default::default()
            } else {
                crate::security_context::sandbox_sysctls(pod)
            },
            ..Default::default()
        },
        // Given by `name_plan::for_sandbox`, which knows the node's DNS.
        dns: Default::default(),
    }
}

/// What a pod worker does about its pod's sandbox on this pass (module docs for the order).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step<'a> {
    /// The pod runs without a sandbox; `stale` sandboxes (from before an opt-out or a change to
    /// `hostNetwork`) are to be removed.
    NoSandbox {
        /// Sandboxes to remove.
        stale: Vec<&'a ManagedContainer>,
    },
    /// The newest sandbox runs with the current hash: containers join it.
    Ready {
        /// The sandbox.
        sandbox: &'a ManagedContainer,
        /// Older sandboxes of the pod, to remove.
        stale: Vec<&'a ManagedContainer>,
    },
    /// No running sandbox with the current hash (none yet, it died, or the pod's ports or
    /// hostname changed): the pod's app containers go, then `stale`, then a new sandbox.
    Create {
        /// The new sandbox's attempt: one more than the newest sandbox's, 0 for the first.
        attempt: u32,
        /// Every existing sandbox of the pod, to remove.
        stale: Vec<&'a ManagedContainer>,
    },
}

impl Step<'_> {
    /// The id of the sandbox the pod's containers are to join, once the step is done: `None`
    /// for [`Step::NoSandbox`] and (until the new one exists) [`Step::Create`].
    pub fn sandbox_id(&self) -> Option<&str> {
        match self {
            Step::Ready { sandbox, .. } => Some(&sandbox.id),
            _ => None,
        }
    }
}

/// Decides [`Step`] for `pod` from `ours`, the engine's containers of that pod (app containers
/// and sandboxes, as [`Engine::list`] returns them), on a node configured with sandbox `image`
/// whose runtime is a CRI one when `cri` (see [`needed`]).
pub fn step<'a>(pod: &Pod, image: &str, cri: bool, ours: &'a [ManagedContainer]) -> Step<'a> {
    let mut sandboxes: Vec<&ManagedContainer> = ours
        .iter()
        .filter(|c| c.sandbox && c.pod_uid == pod.metadata.uid)
        .collect();
    sandboxes.sort_by_key(|c| (c.restart_count, c.created));
    if !needed(pod, image, cri) {
        return Step::NoSandbox { stale: sandboxes };
    }
    let Some(newest) = sandboxes.last().copied() else {
        return Step::Create {
            attempt: 0,
            stale: Vec::new(),
        };
    };
    if newest.state == "running" && newest.hash == sandbox_hash(pod) {
        sandboxes.pop();
        return Step::Ready {
            sandbox: newest,
            stale: sandboxes,
        };
    }
    Step::Create {
        attempt: newest.restart_count.saturating_add(1),
        stale: sandboxes,
    }
}

/// Whether app container `c` is in the network the pod's containers are to be in: the
/// sandbox `sandbox_id`, or (with `None`) a network of its own. A container that is not is
/// to be replaced.
pub fn joined(c: &ManagedContainer, sandbox_id: Option<&str>) -> bool {
    c.sandbox_id.as_deref() == sandbox_id
}

impl Engine {
    /// Makes the sandbox `image` available (`IfNotPresent`: a node without a registry runs on
    /// an image imported beforehand). A failure is `ErrImagePull` with a message naming
    /// `podSandboxImage`, so that whoever reads the pod's status knows what to set.
    /// A CRI runtime brings its own sandbox image (containerd's `sandbox_image`): nothing to do.
    pub async fn ensure_sandbox_image(&self, image: &str) -> Result<(), EngineError> {
        if self.is_cri() {
            return Ok(());
        }
        // No pod's pull secrets: the sandbox image is the node's, pinned or loaded locally.
        self.ensure_image(image, "IfNotPresent", &[])
            .await
            .map(|_| ())
            .map_err(|e| EngineError::Image {
                reason: "ErrImagePull",
                message: format!(
                    "pod sandbox image {image:?} is not available ({e}); load it on the node, \
                     or set modules.edged.podSandboxImage to an image the node has, or to \"\" \
                     to run pods without sandboxes (no shared network between their containers)"
                ),
            })
    }

    /// Creates and starts a sandbox from `plan` ([`plan`]); returns its id. A sandbox that
    /// does not start (e.g. a host port already taken) is removed again, so the pod's next
    /// pass starts from a clean slate.
    pub async fn run_sandbox(&self, plan: &ContainerPlan) -> Result<String, EngineError> {
        let id = self.create_sandbox(plan).await?;
        self.start_sandbox(&id).await?;
        Ok(id)
    }

    /// Starts a created sandbox; one that does not start is removed again (as
    /// [`Engine::run_sandbox`]). The pod's containers may be created meanwhile: a container
    /// can be created in a sandbox's network before the sandbox runs, only not started. A CRI
    /// runtime's sandbox runs once created.
    pub async fn start_sandbox(&self, id: &str) -> Result<(), EngineError> {
        if self.is_cri() {
            return Ok(());
        }
        if let Err(e) = self.start(id).await {
            if let Err(removal) = self.remove(id).await {
                tracing::warn!(sandbox = %id, "sandbox that did not start not removed: {removal}");
            }
            return Err(e);
        }
        Ok(())
    }

    /// The sandbox's IP, which is its pod's: `None` when the sandbox is gone, not running, or
    /// on the host's network (the pod's IP is then the node's).
    pub async fn sandbox_ip(&self, id: &str) -> Result<Option<String>, EngineError> {
        Ok(self
            .inspect(id)
            .await?
            .filter(|run| run.running && !run.ip.is_empty())
            .map(|run| run.ip))
    }

    /// Stops a sandbox (SIGTERM, SIGKILL after [`STOP_GRACE`]) and removes it; already gone is
    /// not an error. Its pod's app containers should be stopped first: they lose their network.
    pub async fn remove_sandbox(&self, id: &str) -> Result<(), EngineError> {
        self.stop_and_remove(id, STOP_GRACE).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod() -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "web", "namespace": "apps", "uid": "u-9"},
            "spec": {
                "containers": [
                    {"name": "app", "image": "img", "env": [{"name": "A", "value": "1"}],
                     "ports": [{"containerPort": 80, "hostPort": 8080}, {"containerPort": 9000}]},
                    {"name": "dns", "image": "img",
                     "ports": [{"containerPort": 53, "hostPort": 5353, "protocol": "UDP"}]},
                ]
            }
        }))
        .unwrap()
    }

    fn listed(id: &str, sandbox: bool, attempt: u32, state: &str, hash: &str) -> ManagedContainer {
        ManagedContainer {
            id: id.into(),
            pod_namespace: "apps".into(),
            pod_name: "web".into(),
            pod_uid: "u-9".into(),
            container: if sandbox { "POD" } else { "app" }.into(),
            hash: hash.into(),
            restart_count: attempt,
            state: state.into(),
            created: i64::from(attempt),
            sandbox,
            sandbox_id: None,
        }
    }

    #[test]
    fn the_sandbox_is_named_and_labelled_as_dockershim_and_holds_the_host_ports() {
        let p = pod();
        let plan = plan("edge-1", &p, "kubeedge/pause:3.6", 3);
        assert_eq!(plan.name, "k8s_POD_web_apps_u-9_3");
        assert_eq!(plan.image, "kubeedge/pause:3.6");
        assert_eq!((plan.entrypoint.clone(), plan.cmd.clone()), (None, None));
        assert_eq!(plan.labels[labels::CONTAINER_NAME], "POD");
        assert_eq!(plan.labels[labels::DOCKER_TYPE], "podsandbox");
        assert_eq!(plan.labels[labels::MANAGED], "true");
        assert_eq!(plan.labels[labels::NODE], "edge-1");
        assert_eq!(plan.labels[labels::POD_NAMESPACE], "apps");
        assert_eq!(plan.labels[labels::POD_NAME], "web");
        assert_eq!(plan.labels[labels::POD_UID], "u-9");
        assert_eq!(plan.labels[labels::RESTART_COUNT], "3");
        assert_eq!(plan.labels[labels::CONTAINER_HASH], sandbox_hash(&p));
        assert!(!plan.labels.contains_key(labels::SANDBOX_ID));
        // Every container's host ports, and only those.
        assert_eq!(
            plan.published,
            [("53/udp".to_owned(), 5353), ("80/tcp".to_owned(), 8080)]
        );
        assert_eq!(plan.network_mode, None);
        assert_eq!(plan.hostname.as_deref(), Some("web"));
    }

    #[test]
    fn a_host_network_sandbox_publishes_nothing_and_keeps_the_nodes_hostname() {
        let mut p = pod();
        p.spec.host_network = true;
        let plan = plan("edge-1", &p, "pause", 0);
        assert_eq!(plan.network_mode.as_deref(), Some("host"));
        assert!(plan.published.is_empty());
        assert_eq!(plan.hostname, None);
        assert!(!needed(&p, "pause", false));
        assert!(!needed(&pod(), "", false));
        assert!(needed(&pod(), "pause", false));
        // A CRI runtime runs every pod in a sandbox of its own.
        assert!(needed(&p, "", true));
        assert!(needed(&pod(), "", true));
    }

    #[test]
    fn the_hostname_is_cut_to_a_dns_label() {
        let mut p = pod();
        p.metadata.name = format!("{}-{}", "a".repeat(62), "b".repeat(10));
        assert_eq!(hostname(&p), "a".repeat(62));
    }

    #[test]
    fn the_hash_follows_ports_and_hostname_not_the_app_containers() {
        let p = pod();
        let base = sandbox_hash(&p);
        let mut env = p.clone();
        env.spec.containers[0].env.clear();
        env.spec.containers[1].image = "other".into();
        assert_eq!(sandbox_hash(&env), base);
        // Explicit TCP is the default.
        let mut tcp = p.clone();
        tcp.spec.containers[0].ports[0].protocol = Some("TCP".into());
        assert_eq!(sandbox_hash(&tcp), base);
        let mut port = p.clone();
        port.spec.containers[0].ports[0].host_port = Some(8081);
        assert_ne!(sandbox_hash(&port), base);
        let mut renamed = p.clone();
        renamed.metadata.name = "web2".into();
        assert_ne!(sandbox_hash(&renamed), base);
        let mut host = p.clone();
        host.spec.host_network = true;
        assert_ne!(sandbox_hash(&host), base);
        // The DNS settings count when set; the default policy spelled out changes nothing.
        let mut spelled = p.clone();
        spelled.spec.dns_policy = Some("ClusterFirst".into());
        assert_eq!(sandbox_hash(&spelled), base);
        let mut policy = p.clone();
        policy.spec.dns_policy = Some("Default".into());
        assert_ne!(sandbox_hash(&policy), base);
        let mut config = p.clone();
        config.spec.dns_config = Some(crate::dns::PodDnsConfig {
            nameservers: vec!["1.1.1.1".into()],
            ..Default::default()
        });
        assert_ne!(sandbox_hash(&config), base);
        let mut named = p.clone();
        named.spec.hostname = Some("db".into());
        assert_ne!(sandbox_hash(&named), base);
        // Unchanged for a pod without them (the hash of {"hostNetwork","hostname","ports"}
        // alone): its sandbox from before edged knew them stays.
        assert_eq!(base, "713c20be7e5c5f1a");
    }

    #[test]
    fn the_step_creates_reuses_or_replaces_the_sandbox() {
        let p = pod();
        let hash = sandbox_hash(&p);
        let app = listed("app", false, 0, "running", "h");
        // None yet: the first.
        let ours = [app.clone()];
        assert_eq!(
            step(&p, "pause", false, &ours),
            Step::Create {
                attempt: 0,
                stale: vec![]
            }
        );
        // Running with the current hash: joined; an older dead one goes.
        let ours = [
            app.clone(),
            listed("s0", true, 0, "exited", &hash),
            listed("s1", true, 1, "running", &hash),
        ];
        let ready = step(&p, "pause", false, &ours);
        assert_eq!(
            ready,
            Step::Ready {
                sandbox: &ours[2],
                stale: vec![&ours[1]]
            }
        );
        assert_eq!(ready.sandbox_id(), Some("s1"));
        // Dead, or changed: the next attempt, every sandbox stale.
        let ours = [listed("s1", true, 1, "exited", &hash)];
        assert_eq!(
            step(&p, "pause", false, &ours),
            Step::Create {
                attempt: 2,
                stale: vec![&ours[0]]
            }
        );
        let ours = [listed("s1", true, 1, "running", "old")];
        assert_eq!(
            step(&p, "pause", false, &ours),
            Step::Create {
                attempt: 2,
                stale: vec![&ours[0]]
            }
        );
        // Opted out: no sandbox, the old one goes.
        assert_eq!(
            step(&p, "", false, &ours),
            Step::NoSandbox {
                stale: vec![&ours[0]]
            }
        );
    }

    #[test]
    fn a_container_in_another_network_is_not_joined() {
        let mut app = listed("app", false, 0, "running", "h");
        assert!(joined(&app, None));
        assert!(!joined(&app, Some("s1")));
        app.sandbox_id = Some("s0".into());
        assert!(!joined(&app, Some("s1")));
        assert!(!joined(&app, None));
        app.sandbox_id = Some("s1".into());
        assert!(joined(&app, Some("s1")));
    }
}
