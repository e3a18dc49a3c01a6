//! `virtual-thermometer`: a mapper (protocol `virtual`) that simulates devices.
//!
//! Each property follows a signal computed from the wall clock:
//!
//! * `constant`: `base`
//! * `sine`: `base + amplitude * sin(2π t / period_s)`
//! * `ramp`: a sawtooth from `base` up to `base + amplitude` over `period_s`
//!
//! The signal parameters come from the module's config (`init`), overridden per device by its
//! `protocol-config` JSON and per property by its `visitor` JSON (same keys, all optional).
//! Values are reported in the property's declared type (`float`, `int` rounded, `boolean`:
//! at or above `base`, `string`: decimal text).
//!
//! `write_property` stores the desired value (coerced to the property's type); from the next
//! poll on, that property reports the stored value instead of the signal, so a desired value
//! visibly reaches the mapper and comes back as the actual one.

use std::collections::{BTreeMap, HashMap};
use std::f64::consts::TAU;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::Deserialize;
use wedge_guest::{Device, DeviceState, Mapper, Property, TwinValue, ValueType, report};

/// Signal shape.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(rename_all = "lowercase")]
enum Signal {
    Sine,
    Constant,
    Ramp,
}

/// Signal parameters; every layer (module, device, property) may set any of them.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct SignalOverride {
    signal: Option<Signal>,
    base: Option<f64>,
    amplitude: Option<f64>,
    period_s: Option<f64>,
}

/// Fully resolved signal parameters.
#[derive(Debug, Clone, Copy, PartialEq)]
struct SignalParams {
    signal: Signal,
    base: f64,
    amplitude: f64,
    period_s: f64,
}

impl Default for SignalParams {
    fn default() -> Self {
        SignalParams {
            signal: Signal::Sine,
            base: 20.0,
            amplitude: 5.0,
            period_s: 60.0,
        }
    }
}

impl SignalParams {
    fn with(self, o: &SignalOverride) -> Result<SignalParams, String> {
        let p = SignalParams {
            signal: o.signal.unwrap_or(self.signal),
            base: o.base.unwrap_or(self.base),
            amplitude: o.amplitude.unwrap_or(self.amplitude),
            period_s: o.period_s.unwrap_or(self.period_s),
        };
        if !(p.period_s.is_finite() && p.period_s > 0.0) {
            return Err(format!(
                "period_s must be a positive number, got {}",
                p.period_s
            ));
        }
        if !p.base.is_finite() || !p.amplitude.is_finite() {
            return Err("base and amplitude must be finite numbers".to_string());
        }
        Ok(p)
    }

    /// The signal's value at `t` seconds since the Unix epoch.
    fn at(&self, t: f64) -> f64 {
        match self.signal {
            Signal::Constant => self.base,
            Signal::Sine => self.base + self.amplitude * (TAU * t / self.period_s).sin(),
            Signal::Ramp => {
                self.base + self.amplitude * (t.rem_euclid(self.period_s) / self.period_s)
            }
        }
    }
}

struct SimProperty {
    property: Property,
    params: SignalParams,
    /// Value set by `write_property`, reported instead of the signal.
    stored: Option<TwinValue>,
}

struct SimDevice {
    properties: BTreeMap<String, SimProperty>,
    online_reported: bool,
}

struct VirtualThermometer {
    defaults: SignalParams,
    devices: HashMap<String, SimDevice>,
}

impl Mapper for VirtualThermometer {
    fn init(config: &str) -> Result<Self, String> {
        let o: SignalOverride = wedge_guest::parse_config(config)?;
        let defaults = SignalParams::default()
            .with(&o)
            .map_err(|e| format!("invalid config: {e}"))?;
        wedge_guest::info!("virtual-thermometer ready: {defaults:?}");
        Ok(VirtualThermometer {
            defaults,
            devices: HashMap::new(),
        })
    }

    fn add_device(&mut self, device: Device) -> Result<(), String> {
        let o: SignalOverride = device.protocol_config_as()?;
        let device_params = self
            .defaults
            .with(&o)
            .map_err(|e| format!("device {}: {e}", device.id))?;
        let mut properties = BTreeMap::new();
        for p in device.properties {
            let o: SignalOverride = p.visitor_as()?;
            let params = device_params
                .with(&o)
                .map_err(|e| format!("device {} property {}: {e}", device.id, p.name))?;
            properties.insert(
                p.name.clone(),
                SimProperty {
                    property: p,
                    params,
                    stored: None,
                },
            );
        }
        wedge_guest::info!("simulating {} ({} properties)", device.id, properties.len());
        self.devices.insert(
            device.id,
            SimDevice {
                properties,
                online_reported: false,
            },
        );
        Ok(())
    }

    fn remove_device(&mut self, id: &str) {
        if self.devices.remove(id).is_some() {
            wedge_guest::info!("stopped simulating {id}");
        }
    }

    fn poll(&mut self, device: &str, properties: &[String]) -> Result<(), String> {
        let dev = self
            .devices
            .get_mut(device)
            .ok_or_else(|| format!("unknown device {device}"))?;
        let now = SystemTime::now();
        let t = now
            .duration_since(UNIX_EPOCH)
            .unwrap_or(Duration::ZERO)
            .as_secs_f64();
        let mut first_error = None;
        for (name, p) in dev.properties.iter_mut() {
            if !properties.contains(name) {
                continue;
            }
            let value = match &p.stored {
                Some(v) => v.clone(),
                None => signal_value(p.property.kind(), &p.params, t),
            };
            match report::actual(device, name, value) {
                Ok(()) => {}
                Err(e) => {
                    wedge_guest::warn!("report {device}/{name}: {e}");
                    first_error.get_or_insert(format!("report {name}: {e}"));
                }
            }
        }
        if !dev.online_reported {
            dev.online_reported = report::state(device, DeviceState::Online).is_ok();
        }
        first_error.map_or(Ok(()), Err)
    }

    fn write_property(
        &mut self,
        device: &str,
        property: &str,
        value: TwinValue,
    ) -> Result<(), String> {
        let dev = self
            .devices
            .get_mut(device)
            .ok_or_else(|| format!("unknown device {device}"))?;
        let p = dev
            .properties
            .get_mut(property)
            .ok_or_else(|| format!("device {device} has no property {property}"))?;
        let value =
            coerce(p.property.kind(), value).map_err(|e| format!("{device}/{property}: {e}"))?;
        wedge_guest::info!("{device}/{property} set to {value}");
        p.stored = Some(value);
        Ok(())
    }
}

fn signal_value(kind: ValueType, params: &SignalParams, t: f64) -> TwinValue {
    let x = params.at(t);
    match kind {
        ValueType::Boolean => TwinValue::Boolean(x >= params.base),
        // Floats are reported with a sensor-like resolution of 0.01.
        ValueType::Float => TwinValue::Float((x * 100.0).round() / 100.0),
        other => other.from_f64(x),
    }
}

/// Converts a desired value to the property's declared type, refusing lossy conversions.
fn coerce(kind: ValueType, value: TwinValue) -> Result<TwinValue, String> {
    let bad = |v: &TwinValue| {
        format!(
            "expected a value of type {}, got {} {v}",
            kind.name(),
            v.type_name()
        )
    };
    match kind {
        ValueType::Float => value
            .as_f64()
            .map(TwinValue::Float)
            .ok_or_else(|| bad(&value)),
        ValueType::Int => value
            .as_i64()
            .map(TwinValue::Integer)
            .ok_or_else(|| bad(&value)),
        ValueType::Boolean => match value {
            TwinValue::Boolean(_) => Ok(value),
            TwinValue::Integer(0) => Ok(TwinValue::Boolean(false)),
            TwinValue::Integer(1) => Ok(TwinValue::Boolean(true)),
            TwinValue::Text(ref s) if s == "true" || s == "false" => {
                Ok(TwinValue::Boolean(s == "true"))
            }
            v => Err(bad(&v)),
        },
        ValueType::Text => Ok(TwinValue::Text(value.to_string())),
    }
}

wedge_guest::export_mapper!(VirtualThermometer);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signals() {
        let p = SignalParams {
            signal: Signal::Sine,
            base: 20.0,
            amplitude: 5.0,
            period_s: 60.0,
        };
        assert!((p.at(15.0) - 25.0).abs() < 1e-9);
        assert!((p.at(45.0) - 15.0).abs() < 1e-9);
        let r = SignalParams {
            signal: Signal::Ramp,
            ..p
        };
        assert!((r.at(30.0) - 22.5).abs() < 1e-9);
        assert!((r.at(60.0) - 20.0).abs() < 1e-9);
        let c = SignalParams {
            signal: Signal::Constant,
            ..p
        };
        assert_eq!(c.at(12345.0), 20.0);
    }

    #[test]
    fn overrides_layer() {
        let o: SignalOverride = serde_json::from_str(r#"{"signal":"ramp","base":0}"#).unwrap();
        let p = SignalParams::default().with(&o).unwrap();
        assert_eq!(p.signal, Signal::Ramp);
        assert_eq!(p.base, 0.0);
        assert_eq!(p.amplitude, 5.0);
        let bad: SignalOverride = serde_json::from_str(r#"{"period_s":0}"#).unwrap();
        assert!(SignalParams::default().with(&bad).is_err());
        assert!(serde_json::from_str::<SignalOverride>(r#"{"signal":"square"}"#).is_err());
    }

    #[test]
    fn typed_values() {
        let p = SignalParams {
            signal: Signal::Constant,
            base: 20.6,
            amplitude: 0.0,
            period_s: 1.0,
        };
        assert_eq!(
            signal_value(ValueType::Int, &p, 0.0),
            TwinValue::Integer(21)
        );
        assert_eq!(
            signal_value(ValueType::Float, &p, 0.0),
            TwinValue::Float(20.6)
        );
        assert_eq!(
            signal_value(ValueType::Boolean, &p, 0.0),
            TwinValue::Boolean(true)
        );
        assert_eq!(
            coerce(ValueType::Int, TwinValue::Float(22.0)),
            Ok(TwinValue::Integer(22))
        );
        assert!(coerce(ValueType::Int, TwinValue::Float(22.5)).is_err());
        assert_eq!(
            coerce(ValueType::Float, TwinValue::Integer(22)),
            Ok(TwinValue::Float(22.0))
        );
        assert!(coerce(ValueType::Float, TwinValue::Text("x".into())).is_err());
    }
}
