//! The SDK's own types for the contract's vocabulary (`wedge:device/types`).

use std::fmt;
use std::time::Duration;

use serde::de::DeserializeOwned;

/// A typed twin value.
///
/// On the wire KubeEdge carries values as strings plus a declared type; the host converts both
/// ways, so a module only ever sees typed values.
///
/// ```
/// use wedge_guest::TwinValue;
///
/// let v = TwinValue::from(21.5);
/// assert_eq!(v.as_f64(), Some(21.5));
/// assert_eq!(TwinValue::from(3).as_f64(), Some(3.0));
/// assert_eq!(TwinValue::from("on").as_str(), Some("on"));
/// assert_eq!(TwinValue::from(true).type_name(), "boolean");
/// assert_eq!(v.to_string(), "21.5");
/// ```
#[derive(Debug, Clone, PartialEq)]
pub enum TwinValue {
    /// KubeEdge type `string` (also used for any type Wedge does not know).
    Text(String),
    /// KubeEdge types `int` / `integer`: a 64-bit signed integer.
    Integer(i64),
    /// KubeEdge type `float`: a finite 64-bit float.
    Float(f64),
    /// KubeEdge type `boolean`.
    Boolean(bool),
}

impl TwinValue {
    /// The value as a number: integers are widened, floats returned as they are; text and
    /// booleans give `None`.
    ///
    /// ```
    /// # use wedge_guest::TwinValue;
    /// assert_eq!(TwinValue::Integer(-4).as_f64(), Some(-4.0));
    /// assert_eq!(TwinValue::Text("4".into()).as_f64(), None);
    /// ```
    pub fn as_f64(&self) -> Option<f64> {
        match self {
            TwinValue::Integer(i) => Some(*i as f64),
            TwinValue::Float(f) => Some(*f),
            TwinValue::Text(_) | TwinValue::Boolean(_) => None,
        }
    }

    /// The value as an integer: integers as they are, floats only when they have no fractional
    /// part and fit in an `i64`; anything else gives `None`.
    ///
    /// ```
    /// # use wedge_guest::TwinValue;
    /// assert_eq!(TwinValue::Float(7.0).as_i64(), Some(7));
    /// assert_eq!(TwinValue::Float(7.5).as_i64(), None);
    /// ```
    pub fn as_i64(&self) -> Option<i64> {
        match self {
            TwinValue::Integer(i) => Some(*i),
            TwinValue::Float(f)
                if f.fract() == 0.0 && *f >= i64::MIN as f64 && *f < i64::MAX as f64 =>
            {
                Some(*f as i64)
            }
            _ => None,
        }
    }

    /// The value as a boolean; only [`TwinValue::Boolean`] gives `Some`.
    ///
    /// ```
    /// # use wedge_guest::TwinValue;
    /// assert_eq!(TwinValue::Boolean(true).as_bool(), Some(true));
    /// assert_eq!(TwinValue::Integer(1).as_bool(), None);
    /// ```
    pub fn as_bool(&self) -> Option<bool> {
        match self {
            TwinValue::Boolean(b) => Some(*b),
            _ => None,
        }
    }

    /// The text of a [`TwinValue::Text`]; other variants give `None`.
    ///
    /// ```
    /// # use wedge_guest::TwinValue;
    /// assert_eq!(TwinValue::from("spin").as_str(), Some("spin"));
    /// assert_eq!(TwinValue::from(1.0).as_str(), None);
    /// ```
    pub fn as_str(&self) -> Option<&str> {
        match self {
            TwinValue::Text(s) => Some(s),
            _ => None,
        }
    }

    /// Whether the value is an integer or a float.
    ///
    /// ```
    /// # use wedge_guest::TwinValue;
    /// assert!(TwinValue::from(1).is_numeric());
    /// assert!(!TwinValue::from("1").is_numeric());
    /// ```
    pub fn is_numeric(&self) -> bool {
        matches!(self, TwinValue::Integer(_) | TwinValue::Float(_))
    }

    /// The KubeEdge type name of this value: `string`, `int`, `float` or `boolean`.
    ///
    /// ```
    /// # use wedge_guest::TwinValue;
    /// assert_eq!(TwinValue::from(1).type_name(), "int");
    /// ```
    pub fn type_name(&self) -> &'static str {
        match self {
            TwinValue::Text(_) => "string",
            TwinValue::Integer(_) => "int",
            TwinValue::Float(_) => "float",
            TwinValue::Boolean(_) => "boolean",
        }
    }

    /// The [`ValueType`] of this value.
    ///
    /// ```
    /// # use wedge_guest::{TwinValue, ValueType};
    /// assert_eq!(TwinValue::from(false).value_type(), ValueType::Boolean);
    /// ```
    pub fn value_type(&self) -> ValueType {
        match self {
            TwinValue::Text(_) => ValueType::Text,
            TwinValue::Integer(_) => ValueType::Int,
            TwinValue::Float(_) => ValueType::Float,
            TwinValue::Boolean(_) => ValueType::Boolean,
        }
    }
}

impl fmt::Display for TwinValue {
    /// Formats the value as KubeEdge would carry it on the wire (`21.5`, `3`, `true`, text).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TwinValue::Text(s) => f.write_str(s),
            TwinValue::Integer(i) => write!(f, "{i}"),
            TwinValue::Float(x) => write!(f, "{x}"),
            TwinValue::Boolean(b) => write!(f, "{b}"),
        }
    }
}

macro_rules! twin_value_from {
    ($($t:ty => $variant:ident as $conv:ty),* $(,)?) => {$(
        impl From<$t> for TwinValue {
            fn from(v: $t) -> Self {
                TwinValue::$variant(<$conv>::from(v))
            }
        }
    )*};
}

twin_value_from! {
    String => Text as String,
    &str => Text as String,
    i64 => Integer as i64,
    i32 => Integer as i64,
    i16 => Integer as i64,
    i8 => Integer as i64,
    u32 => Integer as i64,
    u16 => Integer as i64,
    u8 => Integer as i64,
    f64 => Float as f64,
    f32 => Float as f64,
    bool => Boolean as bool,
}

impl From<&String> for TwinValue {
    fn from(v: &String) -> Self {
        TwinValue::Text(v.clone())
    }
}

/// A property's declared value type (`value-type` in the contract).
///
/// ```
/// use wedge_guest::{TwinValue, ValueType};
///
/// assert_eq!(ValueType::parse("int"), ValueType::Int);
/// assert_eq!(ValueType::parse("double"), ValueType::Float);
/// assert_eq!(ValueType::Int.from_f64(20.6), TwinValue::Integer(21));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ValueType {
    /// `int` / `integer` (also `long`).
    Int,
    /// `float` (also `double`).
    Float,
    /// `boolean` (also `bool`).
    Boolean,
    /// `string` and every type Wedge does not know.
    Text,
}

impl ValueType {
    /// Parses a KubeEdge type name, case-insensitively; unknown names are [`ValueType::Text`].
    ///
    /// ```
    /// # use wedge_guest::ValueType;
    /// assert_eq!(ValueType::parse("Boolean"), ValueType::Boolean);
    /// assert_eq!(ValueType::parse("bytes"), ValueType::Text);
    /// ```
    pub fn parse(name: &str) -> ValueType {
        match name.trim().to_ascii_lowercase().as_str() {
            "int" | "integer" | "long" | "int64" => ValueType::Int,
            "float" | "double" | "float64" => ValueType::Float,
            "boolean" | "bool" => ValueType::Boolean,
            _ => ValueType::Text,
        }
    }

    /// Turns a measured number into a value of this type: rounded for `int`, non-zero for
    /// `boolean`, decimal text for `string`.
    ///
    /// ```
    /// # use wedge_guest::{TwinValue, ValueType};
    /// assert_eq!(ValueType::Float.from_f64(1.5), TwinValue::Float(1.5));
    /// assert_eq!(ValueType::Boolean.from_f64(0.0), TwinValue::Boolean(false));
    /// assert_eq!(ValueType::Text.from_f64(2.0), TwinValue::Text("2".into()));
    /// ```
    pub fn from_f64(self, x: f64) -> TwinValue {
        match self {
            ValueType::Int => TwinValue::Integer(x.round() as i64),
            ValueType::Float => TwinValue::Float(x),
            ValueType::Boolean => TwinValue::Boolean(x != 0.0),
            ValueType::Text => TwinValue::Text(x.to_string()),
        }
    }

    /// The canonical KubeEdge name: `int`, `float`, `boolean` or `string`.
    ///
    /// ```
    /// # use wedge_guest::ValueType;
    /// assert_eq!(ValueType::Int.name(), "int");
    /// ```
    pub fn name(self) -> &'static str {
        match self {
            ValueType::Int => "int",
            ValueType::Float => "float",
            ValueType::Boolean => "boolean",
            ValueType::Text => "string",
        }
    }
}

/// One property of a device, as the device model and instance declare it.
///
/// ```
/// use serde::Deserialize;
/// use wedge_guest::{Property, ValueType};
///
/// #[derive(Deserialize)]
/// struct Visitor { register: String, offset: u16 }
///
/// let p = Property::new("temperature", "float", r#"{"register":"HoldingRegister","offset":2}"#);
/// let v: Visitor = p.visitor_as().unwrap();
/// assert_eq!((v.register.as_str(), v.offset), ("HoldingRegister", 2));
/// assert_eq!(p.kind(), ValueType::Float);
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct Property {
    /// Property name; also the twin key.
    pub name: String,
    /// Declared type of its value as the device model spells it (`int`, `float`, `boolean`,
    /// `string`); see [`Property::kind`].
    pub value_type: String,
    /// Protocol-specific visitor configuration, as JSON text; see [`Property::visitor_as`].
    pub visitor: String,
    /// How often `poll` should collect this property; `None`: the device's default cycle.
    pub collect_cycle: Option<Duration>,
}

impl Property {
    /// A property with no collect cycle of its own (mostly for tests).
    ///
    /// ```
    /// # use wedge_guest::Property;
    /// let p = Property::new("setpoint", "int", "{}");
    /// assert_eq!(p.collect_cycle, None);
    /// ```
    pub fn new(
        name: impl Into<String>,
        value_type: impl Into<String>,
        visitor: impl Into<String>,
    ) -> Self {
        Property {
            name: name.into(),
            value_type: value_type.into(),
            visitor: visitor.into(),
            collect_cycle: None,
        }
    }

    /// The declared value type, parsed.
    ///
    /// ```
    /// # use wedge_guest::{Property, ValueType};
    /// assert_eq!(Property::new("on", "boolean", "{}").kind(), ValueType::Boolean);
    /// ```
    pub fn kind(&self) -> ValueType {
        ValueType::parse(&self.value_type)
    }

    /// Parses the visitor JSON into `T`. An empty visitor is read as `{}`. The error names
    /// the property.
    ///
    /// ```
    /// # use wedge_guest::Property;
    /// #[derive(serde::Deserialize, Debug)]
    /// struct V { offset: u16 }
    /// let err = Property::new("t", "int", "{}").visitor_as::<V>().unwrap_err();
    /// assert!(err.starts_with("property t: invalid visitor:"), "{err}");
    /// ```
    pub fn visitor_as<T: DeserializeOwned>(&self) -> Result<T, String> {
        parse_json(&self.visitor)
            .map_err(|e| format!("property {}: invalid visitor: {e}", self.name))
    }
}

/// A device handed to a mapper.
///
/// ```
/// use wedge_guest::{Device, Property};
///
/// #[derive(serde::Deserialize)]
/// struct Conn { address: String }
///
/// let d = Device {
///     id: "default/boiler".into(),
///     protocol: "modbus-tcp".into(),
///     protocol_config: r#"{"address":"127.0.0.1:1502"}"#.into(),
///     properties: vec![Property::new("temperature", "float", "{}")],
/// };
/// assert_eq!(d.protocol_config_as::<Conn>().unwrap().address, "127.0.0.1:1502");
/// assert!(d.property("temperature").is_some());
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct Device {
    /// The device id: `<namespace>/<name>`, or one segment for legacy ids.
    pub id: String,
    /// The protocol the device speaks; matches the mapper's manifest.
    pub protocol: String,
    /// Protocol configuration of this instance, as JSON text; see [`Device::protocol_config_as`].
    pub protocol_config: String,
    /// The properties the mapper should read and write.
    pub properties: Vec<Property>,
}

impl Device {
    /// Parses the protocol configuration JSON into `T`. An empty configuration is read as `{}`.
    /// The error names the device.
    ///
    /// ```
    /// # use wedge_guest::Device;
    /// #[derive(serde::Deserialize, Default)]
    /// #[serde(default)]
    /// struct Conn { slave_id: u8 }
    /// let d = Device { id: "d".into(), protocol: "x".into(), protocol_config: String::new(), properties: vec![] };
    /// assert_eq!(d.protocol_config_as::<Conn>().unwrap().slave_id, 0);
    /// ```
    pub fn protocol_config_as<T: DeserializeOwned>(&self) -> Result<T, String> {
        parse_json(&self.protocol_config)
            .map_err(|e| format!("device {}: invalid protocol config: {e}", self.id))
    }

    /// The property called `name`, if the device has it.
    ///
    /// ```
    /// # use wedge_guest::{Device, Property};
    /// let d = Device { id: "d".into(), protocol: "x".into(), protocol_config: "{}".into(),
    ///                  properties: vec![Property::new("a", "int", "{}")] };
    /// assert_eq!(d.property("a").map(|p| p.name.as_str()), Some("a"));
    /// assert!(d.property("b").is_none());
    /// ```
    pub fn property(&self, name: &str) -> Option<&Property> {
        self.properties.iter().find(|p| p.name == name)
    }
}

/// Device state as KubeEdge's state-update topic knows it.
///
/// ```
/// # use wedge_guest::DeviceState;
/// assert_ne!(DeviceState::Online, DeviceState::Offline);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DeviceState {
    /// The device answers.
    Online,
    /// The device does not answer.
    Offline,
    /// The device works normally.
    Ok,
    /// The state is not known.
    Unknown,
    /// The device answers but reports a fault.
    Unhealthy,
}

/// Where a twin update came from.
///
/// ```
/// # use wedge_guest::UpdateSource;
/// assert_ne!(UpdateSource::Mapper, UpdateSource::Cloud);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum UpdateSource {
    /// A mapper reported a value (a Wasm mapper's `report`, or MQTT `twin/update`).
    Mapper,
    /// The cloud synchronised a desired or reported value.
    Cloud,
}

/// A proposed change to one twin property, shown to twin handlers before it is stored.
///
/// ```
/// use wedge_guest::{TwinUpdate, TwinValue, UpdateSource};
///
/// let u = TwinUpdate {
///     device: "default/boiler".into(),
///     property: "temperature".into(),
///     desired: false,
///     value: TwinValue::Float(21.0),
///     previous: None,
///     source: UpdateSource::Mapper,
/// };
/// assert_eq!(u.value.as_f64(), Some(21.0));
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct TwinUpdate {
    /// Device id.
    pub device: String,
    /// Property (twin key).
    pub property: String,
    /// Which side changes: `true` for `expected` (desired), `false` for `actual` (reported).
    pub desired: bool,
    /// The proposed value.
    pub value: TwinValue,
    /// The value stored now on the same side, if any.
    pub previous: Option<TwinValue>,
    /// Who proposes it.
    pub source: UpdateSource,
}

/// A twin handler's decision about one update.
///
/// ```
/// use wedge_guest::{TwinValue, Verdict};
///
/// let v = Verdict::reject(format!("temperature {} is above the maximum {}", 120, 85));
/// assert_eq!(v, Verdict::Reject("temperature 120 is above the maximum 85".into()));
/// assert_eq!(Verdict::replace(85.0), Verdict::Replace(TwinValue::Float(85.0)));
/// ```
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    /// Store the value as proposed.
    Accept,
    /// Store this value instead (e.g. clamped, or converted to another unit).
    Replace(TwinValue),
    /// Refuse the update; the reason goes back to the sender as a 400-shaped error.
    Reject(String),
}

impl Verdict {
    /// `Verdict::Reject` with any string-like reason.
    ///
    /// ```
    /// # use wedge_guest::Verdict;
    /// assert_eq!(Verdict::reject("no"), Verdict::Reject("no".to_string()));
    /// ```
    pub fn reject(reason: impl Into<String>) -> Self {
        Verdict::Reject(reason.into())
    }

    /// `Verdict::Replace` with anything convertible into a [`TwinValue`].
    ///
    /// ```
    /// # use wedge_guest::{TwinValue, Verdict};
    /// assert_eq!(Verdict::replace(3), Verdict::Replace(TwinValue::Integer(3)));
    /// ```
    pub fn replace(value: impl Into<TwinValue>) -> Self {
        Verdict::Replace(value.into())
    }
}

/// Parses a JSON configuration text (a manifest's `[config]` handed to `init`, a device's
/// protocol configuration, ...) into `T`. Empty or blank text is read as `{}`.
///
/// ```
/// #[derive(serde::Deserialize)]
/// struct Config { base: f64 }
///
/// let c: Config = wedge_guest::parse_config(r#"{"base": 20.0}"#).unwrap();
/// assert_eq!(c.base, 20.0);
/// assert!(wedge_guest::parse_config::<Config>("").is_err()); // `{}` lacks `base`
/// ```
pub fn parse_config<T: DeserializeOwned>(json: &str) -> Result<T, String> {
    parse_json(json).map_err(|e| format!("invalid config: {e}"))
}

fn parse_json<T: DeserializeOwned>(json: &str) -> Result<T, serde_json::Error> {
    let json = if json.trim().is_empty() { "{}" } else { json };
    serde_json::from_str(json)
}

/// Conversions between these types and the generated ones of one world's bindings.
macro_rules! conversions {
    ($modname:ident, $($g:ident)::+) => {
        #[allow(dead_code)]
        pub(crate) mod $modname {
            use crate::bindings::$($g)::+::wedge::device::types as g;
            use crate::types::*;

            pub(crate) fn value_in(v: g::TwinValue) -> TwinValue {
                match v {
                    g::TwinValue::Text(s) => TwinValue::Text(s),
                    g::TwinValue::Integer(i) => TwinValue::Integer(i),
                    g::TwinValue::Float(f) => TwinValue::Float(f),
                    g::TwinValue::Boolean(b) => TwinValue::Boolean(b),
                }
            }

            pub(crate) fn value_out(v: TwinValue) -> g::TwinValue {
                match v {
                    TwinValue::Text(s) => g::TwinValue::Text(s),
                    TwinValue::Integer(i) => g::TwinValue::Integer(i),
                    TwinValue::Float(f) => g::TwinValue::Float(f),
                    TwinValue::Boolean(b) => g::TwinValue::Boolean(b),
                }
            }

            pub(crate) fn device_in(d: g::Device) -> Device {
                Device {
                    id: d.id,
                    protocol: d.protocol,
                    protocol_config: d.protocol_config,
                    properties: d
                        .properties
                        .into_iter()
                        .map(|p| Property {
                            name: p.name,
                            value_type: p.value_type,
                            visitor: p.visitor,
                            collect_cycle: match p.collect_cycle_ms {
                                0 => None,
                                ms => Some(std::time::Duration::from_millis(u64::from(ms))),
                            },
                        })
                        .collect(),
                }
            }

            pub(crate) fn state_out(s: DeviceState) -> g::DeviceState {
                match s {
                    DeviceState::Online => g::DeviceState::Online,
                    DeviceState::Offline => g::DeviceState::Offline,
                    DeviceState::Ok => g::DeviceState::Ok,
                    DeviceState::Unknown => g::DeviceState::Unknown,
                    DeviceState::Unhealthy => g::DeviceState::Unhealthy,
                }
            }

            pub(crate) fn update_in(u: g::TwinUpdate) -> TwinUpdate {
                TwinUpdate {
                    device: u.device,
                    property: u.property,
                    desired: u.desired,
                    value: value_in(u.value),
                    previous: u.previous.map(value_in),
                    source: match u.source {
                        g::UpdateSource::Mapper => UpdateSource::Mapper,
                        g::UpdateSource::Cloud => UpdateSource::Cloud,
                    },
                }
            }

            pub(crate) fn verdict_out(v: Verdict) -> g::Verdict {
                match v {
                    Verdict::Accept => g::Verdict::Accept,
                    Verdict::Replace(x) => g::Verdict::Replace(value_out(x)),
                    Verdict::Reject(r) => g::Verdict::Reject(r),
                }
            }
        }
    };
}

#[cfg(feature = "mapper")]
conversions!(mapper_conv, mapper);
#[cfg(feature = "twin-handler")]
conversions!(twin_handler_conv, twin_handler);
