//! `modbus-rtu`: a mapper (protocol `modbus-rtu`) for Modbus RTU devices on serial lines,
//! through `wedge_guest::serial`. The PDUs and the value encoding are `modbus-core`'s (shared
//! with `modbus-tcp`); this crate adds the RTU frame ([`adu`], [`crc`]), the exchange on a
//! line ([`transaction`]) and the sharing of one line by several slaves ([`bus`]).
//!
//! Device `protocol-config` (KubeEdge's names; snake case accepted too):
//! `{"serialPort":"/dev/ttyUSB0","baudRate":9600,"dataBits":8,"parity":"none","stopBits":1,
//! "slaveID":1,"timeout_ms":1000}`; only `serialPort` is required, which the manifest's
//! `capabilities.serial` must grant. Property `visitor`: as `modbus-tcp`'s
//! (`{"register":"HoldingRegister","offset":0,"limit":1,"scale":0.1}`).
//!
//! Devices naming the same `serialPort` share one open port and must agree on its settings.
//! `poll` reads every property that is due; `write_property` writes coils and holding
//! registers. A device that stops answering is reported `offline` (its poll ends at the first
//! timeout, so the other slaves on the line wait no longer than that), and `online` again once
//! it answers.

pub mod adu;
pub mod bus;
pub mod config;
pub mod crc;
pub mod line;
pub mod transaction;

use std::collections::HashMap;

use modbus_core::pdu::{Error, Request, Response};
use modbus_core::point::Point;
use wedge_guest::{Device, DeviceState, Mapper, TwinValue, report};

use crate::bus::Bus;
use crate::config::{DeviceLine, ModuleConfig, ProtocolConfig, describe};

struct RtuDevice {
    line: DeviceLine,
    points: Vec<Point>,
    reported_state: Option<DeviceState>,
}

impl RtuDevice {
    fn set_state(&mut self, id: &str, state: DeviceState) {
        if self.reported_state != Some(state) {
            match report::state(id, state) {
                Ok(()) => self.reported_state = Some(state),
                Err(e) => wedge_guest::warn!("report state of {id}: {e}"),
            }
        }
    }

    /// The device's exchange on its line.
    fn call(&self, buses: &mut HashMap<String, Bus>, request: &Request) -> Result<Response, Error> {
        let bus = buses.get_mut(&self.line.path).ok_or_else(|| {
            Error::Protocol(format!("no line {} (device not added)", self.line.path))
        })?;
        bus.exchange(self.line.slave_id, request, self.line.timeout)
    }
}

struct ModbusRtu {
    config: ModuleConfig,
    devices: HashMap<String, RtuDevice>,
    /// Lines by device path, each used by at least one device.
    buses: HashMap<String, Bus>,
}

impl ModbusRtu {
    /// Closes the lines no device uses any more (releasing their ports to other programs).
    fn close_unused_lines(&mut self) {
        let devices = &self.devices;
        self.buses
            .retain(|path, _| devices.values().any(|d| &d.line.path == path));
    }
}

impl Mapper for ModbusRtu {
    fn init(config: &str) -> Result<Self, String> {
        let config: ModuleConfig = wedge_guest::parse_config(config)?;
        if config.timeout_ms == 0 {
            return Err("invalid config: timeout_ms must be positive".to_string());
        }
        Ok(ModbusRtu {
            config,
            devices: HashMap::new(),
            buses: HashMap::new(),
        })
    }

    fn add_device(&mut self, device: Device) -> Result<(), String> {
        let pc: ProtocolConfig = device.protocol_config_as()?;
        let line = pc.check(&device.id, self.config.timeout_ms)?;
        // One line, one setting: a slave set up differently would see only noise.
        if let Some((other, _)) = self.devices.iter().find(|(id, d)| {
            **id != device.id && d.line.path == line.path && d.line.settings != line.settings
        }) {
            return Err(format!(
                "device {}: {} is used at {} by device {other}, not at {}",
                device.id,
                line.path,
                describe(&self.devices[other].line.settings),
                describe(&line.settings)
            ));
        }
        let points = Point::parse_all(&device.id, device.properties)?;
        wedge_guest::info!(
            "device {} on {} ({}) slave {} with {} properties",
            device.id,
            line.path,
            describe(&line.settings),
            line.slave_id,
            points.len()
        );
        let path = line.path.clone();
        let settings = line.settings;
        self.devices.insert(
            device.id,
            RtuDevice {
                line,
                points,
                reported_state: None,
            },
        );
        // A line only this device used may have changed its settings: set it up anew.
        if self
            .buses
            .get(&path)
            .is_none_or(|b| *b.settings() != settings)
        {
            self.buses.insert(path.clone(), Bus::new(&path, settings));
        }
        self.close_unused_lines();
        Ok(())
    }

    fn remove_device(&mut self, id: &str) {
        if self.devices.remove(id).is_some() {
            self.close_unused_lines();
            wedge_guest::info!("device {id} removed");
        }
    }

    fn poll(&mut self, id: &str, properties: &[String]) -> Result<(), String> {
        let dev = self
            .devices
            .get_mut(id)
            .ok_or_else(|| format!("unknown device {id}"))?;
        let mut first_error: Option<String> = None;
        for point in &dev.points {
            if !properties.contains(&point.property.name) {
                continue;
            }
            let name = point.name();
            let value = match dev.call(&mut self.buses, &point.visitor.read_request()) {
                Ok(response) => point.visitor.decode_response(point.kind, response),
                Err(e) if e.breaks_connection() => {
                    // Silent or garbled: the other properties (and the other slaves on the
                    // line, waiting for this call) would only wait too.
                    let message = format!(
                        "device {id} ({} slave {}): read {name}: {e}",
                        dev.line.path, dev.line.slave_id
                    );
                    dev.set_state(id, DeviceState::Offline);
                    return Err(message);
                }
                Err(e) => Err(e.to_string()),
            };
            if let Err(e) =
                value.and_then(|v| report::actual(id, name, v).map_err(|e| format!("report: {e}")))
            {
                wedge_guest::warn!("{id}/{name}: {e}");
                first_error.get_or_insert(format!("{name}: {e}"));
            }
        }
        dev.set_state(id, DeviceState::Online);
        first_error.map_or(Ok(()), |e| Err(format!("device {id}: {e}")))
    }

    fn write_property(&mut self, id: &str, property: &str, value: TwinValue) -> Result<(), String> {
        let dev = self
            .devices
            .get_mut(id)
            .ok_or_else(|| format!("unknown device {id}"))?;
        let point = dev
            .points
            .iter()
            .find(|p| p.property.name == property)
            .ok_or_else(|| format!("device {id} has no property {property}"))?;
        let request = point
            .visitor
            .write_request(point.kind, &value)
            .map_err(|e| format!("{id}/{property}: {e}"))?;
        match dev.call(&mut self.buses, &request) {
            Ok(_) => {
                dev.set_state(id, DeviceState::Online);
                wedge_guest::debug!("{id}/{property} written: {value}");
                Ok(())
            }
            Err(e) => {
                if e.breaks_connection() {
                    dev.set_state(id, DeviceState::Offline);
                }
                Err(format!("{id}/{property}: write {value}: {e}"))
            }
        }
    }
}

wedge_guest::export_mapper!(ModbusRtu);
