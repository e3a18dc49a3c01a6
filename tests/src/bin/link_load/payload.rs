//! The messages `link-load` sends: devicetwin's `edge_updated` as it goes to the cloud
//! (spec §5.5 S1), padded to a chosen content size.

use anyhow::{Context, Result};
use wedge_core::{Content, Message};

/// Devices the messages rotate over (a realistic resource mix, not one hot key).
const DEVICES: usize = 100;

/// Message `i` of a run: route `twin` / `resource` / `update` on
/// `device/default/thermo-<i % 100>/twin/edge_updated`, content an `edge_updated` result whose
/// reported value is padded so the content is `size` bytes (or as small as the JSON allows).
pub fn edge_updated(i: usize, size: usize, now_ms: i64) -> Result<Message> {
    // Distinct per message like devicetwin's fresh UUIDs, and the same length as one.
    let event_id = format!("00000000-0000-4000-8000-{i:012}");
    let build = |value: &str| {
        format!(
            r#"{{"event_id":"{event_id}","timestamp":{now_ms},"twin":{{"temperature":{{"actual":{{"value":"{value}","metadata":{{"timestamp":{now_ms}}}}},"optional":true,"metadata":{{"type":"string"}},"actual_version":{{"cloud":0,"edge":{edge}}}}}}}}}"#,
            edge = i + 1
        )
    };
    let bare = build("").len();
    let content = build(&"7".repeat(size.saturating_sub(bare)));
    Ok(Message::build(
        "twin",
        "resource",
        "update",
        &format!("device/default/thermo-{}/twin/edge_updated", i % DEVICES),
        Content::from_raw(content).context("edge_updated content is not JSON")?,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_has_the_requested_size_and_shape() {
        let m = edge_updated(7, 400, 1_700_000_000_000).unwrap();
        assert_eq!(m.content.raw().len(), 400);
        assert_eq!(
            m.route.resource,
            "device/default/thermo-7/twin/edge_updated"
        );
        let v: serde_json::Value = m.content.parse().unwrap();
        assert_eq!(v["twin"]["temperature"]["actual_version"]["edge"], 8);
        // Too small a size gives the bare message rather than failing.
        assert!(edge_updated(0, 10, 1).unwrap().content.raw().len() > 10);
    }
}
