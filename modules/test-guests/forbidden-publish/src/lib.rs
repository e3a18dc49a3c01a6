//! Hostile test guest: every `on_update` publishes to a topic its manifest does not allow
//! (config `topic`, default `wedge/forbidden`) and rejects the update with the host's error
//! text, so a test can see the refusal. Should the host let the publish through, the update is
//! rejected with a message saying so.

use serde::Deserialize;
use wedge_guest::{TwinHandler, TwinUpdate, Verdict, publish};

#[derive(Deserialize)]
#[serde(default)]
struct Config {
    topic: String,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            topic: "wedge/forbidden".to_string(),
        }
    }
}

struct ForbiddenPublish {
    topic: String,
}

impl TwinHandler for ForbiddenPublish {
    fn init(config: &str) -> Result<Self, String> {
        let config: Config = wedge_guest::parse_config(config)?;
        Ok(ForbiddenPublish {
            topic: config.topic,
        })
    }

    fn on_update(&mut self, update: &TwinUpdate) -> Verdict {
        let payload = format!("{}/{}={}", update.device, update.property, update.value);
        match publish::send(&self.topic, payload) {
            Err(e) => Verdict::Reject(e),
            Ok(()) => Verdict::reject(format!(
                "test-forbidden-publish: publish to {} was allowed, but the manifest does not list it",
                self.topic
            )),
        }
    }
}

wedge_guest::export_twin_handler!(ForbiddenPublish);
