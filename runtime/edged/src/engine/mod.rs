//! The node's container engine: images, pod sandboxes and the containers edged owns.
//!
//! Two runtimes sit behind one [`Engine`], chosen by `containerRuntimeEndpoint` (KubeEdge's
//! `tailoredKubeletConfig` key, see [`Engine::connect_endpoint`]):
//! - the Docker Engine API through bollard ([`docker`]), when the endpoint is Docker's socket:
//!   a sandbox is a pause container whose network the pod's containers join;
//! - CRI v1 ([`cri`]), for containerd or any CRI runtime: a sandbox is the runtime's
//!   `RunPodSandbox`, its network from CNI.
//!
//! Pod workers, garbage collection and status speak only [`ContainerPlan`],
//! [`ManagedContainer`] and [`ContainerRun`], so both runtimes run the same pod logic.
//!
//! Every container edged creates carries labels naming its pod (namespace, name, uid) and
//! container, kubelet's label names, plus a hash of the container's spec. The engine alone is
//! therefore enough to rebuild what runs after a restart, to find orphans, and to tell whether
//! an updated pod changed a container (new hash) or only its metadata.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use bollard::auth::DockerCredentials;

pub mod cri;
pub mod docker;
mod stats;
pub use stats::{
    ContainerFsUsage, ContainerStats, CpuSample, DOCKER_CONCURRENCY, InterfaceSample, MemorySample,
    NetworkSample, STATS_TIMEOUT,
};

/// Label names on every container edged creates.
pub mod labels {
    /// Marks a container as edged's.
    pub const MANAGED: &str = "io.wedge.managed";
    /// The node whose edged owns it: two nodes sharing an engine never touch each other's.
    pub const NODE: &str = "io.wedge.node";
    /// The pod's namespace.
    pub const POD_NAMESPACE: &str = "io.kubernetes.pod.namespace";
    /// The pod's name.
    pub const POD_NAME: &str = "io.kubernetes.pod.name";
    /// The pod's uid.
    pub const POD_UID: &str = "io.kubernetes.pod.uid";
    /// The container's name in the pod.
    pub const CONTAINER_NAME: &str = "io.kubernetes.container.name";
    /// Hash of the container's spec (see `plan::spec_hash`).
    pub const CONTAINER_HASH: &str = "io.wedge.container.hash";
    /// How many times this container was started before (0 for the first).
    pub const RESTART_COUNT: &str = "io.wedge.container.restartCount";
    /// dockershim's kind of container: [`TYPE_SANDBOX`] or [`TYPE_CONTAINER`]. Containers
    /// created before sandboxes existed lack it and are app containers.
    pub const DOCKER_TYPE: &str = "io.kubernetes.docker.type";
    /// [`DOCKER_TYPE`] of a pod's sandbox ("pause") container.
    pub const TYPE_SANDBOX: &str = "podsandbox";
    /// [`DOCKER_TYPE`] of an app container.
    pub const TYPE_CONTAINER: &str = "container";
    /// On an app container: the engine id of the sandbox whose network it joined, so that a
    /// container left in an old sandbox's namespace is found from the engine alone.
    pub const SANDBOX_ID: &str = "io.kubernetes.sandbox.id";
    /// [`CONTAINER_NAME`] of a sandbox, as dockershim names it (no app container can take it:
    /// Kubernetes container names are lower case).
    pub const SANDBOX_CONTAINER_NAME: &str = "POD";
}

/// Why the engine failed.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// The engine cannot be reached (not installed, not running, no permission, not the
    /// protocol its endpoint was taken for). The message names the endpoint and what to do.
    #[error("{0}")]
    Unreachable(String),
    /// An image could not be made available; `reason` is Kubernetes' waiting reason.
    #[error("{message}")]
    Image {
        /// `ErrImagePull` or `ErrImageNeverPull`.
        reason: &'static str,
        /// What happened.
        message: String,
    },
    /// An engine call got no answer within its deadline.
    #[error("the container runtime did not answer within {0:?}")]
    Timeout(std::time::Duration),
    /// An engine call failed.
    #[error("{what}: {source}")]
    Call {
        /// The call, with its subject.
        what: String,
        /// The client's error (bollard's or the CRI client's).
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

/// How [`Engine::ensure_image`] made an image available (a pod event says which).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ImageReady {
    /// It was on the node already (or a refresh failed and the local copy stands).
    Present,
    /// It was pulled, in this long.
    Pulled(std::time::Duration),
}

/// What to create for one container of a pod.
#[derive(Debug, Clone, PartialEq)]
pub struct ContainerPlan {
    /// Docker container name.
    pub name: String,
    /// Image reference.
    pub image: String,
    /// Entrypoint (Kubernetes `command`), if overridden.
    pub entrypoint: Option<Vec<String>>,
    /// Cmd (Kubernetes `args`), if overridden.
    pub cmd: Option<Vec<String>>,
    /// `NAME=value` pairs.
    pub env: Vec<String>,
    /// Working directory.
    pub working_dir: Option<String>,
    /// Labels (see [`labels`]).
    pub labels: HashMap<String, String>,
    /// Memory limit in bytes.
    pub memory: Option<i64>,
    /// CPU limit in nano-CPUs.
    pub nano_cpus: Option<i64>,
    /// `host:container[:ro]` binds.
    pub binds: Vec<String>,
    /// `host`, `container:<id>` (a pod's sandbox), or `None` for the default bridge.
    pub network_mode: Option<String>,
    /// `(container port/proto, host port)` to publish. Only on a container with a network of
    /// its own: the engine refuses them with `container:<id>`.
    pub published: Vec<(String, u16)>,
    /// The hostname inside the container; `None` for the engine's (the id), and always `None`
    /// with `container:<id>`, where the engine refuses it.
    pub hostname: Option<String>,
    /// User, groups, capabilities, sysctls... from the pod's `securityContext`.
    pub security: crate::security_context::SecurityPlan,
    /// Resolver configuration, domain and extra hosts the engine writes itself; empty on a
    /// container that joins a sandbox (see `crate::name_plan`).
    pub dns: crate::dns::DnsPlan,
}

/// One of edged's containers as the engine lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ManagedContainer {
    /// Engine id.
    pub id: String,
    /// Pod namespace, name and uid from the labels.
    pub pod_namespace: String,
    /// Pod name.
    pub pod_name: String,
    /// Pod uid.
    pub pod_uid: String,
    /// Container name in the pod.
    pub container: String,
    /// Spec hash label.
    pub hash: String,
    /// Restart count label.
    pub restart_count: u32,
    /// `created`, `running`, `exited`, ...
    pub state: String,
    /// Creation time, Unix seconds.
    pub created: i64,
    /// A pod's sandbox ([`labels::TYPE_SANDBOX`]) rather than one of its app containers:
    /// pod workers and garbage collection treat the two apart.
    pub sandbox: bool,
    /// For an app container, the sandbox whose network it joined ([`labels::SANDBOX_ID`]).
    pub sandbox_id: Option<String>,
}

/// What `inspect` tells about a container's run.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ContainerRun {
    /// Running now.
    pub running: bool,
    /// Exit code of the last run.
    pub exit_code: i64,
    /// RFC 3339 start of the last run (`0001-...` when never started).
    pub started_at: String,
    /// RFC 3339 end of the last run.
    pub finished_at: String,
    /// Killed by the OOM killer.
    pub oom_killed: bool,
    /// The engine's error, e.g. a start failure.
    pub error: String,
    /// The image id (`sha256:...`).
    pub image_id: String,
    /// The container's IP on its network, if any.
    pub ip: String,
}

/// An image as the engine lists it, for image garbage collection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageInfo {
    /// Content id (`sha256:...`): what containers refer to.
    pub id: String,
    /// `repo:tag` names; empty for a dangling image.
    pub tags: Vec<String>,
    /// Size in bytes, shared layers included (what kubelet counts as freed).
    pub size: u64,
    /// Build time, Unix seconds.
    pub created: i64,
}

/// Runtime-specific settings of an [`Engine`].
#[derive(Debug, Clone)]
pub struct EngineOptions {
    /// Where a CRI runtime writes pods' container logs (`<dir>/<ns>_<pod>_<uid>/<container>/
    /// <restarts>.log`, kubelet's layout). Docker keeps its own logs.
    pub pod_logs_dir: PathBuf,
}

impl Default for EngineOptions {
    fn default() -> Self {
        EngineOptions {
            pod_logs_dir: PathBuf::from("/var/log/pods"),
        }
    }
}

/// The node's container engine: Docker or a CRI runtime (module docs).
///
/// Connected on first use and again after a failed attempt (at most every
/// [`RECONNECT_EVERY`]), so a runtime that is missing at start only fails the calls made
/// meanwhile: edged and the node stay up, and pods carry the error, which names the endpoint.
#[derive(Clone)]
pub struct Engine {
    inner: Arc<Inner>,
}

struct Inner {
    endpoint: String,
    options: EngineOptions,
    cri: bool,
    backend: tokio::sync::OnceCell<Backend>,
    /// When the last attempt failed, and why: calls within [`RECONNECT_EVERY`] of it get
    /// the same error without knocking again.
    failed: std::sync::Mutex<Option<(std::time::Instant, String)>>,
}

/// How long a failed connection attempt answers for itself before the next call tries again.
pub const RECONNECT_EVERY: Duration = Duration::from_secs(5);

enum Backend {
    Docker(docker::DockerEngine),
    // Boxed: the CRI client is several times Docker's, and a backend is made once.
    Cri(Box<cri::CriEngine>),
}

/// Calls the same method on whichever runtime is behind the engine, connecting first.
macro_rules! dispatch {
    ($self:ident, $e:ident => $call:expr) => {
        match $self.backend().await? {
            Backend::Docker($e) => $call,
            Backend::Cri($e) => $call,
        }
    };
}

/// A connected runtime's own client ([`Engine::client`]).
#[derive(Clone, Copy)]
pub enum RuntimeClient<'a> {
    /// Docker's Engine API.
    Docker(&'a bollard::Docker),
    /// A CRI runtime.
    Cri(&'a wedge_cri::Cri),
}

/// The endpoint Docker's engine listens on by default; `DOCKER_HOST` overrides it.
pub const DOCKER_ENDPOINT: &str = "unix:///var/run/docker.sock";

/// Whether `endpoint` (`unix:///var/run/docker.sock`, a bare path, ...) is Docker's socket
/// rather than a CRI runtime's: Docker's socket is named `docker.sock` wherever it lives.
pub fn is_docker_endpoint(endpoint: &str) -> bool {
    let path = endpoint.strip_prefix("unix://").unwrap_or(endpoint);
    path.rsplit('/').next() == Some("docker.sock")
}

impl Engine {
    /// The runtime at `endpoint` (`containerRuntimeEndpoint`): Docker when it is Docker's
    /// socket ([`is_docker_endpoint`]; the default socket also honours `DOCKER_HOST`), a CRI
    /// runtime otherwise. Nothing is dialled until the first call (type docs).
    pub fn new(endpoint: &str, options: EngineOptions) -> Engine {
        Engine {
            inner: Arc::new(Inner {
                endpoint: endpoint.to_owned(),
                options,
                cri: !is_docker_endpoint(endpoint),
                backend: tokio::sync::OnceCell::new(),
                failed: std::sync::Mutex::new(None),
            }),
        }
    }

    /// Connects to the local Docker engine (`DOCKER_HOST` or `/var/run/docker.sock`) now.
    pub async fn connect() -> Result<Engine, EngineError> {
        Engine::connect_endpoint(DOCKER_ENDPOINT, EngineOptions::default()).await
    }

    /// [`Engine::new`], connected now: an error says why the runtime cannot be used.
    pub async fn connect_endpoint(
        endpoint: &str,
        options: EngineOptions,
    ) -> Result<Engine, EngineError> {
        let engine = Engine::new(endpoint, options);
        engine.backend().await?;
        Ok(engine)
    }

    /// The connected runtime, connecting when not yet (type docs).
    async fn backend(&self) -> Result<&Backend, EngineError> {
        let inner = &self.inner;
        if let Some(backend) = inner.backend.get() {
            return Ok(backend);
        }
        if let Some((at, why)) = lock(&inner.failed).as_ref()
            && at.elapsed() < RECONNECT_EVERY
        {
            return Err(EngineError::Unreachable(why.clone()));
        }
        let connected = inner
            .backend
            .get_or_try_init(|| async {
                if inner.cri {
                    cri::CriEngine::connect(&inner.endpoint, inner.options.clone())
                        .await
                        .map(|e| Backend::Cri(Box::new(e)))
                } else {
                    let path = inner
                        .endpoint
                        .strip_prefix("unix://")
                        .unwrap_or(&inner.endpoint);
                    let custom = path != "/var/run/docker.sock" && path != "/run/docker.sock";
                    docker::DockerEngine::connect(custom.then_some(path))
                        .await
                        .map(Backend::Docker)
                }
            })
            .await;
        match connected {
            Ok(backend) => {
                *lock(&inner.failed) = None;
                Ok(backend)
            }
            Err(e) => {
                *lock(&inner.failed) = Some((std::time::Instant::now(), e.to_string()));
                Err(e)
            }
        }
    }

    /// The endpoint the engine dials.
    pub fn endpoint(&self) -> &str {
        &self.inner.endpoint
    }

    /// The runtime's name as Kubernetes writes it before a container id and in
    /// `containerRuntimeVersion` (`docker`, `containerd`); before the first connection, `docker`
    /// or `cri`.
    pub fn runtime_name(&self) -> &str {
        match self.inner.backend.get() {
            Some(Backend::Docker(e)) => e.runtime_name(),
            Some(Backend::Cri(e)) => e.runtime_name(),
            None if self.inner.cri => "cri",
            None => "docker",
        }
    }

    /// Whether this is a CRI runtime: every pod then runs in a sandbox (the runtime's), even
    /// on the host's network or with `podSandboxImage: ""`.
    pub fn is_cri(&self) -> bool {
        self.inner.cri
    }

    /// The Docker client, when the engine is a connected Docker: for tests and checks that
    /// look at Docker's own view.
    pub fn docker(&self) -> Option<&bollard::Docker> {
        match self.inner.backend.get() {
            Some(Backend::Docker(e)) => Some(e.docker()),
            _ => None,
        }
    }

    /// The CRI client, when the engine is a connected CRI runtime: for the log reader and
    /// tests.
    pub fn cri(&self) -> Option<&wedge_cri::Cri> {
        match self.inner.backend.get() {
            Some(Backend::Cri(e)) => Some(e.client()),
            _ => None,
        }
    }

    /// The runtime's own client, connecting first: the node server's streams (logs, exec,
    /// attach) speak each runtime's streaming API directly rather than through the pod calls.
    pub async fn client(&self) -> Result<RuntimeClient<'_>, EngineError> {
        Ok(match self.backend().await? {
            Backend::Docker(e) => RuntimeClient::Docker(e.docker()),
            Backend::Cri(e) => RuntimeClient::Cri(e.client()),
        })
    }

    /// Rotates the CRI logs of `node`'s running containers by `policy`; returns how many were
    /// rotated. Docker keeps its own logs (its daemon's `log-opts`): nothing to do there.
    pub async fn rotate_logs(
        &self,
        node: &str,
        policy: &crate::log_rotation::LogRotationPolicy,
    ) -> Result<usize, EngineError> {
        match self.backend().await? {
            Backend::Docker(_) => Ok(0),
            Backend::Cri(e) => e.rotate_logs(node, policy).await,
        }
    }

    /// The runtime's version (`20.10.24+dfsg1`, `1.6.20~ds1`), as the node reports it.
    pub async fn version(&self) -> Result<String, EngineError> {
        dispatch!(self, e => e.version().await)
    }

    /// Makes `image` available per `policy` (`Always`, `IfNotPresent`, `Never`). A pull tries
    /// each of `credentials` in turn (the pod's pull secrets that match the image, most
    /// specific first), anonymously when there are none. An image already present still runs
    /// when a refresh fails (an offline edge node).
    pub async fn ensure_image(
        &self,
        image: &str,
        policy: &str,
        credentials: &[DockerCredentials],
    ) -> Result<ImageReady, EngineError> {
        let present = dispatch!(self, e => e.image_present(image).await)?;
        match (policy, present) {
            ("Never", false) => Err(EngineError::Image {
                reason: "ErrImageNeverPull",
                message: format!("image {image:?} is not present and the pull policy is Never"),
            }),
            ("Never" | "IfNotPresent", true) => Ok(ImageReady::Present),
            _ => {
                let started = std::time::Instant::now();
                match self.pull_with(image, credentials).await {
                    Ok(()) => Ok(ImageReady::Pulled(started.elapsed())),
                    // An image already here still runs when a refresh fails (no registry,
                    // offline node): kubelet would fail the pod; an edge node should not.
                    Err(e) if present => {
                        tracing::warn!(image, "pull failed, using the local image: {e}");
                        Ok(ImageReady::Present)
                    }
                    Err(e) => Err(e),
                }
            }
        }
    }

    /// Pulls `image` with each credential in turn until one works (kubelet's order), or
    /// anonymously without any. The error names the image and the runtime's last answer,
    /// never a password.
    async fn pull_with(
        &self,
        image: &str,
        credentials: &[DockerCredentials],
    ) -> Result<(), EngineError> {
        let tries: Vec<Option<&DockerCredentials>> = if credentials.is_empty() {
            vec![None]
        } else {
            credentials.iter().map(Some).collect()
        };
        let mut last = String::new();
        for credential in tries {
            let pulled =
                dispatch!(self, e => e.pull(image, credential).await.map_err(|e| e.to_string()));
            match pulled {
                Ok(()) => return Ok(()),
                Err(e) => last = e,
            }
        }
        let tried = match credentials.len() {
            0 => String::new(),
            1 => " (1 pull secret credential tried)".to_owned(),
            n => format!(" ({n} pull secret credentials tried)"),
        };
        Err(EngineError::Image {
            reason: "ErrImagePull",
            message: format!("pulling image {image:?} failed{tried}: {last}"),
        })
    }

    /// The user an image runs as by default (its config's `User`; empty for root or unset),
    /// for kubelet's `runAsNonRoot` check.
    pub async fn image_user(&self, image: &str) -> Result<String, EngineError> {
        dispatch!(self, e => e.image_user(image).await)
    }

    /// Creates (does not start) a container; returns its id. A sandbox plan
    /// ([`labels::TYPE_SANDBOX`]) goes through [`Engine::create_sandbox`] instead.
    pub async fn create(&self, plan: &ContainerPlan) -> Result<String, EngineError> {
        dispatch!(self, e => e.create(plan).await)
    }

    /// Creates a pod's sandbox from its plan (`sandbox::plan`); returns its id. On Docker the
    /// pause container is created here and started by [`Engine::start_sandbox`]; a CRI runtime
    /// runs it here already.
    pub async fn create_sandbox(&self, plan: &ContainerPlan) -> Result<String, EngineError> {
        dispatch!(self, e => e.create_sandbox(plan).await)
    }

    /// Starts a created or exited container.
    pub async fn start(&self, id: &str) -> Result<(), EngineError> {
        dispatch!(self, e => e.start(id).await)
    }

    /// Stops a container or sandbox (SIGTERM, then SIGKILL after `grace`) and removes it; a
    /// container already gone is not an error.
    pub async fn stop_and_remove(&self, id: &str, grace: Duration) -> Result<(), EngineError> {
        self.stop(id, grace).await?;
        self.remove(id).await
    }

    /// Stops a container (SIGTERM, then SIGKILL after `grace`) and keeps it, so its restart
    /// goes through the pod's restart policy like any exit. A sandbox id stops the sandbox.
    pub async fn stop(&self, id: &str, grace: Duration) -> Result<(), EngineError> {
        dispatch!(self, e => e.stop(id, grace).await)
    }

    /// Runs `cmd` in a running container and returns its exit code and output (stdout and
    /// stderr, as text, the first 4 KiB); `timeout` bounds the run.
    pub async fn exec(
        &self,
        id: &str,
        cmd: &[String],
        timeout: Duration,
    ) -> Result<(i64, String), EngineError> {
        dispatch!(self, e => e.exec(id, cmd, timeout).await)
    }

    /// Removes a stopped container or sandbox; one already gone is not an error.
    pub async fn remove(&self, id: &str) -> Result<(), EngineError> {
        dispatch!(self, e => e.remove(id).await)
    }

    /// Every container and sandbox the edged of `node` created, running or not.
    pub async fn list(&self, node: &str) -> Result<Vec<ManagedContainer>, EngineError> {
        dispatch!(self, e => e.list(node).await)
    }

    /// The state of a container's or sandbox's last run; `None` when it no longer exists.
    pub async fn inspect(&self, id: &str) -> Result<Option<ContainerRun>, EngineError> {
        dispatch!(self, e => e.inspect(id).await)
    }

    /// Every image on the engine (tagged or dangling, intermediate layers excluded).
    pub async fn list_images(&self) -> Result<Vec<ImageInfo>, EngineError> {
        dispatch!(self, e => e.list_images().await)
    }

    /// Ids of the images any container on the engine refers to, running or not, edged's or
    /// not: an image under a stopped container is still needed to start it again.
    pub async fn images_in_use(&self) -> Result<HashSet<String>, EngineError> {
        dispatch!(self, e => e.images_in_use().await)
    }

    /// Removes an image: each of its tags, then (when untagged) its id. Never forced; already
    /// gone is fine.
    pub async fn remove_image(&self, image: &ImageInfo) -> Result<(), EngineError> {
        dispatch!(self, e => e.remove_image(image).await)
    }

    /// The filesystem the engine's images live on, whose usage drives image garbage
    /// collection (`DockerRootDir`, or the CRI image filesystem's mount point).
    pub async fn root_dir(&self) -> Result<PathBuf, EngineError> {
        dispatch!(self, e => e.root_dir().await)
    }

    /// One usage sample of each running container and sandbox among `containers` (stopped
    /// ones and ones gone meanwhile have none): the input of the node's stats endpoints.
    pub async fn container_stats(
        &self,
        containers: &[ManagedContainer],
    ) -> Result<Vec<ContainerStats>, EngineError> {
        stats::collect(self.backend().await?, &self.inner.options, containers).await
    }
}

fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dockers_socket_is_docker_and_anything_else_cri() {
        assert!(is_docker_endpoint("unix:///var/run/docker.sock"));
        assert!(is_docker_endpoint("/srv/engine/docker.sock"));
        assert!(!is_docker_endpoint(
            "unix:///run/containerd/containerd.sock"
        ));
        assert!(!is_docker_endpoint("unix:///run/cri-dockerd.sock"));
    }
}
