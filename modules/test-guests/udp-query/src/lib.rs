//! Test guest (a mapper, protocol `udp-query`): for each property due, `poll` sends the
//! property's name as one datagram to the device's `address` (`protocol-config`
//! `{"address":"127.0.0.1:7000"}`) and reports the text of the answer as the value.

use std::collections::HashMap;
use std::time::Duration;

use serde::Deserialize;
use wedge_guest::net::UdpSocket;
use wedge_guest::{Device, Mapper, TwinValue, report};

#[derive(Deserialize)]
struct ProtocolConfig {
    address: String,
}

#[derive(Default)]
struct UdpQuery {
    sockets: HashMap<String, UdpSocket>,
}

impl Mapper for UdpQuery {
    fn init(_config: &str) -> Result<Self, String> {
        Ok(UdpQuery::default())
    }

    fn add_device(&mut self, device: Device) -> Result<(), String> {
        let config: ProtocolConfig = device.protocol_config_as()?;
        let socket = UdpSocket::connect(&config.address).map_err(|e| e.to_string())?;
        self.sockets.insert(device.id, socket);
        Ok(())
    }

    fn remove_device(&mut self, id: &str) {
        self.sockets.remove(id);
    }

    fn poll(&mut self, device: &str, properties: &[String]) -> Result<(), String> {
        let socket = self
            .sockets
            .get(device)
            .ok_or_else(|| format!("unknown device {device}"))?;
        for property in properties {
            socket
                .send(property.as_bytes(), Duration::from_millis(200))
                .map_err(|e| e.to_string())?;
            let answer = socket
                .recv(512, Duration::from_millis(500))
                .map_err(|e| e.to_string())?;
            let text = String::from_utf8_lossy(&answer).into_owned();
            report::actual(device, property, TwinValue::Text(text))?;
        }
        Ok(())
    }

    fn write_property(
        &mut self,
        _device: &str,
        _property: &str,
        _value: TwinValue,
    ) -> Result<(), String> {
        Err("test-udp-query: read-only".to_owned())
    }
}

wedge_guest::export_mapper!(UdpQuery);
