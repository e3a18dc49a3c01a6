//! Where a value a mapper reports goes: KubeEdge's per-property rules, applied by the host.
//!
//! A KubeEdge mapper (mapper-framework) reports a property to the node only when the Device
//! says `reportToCloud: true`, and pushes it to the property's `pushMethod` target on its
//! `reportCycle` (1 s when unset). The Wasm host is the mapper-framework of its guests, so it
//! applies the same rules to every `report.actual`: the guest reports what it read, and the
//! host decides whether the value enters the twin path and whether it is pushed, so the same
//! Device YAML behaves the same under a KubeEdge mapper and a Wasm one.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use crate::mapper::Device;
use crate::value::TwinValue;

/// mapper-framework's default `reportCycle`.
pub const DEFAULT_REPORT_CYCLE: Duration = Duration::from_secs(1);

/// A property's `pushMethod.mqtt`, as the host applies it: published on the node's broker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PushTarget {
    /// Topic to publish each value on.
    pub topic: String,
}

/// The rules of one property.
#[derive(Debug, Clone)]
pub(crate) struct PropertyRules {
    value_type: String,
    to_twin: bool,
    push: Option<PushTarget>,
    push_every: Duration,
}

/// The rules of a driven device, by property name.
#[derive(Debug, Clone, Default)]
pub(crate) struct DeviceRules {
    properties: HashMap<String, PropertyRules>,
}

/// The devices a mapper drives, with their rules; shared between the mapper's thread and the
/// host calls of its instance.
pub(crate) type DrivenDevices = Arc<RwLock<HashMap<String, Arc<DeviceRules>>>>;

impl DeviceRules {
    /// The rules `device` declares.
    pub(crate) fn of(device: &Device) -> DeviceRules {
        DeviceRules {
            properties: device
                .properties
                .iter()
                .map(|p| {
                    let push_every = match p.report_cycle_ms {
                        0 => DEFAULT_REPORT_CYCLE,
                        ms => Duration::from_millis(u64::from(ms)),
                    };
                    let rules = PropertyRules {
                        value_type: p.value_type.clone(),
                        to_twin: p.report_to_cloud,
                        push: p.push.clone(),
                        push_every,
                    };
                    (p.name.clone(), rules)
                })
                .collect(),
        }
    }
}

/// What to do with one reported value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Routing {
    /// Hand it to the twin path.
    pub(crate) to_twin: bool,
    /// Publish this payload on this topic.
    pub(crate) push: Option<(String, Vec<u8>)>,
}

/// When each property of an instance last pushed (per instance: a restarted instance may push
/// once early, which does no harm).
#[derive(Debug, Default)]
pub(crate) struct PushClock(HashMap<(String, String), Instant>);

impl PushClock {
    /// The routing of `value` reported for `device`'s `property` at `now`; an error for a
    /// property the device does not declare.
    pub(crate) fn route(
        &mut self,
        rules: &DeviceRules,
        device: &str,
        property: &str,
        value: &TwinValue,
        now: Instant,
    ) -> Result<Routing, String> {
        let Some(rules) = rules.properties.get(property) else {
            return Err(format!(
                "device {device:?} has no property {property:?} (its Device does not list it)"
            ));
        };
        let push = rules.push.as_ref().and_then(|target| {
            let key = (device.to_owned(), property.to_owned());
            let due = self
                .0
                .get(&key)
                .is_none_or(|last| now.duration_since(*last) >= rules.push_every);
            if !due {
                return None;
            }
            self.0.insert(key, now);
            Some((
                target.topic.clone(),
                push_payload(device, property, &rules.value_type, value),
            ))
        });
        Ok(Routing {
            to_twin: rules.to_twin,
            push,
        })
    }
}

/// The pushed document: the fields of mapper-framework's data model, as JSON.
fn push_payload(device: &str, property: &str, value_type: &str, value: &TwinValue) -> Vec<u8> {
    let (namespace, name) = device.split_once('/').unwrap_or(("", device));
    serde_json::json!({
        "deviceName": name,
        "namespace": namespace,
        "propertyName": property,
        "value": value.to_kubeedge(),
        "type": value_type,
        "timeStamp": std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0),
    })
    .to_string()
    .into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mapper::Property;

    fn device() -> Device {
        let property = |name: &str, to_cloud: bool, push: bool, cycle: u32| Property {
            name: name.into(),
            value_type: "float".into(),
            visitor: "{}".into(),
            collect_cycle_ms: 0,
            report_to_cloud: to_cloud,
            report_cycle_ms: cycle,
            push: push.then(|| PushTarget {
                topic: format!("plant/{name}"),
            }),
        };
        Device {
            id: "default/boiler".into(),
            protocol: "virtual".into(),
            protocol_config: "{}".into(),
            properties: vec![
                property("temperature", true, true, 500),
                property("raw", false, true, 0),
                property("quiet", false, false, 0),
            ],
        }
    }

    #[test]
    fn reports_follow_report_to_cloud_and_pushes_their_report_cycle() {
        let rules = DeviceRules::of(&device());
        let mut clock = PushClock::default();
        let t0 = Instant::now();
        let v = TwinValue::Float(21.5);
        let at = |clock: &mut PushClock, property: &str, ms: u64| {
            clock
                .route(
                    &rules,
                    "default/boiler",
                    property,
                    &v,
                    t0 + Duration::from_millis(ms),
                )
                .unwrap()
        };
        let first = at(&mut clock, "temperature", 0);
        assert!(first.to_twin);
        let (topic, payload) = first.push.unwrap();
        assert_eq!(topic, "plant/temperature");
        let doc: serde_json::Value = serde_json::from_slice(&payload).unwrap();
        assert_eq!(doc["deviceName"], "boiler");
        assert_eq!(doc["namespace"], "default");
        assert_eq!(doc["value"], "21.5");
        assert_eq!(doc["type"], "float");
        // Within its 500 ms report cycle: reported, not pushed; after it, pushed again.
        assert_eq!(at(&mut clock, "temperature", 200).push, None);
        assert!(at(&mut clock, "temperature", 600).push.is_some());
        // reportToCloud false: pushed only (default cycle 1 s), never to the twin.
        let raw = at(&mut clock, "raw", 0);
        assert!(!raw.to_twin && raw.push.is_some());
        assert_eq!(at(&mut clock, "raw", 900).push, None);
        assert!(at(&mut clock, "raw", 1000).push.is_some());
        assert_eq!(
            at(&mut clock, "quiet", 0),
            Routing {
                to_twin: false,
                push: None
            }
        );
        let err = clock
            .route(&rules, "default/boiler", "nope", &v, t0)
            .unwrap_err();
        assert!(err.contains("no property \"nope\""), "{err}");
    }
}
