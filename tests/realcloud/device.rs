//! Twin reports across a CloudCore outage: a mapper reports 100..109 over MQTT while CloudCore
//! is down for part of it; once it is back, the cloud's last written value (the DeviceStatus
//! object) must equal the edge's last value, which takes replaying the outbox oldest first.

use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use serde_json::json;
use wedge_tests::mqtt::MqttClient;
use wedge_tests::realcloud::wait_for;

use crate::Bed;

/// The Device object's name (and so its DeviceStatus's).
const DEVICE: &str = "rc-thermo-1";

/// Its id on the node (namespaced since KubeEdge v1.15), as mappers name it in topics.
const DEVICE_ID: &str = "default/rc-thermo-1";

fn report(value: u32) -> String {
    json!({
        "event_id": format!("rc-{value}"),
        "timestamp": 0,
        "twin": {"temperature": {"actual": {"value": value.to_string()}, "metadata": {"type": "int"}}}
    })
    .to_string()
}

/// The `temperature` value the cloud holds in the device's DeviceStatus, if any.
fn cloud_value(bed: &Bed) -> Result<Option<String>> {
    let Some(status) = bed.cloud.get_opt(&["devicestatus", DEVICE])? else {
        return Ok(None);
    };
    Ok(status["status"]["twins"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|t| t["propertyName"] == "temperature")
        .and_then(|t| t["reported"]["value"].as_str())
        .map(str::to_owned))
}

/// `Some` once the cloud holds `value`; an error naming what it holds otherwise.
fn cloud_at(bed: &Bed, value: &str) -> Result<Option<()>> {
    match cloud_value(bed)? {
        Some(v) if v == value => Ok(Some(())),
        other => anyhow::bail!("the cloud holds {other:?}"),
    }
}

/// The conformance check.
pub fn twin_reports_through_an_outage_end_at_the_edges_value(bed: &mut Bed) -> Result<()> {
    let path = wedge_tests::realcloud::shared_dir()?.join("realcloud/manifests/device.yaml");
    let yaml = std::fs::read_to_string(&path).with_context(|| path.display().to_string())?;
    bed.cloud.apply(&yaml.replace("__NODE__", &bed.node.name))?;
    let mut mapper = MqttClient::connect(bed.node.mqtt_port, "rc-mapper")?;
    let result = format!("$hw/events/device/{DEVICE_ID}/twin/update/result");
    mapper.subscribe(&result)?;
    let update = format!("$hw/events/device/{DEVICE_ID}/twin/update");
    // The device reaches the node through the cloud: until it does, an update is refused.
    wait_for("the device on the node", Duration::from_secs(60), || {
        mapper.publish(&update, report(99))?;
        let answer = mapper.expect(&result, Duration::from_secs(2))?;
        Ok((!answer.contains("\"code\"")).then_some(()))
    })?;
    for value in 100..104 {
        mapper.publish(&update, report(value))?;
        mapper.expect(&result, Duration::from_secs(5))?;
    }
    wait_for("103 in the cloud", Duration::from_secs(30), || {
        cloud_at(bed, "103")
    })?;
    bed.cloud.stop_cloudcore()?;
    let down = Instant::now();
    for value in 104..110 {
        mapper.publish(&update, report(value))?;
        let answer = mapper.expect(&result, Duration::from_secs(5))?;
        ensure!(
            !answer.contains("\"code\""),
            "update {value} refused: {answer}"
        );
        std::thread::sleep(Duration::from_millis(300));
    }
    // A 30 s outage, as in the issue.
    std::thread::sleep(Duration::from_secs(30).saturating_sub(down.elapsed()));
    bed.cloud.up()?;
    let back = Instant::now();
    wait_for("109 in the cloud", Duration::from_secs(60), || {
        cloud_at(bed, "109")
    })?;
    println!(
        "    cloud at the edge's value 109 {:.1?} after CloudCore's restart",
        back.elapsed()
    );
    // And it stays there: nothing older arrives after the newest.
    std::thread::sleep(Duration::from_secs(5));
    let last = cloud_value(bed)?;
    ensure!(
        last.as_deref() == Some("109"),
        "the cloud ended at {last:?}, the edge at 109"
    );
    Ok(())
}
