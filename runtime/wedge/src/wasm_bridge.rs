//! What the Wasm host's guests reach on this node, bridged onto the bus.
//!
//! Guests call these from their own threads inside a Wasm call, so they never wait: a full
//! mailbox or a module that is not running is an error returned to the guest.

use std::sync::Arc;

use wedge_core::message::{group, module, operation};
use wedge_core::{Bus, BusError, Content, Message};
use wedge_wasm::{DeviceState, HostServices, MapperSink, Publisher, TwinValue};

/// Source name of messages the Wasm host puts on the bus.
pub const WASM_SOURCE: &str = "wasm";

struct BusBridge {
    bus: Bus,
}

fn refused(target: &str, e: BusError) -> String {
    match e {
        BusError::UnknownModule(_) => format!("no {target} module runs on this node"),
        other => format!("{target} did not take the message: {other}"),
    }
}

impl Publisher for BusBridge {
    fn publish(&self, module_name: &str, topic: &str, payload: Vec<u8>) -> Result<(), String> {
        let text = String::from_utf8(payload)
            .map_err(|_| "MQTT payloads from modules must be UTF-8 text".to_owned())?;
        let mut msg = Message::build(
            WASM_SOURCE,
            group::BUS,
            operation::PUBLISH,
            topic,
            Content::string(text),
        );
        msg.header.message_type = module_name.to_owned();
        self.bus
            .try_send(module::EVENTBUS, msg)
            .map_err(|e| refused("eventbus (MQTT)", e))
    }
}

impl BusBridge {
    /// Hands devicetwin what a mapper would publish on `$hw/events/device/<id>/<suffix>`, so
    /// a Wasm report takes exactly the path of an MQTT one.
    fn to_twin(
        &self,
        mapper: &str,
        device: &str,
        suffix: &str,
        payload: serde_json::Value,
    ) -> Result<(), String> {
        let topic = format!("$hw/events/device/{device}/{suffix}");
        let mut msg = Message::build(
            WASM_SOURCE,
            group::TWIN,
            operation::UPDATE,
            &topic,
            Content::string(payload.to_string()),
        );
        msg.header.message_type = mapper.to_owned();
        self.bus
            .try_send(module::TWIN, msg)
            .map_err(|e| refused("devicetwin", e))
    }
}

impl MapperSink for BusBridge {
    fn report_actual(
        &self,
        mapper: &str,
        device: &str,
        property: &str,
        value: TwinValue,
    ) -> Result<(), String> {
        let payload = serde_json::json!({
            "event_id": "",
            "timestamp": wedge_core::time::now_ms(),
            "twin": { property: {
                "actual": { "value": value.to_kubeedge() },
                "metadata": { "type": value.kubeedge_type() },
            }},
        });
        self.to_twin(mapper, device, "twin/update", payload)
    }

    fn report_state(&self, mapper: &str, device: &str, state: DeviceState) -> Result<(), String> {
        let payload = serde_json::json!({
            "event_id": "",
            "timestamp": wedge_core::time::now_ms(),
            "state": state.as_str(),
        });
        self.to_twin(mapper, device, "state/update", payload)
    }
}

/// The services guests of this node get.
pub fn services(bus: &Bus) -> HostServices {
    let bridge = Arc::new(BusBridge { bus: bus.clone() });
    HostServices {
        publisher: bridge.clone(),
        mapper_sink: bridge,
    }
}
