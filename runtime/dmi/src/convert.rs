//! KubeEdge `Device` / `DeviceModel` objects as DMI messages, the way edgecore v1.23.1 builds
//! them, so a mapper built with KubeEdge's mapper-framework reads them as it reads edgecore's.
//!
//! What edgecore does and this copies:
//! * fields follow the CRD's JSON; `deviceModelRef.name` becomes `deviceModelReference`;
//!   `nodeName` and metadata besides name and namespace are not sent;
//! * `configData` values are wrapped one by one in protobuf wrappers (`Any`): a string in
//!   `StringValue`, a number in `FloatValue` (Go decodes every JSON number as a float64 and
//!   edgecore narrows it to float32), a boolean in `BoolValue`. A nested map or list cannot be
//!   wrapped: edgecore then fails the whole device, and so does this (naming the key);
//! * the model's `protocolConfigData` and per-property `visitors` are defaults the device's own
//!   values override key by key;
//! * `spec.stateReport` becomes `status.{reportCycle, reportToCloud}`.
//!
//! And what mapper-framework v1.23.1 needs that edgecore only sends by accident: every device
//! carries `spec.protocol` with a `configData`, every property a `desired` (maybe empty) and
//! `visitors` with a `configData` (maybe empty). A missing one makes the mapper dereference
//! nil and die.

use std::collections::{BTreeMap, HashMap};

use prost::Message as _;
use serde_json::{Map, Value};
use wedge_device::definition::{KubeDevice, KubeModel};

use crate::pb;

/// Why an object cannot be sent over DMI.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{path}: {reason}")]
pub struct ConvertError {
    /// The field at fault, as a dotted path in the object.
    pub path: String,
    /// What is wrong with it.
    pub reason: String,
}

const TYPE_URL_PREFIX: &str = "type.googleapis.com/google.protobuf.";

#[derive(Clone, PartialEq, prost::Message)]
struct StringValue {
    #[prost(string, tag = "1")]
    value: String,
}

#[derive(Clone, PartialEq, prost::Message)]
struct FloatValue {
    #[prost(float, tag = "1")]
    value: f32,
}

#[derive(Clone, PartialEq, prost::Message)]
struct BoolValue {
    #[prost(bool, tag = "1")]
    value: bool,
}

fn any(kind: &str, value: Vec<u8>) -> prost_types::Any {
    prost_types::Any {
        type_url: format!("{TYPE_URL_PREFIX}{kind}"),
        value,
    }
}

/// One `configData` value as edgecore wraps it.
fn wrap(value: &Value, path: &str) -> Result<prost_types::Any, ConvertError> {
    match value {
        Value::String(s) => Ok(any(
            "StringValue",
            StringValue { value: s.clone() }.encode_to_vec(),
        )),
        Value::Number(n) => Ok(any(
            "FloatValue",
            FloatValue {
                value: n.as_f64().unwrap_or_default() as f32,
            }
            .encode_to_vec(),
        )),
        Value::Bool(b) => Ok(any("BoolValue", BoolValue { value: *b }.encode_to_vec())),
        other => Err(ConvertError {
            path: path.to_owned(),
            reason: format!(
                "{} cannot be sent to a mapper: DMI carries strings, numbers and booleans only",
                match other {
                    Value::Null => "null",
                    Value::Array(_) => "a list",
                    _ => "a mapping",
                }
            ),
        }),
    }
}

/// The plain value of a wrapped `configData` entry (the reverse of [`wrap`]); `None` for
/// other types. For tests and logs.
pub fn unwrap_any(value: &prost_types::Any) -> Option<Value> {
    let kind = value.type_url.strip_prefix(TYPE_URL_PREFIX)?;
    let bytes = value.value.as_slice();
    match kind {
        "StringValue" => StringValue::decode(bytes)
            .ok()
            .map(|v| Value::from(v.value)),
        "FloatValue" => FloatValue::decode(bytes)
            .ok()
            .map(|v| Value::from(f64::from(v.value))),
        "BoolValue" => BoolValue::decode(bytes).ok().map(|v| Value::from(v.value)),
        _ => None,
    }
}

fn field<'a>(object: &'a Value, name: &str) -> Option<&'a Value> {
    object.get(name).filter(|v| !v.is_null())
}

fn text(object: &Value, name: &str) -> String {
    field(object, name)
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned()
}

fn number(object: &Value, name: &str) -> i64 {
    field(object, name).and_then(Value::as_i64).unwrap_or(0)
}

fn flag(object: &Value, name: &str) -> bool {
    field(object, name)
        .and_then(Value::as_bool)
        .unwrap_or(false)
}

fn mapping<'a>(object: &'a Value, name: &str) -> Option<&'a Map<String, Value>> {
    field(object, name).and_then(Value::as_object)
}

fn items<'a>(object: &'a Value, name: &str) -> &'a [Value] {
    field(object, name)
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default()
}

/// `defaults` overridden key by key by `own` (edgecore's model-then-instance merge).
fn merged(
    defaults: Option<&Map<String, Value>>,
    own: Option<&Map<String, Value>>,
) -> BTreeMap<String, Value> {
    let mut out = BTreeMap::new();
    for map in [defaults, own].into_iter().flatten() {
        for (k, v) in map {
            out.insert(k.clone(), v.clone());
        }
    }
    out
}

/// A `CustomizedValue` of `data`, every value wrapped.
fn customized(
    data: BTreeMap<String, Value>,
    path: &str,
) -> Result<pb::CustomizedValue, ConvertError> {
    let mut wrapped = HashMap::new();
    for (key, value) in data {
        let at = format!("{path}.{key}");
        wrapped.insert(key, wrap(&value, &at)?);
    }
    Ok(pb::CustomizedValue { data: wrapped })
}

fn strings(object: &Value, name: &str) -> Vec<String> {
    items(object, name)
        .iter()
        .filter_map(|v| v.as_str().map(str::to_owned))
        .collect()
}

fn push_method(push: &Value, path: &str) -> Result<pb::PushMethod, ConvertError> {
    let http = field(push, "http").map(|h| pb::PushMethodHttp {
        hostname: text(h, "hostName"),
        port: number(h, "port"),
        requestpath: text(h, "requestPath"),
        timeout: number(h, "timeout"),
    });
    let mqtt = field(push, "mqtt").map(|m| pb::PushMethodMqtt {
        address: text(m, "address"),
        topic: text(m, "topic"),
        qos: number(m, "qos") as i32,
        retained: flag(m, "retained"),
    });
    let otel = field(push, "otel").map(|o| pb::PushMethodOtel {
        endpoint_url: text(o, "endpointURL"),
    });
    let db_method = field(push, "dbMethod").map(|db| pb::DbMethod {
        influxdb2: field(db, "influxdb2").map(|i| pb::DbMethodInfluxdb2 {
            influxdb2_client_config: field(i, "influxdb2ClientConfig").map(|c| {
                pb::Influxdb2ClientConfig {
                    url: text(c, "url"),
                    org: text(c, "org"),
                    bucket: text(c, "bucket"),
                }
            }),
            influxdb2_data_config: field(i, "influxdb2DataConfig").map(|c| {
                pb::Influxdb2DataConfig {
                    measurement: text(c, "measurement"),
                    tag: mapping(c, "tag")
                        .map(|t| {
                            t.iter()
                                .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_owned())))
                                .collect()
                        })
                        .unwrap_or_default(),
                    field_key: text(c, "fieldKey"),
                }
            }),
        }),
        redis: field(db, "redis").map(|r| pb::DbMethodRedis {
            redis_client_config: field(r, "redisClientConfig").map(|c| pb::RedisClientConfig {
                addr: text(c, "addr"),
                db: number(c, "db") as i32,
                poolsize: number(c, "poolsize") as i32,
                min_idle_conns: number(c, "minIdleConns") as i32,
            }),
        }),
        tdengine: field(db, "TDEngine").map(|t| pb::DbMethodTdEngine {
            td_engine_client_config: field(t, "TDEngineClientConfig").map(|c| {
                pb::TdEngineClientConfig {
                    addr: text(c, "addr"),
                    dbname: text(c, "dbName"),
                }
            }),
        }),
        mysql: field(db, "mysql").map(|m| pb::DbMethodMySql {
            mysql_client_config: field(m, "mysqlClientConfig").map(|c| pb::MySqlClientConfig {
                addr: text(c, "addr"),
                database: text(c, "database"),
                user_name: text(c, "userName"),
            }),
        }),
    });
    let anomaly_detection = match mapping(push, "anomalyDetection") {
        Some(data) => {
            let wrapped = customized(
                merged(None, Some(data)),
                &format!("{path}.anomalyDetection"),
            )?;
            Some(pb::AnomalyDetection { data: wrapped.data })
        }
        None => None,
    };
    Ok(pb::PushMethod {
        http,
        mqtt,
        db_method,
        otel,
        anomaly_detection,
    })
}

/// The DMI form of `device`, whose model is `model`, with `desired` values (by property)
/// standing in for those of the object: the twin's desired value is what the mapper must
/// apply, and it may differ from the object's (a handler clamped it, or it came later).
pub fn device(
    device: &KubeDevice,
    model: &KubeModel,
    desired: &BTreeMap<String, String>,
) -> Result<pb::Device, ConvertError> {
    let spec = &device.spec;
    let model_spec = &model.spec;
    let protocol = field(spec, "protocol").cloned().unwrap_or(Value::Null);
    let protocol_config = customized(
        merged(
            mapping(model_spec, "protocolConfigData"),
            mapping(&protocol, "configData"),
        ),
        "spec.protocol.configData",
    )?;
    let model_properties = items(model_spec, "properties");
    let mut properties = Vec::new();
    for (index, property) in items(spec, "properties").iter().enumerate() {
        let path = format!("spec.properties[{index}]");
        let name = text(property, "name");
        let model_visitors = model_properties
            .iter()
            .find(|p| text(p, "name") == name)
            .and_then(|p| field(p, "visitors"));
        let own_visitors = field(property, "visitors").cloned().unwrap_or(Value::Null);
        let visitor_protocol = match model_visitors {
            Some(v) => text(v, "protocolName"),
            None => text(&own_visitors, "protocolName"),
        };
        let config = customized(
            merged(
                model_visitors.and_then(|v| mapping(v, "configData")),
                mapping(&own_visitors, "configData"),
            ),
            &format!("{path}.visitors.configData"),
        )?;
        let own_desired = field(property, "desired").cloned().unwrap_or(Value::Null);
        let value = desired
            .get(&name)
            .cloned()
            .unwrap_or_else(|| text(&own_desired, "value"));
        let metadata = mapping(&own_desired, "metadata")
            .map(|m| {
                m.iter()
                    .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_owned())))
                    .collect()
            })
            .unwrap_or_default();
        let push_method = match field(property, "pushMethod") {
            Some(push) => Some(push_method(push, &format!("{path}.pushMethod"))?),
            None => None,
        };
        properties.push(pb::DeviceProperty {
            name,
            desired: Some(pb::TwinProperty { value, metadata }),
            visitors: Some(pb::VisitorConfig {
                protocol_name: visitor_protocol,
                config_data: Some(config),
            }),
            report_cycle: number(property, "reportCycle"),
            collect_cycle: number(property, "collectCycle"),
            report_to_cloud: flag(property, "reportToCloud"),
            push_method,
        });
    }
    let methods = items(spec, "methods")
        .iter()
        .map(|m| pb::DeviceMethod {
            name: text(m, "name"),
            description: text(m, "description"),
            property_names: strings(m, "propertyNames"),
        })
        .collect();
    let state_report = field(spec, "stateReport").cloned().unwrap_or(Value::Null);
    Ok(pb::Device {
        name: device.name.clone(),
        namespace: device.namespace.clone(),
        spec: Some(pb::DeviceSpec {
            device_model_reference: device.model.clone(),
            protocol: Some(pb::ProtocolConfig {
                protocol_name: text(&protocol, "protocolName"),
                config_data: Some(protocol_config),
            }),
            properties,
            methods,
        }),
        status: Some(pb::DeviceStatus {
            twins: Vec::new(),
            report_to_cloud: flag(&state_report, "reportToCloud"),
            report_cycle: number(&state_report, "reportCycle"),
        }),
    })
}

/// The DMI form of `model`.
pub fn model(model: &KubeModel) -> pb::DeviceModel {
    let properties = model
        .properties
        .iter()
        .map(|p| pb::ModelProperty {
            name: p.name.clone(),
            description: p.description.clone(),
            r#type: p.kind.clone(),
            access_mode: p.access_mode.clone(),
            minimum: p.minimum.clone(),
            maximum: p.maximum.clone(),
            unit: p.unit.clone(),
        })
        .collect();
    pb::DeviceModel {
        name: model.name.clone(),
        namespace: model.namespace.clone(),
        spec: Some(pb::DeviceModelSpec {
            properties,
            commands: Vec::new(),
        }),
    }
}

#[cfg(test)]
mod tests;
