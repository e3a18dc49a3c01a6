//! The hooks over a real Wasm host with real components built from `modules/`.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use wedge_core::Store;
use wedge_core::store::StoreOptions;
use wedge_devicetwin::definition::{DeviceDefinition, PropertyDefinition};
use wedge_devicetwin::effects::DesiredValue;
use wedge_devicetwin::hooks::{HookVerdict, ProposedChange, Proposer, TwinHooks, TwinLookup};
use wedge_tests::guests::module_bytes;
use wedge_tests::wasm_node::eventually;
use wedge_wasm::{
    DeviceState, HostServices, MapperSink, Publisher, TwinValue, WasmEngine, WasmHost, package,
};

use super::*;

const THERMO: &str = "default/thermo-1";

/// Records what mappers report.
#[derive(Default)]
struct Recorder {
    reports: Mutex<Vec<(String, String, TwinValue)>>,
}

impl Publisher for Recorder {
    fn publish(&self, _module: &str, _topic: &str, _payload: Vec<u8>) -> Result<(), String> {
        Ok(())
    }
}

impl MapperSink for Recorder {
    fn report_actual(
        &self,
        _mapper: &str,
        device: &str,
        property: &str,
        value: TwinValue,
    ) -> Result<(), String> {
        self.reports
            .lock()
            .unwrap()
            .push((device.to_owned(), property.to_owned(), value));
        Ok(())
    }

    fn report_state(&self, _m: &str, _device: &str, _state: DeviceState) -> Result<(), String> {
        Ok(())
    }
}

impl Recorder {
    fn last_report(&self, device: &str, property: &str) -> Option<TwinValue> {
        self.reports
            .lock()
            .unwrap()
            .iter()
            .rev()
            .find(|(d, p, _)| d == device && p == property)
            .map(|(_, _, v)| v.clone())
    }

    fn count(&self, device: &str, property: &str) -> usize {
        self.reports
            .lock()
            .unwrap()
            .iter()
            .filter(|(d, p, _)| d == device && p == property)
            .count()
    }
}

/// Stored twins, recording which ones were read.
#[derive(Default)]
struct Twins {
    values: Vec<(String, String, Option<String>, Option<String>)>,
    reads: Mutex<Vec<(String, String)>>,
}

impl TwinLookup for Twins {
    fn twin(&self, device: &str, key: &str) -> Option<(Option<String>, Option<String>)> {
        self.reads
            .lock()
            .unwrap()
            .push((device.to_owned(), key.to_owned()));
        self.values
            .iter()
            .find(|(d, k, _, _)| d == device && k == key)
            .map(|(_, _, e, a)| (e.clone(), a.clone()))
    }
}

struct Node {
    host: Arc<WasmHost>,
    hooks: WasmTwinHooks,
    recorder: Arc<Recorder>,
    _dir: tempfile::TempDir,
}

async fn node() -> Node {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("edgecore.db"), StoreOptions::default()).unwrap();
    store.migrate("wasm", wedge_wasm::MIGRATIONS).await.unwrap();
    let engine = WasmEngine::new(&dir.path().join("modules/cache"), &Default::default()).unwrap();
    let recorder = Arc::new(Recorder::default());
    let services = HostServices {
        publisher: recorder.clone(),
        mapper_sink: recorder.clone(),
    };
    let host = Arc::new(WasmHost::new(
        engine,
        services,
        &dir.path().join("modules"),
        store,
    ));
    Node {
        hooks: WasmTwinHooks::new(host.clone()),
        host,
        recorder,
        _dir: dir,
    }
}

fn change(key: &str, value: &str, value_type: &str) -> ProposedChange {
    ProposedChange {
        device: THERMO.into(),
        key: key.into(),
        desired: false,
        value: value.into(),
        value_type: value_type.into(),
        previous: Some("20".into()),
        proposer: Proposer::Mapper,
    }
}

async fn review(node: &Node, change: ProposedChange) -> HookVerdict {
    node.hooks.review(change, Arc::new(Twins::default())).await
}

fn mapper(node: &Node, name: &str) -> Arc<MapperModule> {
    mapper_named(&node.host, name).unwrap_or_else(|| panic!("{name} is not a deployed mapper"))
}

fn property(name: &str, value_type: &str, desired: Option<&str>) -> PropertyDefinition {
    PropertyDefinition {
        name: name.into(),
        value_type: value_type.into(),
        visitor: "{}".into(),
        collect_cycle_ms: 50,
        desired: desired.map(str::to_owned),
        report_to_cloud: true,
        ..Default::default()
    }
}

fn thermo_definition() -> DeviceDefinition {
    DeviceDefinition {
        id: THERMO.into(),
        protocol: "virtual".into(),
        protocol_config: r#"{"signal":"constant","base":21.5}"#.into(),
        properties: vec![
            property("temperature", "float", None),
            property("setpoint", "float", Some("25")),
        ],
        name: "thermo-1".into(),
        description: String::new(),
        model: "default/thermo-model".into(),
        ..DeviceDefinition::default()
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn threshold_reviews_changes() {
    let node = node().await;
    assert!(!node.hooks.reviews(THERMO), "no handler deployed yet");
    node.host.deploy(module_bytes("threshold")).await.unwrap();
    assert!(node.hooks.reviews(THERMO));

    let HookVerdict::Reject(reason) = review(&node, change("temperature", "120", "float")).await
    else {
        panic!("120 °C accepted")
    };
    assert!(
        reason.contains("temperature") && reason.contains("85"),
        "{reason}"
    );
    assert_eq!(
        review(&node, change("temperature", "21.5", "float")).await,
        HookVerdict::Accept
    );
    // Clamped: the handler's value comes back in KubeEdge's string form.
    assert_eq!(
        review(&node, change("humidity", "130", "float")).await,
        HookVerdict::Replace("100".into())
    );
    assert_eq!(
        review(&node, change("pressure", "10", "float")).await,
        HookVerdict::Replace("68.95".into())
    );
    // A replacement equal to the proposal is no replacement.
    assert_eq!(
        review(&node, change("humidity", "100", "float")).await,
        HookVerdict::Accept
    );
    // Desired values and cloud syncs are reviewed too.
    let mut cloud = change("temperature", "-50", "float");
    cloud.desired = true;
    cloud.proposer = Proposer::Cloud;
    assert!(matches!(review(&node, cloud).await, HookVerdict::Reject(_)));
    // Text is not a temperature.
    assert!(matches!(
        review(&node, change("temperature", "hot", "string")).await,
        HookVerdict::Reject(_)
    ));
}

#[test]
fn replacements_must_fit_the_twin() {
    assert_eq!(fits("68.95", "float"), Ok(()));
    assert_eq!(
        fits(&TwinValue::Float(2.5).to_kubeedge(), "int"),
        Err("the value is not int or integer")
    );
    assert_eq!(
        fits("yes", "boolean"),
        Err("the bool value must be true or false")
    );
    assert_eq!(fits("a b", "string"), Err(validate::BAD_VALUE));
    assert_eq!(fits("", "int"), Err("the value is not int or integer"));
}

#[tokio::test(flavor = "multi_thread")]
async fn no_handler_accepts_everything() {
    let node = node().await;
    assert_eq!(
        review(&node, change("temperature", "1000", "float")).await,
        HookVerdict::Accept
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn handlers_run_in_name_order_and_a_trap_fails_the_review() {
    let node = node().await;
    node.host.deploy(module_bytes("threshold")).await.unwrap();
    node.host
        .deploy(module_bytes("test-guests/panic"))
        .await
        .unwrap();
    // `test-panic` (accepts) runs before `threshold` (clamps).
    assert_eq!(
        review(&node, change("humidity", "130", "float")).await,
        HookVerdict::Replace("100".into())
    );

    let HookVerdict::Failed(text) = review(&node, change("colour", "panic", "string")).await else {
        panic!("a trapping handler did not fail the review")
    };
    assert!(
        text.contains("test-panic") && text.contains("panicked"),
        "{text}"
    );
    // While it backs off, reviews fail with the reason rather than skip it.
    let HookVerdict::Failed(text) = review(&node, change("colour", "red", "string")).await else {
        panic!("a restarting handler was skipped")
    };
    assert!(
        text.contains("test-panic") && text.contains("restarting"),
        "{text}"
    );
    tokio::time::sleep(Duration::from_millis(80)).await;
    assert_eq!(
        review(&node, change("colour", "red", "string")).await,
        HookVerdict::Accept
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn handlers_read_twins_through_the_lookup() {
    let node = node().await;
    node.host
        .deploy(module_bytes("test-guests/read-twin"))
        .await
        .unwrap();
    let twins = Arc::new(Twins {
        values: vec![(
            THERMO.into(),
            "temperature".into(),
            Some("25".into()),
            Some("20".into()),
        )],
        ..Twins::default()
    });
    let verdict = node
        .hooks
        .review(change("temperature", "21", "int"), twins.clone())
        .await;
    assert_eq!(verdict, HookVerdict::Accept);
    assert_eq!(
        *twins.reads.lock().unwrap(),
        [(THERMO.to_owned(), "temperature".to_owned())]
    );

    // The reader types values by the reviewed twin's type, by definitions, or as text.
    node.hooks.device_defined(thermo_definition());
    let reader = LookupReader {
        lookup: twins.clone(),
        definitions: node.hooks.definitions.clone(),
        device: THERMO.into(),
        key: "temperature".into(),
        value_type: "int".into(),
    };
    assert_eq!(
        reader.actual(THERMO, "temperature"),
        Some(TwinValue::Integer(20))
    );
    assert_eq!(
        reader.desired(THERMO, "temperature"),
        Some(TwinValue::Integer(25))
    );
    let other = LookupReader {
        lookup: Arc::new(Twins {
            values: vec![
                (THERMO.into(), "setpoint".into(), Some("30".into()), None),
                (THERMO.into(), "note".into(), None, Some("42".into())),
            ],
            ..Twins::default()
        }),
        definitions: node.hooks.definitions.clone(),
        device: THERMO.into(),
        key: "temperature".into(),
        value_type: "int".into(),
    };
    assert_eq!(
        other.desired(THERMO, "setpoint"),
        Some(TwinValue::Float(30.0))
    );
    assert_eq!(other.actual(THERMO, "setpoint"), None);
    assert_eq!(
        other.actual(THERMO, "note"),
        Some(TwinValue::Text("42".into()))
    );
    assert_eq!(other.actual("default/unknown", "x"), None);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_defined_device_is_driven_and_receives_desired_values() {
    let node = node().await;
    node.host
        .deploy(module_bytes("virtual-thermometer"))
        .await
        .unwrap();
    node.hooks.device_defined(thermo_definition());
    let rec = node.recorder.clone();
    eventually("a temperature report", || {
        rec.last_report(THERMO, "temperature") == Some(TwinValue::Float(21.5))
    })
    .await;
    let thermo = mapper(&node, "virtual-thermometer");
    assert_eq!(thermo.devices(), [THERMO]);
    assert_eq!(
        thermo.device_definitions().await.unwrap(),
        [to_wasm(&thermo_definition())]
    );

    node.hooks.desired(DesiredValue {
        device: THERMO.into(),
        key: "setpoint".into(),
        value: "30".into(),
        value_type: "float".into(),
    });
    eventually("the desired setpoint reported back", || {
        rec.last_report(THERMO, "setpoint") == Some(TwinValue::Float(30.0))
    })
    .await;

    // The same definition again (a resync, or a restart's hand-over) leaves the device alone:
    // re-adding would reset the mapper's state and the setpoint would follow the signal again.
    node.hooks.device_defined(thermo_definition());
    node.hooks.mapper_deployed("virtual-thermometer").await;
    let seen = rec.count(THERMO, "setpoint");
    eventually("more setpoint reports", || {
        rec.count(THERMO, "setpoint") >= seen + 3
    })
    .await;
    assert_eq!(
        rec.last_report(THERMO, "setpoint"),
        Some(TwinValue::Float(30.0))
    );

    // A changed definition replaces the device.
    let mut changed = thermo_definition();
    changed.protocol_config = r#"{"signal":"constant","base":5}"#.into();
    node.hooks.device_defined(changed.clone());
    eventually("the new definition in effect", || {
        rec.last_report(THERMO, "temperature") == Some(TwinValue::Float(5.0))
    })
    .await;

    // Removed: no longer polled.
    node.hooks.device_removed(THERMO);
    eventually("the device released", || thermo.devices().is_empty()).await;
    let polls = rec.count(THERMO, "temperature");
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(rec.count(THERMO, "temperature"), polls);
}

#[tokio::test(flavor = "multi_thread")]
async fn definitions_wait_for_their_mapper() {
    let node = node().await;
    // Defined before any mapper: kept, and so is a desired value, for the mapper to come.
    node.hooks.device_defined(thermo_definition());
    node.hooks.desired(DesiredValue {
        device: THERMO.into(),
        key: "setpoint".into(),
        value: "30".into(),
        value_type: "float".into(),
    });
    let mut modbus_device = thermo_definition();
    modbus_device.id = "default/plc-1".into();
    modbus_device.protocol = "modbus-tcp".into();
    node.hooks.device_defined(modbus_device);

    node.host
        .deploy(module_bytes("virtual-thermometer"))
        .await
        .unwrap();
    node.hooks.mapper_deployed("virtual-thermometer").await;
    // Handed over by the time mapper_deployed returns; only devices of its protocol.
    let thermo = mapper(&node, "virtual-thermometer");
    assert_eq!(thermo.devices(), [THERMO]);
    // The desired value that waited is written once the device has its mapper.
    let rec = node.recorder.clone();
    eventually("the waiting setpoint written and reported back", || {
        rec.last_report(THERMO, "setpoint") == Some(TwinValue::Float(30.0))
    })
    .await;

    // A second mapper of the same protocol is not given the devices of the first.
    let twin = repackage("virtual-thermometer", |m| m.name = "virtual-twin".into());
    node.host.deploy(twin).await.unwrap();
    node.hooks.mapper_deployed("virtual-twin").await;
    assert!(mapper(&node, "virtual-twin").devices().is_empty());

    // An upgrade keeps the devices (moved by the host) and the hand-over adds nothing twice.
    let v2 = repackage("virtual-thermometer", |m| m.version = "0.2.0".into());
    node.host.deploy(v2).await.unwrap();
    node.hooks.mapper_deployed("virtual-thermometer").await;
    let upgraded = mapper(&node, "virtual-thermometer");
    assert_eq!(upgraded.manifest().version, "0.2.0");
    assert_eq!(upgraded.devices(), [THERMO]);

    // A new protocol moves the device away from its mapper.
    let mut moved = thermo_definition();
    moved.protocol = "modbus-tcp".into();
    node.hooks.device_defined(moved);
    eventually("the device released", || upgraded.devices().is_empty()).await;
    // Removing an unknown device is harmless.
    node.hooks.device_removed("default/never-defined");
    node.hooks.mapper_deployed("no-such-mapper").await;
}

/// The packaged module with its manifest changed.
fn repackage(relative: &str, change: impl FnOnce(&mut wedge_wasm::Manifest)) -> Vec<u8> {
    let bytes = module_bytes(relative);
    let mut manifest = package::extract(&bytes).unwrap();
    change(&mut manifest);
    package::embed(&bytes, &manifest).unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_burst_of_desired_values_ends_at_the_latest_without_a_queue() {
    let node = node().await;
    node.host
        .deploy(module_bytes("virtual-thermometer"))
        .await
        .unwrap();
    node.hooks.device_defined(thermo_definition());
    node.hooks.mapper_deployed("virtual-thermometer").await;
    // 10,000 values faster than any mapper takes them: each is recorded over the previous
    // one (the hooks hold one pending value per twin), and the device ends at the last.
    for i in 1..=10_000 {
        node.hooks.desired(DesiredValue {
            device: THERMO.into(),
            key: "setpoint".into(),
            value: i.to_string(),
            value_type: "float".into(),
        });
    }
    let rec = node.recorder.clone();
    eventually("the last desired setpoint reported back", || {
        rec.last_report(THERMO, "setpoint") == Some(TwinValue::Float(10_000.0))
    })
    .await;
    let writes = mapper(&node, "virtual-thermometer").status().calls;
    assert!(
        writes < 1_000,
        "{writes} calls for 10,000 values: not coalesced"
    );
}

/// A pod's module is deployed under the pod's own name: it never replaces the operator's
/// module of the same manifest name, and its mapper cannot take a protocol another drives.
#[tokio::test(flavor = "multi_thread")]
async fn a_pods_module_never_replaces_or_shadows_the_operators() {
    let node = node().await;
    node.host.deploy(module_bytes("threshold")).await.unwrap();
    let operators = node.host.get("threshold").unwrap().status().sha256;
    let pod = wedge_wasm::PodModule {
        pod_uid: "0f3c9a".into(),
        container: "limit".into(),
    };
    let status = node
        .host
        .deploy_for_pod(module_bytes("threshold"), &pod)
        .await
        .unwrap();
    assert_eq!(status.name, "threshold.limit.0f3c9a");
    assert!(wedge_wasm::is_pod_module(&status.name));
    let names: Vec<String> = node.host.list().into_iter().map(|m| m.name).collect();
    assert_eq!(names, ["threshold", "threshold.limit.0f3c9a"]);
    assert_eq!(
        node.host.get("threshold").unwrap().status().sha256,
        operators
    );

    // The operator's mapper drives its protocol; a pod's mapper for it is refused.
    node.host
        .deploy(module_bytes("virtual-thermometer"))
        .await
        .unwrap();
    let err = node
        .host
        .deploy_for_pod(
            module_bytes("virtual-thermometer"),
            &wedge_wasm::PodModule {
                pod_uid: "77aa".into(),
                container: "thermo".into(),
            },
        )
        .await
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("already driven by module \"virtual-thermometer\""),
        "{err}"
    );
    assert!(node.host.get("virtual-thermometer.thermo.77aa").is_none());

    // Removing the pod's module leaves the operator's.
    node.host.remove("threshold.limit.0f3c9a").await.unwrap();
    assert!(node.host.get("threshold").is_some());
}
