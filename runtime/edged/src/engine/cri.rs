//! A CRI v1 runtime (containerd, CRI-O, cri-dockerd) through `wedge-cri`.
//!
//! The same [`ContainerPlan`]s as on Docker, translated the way a kubelet fills CRI requests:
//! - a sandbox plan becomes `RunPodSandbox` (metadata from the pod labels, the plan's hostname,
//!   its resolver configuration as `dns_config`, published ports as port mappings,
//!   `hostNetwork` as the node's network namespace, the pod's sysctls, and the pod's log
//!   directory `<pod_logs_dir>/<ns>_<pod>_<uid>`); the runtime starts it at once and gives it
//!   its network from CNI;
//! - an app plan joins its sandbox (`network_mode: container:<sandbox id>`) through
//!   `CreateContainer`, with the sandbox's config, binds as mounts, limits as CFS quota and
//!   memory limit, the security plan as the Linux security context, and its log at
//!   `<container>/<restarts>.log` in the pod's log directory (kubelet's layout, which
//!   `kubectl logs` reads);
//! - ids are unique across sandboxes and containers, so `stop`, `remove` and `inspect` of an
//!   id the runtime does not know as a container try it as a sandbox.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bollard::auth::DockerCredentials;
use wedge_cri::v1 as cri;

use super::{
    ContainerPlan, ContainerRun, EngineError, EngineOptions, ImageInfo, ManagedContainer, labels,
    lock,
};

/// CFS period kubelet uses to turn a CPU limit into a quota (100 ms).
const CPU_PERIOD_US: i64 = 100_000;

/// A CRI runtime.
#[derive(Clone)]
pub struct CriEngine {
    cri: wedge_cri::Cri,
    options: EngineOptions,
    /// `runtime_name` and `runtime_version` of the runtime's `Version` answer.
    name: String,
    version: String,
    /// Configs of the sandboxes this process ran, by id: `CreateContainer` wants its
    /// sandbox's config. A sandbox from before a restart has its config rebuilt from its
    /// status ([`CriEngine::sandbox_config`]).
    sandboxes: Arc<Mutex<HashMap<String, cri::PodSandboxConfig>>>,
}

fn call(what: impl Into<String>) -> impl FnOnce(wedge_cri::CriError) -> EngineError {
    let what = what.into();
    move |source| EngineError::Call {
        what,
        source: Box::new(source),
    }
}

/// The label selector of the sandboxes and containers `node`'s edged manages.
fn managed_by(node: &str) -> HashMap<String, String> {
    HashMap::from([
        (labels::MANAGED.to_owned(), "true".to_owned()),
        (labels::NODE.to_owned(), node.to_owned()),
    ])
}

/// A container's log path within its pod's log directory: `<container>/<attempt>.log`, the
/// attempt being its restart count (kubelet's layout).
fn container_log_path(container: &str, attempt: u32) -> String {
    format!("{container}/{attempt}.log")
}

/// Nanoseconds since the epoch as RFC 3339 (`0001-01-01T00:00:00Z` for 0: never).
fn rfc3339(nanos: i64) -> String {
    if nanos <= 0 {
        return "0001-01-01T00:00:00Z".to_owned();
    }
    wedge_core::time::rfc3339_utc(nanos / 1_000_000)
}

fn label(map: &HashMap<String, String>, key: &str) -> String {
    map.get(key).cloned().unwrap_or_default()
}

/// `host:container[:ro]` (what plans carry for Docker) as a CRI mount.
fn mount(bind: &str) -> Option<cri::Mount> {
    let (rest, readonly) = match bind.strip_suffix(":ro") {
        Some(rest) => (rest, true),
        None => (bind.strip_suffix(":rw").unwrap_or(bind), false),
    };
    let (host, container) = rest.split_once(':')?;
    Some(cri::Mount {
        host_path: host.to_owned(),
        container_path: container.to_owned(),
        readonly,
        ..Default::default()
    })
}

/// A security plan's `user` (`uid`, `uid:gid` or a name) as CRI's run-as fields.
fn run_as(user: Option<&str>) -> (Option<cri::Int64Value>, Option<cri::Int64Value>, String) {
    let Some(user) = user.filter(|u| !u.is_empty()) else {
        return (None, None, String::new());
    };
    let (uid, gid) = match user.split_once(':') {
        Some((u, g)) => (u, Some(g)),
        None => (user, None),
    };
    let gid = gid
        .and_then(|g| g.parse().ok())
        .map(|value| cri::Int64Value { value });
    match uid.parse() {
        Ok(value) => (Some(cri::Int64Value { value }), gid, String::new()),
        Err(_) => (None, gid, uid.to_owned()),
    }
}

impl CriEngine {
    /// Connects to the CRI runtime at `endpoint` and asks its version; the error names the
    /// endpoint and what to do.
    pub async fn connect(endpoint: &str, options: EngineOptions) -> Result<CriEngine, EngineError> {
        let unreachable = |e: wedge_cri::CriError| {
            EngineError::Unreachable(format!(
                "the CRI runtime at {endpoint} is not reachable ({e}); start it (containerd with \
                 its CRI plugin on), or point \
                 modules.edged.tailoredKubeletConfig.containerRuntimeEndpoint at the node's runtime"
            ))
        };
        let cri = wedge_cri::Cri::connect(endpoint)
            .await
            .map_err(unreachable)?;
        let version = cri.connected_version().clone();
        Ok(CriEngine {
            cri,
            options,
            name: version.runtime_name,
            version: version.runtime_version,
            sandboxes: Arc::default(),
        })
    }

    /// The client, for what this type does not wrap.
    pub fn client(&self) -> &wedge_cri::Cri {
        &self.cri
    }

    /// The runtime's name (`containerd`).
    pub fn runtime_name(&self) -> &str {
        &self.name
    }

    /// The runtime's version (`1.6.20~ds1`).
    pub async fn version(&self) -> Result<String, EngineError> {
        Ok(self.version.clone())
    }

    async fn image_status(&self, image: &str) -> Result<Option<cri::Image>, EngineError> {
        self.cri
            .image_status(image)
            .await
            .map_err(call(format!("image status of {image}")))
    }

    /// The image's default user: its uid, or its user name.
    pub async fn image_user(&self, image: &str) -> Result<String, EngineError> {
        let Some(found) = self.image_status(image).await? else {
            return Ok(String::new());
        };
        Ok(match found.uid {
            Some(uid) if found.username.is_empty() => uid.value.to_string(),
            _ => found.username,
        })
    }

    /// Whether `image` is in the runtime's image store.
    pub async fn image_present(&self, image: &str) -> Result<bool, EngineError> {
        Ok(self.image_status(image).await?.is_some())
    }

    /// One `PullImage` of `image`, with `credentials` as CRI's auth or anonymously.
    pub async fn pull(
        &self,
        image: &str,
        credentials: Option<&DockerCredentials>,
    ) -> Result<(), wedge_cri::CriError> {
        let auth = credentials.map(|c| cri::AuthConfig {
            username: c.username.clone().unwrap_or_default(),
            password: c.password.clone().unwrap_or_default(),
            auth: c.auth.clone().unwrap_or_default(),
            server_address: c.serveraddress.clone().unwrap_or_default(),
            identity_token: c.identitytoken.clone().unwrap_or_default(),
            registry_token: c.registrytoken.clone().unwrap_or_default(),
        });
        self.cri.pull_image(image, auth, None).await.map(drop)
    }

    /// The pod's log directory: `<pod_logs_dir>/<namespace>_<name>_<uid>` (kubelet's).
    fn log_directory(&self, labels_: &HashMap<String, String>) -> PathBuf {
        self.options.pod_logs_dir.join(format!(
            "{}_{}_{}",
            label(labels_, labels::POD_NAMESPACE),
            label(labels_, labels::POD_NAME),
            label(labels_, labels::POD_UID)
        ))
    }

    /// The sandbox config of a sandbox plan (module docs).
    fn sandbox_config(&self, plan: &ContainerPlan) -> cri::PodSandboxConfig {
        let host = plan.network_mode.as_deref() == Some("host");
        let mut port_mappings = Vec::new();
        for (port, host_port) in &plan.published {
            let (number, proto) = port.split_once('/').unwrap_or((port, "tcp"));
            let protocol = match proto {
                "udp" => cri::Protocol::Udp,
                "sctp" => cri::Protocol::Sctp,
                _ => cri::Protocol::Tcp,
            };
            port_mappings.push(cri::PortMapping {
                protocol: protocol as i32,
                container_port: number.parse().unwrap_or(0),
                host_port: i32::from(*host_port),
                host_ip: String::new(),
            });
        }
        let namespaces = cri::NamespaceOption {
            network: if host {
                cri::NamespaceMode::Node as i32
            } else {
                cri::NamespaceMode::Pod as i32
            },
            pid: cri::NamespaceMode::Container as i32,
            ipc: cri::NamespaceMode::Pod as i32,
            ..Default::default()
        };
        cri::PodSandboxConfig {
            metadata: Some(cri::PodSandboxMetadata {
                name: label(&plan.labels, labels::POD_NAME),
                uid: label(&plan.labels, labels::POD_UID),
                namespace: label(&plan.labels, labels::POD_NAMESPACE),
                attempt: label(&plan.labels, labels::RESTART_COUNT)
                    .parse()
                    .unwrap_or(0),
            }),
            hostname: plan.hostname.clone().unwrap_or_default(),
            // The runtime writes the pod's resolv.conf from it (the host's copied without).
            dns_config: plan.dns.resolver.as_ref().map(|r| cri::DnsConfig {
                servers: r.servers.clone(),
                searches: r.searches.clone(),
                options: r.options.clone(),
            }),
            log_directory: self.log_directory(&plan.labels).display().to_string(),
            port_mappings,
            labels: plan.labels.clone(),
            linux: Some(cri::LinuxPodSandboxConfig {
                security_context: Some(cri::LinuxSandboxSecurityContext {
                    namespace_options: Some(namespaces),
                    ..Default::default()
                }),
                sysctls: plan.security.sysctls.clone().into_iter().collect(),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    /// Runs a sandbox from its plan: the runtime pulls its own sandbox image and starts it.
    pub async fn create_sandbox(&self, plan: &ContainerPlan) -> Result<String, EngineError> {
        let config = self.sandbox_config(plan);
        let dir = PathBuf::from(&config.log_directory);
        std::fs::create_dir_all(&dir).map_err(|e| EngineError::Call {
            what: format!("create the pod log directory {}", dir.display()),
            source: Box::new(e),
        })?;
        let id = self
            .cri
            .run_pod_sandbox(config.clone(), "")
            .await
            .map_err(call(format!("run pod sandbox {}", plan.name)))?;
        lock(&self.sandboxes).insert(id.clone(), config);
        Ok(id)
    }

    /// The config `sandbox` was run with: remembered, or rebuilt from its status and labels
    /// (a sandbox from before a restart).
    async fn config_of(&self, sandbox: &str) -> Result<cri::PodSandboxConfig, EngineError> {
        if let Some(config) = lock(&self.sandboxes).get(sandbox) {
            return Ok(config.clone());
        }
        let status = self
            .cri
            .pod_sandbox_status(sandbox)
            .await
            .map_err(call(format!("pod sandbox status of {sandbox}")))?;
        let config = cri::PodSandboxConfig {
            metadata: status.metadata,
            log_directory: self.log_directory(&status.labels).display().to_string(),
            labels: status.labels,
            annotations: status.annotations,
            ..Default::default()
        };
        lock(&self.sandboxes).insert(sandbox.to_owned(), config.clone());
        Ok(config)
    }

    /// Creates an app container in its sandbox (`network_mode: container:<id>`).
    pub async fn create(&self, plan: &ContainerPlan) -> Result<String, EngineError> {
        let Some(sandbox) = plan
            .network_mode
            .as_deref()
            .and_then(|m| m.strip_prefix("container:"))
        else {
            return Err(EngineError::Image {
                reason: "CreateContainerError",
                message: format!(
                    "container {} has no pod sandbox: a CRI runtime runs every container in one",
                    plan.name
                ),
            });
        };
        let sandbox_config = self.config_of(sandbox).await?;
        let name = label(&plan.labels, labels::CONTAINER_NAME);
        let attempt: u32 = label(&plan.labels, labels::RESTART_COUNT)
            .parse()
            .unwrap_or(0);
        let log_path = container_log_path(&name, attempt);
        let container_dir = PathBuf::from(&sandbox_config.log_directory).join(&name);
        std::fs::create_dir_all(&container_dir).map_err(|e| EngineError::Call {
            what: format!(
                "create the container log directory {}",
                container_dir.display()
            ),
            source: Box::new(e),
        })?;
        let security = &plan.security;
        let (run_as_user, run_as_group, run_as_username) = run_as(security.user.as_deref());
        let opt = |o: &str| security.security_opt.iter().any(|s| s == o);
        let profile = |unconfined: bool| cri::SecurityProfile {
            profile_type: if unconfined {
                cri::security_profile::ProfileType::Unconfined as i32
            } else {
                cri::security_profile::ProfileType::RuntimeDefault as i32
            },
            localhost_ref: String::new(),
        };
        let config = cri::ContainerConfig {
            metadata: Some(cri::ContainerMetadata { name, attempt }),
            image: Some(cri::ImageSpec {
                image: plan.image.clone(),
                ..Default::default()
            }),
            command: plan.entrypoint.clone().unwrap_or_default(),
            args: plan.cmd.clone().unwrap_or_default(),
            working_dir: plan.working_dir.clone().unwrap_or_default(),
            envs: plan
                .env
                .iter()
                .map(|kv| {
                    let (key, value) = kv.split_once('=').unwrap_or((kv, ""));
                    cri::KeyValue {
                        key: key.to_owned(),
                        value: value.to_owned(),
                    }
                })
                .collect(),
            mounts: plan.binds.iter().filter_map(|b| mount(b)).collect(),
            labels: plan.labels.clone(),
            log_path,
            linux: Some(cri::LinuxContainerConfig {
                resources: Some(cri::LinuxContainerResources {
                    memory_limit_in_bytes: plan.memory.unwrap_or(0),
                    cpu_period: plan.nano_cpus.map(|_| CPU_PERIOD_US).unwrap_or(0),
                    cpu_quota: plan
                        .nano_cpus
                        .map(|n| (n.saturating_mul(CPU_PERIOD_US) / 1_000_000_000).max(1000))
                        .unwrap_or(0),
                    ..Default::default()
                }),
                security_context: Some(cri::LinuxContainerSecurityContext {
                    capabilities: Some(cri::Capability {
                        add_capabilities: security.cap_add.clone(),
                        drop_capabilities: security.cap_drop.clone(),
                        ..Default::default()
                    }),
                    privileged: security.privileged,
                    namespace_options: sandbox_config
                        .linux
                        .as_ref()
                        .and_then(|l| l.security_context.as_ref())
                        .and_then(|s| s.namespace_options.clone()),
                    run_as_user,
                    run_as_group,
                    run_as_username,
                    readonly_rootfs: security.readonly_rootfs,
                    supplemental_groups: security
                        .group_add
                        .iter()
                        .filter_map(|g| g.parse().ok())
                        .collect(),
                    no_new_privs: opt("no-new-privileges"),
                    seccomp: Some(profile(opt("seccomp=unconfined"))),
                    // Only when asked for: a RuntimeDefault profile fails on a host without
                    // AppArmor ("apparmor is not supported"), and kubelet sends none either.
                    apparmor: opt("apparmor=unconfined").then(|| profile(true)),
                    ..Default::default()
                }),
            }),
            ..Default::default()
        };
        self.cri
            .create_container(sandbox, config, sandbox_config)
            .await
            .map_err(call(format!("create container {}", plan.name)))
    }

    /// Starts a created container.
    pub async fn start(&self, id: &str) -> Result<(), EngineError> {
        self.cri
            .start_container(id)
            .await
            .map_err(call(format!("start container {id}")))
    }

    /// Stops a container, or (an id the runtime knows as a sandbox) a sandbox.
    pub async fn stop(&self, id: &str, grace: Duration) -> Result<(), EngineError> {
        match self.cri.stop_container(id, grace).await {
            Ok(()) => Ok(()),
            Err(e) if e.is_not_found() => match self.cri.stop_pod_sandbox(id).await {
                Ok(()) => Ok(()),
                Err(e) if e.is_not_found() => Ok(()),
                Err(e) => Err(call(format!("stop pod sandbox {id}"))(e)),
            },
            Err(e) => Err(call(format!("stop container {id}"))(e)),
        }
    }

    /// `ExecSync` with the runtime's own deadline.
    pub async fn exec(
        &self,
        id: &str,
        cmd: &[String],
        timeout: Duration,
    ) -> Result<(i64, String), EngineError> {
        // Whole seconds, at least one: 0 would mean no deadline at all.
        let timeout = Duration::from_secs(timeout.as_secs().max(1));
        let answer = self
            .cri
            .exec_sync(id, cmd.to_vec(), timeout)
            .await
            .map_err(call(format!("exec in {id}")))?;
        let mut output = String::from_utf8_lossy(&answer.stdout).into_owned();
        output.push_str(&String::from_utf8_lossy(&answer.stderr));
        output.truncate(output.floor_char_boundary(4096));
        Ok((i64::from(answer.exit_code), output))
    }

    /// Removes a container, or a sandbox; gone already is fine.
    pub async fn remove(&self, id: &str) -> Result<(), EngineError> {
        // containerd answers both removals of an unknown id with success (NotFound from
        // another runtime is success too), so the id goes whichever it is.
        match self.cri.remove_container(id).await {
            Ok(()) => {}
            Err(e) if e.is_not_found() => {}
            Err(e) => return Err(call(format!("remove container {id}"))(e)),
        }
        match self.cri.remove_pod_sandbox(id).await {
            Ok(()) => {
                lock(&self.sandboxes).remove(id);
                Ok(())
            }
            Err(e) if e.is_not_found() => Ok(()),
            Err(e) => Err(call(format!("remove pod sandbox {id}"))(e)),
        }
    }

    /// Rotates the logs of `node`'s running containers that reached the policy's size
    /// ([`crate::log_rotation`]); returns how many were rotated.
    pub async fn rotate_logs(
        &self,
        node: &str,
        policy: &crate::log_rotation::LogRotationPolicy,
    ) -> Result<usize, EngineError> {
        let selector = managed_by(node);
        let running = self
            .cri
            .list_containers(Some(cri::ContainerFilter {
                label_selector: selector,
                state: Some(cri::ContainerStateValue {
                    state: cri::ContainerState::ContainerRunning as i32,
                }),
                ..Default::default()
            }))
            .await
            .map_err(call("list running containers"))?;
        let mut rotated = 0;
        for container in running {
            let log = self.log_file(&container.labels);
            let (policy, path) = (*policy, log.clone());
            let now = wedge_core::time::now_ms();
            let renamed = tokio::task::spawn_blocking(move || {
                crate::log_rotation::rotate(&path, &policy, now)
            })
            .await
            .map_err(|e| EngineError::Call {
                what: format!("rotate {}", log.display()),
                source: Box::new(e),
            })?;
            let renamed = match renamed {
                Ok(Some(renamed)) => renamed,
                Ok(None) => continue,
                Err(e) => {
                    tracing::warn!(log = %log.display(), "container log not rotated: {e}");
                    continue;
                }
            };
            match self.cri.reopen_container_log(&container.id).await {
                Ok(()) => {
                    rotated += 1;
                    tracing::debug!(log = %log.display(), rotated = %renamed.display(), "container log rotated");
                }
                Err(e) => {
                    // The runtime still writes to the renamed file: give it its name back.
                    tracing::warn!(log = %log.display(), "container log not rotated: the runtime did not reopen it: {e}");
                    if let Err(e) = crate::log_rotation::undo(&log, &renamed) {
                        tracing::warn!(log = %log.display(), "container log left at {}: {e}", renamed.display());
                    }
                }
            }
        }
        Ok(rotated)
    }

    /// A container's log file, from its labels: its pod's log directory joined with the
    /// [`container_log_path`] it was created with.
    fn log_file(&self, labels_: &HashMap<String, String>) -> PathBuf {
        let attempt = label(labels_, labels::RESTART_COUNT).parse().unwrap_or(0);
        self.log_directory(labels_).join(container_log_path(
            &label(labels_, labels::CONTAINER_NAME),
            attempt,
        ))
    }

    /// Every sandbox and container of `node`'s edged.
    pub async fn list(&self, node: &str) -> Result<Vec<ManagedContainer>, EngineError> {
        let selector = managed_by(node);
        let sandboxes = self
            .cri
            .list_pod_sandbox(Some(cri::PodSandboxFilter {
                label_selector: selector.clone(),
                ..Default::default()
            }))
            .await
            .map_err(call("list pod sandboxes"))?;
        let containers = self
            .cri
            .list_containers(Some(cri::ContainerFilter {
                label_selector: selector,
                ..Default::default()
            }))
            .await
            .map_err(call("list containers"))?;
        let managed = |id: String,
                       labels_: &HashMap<String, String>,
                       state: &str,
                       created_ns: i64,
                       sandbox_id: Option<String>| ManagedContainer {
            id,
            pod_namespace: label(labels_, labels::POD_NAMESPACE),
            pod_name: label(labels_, labels::POD_NAME),
            pod_uid: label(labels_, labels::POD_UID),
            container: label(labels_, labels::CONTAINER_NAME),
            hash: label(labels_, labels::CONTAINER_HASH),
            restart_count: label(labels_, labels::RESTART_COUNT).parse().unwrap_or(0),
            state: state.to_owned(),
            created: created_ns / 1_000_000_000,
            sandbox: sandbox_id.is_none(),
            sandbox_id,
        };
        let mut out = Vec::with_capacity(sandboxes.len() + containers.len());
        for s in sandboxes {
            let state = if s.state == cri::PodSandboxState::SandboxReady as i32 {
                "running"
            } else {
                "exited"
            };
            out.push(managed(s.id, &s.labels, state, s.created_at, None));
        }
        for c in containers {
            let state = match cri::ContainerState::try_from(c.state) {
                Ok(cri::ContainerState::ContainerCreated) => "created",
                Ok(cri::ContainerState::ContainerRunning) => "running",
                Ok(cri::ContainerState::ContainerExited) => "exited",
                _ => "unknown",
            };
            out.push(managed(
                c.id,
                &c.labels,
                state,
                c.created_at,
                Some(c.pod_sandbox_id),
            ));
        }
        Ok(out)
    }

    /// A container's (or sandbox's) last run.
    pub async fn inspect(&self, id: &str) -> Result<Option<ContainerRun>, EngineError> {
        match self.cri.container_status(id).await {
            Ok(s) => {
                let running = s.state == cri::ContainerState::ContainerRunning as i32;
                return Ok(Some(ContainerRun {
                    running,
                    exit_code: i64::from(s.exit_code),
                    started_at: rfc3339(s.started_at),
                    finished_at: rfc3339(s.finished_at),
                    oom_killed: s.reason == "OOMKilled",
                    error: if s.reason == "Error" || s.reason == "Completed" {
                        String::new()
                    } else {
                        s.message
                    },
                    image_id: s.image_ref,
                    ip: String::new(),
                }));
            }
            Err(e) if e.is_not_found() => {}
            Err(e) => return Err(call(format!("container status of {id}"))(e)),
        }
        match self.cri.pod_sandbox_status(id).await {
            Ok(s) => Ok(Some(ContainerRun {
                running: s.state == cri::PodSandboxState::SandboxReady as i32,
                started_at: rfc3339(s.created_at),
                finished_at: rfc3339(0),
                ip: s.network.map(|n| n.ip).unwrap_or_default(),
                ..Default::default()
            })),
            Err(e) if e.is_not_found() => Ok(None),
            Err(e) => Err(call(format!("pod sandbox status of {id}"))(e)),
        }
    }

    /// Every image of the runtime.
    pub async fn list_images(&self) -> Result<Vec<ImageInfo>, EngineError> {
        let images = self
            .cri
            .list_images(None)
            .await
            .map_err(call("list images"))?;
        Ok(images
            .into_iter()
            .map(|i| ImageInfo {
                id: i.id,
                tags: i.repo_tags,
                size: i.size,
                // CRI does not tell when an image was built: image GC orders by last use.
                created: 0,
            })
            .collect())
    }

    /// Image ids under any container of the runtime.
    pub async fn images_in_use(&self) -> Result<HashSet<String>, EngineError> {
        let containers = self
            .cri
            .list_containers(None)
            .await
            .map_err(call("list containers"))?;
        Ok(containers.into_iter().map(|c| c.image_ref).collect())
    }

    /// Removes an image by id (CRI removes every tag of it).
    pub async fn remove_image(&self, image: &ImageInfo) -> Result<(), EngineError> {
        match self.cri.remove_image(&image.id).await {
            Ok(()) => Ok(()),
            Err(e) if e.is_not_found() => Ok(()),
            Err(e) => Err(call(format!("remove image {}", image.id))(e)),
        }
    }

    /// The image filesystem's mount point (`ImageFsInfo`).
    pub async fn root_dir(&self) -> Result<PathBuf, EngineError> {
        let info = self
            .cri
            .image_fs_info()
            .await
            .map_err(call("image filesystem info"))?;
        info.image_filesystems
            .into_iter()
            .find_map(|fs| fs.fs_id.map(|id| PathBuf::from(id.mountpoint)))
            .ok_or_else(|| EngineError::Call {
                what: "image filesystem info".to_owned(),
                source: "the runtime named no image filesystem".into(),
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn binds_become_mounts() {
        let m = mount("/data/pods/u/volumes/cfg:/etc/cfg:ro").unwrap();
        assert_eq!(
            (m.host_path.as_str(), m.container_path.as_str(), m.readonly),
            ("/data/pods/u/volumes/cfg", "/etc/cfg", true)
        );
        let m = mount("/h:/c").unwrap();
        assert!(!m.readonly);
        assert!(mount("nocolon").is_none());
    }

    #[test]
    fn users_become_run_as_fields() {
        let (u, g, name) = run_as(Some("1000:2000"));
        assert_eq!(
            (u.map(|v| v.value), g.map(|v| v.value), name.as_str()),
            (Some(1000), Some(2000), "")
        );
        let (u, g, name) = run_as(Some("nobody"));
        assert_eq!((u, g, name.as_str()), (None, None, "nobody"));
        let (u, _, _) = run_as(None);
        assert!(u.is_none());
    }

    #[test]
    fn never_is_the_zero_time() {
        assert_eq!(rfc3339(0), "0001-01-01T00:00:00Z");
        assert_eq!(rfc3339(1_000_000_000), "1970-01-01T00:00:01Z");
    }
}
