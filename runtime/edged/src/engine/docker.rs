//! The Docker engine, through bollard: a pod's sandbox is a pause container whose network the
//! pod's containers join (`container:<id>`), named and labelled as dockershim did.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::time::Duration;

use bollard::Docker;
use bollard::auth::DockerCredentials;
use bollard::models::{ContainerCreateBody, HostConfig, PortBinding};
use bollard::query_parameters::{
    CreateContainerOptions, CreateImageOptions, ListContainersOptions, ListImagesOptions,
    RemoveContainerOptions, RemoveImageOptions, StopContainerOptions,
};
use futures_util::StreamExt;

use super::{ContainerPlan, ContainerRun, EngineError, ImageInfo, ManagedContainer, labels};

/// The node's Docker engine.
#[derive(Clone)]
pub struct DockerEngine {
    docker: Docker,
}

fn call(what: impl Into<String>) -> impl FnOnce(bollard::errors::Error) -> EngineError {
    let what = what.into();
    move |source| EngineError::Call {
        what,
        source: Box::new(source),
    }
}

fn is_not_found(e: &bollard::errors::Error) -> bool {
    matches!(
        e,
        bollard::errors::Error::DockerResponseServerError {
            status_code: 404,
            ..
        }
    )
}

/// The `DnsSearch` of a resolver configuration. Docker fills each part a container leaves
/// empty from the host's resolv.conf; an empty search list is therefore given as `.`, which
/// Docker writes as no `search` line, as containerd writes an empty one. (Empty nameservers or
/// options have no such escape and come from the host.)
pub fn docker_searches(resolver: &crate::dns::ResolverConfig) -> Vec<String> {
    if resolver.searches.is_empty() {
        vec![".".to_owned()]
    } else {
        resolver.searches.clone()
    }
}

impl DockerEngine {
    /// Connects to the engine at the unix socket `path`, or with `None` the local default
    /// (`DOCKER_HOST` or `/var/run/docker.sock`), agrees on an API version it speaks (Debian's
    /// engine is API 1.41) and checks it answers.
    pub async fn connect(path: Option<&str>) -> Result<DockerEngine, EngineError> {
        let endpoint = path.unwrap_or("/var/run/docker.sock (or DOCKER_HOST)");
        let unreachable = |e: bollard::errors::Error| {
            EngineError::Unreachable(format!(
                "the Docker engine at {endpoint} is not reachable ({e}); start dockerd, or point \
                 modules.edged.tailoredKubeletConfig.containerRuntimeEndpoint at the node's \
                 runtime, and check access to the socket"
            ))
        };
        let docker = match path {
            Some(path) => Docker::connect_with_unix(path, 120, bollard::API_DEFAULT_VERSION),
            None => Docker::connect_with_local_defaults(),
        }
        .map_err(unreachable)?;
        let docker = docker.negotiate_version().await.map_err(unreachable)?;
        docker.ping().await.map_err(unreachable)?;
        Ok(DockerEngine { docker })
    }

    /// `docker`: the prefix of container ids in pod status, and the runtime's name.
    pub fn runtime_name(&self) -> &str {
        "docker"
    }

    /// The engine's version (`20.10.24+dfsg1`), as the node reports its runtime.
    pub async fn version(&self) -> Result<String, EngineError> {
        let v = self
            .docker
            .version()
            .await
            .map_err(call("engine version"))?;
        Ok(v.version.unwrap_or_default())
    }

    /// The bollard client, for what this type does not wrap.
    pub fn docker(&self) -> &Docker {
        &self.docker
    }

    /// The user `image` runs as by default (its config's `User`).
    pub async fn image_user(&self, image: &str) -> Result<String, EngineError> {
        let inspected = self
            .docker
            .inspect_image(image)
            .await
            .map_err(call(format!("inspect image {image}")))?;
        Ok(inspected.config.and_then(|c| c.user).unwrap_or_default())
    }

    /// Whether `image` is on the engine.
    pub async fn image_present(&self, image: &str) -> Result<bool, EngineError> {
        match self.docker.inspect_image(image).await {
            Ok(_) => Ok(true),
            Err(e) if is_not_found(&e) => Ok(false),
            Err(e) => Err(call(format!("inspect image {image}"))(e)),
        }
    }

    /// One pull of `image`, with `credentials` or anonymously, to its end.
    pub async fn pull(
        &self,
        image: &str,
        credentials: Option<&DockerCredentials>,
    ) -> Result<(), bollard::errors::Error> {
        let options = CreateImageOptions {
            from_image: Some(image.to_owned()),
            ..Default::default()
        };
        let mut progress = self
            .docker
            .create_image(Some(options), None, credentials.cloned());
        while let Some(step) = progress.next().await {
            step?;
        }
        Ok(())
    }

    /// Creates (does not start) a container; returns its id. A resolver configuration in the
    /// plan becomes `Dns`/`DnsSearch`/`DnsOptions`, from which Docker writes the container's
    /// resolv.conf (see [`docker_searches`] for an empty search list).
    pub async fn create(&self, plan: &ContainerPlan) -> Result<String, EngineError> {
        // A container port may be published on several host ports.
        let mut port_bindings: HashMap<String, Option<Vec<PortBinding>>> = HashMap::new();
        for (port, host) in &plan.published {
            port_bindings
                .entry(port.clone())
                .or_insert_with(|| Some(Vec::new()))
                .get_or_insert_with(Vec::new)
                .push(PortBinding {
                    host_ip: None,
                    host_port: Some(host.to_string()),
                });
        }
        let security = &plan.security;
        let some = |v: &Vec<String>| (!v.is_empty()).then(|| v.clone());
        let resolver = plan.dns.resolver.as_ref();
        let body = ContainerCreateBody {
            image: Some(plan.image.clone()),
            user: security.user.clone(),
            entrypoint: plan.entrypoint.clone(),
            cmd: plan.cmd.clone(),
            env: Some(plan.env.clone()),
            working_dir: plan.working_dir.clone(),
            labels: Some(plan.labels.clone()),
            hostname: plan.hostname.clone(),
            domainname: plan.dns.domainname.clone(),
            exposed_ports: (!port_bindings.is_empty())
                .then(|| port_bindings.keys().cloned().collect()),
            host_config: Some(HostConfig {
                memory: plan.memory,
                nano_cpus: plan.nano_cpus,
                binds: Some(plan.binds.clone()),
                network_mode: plan.network_mode.clone(),
                port_bindings: (!port_bindings.is_empty()).then_some(port_bindings),
                privileged: security.privileged.then_some(true),
                cap_add: some(&security.cap_add),
                cap_drop: some(&security.cap_drop),
                readonly_rootfs: security.readonly_rootfs.then_some(true),
                security_opt: some(&security.security_opt),
                group_add: some(&security.group_add),
                sysctls: (!security.sysctls.is_empty())
                    .then(|| security.sysctls.clone().into_iter().collect()),
                dns: resolver.map(|r| r.servers.clone()),
                dns_search: resolver.map(docker_searches),
                dns_options: resolver.map(|r| r.options.clone()),
                extra_hosts: some(&plan.dns.extra_hosts),
                ..Default::default()
            }),
            ..Default::default()
        };
        let options = CreateContainerOptions {
            name: Some(plan.name.clone()),
            ..Default::default()
        };
        let created = self
            .docker
            .create_container(Some(options), body)
            .await
            .map_err(call(format!("create container {}", plan.name)))?;
        Ok(created.id)
    }

    /// Creates a sandbox's pause container; [`DockerEngine::start`] starts it.
    pub async fn create_sandbox(&self, plan: &ContainerPlan) -> Result<String, EngineError> {
        self.create(plan).await
    }

    /// Starts a created or exited container.
    pub async fn start(&self, id: &str) -> Result<(), EngineError> {
        self.docker
            .start_container(id, None)
            .await
            .map_err(call(format!("start container {id}")))
    }

    /// Stops a container (SIGTERM, then SIGKILL after `grace`) and keeps it, so its restart
    /// goes through the pod's restart policy like any exit.
    pub async fn stop(&self, id: &str, grace: Duration) -> Result<(), EngineError> {
        let stop = StopContainerOptions {
            t: Some(i32::try_from(grace.as_secs()).unwrap_or(i32::MAX)),
            ..Default::default()
        };
        match self.docker.stop_container(id, Some(stop)).await {
            Ok(()) => Ok(()),
            Err(e) if is_not_found(&e) => Ok(()),
            // 304: already stopped.
            Err(bollard::errors::Error::DockerResponseServerError {
                status_code: 304, ..
            }) => Ok(()),
            Err(e) => Err(call(format!("stop container {id}"))(e)),
        }
    }

    /// Runs `cmd` in a running container and returns its exit code and output (stdout and
    /// stderr, as text); the exec API has no deadline, so `timeout` bounds the wait.
    pub async fn exec(
        &self,
        id: &str,
        cmd: &[String],
        timeout: Duration,
    ) -> Result<(i64, String), EngineError> {
        tokio::time::timeout(timeout, self.exec_unbounded(id, cmd))
            .await
            .unwrap_or_else(|_| {
                Err(EngineError::Call {
                    what: format!("exec in {id}"),
                    source: Box::new(std::io::Error::new(
                        std::io::ErrorKind::TimedOut,
                        format!("no answer within {timeout:?}"),
                    )),
                })
            })
    }

    async fn exec_unbounded(&self, id: &str, cmd: &[String]) -> Result<(i64, String), EngineError> {
        use bollard::exec::{CreateExecOptions, StartExecResults};
        let options = CreateExecOptions {
            attach_stdout: Some(true),
            attach_stderr: Some(true),
            cmd: Some(cmd.to_vec()),
            ..Default::default()
        };
        let exec = self
            .docker
            .create_exec(id, options)
            .await
            .map_err(call(format!("exec in {id}")))?;
        let mut output = String::new();
        if let StartExecResults::Attached {
            output: mut out, ..
        } = self
            .docker
            .start_exec(&exec.id, None)
            .await
            .map_err(call(format!("start exec in {id}")))?
        {
            while let Some(Ok(chunk)) = out.next().await {
                if output.len() < 4096 {
                    output.push_str(&chunk.to_string());
                }
            }
        }
        let inspected = self
            .docker
            .inspect_exec(&exec.id)
            .await
            .map_err(call(format!("inspect exec in {id}")))?;
        Ok((inspected.exit_code.unwrap_or(-1), output))
    }

    /// Removes a stopped container; a container already gone is not an error.
    pub async fn remove(&self, id: &str) -> Result<(), EngineError> {
        let options = RemoveContainerOptions {
            v: true,
            force: true,
            ..Default::default()
        };
        match self.docker.remove_container(id, Some(options)).await {
            Ok(()) => Ok(()),
            Err(e) if is_not_found(&e) => Ok(()),
            Err(e) => Err(call(format!("remove container {id}"))(e)),
        }
    }

    /// Every container the edged of `node` created, running or not.
    pub async fn list(&self, node: &str) -> Result<Vec<ManagedContainer>, EngineError> {
        let filters = HashMap::from([(
            "label".to_owned(),
            vec![
                format!("{}=true", labels::MANAGED),
                format!("{}={node}", labels::NODE),
            ],
        )]);
        let options = ListContainersOptions {
            all: true,
            filters: Some(filters),
            ..Default::default()
        };
        let listed = self
            .docker
            .list_containers(Some(options))
            .await
            .map_err(call("list containers"))?;
        Ok(listed
            .into_iter()
            .filter_map(|c| {
                let labels = c.labels.unwrap_or_default();
                let label = |k: &str| labels.get(k).cloned().unwrap_or_default();
                Some(ManagedContainer {
                    id: c.id?,
                    pod_namespace: label(labels::POD_NAMESPACE),
                    pod_name: label(labels::POD_NAME),
                    pod_uid: label(labels::POD_UID),
                    container: label(labels::CONTAINER_NAME),
                    hash: label(labels::CONTAINER_HASH),
                    restart_count: label(labels::RESTART_COUNT).parse().unwrap_or(0),
                    state: c.state.map(|s| s.to_string()).unwrap_or_default(),
                    created: c.created.unwrap_or(0),
                    sandbox: label(labels::DOCKER_TYPE) == labels::TYPE_SANDBOX,
                    sandbox_id: labels.get(labels::SANDBOX_ID).cloned(),
                })
            })
            .collect())
    }

    /// The state of a container's last run; `None` when it no longer exists.
    pub async fn inspect(&self, id: &str) -> Result<Option<ContainerRun>, EngineError> {
        let details = match self.docker.inspect_container(id, None).await {
            Ok(d) => d,
            Err(e) if is_not_found(&e) => return Ok(None),
            Err(e) => return Err(call(format!("inspect container {id}"))(e)),
        };
        let state = details.state.unwrap_or_default();
        let ip = details
            .network_settings
            .and_then(|n| {
                n.networks?
                    .into_values()
                    .find_map(|net| net.ip_address.filter(|ip| !ip.is_empty()))
            })
            .unwrap_or_default();
        Ok(Some(ContainerRun {
            running: state.running.unwrap_or(false),
            exit_code: state.exit_code.unwrap_or(0),
            started_at: state.started_at.unwrap_or_default(),
            finished_at: state.finished_at.unwrap_or_default(),
            oom_killed: state.oom_killed.unwrap_or(false),
            error: state.error.unwrap_or_default(),
            image_id: details.image.unwrap_or_default(),
            ip,
        }))
    }

    /// Every image on the engine (tagged or dangling, intermediate layers excluded).
    pub async fn list_images(&self) -> Result<Vec<ImageInfo>, EngineError> {
        let options = ListImagesOptions {
            all: false,
            ..Default::default()
        };
        let listed = self
            .docker
            .list_images(Some(options))
            .await
            .map_err(call("list images"))?;
        Ok(listed
            .into_iter()
            .map(|i| ImageInfo {
                id: i.id,
                tags: i
                    .repo_tags
                    .into_iter()
                    .filter(|t| t != "<none>:<none>")
                    .collect(),
                size: u64::try_from(i.size).unwrap_or(0),
                created: i.created,
            })
            .collect())
    }

    /// Ids of the images any container on the engine refers to, running or not, edged's or
    /// not: an image under a stopped container is still needed to start it again.
    pub async fn images_in_use(&self) -> Result<HashSet<String>, EngineError> {
        let options = ListContainersOptions {
            all: true,
            ..Default::default()
        };
        let listed = self
            .docker
            .list_containers(Some(options))
            .await
            .map_err(call("list containers"))?;
        Ok(listed.into_iter().filter_map(|c| c.image_id).collect())
    }

    /// Removes an image: each of its tags, then (when untagged) its id. Never forced, so the
    /// engine refuses (409) an image a container took in the meantime; already gone is fine.
    pub async fn remove_image(&self, image: &ImageInfo) -> Result<(), EngineError> {
        let names: Vec<&str> = if image.tags.is_empty() {
            vec![image.id.as_str()]
        } else {
            image.tags.iter().map(String::as_str).collect()
        };
        for name in names {
            let options = RemoveImageOptions {
                force: false,
                noprune: false,
                ..Default::default()
            };
            match self.docker.remove_image(name, Some(options), None).await {
                Ok(_) => {}
                Err(e) if is_not_found(&e) => {}
                Err(e) => return Err(call(format!("remove image {name} ({})", image.id))(e)),
            }
        }
        Ok(())
    }

    /// The engine's root directory (`docker info` → `DockerRootDir`): the filesystem its images
    /// live on, whose usage drives image garbage collection.
    pub async fn root_dir(&self) -> Result<PathBuf, EngineError> {
        let info = self.docker.info().await.map_err(call("engine info"))?;
        Ok(info
            .docker_root_dir
            .filter(|d| !d.is_empty())
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from("/var/lib/docker")))
    }
}
