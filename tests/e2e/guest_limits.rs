//! Guests cannot stall the node (issue 15, rows 12–16), against the real `wedge run` with real
//! guest components from `modules/test-guests/` (`stall`: a twin handler that sleeps in host
//! calls, floods the log and touches memory; `blocking-connect`: a mapper whose poll blocks
//! in a connect to a full accept queue). Timing figures come from `guest-bench`; these tests
//! check outcomes and order, with bounds far above the figures.

use std::time::{Duration, Instant};

use wedge_tests::hostile::{
    FullAcceptQueue, deploy, http, metric, repackage, result_of, round_trip, rss_kib, update,
};
use wedge_tests::mqtt::MqttClient;
use wedge_tests::node::TwinNode;

const WAIT: Duration = Duration::from_secs(10);

fn node(dir: &std::path::Path, wedge_extra: &str) -> TwinNode {
    wedge_tests::hostile::start_node(dir, wedge_extra).unwrap()
}

fn observer(node: &TwinNode) -> MqttClient {
    let mut mqtt = MqttClient::connect(node.mqtt_port, "observer").unwrap();
    mqtt.subscribe("$hw/events/device/#").unwrap();
    mqtt
}

fn deployed(node: &TwinNode, bytes: &[u8]) -> String {
    let (code, body, _) = deploy(node.admin_socket(), bytes, WAIT).unwrap();
    assert_eq!(code, 201, "deploy: {body}\n{}", node.daemon.log());
    body
}

/// Row 12: a handler asleep in a host call is stopped at its `call_timeout_ms`, its update
/// gets a 500 result naming the limit, and other devices are answered meanwhile.
#[test]
fn a_handler_asleep_in_a_host_call_is_stopped_at_its_deadline_while_other_devices_go_on() {
    let dir = tempfile::tempdir().unwrap();
    let node = node(dir.path(), "");
    let mut mqtt = observer(&node);

    // As in the issue: `call_timeout_ms` 100, a 60 s sleep.
    deployed(
        &node,
        &wedge_tests::guests::module_bytes("test-guests/stall"),
    );
    let started = Instant::now();
    update(&mqtt, "stall-0", "slow-1", "sleep").unwrap();
    let slow = result_of(&mut mqtt, "stall-0", "slow-1", WAIT).unwrap();
    let stalled = started.elapsed();
    assert_eq!(slow["code"], 500, "{slow}");
    assert!(
        slow["reason"]
            .as_str()
            .unwrap_or_default()
            .contains("time limit of 100 ms"),
        "{slow}"
    );
    assert!(
        stalled < Duration::from_secs(5),
        "the sleep was not cut: {stalled:?}"
    );

    // The instance was discarded; after its back-off a fresh one answers.
    std::thread::sleep(Duration::from_millis(200));
    let (_, ok) = round_trip(&mut mqtt, "stall-0", "after").unwrap();
    assert!(ok.get("code").is_none(), "{ok}\n{}", node.daemon.log());
    let (_, listing) = wedge_tests::http_get(node.admin_socket(), "/modules").unwrap();
    assert!(listing.contains("\"traps\":1"), "{listing}");

    // With a 2 s limit the stall is long enough to watch: other devices' round trips end
    // while it lasts, none waits for it.
    let two_seconds = repackage("test-guests/stall", |m| m.limits.call_timeout_ms = 2000).unwrap();
    deployed(&node, &two_seconds);
    let started = Instant::now();
    update(&mqtt, "stall-0", "slow-2", "sleep").unwrap();
    std::thread::sleep(Duration::from_millis(50));
    for i in 1..=3 {
        let (took, result) =
            round_trip(&mut mqtt, &format!("free-{i}"), &format!("free-{i}")).unwrap();
        assert!(result.get("code").is_none(), "{result}");
        assert!(
            took < Duration::from_millis(1000),
            "free-{i} waited {took:?}"
        );
    }
    let others_done = started.elapsed();
    let slow = result_of(&mut mqtt, "stall-0", "slow-2", WAIT).unwrap();
    let stalled = started.elapsed();
    assert_eq!(slow["code"], 500, "{slow}");
    assert!(
        others_done < stalled && stalled >= Duration::from_millis(1900),
        "others done at {others_done:?}, the stall ended at {stalled:?}"
    );
}

/// Row 13: a mapper blocked in `connect` to a full accept queue does not hold up its removal
/// nor the daemon's shutdown.
#[test]
fn a_mapper_blocked_in_connect_is_removed_and_shut_down_without_waiting_for_it() {
    let queue = FullAcceptQueue::new().unwrap();
    let endpoint = queue.addr.to_string();
    let bytes = repackage("test-guests/blocking-connect", |m| {
        m.capabilities.endpoints = vec![endpoint.clone()];
        m.config = serde_json::json!({ "endpoint": endpoint });
    })
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut node = node(dir.path(), "");

    let blocked = |node: &TwinNode| {
        deployed(node, &bytes);
        // add-device, then a poll that blocks in connect.
        let deadline = Instant::now() + WAIT;
        loop {
            let calls = metric(
                node.admin,
                "wedge_wasm_module_calls_total",
                "test-blocking-connect",
            )
            .unwrap_or(0.0);
            if calls >= 2.0 {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "the mapper never polled:\n{}",
                node.daemon.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        std::thread::sleep(Duration::from_millis(300));
    };

    blocked(&node);
    // Still in the connect: no poll has ended.
    assert!(
        !node.daemon.log().contains("poll failed"),
        "{}",
        node.daemon.log()
    );
    let started = Instant::now();
    let (code, body) = http(
        node.admin_socket(),
        "DELETE",
        "/modules/test-blocking-connect",
        b"",
        Duration::from_secs(5),
    )
    .unwrap();
    assert_eq!(code, 204, "{body}\n{}", node.daemon.log());
    assert!(started.elapsed() < Duration::from_secs(5));

    blocked(&node);
    let started = Instant::now();
    node.daemon
        .stop(libc::SIGTERM, Duration::from_secs(5))
        .unwrap();
    assert!(started.elapsed() <= Duration::from_secs(5));
    assert!(
        node.daemon.log().contains("stopped"),
        "{}",
        node.daemon.log()
    );
}

/// Row 14: an `init` asleep in a host call is cut at the module's deadline and the deploy is
/// refused, while another deploy started after it completes first.
#[test]
fn a_slow_init_is_cut_at_its_deadline_and_other_deploys_do_not_wait_for_it() {
    let dir = tempfile::tempdir().unwrap();
    let node = node(dir.path(), "");
    let slow = repackage("test-guests/stall", |m| {
        m.name = "test-slow-init".into();
        m.limits.call_timeout_ms = 3000;
        m.config["init_sleep_ms"] = 120_000.into();
    })
    .unwrap();
    let quick = wedge_tests::guests::module_bytes("test-guests/stall");
    let admin = node.admin_socket();
    let slow_admin = admin.clone();
    let slow_deploy =
        std::thread::spawn(move || deploy(slow_admin, &slow, Duration::from_secs(30)));
    std::thread::sleep(Duration::from_millis(300));
    let (code, body, quick_took) = deploy(admin.clone(), &quick, Duration::from_secs(30)).unwrap();
    let (slow_code, slow_body, slow_took) = slow_deploy.join().unwrap().unwrap();
    assert_eq!(code, 201, "{body}");
    assert!(
        quick_took < slow_took,
        "the quick deploy waited for the slow init: {quick_took:?} vs {slow_took:?}"
    );
    assert!(slow_code >= 400, "{slow_code} {slow_body}");
    assert!(slow_body.contains("time limit of 3000 ms"), "{slow_body}");
    assert!(slow_took < Duration::from_secs(20), "{slow_took:?}");
    let (_, listing) = wedge_tests::http_get(node.admin_socket(), "/modules").unwrap();
    assert!(!listing.contains("test-slow-init"), "{listing}");
}

/// Row 15: six handlers asking for 240 MiB each (and touching 200 MiB in `init`) against the
/// default 512 MiB budget: two are deployed, four refused naming the key; RSS stays bounded;
/// removing one makes room for another.
#[test]
fn deploys_past_the_node_guest_memory_budget_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let node = node(dir.path(), "");
    let hog = |i: usize| {
        repackage("test-guests/stall", |m| {
            m.name = format!("test-hog-{i}");
            m.limits.memory_mib = 240;
            m.limits.call_timeout_ms = 10_000;
            m.config["touch_mib"] = 200.into();
        })
        .unwrap()
    };
    let mut accepted = Vec::new();
    let mut refused = Vec::new();
    for i in 0..6 {
        let (code, body, _) =
            deploy(node.admin_socket(), &hog(i), Duration::from_secs(60)).unwrap();
        if code == 201 {
            accepted.push(i);
        } else {
            refused.push((code, body));
        }
    }
    assert_eq!(accepted, [0, 1], "{refused:?}");
    for (_, body) in &refused {
        assert!(body.contains("wedge.modules.memoryBudgetMiB"), "{body}");
        assert!(body.contains("480 MiB"), "{body}");
    }
    let rss_mib = rss_kib(node.daemon.pid()).unwrap() / 1024;
    assert!(rss_mib < 512 + 200, "RSS {rss_mib} MiB");
    let (code, body) = http(
        node.admin_socket(),
        "DELETE",
        "/modules/test-hog-0",
        b"",
        WAIT,
    )
    .unwrap();
    assert_eq!(code, 204, "{body}");
    let (code, body, _) = deploy(node.admin_socket(), &hog(5), Duration::from_secs(60)).unwrap();
    assert_eq!(code, 201, "{body}");
}

/// Row 16: a handler logging 1 MiB with newlines and forged lines per call: each line is cut
/// at `logLineBytes` with a marker, newlines are escaped, and past the module's rate lines
/// are dropped and counted.
#[test]
fn guest_log_lines_are_capped_escaped_and_rate_limited() {
    let dir = tempfile::tempdir().unwrap();
    let node = node(
        dir.path(),
        "  modules:\n    logLinesPerSecond: 1\n    logBurst: 10\n",
    );
    let mut mqtt = observer(&node);
    deployed(
        &node,
        &wedge_tests::guests::module_bytes("test-guests/stall"),
    );
    let before = node.daemon.log().len();
    for i in 0..20 {
        update(&mqtt, "stall-0", &format!("flood-{i}"), "flood").unwrap();
        let result = result_of(&mut mqtt, "stall-0", &format!("flood-{i}"), WAIT).unwrap();
        assert!(result.get("code").is_none(), "{result}");
    }
    let log = node.daemon.log();
    let grown = log.len() - before;
    // 10 lines of at most 4 KiB plus their prefix and marker, and the daemon's own lines.
    assert!(grown < 64 * 1024, "the log grew by {grown} bytes");
    assert!(log.contains("…[truncated: 1048"), "no truncation marker");
    assert!(log.contains("\\n2026-01-01T00:00:00Z  INFO wedge: forged line"));
    assert!(
        !log.lines().any(|l| l.starts_with("2026-01-01T00:00:00Z")),
        "a guest forged a log line"
    );
    let dropped = metric(
        node.admin,
        "wedge_wasm_log_lines_dropped_total",
        "test-stall",
    )
    .unwrap();
    assert!(dropped >= 5.0, "dropped {dropped}");
    let truncated = metric(
        node.admin,
        "wedge_wasm_log_lines_truncated_total",
        "test-stall",
    )
    .unwrap();
    assert!(truncated >= 10.0, "truncated {truncated}");
}
