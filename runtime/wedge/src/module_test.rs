//! `wedge module test`: one module tried in a host of its own (`wedge_mappers::trial`), with
//! what it does printed as it happens.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use wedge_devicetwin::definition::{Catalog, DeviceDefinition, load_file};
use wedge_devicetwin::hooks::HookVerdict;
use wedge_mappers::trial::{Trial, TrialEvent, TrialUpdate};
use wedge_wasm::ModuleKind;

pub fn run(
    file: &Path,
    updates: &[String],
    devices: &[PathBuf],
    sets: &[String],
    seconds: f64,
) -> Result<()> {
    let bytes = std::fs::read(file).with_context(|| format!("cannot read {}", file.display()))?;
    let updates = read_updates(updates)?;
    let definitions = read_devices(devices)?;
    let sets = sets
        .iter()
        .map(|s| parse_set(s))
        .collect::<Result<Vec<_>>>()?;
    let run_for = Duration::try_from_secs_f64(seconds)
        .ok()
        .filter(|d| !d.is_zero())
        .context("--seconds must be a positive number")?;
    let scratch = tempfile::Builder::new()
        .prefix("wedge-module-test-")
        .tempdir()
        .context("cannot make a scratch directory")?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    runtime.block_on(async {
        let started = Instant::now();
        let events = Arc::new(move |event: TrialEvent| print_event(started, &event));
        let trial = Trial::load(scratch.path(), bytes, events).await?;
        let status = trial.status();
        println!(
            "loaded {} {} ({})",
            trial.name(),
            status.as_ref().map(|s| s.version.as_str()).unwrap_or("?"),
            trial.kind().as_str()
        );
        let outcome = match trial.kind() {
            ModuleKind::TwinHandler => {
                if !devices.is_empty() || !sets.is_empty() {
                    bail!(
                        "{} is a twin handler: it takes --update, not --device or --set",
                        trial.name()
                    );
                }
                review_all(&trial, &updates).await.map(|()| 0)
            }
            ModuleKind::Mapper => {
                if !updates.is_empty() {
                    bail!(
                        "{} is a mapper: it takes --device (and --set), not --update",
                        trial.name()
                    );
                }
                drive_all(&trial, definitions, &sets, run_for).await
            }
        };
        print_log(&trial, *outcome.as_ref().unwrap_or(&0));
        if let Some(status) = trial.status() {
            println!(
                "{} call(s), {} trap(s), {} restart(s){}",
                status.calls,
                status.traps,
                status.restarts,
                status
                    .last_error
                    .map(|e| format!("; last error: {e}"))
                    .unwrap_or_default()
            );
        }
        trial.stop().await;
        outcome.map(|_| ())
    })
}

/// Each `--update`, inline JSON or `@FILE`, in order.
fn read_updates(args: &[String]) -> Result<Vec<TrialUpdate>> {
    let mut all = Vec::new();
    for arg in args {
        let json = match arg.strip_prefix('@') {
            Some(path) => {
                std::fs::read_to_string(path).with_context(|| format!("cannot read {path}"))?
            }
            None => arg.clone(),
        };
        all.extend(TrialUpdate::parse_many(&json).with_context(|| format!("--update {arg}"))?);
    }
    Ok(all)
}

/// The devices the files define (each file may also hold the models they use).
fn read_devices(files: &[PathBuf]) -> Result<Vec<DeviceDefinition>> {
    let mut catalog = Catalog::new();
    for file in files {
        for object in load_file(file)? {
            catalog.put(object);
        }
    }
    if let Some((device, model)) = catalog.waiting().into_iter().next() {
        bail!(
            "device {device} uses DeviceModel {model}, which none of the --device files holds: add the model to the file (as a second YAML document)"
        );
    }
    Ok(catalog.definitions())
}

/// `[DEVICE:]PROPERTY=VALUE`.
fn parse_set(arg: &str) -> Result<(Option<String>, String, String)> {
    let Some((target, value)) = arg.split_once('=') else {
        bail!("--set {arg}: expected [DEVICE:]PROPERTY=VALUE");
    };
    let (device, property) = match target.rsplit_once(':') {
        Some((device, property)) => (Some(device.to_owned()), property),
        None => (None, target),
    };
    if property.is_empty() {
        bail!("--set {arg}: no property name");
    }
    Ok((device, property.to_owned(), value.to_owned()))
}

async fn review_all(trial: &Trial, updates: &[TrialUpdate]) -> Result<()> {
    if updates.is_empty() {
        bail!(
            "{} is a twin handler: give it something to review with --update JSON (see --help)",
            trial.name()
        );
    }
    let mut failed = 0;
    for update in updates {
        let what = format!(
            "{} {} = {} ({}, {})",
            update.device,
            update.property,
            update.value,
            if update.desired {
                "desired"
            } else {
                "reported"
            },
            update.value_type
        );
        if !trial.binds(&update.device) {
            println!("{what}: accept (the manifest does not bind this device; not called)");
            continue;
        }
        match trial.review(update).await? {
            HookVerdict::Accept => println!("{what}: accept"),
            HookVerdict::Replace(v) => println!("{what}: replace with {v}"),
            HookVerdict::Reject(reason) => println!("{what}: reject: {reason}"),
            HookVerdict::Failed(reason) => {
                failed += 1;
                println!("{what}: FAILED: {reason}");
            }
        }
    }
    if failed > 0 {
        bail!("{failed} of {} review(s) failed", updates.len());
    }
    Ok(())
}

async fn drive_all(
    trial: &Trial,
    definitions: Vec<DeviceDefinition>,
    sets: &[(Option<String>, String, String)],
    run_for: Duration,
) -> Result<u64> {
    if definitions.is_empty() {
        bail!(
            "{} is a mapper: give it a device to drive with --device FILE (a Device and its DeviceModel in YAML, see conf/examples/)",
            trial.name()
        );
    }
    let mut driving = 0;
    for definition in definitions {
        let (id, properties) = (definition.id.clone(), definition.properties.len());
        match trial.drive(definition).await {
            Ok(()) => {
                println!("driving {id} ({properties} properties)");
                driving += 1;
            }
            Err(e) => println!("not driving {id}: {e}"),
        }
    }
    if driving == 0 {
        bail!("the mapper drives none of the devices given");
    }
    for (device, property, value) in sets {
        let written = trial
            .desire(device.as_deref(), property, value)
            .await
            .with_context(|| format!("--set {property}={value}"))?;
        for id in written {
            println!("set {id} {property} = {value} (written by the mapper)");
        }
    }
    let deadline = tokio::time::Instant::now() + run_for;
    let mut after = 0;
    while tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
        after = print_log(trial, after);
    }
    Ok(after)
}

fn print_event(started: Instant, event: &TrialEvent) {
    let at = started.elapsed().as_secs_f64();
    match event {
        TrialEvent::Report {
            device,
            property,
            value,
        } => println!(
            "+{at:.2}s report {device} {property} = {}",
            value.to_kubeedge()
        ),
        TrialEvent::State { device, state } => {
            println!("+{at:.2}s state {device} {}", state.as_str())
        }
        TrialEvent::Published { topic, payload } => println!(
            "+{at:.2}s publish {topic} {}",
            String::from_utf8_lossy(payload)
        ),
    }
}

/// Prints the module's log lines after line `after`; returns the last one's number. (A
/// mapper's lines are printed while it runs, a handler's after its reviews.)
fn print_log(trial: &Trial, after: u64) -> u64 {
    let lines = trial.log_lines(after);
    let mut last = after;
    for line in lines {
        println!("log {:<5} {}", line.level.to_uppercase(), line.text);
        last = line.seq;
    }
    last
}

#[cfg(test)]
mod tests {
    use super::parse_set;

    #[test]
    fn set_arguments() {
        assert_eq!(
            parse_set("default/thermo-1:setpoint=30").unwrap(),
            (
                Some("default/thermo-1".into()),
                "setpoint".into(),
                "30".into()
            )
        );
        assert_eq!(
            parse_set("setpoint=a=b").unwrap(),
            (None, "setpoint".into(), "a=b".into())
        );
        assert!(parse_set("setpoint").is_err());
        assert!(parse_set("dev:=1").is_err());
    }
}
