//! Scenario `desired`: a desired value set through the admin API → the mapper gets the write.
//!
//! Each change is `PUT /devices/<ns>/<name>/twins/<property>` with `{"desired": "<v>"}` (what
//! `wedge twin set` sends; devicetwin takes it as a cloud twin sync: review, versions,
//! commit, then the mappers are told). The clock starts just before the request is sent and
//! stops:
//!
//! * Wasm mapper (`virtual-thermometer`): at the log line its `write-property` writes
//!   (`<device>/<property> set to <v>`), read back from `GET /modules/<name>/logs`. The host
//!   stamps each guest line with the wall clock in whole milliseconds, so the figure is the
//!   line's stamp + 1 ms − the send time: an upper bound, at most 1 ms high.
//! * DMI mapper (the generator's own `DeviceMapperService`, registered with `MapperRegister`
//!   as a KubeEdge mapper is): when the node's `UpdateDevice` carrying the value reaches the
//!   handler (same process and clock as the sender: exact).
//!
//! Changes are sent one at a time, `--gap-ms` apart, round-robin over the devices.

use std::path::Path;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result, bail};

use crate::dmi::{self, MapperServer};
use crate::node::Node;
use crate::stats::Percentiles;
use crate::{BENCH_PROTOCOL, DesiredArgs, THERMOMETER, devices_yaml};

const WAIT: Duration = Duration::from_secs(5);

fn unix_ms_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64() * 1e3)
        .unwrap_or(0.0)
}

/// The module's log lines after `after`: `(seq, unix ms, text)`.
async fn log_lines(node: &Node, after: u64) -> Result<Vec<(u64, u64, String)>> {
    let body = node
        .admin(
            "GET",
            &format!("/modules/{THERMOMETER}/logs?after={after}"),
            Vec::new(),
        )
        .await?;
    let lines = body["lines"].as_array().cloned().unwrap_or_default();
    Ok(lines
        .iter()
        .filter_map(|l| {
            Some((
                l["seq"].as_u64()?,
                l["unixMs"].as_u64()?,
                l["text"].as_str()?.to_owned(),
            ))
        })
        .collect())
}

/// Waits for a log line containing `needle` after line `after`; returns (its seq, its stamp).
async fn wait_line(node: &Node, after: u64, needle: &str, timeout: Duration) -> Result<(u64, u64)> {
    let deadline = Instant::now() + timeout;
    let mut seen = after;
    loop {
        for (seq, ms, text) in log_lines(node, seen).await? {
            seen = seen.max(seq);
            if text.contains(needle) {
                return Ok((seq, ms));
            }
        }
        if Instant::now() >= deadline {
            bail!("no log line of {THERMOMETER} containing {needle:?} within {timeout:?}");
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn row(name: &str, samples: &mut [Duration]) -> String {
    match Percentiles::of(samples) {
        Some(p) => format!(
            "{name}: p50 {:.2} ms, p90 {:.2} ms, p99 {:.2} ms, max {:.2} ms ({} changes)",
            ms(p.p50),
            ms(p.p90),
            ms(p.p99),
            ms(p.max),
            p.count
        ),
        None => format!("{name}: no samples"),
    }
}

/// Runs the scenario in `root` and prints its figures.
pub async fn run(wedge: &Path, root: &Path, args: &DesiredArgs) -> Result<()> {
    let module = wedge_tests::guests::try_module(THERMOMETER).map_err(anyhow::Error::msg)?;
    let node = Node::start(
        wedge,
        root,
        &devices_yaml(args.devices, args.devices),
        &args.synchronous,
    )
    .await?;
    let mut mapper = MapperServer::serve(&root.join("mapper.sock"))?;
    let mut client = dmi::connect(&node.dmi_socket).await?;
    mapper.register(&mut client, BENCH_PROTOCOL).await?;
    node.deploy(&module)?;
    // The thermometer logs `simulating <id>` for each device it is handed.
    let mut last = 0;
    for i in 0..args.devices {
        let (seq, _) = wait_line(
            &node,
            0,
            &format!("simulating default/wasm-{i} "),
            Duration::from_secs(30),
        )
        .await
        .map_err(|e| e.context(node.daemon.log_tail(20)))?;
        last = last.max(seq);
    }
    let gap = Duration::from_millis(args.gap_ms);

    // Wasm mapper: PUT -> write-property's log line.
    let mut wasm = Vec::new();
    let mut wasm_answers = Vec::new();
    let mut slowest_wasm = (Duration::ZERO, 0);
    for k in 0..args.changes {
        let device = format!("default/wasm-{}", k % args.devices);
        let value = (1000 + k).to_string();
        let sent_ms = unix_ms_now();
        let sent = Instant::now();
        node.set_desired(&device, "temperature", &value).await?;
        wasm_answers.push(sent.elapsed());
        let (seq, stamp) = wait_line(
            &node,
            last,
            &format!("{device}/temperature set to {value}"),
            WAIT,
        )
        .await?;
        last = seq;
        let upper = (stamp as f64 + 1.0 - sent_ms).max(0.0);
        let took = Duration::from_secs_f64(upper / 1e3);
        if took > slowest_wasm.0 {
            slowest_wasm = (took, k);
        }
        wasm.push(took);
        tokio::time::sleep(gap).await;
    }

    // DMI mapper: PUT -> UpdateDevice at the mapper.
    while mapper.calls.try_recv().is_ok() {}
    let mut updates = Vec::new();
    let mut dmi_answers = Vec::new();
    let mut slowest_dmi = (Duration::ZERO, 0);
    let mut other_calls = 0;
    for k in 0..args.changes {
        let device = format!("default/dev-{}", k % args.devices);
        let value = (2000 + k).to_string();
        let sent = Instant::now();
        node.set_desired(&device, "setpoint", &value).await?;
        dmi_answers.push(sent.elapsed());
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            let call = tokio::time::timeout_at(deadline, mapper.calls.recv())
                .await
                .ok()
                .flatten()
                .with_context(|| {
                    format!("no UpdateDevice of {device} with setpoint {value} within {WAIT:?}")
                })?;
            let wanted = call.device == device
                && call
                    .desired
                    .iter()
                    .any(|(p, v)| p == "setpoint" && *v == value);
            if wanted {
                let took = call.at.saturating_duration_since(sent);
                if took > slowest_dmi.0 {
                    slowest_dmi = (took, k);
                }
                updates.push(took);
                break;
            }
            other_calls += 1;
        }
        tokio::time::sleep(gap).await;
    }

    println!("device-bench desired: admin PUT desired value -> the mapper gets the write");
    println!(
        "node: {}, store synchronous {}, {} Wasm devices ({THERMOMETER}), {} DMI devices (protocol {BENCH_PROTOCOL}, the generator's mapper); {} changes each, one at a time, {} ms apart",
        wedge.display(),
        args.synchronous,
        args.devices,
        args.devices,
        args.changes,
        args.gap_ms
    );
    println!(
        "{}",
        row(
            "Wasm  PUT sent -> write-property log line (upper bound, 1 ms stamps)",
            &mut wasm
        )
    );
    println!(
        "{}",
        row("Wasm  PUT sent -> PUT answered", &mut wasm_answers)
    );
    println!(
        "{}",
        row("DMI   PUT sent -> UpdateDevice at the mapper", &mut updates)
    );
    println!(
        "{}",
        row("DMI   PUT sent -> PUT answered", &mut dmi_answers)
    );
    println!(
        "  slowest: Wasm change #{} ({:.2} ms), DMI change #{} ({:.2} ms), counting from #0",
        slowest_wasm.1,
        ms(slowest_wasm.0),
        slowest_dmi.1,
        ms(slowest_dmi.0)
    );
    if other_calls > 0 {
        println!("  ({other_calls} other calls reached the mapper meanwhile)");
    }
    for line in node.metrics(&["wedge_dmi_calls", "wedge_dmi_mapper"]) {
        println!("  {line}");
    }
    Ok(())
}
