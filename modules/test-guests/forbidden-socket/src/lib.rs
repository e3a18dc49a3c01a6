//! Hostile test guest (a mapper, protocol `forbidden`): every `poll` connects to an endpoint
//! its manifest does not allow (config `endpoint`, default `127.0.0.1:9`) and returns the
//! error. Should the host let the connection through, `poll` fails with a message saying so.

use std::time::Duration;

use serde::Deserialize;
use wedge_guest::net::TcpStream;
use wedge_guest::{Device, Mapper, TwinValue};

#[derive(Deserialize)]
#[serde(default)]
struct Config {
    endpoint: String,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            endpoint: "127.0.0.1:9".to_string(),
        }
    }
}

struct ForbiddenSocket {
    endpoint: String,
}

impl Mapper for ForbiddenSocket {
    fn init(config: &str) -> Result<Self, String> {
        let config: Config = wedge_guest::parse_config(config)?;
        Ok(ForbiddenSocket {
            endpoint: config.endpoint,
        })
    }

    fn add_device(&mut self, _device: Device) -> Result<(), String> {
        Ok(())
    }

    fn remove_device(&mut self, _id: &str) {}

    fn poll(&mut self, _device: &str, _properties: &[String]) -> Result<(), String> {
        match TcpStream::connect(&self.endpoint, Duration::from_millis(50)) {
            Err(e) => Err(e.to_string()),
            Ok(_) => Err(format!(
                "test-forbidden-socket: connected to {}, but the manifest does not list it",
                self.endpoint
            )),
        }
    }

    fn write_property(
        &mut self,
        _device: &str,
        _property: &str,
        _value: TwinValue,
    ) -> Result<(), String> {
        Err("test-forbidden-socket: read-only".to_string())
    }
}

wedge_guest::export_mapper!(ForbiddenSocket);
