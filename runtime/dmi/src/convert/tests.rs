use serde_json::json;
use wedge_device::definition::{KubeObject, parse_yaml};

use super::*;

/// `../shared/dmi/`: the example objects and edgecore v1.23.1's own answer for them.
fn shared(file: &str) -> String {
    let path = format!("{}/../../../shared/dmi/{file}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{path}: {e} (the tests need ../shared beside the checkout)"))
}

fn objects() -> (KubeDevice, KubeModel) {
    let mut device = None;
    let mut model = None;
    for object in parse_yaml(&shared("devices.yaml")).unwrap() {
        match object {
            KubeObject::Device(d) => device = Some(d),
            KubeObject::Model(m) => model = Some(m),
        }
    }
    (device.unwrap(), model.unwrap())
}

fn unless_default(out: &mut Map<String, Value>, key: &str, value: Value) {
    let empty = match &value {
        Value::String(s) => s.is_empty(),
        Value::Bool(b) => !b,
        Value::Array(a) => a.is_empty(),
        Value::Object(o) => o.is_empty() && key != "desired",
        Value::Null => true,
        Value::Number(_) => false,
    };
    if !empty {
        out.insert(key.to_owned(), value);
    }
}

/// protobuf's JSON form (as Go's protojson writes it) of the parts a device uses.
fn customized_json(value: &Option<pb::CustomizedValue>) -> Value {
    let Some(value) = value else {
        return Value::Null;
    };
    let data: Map<String, Value> = value
        .data
        .iter()
        .map(|(k, v)| {
            let kind = v.type_url.rsplit('.').next().unwrap_or_default();
            let inner = unwrap_any(v).unwrap();
            let inner = match kind {
                "StringValue" | "BoolValue" => inner,
                _ => inner,
            };
            (k.clone(), json!({"@type": v.type_url, "value": inner}))
        })
        .collect();
    if data.is_empty() {
        return json!({});
    }
    json!({ "data": data })
}

fn device_json(device: &pb::Device) -> Value {
    let spec = device.spec.as_ref().unwrap();
    let properties: Vec<Value> = spec
        .properties
        .iter()
        .map(|p| {
            let mut out = Map::new();
            unless_default(&mut out, "name", json!(p.name));
            let desired = p.desired.as_ref().unwrap();
            let mut d = Map::new();
            unless_default(&mut d, "value", json!(desired.value));
            out.insert("desired".into(), Value::Object(d));
            let visitors = p.visitors.as_ref().unwrap();
            let mut v = Map::new();
            unless_default(&mut v, "protocolName", json!(visitors.protocol_name));
            unless_default(&mut v, "configData", customized_json(&visitors.config_data));
            out.insert("visitors".into(), Value::Object(v));
            unless_default(&mut out, "reportCycle", json!(p.report_cycle.to_string()));
            unless_default(&mut out, "collectCycle", json!(p.collect_cycle.to_string()));
            unless_default(&mut out, "reportToCloud", json!(p.report_to_cloud));
            Value::Object(out)
        })
        .collect();
    let protocol = spec.protocol.as_ref().unwrap();
    let status = device.status.as_ref().unwrap();
    json!({
        "name": device.name,
        "spec": {
            "deviceModelReference": spec.device_model_reference,
            "protocol": {
                "protocolName": protocol.protocol_name,
                "configData": customized_json(&protocol.config_data),
            },
            "properties": properties,
        },
        "status": {
            "reportToCloud": status.report_to_cloud,
            "reportCycle": status.report_cycle.to_string(),
        },
        "namespace": device.namespace,
    })
}

fn model_json(model: &pb::DeviceModel) -> Value {
    let properties: Vec<Value> = model
        .spec
        .as_ref()
        .unwrap()
        .properties
        .iter()
        .map(|p| {
            let mut out = Map::new();
            unless_default(&mut out, "name", json!(p.name));
            unless_default(&mut out, "description", json!(p.description));
            unless_default(&mut out, "type", json!(p.r#type));
            unless_default(&mut out, "accessMode", json!(p.access_mode));
            unless_default(&mut out, "minimum", json!(p.minimum));
            unless_default(&mut out, "maximum", json!(p.maximum));
            unless_default(&mut out, "unit", json!(p.unit));
            Value::Object(out)
        })
        .collect();
    json!({"name": model.name, "spec": {"properties": properties}, "namespace": model.namespace})
}

#[test]
fn the_example_converts_to_edgecores_exact_answer() {
    let (device_object, model_object) = objects();
    let reference: Value =
        serde_json::from_str(&shared("edgecore-mapperregister-response.json")).unwrap();
    let converted = device(&device_object, &model_object, &BTreeMap::new()).unwrap();
    assert_eq!(device_json(&converted), reference["deviceList"][0]);
    assert_eq!(model_json(&model(&model_object)), reference["modelList"][0]);
}

#[test]
fn desired_values_stand_in_and_every_crash_trap_is_filled() {
    let (device_object, model_object) = objects();
    let desired = BTreeMap::from([("setpoint".to_owned(), "35".to_owned())]);
    let converted = device(&device_object, &model_object, &desired).unwrap();
    let spec = converted.spec.unwrap();
    let setpoint = spec
        .properties
        .iter()
        .find(|p| p.name == "setpoint")
        .unwrap();
    assert_eq!(setpoint.desired.as_ref().unwrap().value, "35");
    for property in &spec.properties {
        assert!(property.desired.is_some());
        assert!(property.visitors.as_ref().unwrap().config_data.is_some());
    }
    assert!(spec.protocol.unwrap().config_data.is_some());
}

#[test]
fn numbers_become_floats_model_defaults_merge_and_nested_values_are_refused() {
    let text = r#"
apiVersion: devices.kubeedge.io/v1beta1
kind: DeviceModel
metadata: {name: m}
spec:
  protocolConfigData: {port: 502, host: plant}
  properties:
  - name: p
    type: INT
    visitors: {protocolName: modbus, configData: {register: HoldingRegister, offset: 1}}
---
apiVersion: devices.kubeedge.io/v1beta1
kind: Device
metadata: {name: d}
spec:
  deviceModelRef: {name: m}
  protocol: {protocolName: modbus, configData: {host: boiler, tls: true}}
  properties:
  - name: p
    visitors: {configData: {offset: 7}}
"#;
    let mut objects = parse_yaml(text).unwrap().into_iter();
    let (Some(KubeObject::Model(m)), Some(KubeObject::Device(d))) =
        (objects.next(), objects.next())
    else {
        panic!("a model and a device");
    };
    let converted = device(&d, &m, &BTreeMap::new()).unwrap();
    let spec = converted.spec.unwrap();
    let protocol = spec.protocol.unwrap().config_data.unwrap().data;
    let plain = |data: &HashMap<String, prost_types::Any>, k: &str| unwrap_any(&data[k]).unwrap();
    assert_eq!(plain(&protocol, "host"), json!("boiler"));
    assert_eq!(plain(&protocol, "port"), json!(502.0));
    assert_eq!(plain(&protocol, "tls"), json!(true));
    let visitors = spec.properties[0].visitors.clone().unwrap();
    assert_eq!(visitors.protocol_name, "modbus");
    let config = visitors.config_data.unwrap().data;
    assert_eq!(plain(&config, "offset"), json!(7.0));
    assert_eq!(plain(&config, "register"), json!("HoldingRegister"));

    let nested = text.replace("tls: true", "tls: {on: true}");
    let mut objects = parse_yaml(&nested).unwrap().into_iter();
    let (Some(KubeObject::Model(m)), Some(KubeObject::Device(d))) =
        (objects.next(), objects.next())
    else {
        panic!("a model and a device");
    };
    let error = device(&d, &m, &BTreeMap::new()).unwrap_err();
    assert_eq!(error.path, "spec.protocol.configData.tls");
    assert!(error.reason.contains("a mapping cannot be sent"), "{error}");
}
