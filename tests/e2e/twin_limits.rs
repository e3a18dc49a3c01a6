//! What local clients may take from the node, against `wedge run` (issue 15, rows 2 and 7):
//! an upload flood while the cloud is away cannot take the outbox places twin changes need,
//! a twin update whose cloud message cannot be stored is refused instead of answered
//! success, and no client can grow a device's twins without end.

use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use serde_json::Value;
use wedge_tests::cloud_node::{CloudNode, NodeOptions};
use wedge_tests::cloudhub::{CloudHub, CloudHubOptions};
use wedge_tests::mqtt::MqttClient;

const WAIT: Duration = Duration::from_secs(15);
const DEVICE: &str = "$hw/events/device/default/thermo-1";

fn update(event: &str, twins: &[(String, String)]) -> String {
    let twin: serde_json::Map<String, Value> = twins
        .iter()
        .map(|(k, v)| {
            (
                k.clone(),
                serde_json::json!({"actual": {"value": v}, "metadata": {"type": "string"}}),
            )
        })
        .collect();
    serde_json::json!({"event_id": event, "timestamp": 1, "twin": twin}).to_string()
}

/// Publishes one twin update and returns its result.
fn round_trip(mapper: &mut MqttClient, event: &str, twins: &[(String, String)]) -> Result<Value> {
    mapper.publish(&format!("{DEVICE}/twin/update"), update(event, twins))?;
    let result = mapper.expect(&format!("{DEVICE}/twin/update/result"), WAIT)?;
    let result: Value = serde_json::from_str(&result)?;
    if result["event_id"] != event {
        bail!("result of another update: {result}");
    }
    Ok(result)
}

/// The device's twins as `twin/get` answers them.
fn twin_get(mapper: &mut MqttClient) -> Result<Value> {
    mapper.publish(&format!("{DEVICE}/twin/get"), r#"{"event_id":"get"}"#)?;
    let got = mapper.expect(&format!("{DEVICE}/twin/get/result"), WAIT)?;
    Ok(serde_json::from_str::<Value>(&got)?["twin"].clone())
}

fn wait_metric(node: &CloudNode, name: &str, done: impl Fn(f64) -> bool) -> Result<f64> {
    let deadline = Instant::now() + WAIT;
    loop {
        let value = node.metric(name)?;
        if done(value) {
            return Ok(value);
        }
        if Instant::now() >= deadline {
            bail!("{name} is {value}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn an_upload_flood_leaves_twin_updates_their_outbox_places_and_a_full_outbox_refuses_them() {
    let mut hub = CloudHub::start(CloudHubOptions {
        require_node_cn: true,
        ..CloudHubOptions::default()
    })
    .unwrap();
    let node = CloudNode::start_with(
        &hub,
        NodeOptions {
            wedge_extra: "  outbox:\n    maxMessages: 60\n    relayedPercent: 50\n",
            ..NodeOptions::default()
        },
    )
    .unwrap();
    hub.wait_connected(WAIT).unwrap();
    let mut mapper = MqttClient::connect(node.mqtt_port, "limits-mapper").unwrap();
    mapper.subscribe(&format!("{DEVICE}/twin/#")).unwrap();
    // Sent while connected: the cloud has it.
    let first = round_trip(&mut mapper, "before", &[("temperature".into(), "1".into())]).unwrap();
    assert!(first.get("code").is_none(), "{first}");
    wait_metric(&node, "wedge_edgehub_outbox_messages", |n| n == 0.0).unwrap();

    hub.stop();
    wait_metric(&node, "wedge_edgehub_connected", |n| n == 0.0).unwrap();
    // Any client of the broker floods uploads: they take their share and no more.
    let flooder = MqttClient::connect(node.mqtt_port, "flooder").unwrap();
    for i in 0..200 {
        flooder
            .publish("$hw/events/upload/flood", format!(r#"{{"n":{i}}}"#))
            .unwrap();
    }
    wait_metric(&node, "wedge_edgehub_outbox_relayed_refused_total", |n| {
        n >= 170.0
    })
    .unwrap();
    assert_eq!(
        node.metric("wedge_edgehub_outbox_relayed_messages")
            .unwrap(),
        30.0
    );

    // Twin updates still find room; once the outbox is full they are refused, never answered
    // success while the cloud will not hear of them.
    let mut stored = Vec::new();
    let mut refused = None;
    for i in 0..40 {
        let event = format!("offline-{i}");
        let result = round_trip(
            &mut mapper,
            &event,
            &[("temperature".into(), i.to_string())],
        )
        .unwrap();
        match (&result.get("code"), &refused) {
            (None, None) => stored.push(i),
            (None, Some(_)) => panic!("a success after a refusal: {result}"),
            (Some(code), _) => {
                assert_eq!(*code, 500, "{result}");
                let reason = result["reason"].as_str().unwrap_or_default();
                assert!(reason.contains("outbox is full"), "{result}");
                refused.get_or_insert(i);
            }
        }
    }
    assert!(
        stored.len() >= 25,
        "the uploads took the twin updates' places: {stored:?}"
    );
    let refused = refused.expect("a full outbox refuses twin updates");
    assert_eq!(
        node.metric("wedge_edgehub_outbox_messages").unwrap(),
        60.0,
        "full"
    );
    // A refused update changed nothing: the twin holds the last stored value.
    let twins = twin_get(&mut mapper).unwrap();
    let last = stored.last().copied().unwrap_or_default().to_string();
    assert_eq!(
        twins["temperature"]["actual"]["value"], last,
        "refused update {refused} left the twin at {last}: {twins}"
    );
    assert!(
        node.metric("wedge_devicetwin_cloud_refused_total").unwrap() >= 1.0,
        "counted"
    );

    // The cloud returns: every stored update reaches it, none of the refused ones.
    hub.restart().unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let values = loop {
        let values: Vec<String> = hub
            .received()
            .into_iter()
            .filter_map(|r| r.message)
            .filter(|m| m.route.resource.ends_with("thermo-1/twin/edge_updated"))
            .filter_map(|m| {
                let v: Value = serde_json::from_str(m.content.raw()).ok()?;
                v["twin"]["temperature"]["actual"]["value"]
                    .as_str()
                    .map(str::to_owned)
            })
            .collect();
        if values.last() == Some(&last) || Instant::now() >= deadline {
            break values;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    for i in &stored {
        assert!(values.contains(&i.to_string()), "{i} missing: {values:?}");
    }
    assert!(
        !values.contains(&refused.to_string()),
        "a refused update reached the cloud: {values:?}"
    );
}

#[test]
fn no_client_grows_a_device_past_its_twin_cap_and_twin_get_still_answers() {
    let hub = CloudHub::start(CloudHubOptions::default()).unwrap();
    let node = CloudNode::start(&hub, "").unwrap();
    let mut mapper = MqttClient::connect(node.mqtt_port, "grower").unwrap();
    mapper.subscribe(&format!("{DEVICE}/twin/#")).unwrap();
    let mut accepted = 0;
    let mut refusal = None;
    // 100 new twins per update, 3,000 asked for: the default cap is 1,000 per device.
    for round in 0..30 {
        let twins: Vec<(String, String)> = (0..100)
            .map(|i| (format!("grow-{round}-{i}"), "x".to_owned()))
            .collect();
        let result = round_trip(&mut mapper, &format!("grow-{round}"), &twins).unwrap();
        match result.get("code") {
            None => accepted += 1,
            Some(_) => {
                refusal.get_or_insert(result);
            }
        }
    }
    let refusal = refusal.expect("the twin cap refuses");
    assert_eq!(refusal["code"], 400, "{refusal}");
    assert!(
        refusal["reason"]
            .as_str()
            .is_some_and(|r| r.contains("wedge.devices.maxTwinsPerDevice")),
        "{refusal}"
    );
    let twins = twin_get(&mut mapper).unwrap();
    let count = twins.as_object().map(|t| t.len()).unwrap_or(0);
    assert!(count <= 1000, "{count} twins");
    assert_eq!(
        count,
        2 + 100 * accepted,
        "the model's two twins and the accepted ones"
    );
    // Known twins still update at the cap.
    let known = round_trip(&mut mapper, "known", &[("grow-0-0".into(), "y".into())]).unwrap();
    assert!(known.get("code").is_none(), "{known}");
    assert!(node.metric("wedge_devicetwin_over_limit_total").unwrap() >= 1.0);
    println!(
        "twins on the device: {count}; node RSS {}",
        std::fs::read_to_string(format!("/proc/{}/status", node.daemon.pid()))
            .unwrap_or_default()
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .unwrap_or("?")
            .trim()
    );
}
