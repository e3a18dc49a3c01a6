//! What the edged tests against the real engine share.

use std::time::Duration;

use wedge_edged::engine::Engine;

/// The image `bash .ci/setup` imports.
pub const IMAGE: &str = "wedge-test/busybox:1";
/// The pod sandbox image `bash .ci/setup` imports (a busybox pause that exits on SIGTERM).
pub const PAUSE_IMAGE: &str = "wedge-test/pause:1";
/// How long a test waits for what the engine or edged should do.
pub const WAIT: Duration = Duration::from_secs(30);

/// Which runtime a suite runs its pods on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[allow(dead_code)] // each test target uses one or both
pub enum Runtime {
    /// The Docker engine `bash .ci/setup` starts (`DOCKER_HOST` or `/var/run/docker.sock`).
    Docker,
    /// The private CRI containerd `bash .ci/setup` starts ([`cri_endpoint`]).
    Cri,
}

/// The CRI endpoint of the tests: `WEDGE_CRI_ENDPOINT`, or the containerd `.ci/setup` starts.
pub fn cri_endpoint() -> String {
    std::env::var("WEDGE_CRI_ENDPOINT")
        .unwrap_or_else(|_| "unix:///run/wedge-ci-containerd/containerd.sock".to_owned())
}

/// `containerRuntimeEndpoint` for `runtime`.
#[allow(dead_code)] // not every test target sets up a node
pub fn endpoint(runtime: Runtime) -> String {
    match runtime {
        Runtime::Docker => wedge_edged::engine::DOCKER_ENDPOINT.to_owned(),
        Runtime::Cri => cri_endpoint(),
    }
}

/// The local Docker engine, checked to hold [`IMAGE`] and [`PAUSE_IMAGE`].
#[allow(dead_code)] // not every test target uses Docker alone
pub async fn engine() -> Engine {
    engine_on(Runtime::Docker).await
}

/// The engine of `runtime`, checked to hold [`IMAGE`] (and on Docker [`PAUSE_IMAGE`]); a
/// test without either fails and says what is missing.
pub async fn engine_on(runtime: Runtime) -> Engine {
    let options = wedge_edged::engine::EngineOptions {
        pod_logs_dir: std::env::temp_dir().join("wedge-test-pod-logs"),
    };
    let engine = Engine::connect_endpoint(&endpoint(runtime), options)
        .await
        .unwrap_or_else(|e| {
            panic!("these tests need the {runtime:?} runtime (bash .ci/setup starts it): {e}")
        });
    for image in [IMAGE, PAUSE_IMAGE] {
        engine
            .ensure_image(image, "Never", &[])
            .await
            .unwrap_or_else(|e| {
                panic!("these tests need the image {image} on {runtime:?} (bash .ci/setup imports it): {e}")
            });
    }
    engine
}

/// `<prefix>-<8 random hex digits>`: names no other test (or run) uses.
pub fn unique(prefix: &str) -> String {
    format!("{prefix}-{}", &wedge_core::message::new_id()[..8])
}
