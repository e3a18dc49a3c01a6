//! `http-json`: a mapper (protocol `http-json`) for devices with a REST API that answers JSON,
//! over `wedge_guest::http` (`wasi:http`).
//!
//! Device `protocol-config`: `{"base_url":"http://10.0.0.7:8080","timeout_ms":1000,
//! "headers":{"authorization":"Bearer ..."}}` — the URL's host and port must be granted by
//! the manifest's `capabilities.endpoints`.
//! Property `visitor`: `{"path":"/api/state","pointer":"/sensors/temperature"}` reads the
//! value at the JSON pointer (RFC 6901) of `GET <base_url><path>`; for writable properties
//! `"write":{"method":"PUT","path":"/api/setpoint","pointer":"/value"}` sends the value as
//! JSON, placed at `pointer` of an otherwise empty object (the whole body when the pointer is
//! empty). A property without `write` is read-only.
//!
//! `poll` makes one GET per distinct `path` among the properties due and reports each value,
//! converted to the property's type; a device that cannot be reached is reported `offline`,
//! `online` again when it answers.

pub mod json;

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use serde::Deserialize;
use serde_json::Value;
use wedge_guest::{Device, DeviceState, Mapper, Property, TwinValue, http, report};

#[derive(Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
struct ModuleConfig {
    /// Default per-request timeout, in milliseconds.
    timeout_ms: u64,
}

impl Default for ModuleConfig {
    fn default() -> Self {
        ModuleConfig { timeout_ms: 1000 }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ProtocolConfig {
    base_url: String,
    timeout_ms: Option<u64>,
    #[serde(default)]
    headers: BTreeMap<String, String>,
}

/// Where a property's value is read, and how it is written.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Visitor {
    /// Path (and query) of the GET that carries the value.
    pub path: String,
    /// JSON pointer of the value in the answer (`""`: the whole answer).
    #[serde(default)]
    pub pointer: String,
    /// How to write it; `None`: read-only.
    #[serde(default)]
    pub write: Option<WriteSpec>,
}

/// How a desired value is sent.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct WriteSpec {
    /// `PUT` (default), `POST` or `PATCH`.
    #[serde(default = "put")]
    pub method: String,
    /// Path of the request.
    pub path: String,
    /// Where the value goes in the JSON body (`""`: the body is the value itself).
    #[serde(default)]
    pub pointer: String,
}

fn put() -> String {
    "PUT".to_owned()
}

struct RestDevice {
    base_url: String,
    timeout: Duration,
    headers: Vec<(String, String)>,
    properties: HashMap<String, (Property, Visitor)>,
    reported_state: Option<DeviceState>,
}

impl RestDevice {
    fn headers(&self) -> Vec<(&str, &str)> {
        self.headers
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect()
    }

    fn set_state(&mut self, id: &str, state: DeviceState) {
        if self.reported_state != Some(state) {
            match report::state(id, state) {
                Ok(()) => self.reported_state = Some(state),
                Err(e) => wedge_guest::warn!("report state of {id}: {e}"),
            }
        }
    }

    /// `GET base_url + path`, parsed as JSON.
    fn get_json(&self, path: &str) -> Result<Value, String> {
        let url = format!("{}{path}", self.base_url);
        let reply = http::send("GET", &url, &self.headers(), &[], self.timeout)
            .map_err(|e| e.to_string())?;
        if !(200..300).contains(&reply.status) {
            return Err(format!("GET {url}: status {}", reply.status));
        }
        serde_json::from_slice(&reply.body).map_err(|e| format!("GET {url}: not JSON: {e}"))
    }
}

struct HttpJson {
    config: ModuleConfig,
    devices: HashMap<String, RestDevice>,
}

impl Mapper for HttpJson {
    fn init(config: &str) -> Result<Self, String> {
        let config: ModuleConfig = wedge_guest::parse_config(config)?;
        if config.timeout_ms == 0 {
            return Err("invalid config: timeout_ms must be positive".to_owned());
        }
        Ok(HttpJson {
            config,
            devices: HashMap::new(),
        })
    }

    fn add_device(&mut self, device: Device) -> Result<(), String> {
        let pc: ProtocolConfig = device.protocol_config_as()?;
        let base_url = pc.base_url.trim().trim_end_matches('/').to_owned();
        if !(base_url.starts_with("http://") || base_url.starts_with("https://")) {
            return Err(format!(
                "device {}: base_url {:?} must start with http:// or https://",
                device.id, pc.base_url
            ));
        }
        let timeout_ms = pc.timeout_ms.unwrap_or(self.config.timeout_ms);
        if timeout_ms == 0 {
            return Err(format!("device {}: timeout_ms must be positive", device.id));
        }
        let mut properties = HashMap::new();
        for property in device.properties {
            let visitor: Visitor = property.visitor_as()?;
            check_visitor(&visitor)
                .map_err(|e| format!("device {} property {}: {e}", device.id, property.name))?;
            properties.insert(property.name.clone(), (property, visitor));
        }
        wedge_guest::info!(
            "device {} at {base_url} with {} properties",
            device.id,
            properties.len()
        );
        self.devices.insert(
            device.id,
            RestDevice {
                base_url,
                timeout: Duration::from_millis(timeout_ms),
                headers: pc.headers.into_iter().collect(),
                properties,
                reported_state: None,
            },
        );
        Ok(())
    }

    fn remove_device(&mut self, id: &str) {
        if self.devices.remove(id).is_some() {
            wedge_guest::info!("device {id} removed");
        }
    }

    fn poll(&mut self, id: &str, properties: &[String]) -> Result<(), String> {
        let dev = self
            .devices
            .get_mut(id)
            .ok_or_else(|| format!("unknown device {id}"))?;
        // One GET per distinct path among the properties due.
        let mut by_path: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
        for name in properties {
            if let Some((_, visitor)) = dev.properties.get(name) {
                by_path.entry(&visitor.path).or_default().push(name);
            }
        }
        let mut first_error = None;
        let mut reached = by_path.is_empty();
        for (path, names) in by_path {
            let answer = match dev.get_json(path) {
                Ok(answer) => answer,
                Err(e) => {
                    wedge_guest::debug!("{id}: {e}");
                    first_error.get_or_insert(e);
                    continue;
                }
            };
            reached = true;
            for name in names {
                let (property, visitor) = &dev.properties[name];
                let outcome = json::read(&answer, &visitor.pointer)
                    .and_then(|v| json::to_twin(v, property.kind()))
                    .and_then(|v| report::actual(id, name, v).map_err(|e| format!("report: {e}")));
                if let Err(e) = outcome {
                    first_error.get_or_insert(format!("{name}: {e}"));
                }
            }
        }
        dev.set_state(
            id,
            if reached {
                DeviceState::Online
            } else {
                DeviceState::Offline
            },
        );
        first_error.map_or(Ok(()), |e| Err(format!("device {id}: {e}")))
    }

    fn write_property(&mut self, id: &str, property: &str, value: TwinValue) -> Result<(), String> {
        let dev = self
            .devices
            .get(id)
            .ok_or_else(|| format!("unknown device {id}"))?;
        let (prop, visitor) = dev
            .properties
            .get(property)
            .ok_or_else(|| format!("device {id} has no property {property}"))?;
        let write = visitor
            .write
            .as_ref()
            .ok_or_else(|| format!("{id}/{property} is read-only (its visitor has no write)"))?;
        let body = json::place(&write.pointer, json::from_twin(&value, prop.kind())?)?;
        let url = format!("{}{}", dev.base_url, write.path);
        let mut headers = dev.headers();
        headers.push(("content-type", "application/json"));
        let reply = http::send(
            &write.method,
            &url,
            &headers,
            body.to_string().as_bytes(),
            dev.timeout,
        )
        .map_err(|e| format!("{id}/{property}: {e}"))?;
        if !(200..300).contains(&reply.status) {
            return Err(format!(
                "{id}/{property}: {} {url}: status {}",
                write.method, reply.status
            ));
        }
        wedge_guest::debug!("{id}/{property} written: {value}");
        Ok(())
    }
}

fn check_visitor(visitor: &Visitor) -> Result<(), String> {
    let path_ok = |p: &str| p.starts_with('/');
    if !path_ok(&visitor.path) {
        return Err(format!("path {:?} must start with '/'", visitor.path));
    }
    json::check_pointer(&visitor.pointer)?;
    if let Some(write) = &visitor.write {
        if !path_ok(&write.path) {
            return Err(format!("write.path {:?} must start with '/'", write.path));
        }
        if !matches!(
            write.method.to_ascii_uppercase().as_str(),
            "PUT" | "POST" | "PATCH"
        ) {
            return Err(format!(
                "write.method {:?} must be PUT, POST or PATCH",
                write.method
            ));
        }
        json::check_pointer(&write.pointer)?;
    }
    Ok(())
}

wedge_guest::export_mapper!(HttpJson);
