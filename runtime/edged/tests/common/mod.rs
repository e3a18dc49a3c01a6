//! What the edged tests against the real engine share.

use std::time::Duration;

use wedge_edged::engine::Engine;

/// The image `bash .ci/setup` imports.
pub const IMAGE: &str = "wedge-test/busybox:1";
/// The pod sandbox image `bash .ci/setup` imports (a busybox pause that exits on SIGTERM).
pub const PAUSE_IMAGE: &str = "wedge-test/pause:1";
/// How long a test waits for what the engine or edged should do.
pub const WAIT: Duration = Duration::from_secs(30);

/// The local engine, checked to hold [`IMAGE`] and [`PAUSE_IMAGE`]; a test without either fails and says what
/// is missing.
pub async fn engine() -> Engine {
    let engine = Engine::connect().await.unwrap_or_else(|e| {
        panic!("these tests need a Docker engine (bash .ci/setup starts one): {e}")
    });
    for image in [IMAGE, PAUSE_IMAGE] {
        engine
            .docker()
            .inspect_image(image)
            .await
            .unwrap_or_else(|e| {
                panic!("these tests need the image {image} (bash .ci/setup imports it): {e}")
            });
    }
    engine
}

/// `<prefix>-<8 random hex digits>`: names no other test (or run) uses.
pub fn unique(prefix: &str) -> String {
    format!("{prefix}-{}", &wedge_core::message::new_id()[..8])
}
