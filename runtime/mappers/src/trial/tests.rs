//! Trials of real components built from `modules/`: the threshold handler and the virtual
//! thermometer mapper.

use std::sync::{Arc, Mutex};

use wedge_devicetwin::definition::{DeviceDefinition, PropertyDefinition};
use wedge_tests::guests::module_bytes;
use wedge_tests::wasm_node::eventually;

use super::*;

const THERMO: &str = "default/thermo-1";

/// Collects what the module sends.
#[derive(Default)]
struct Seen(Mutex<Vec<TrialEvent>>);

impl Seen {
    fn sink(self: &Arc<Self>) -> EventSink {
        let seen = self.clone();
        Arc::new(move |event| seen.0.lock().unwrap().push(event))
    }

    fn reports(&self, property: &str) -> Vec<TwinValue> {
        self.0
            .lock()
            .unwrap()
            .iter()
            .filter_map(|e| match e {
                TrialEvent::Report {
                    device,
                    property: p,
                    value,
                } if device == THERMO && p == property => Some(value.clone()),
                _ => None,
            })
            .collect()
    }
}

async fn load(module: &str) -> (Trial, Arc<Seen>, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let seen = Arc::new(Seen::default());
    let trial = Trial::load(dir.path(), module_bytes(module), seen.sink())
        .await
        .unwrap();
    (trial, seen, dir)
}

fn update(json: &str) -> TrialUpdate {
    let mut many = TrialUpdate::parse_many(json).unwrap();
    assert_eq!(many.len(), 1);
    many.remove(0)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_handler_reviews_updates_as_on_a_node() {
    let (trial, _, _dir) = load("threshold").await;
    assert_eq!(trial.name(), "threshold");
    assert_eq!(trial.kind(), ModuleKind::TwinHandler);
    assert!(trial.binds(THERMO));

    let hot = update(
        r#"{"device":"default/thermo-1","property":"temperature","value":"120","type":"float"}"#,
    );
    let HookVerdict::Reject(reason) = trial.review(&hot).await.unwrap() else {
        panic!("120 °C accepted");
    };
    assert!(reason.contains("85"), "{reason}");
    let damp = update(
        r#"{"device":"default/thermo-1","property":"humidity","value":"130","type":"float","desired":true}"#,
    );
    assert_eq!(
        trial.review(&damp).await.unwrap(),
        HookVerdict::Replace("100".into())
    );
    // The log holds what init wrote.
    assert!(
        trial
            .log_lines(0)
            .iter()
            .any(|l| l.text.contains("ready with 3 rules")),
        "{:?}",
        trial.log_lines(0)
    );
    assert!(trial.status().unwrap().calls >= 2);
    trial.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn bad_updates_are_refused_before_the_handler_runs() {
    let (trial, _, _dir) = load("threshold").await;
    let not_float =
        update(r#"{"device":"d","property":"temperature","value":"hot","type":"float"}"#);
    let err = trial.review(&not_float).await.unwrap_err().to_string();
    assert!(err.contains("the value of d/temperature"), "{err}");
    let bad_type = update(r#"{"device":"d","property":"t","value":"1","type":"double"}"#);
    let err = trial.review(&bad_type).await.unwrap_err().to_string();
    assert!(err.contains("int, float, boolean or string"), "{err}");
    let err = TrialUpdate::parse_many(r#"{"device":"d","property":"t","valu":"1"}"#)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("unknown field `valu`") && err.contains("expected"),
        "{err}"
    );
    assert!(TrialUpdate::parse_many("temperature=1").is_err());
    // A list is several updates, in order.
    let two = TrialUpdate::parse_many(
        r#"[{"device":"d","property":"a","value":"1"},{"device":"d","property":"b","value":"2","source":"cloud"}]"#,
    )
    .unwrap();
    assert_eq!(two.len(), 2);
    assert_eq!(two[1].source, Some(TrialSource::Cloud));
    assert_eq!(two[0].value_type, "string");
    // Nothing reached the handler.
    assert_eq!(trial.status().unwrap().calls, 0);
    trial.stop().await;
}

fn thermo(protocol: &str) -> DeviceDefinition {
    let property = |name: &str| PropertyDefinition {
        name: name.into(),
        value_type: "float".into(),
        visitor: "{}".into(),
        collect_cycle_ms: 50,
        report_to_cloud: true,
        ..Default::default()
    };
    DeviceDefinition {
        id: THERMO.into(),
        protocol: protocol.into(),
        protocol_config: r#"{"signal":"constant","base":21.5}"#.into(),
        properties: vec![property("temperature"), property("setpoint")],
        name: "thermo-1".into(),
        ..DeviceDefinition::default()
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_mapper_polls_a_device_and_writes_desired_values() {
    let (trial, seen, _dir) = load("virtual-thermometer").await;
    assert_eq!(trial.kind(), ModuleKind::Mapper);
    trial.drive(thermo("virtual")).await.unwrap();
    eventually("a temperature report", || {
        seen.reports("temperature")
            .contains(&TwinValue::Float(21.5))
    })
    .await;
    assert_eq!(
        trial.desire(Some(THERMO), "setpoint", "30").await.unwrap(),
        [THERMO]
    );
    eventually("the written setpoint reported back", || {
        seen.reports("setpoint").contains(&TwinValue::Float(30.0))
    })
    .await;
    let err = trial.desire(Some(THERMO), "nope", "1").await.unwrap_err();
    assert!(err.to_string().contains("no property \"nope\""), "{err}");
    let err = trial.desire(None, "nope", "1").await.unwrap_err();
    assert!(
        err.to_string()
            .contains("no device driven has property \"nope\""),
        "{err}"
    );
    let err = trial.desire(None, "setpoint", "warm").await.unwrap_err();
    assert!(err.to_string().contains("(float)"), "{err}");
    trial.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_device_of_another_protocol_or_the_wrong_kind_is_named() {
    let (mapper, _, _dir) = load("virtual-thermometer").await;
    let err = mapper
        .drive(thermo("modbus-tcp"))
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("speaks protocol \"modbus-tcp\"") && err.contains("drives \"virtual\""),
        "{err}"
    );
    let any = update(r#"{"device":"d","property":"a","value":"1"}"#);
    let err = mapper.review(&any).await.unwrap_err().to_string();
    assert!(
        err.contains("is a mapper") && err.contains("--device"),
        "{err}"
    );
    mapper.stop().await;

    let (handler, _, _dir) = load("threshold").await;
    let err = handler
        .drive(thermo("virtual"))
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("is a twin-handler") && err.contains("--update"),
        "{err}"
    );
    handler.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn what_is_not_a_module_is_refused_at_load() {
    let dir = tempfile::tempdir().unwrap();
    let seen = Arc::new(Seen::default());
    let err = Trial::load(dir.path(), b"not wasm at all".to_vec(), seen.sink())
        .await
        .err()
        .expect("loaded")
        .to_string();
    assert!(
        err.contains("magic bytes") && err.contains("it is text"),
        "{err}"
    );
}
