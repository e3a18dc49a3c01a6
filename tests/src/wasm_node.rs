//! A Wasm host in the test process, as the node builds it, with a recorder in place of MQTT
//! and the twin: the tests deploy real components from `modules/` into it and look at what
//! their guests report and publish.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use wedge_core::Store;
use wedge_core::store::StoreOptions;
use wedge_wasm::package;
use wedge_wasm::{
    Deployed, DeviceState, HandlerModule, HostServices, Manifest, MapperModule, MapperSink,
    Publisher, TwinValue, WasmEngine, WasmHost,
};

use crate::guests::module_bytes;

/// Records what guests send out.
#[derive(Default)]
pub struct Recorder {
    /// MQTT publications: topic, payload.
    pub published: Mutex<Vec<(String, Vec<u8>)>>,
    /// Reported values: device, property, value.
    pub reports: Mutex<Vec<(String, String, TwinValue)>>,
    /// Reported device states: device, state.
    pub states: Mutex<Vec<(String, DeviceState)>>,
}

impl Publisher for Recorder {
    fn publish(&self, _module: &str, topic: &str, payload: Vec<u8>) -> Result<(), String> {
        self.published
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((topic.to_owned(), payload));
        Ok(())
    }
}

impl MapperSink for Recorder {
    fn report_actual(
        &self,
        _m: &str,
        device: &str,
        property: &str,
        value: TwinValue,
    ) -> Result<(), String> {
        self.reports
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((device.to_owned(), property.to_owned(), value));
        Ok(())
    }

    fn report_state(&self, _m: &str, device: &str, state: DeviceState) -> Result<(), String> {
        self.states
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((device.to_owned(), state));
        Ok(())
    }
}

impl Recorder {
    /// The value last reported for `device`'s `property`.
    pub fn last_report(&self, device: &str, property: &str) -> Option<TwinValue> {
        self.reports
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .rev()
            .find(|(d, p, _)| d == device && p == property)
            .map(|(_, _, v)| v.clone())
    }

    /// How many values were reported for `device`'s `property`.
    pub fn report_count(&self, device: &str, property: &str) -> usize {
        self.reports
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .filter(|(d, p, _)| d == device && p == property)
            .count()
    }

    /// The state last reported for `device`.
    pub fn last_state(&self, device: &str) -> Option<DeviceState> {
        self.states
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .rev()
            .find(|(d, _)| d == device)
            .map(|(_, s)| *s)
    }
}

/// A Wasm host with its store and module directory in `dir`.
pub struct Node {
    /// The host.
    pub host: WasmHost,
    /// What its guests sent out.
    pub recorder: Arc<Recorder>,
    /// Its data directory (the store, `modules/`).
    pub dir: tempfile::TempDir,
    /// Its store.
    pub store: Store,
}

/// A node whose state lives in `dir` (reopen one to test restarts).
pub async fn node_in(dir: tempfile::TempDir) -> Node {
    let store = Store::open(&dir.path().join("edgecore.db"), StoreOptions::default())
        .expect("open the node's store");
    store
        .migrate("wasm", wedge_wasm::MIGRATIONS)
        .await
        .expect("migrate the store");
    let engine = WasmEngine::new(&dir.path().join("modules/cache"), &Default::default())
        .expect("create the Wasm engine");
    let recorder = Arc::new(Recorder::default());
    let services = HostServices {
        publisher: recorder.clone(),
        mapper_sink: recorder.clone(),
    };
    let host = WasmHost::new(engine, services, &dir.path().join("modules"), store.clone());
    Node {
        host,
        recorder,
        dir,
        store,
    }
}

/// A node in a fresh temporary directory.
pub async fn node() -> Node {
    node_in(tempfile::tempdir().expect("temporary directory")).await
}

/// The packaged module of `modules/<relative>` with its manifest changed.
pub fn repackage(relative: &str, change: impl FnOnce(&mut Manifest)) -> Vec<u8> {
    let bytes = module_bytes(relative);
    let mut manifest = package::extract(&bytes).expect("the package carries its manifest");
    change(&mut manifest);
    package::embed(&bytes, &manifest).expect("embed the changed manifest")
}

/// The deployed twin handler `name`.
pub fn handler(node: &Node, name: &str) -> Arc<HandlerModule> {
    match node.host.get(name) {
        Some(Deployed::Handler(h)) => h,
        _ => panic!("{name} is not a deployed twin handler"),
    }
}

/// The deployed mapper `name`.
pub fn mapper(node: &Node, name: &str) -> Arc<MapperModule> {
    match node.host.get(name) {
        Some(Deployed::Mapper(m)) => m,
        _ => panic!("{name} is not a deployed mapper"),
    }
}

/// Waits up to 10 s for `check` to hold; panics naming `what` otherwise.
pub async fn eventually(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if check() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("timed out waiting for {what}");
}
