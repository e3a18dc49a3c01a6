use std::path::Path;

use super::kube::{DEVICE_KIND, MODEL_KIND};
use super::*;

/// A model and a device as a KubeEdge user writes them (v1beta1), with a document of another
/// kind and an empty document in between.
const THERMO_YAML: &str = r#"
apiVersion: devices.kubeedge.io/v1beta1
kind: DeviceModel
metadata:
  name: thermo-model
  namespace: default
spec:
  protocol: modbus-tcp
  properties:
    - name: temperature
      description: temperature in degrees Celsius
      type: FLOAT
      accessMode: ReadOnly
      minimum: "-40"
      maximum: "85"
      unit: celsius
    - name: setpoint
      type: INT
      accessMode: ReadWrite
    - name: enabled
      type: BOOLEAN
      accessMode: ReadWrite
    - name: label
      type: STRING
      accessMode: ReadWrite
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: not-a-device
data:
  a: b
---
---
apiVersion: devices.kubeedge.io/v1beta1
kind: Device
metadata:
  name: thermo-1
  labels:
    description: boiler-room
    model: thermo-model
spec:
  deviceModelRef:
    name: thermo-model
  nodeName: edge-node-1
  protocol:
    protocolName: modbus-tcp
    configData:
      address: 192.168.1.20:502
      slave_id: 1
  properties:
    - name: temperature
      collectCycle: 1000
      reportCycle: 5000
      reportToCloud: true
      visitors:
        protocolName: modbus-tcp
        configData:
          register: HoldingRegister
          offset: 0
          limit: 1
          scale: 0.1
    - name: setpoint
      desired:
        value: "25"
        metadata:
          timestamp: "1700000000000"
      visitors:
        protocolName: modbus-tcp
        configData:
          register: HoldingRegister
          offset: 1
          limit: 1
    - name: enabled
      desired:
        value: true
      visitors:
        protocolName: modbus-tcp
        configData:
          register: Coil
          offset: 3
          limit: 1
"#;

fn thermo_definition() -> DeviceDefinition {
    let visitor = |json: &str| json.to_owned();
    DeviceDefinition {
        id: "default/thermo-1".into(),
        protocol: "modbus-tcp".into(),
        protocol_config: r#"{"address":"192.168.1.20:502","slave_id":1}"#.into(),
        properties: vec![
            PropertyDefinition {
                name: "temperature".into(),
                value_type: "float".into(),
                visitor: visitor(
                    r#"{"limit":1,"offset":0,"register":"HoldingRegister","scale":0.1}"#,
                ),
                collect_cycle_ms: 1000,
                desired: None,
                report_to_cloud: true,
                report_cycle_ms: 5000,
                ..Default::default()
            },
            PropertyDefinition {
                name: "setpoint".into(),
                value_type: "int".into(),
                visitor: visitor(r#"{"limit":1,"offset":1,"register":"HoldingRegister"}"#),
                collect_cycle_ms: 0,
                desired: Some("25".into()),
                ..Default::default()
            },
            PropertyDefinition {
                name: "enabled".into(),
                value_type: "boolean".into(),
                visitor: visitor(r#"{"limit":1,"offset":3,"register":"Coil"}"#),
                collect_cycle_ms: 0,
                desired: Some("true".into()),
                ..Default::default()
            },
        ],
        name: "thermo-1".into(),
        description: "boiler-room".into(),
        model: "default/thermo-model".into(),
        device: thermo_object(DEVICE_KIND),
        device_model: thermo_object(MODEL_KIND),
    }
}

/// The object of `kind` in [`THERMO_YAML`], as the definition carries it.
fn thermo_object<T: FromObject>(kind: &str) -> T {
    parse_yaml(THERMO_YAML)
        .unwrap()
        .into_iter()
        .find_map(|o| T::from_object(o, kind))
        .unwrap()
}

trait FromObject: Sized {
    fn from_object(object: KubeObject, kind: &str) -> Option<Self>;
}

impl FromObject for KubeDevice {
    fn from_object(object: KubeObject, kind: &str) -> Option<Self> {
        match object {
            KubeObject::Device(d) if kind == DEVICE_KIND => Some(d),
            _ => None,
        }
    }
}

impl FromObject for KubeModel {
    fn from_object(object: KubeObject, kind: &str) -> Option<Self> {
        match object {
            KubeObject::Model(m) if kind == MODEL_KIND => Some(m),
            _ => None,
        }
    }
}

fn yaml_error(text: &str) -> String {
    parse_yaml(text).unwrap_err().to_string()
}

fn device_yaml(spec: &str) -> String {
    format!(
        "apiVersion: devices.kubeedge.io/v1beta1\nkind: Device\nmetadata:\n  name: d\nspec:\n{spec}"
    )
}

#[test]
fn yaml_documents_are_read_by_kind() {
    let objects = parse_yaml(THERMO_YAML).unwrap();
    assert_eq!(
        objects.len(),
        2,
        "the ConfigMap and the empty document are skipped"
    );
    let KubeObject::Model(model) = &objects[0] else {
        panic!("first object is the model: {:?}", objects[0])
    };
    assert_eq!(model.id(), "default/thermo-model");
    assert_eq!(model.protocol, "modbus-tcp");
    assert_eq!(
        model.properties[0],
        KubeModelProperty {
            name: "temperature".into(),
            description: "temperature in degrees Celsius".into(),
            kind: "FLOAT".into(),
            access_mode: "ReadOnly".into(),
            minimum: "-40".into(),
            maximum: "85".into(),
            unit: "celsius".into(),
        }
    );
    let KubeObject::Device(device) = &objects[1] else {
        panic!("second object is the device: {:?}", objects[1])
    };
    assert_eq!(
        device.id(),
        "default/thermo-1",
        "namespace defaults to default"
    );
    assert_eq!(device.model_id(), "default/thermo-model");
    assert_eq!(device.node_name, "edge-node-1");
    assert_eq!(device.description, "boiler-room");
    assert_eq!(
        device.properties[0],
        KubeDeviceProperty {
            name: "temperature".into(),
            desired: None,
            visitor_protocol: "modbus-tcp".into(),
            visitor: r#"{"limit":1,"offset":0,"register":"HoldingRegister","scale":0.1}"#.into(),
            collect_cycle_ms: 1000,
            report_cycle_ms: 5000,
            report_to_cloud: true,
            push_mqtt: None,
            push_other: Vec::new(),
        }
    );
    // An unquoted YAML scalar is the same text as the quoted one.
    assert_eq!(device.properties[2].desired.as_deref(), Some("true"));
}

#[test]
fn catalog_resolves_types_from_the_model() {
    let mut catalog = Catalog::new();
    let mut changed = Vec::new();
    for object in parse_yaml(THERMO_YAML).unwrap() {
        changed.extend(catalog.put(object));
    }
    assert_eq!(changed, vec![thermo_definition()]);
    assert_eq!(catalog.definitions(), vec![thermo_definition()]);
    assert_eq!(
        catalog.definition("default/thermo-1"),
        Some(&thermo_definition())
    );
    assert!(catalog.waiting().is_empty());
}

#[test]
fn a_device_before_its_model_is_defined_when_the_model_arrives() {
    let objects = parse_yaml(THERMO_YAML).unwrap();
    let (KubeObject::Model(model), KubeObject::Device(device)) = (&objects[0], &objects[1]) else {
        panic!("model then device")
    };
    let mut catalog = Catalog::new();
    assert_eq!(catalog.put_device(device.clone()), None);
    assert_eq!(
        catalog.waiting(),
        vec![(
            "default/thermo-1".to_owned(),
            "default/thermo-model".to_owned()
        )]
    );
    assert!(catalog.definitions().is_empty());

    assert_eq!(catalog.put_model(model.clone()), vec![thermo_definition()]);
    // Sent again unchanged: nothing to do.
    assert_eq!(catalog.put_model(model.clone()), vec![]);
    assert_eq!(catalog.put_device(device.clone()), None);

    // A model change that retypes a property redefines its devices.
    let mut retyped = model.clone();
    retyped.properties[1].kind = "DOUBLE".into();
    let changed = catalog.put_model(retyped);
    assert_eq!(changed.len(), 1);
    assert_eq!(changed[0].properties[1].value_type, "float");
    assert_eq!(changed[0].properties[1].desired.as_deref(), Some("25"));

    // A device change is returned once.
    let mut moved = device.clone();
    moved.properties[0].collect_cycle_ms = 250;
    let defined = catalog.put_device(moved.clone()).unwrap();
    assert_eq!(defined.properties[0].collect_cycle_ms, 250);
    assert_eq!(catalog.put_device(moved), None);

    // A model of another namespace does not define it.
    let mut elsewhere = model.clone();
    elsewhere.namespace = "other".into();
    assert_eq!(catalog.put_model(elsewhere), vec![]);

    assert!(catalog.remove_model("default/thermo-model"));
    assert!(!catalog.remove_model("default/thermo-model"));
    assert_eq!(
        catalog.definitions().len(),
        1,
        "a removed model leaves its devices defined"
    );
    assert!(catalog.remove_device("default/thermo-1"));
    assert!(!catalog.remove_device("default/thermo-1"));
    assert!(catalog.definitions().is_empty());
}

#[test]
fn resolution_defaults_and_checks() {
    let model = KubeModel {
        namespace: "default".into(),
        name: "m".into(),
        protocol: "virtual".into(),
        properties: vec![
            KubeModelProperty {
                name: "count".into(),
                kind: "INT".into(),
                ..Default::default()
            },
            KubeModelProperty {
                name: "blob".into(),
                kind: "BYTES".into(),
                ..Default::default()
            },
        ],
        ..Default::default()
    };
    let device = KubeDevice {
        namespace: "default".into(),
        name: "d".into(),
        model: "m".into(),
        protocol_config: "{}".into(),
        properties: vec![
            KubeDeviceProperty {
                name: "count".into(),
                desired: Some("many".into()),
                visitor: "{}".into(),
                ..Default::default()
            },
            KubeDeviceProperty {
                name: "blob".into(),
                desired: Some("AAEC".into()),
                visitor: "{}".into(),
                ..Default::default()
            },
            KubeDeviceProperty {
                name: "extra".into(),
                visitor: "{}".into(),
                ..Default::default()
            },
        ],
        ..Default::default()
    };
    let mut catalog = Catalog::new();
    catalog.put_model(model);
    let def = catalog.put_device(device).unwrap();
    assert_eq!(
        def.protocol, "virtual",
        "the model's protocol when the device names none"
    );
    let summary: Vec<(&str, &str, Option<&str>)> = def
        .properties
        .iter()
        .map(|p| (p.name.as_str(), p.value_type.as_str(), p.desired.as_deref()))
        .collect();
    assert_eq!(
        summary,
        [
            // A desired value that does not fit the type is dropped, not stored.
            ("count", "int", None),
            ("blob", "string", Some("AAEC")),
            // Not in the model: KubeEdge's default twin type.
            ("extra", "string", None),
        ]
    );
}

#[test]
fn model_types_map_to_twin_types() {
    for (model, twin) in [
        ("INT", "int"),
        ("FLOAT", "float"),
        ("DOUBLE", "float"),
        ("BOOLEAN", "boolean"),
        ("STRING", "string"),
        ("BYTES", "string"),
        ("int", "int"),
        ("", "string"),
    ] {
        assert_eq!(twin_type(model), twin, "{model}");
    }
}

/// A Device as the cloud's device controller sends it (status and push methods included).
const CLOUD_DEVICE: &str = r#"{
  "kind": "Device",
  "apiVersion": "devices.kubeedge.io/v1beta1",
  "metadata": {
    "name": "thermo-1",
    "namespace": "default",
    "uid": "6f2c0a5e-3b7d-4f53-9d6c-1c1d9b2f6a10",
    "resourceVersion": "48213",
    "creationTimestamp": "2026-01-05T10:00:00Z",
    "labels": {"description": "boiler-room"}
  },
  "spec": {
    "deviceModelRef": {"name": "thermo-model"},
    "nodeName": "edge-node-1",
    "protocol": {"protocolName": "virtual", "configData": {"signal": "constant", "base": 21.5}},
    "properties": [
      {
        "name": "temperature",
        "desired": {"value": "", "metadata": {}},
        "visitors": {"protocolName": "virtual", "configData": {}},
        "reportCycle": 10000,
        "collectCycle": 500,
        "reportToCloud": true,
        "pushMethod": {"mqtt": {"address": "tcp://127.0.0.1:1883", "topic": "t", "qos": 0}}
      },
      {
        "name": "setpoint",
        "desired": {"value": "30", "metadata": {"timestamp": "1700000000000", "type": "int"}},
        "visitors": {"protocolName": "virtual", "configData": {"signal": "constant"}}
      }
    ]
  },
  "status": {"twins": [{"propertyName": "temperature", "reported": {"value": "21"}}]}
}"#;

const CLOUD_MODEL: &str = r#"{
  "kind": "DeviceModel",
  "apiVersion": "devices.kubeedge.io/v1beta1",
  "metadata": {"name": "thermo-model", "namespace": "default", "resourceVersion": "48100"},
  "spec": {
    "protocol": "virtual",
    "properties": [
      {"name": "temperature", "type": "FLOAT", "accessMode": "ReadOnly", "maximum": "85"},
      {"name": "setpoint", "type": "INT", "accessMode": "ReadWrite"}
    ]
  }
}"#;

#[test]
fn cloud_objects_from_metamanager_messages() {
    let device = object_from_message("default/device/thermo-1", CLOUD_DEVICE.as_bytes())
        .unwrap()
        .unwrap();
    let model = object_from_message("default/devicemodel/thermo-model", CLOUD_MODEL.as_bytes())
        .unwrap()
        .unwrap();
    let (KubeObject::Device(device_object), KubeObject::Model(model_object)) =
        (device.clone(), model.clone())
    else {
        panic!("a device and a model");
    };
    let mut catalog = Catalog::new();
    assert!(catalog.put(device).is_empty());
    let defined = catalog.put(model);
    assert_eq!(
        defined,
        vec![DeviceDefinition {
            id: "default/thermo-1".into(),
            protocol: "virtual".into(),
            protocol_config: r#"{"base":21.5,"signal":"constant"}"#.into(),
            properties: vec![
                PropertyDefinition {
                    name: "temperature".into(),
                    value_type: "float".into(),
                    visitor: "{}".into(),
                    collect_cycle_ms: 500,
                    // Go always writes `desired.value`; `""` means no desired value.
                    desired: None,
                    report_to_cloud: true,
                    report_cycle_ms: 10000,
                    push_mqtt: Some(PushMqtt {
                        address: "tcp://127.0.0.1:1883".into(),
                        topic: "t".into(),
                        qos: 0,
                        retained: false,
                    }),
                    push_other: Vec::new(),
                },
                PropertyDefinition {
                    name: "setpoint".into(),
                    value_type: "int".into(),
                    visitor: r#"{"signal":"constant"}"#.into(),
                    collect_cycle_ms: 0,
                    desired: Some("30".into()),
                    ..Default::default()
                },
            ],
            name: "thermo-1".into(),
            description: "boiler-room".into(),
            model: "default/thermo-model".into(),
            device: device_object,
            device_model: model_object,
        }]
    );

    // The same object carried as a JSON string.
    let wrapped = serde_json::to_string(CLOUD_DEVICE).unwrap();
    assert_eq!(
        parse_device_json(wrapped.as_bytes()).unwrap(),
        parse_device_json(CLOUD_DEVICE.as_bytes()).unwrap()
    );
    assert_eq!(
        parse_model_json(CLOUD_MODEL.as_bytes())
            .unwrap()
            .properties
            .len(),
        2
    );

    // Other resources are not definitions.
    assert_eq!(object_from_message("default/pod/web", b"{}").unwrap(), None);
    assert_eq!(object_from_message("default/device", b"[]").unwrap(), None);
}

#[test]
fn the_resource_names_objects_that_leave_it_out() {
    let content = br#"{"spec":{"deviceModelRef":{"name":"m"}}}"#;
    let Some(KubeObject::Device(device)) =
        object_from_message("plant-a/device/pump-7", content).unwrap()
    else {
        panic!("a device")
    };
    assert_eq!(device.id(), "plant-a/pump-7");
    assert_eq!(device.model_id(), "plant-a/m");

    let err = object_from_message(
        "plant-a/device/pump-7",
        br#"{"metadata":{"name":"pump-8"},"spec":{"deviceModelRef":{"name":"m"}}}"#,
    )
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        r#"metadata.name: "pump-8" does not match the message's resource ("pump-7")"#
    );
}

#[test]
fn bad_objects_are_refused_with_the_field_at_fault() {
    let cases: Vec<(String, &str)> = vec![
        (
            device_yaml("  protocol:\n    protocolName: virtual\n"),
            "document 1: spec.deviceModelRef.name: required",
        ),
        (
            device_yaml(
                "  deviceModelRef:\n    name: m\n  properties:\n    - name: t\n      collectCycle: fast\n",
            ),
            "document 1: spec.properties[0].collectCycle: expected an integer, found a string",
        ),
        (
            device_yaml(
                "  deviceModelRef:\n    name: m\n  properties:\n    - name: t\n      collectCycle: -5\n",
            ),
            "document 1: spec.properties[0].collectCycle: expected a non-negative integer, found -5",
        ),
        (
            device_yaml(
                "  deviceModelRef:\n    name: m\n  properties:\n    - name: t\n    - name: t\n",
            ),
            "document 1: spec.properties[1].name: property \"t\" is listed twice",
        ),
        (
            device_yaml(
                "  deviceModelRef:\n    name: m\n  properties:\n    - desired:\n        value: \"1\"\n",
            ),
            "document 1: spec.properties[0].name: required",
        ),
        (
            device_yaml("  deviceModelRef:\n    name: m\n  protocol:\n    configData: [1, 2]\n"),
            "document 1: spec.protocol.configData: expected a mapping, found a list",
        ),
        (
            device_yaml("  deviceModelRef:\n    name: m\n  properties:\n    name: t\n"),
            "document 1: spec.properties: expected a list, found a mapping",
        ),
        (
            device_yaml(
                "  deviceModelRef:\n    name: m\n  properties:\n    - name: t\n      pushMethod:\n        mqtt:\n          qos: 1\n",
            ),
            "document 1: spec.properties[0].pushMethod.mqtt.topic: required",
        ),
        (
            device_yaml(
                "  deviceModelRef:\n    name: m\n  properties:\n    - name: t\n      pushMethod:\n        mqtt:\n          topic: a/#\n",
            ),
            "document 1: spec.properties[0].pushMethod.mqtt.topic: \"a/#\" is not a topic to publish on (no wildcards)",
        ),
        (
            device_yaml(
                "  deviceModelRef:\n    name: m\n  properties:\n    - name: t\n      pushMethod:\n        mqtt:\n          topic: a\n          qos: 3\n",
            ),
            "document 1: spec.properties[0].pushMethod.mqtt.qos: expected 0, 1 or 2",
        ),
        (
            "apiVersion: devices.kubeedge.io/v1alpha2\nkind: DeviceModel\nmetadata:\n  name: m\n"
                .to_owned(),
            "document 1: apiVersion: DeviceModel of devices.kubeedge.io/v1alpha2 is not supported; Wedge reads devices.kubeedge.io/v1beta1",
        ),
        (
            "kind: DeviceModel\nmetadata:\n  namespace: x\n".to_owned(),
            "document 1: metadata.name: required",
        ),
        (
            "kind: DeviceModel\nmetadata:\n  name: a\n---\n- just\n- a list\n".to_owned(),
            "document 2: expected a Kubernetes object (a mapping)",
        ),
    ];
    for (text, expected) in cases {
        assert_eq!(yaml_error(&text), expected, "{text}");
    }
    let bad_key = yaml_error(
        "kind: DeviceModel\nmetadata:\n  name: m\nspec:\n  properties:\n    - name: has space\n",
    );
    assert!(
        bad_key.starts_with(
            "document 1: spec.properties[0].name: \"has space\" is not a valid twin key: The key of twin"
        ),
        "{bad_key}"
    );
    let bad_value = yaml_error(&device_yaml(
        "  deviceModelRef:\n    name: m\n  properties:\n    - name: t\n      desired:\n        value: \"a b\"\n",
    ));
    assert!(
        bad_value.starts_with(
            "document 1: spec.properties[0].desired.value: \"a b\": The value of twin"
        ),
        "{bad_value}"
    );
    let syntax = yaml_error("kind: DeviceModel\nmetadata:\n  name: a\n---\nkind: [unclosed\n");
    assert!(
        syntax.starts_with("document 2: not valid YAML: "),
        "{syntax}"
    );

    assert_eq!(
        parse_device_json(b"{not json")
            .unwrap_err()
            .to_string()
            .split(':')
            .next(),
        Some("content is not JSON")
    );
    assert_eq!(
        parse_device_json(br#"{"kind":"DeviceModel"}"#)
            .unwrap_err()
            .to_string(),
        "kind: expected Device, found DeviceModel"
    );
}

fn write(dir: &Path, name: &str, text: &str) {
    std::fs::write(dir.join(name), text).unwrap();
}

#[test]
fn a_directory_loads_yaml_files_in_name_order() {
    let dir = tempfile::tempdir().unwrap();
    let objects = parse_yaml(THERMO_YAML).unwrap();
    let (KubeObject::Model(model), KubeObject::Device(_)) = (&objects[0], &objects[1]) else {
        panic!("model then device")
    };
    // The device file sorts after the model file; the model text is the model document.
    let model_text = THERMO_YAML.split("---").next().unwrap();
    let device_text = THERMO_YAML.rsplit("---").next().unwrap();
    write(dir.path(), "20-devices.yml", device_text);
    write(dir.path(), "10-models.yaml", model_text);
    write(dir.path(), "30-broken.yaml", "kind: Device\nmetadata: {}\n");
    write(dir.path(), "notes.txt", "kind: [not read");
    std::fs::create_dir(dir.path().join("sub.yaml")).unwrap();

    let load = load_directory(dir.path()).unwrap();
    assert_eq!(load.objects.len(), 2);
    assert_eq!(load.objects[0], KubeObject::Model(model.clone()));
    assert!(matches!(&load.objects[1], KubeObject::Device(d) if d.id() == "default/thermo-1"));
    let errors: Vec<String> = load.errors.iter().map(|e| e.to_string()).collect();
    assert_eq!(
        errors,
        [format!(
            "{}: document 1: metadata.name: required",
            dir.path().join("30-broken.yaml").display()
        )]
    );

    let mut catalog = Catalog::new();
    let defined: Vec<DeviceDefinition> = load
        .objects
        .into_iter()
        .flat_map(|o| catalog.put(o))
        .collect();
    assert_eq!(defined, vec![thermo_definition()]);

    let missing = dir.path().join("nope");
    let err = load_directory(&missing).unwrap_err().to_string();
    assert!(
        err.starts_with(&format!(
            "{}: cannot read the directory: ",
            missing.display()
        )),
        "{err}"
    );
    let err = load_file(&dir.path().join("nope.yaml"))
        .unwrap_err()
        .to_string();
    assert!(err.contains("nope.yaml: cannot read: "), "{err}");
}
