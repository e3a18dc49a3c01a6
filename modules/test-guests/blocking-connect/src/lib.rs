//! Hostile test guest (a mapper, protocol `blocking`): every `poll` connects to `endpoint`
//! (config) with a 10-minute timeout. Pointed at a listener whose accept queue is full, the
//! connect never completes: the guest waits in a host call for as long as the host lets it.

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
            endpoint: "127.0.0.1:1".to_string(),
        }
    }
}

struct BlockingConnect {
    endpoint: String,
}

impl Mapper for BlockingConnect {
    fn init(config: &str) -> Result<Self, String> {
        let config: Config = wedge_guest::parse_config(config)?;
        Ok(BlockingConnect {
            endpoint: config.endpoint,
        })
    }

    fn add_device(&mut self, _device: Device) -> Result<(), String> {
        Ok(())
    }

    fn remove_device(&mut self, _id: &str) {}

    fn poll(&mut self, _device: &str, _properties: &[String]) -> Result<(), String> {
        match TcpStream::connect(&self.endpoint, Duration::from_secs(600)) {
            Ok(_) => Err(format!(
                "test-blocking-connect: connected to {}",
                self.endpoint
            )),
            Err(e) => Err(e.to_string()),
        }
    }

    fn write_property(
        &mut self,
        _device: &str,
        _property: &str,
        _value: TwinValue,
    ) -> Result<(), String> {
        Err("test-blocking-connect: read-only".to_string())
    }
}

wedge_guest::export_mapper!(BlockingConnect);
