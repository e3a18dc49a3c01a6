//! RuntimeService calls: sandboxes, containers, exec, stats, runtime status.
//!
//! Each method takes what the call needs, sends it with the deadline of its kind (see
//! [`CriOptions`](crate::CriOptions)) and returns the part of the answer edged uses.

use std::time::Duration;

use crate::client::request;
use crate::v1::{
    AttachRequest, Container, ContainerConfig, ContainerFilter, ContainerStats,
    ContainerStatsFilter, ContainerStatsRequest, ContainerStatus, ContainerStatusRequest,
    CreateContainerRequest, ExecRequest, ExecSyncRequest, ExecSyncResponse,
    ListContainerStatsRequest, ListContainersRequest, ListPodSandboxRequest,
    ListPodSandboxStatsRequest, PodSandbox, PodSandboxConfig, PodSandboxFilter, PodSandboxStats,
    PodSandboxStatsFilter, PodSandboxStatus, PodSandboxStatusRequest, RemoveContainerRequest,
    RemovePodSandboxRequest, ReopenContainerLogRequest, RunPodSandboxRequest,
    StartContainerRequest, StatusRequest, StatusResponse, StopContainerRequest,
    StopPodSandboxRequest, VersionRequest, VersionResponse,
};
use crate::{CRI_VERSION, Cri, CriError};

/// Whole seconds for CRI's second-granular timeouts, rounded up so that a short non-zero
/// duration does not become 0 (which CRI reads as "none" or "at once").
fn seconds(duration: Duration) -> i64 {
    let whole = duration
        .as_secs()
        .saturating_add(u64::from(duration.subsec_nanos() > 0));
    i64::try_from(whole).unwrap_or(i64::MAX)
}

impl Cri {
    fn call_deadline(&self) -> Option<Duration> {
        Some(self.options().call_timeout)
    }

    fn query_deadline(&self) -> Option<Duration> {
        Some(self.options().query_timeout)
    }

    /// Asks the runtime's version again (connect already did once): a cheap liveness check.
    pub async fn version(&self) -> Result<VersionResponse, CriError> {
        let message = VersionRequest {
            version: CRI_VERSION.to_owned(),
        };
        let answer = self
            .runtime()
            .version(request(message, self.query_deadline()))
            .await
            .map_err(|status| CriError::from_status("Version", status))?;
        Ok(answer.into_inner())
    }

    /// The runtime's conditions (RuntimeReady, NetworkReady): what edged reports as the node's
    /// readiness. `verbose` adds the runtime's debug info map.
    pub async fn status(&self, verbose: bool) -> Result<StatusResponse, CriError> {
        let answer = self
            .runtime()
            .status(request(StatusRequest { verbose }, self.query_deadline()))
            .await
            .map_err(|status| CriError::from_status("Status", status))?;
        Ok(answer.into_inner())
    }

    /// Creates and starts a pod sandbox; returns its ID. `runtime_handler` is the
    /// RuntimeClass handler, empty for the default.
    pub async fn run_pod_sandbox(
        &self,
        config: PodSandboxConfig,
        runtime_handler: &str,
    ) -> Result<String, CriError> {
        let message = RunPodSandboxRequest {
            config: Some(config),
            runtime_handler: runtime_handler.to_owned(),
        };
        let answer = self
            .runtime()
            .run_pod_sandbox(request(message, self.call_deadline()))
            .await
            .map_err(|status| CriError::from_status("RunPodSandbox", status))?;
        Ok(answer.into_inner().pod_sandbox_id)
    }

    /// Stops a sandbox and all its containers and releases its network. Succeeds for a
    /// sandbox already stopped.
    pub async fn stop_pod_sandbox(&self, pod_sandbox_id: &str) -> Result<(), CriError> {
        let message = StopPodSandboxRequest {
            pod_sandbox_id: pod_sandbox_id.to_owned(),
        };
        self.runtime()
            .stop_pod_sandbox(request(message, self.call_deadline()))
            .await
            .map_err(|status| CriError::from_status("StopPodSandbox", status))?;
        Ok(())
    }

    /// Removes a sandbox and its containers. Succeeds for a sandbox already gone.
    pub async fn remove_pod_sandbox(&self, pod_sandbox_id: &str) -> Result<(), CriError> {
        let message = RemovePodSandboxRequest {
            pod_sandbox_id: pod_sandbox_id.to_owned(),
        };
        self.runtime()
            .remove_pod_sandbox(request(message, self.call_deadline()))
            .await
            .map_err(|status| CriError::from_status("RemovePodSandbox", status))?;
        Ok(())
    }

    /// A sandbox's state, creation time and IP. [`CriError::NotFound`] for an unknown ID.
    pub async fn pod_sandbox_status(
        &self,
        pod_sandbox_id: &str,
    ) -> Result<PodSandboxStatus, CriError> {
        let message = PodSandboxStatusRequest {
            pod_sandbox_id: pod_sandbox_id.to_owned(),
            verbose: false,
        };
        let answer = self
            .runtime()
            .pod_sandbox_status(request(message, self.query_deadline()))
            .await
            .map_err(|status| CriError::from_status("PodSandboxStatus", status))?;
        answer.into_inner().status.ok_or(CriError::Incomplete {
            what: "PodSandboxStatus",
            field: "status",
        })
    }

    /// The sandboxes matching `filter` (all of them with `None`).
    pub async fn list_pod_sandbox(
        &self,
        filter: Option<PodSandboxFilter>,
    ) -> Result<Vec<PodSandbox>, CriError> {
        let answer = self
            .runtime()
            .list_pod_sandbox(request(
                ListPodSandboxRequest { filter },
                self.query_deadline(),
            ))
            .await
            .map_err(|status| CriError::from_status("ListPodSandbox", status))?;
        Ok(answer.into_inner().items)
    }

    /// Creates a container in a sandbox; returns its ID. `sandbox_config` must be the config
    /// the sandbox was run with: containerd takes the log directory (the base of
    /// `config.log_path`) and the pod's names from it, not from its own records. Without its
    /// `metadata` containerd 1.6 dereferences nil and the whole daemon dies (every pod's
    /// runtime gone), so such a request is refused here with [`CriError::Invalid`].
    pub async fn create_container(
        &self,
        pod_sandbox_id: &str,
        config: ContainerConfig,
        sandbox_config: PodSandboxConfig,
    ) -> Result<String, CriError> {
        if sandbox_config.metadata.is_none() {
            return Err(CriError::Invalid {
                what: "CreateContainer",
                reason: "sandbox_config has no metadata (containerd 1.6 would crash)",
            });
        }
        let message = CreateContainerRequest {
            pod_sandbox_id: pod_sandbox_id.to_owned(),
            config: Some(config),
            sandbox_config: Some(sandbox_config),
        };
        let answer = self
            .runtime()
            .create_container(request(message, self.call_deadline()))
            .await
            .map_err(|status| CriError::from_status("CreateContainer", status))?;
        Ok(answer.into_inner().container_id)
    }

    /// Starts a created container.
    pub async fn start_container(&self, container_id: &str) -> Result<(), CriError> {
        let message = StartContainerRequest {
            container_id: container_id.to_owned(),
        };
        self.runtime()
            .start_container(request(message, self.call_deadline()))
            .await
            .map_err(|status| CriError::from_status("StartContainer", status))?;
        Ok(())
    }

    /// Stops a container: SIGTERM (or the image's stop signal), SIGKILL after `grace` (whole
    /// seconds, rounded up; zero kills at once). The deadline is the call timeout plus `grace`,
    /// as kubelet does, so a long grace period is not cut short by us.
    pub async fn stop_container(
        &self,
        container_id: &str,
        grace: Duration,
    ) -> Result<(), CriError> {
        let message = StopContainerRequest {
            container_id: container_id.to_owned(),
            timeout: seconds(grace),
        };
        let deadline = self.options().call_timeout.saturating_add(grace);
        self.runtime()
            .stop_container(request(message, Some(deadline)))
            .await
            .map_err(|status| CriError::from_status("StopContainer", status))?;
        Ok(())
    }

    /// Removes a container (killing it if it still runs). Succeeds for one already gone.
    pub async fn remove_container(&self, container_id: &str) -> Result<(), CriError> {
        let message = RemoveContainerRequest {
            container_id: container_id.to_owned(),
        };
        self.runtime()
            .remove_container(request(message, self.call_deadline()))
            .await
            .map_err(|status| CriError::from_status("RemoveContainer", status))?;
        Ok(())
    }

    /// The containers matching `filter` (all of them with `None`).
    pub async fn list_containers(
        &self,
        filter: Option<ContainerFilter>,
    ) -> Result<Vec<Container>, CriError> {
        let answer = self
            .runtime()
            .list_containers(request(
                ListContainersRequest { filter },
                self.query_deadline(),
            ))
            .await
            .map_err(|status| CriError::from_status("ListContainers", status))?;
        Ok(answer.into_inner().containers)
    }

    /// A container's state, times, exit code, reason and log path. [`CriError::NotFound`] for
    /// an unknown ID.
    pub async fn container_status(&self, container_id: &str) -> Result<ContainerStatus, CriError> {
        let message = ContainerStatusRequest {
            container_id: container_id.to_owned(),
            verbose: false,
        };
        let answer = self
            .runtime()
            .container_status(request(message, self.query_deadline()))
            .await
            .map_err(|status| CriError::from_status("ContainerStatus", status))?;
        answer.into_inner().status.ok_or(CriError::Incomplete {
            what: "ContainerStatus",
            field: "status",
        })
    }

    /// Runs `cmd` in a running container and returns its output and exit code (a non-zero
    /// exit is an answer, not an error). The runtime kills the command after `timeout` (whole
    /// seconds, rounded up); a zero `timeout` lets it run for ever and then, as in kubelet, the
    /// call has no deadline either. Otherwise the deadline is `timeout` plus the call timeout.
    pub async fn exec_sync(
        &self,
        container_id: &str,
        cmd: Vec<String>,
        timeout: Duration,
    ) -> Result<ExecSyncResponse, CriError> {
        let message = ExecSyncRequest {
            container_id: container_id.to_owned(),
            cmd,
            timeout: seconds(timeout),
        };
        let deadline =
            (!timeout.is_zero()).then(|| self.options().call_timeout.saturating_add(timeout));
        let answer = self
            .runtime()
            .exec_sync(request(message, deadline))
            .await
            .map_err(|status| CriError::from_status("ExecSync", status))?;
        Ok(answer.into_inner())
    }

    /// Prepares an interactive exec and returns the URL of the runtime's streaming server that
    /// serves it (SPDY or WebSocket, as for kubelet); edged proxies `kubectl exec` there.
    pub async fn exec(&self, message: ExecRequest) -> Result<String, CriError> {
        let answer = self
            .runtime()
            .exec(request(message, self.call_deadline()))
            .await
            .map_err(|status| CriError::from_status("Exec", status))?;
        Ok(answer.into_inner().url)
    }

    /// Prepares an attach to a running container; returns the streaming URL as [`Cri::exec`].
    pub async fn attach(&self, message: AttachRequest) -> Result<String, CriError> {
        let answer = self
            .runtime()
            .attach(request(message, self.call_deadline()))
            .await
            .map_err(|status| CriError::from_status("Attach", status))?;
        Ok(answer.into_inner().url)
    }

    /// Has the runtime open a new log file at the container's log path (the node renamed the
    /// current one away to rotate it). Fails for a container that is not running.
    pub async fn reopen_container_log(&self, container_id: &str) -> Result<(), CriError> {
        let message = ReopenContainerLogRequest {
            container_id: container_id.to_owned(),
        };
        self.runtime()
            .reopen_container_log(request(message, self.call_deadline()))
            .await
            .map_err(|status| CriError::from_status("ReopenContainerLog", status))?;
        Ok(())
    }

    /// CPU, memory and writable-layer usage of one container.
    pub async fn container_stats(&self, container_id: &str) -> Result<ContainerStats, CriError> {
        let message = ContainerStatsRequest {
            container_id: container_id.to_owned(),
        };
        let answer = self
            .runtime()
            .container_stats(request(message, self.query_deadline()))
            .await
            .map_err(|status| CriError::from_status("ContainerStats", status))?;
        answer.into_inner().stats.ok_or(CriError::Incomplete {
            what: "ContainerStats",
            field: "stats",
        })
    }

    /// Usage of the containers matching `filter` (all with `None`).
    pub async fn list_container_stats(
        &self,
        filter: Option<ContainerStatsFilter>,
    ) -> Result<Vec<ContainerStats>, CriError> {
        let answer = self
            .runtime()
            .list_container_stats(request(
                ListContainerStatsRequest { filter },
                self.query_deadline(),
            ))
            .await
            .map_err(|status| CriError::from_status("ListContainerStats", status))?;
        Ok(answer.into_inner().stats)
    }

    /// Usage of whole pods (sandbox, network, processes, containers). Runtimes that do not
    /// serve it answer [`tonic::Code::Unimplemented`] (see [`CriError::code`]); edged then
    /// sums [`Cri::list_container_stats`] itself.
    pub async fn list_pod_sandbox_stats(
        &self,
        filter: Option<PodSandboxStatsFilter>,
    ) -> Result<Vec<PodSandboxStats>, CriError> {
        let answer = self
            .runtime()
            .list_pod_sandbox_stats(request(
                ListPodSandboxStatsRequest { filter },
                self.query_deadline(),
            ))
            .await
            .map_err(|status| CriError::from_status("ListPodSandboxStats", status))?;
        Ok(answer.into_inner().stats)
    }
}

#[cfg(test)]
mod tests {
    use super::seconds;
    use std::time::Duration;

    #[test]
    fn seconds_round_up() {
        assert_eq!(seconds(Duration::ZERO), 0);
        assert_eq!(seconds(Duration::from_millis(1)), 1);
        assert_eq!(seconds(Duration::from_secs(30)), 30);
        assert_eq!(seconds(Duration::from_millis(30_500)), 31);
        assert_eq!(seconds(Duration::MAX), i64::MAX);
    }
}
