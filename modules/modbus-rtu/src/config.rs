//! The module's and the devices' configuration. A device's `protocol-config` uses KubeEdge's
//! Modbus RTU names (`serialPort`, `baudRate`, `dataBits`, `parity`, `stopBits`, `slaveID`),
//! also accepted in snake case, plus Wedge's `timeout_ms`.

use std::time::Duration;

use serde::Deserialize;
use wedge_guest::serial::{Parity, Settings};

use crate::adu::SLAVE_IDS;

/// The manifest's `[config]`.
#[derive(Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ModuleConfig {
    /// Default answer timeout of a device, in milliseconds.
    pub timeout_ms: u64,
}

impl Default for ModuleConfig {
    fn default() -> Self {
        ModuleConfig { timeout_ms: 1000 }
    }
}

/// A device's `protocol-config`, as written. Unknown keys are ignored: KubeEdge's configData
/// may carry keys meant for other mappers.
#[derive(Debug, Deserialize)]
pub struct ProtocolConfig {
    /// Device path of the line, e.g. `/dev/ttyUSB0` or `/dev/serial/by-id/...`.
    #[serde(rename = "serialPort", alias = "serial_port")]
    pub serial_port: String,
    /// Bits per second (default 9600).
    #[serde(rename = "baudRate", alias = "baud_rate", default)]
    pub baud_rate: Option<u32>,
    /// 5 to 8 (default 8).
    #[serde(rename = "dataBits", alias = "data_bits", default)]
    pub data_bits: Option<u8>,
    /// `none`/`even`/`odd` or `N`/`E`/`O` (default none).
    #[serde(default)]
    pub parity: Option<String>,
    /// 1 or 2 (default 1).
    #[serde(rename = "stopBits", alias = "stop_bits", default)]
    pub stop_bits: Option<u8>,
    /// The slave's address on the line, 1 to 247 (default 1).
    #[serde(rename = "slaveID", alias = "slave_id", default)]
    pub slave_id: Option<u8>,
    /// How long to wait for an answer, in milliseconds (default: the module's `timeout_ms`).
    pub timeout_ms: Option<u64>,
}

/// A device's configuration, checked.
#[derive(Debug, Clone, PartialEq)]
pub struct DeviceLine {
    /// Device path of the line.
    pub path: String,
    /// How the line is set up; every device on one path must agree.
    pub settings: Settings,
    /// The slave's address.
    pub slave_id: u8,
    /// Answer timeout.
    pub timeout: Duration,
}

impl ProtocolConfig {
    /// Fills in defaults and checks every value; the error names the device and the field.
    pub fn check(self, device: &str, default_timeout_ms: u64) -> Result<DeviceLine, String> {
        let fail = |what: String| Err(format!("device {device}: {what}"));
        let path = self.serial_port.trim().to_owned();
        if !path.starts_with('/') {
            return fail(format!(
                "serialPort {:?} is not an absolute device path (e.g. /dev/ttyUSB0)",
                self.serial_port
            ));
        }
        let defaults = Settings::default();
        let parity = match &self.parity {
            None => defaults.parity,
            Some(text) => match Parity::parse(text) {
                Some(p) => p,
                None => return fail(format!("parity {text:?} is not none, even or odd")),
            },
        };
        let settings = Settings {
            baud_rate: self.baud_rate.unwrap_or(defaults.baud_rate),
            data_bits: self.data_bits.unwrap_or(defaults.data_bits),
            parity,
            stop_bits: self.stop_bits.unwrap_or(defaults.stop_bits),
        };
        if settings.baud_rate == 0 {
            return fail("baudRate must be positive".to_owned());
        }
        if !(5..=8).contains(&settings.data_bits) {
            return fail(format!(
                "dataBits must be 5 to 8, not {}",
                settings.data_bits
            ));
        }
        if !matches!(settings.stop_bits, 1 | 2) {
            return fail(format!(
                "stopBits must be 1 or 2, not {}",
                settings.stop_bits
            ));
        }
        let slave_id = self.slave_id.unwrap_or(1);
        if !SLAVE_IDS.contains(&slave_id) {
            return fail(format!(
                "slaveID must be 1 to 247 (0 is broadcast, which nobody answers), not {slave_id}"
            ));
        }
        let timeout_ms = self.timeout_ms.unwrap_or(default_timeout_ms);
        if timeout_ms == 0 {
            return fail("timeout_ms must be positive".to_owned());
        }
        Ok(DeviceLine {
            path,
            settings,
            slave_id,
            timeout: Duration::from_millis(timeout_ms),
        })
    }
}

/// How long the line must stay silent after a garbled answer before the next exchange: the
/// standard's 3.5 character gap (11 bits a character; 1.75 ms above 19200 baud), but at least
/// 20 ms, because USB serial adapters hand input over in bursts (FTDI's latency timer is 16 ms
/// by default).
pub fn quiet_time(settings: &Settings) -> Duration {
    let gap = if settings.baud_rate > 19_200 {
        Duration::from_micros(1750)
    } else {
        Duration::from_secs_f64(3.5 * 11.0 / f64::from(settings.baud_rate.max(1)))
    };
    gap.max(Duration::from_millis(20))
}

/// `9600 8N1`-style text for messages.
pub fn describe(settings: &Settings) -> String {
    let parity = match settings.parity {
        Parity::None => 'N',
        Parity::Even => 'E',
        Parity::Odd => 'O',
    };
    format!(
        "{} {}{parity}{}",
        settings.baud_rate, settings.data_bits, settings.stop_bits
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(json: &str) -> Result<DeviceLine, String> {
        let config: ProtocolConfig = serde_json::from_str(json).map_err(|e| e.to_string())?;
        config.check("default/meter", 1000)
    }

    #[test]
    fn kubeedge_names() {
        let line = check(
            r#"{"serialPort":"/dev/ttyUSB0","baudRate":19200,"dataBits":8,"parity":"even",
                "stopBits":1,"slaveID":3,"protocolName":"modbus-rtu"}"#,
        )
        .unwrap();
        assert_eq!(line.path, "/dev/ttyUSB0");
        assert_eq!(
            line.settings,
            Settings {
                baud_rate: 19200,
                data_bits: 8,
                parity: Parity::Even,
                stop_bits: 1
            }
        );
        assert_eq!(line.slave_id, 3);
        assert_eq!(line.timeout, Duration::from_millis(1000));
        assert_eq!(describe(&line.settings), "19200 8E1");
    }

    #[test]
    fn snake_case_names_short_parity_and_defaults() {
        let line = check(
            r#"{"serial_port":"/dev/ttyS1","baud_rate":115200,"data_bits":7,"parity":"O",
                "stop_bits":2,"slave_id":247,"timeout_ms":250}"#,
        )
        .unwrap();
        assert_eq!(describe(&line.settings), "115200 7O2");
        assert_eq!(
            (line.slave_id, line.timeout),
            (247, Duration::from_millis(250))
        );
        let line = check(r#"{"serialPort":"/dev/ttyUSB1"}"#).unwrap();
        assert_eq!(describe(&line.settings), "9600 8N1");
        assert_eq!(line.slave_id, 1);
    }

    #[test]
    fn bad_values_name_the_field() {
        for (json, field) in [
            (r#"{"serialPort":"ttyUSB0"}"#, "serialPort"),
            (r#"{"serialPort":"/dev/ttyUSB0","parity":"mark"}"#, "parity"),
            (r#"{"serialPort":"/dev/ttyUSB0","dataBits":9}"#, "dataBits"),
            (r#"{"serialPort":"/dev/ttyUSB0","stopBits":3}"#, "stopBits"),
            (r#"{"serialPort":"/dev/ttyUSB0","baudRate":0}"#, "baudRate"),
            (r#"{"serialPort":"/dev/ttyUSB0","slaveID":0}"#, "slaveID"),
            (r#"{"serialPort":"/dev/ttyUSB0","slaveID":248}"#, "slaveID"),
            (
                r#"{"serialPort":"/dev/ttyUSB0","timeout_ms":0}"#,
                "timeout_ms",
            ),
        ] {
            let err = check(json).unwrap_err();
            assert!(
                err.starts_with("device default/meter: ") && err.contains(field),
                "{json}: {err}"
            );
        }
        assert!(
            check(r#"{"baudRate":9600}"#).is_err(),
            "serialPort is required"
        );
    }

    #[test]
    fn quiet_time_follows_the_baud_rate() {
        let at = |baud_rate| {
            quiet_time(&Settings {
                baud_rate,
                ..Settings::default()
            })
        };
        assert_eq!(at(115_200), Duration::from_millis(20));
        assert_eq!(at(1200), Duration::from_secs_f64(3.5 * 11.0 / 1200.0));
    }
}
