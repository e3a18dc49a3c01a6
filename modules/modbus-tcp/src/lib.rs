//! `modbus-tcp`: a mapper (protocol `modbus-tcp`) that speaks Modbus TCP to its devices
//! through `wedge_guest::net::TcpStream`; the MBAP framing lives in [`mbap`], the PDUs and the
//! value encoding in `modbus-core` (shared with `modbus-rtu`).
//!
//! Device `protocol-config`: `{"address":"127.0.0.1:1502","slave_id":1,"timeout_ms":1000}`
//! (`address` is `ip:port` or `host:port`, which the manifest's `capabilities.endpoints` must
//! grant; `slave_id` defaults to 1, `timeout_ms` to the module config's, itself 1000 by
//! default).
//! Property `visitor`: `{"register":"HoldingRegister"|"InputRegister"|"Coil"|"DiscreteInput",
//! "offset":N,"limit":1|2,"scale":1.0,"swap_words":false,"format":"uint"|"int"|"float"}`
//! (`format` defaults to `float` for a 32-bit float property, else `uint`).
//!
//! `poll` reads every property that is due (its own collect cycle, if any) and reports it;
//! `write_property` writes coils and holding registers. A connection that failed (I/O or
//! framing error) is dropped and made again on the next call; the device is reported
//! `offline` then, and `online` again once it answers.

pub mod mbap;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::Duration;

use modbus_core::pdu::{Error, Request, Response};
use modbus_core::point::Point;
use serde::Deserialize;
use wedge_guest::net::TcpStream;
use wedge_guest::{Device, DeviceState, Mapper, TwinValue, report};

use crate::mbap::Client;

#[derive(Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
struct ModuleConfig {
    /// Default connect/read/write timeout of a device, in milliseconds.
    timeout_ms: u64,
}

impl Default for ModuleConfig {
    fn default() -> Self {
        ModuleConfig { timeout_ms: 1000 }
    }
}

#[derive(Debug, Deserialize)]
struct ProtocolConfig {
    address: String,
    #[serde(default = "default_slave", alias = "slaveID", alias = "slave")]
    slave_id: u8,
    timeout_ms: Option<u64>,
}

fn default_slave() -> u8 {
    1
}

struct ModbusDevice {
    address: String,
    slave_id: u8,
    timeout: Duration,
    points: Vec<Point>,
    client: Option<Client<TcpStream>>,
    reported_state: Option<DeviceState>,
}

impl ModbusDevice {
    /// Runs one request, connecting first if needed; drops the connection when it broke.
    fn call(&mut self, request: &Request) -> Result<Response, Error> {
        if self.client.is_none() {
            let mut stream = TcpStream::connect(&self.address, self.timeout)?;
            stream.set_read_timeout(Some(self.timeout))?;
            stream.set_write_timeout(Some(self.timeout))?;
            self.client = Some(Client::new(stream, self.slave_id));
        }
        let client = self.client.as_mut().expect("connected above");
        let result = client.call(request);
        if result.as_ref().is_err_and(Error::breaks_connection) {
            self.client = None;
        }
        result
    }

    fn set_state(&mut self, id: &str, state: DeviceState) {
        if self.reported_state != Some(state) {
            match report::state(id, state) {
                Ok(()) => self.reported_state = Some(state),
                Err(e) => wedge_guest::warn!("report state of {id}: {e}"),
            }
        }
    }
}

struct ModbusTcp {
    config: ModuleConfig,
    devices: HashMap<String, ModbusDevice>,
}

impl Mapper for ModbusTcp {
    fn init(config: &str) -> Result<Self, String> {
        let config: ModuleConfig = wedge_guest::parse_config(config)?;
        if config.timeout_ms == 0 {
            return Err("invalid config: timeout_ms must be positive".to_string());
        }
        Ok(ModbusTcp {
            config,
            devices: HashMap::new(),
        })
    }

    fn add_device(&mut self, device: Device) -> Result<(), String> {
        let pc: ProtocolConfig = device.protocol_config_as()?;
        // `ip:port` or `host:port`; a name is looked up at each (re)connect, so a device that
        // moves to a new address follows its name.
        let address = pc.address.trim().to_owned();
        let valid = address.parse::<SocketAddr>().is_ok()
            || address
                .rsplit_once(':')
                .is_some_and(|(host, port)| !host.is_empty() && port.parse::<u16>().is_ok());
        if !valid {
            return Err(format!(
                "device {}: address {:?} is not ip:port or host:port",
                device.id, pc.address
            ));
        }
        let timeout_ms = pc.timeout_ms.unwrap_or(self.config.timeout_ms);
        if timeout_ms == 0 {
            return Err(format!("device {}: timeout_ms must be positive", device.id));
        }
        let points = Point::parse_all(&device.id, device.properties)?;
        wedge_guest::info!(
            "device {} at {address} unit {} with {} properties",
            device.id,
            pc.slave_id,
            points.len()
        );
        // Replacing a device drops its old connection.
        self.devices.insert(
            device.id,
            ModbusDevice {
                address,
                slave_id: pc.slave_id,
                timeout: Duration::from_millis(timeout_ms),
                points,
                client: None,
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
        let mut first_error: Option<String> = None;
        for i in 0..dev.points.len() {
            let p = &dev.points[i];
            if !properties.contains(&p.property.name) {
                continue;
            }
            let (name, kind, visitor) = (p.property.name.clone(), p.kind, p.visitor.clone());
            let value = match dev.call(&visitor.read_request()) {
                Ok(response) => visitor.decode_response(kind, response),
                Err(e) if e.breaks_connection() => {
                    // The device is unreachable: the other properties would only wait too.
                    dev.set_state(id, DeviceState::Offline);
                    return Err(format!("device {id} ({}): read {name}: {e}", dev.address));
                }
                Err(e) => Err(e.to_string()),
            };
            match value
                .and_then(|v| report::actual(id, &name, v).map_err(|e| format!("report: {e}")))
            {
                Ok(()) => {}
                Err(e) => {
                    wedge_guest::warn!("{id}/{name}: {e}");
                    first_error.get_or_insert(format!("{name}: {e}"));
                }
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
            .iter_mut()
            .find(|p| p.property.name == property)
            .ok_or_else(|| format!("device {id} has no property {property}"))?;
        let request = point
            .visitor
            .write_request(point.kind, &value)
            .map_err(|e| format!("{id}/{property}: {e}"))?;
        match dev.call(&request) {
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

wedge_guest::export_mapper!(ModbusTcp);
