//! Hook reviews do not serialise devices: while a slow review holds one device's update,
//! another device's update is answered, and the held device's later update waits its turn.

#[allow(dead_code, unused_imports)]
mod common;

use std::time::Duration;

use common::{NODE, Node};
use wedge_devicetwin::settings::DeviceTwinSettings;

const SEED: &str = r#"
INSERT INTO device (id, name, description, state, last_online)
    VALUES ('default/slow', 'slow', '', 'online', ''), ('default/fast', 'fast', '', 'online', '');
INSERT INTO device_twin (deviceid, name, description, expected, actual, expected_meta,
        actual_meta, expected_version, actual_version, optional, attr_type, metadata)
    VALUES ('default/slow', 'temperature', '', '25', '20', '{"timestamp":1}', '{"timestamp":1}',
        '{"cloud":1,"edge":0}', '{"cloud":0,"edge":3}', 1, 'int', '{}'),
           ('default/fast', 'temperature', '', '25', '20', '{"timestamp":1}', '{"timestamp":1}',
        '{"cloud":1,"edge":0}', '{"cloud":0,"edge":3}', 1, 'int', '{}');
"#;

fn update(event: &str, value: u32) -> String {
    format!(
        r#"{{"event_id":"{event}","timestamp":1700000000100,"twin":{{"temperature":{{"actual":{{"value":"{value}"}},"metadata":{{"type":"int"}}}}}}}}"#
    )
}

#[tokio::test]
async fn a_slow_review_holds_up_only_its_own_device() {
    let dir = tempfile::tempdir().unwrap();
    let mut node = Node::start(dir.path(), DeviceTwinSettings::new(NODE), SEED).await;
    node.hooks
        .stall_reviews("default/slow", Duration::from_millis(500));
    let topic = |d: &str| format!("$hw/events/device/default/{d}/twin/update");
    node.mqtt(&topic("slow"), &update("slow-1", 21)).await;
    node.mqtt(&topic("fast"), &update("fast-1", 22)).await;
    node.mqtt(&topic("slow"), &update("slow-2", 23)).await;
    let mut results = Vec::new();
    while results.len() < 3 {
        let published = node.next_publish().await;
        if published.topic.ends_with("/twin/update/result") {
            assert!(published.field("code").is_null(), "{published:?}");
            results.push(published.event_id());
        }
    }
    assert_eq!(results, ["fast-1", "slow-1", "slow-2"]);
    let stored: String = node
        .db()
        .query_row(
            "SELECT actual FROM device_twin WHERE deviceid = 'default/slow'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(stored, "23");
    node.stop().await;
}
