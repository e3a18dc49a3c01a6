//! KubeEdge's `Device` and `DeviceModel` (`devices.kubeedge.io/v1beta1`), the parts Wedge uses,
//! read from the cloud's JSON or from YAML documents.
//!
//! Field names are the API's: a Device has `spec.deviceModelRef.name`, `spec.nodeName`,
//! `spec.protocol.{protocolName, configData}` and `spec.properties[]` (`name`,
//! `desired.{value, metadata}`, `visitors.{protocolName, configData}`, `collectCycle`,
//! `reportCycle`, `reportToCloud`); a DeviceModel has `spec.protocol` and `spec.properties[]`
//! (`name`, `description`, `type`, `accessMode`, `minimum`, `maximum`, `unit`). A property's
//! `pushMethod.mqtt` is read (the Wasm host pushes to it); the names of its other push methods
//! are kept so that the node can say it does not act on them. Fields Wedge does not use
//! (status, methods) are ignored, as an older client ignores newer fields.

use std::collections::BTreeSet;

use serde::Deserialize;
use serde_json::Value;

use super::DefinitionError;
use super::fields::Field;
use crate::value as validate;

/// The API group and version Wedge reads.
pub const API_VERSION: &str = "devices.kubeedge.io/v1beta1";
/// `kind` of a device.
pub const DEVICE_KIND: &str = "Device";
/// `kind` of a device model.
pub const MODEL_KIND: &str = "DeviceModel";
/// Resource type of a device in metamanager's `<ns>/<type>/<name>`.
pub const DEVICE_RESOURCE: &str = "device";
/// Resource type of a device model in metamanager's `<ns>/<type>/<name>`.
pub const MODEL_RESOURCE: &str = "devicemodel";
/// Namespace of an object whose metadata names none.
pub const DEFAULT_NAMESPACE: &str = "default";

/// One entry of a Device's `spec.properties`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KubeDeviceProperty {
    /// `name`: the twin key; also names the model property that gives its type.
    pub name: String,
    /// `desired.value`, when set and not empty.
    pub desired: Option<String>,
    /// `visitors.protocolName`.
    pub visitor_protocol: String,
    /// `visitors.configData` as compact JSON text (`{}` when none).
    pub visitor: String,
    /// `collectCycle` in milliseconds (0 = the mapper's default). Current KubeEdge mappers
    /// read it as milliseconds; values beyond `u32` saturate.
    pub collect_cycle_ms: u32,
    /// `reportCycle` in milliseconds (0 = not set), saturating like `collect_cycle_ms`.
    pub report_cycle_ms: u32,
    /// `reportToCloud`.
    pub report_to_cloud: bool,
    /// `pushMethod.mqtt`, when set.
    pub push_mqtt: Option<PushMqtt>,
    /// The other push methods set (`http`, `otel`, `dbMethod`, ...), by name.
    pub push_other: Vec<String>,
}

/// A property's `pushMethod.mqtt`: where a mapper publishes each value it collects.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PushMqtt {
    /// `address` of the broker (`tcp://host:port`), `""` when not set.
    pub address: String,
    /// `topic` (required).
    pub topic: String,
    /// `qos` (0, 1 or 2).
    pub qos: u8,
    /// `retained`.
    pub retained: bool,
}

/// A `Device`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KubeDevice {
    /// `metadata.namespace` (`default` when not set).
    pub namespace: String,
    /// `metadata.name`.
    pub name: String,
    /// `metadata.labels.description`, or `""`.
    pub description: String,
    /// `spec.deviceModelRef.name`: a model of the device's namespace.
    pub model: String,
    /// `spec.nodeName`.
    pub node_name: String,
    /// `spec.protocol.protocolName`.
    pub protocol: String,
    /// `spec.protocol.configData` as compact JSON text (`{}` when none).
    pub protocol_config: String,
    /// `spec.properties`, in their order.
    pub properties: Vec<KubeDeviceProperty>,
    /// `spec` as received (every field, also those Wedge does not read itself), for the
    /// parts of the node that hand the object on as it is: DMI sends it to KubeEdge mappers.
    pub spec: Value,
}

impl KubeDevice {
    /// `<namespace>/<name>`: the devicetwin id.
    pub fn id(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }

    /// `<namespace>/<model>`: the id of its model.
    pub fn model_id(&self) -> String {
        format!("{}/{}", self.namespace, self.model)
    }
}

/// One entry of a DeviceModel's `spec.properties`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KubeModelProperty {
    /// `name`.
    pub name: String,
    /// `description`.
    pub description: String,
    /// `type` as written: `INT`, `FLOAT`, `DOUBLE`, `STRING`, `BOOLEAN`, `BYTES` (see
    /// [`twin_type`]).
    pub kind: String,
    /// `accessMode`: `ReadWrite` or `ReadOnly` (`""` when not set).
    pub access_mode: String,
    /// `minimum`, as written.
    pub minimum: String,
    /// `maximum`, as written.
    pub maximum: String,
    /// `unit`.
    pub unit: String,
}

/// A `DeviceModel`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KubeModel {
    /// `metadata.namespace` (`default` when not set).
    pub namespace: String,
    /// `metadata.name`.
    pub name: String,
    /// `spec.protocol`: the protocol of devices that do not name one.
    pub protocol: String,
    /// `spec.properties`, in their order.
    pub properties: Vec<KubeModelProperty>,
    /// `spec` as received (see [`KubeDevice::spec`]).
    pub spec: Value,
}

impl KubeModel {
    /// `<namespace>/<name>`.
    pub fn id(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }

    /// The property called `name`.
    pub fn property(&self, name: &str) -> Option<&KubeModelProperty> {
        self.properties.iter().find(|p| p.name == name)
    }
}

/// A Device or a DeviceModel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KubeObject {
    /// A `Device`.
    Device(KubeDevice),
    /// A `DeviceModel`.
    Model(KubeModel),
}

/// The twin type of a model property type: `INT` → `int`, `FLOAT` and `DOUBLE` → `float`,
/// `BOOLEAN` → `boolean`, anything else (`STRING`, `BYTES`, unset) → `string`. Case is
/// ignored. `DOUBLE` becomes `float` because devicetwin refuses values of type `double`.
pub fn twin_type(model_type: &str) -> &'static str {
    match model_type.to_ascii_uppercase().as_str() {
        "INT" => "int",
        "FLOAT" | "DOUBLE" => "float",
        "BOOLEAN" => "boolean",
        _ => "string",
    }
}

/// `apiVersion` must be v1beta1 when given: older versions have another shape, and reading
/// them as v1beta1 would silently drop their visitors and types.
fn check_api_version(root: &Field<'_>, kind: &str) -> Result<(), DefinitionError> {
    let field = root.get("apiVersion")?;
    let version = field.string()?;
    if version.is_empty() || version == API_VERSION {
        return Ok(());
    }
    Err(field.error(format!(
        "{kind} of {version} is not supported; Wedge reads {API_VERSION}"
    )))
}

fn check_kind(root: &Field<'_>, expected: &str) -> Result<(), DefinitionError> {
    let field = root.get("kind")?;
    let kind = field.string()?;
    if kind.is_empty() || kind == expected {
        return Ok(());
    }
    Err(field.error(format!("expected {expected}, found {kind}")))
}

/// `(namespace, name)` of an object; the name must be a usable id segment.
fn identity(root: &Field<'_>) -> Result<(String, String), DefinitionError> {
    let metadata = root.get("metadata")?;
    let name_field = metadata.get("name")?;
    let name = name_field.required_string()?;
    let namespace_field = metadata.get("namespace")?;
    let mut namespace = namespace_field.string()?;
    if namespace.is_empty() {
        namespace = DEFAULT_NAMESPACE.to_owned();
    }
    for (field, value) in [(&name_field, &name), (&namespace_field, &namespace)] {
        if value.contains('/') {
            return Err(field.error(format!("{value:?} must not contain '/'")));
        }
    }
    Ok((namespace, name))
}

/// A property name: a valid twin key, not used twice in one object.
fn property_name(
    field: &Field<'_>,
    seen: &mut BTreeSet<String>,
) -> Result<String, DefinitionError> {
    let name = field.required_string()?;
    if !validate::valid_key(&name) {
        return Err(field.error(format!(
            "{name:?} is not a valid twin key: {}",
            validate::BAD_KEY
        )));
    }
    if !seen.insert(name.clone()) {
        return Err(field.error(format!("property {name:?} is listed twice")));
    }
    Ok(name)
}

fn millis(field: &Field<'_>) -> Result<u32, DefinitionError> {
    Ok(u32::try_from(field.unsigned()?).unwrap_or(u32::MAX))
}

fn device_property(
    item: &Field<'_>,
    seen: &mut BTreeSet<String>,
) -> Result<KubeDeviceProperty, DefinitionError> {
    let name = property_name(&item.get("name")?, seen)?;
    let desired_field = item.get("desired")?.get("value")?;
    // Go writes `desired.value` even when nobody set it (`"value":""`): empty means none.
    let desired = desired_field.scalar_text()?.filter(|v| !v.is_empty());
    if let Some(value) = &desired
        && !validate::valid_value(value)
    {
        return Err(desired_field.error(format!("{value:?}: {}", validate::BAD_VALUE)));
    }
    let visitors = item.get("visitors")?;
    Ok(KubeDeviceProperty {
        name,
        desired,
        visitor_protocol: visitors.get("protocolName")?.string()?,
        visitor: visitors.get("configData")?.json_text()?,
        collect_cycle_ms: millis(&item.get("collectCycle")?)?,
        report_cycle_ms: millis(&item.get("reportCycle")?)?,
        report_to_cloud: item.get("reportToCloud")?.boolean()?,
        push_mqtt: push_mqtt(&item.get("pushMethod")?.get("mqtt")?)?,
        push_other: push_other(&item.get("pushMethod")?)?,
    })
}

fn push_mqtt(field: &Field<'_>) -> Result<Option<PushMqtt>, DefinitionError> {
    if field.mapping()?.is_none() {
        return Ok(None);
    }
    let topic = field.get("topic")?.required_string()?;
    if topic.contains(['+', '#', '\0']) {
        return Err(field.get("topic")?.error(format!(
            "{topic:?} is not a topic to publish on (no wildcards)"
        )));
    }
    let qos_field = field.get("qos")?;
    let qos = u8::try_from(qos_field.unsigned()?)
        .ok()
        .filter(|q| *q <= 2)
        .ok_or_else(|| qos_field.error("expected 0, 1 or 2"))?;
    Ok(Some(PushMqtt {
        address: field.get("address")?.string()?,
        topic,
        qos,
        retained: field.get("retained")?.boolean()?,
    }))
}

fn push_other(field: &Field<'_>) -> Result<Vec<String>, DefinitionError> {
    Ok(field
        .mapping()?
        .map(|m| {
            m.iter()
                .filter(|(name, value)| *name != "mqtt" && !value.is_null())
                .map(|(name, _)| name.clone())
                .collect()
        })
        .unwrap_or_default())
}

/// `spec` of an object, `null` when it has none.
fn raw_spec(object: &Value) -> Value {
    object.get("spec").cloned().unwrap_or(Value::Null)
}

/// Reads a Device from its JSON value.
pub(crate) fn device_from_value(value: &Value) -> Result<KubeDevice, DefinitionError> {
    let root = Field::root(value);
    check_kind(&root, DEVICE_KIND)?;
    check_api_version(&root, DEVICE_KIND)?;
    let (namespace, name) = identity(&root)?;
    let description = root
        .get("metadata")?
        .get("labels")?
        .string_map_entry("description")?
        .unwrap_or_default();
    let spec = root.get("spec")?;
    let model = spec.get("deviceModelRef")?.get("name")?.required_string()?;
    let protocol = spec.get("protocol")?;
    let mut seen = BTreeSet::new();
    let properties = spec
        .get("properties")?
        .items()?
        .iter()
        .map(|item| device_property(item, &mut seen))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(KubeDevice {
        namespace,
        name,
        description,
        model,
        node_name: spec.get("nodeName")?.string()?,
        protocol: protocol.get("protocolName")?.string()?,
        protocol_config: protocol.get("configData")?.json_text()?,
        properties,
        spec: raw_spec(value),
    })
}

fn model_property(
    item: &Field<'_>,
    seen: &mut BTreeSet<String>,
) -> Result<KubeModelProperty, DefinitionError> {
    Ok(KubeModelProperty {
        name: property_name(&item.get("name")?, seen)?,
        description: item.get("description")?.string()?,
        kind: item.get("type")?.string()?,
        access_mode: item.get("accessMode")?.string()?,
        minimum: item.get("minimum")?.scalar_text()?.unwrap_or_default(),
        maximum: item.get("maximum")?.scalar_text()?.unwrap_or_default(),
        unit: item.get("unit")?.string()?,
    })
}

/// Reads a DeviceModel from its JSON value.
pub(crate) fn model_from_value(value: &Value) -> Result<KubeModel, DefinitionError> {
    let root = Field::root(value);
    check_kind(&root, MODEL_KIND)?;
    check_api_version(&root, MODEL_KIND)?;
    let (namespace, name) = identity(&root)?;
    let spec = root.get("spec")?;
    let mut seen = BTreeSet::new();
    let properties = spec
        .get("properties")?
        .items()?
        .iter()
        .map(|item| model_property(item, &mut seen))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(KubeModel {
        namespace,
        name,
        protocol: spec.get("protocol")?.string()?,
        properties,
        spec: raw_spec(value),
    })
}

/// The JSON value of a message content. The object may also arrive as a JSON string holding
/// the object's text (how some senders wrap content); both are read.
fn json_value(content: &[u8]) -> Result<Value, DefinitionError> {
    let value: Value = serde_json::from_slice(content)
        .map_err(|e| DefinitionError::new(format!("content is not JSON: {e}")))?;
    match value {
        Value::String(text) => serde_json::from_str(&text)
            .map_err(|e| DefinitionError::new(format!("content is not a JSON object: {e}"))),
        other => Ok(other),
    }
}

/// Reads a Device sent by the cloud.
pub fn parse_device_json(content: &[u8]) -> Result<KubeDevice, DefinitionError> {
    device_from_value(&json_value(content)?)
}

/// Reads a DeviceModel sent by the cloud.
pub fn parse_model_json(content: &[u8]) -> Result<KubeModel, DefinitionError> {
    model_from_value(&json_value(content)?)
}

/// Fills a missing namespace or name from the message's resource and refuses an object that
/// names another one than its resource.
fn matches_resource(namespace: &str, name: &str, value: &mut Value) -> Result<(), DefinitionError> {
    let Value::Object(object) = value else {
        return Err(DefinitionError::new("content is not a JSON object"));
    };
    let metadata = object
        .entry("metadata")
        .or_insert_with(|| Value::Object(Default::default()));
    let Value::Object(metadata) = metadata else {
        return Err(DefinitionError::new("metadata: expected a mapping"));
    };
    for (key, expected) in [("namespace", namespace), ("name", name)] {
        match metadata.get(key) {
            None | Some(Value::Null) => {
                metadata.insert(key.to_owned(), Value::String(expected.to_owned()));
            }
            Some(Value::String(s)) if s.is_empty() => {
                metadata.insert(key.to_owned(), Value::String(expected.to_owned()));
            }
            Some(Value::String(s)) if s == expected => {}
            Some(other) => {
                return Err(DefinitionError::new(format!(
                    "metadata.{key}: {other} does not match the message's resource ({expected:?})"
                )));
            }
        }
    }
    Ok(())
}

/// Reads the object of a metamanager message for `<ns>/device/<name>` or
/// `<ns>/devicemodel/<name>`; `Ok(None)` for any other resource. The resource supplies the
/// namespace and name when the object leaves them out.
pub fn object_from_message(
    resource: &str,
    content: &[u8],
) -> Result<Option<KubeObject>, DefinitionError> {
    let Ok(parsed) = wedge_core::resource::Resource::parse(resource) else {
        return Ok(None);
    };
    let Some(name) = parsed.name else {
        return Ok(None);
    };
    let kind = parsed.kind;
    if kind != DEVICE_RESOURCE && kind != MODEL_RESOURCE {
        return Ok(None);
    }
    let mut value = json_value(content)?;
    matches_resource(parsed.namespace, name, &mut value)?;
    if kind == DEVICE_RESOURCE {
        device_from_value(&value).map(|d| Some(KubeObject::Device(d)))
    } else {
        model_from_value(&value).map(|m| Some(KubeObject::Model(m)))
    }
}

/// Reads every Device and DeviceModel of a (multi-document) YAML text, in order. `kind`
/// decides what a document is; documents of other kinds are skipped with a warning, empty ones
/// silently. The first bad document fails the whole text, naming the document.
pub fn parse_yaml(text: &str) -> Result<Vec<KubeObject>, DefinitionError> {
    let mut objects = Vec::new();
    for (index, document) in serde_norway::Deserializer::from_str(text).enumerate() {
        let number = index + 1;
        let value = Value::deserialize(document).map_err(|e| {
            DefinitionError::new(format!("not valid YAML: {e}")).in_document(number)
        })?;
        if value.is_null() {
            continue;
        }
        if !value.is_object() {
            return Err(
                DefinitionError::new("expected a Kubernetes object (a mapping)")
                    .in_document(number),
            );
        }
        let kind = Field::root(&value)
            .get("kind")
            .and_then(|k| k.string())
            .map_err(|e| e.in_document(number))?;
        let object = match kind.as_str() {
            DEVICE_KIND => device_from_value(&value).map(KubeObject::Device),
            MODEL_KIND => model_from_value(&value).map(KubeObject::Model),
            other => {
                tracing::warn!(
                    document = number,
                    kind = other,
                    "YAML document ignored: only {DEVICE_KIND} and {MODEL_KIND} objects define devices"
                );
                continue;
            }
        };
        objects.push(object.map_err(|e| e.in_document(number))?);
    }
    Ok(objects)
}
