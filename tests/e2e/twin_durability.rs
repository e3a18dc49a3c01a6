//! kill -9 of `wedge run` in the middle of a stream of twin updates: every update whose result
//! was published must be in SQLite after the restart.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rusqlite::{Connection, OpenFlags};
use wedge_tests::mqtt::MqttClient;
use wedge_tests::node::{Broker, TwinNode};
use wedge_tests::twin_fixtures::load_devices;

const DEVICES: usize = 20;

#[test]
fn every_published_result_survives_kill_9() {
    let dir = tempfile::tempdir().unwrap();
    let mut node = TwinNode::start(dir.path(), Broker::Embedded, &load_devices(DEVICES)).unwrap();

    // Highest value per device whose result was published.
    let acknowledged: Arc<Mutex<HashMap<String, i64>>> = Arc::default();
    let mut results = MqttClient::connect(node.mqtt_port, "results").unwrap();
    results
        .subscribe("$hw/events/device/+/+/twin/update/result")
        .unwrap();
    let publisher = MqttClient::connect(node.mqtt_port, "publisher").unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let stream = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut value = 0_i64;
            while !stop.load(Ordering::Relaxed) {
                value += 1;
                for i in 0..DEVICES {
                    let payload = format!(
                        r#"{{"event_id":"{i}-{value}","timestamp":1,"twin":{{"temperature":{{"actual":{{"value":"{value}"}},"metadata":{{"type":"int"}}}}}}}}"#
                    );
                    if publisher
                        .publish(
                            &format!("$hw/events/device/default/load-{i}/twin/update"),
                            payload,
                        )
                        .is_err()
                    {
                        return value;
                    }
                }
                std::thread::sleep(Duration::from_millis(1));
            }
            value
        })
    };

    // Collect results for a while, then kill the node while updates keep coming.
    let collect = |results: &mut MqttClient, window: Duration| {
        for (topic, payload) in results.drain(window) {
            let v: serde_json::Value = serde_json::from_str(&payload).unwrap();
            if v.get("code").is_some() {
                panic!("error result on {topic}: {payload}");
            }
            let device = topic
                .trim_start_matches("$hw/events/device/")
                .trim_end_matches("/twin/update/result")
                .to_owned();
            let value: i64 = v["twin"]["temperature"]["actual"]["value"]
                .as_str()
                .unwrap()
                .parse()
                .unwrap();
            let mut acked = acknowledged.lock().unwrap();
            let slot = acked.entry(device).or_default();
            *slot = (*slot).max(value);
        }
    };
    let started = Instant::now();
    collect(&mut results, Duration::from_millis(1500));
    node.daemon.signal(libc::SIGKILL).unwrap();
    node.daemon.wait_exit(Duration::from_secs(5)).unwrap();
    // Results already on the wire when the process died still count.
    collect(&mut results, Duration::from_millis(300));
    stop.store(true, Ordering::Relaxed);
    let sent = stream.join().unwrap();
    let acked = acknowledged.lock().unwrap().clone();
    let answered: i64 = acked.values().sum();
    assert!(
        answered > 100,
        "too few results to test anything ({answered} in {:?}, {sent} rounds sent)",
        started.elapsed()
    );

    node.restart().unwrap();
    let db = Connection::open_with_flags(&node.db, OpenFlags::SQLITE_OPEN_READ_ONLY).unwrap();
    for (device, value) in &acked {
        let stored: String = db
            .query_row(
                "SELECT actual FROM device_twin WHERE deviceid = ?1 AND name = 'temperature'",
                [device],
                |r| r.get(0),
            )
            .unwrap();
        let stored: i64 = stored.parse().unwrap();
        assert!(
            stored >= *value,
            "{device}: result for value {value} was published, but SQLite holds {stored}"
        );
    }
}
