//! wedge-cri against a real containerd with the CRI plugin: the private one `.ci/setup` starts
//! on /run/wedge-ci-containerd/containerd.sock (or the socket `WEDGE_CRI_ENDPOINT` names). It
//! must have the images `wedge-test/busybox:1` and `wedge-test/pause:1` (its sandbox image);
//! setup imports both. A test that cannot reach it fails, saying so; none is skipped.
//!
//! Names are unique per process and test, so these run in parallel with each other and with
//! other crates' tests on the same containerd; every sandbox is removed even when a test fails.

use std::collections::HashMap;
use std::net::IpAddr;
use std::path::Path;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use wedge_cri::logs::{LogReader, Stream};
use wedge_cri::v1::{
    AttachRequest, ContainerConfig, ContainerFilter, ContainerMetadata, ContainerState,
    ContainerStatsFilter, ExecRequest, ImageSpec, KeyValue, LinuxPodSandboxConfig,
    LinuxSandboxSecurityContext, NamespaceOption, PodSandboxConfig, PodSandboxFilter,
    PodSandboxMetadata, PodSandboxState, PodSandboxStatsFilter,
};
use wedge_cri::{Cri, CriError, CriOptions};

const DEFAULT_ENDPOINT: &str = "unix:///run/wedge-ci-containerd/containerd.sock";
const BUSYBOX: &str = "wedge-test/busybox:1";
/// The parent of every test pod's cgroup (kubelet's is /kubepods); left in place, it is shared.
const CGROUP_ROOT: &str = "/wedge-cri-test";

fn endpoint() -> String {
    std::env::var("WEDGE_CRI_ENDPOINT").unwrap_or_else(|_| DEFAULT_ENDPOINT.to_owned())
}

/// The runtime under test; a clear failure when it is not there.
async fn cri() -> Cri {
    let endpoint = endpoint();
    match Cri::connect(&endpoint).await {
        Ok(cri) => cri,
        Err(error) => panic!(
            "wedge-cri's tests need a containerd with the CRI plugin at {endpoint}, with the \
             images {BUSYBOX} and wedge-test/pause:1: {error}\n\
             Start the private one with `bash .ci/setup` (as root; log in \
             /tmp/wedge-ci-containerd.log), or set WEDGE_CRI_ENDPOINT to another CRI socket."
        ),
    }
}

fn unique(prefix: &str) -> String {
    static COUNTER: AtomicU32 = AtomicU32::new(0);
    format!(
        "{prefix}-{}-{}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    )
}

/// Stops and removes a sandbox (and so its containers) when dropped, unless the test did so
/// itself; then removes the pod's cgroup directories, which the runtime leaves (kubelet
/// manages pod cgroups itself). Drop cannot await, and the test's runtime is busy unwinding,
/// so the clean-up runs on a thread with its own runtime and connection.
struct SandboxGuard {
    id: String,
    cgroup_parent: String,
    removed: bool,
}

impl Drop for SandboxGuard {
    fn drop(&mut self) {
        if !self.removed {
            let id = self.id.clone();
            let endpoint = endpoint();
            let cleanup = std::thread::spawn(move || {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("a runtime for the clean-up");
                runtime.block_on(async {
                    match Cri::connect(&endpoint).await {
                        Ok(cri) => {
                            let _ = cri.stop_pod_sandbox(&id).await;
                            if let Err(error) = cri.remove_pod_sandbox(&id).await {
                                eprintln!("clean-up: sandbox {id} left behind: {error}");
                            }
                        }
                        Err(error) => eprintln!("clean-up: sandbox {id} left behind: {error}"),
                    }
                });
            });
            let _ = cleanup.join();
        }
        remove_cgroup(&self.cgroup_parent);
    }
}

/// rmdir of `parent` under each cgroup hierarchy (v1: one per controller; v2: the root);
/// best effort, as it only tidies.
fn remove_cgroup(parent: &str) {
    let root = Path::new("/sys/fs/cgroup");
    let relative = parent.trim_start_matches('/');
    let _ = std::fs::remove_dir(root.join(relative));
    if let Ok(hierarchies) = std::fs::read_dir(root) {
        for hierarchy in hierarchies.flatten() {
            let _ = std::fs::remove_dir(hierarchy.path().join(relative));
        }
    }
}

fn labels(pairs: &[(&str, &str)]) -> HashMap<String, String> {
    pairs
        .iter()
        .map(|(key, value)| ((*key).to_owned(), (*value).to_owned()))
        .collect()
}

fn strings(words: &[&str]) -> Vec<String> {
    words.iter().map(|word| (*word).to_owned()).collect()
}

#[tokio::test]
async fn version_and_status() {
    let cri = cri().await;
    let version = cri.connected_version();
    assert_eq!(version.runtime_name, "containerd");
    assert_eq!(version.runtime_api_version, "v1");
    assert!(
        cri.container_runtime_version().starts_with("containerd://"),
        "{}",
        cri.container_runtime_version()
    );
    assert_eq!(cri.version().await.unwrap(), *version);

    let status = cri.status(false).await.unwrap();
    let conditions = status.status.expect("a runtime status").conditions;
    for wanted in ["RuntimeReady", "NetworkReady"] {
        let condition = conditions
            .iter()
            .find(|condition| condition.r#type == wanted)
            .unwrap_or_else(|| panic!("no {wanted} in {conditions:?}"));
        assert!(condition.status, "{condition:?}");
    }
}

#[tokio::test]
async fn connect_errors_name_the_endpoint() {
    let dir = tempfile::tempdir().unwrap();

    let err = Cri::connect("tcp://127.0.0.1:10250").await.unwrap_err();
    assert!(matches!(err, CriError::BadEndpoint { .. }), "{err:?}");
    assert!(err.to_string().contains("tcp://127.0.0.1:10250"), "{err}");

    // No socket file at all.
    let missing = format!("unix://{}/missing.sock", dir.path().display());
    let err = Cri::connect(&missing).await.unwrap_err();
    assert!(matches!(err, CriError::Unreachable { .. }), "{err:?}");
    let text = err.to_string();
    assert!(
        text.contains(&missing) && text.contains("No such file"),
        "{text}"
    );

    // A socket file nobody listens on (a runtime that died).
    let stale = dir.path().join("stale.sock");
    drop(std::os::unix::net::UnixListener::bind(&stale).unwrap());
    let err = Cri::connect(stale.to_str().unwrap()).await.unwrap_err();
    assert!(matches!(err, CriError::Unreachable { .. }), "{err:?}");
    assert!(err.to_string().contains(stale.to_str().unwrap()), "{err}");
    assert!(err.to_string().contains("refused"), "{err}");

    // Something that speaks HTTP/1, as Docker's API socket does.
    let http = dir.path().join("http.sock");
    let listener = tokio::net::UnixListener::bind(&http).unwrap();
    let server = tokio::spawn(async move {
        use tokio::io::AsyncWriteExt;
        while let Ok((mut stream, _)) = listener.accept().await {
            let _ = stream
                .write_all(
                    b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
                )
                .await;
        }
    });
    let endpoint = format!("unix://{}", http.display());
    let err = Cri::connect(&endpoint).await.unwrap_err();
    assert!(matches!(err, CriError::NotCri { .. }), "{err:?}");
    assert!(err.to_string().contains(&endpoint), "{err}");
    server.abort();

    // Something that accepts and never answers: the connect deadline ends the wait.
    let silent = dir.path().join("silent.sock");
    let listener = tokio::net::UnixListener::bind(&silent).unwrap();
    let server = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((stream, _)) = listener.accept().await {
            held.push(stream);
        }
    });
    let options = CriOptions {
        connect_timeout: Duration::from_millis(300),
        ..CriOptions::default()
    };
    let started = Instant::now();
    let err = Cri::connect_with(silent.to_str().unwrap(), options)
        .await
        .unwrap_err();
    assert!(started.elapsed() < Duration::from_secs(5));
    assert!(matches!(err, CriError::NotCri { .. }), "{err:?}");
    assert!(err.to_string().contains("no answer to Version"), "{err}");
    server.abort();

    // The real sockets of this machine's Docker, when it has them (setup starts Docker): its
    // API socket speaks HTTP, its containerd has the CRI plugin disabled.
    for docker in [
        "/var/run/docker.sock",
        "/run/docker/containerd/containerd.sock",
    ] {
        if Path::new(docker).exists() {
            let err = Cri::connect(docker).await.unwrap_err();
            assert!(matches!(err, CriError::NotCri { .. }), "{docker}: {err:?}");
            assert!(err.to_string().contains(docker), "{err}");
        }
    }
}

#[tokio::test]
async fn images_without_pulling() {
    let cri = cri().await;
    let image = cri
        .image_status(BUSYBOX)
        .await
        .unwrap()
        .unwrap_or_else(|| panic!("{BUSYBOX} is not in the runtime: run `bash .ci/setup`"));
    assert!(image.id.starts_with("sha256:"), "{image:?}");
    assert!(image.size > 0);
    assert!(
        image.repo_tags.iter().any(|tag| tag.ends_with(BUSYBOX)),
        "{image:?}"
    );
    assert_eq!(cri.image_status("wedge-test/absent:0").await.unwrap(), None);

    let images = cri.list_images(None).await.unwrap();
    assert!(
        images.iter().any(|listed| listed.id == image.id),
        "{BUSYBOX} ({}) not in ListImages",
        image.id
    );

    let fs = cri.image_fs_info().await.unwrap();
    let first = fs.image_filesystems.first().expect("an image filesystem");
    assert!(first.timestamp > 0);
    assert!(!first.fs_id.as_ref().unwrap().mountpoint.is_empty());
    assert!(first.used_bytes.unwrap().value > 0);
}

#[tokio::test]
async fn unknown_ids() {
    let cri = cri().await;
    let id = unique("no-such-id");
    // What containerd 1.6 answers, which edged relies on: status and stop say NotFound (stop
    // treats it as done), remove succeeds.
    assert!(cri.container_status(&id).await.unwrap_err().is_not_found());
    assert!(
        cri.pod_sandbox_status(&id)
            .await
            .unwrap_err()
            .is_not_found()
    );
    assert!(
        cri.stop_container(&id, Duration::ZERO)
            .await
            .unwrap_err()
            .is_not_found()
    );
    assert!(cri.stop_pod_sandbox(&id).await.unwrap_err().is_not_found());
    cri.remove_container(&id).await.unwrap();
    cri.remove_pod_sandbox(&id).await.unwrap();
    // Without the sandbox's metadata containerd 1.6 crashes: the client does not send it.
    let err = cri
        .create_container(&id, ContainerConfig::default(), PodSandboxConfig::default())
        .await
        .unwrap_err();
    assert!(matches!(err, CriError::Invalid { .. }), "{err:?}");
}

#[tokio::test]
async fn pod_lifecycle() {
    let cri = cri().await;
    let name = unique("lifecycle");
    let logs = tempfile::tempdir().unwrap();
    let cgroup_parent = format!("{CGROUP_ROOT}/pod-{name}");
    let sandbox_config = PodSandboxConfig {
        metadata: Some(PodSandboxMetadata {
            name: name.clone(),
            uid: format!("uid-{name}"),
            namespace: "wedge-cri-test".into(),
            attempt: 0,
        }),
        hostname: "wedge-cri-test".into(),
        log_directory: logs.path().to_str().unwrap().into(),
        labels: labels(&[("wedge-cri-test", &name)]),
        annotations: labels(&[("wedge.test/kept", "as given")]),
        linux: Some(LinuxPodSandboxConfig {
            // ListPodSandboxStats needs one: containerd 1.6 reads the pod's cgroup.
            cgroup_parent: cgroup_parent.clone(),
            security_context: Some(LinuxSandboxSecurityContext {
                namespace_options: Some(NamespaceOption::default()),
                ..LinuxSandboxSecurityContext::default()
            }),
            ..LinuxPodSandboxConfig::default()
        }),
        ..PodSandboxConfig::default()
    };

    let started = Instant::now();
    let sandbox_id = cri
        .run_pod_sandbox(sandbox_config.clone(), "")
        .await
        .unwrap();
    let run_took = started.elapsed();
    let mut guard = SandboxGuard {
        id: sandbox_id.clone(),
        cgroup_parent,
        removed: false,
    };

    let status = cri.pod_sandbox_status(&sandbox_id).await.unwrap();
    assert_eq!(status.state(), PodSandboxState::SandboxReady);
    assert_eq!(status.metadata.as_ref().unwrap().name, name);
    assert_eq!(status.annotations, sandbox_config.annotations);
    let ip = status
        .network
        .as_ref()
        .map(|network| network.ip.as_str())
        .unwrap_or("");
    let ip: IpAddr = ip
        .parse()
        .unwrap_or_else(|_| panic!("no pod IP from the CNI bridge: {status:?}"));
    assert!(!ip.is_loopback(), "{ip}");
    if endpoint() == DEFAULT_ENDPOINT {
        assert!(
            ip.to_string().starts_with("10.88.78."),
            "{ip} is not on wedgecni0"
        );
    }

    let container_labels = labels(&[("wedge-cri-test", &name), ("container", "main")]);
    let config = ContainerConfig {
        metadata: Some(ContainerMetadata {
            name: "main".into(),
            attempt: 0,
        }),
        image: Some(ImageSpec {
            image: BUSYBOX.into(),
            ..ImageSpec::default()
        }),
        command: strings(&["sh", "-c", "echo $GREETING; sleep 30"]),
        envs: vec![KeyValue {
            key: "GREETING".into(),
            value: "hello".into(),
        }],
        labels: container_labels.clone(),
        log_path: "main/0.log".into(),
        ..ContainerConfig::default()
    };
    let started = Instant::now();
    let container_id = cri
        .create_container(&sandbox_id, config, sandbox_config.clone())
        .await
        .unwrap();
    let create_took = started.elapsed();
    let started = Instant::now();
    cri.start_container(&container_id).await.unwrap();
    let start_took = started.elapsed();
    println!(
        "RunPodSandbox {run_took:?}, CreateContainer {create_took:?}, StartContainer \
         {start_took:?}: {:?} in all",
        run_took + create_took + start_took
    );

    let listed = cri
        .list_containers(Some(ContainerFilter {
            label_selector: labels(&[("wedge-cri-test", &name)]),
            ..ContainerFilter::default()
        }))
        .await
        .unwrap();
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(listed[0].id, container_id);
    assert_eq!(listed[0].pod_sandbox_id, sandbox_id);

    let status = cri.container_status(&container_id).await.unwrap();
    assert_eq!(
        status.state(),
        ContainerState::ContainerRunning,
        "{status:?}"
    );
    assert!(status.started_at > 0);
    assert_eq!(status.labels, container_labels);
    let log_path = logs.path().join("main/0.log");
    assert_eq!(Path::new(&status.log_path), log_path);

    // The runtime writes the output as it comes; give it a moment.
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let said_hello = std::fs::File::open(&log_path).is_ok_and(|file| {
            LogReader::new(std::io::BufReader::new(file)).any(|entry| {
                entry.is_ok_and(|entry| {
                    entry.stream == Stream::Stdout && !entry.partial && entry.content == b"hello"
                })
            })
        });
        if said_hello {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no \"hello\" in {}: {:?}",
            log_path.display(),
            std::fs::read_to_string(&log_path)
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    let exec = cri
        .exec_sync(
            &container_id,
            strings(&["echo", "hi"]),
            Duration::from_secs(10),
        )
        .await
        .unwrap();
    assert_eq!((exec.stdout.as_slice(), exec.exit_code), (&b"hi\n"[..], 0));
    let exec = cri
        .exec_sync(
            &container_id,
            strings(&["sh", "-c", "echo oops >&2; exit 3"]),
            Duration::from_secs(10),
        )
        .await
        .unwrap();
    assert_eq!(
        (exec.stderr.as_slice(), exec.exit_code),
        (&b"oops\n"[..], 3)
    );

    let url = cri
        .exec(ExecRequest {
            container_id: container_id.clone(),
            cmd: strings(&["sh"]),
            stdout: true,
            ..ExecRequest::default()
        })
        .await
        .unwrap();
    assert!(url.starts_with("http://"), "{url}");
    let url = cri
        .attach(AttachRequest {
            container_id: container_id.clone(),
            stdout: true,
            ..AttachRequest::default()
        })
        .await
        .unwrap();
    assert!(url.starts_with("http://"), "{url}");

    let stats = cri.container_stats(&container_id).await.unwrap();
    assert_eq!(stats.attributes.as_ref().unwrap().id, container_id);
    let cpu = stats.cpu.as_ref().expect("cpu stats");
    assert!(
        cpu.timestamp > 0 && cpu.usage_core_nano_seconds.unwrap().value > 0,
        "{cpu:?}"
    );
    let memory = stats.memory.as_ref().expect("memory stats");
    assert!(memory.working_set_bytes.unwrap().value > 0, "{memory:?}");
    assert!(stats.writable_layer.is_some());
    let listed = cri
        .list_container_stats(Some(ContainerStatsFilter {
            pod_sandbox_id: sandbox_id.clone(),
            ..ContainerStatsFilter::default()
        }))
        .await
        .unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].attributes.as_ref().unwrap().id, container_id);
    let pods = cri
        .list_pod_sandbox_stats(Some(PodSandboxStatsFilter {
            id: sandbox_id.clone(),
            ..PodSandboxStatsFilter::default()
        }))
        .await
        .unwrap();
    assert_eq!(pods.len(), 1, "{pods:?}");
    assert_eq!(pods[0].attributes.as_ref().unwrap().id, sandbox_id);
    let linux = pods[0].linux.as_ref().expect("linux pod stats");
    assert!(linux.cpu.is_some() && linux.memory.is_some(), "{linux:?}");
    assert_eq!(linux.containers.len(), 1);

    let sandboxes = cri
        .list_pod_sandbox(Some(PodSandboxFilter {
            label_selector: labels(&[("wedge-cri-test", &name)]),
            ..PodSandboxFilter::default()
        }))
        .await
        .unwrap();
    assert_eq!(sandboxes.len(), 1);
    assert_eq!(sandboxes[0].id, sandbox_id);
    assert_eq!(sandboxes[0].state(), PodSandboxState::SandboxReady);

    // `sh` as PID 1 ignores SIGTERM: no grace period, so SIGKILL at once.
    cri.stop_container(&container_id, Duration::ZERO)
        .await
        .unwrap();
    let status = cri.container_status(&container_id).await.unwrap();
    assert_eq!(status.state(), ContainerState::ContainerExited);
    assert_eq!(status.exit_code, 137, "{status:?}");
    assert!(status.finished_at >= status.started_at);
    cri.remove_container(&container_id).await.unwrap();
    assert!(
        cri.container_status(&container_id)
            .await
            .unwrap_err()
            .is_not_found()
    );

    cri.stop_pod_sandbox(&sandbox_id).await.unwrap();
    let status = cri.pod_sandbox_status(&sandbox_id).await.unwrap();
    assert_eq!(status.state(), PodSandboxState::SandboxNotready);
    cri.remove_pod_sandbox(&sandbox_id).await.unwrap();
    guard.removed = true;
    assert!(
        cri.pod_sandbox_status(&sandbox_id)
            .await
            .unwrap_err()
            .is_not_found()
    );
}
