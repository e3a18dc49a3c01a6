//! Property visitors and the conversion between register contents and twin values. Plain
//! Rust, unit-tested on the host with the PDUs.

use serde::Deserialize;
use wedge_guest::{TwinValue, ValueType};

use crate::pdu::{Request, Response};

/// Which Modbus table a property lives in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
pub enum Table {
    /// Read/write 16-bit registers (functions 03, 06, 16).
    HoldingRegister,
    /// Read-only 16-bit registers (function 04).
    InputRegister,
    /// Read/write bits (functions 01, 05).
    #[serde(alias = "CoilRegister")]
    Coil,
    /// Read-only bits (function 02).
    #[serde(alias = "DiscreteInputRegister")]
    DiscreteInput,
}

fn one() -> u8 {
    1
}

fn unit_scale() -> f64 {
    1.0
}

/// A property's `visitor` JSON, e.g.
/// `{"register":"HoldingRegister","offset":2,"limit":1,"scale":0.1,"swap_words":false}`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Visitor {
    /// The table.
    pub register: Table,
    /// Address (0-based) of the first register or bit.
    pub offset: u16,
    /// Registers per value: 1 (16 bits) or 2 (32 bits). Ignored for bits.
    #[serde(default = "one")]
    pub limit: u8,
    /// Multiplies the raw value on read, divides the value on write.
    #[serde(default = "unit_scale")]
    pub scale: f64,
    /// For 32-bit values: the low word comes first (the default is high word first).
    #[serde(default, alias = "isRegisterSwap")]
    pub swap_words: bool,
    /// How the register bits are read; see [`Format`].
    #[serde(default)]
    pub format: Option<Format>,
}

/// How register contents are interpreted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Format {
    /// Unsigned integer (16 or 32 bits). The default, except for 32-bit float properties.
    Uint,
    /// Two's-complement signed integer (16 or 32 bits).
    Int,
    /// IEEE-754 `f32` (32 bits only). The default for 32-bit float properties.
    Float,
}

impl Visitor {
    /// Checks the visitor's values.
    pub fn validate(&self) -> Result<(), String> {
        if self.is_register() && !matches!(self.limit, 1 | 2) {
            return Err(format!(
                "limit must be 1 or 2 registers, got {}",
                self.limit
            ));
        }
        if self.is_register() && usize::from(self.offset) + usize::from(self.limit) > 0x1_0000 {
            return Err(format!(
                "offset {} + limit {} runs past 65535",
                self.offset, self.limit
            ));
        }
        if self.format == Some(Format::Float) && self.limit != 2 {
            return Err("format float needs limit 2 (a 32-bit register pair)".to_string());
        }
        if !self.scale.is_finite() || self.scale == 0.0 {
            return Err(format!(
                "scale must be a finite non-zero number, got {}",
                self.scale
            ));
        }
        Ok(())
    }

    /// The format in effect for a property of type `kind`.
    pub fn format(&self, kind: ValueType) -> Format {
        match self.format {
            Some(f) => f,
            None if self.limit == 2 && kind == ValueType::Float => Format::Float,
            None => Format::Uint,
        }
    }

    fn is_register(&self) -> bool {
        matches!(self.register, Table::HoldingRegister | Table::InputRegister)
    }

    /// The request that reads this property.
    pub fn read_request(&self) -> Request {
        let address = self.offset;
        let count = u16::from(self.limit);
        match self.register {
            Table::HoldingRegister => Request::ReadHoldingRegisters { address, count },
            Table::InputRegister => Request::ReadInputRegisters { address, count },
            Table::Coil => Request::ReadCoils { address, count: 1 },
            Table::DiscreteInput => Request::ReadDiscreteInputs { address, count: 1 },
        }
    }

    /// The twin value in the answer to [`read_request`](Self::read_request): one bit or the
    /// registers, turned into a value of type `kind`.
    pub fn decode_response(
        &self,
        kind: ValueType,
        response: Response,
    ) -> Result<TwinValue, String> {
        match response {
            Response::Bits(bits) if bits.len() == 1 => Ok(self.decode_bit(kind, bits[0])),
            Response::Registers(regs) => self.decode_registers(kind, &regs),
            other => Err(format!("unexpected response {other:?}")),
        }
    }

    /// The twin value of a bit read from the device.
    pub fn decode_bit(&self, kind: ValueType, bit: bool) -> TwinValue {
        match kind {
            ValueType::Boolean => TwinValue::Boolean(bit),
            ValueType::Int => TwinValue::Integer(i64::from(bit)),
            ValueType::Float => TwinValue::Float(f64::from(u8::from(bit))),
            ValueType::Text => TwinValue::Text(bit.to_string()),
        }
    }

    /// The twin value of registers read from the device: a 16-bit (limit 1) or 32-bit
    /// (limit 2) integer or `f32` as [`format`](Self::format) says, multiplied by `scale`,
    /// turned into the property's type.
    pub fn decode_registers(&self, kind: ValueType, regs: &[u16]) -> Result<TwinValue, String> {
        let format = self.format(kind);
        let x = match (self.limit, regs) {
            (1, [w]) => {
                let raw = if format == Format::Int {
                    f64::from(*w as i16)
                } else {
                    f64::from(*w)
                };
                self.scaled(raw)
            }
            (2, [a, b]) => {
                let (hi, lo) = if self.swap_words { (*b, *a) } else { (*a, *b) };
                let bits = (u32::from(hi) << 16) | u32::from(lo);
                if format == Format::Float {
                    let f = f32::from_bits(bits);
                    if !f.is_finite() {
                        return Err(format!("register value {bits:#010x} is not a finite float"));
                    }
                    // The shortest decimal that round-trips the f32 (21.3, not 21.2999992...).
                    let f: f64 = f.to_string().parse().unwrap_or(f64::from(f));
                    if self.scale == 1.0 { f } else { f * self.scale }
                } else if format == Format::Int {
                    self.scaled(f64::from(bits as i32))
                } else {
                    self.scaled(f64::from(bits))
                }
            }
            _ => {
                return Err(format!(
                    "expected {} registers, got {}",
                    self.limit,
                    regs.len()
                ));
            }
        };
        Ok(match kind {
            ValueType::Float => TwinValue::Float(x),
            ValueType::Int => TwinValue::Integer(x.round() as i64),
            ValueType::Boolean => TwinValue::Boolean(x != 0.0),
            ValueType::Text => TwinValue::Text(x.to_string()),
        })
    }

    /// `raw * scale`, rounded to the decimals the scale has (so `3 * 0.1` is `0.3`).
    fn scaled(&self, raw: f64) -> f64 {
        if self.scale == 1.0 {
            return raw;
        }
        let x = raw * self.scale;
        let decimals = self
            .scale
            .to_string()
            .split_once('.')
            .map_or(0, |(_, d)| d.len());
        if decimals == 0 || decimals > 12 {
            return x;
        }
        let p = 10f64.powi(decimals as i32);
        (x * p).round() / p
    }

    /// The request that writes `value` to this property: function 05 for coils, 06 for a
    /// 16-bit register, 16 for a 32-bit one. Input registers and discrete inputs are refused.
    pub fn write_request(&self, kind: ValueType, value: &TwinValue) -> Result<Request, String> {
        let address = self.offset;
        match self.register {
            Table::InputRegister => {
                Err("input registers are read-only (use a HoldingRegister to write)".to_string())
            }
            Table::DiscreteInput => {
                Err("discrete inputs are read-only (use a Coil to write)".to_string())
            }
            Table::Coil => Ok(Request::WriteSingleCoil {
                address,
                value: to_bool(value)?,
            }),
            Table::HoldingRegister => {
                let x = match value {
                    TwinValue::Boolean(b) => f64::from(u8::from(*b)),
                    TwinValue::Text(s) => s
                        .trim()
                        .parse::<f64>()
                        .map_err(|_| format!("cannot write text {s:?} to a register"))?,
                    v => v.as_f64().unwrap_or_default(),
                };
                let raw = x / self.scale;
                if !raw.is_finite() {
                    return Err(format!("{x} / scale {} is not a finite number", self.scale));
                }
                let format = self.format(kind);
                match self.limit {
                    1 => {
                        let r = raw.round();
                        let word = if format == Format::Int {
                            if !(f64::from(i16::MIN)..=f64::from(i16::MAX)).contains(&r) {
                                return Err(format!("{r} does not fit a signed 16-bit register"));
                            }
                            r as i16 as u16
                        } else {
                            if !(0.0..=f64::from(u16::MAX)).contains(&r) {
                                return Err(format!(
                                    "{r} does not fit an unsigned 16-bit register"
                                ));
                            }
                            r as u16
                        };
                        Ok(Request::WriteSingleRegister {
                            address,
                            value: word,
                        })
                    }
                    _ => {
                        let bits = if format == Format::Float {
                            let f = raw as f32;
                            if !f.is_finite() {
                                return Err(format!("{raw} does not fit a 32-bit float"));
                            }
                            f.to_bits()
                        } else {
                            let r = raw.round();
                            if format == Format::Int {
                                if !(f64::from(i32::MIN)..=f64::from(i32::MAX)).contains(&r) {
                                    return Err(format!("{r} does not fit a signed 32-bit value"));
                                }
                                r as i32 as u32
                            } else {
                                if !(0.0..=f64::from(u32::MAX)).contains(&r) {
                                    return Err(format!(
                                        "{r} does not fit an unsigned 32-bit value"
                                    ));
                                }
                                r as u32
                            }
                        };
                        let (hi, lo) = ((bits >> 16) as u16, bits as u16);
                        let values = if self.swap_words {
                            vec![lo, hi]
                        } else {
                            vec![hi, lo]
                        };
                        Ok(Request::WriteMultipleRegisters { address, values })
                    }
                }
            }
        }
    }
}

fn to_bool(value: &TwinValue) -> Result<bool, String> {
    match value {
        TwinValue::Boolean(b) => Ok(*b),
        TwinValue::Integer(0) => Ok(false),
        TwinValue::Integer(1) => Ok(true),
        TwinValue::Float(f) if *f == 0.0 || *f == 1.0 => Ok(*f == 1.0),
        TwinValue::Text(s) => match s.trim().to_ascii_lowercase().as_str() {
            "true" | "on" | "1" => Ok(true),
            "false" | "off" | "0" => Ok(false),
            _ => Err(format!(
                "cannot write {s:?} to a coil (expected true/false)"
            )),
        },
        v => Err(format!(
            "cannot write {v} to a coil (expected true/false, 0/1)"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn visitor(json: &str) -> Visitor {
        let v: Visitor = serde_json::from_str(json).unwrap();
        v.validate().unwrap();
        v
    }

    #[test]
    fn parses_visitors() {
        let v = visitor(r#"{"register":"HoldingRegister","offset":2}"#);
        assert_eq!(
            (v.limit, v.scale, v.swap_words, v.format),
            (1, 1.0, false, None)
        );
        assert_eq!(v.format(ValueType::Float), Format::Uint);
        assert_eq!(
            v.read_request(),
            Request::ReadHoldingRegisters {
                address: 2,
                count: 1
            }
        );
        let v =
            visitor(r#"{"register":"InputRegister","offset":0,"limit":2,"isRegisterSwap":true}"#);
        assert!(v.swap_words);
        assert_eq!(
            v.read_request(),
            Request::ReadInputRegisters {
                address: 0,
                count: 2
            }
        );
        assert_eq!(
            visitor(r#"{"register":"Coil","offset":5}"#).read_request(),
            Request::ReadCoils {
                address: 5,
                count: 1
            }
        );
        assert_eq!(
            visitor(r#"{"register":"DiscreteInput","offset":5,"limit":2}"#).read_request(),
            Request::ReadDiscreteInputs {
                address: 5,
                count: 1
            }
        );
        for bad in [
            r#"{"register":"HoldingRegister","offset":0,"limit":3}"#,
            r#"{"register":"HoldingRegister","offset":0,"scale":0}"#,
            r#"{"register":"HoldingRegister","offset":65535,"limit":2}"#,
            r#"{"register":"HoldingRegister","offset":0,"format":"float"}"#,
        ] {
            let v: Visitor = serde_json::from_str(bad).unwrap();
            assert!(v.validate().is_err(), "{bad}");
        }
        assert!(serde_json::from_str::<Visitor>(r#"{"register":"Holding","offset":0}"#).is_err());
    }

    #[test]
    fn decodes_16_bit() {
        let v = visitor(r#"{"register":"HoldingRegister","offset":0,"scale":0.1}"#);
        assert_eq!(
            v.decode_registers(ValueType::Float, &[215]).unwrap(),
            TwinValue::Float(21.5)
        );
        assert_eq!(
            v.decode_registers(ValueType::Float, &[3]).unwrap(),
            TwinValue::Float(0.3)
        );
        assert_eq!(
            v.decode_registers(ValueType::Int, &[215]).unwrap(),
            TwinValue::Integer(22)
        );
        assert_eq!(
            v.decode_registers(ValueType::Float, &[0xFFFF]).unwrap(),
            TwinValue::Float(6553.5)
        );
        let s = visitor(r#"{"register":"HoldingRegister","offset":0,"format":"int"}"#);
        assert_eq!(
            s.decode_registers(ValueType::Int, &[0xFFFE]).unwrap(),
            TwinValue::Integer(-2)
        );
        assert_eq!(
            s.decode_registers(ValueType::Boolean, &[0]).unwrap(),
            TwinValue::Boolean(false)
        );
        assert!(s.decode_registers(ValueType::Int, &[1, 2]).is_err());
    }

    #[test]
    fn decodes_32_bit() {
        let v = visitor(r#"{"register":"HoldingRegister","offset":0,"limit":2}"#);
        assert_eq!(
            v.decode_registers(ValueType::Int, &[0x0001, 0x0002])
                .unwrap(),
            TwinValue::Integer(65538)
        );
        // 21.3f32 = 0x41AA6666
        assert_eq!(
            v.decode_registers(ValueType::Float, &[0x41AA, 0x6666])
                .unwrap(),
            TwinValue::Float(21.3)
        );
        let sw =
            visitor(r#"{"register":"HoldingRegister","offset":0,"limit":2,"swap_words":true}"#);
        assert_eq!(
            sw.decode_registers(ValueType::Float, &[0x6666, 0x41AA])
                .unwrap(),
            TwinValue::Float(21.3)
        );
        assert_eq!(
            sw.decode_registers(ValueType::Int, &[0x0002, 0x0001])
                .unwrap(),
            TwinValue::Integer(65538)
        );
        let s = visitor(
            r#"{"register":"InputRegister","offset":0,"limit":2,"format":"int","scale":0.01}"#,
        );
        assert_eq!(
            s.decode_registers(ValueType::Float, &[0xFFFF, 0xFF38])
                .unwrap(),
            TwinValue::Float(-2.0)
        );
        assert!(
            v.decode_registers(ValueType::Float, &[0x7FC0, 0x0000])
                .is_err()
        ); // NaN
    }

    #[test]
    fn decodes_bits() {
        let v = visitor(r#"{"register":"Coil","offset":0}"#);
        assert_eq!(
            v.decode_bit(ValueType::Boolean, true),
            TwinValue::Boolean(true)
        );
        assert_eq!(v.decode_bit(ValueType::Int, true), TwinValue::Integer(1));
        assert_eq!(v.decode_bit(ValueType::Float, false), TwinValue::Float(0.0));
    }

    #[test]
    fn decodes_answers_to_read_requests() {
        let c = visitor(r#"{"register":"Coil","offset":0}"#);
        assert_eq!(
            c.decode_response(ValueType::Boolean, Response::Bits(vec![true])),
            Ok(TwinValue::Boolean(true))
        );
        let r = visitor(r#"{"register":"InputRegister","offset":0,"scale":0.5}"#);
        assert_eq!(
            r.decode_response(ValueType::Float, Response::Registers(vec![3])),
            Ok(TwinValue::Float(1.5))
        );
        assert!(
            r.decode_response(ValueType::Float, Response::Written)
                .is_err()
        );
        assert!(
            c.decode_response(ValueType::Boolean, Response::Bits(vec![true, false]))
                .is_err()
        );
    }

    #[test]
    fn encodes_writes() {
        let v = visitor(r#"{"register":"HoldingRegister","offset":4,"scale":0.1}"#);
        assert_eq!(
            v.write_request(ValueType::Float, &TwinValue::Float(21.5))
                .unwrap(),
            Request::WriteSingleRegister {
                address: 4,
                value: 215
            }
        );
        assert!(
            v.write_request(ValueType::Float, &TwinValue::Float(-1.0))
                .is_err()
        );
        assert!(
            v.write_request(ValueType::Float, &TwinValue::Float(6553.6))
                .is_err()
        );
        let s = visitor(r#"{"register":"HoldingRegister","offset":4,"format":"int"}"#);
        assert_eq!(
            s.write_request(ValueType::Int, &TwinValue::Integer(-2))
                .unwrap(),
            Request::WriteSingleRegister {
                address: 4,
                value: 0xFFFE
            }
        );
        let f = visitor(r#"{"register":"HoldingRegister","offset":8,"limit":2}"#);
        assert_eq!(
            f.write_request(ValueType::Float, &TwinValue::Float(21.3))
                .unwrap(),
            Request::WriteMultipleRegisters {
                address: 8,
                values: vec![0x41AA, 0x6666]
            }
        );
        let fs =
            visitor(r#"{"register":"HoldingRegister","offset":8,"limit":2,"swap_words":true}"#);
        assert_eq!(
            fs.write_request(ValueType::Int, &TwinValue::Integer(65538))
                .unwrap(),
            Request::WriteMultipleRegisters {
                address: 8,
                values: vec![0x0002, 0x0001]
            }
        );
        assert_eq!(
            f.write_request(ValueType::Int, &TwinValue::Text("7".into()))
                .unwrap(),
            Request::WriteMultipleRegisters {
                address: 8,
                values: vec![0, 7]
            }
        );
        let c = visitor(r#"{"register":"Coil","offset":1}"#);
        assert_eq!(
            c.write_request(ValueType::Boolean, &TwinValue::Boolean(true))
                .unwrap(),
            Request::WriteSingleCoil {
                address: 1,
                value: true
            }
        );
        assert_eq!(
            c.write_request(ValueType::Boolean, &TwinValue::Text("off".into()))
                .unwrap(),
            Request::WriteSingleCoil {
                address: 1,
                value: false
            }
        );
        assert!(
            c.write_request(ValueType::Boolean, &TwinValue::Integer(2))
                .is_err()
        );
    }

    #[test]
    fn read_only_tables_refuse_writes() {
        let i = visitor(r#"{"register":"InputRegister","offset":0}"#);
        let err = i
            .write_request(ValueType::Int, &TwinValue::Integer(1))
            .unwrap_err();
        assert!(err.contains("read-only"), "{err}");
        let d = visitor(r#"{"register":"DiscreteInput","offset":0}"#);
        assert!(
            d.write_request(ValueType::Boolean, &TwinValue::Boolean(true))
                .unwrap_err()
                .contains("read-only")
        );
    }
}
