//! `guest-bench`: what hostile guests cost a running `wedge run` (issue 15, rows 12–16), as
//! figures. Each scenario starts its own node and uses the guests of
//! `modules/test-guests/` (`stall`, `blocking-connect`), built as the tests build them.
//!
//! - row 12: how long an update whose handler sleeps in a host call waits for its result
//!   (limit 100 ms), and the round trips of other devices while a handler sleeps (limit
//!   `--stall-ms`), against the same round trips with no stall;
//! - row 13: `DELETE /modules/...` and SIGTERM-to-exit with a mapper blocked in `connect`;
//! - row 14: a deploy whose `init` sleeps (limit 3 s), and one started 300 ms after it;
//! - row 15: RSS after six 240 MiB handlers (each touching 200 MiB) against the default
//!   512 MiB budget;
//! - row 16: log bytes written for 20 updates each logging 1 MiB, with the default limits.
//!
//! Needs a built `wedge` binary of the same profile (`cargo build --release -p wedge -p
//! wedge-tests --bins`).

use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use clap::Parser;
use wedge_tests::guests::module_bytes;
use wedge_tests::hostile::{
    FullAcceptQueue, deploy, http, metric, repackage, result_of, round_trip, rss_kib, update,
};
use wedge_tests::mqtt::MqttClient;
use wedge_tests::node::TwinNode;

/// Figures of hostile guests against a running node.
#[derive(Parser)]
struct Args {
    /// The handler's limit while other devices' round trips are measured, in ms.
    #[arg(long, default_value_t = 2000)]
    stall_ms: u32,
    /// Round trips measured with and without a stall.
    #[arg(long, default_value_t = 50)]
    round_trips: usize,
}

const WAIT: Duration = Duration::from_secs(30);

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// p50, p99 and max of `samples`, in ms.
fn spread(mut samples: Vec<Duration>) -> String {
    samples.sort();
    let at =
        |q: f64| samples[((samples.len() as f64 * q).ceil() as usize).clamp(1, samples.len()) - 1];
    format!(
        "p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms ({} round trips)",
        ms(at(0.5)),
        ms(at(0.99)),
        ms(at(1.0)),
        samples.len()
    )
}

fn start(dir: &std::path::Path, wedge_extra: &str) -> Result<(TwinNode, MqttClient)> {
    let node = wedge_tests::hostile::start_node(dir, wedge_extra)?;
    let mut mqtt = MqttClient::connect(node.mqtt_port, "bench")?;
    mqtt.subscribe("$hw/events/device/#")?;
    Ok((node, mqtt))
}

fn deployed(node: &TwinNode, bytes: &[u8]) -> Result<Duration> {
    let (code, body, took) = deploy(node.admin_socket(), bytes, WAIT)?;
    if code != 201 {
        bail!("deploy refused ({code}): {body}");
    }
    Ok(took)
}

fn row12(args: &Args) -> Result<()> {
    let dir = tempfile::tempdir()?;
    let (node, mut mqtt) = start(dir.path(), "")?;
    deployed(&node, &module_bytes("test-guests/stall"))?;
    let started = Instant::now();
    update(&mqtt, "stall-0", "slow", "sleep")?;
    let slow = result_of(&mut mqtt, "stall-0", "slow", WAIT)?;
    println!(
        "row 12: handler asleep 60 s in a host call, limit 100 ms: result {} after {:.1} ms",
        slow["code"],
        ms(started.elapsed())
    );

    let mut baseline = Vec::new();
    for i in 0..args.round_trips {
        baseline.push(round_trip(&mut mqtt, &format!("free-{}", i % 3 + 1), &format!("b{i}"))?.0);
    }
    let stall = args.stall_ms;
    deployed(
        &node,
        &repackage("test-guests/stall", |m| m.limits.call_timeout_ms = stall)?,
    )?;
    std::thread::sleep(Duration::from_millis(300));
    let started = Instant::now();
    update(&mqtt, "stall-0", "slow-2", "sleep")?;
    let mut during = Vec::new();
    let window = Duration::from_millis(u64::from(stall)) * 8 / 10;
    let mut i = 0;
    while started.elapsed() < window && during.len() < args.round_trips {
        during.push(round_trip(&mut mqtt, &format!("free-{}", i % 3 + 1), &format!("d{i}"))?.0);
        i += 1;
    }
    let slow = result_of(&mut mqtt, "stall-0", "slow-2", WAIT)?;
    println!(
        "row 12: other devices, no stall:              {}",
        spread(baseline)
    );
    println!(
        "row 12: other devices, handler asleep ({stall} ms): {}; the stalled update's result {} after {:.1} ms",
        spread(during),
        slow["code"],
        ms(started.elapsed())
    );
    Ok(())
}

fn row13() -> Result<()> {
    let queue = FullAcceptQueue::new()?;
    let endpoint = queue.addr.to_string();
    let bytes = repackage("test-guests/blocking-connect", |m| {
        m.capabilities.endpoints = vec![endpoint.clone()];
        m.config = serde_json::json!({ "endpoint": endpoint });
    })?;
    let dir = tempfile::tempdir()?;
    let (mut node, _mqtt) = start(dir.path(), "")?;
    let block = |node: &TwinNode| -> Result<()> {
        deployed(node, &bytes)?;
        let deadline = Instant::now() + WAIT;
        while metric(
            node.admin,
            "wedge_wasm_module_calls_total",
            "test-blocking-connect",
        )
        .unwrap_or(0.0)
            < 2.0
        {
            if Instant::now() > deadline {
                bail!("the mapper never polled");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        std::thread::sleep(Duration::from_millis(300));
        Ok(())
    };
    block(&node)?;
    let started = Instant::now();
    let (code, _) = http(
        node.admin_socket(),
        "DELETE",
        "/modules/test-blocking-connect",
        b"",
        WAIT,
    )?;
    println!(
        "row 13: DELETE of a mapper blocked in connect: {code} after {:.1} ms",
        ms(started.elapsed())
    );
    block(&node)?;
    let started = Instant::now();
    node.daemon.signal(libc::SIGTERM)?;
    let status = node.daemon.wait_exit(Duration::from_secs(30))?;
    println!(
        "row 13: SIGTERM to exit with a mapper blocked in connect: {:.1} ms ({status})",
        ms(started.elapsed())
    );
    Ok(())
}

fn row14() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let (node, _mqtt) = start(dir.path(), "")?;
    let slow = repackage("test-guests/stall", |m| {
        m.name = "test-slow-init".into();
        m.limits.call_timeout_ms = 3000;
        m.config["init_sleep_ms"] = 120_000.into();
    })?;
    let quick = module_bytes("test-guests/stall");
    let admin = node.admin_socket();
    // Both share one code: compiled and cached once first, so the race times deploys only.
    deployed(&node, &quick)?;
    http(admin.clone(), "DELETE", "/modules/test-stall", b"", WAIT)?;
    let slow_admin = admin.clone();
    let slow_deploy = std::thread::spawn(move || deploy(slow_admin, &slow, WAIT));
    std::thread::sleep(Duration::from_millis(300));
    let (code, _, quick_took) = deploy(admin.clone(), &quick, WAIT)?;
    let Ok(Ok((slow_code, _, slow_took))) = slow_deploy.join() else {
        bail!("the slow deploy got no answer");
    };
    println!(
        "row 14: deploy whose init sleeps 120 s (limit 3000 ms): {slow_code} after {:.1} ms; a deploy started 300 ms later: {code} after {:.1} ms",
        ms(slow_took),
        ms(quick_took)
    );
    Ok(())
}

fn row15() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let (node, _mqtt) = start(dir.path(), "")?;
    let before = rss_kib(node.daemon.pid())?;
    let mut accepted = 0;
    for i in 0..6 {
        let bytes = repackage("test-guests/stall", |m| {
            m.name = format!("test-hog-{i}");
            m.limits.memory_mib = 240;
            m.limits.call_timeout_ms = 10_000;
            m.config["touch_mib"] = 200.into();
        })?;
        if deploy(node.admin_socket(), &bytes, WAIT)?.0 == 201 {
            accepted += 1;
        }
    }
    std::thread::sleep(Duration::from_millis(500));
    let after = rss_kib(node.daemon.pid())?;
    println!(
        "row 15: six 240 MiB handlers touching 200 MiB, budget 512 MiB: {accepted} deployed, {} refused; RSS {:.0} MiB -> {:.0} MiB",
        6 - accepted,
        before as f64 / 1024.0,
        after as f64 / 1024.0
    );
    Ok(())
}

fn row16() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let (node, mut mqtt) = start(dir.path(), "")?;
    deployed(&node, &module_bytes("test-guests/stall"))?;
    let before = node.daemon.log().len();
    for i in 0..20 {
        update(&mqtt, "stall-0", &format!("f{i}"), "flood")?;
        result_of(&mut mqtt, "stall-0", &format!("f{i}"), WAIT)?;
    }
    let grown = node.daemon.log().len() - before;
    let dropped = metric(
        node.admin,
        "wedge_wasm_log_lines_dropped_total",
        "test-stall",
    )?;
    let truncated = metric(
        node.admin,
        "wedge_wasm_log_lines_truncated_total",
        "test-stall",
    )?;
    println!(
        "row 16: 20 updates logging 1 MiB each: log +{grown} bytes ({truncated} lines truncated, {dropped} dropped)"
    );
    Ok(())
}

fn main() -> Result<()> {
    let args = Args::parse();
    row12(&args)?;
    row13()?;
    row14()?;
    row15()?;
    row16()?;
    Ok(())
}
