//! `wedge device list|get` and `wedge twin get|set`, over the admin API's `/devices` routes.

use anyhow::{Context, Result, bail};
use serde_json::Value;

use crate::admin_client::request;
use crate::cli::{AdminArgs, DeviceCommand, Output, TwinCommand};

pub fn device(cmd: DeviceCommand) -> Result<()> {
    match cmd {
        DeviceCommand::List { output, admin } => {
            let devices = fetch(&admin, "/devices")?;
            print(output, &devices, |devices| {
                let mut out = format!(
                    "{:<32} {:<16} {:<28} {:<10} {:>6}  {}\n",
                    "DEVICE", "PROTOCOL", "MAPPER", "STATE", "TWINS", "LAST ONLINE"
                );
                for d in devices.as_array().into_iter().flatten() {
                    let mapper = text(&d["mapper"]);
                    out.push_str(&format!(
                        "{:<32} {:<16} {:<28} {:<10} {:>6}  {}\n",
                        text(&d["id"]),
                        or_dash(&d["protocol"]),
                        if mapper.is_empty() {
                            "none on this node".to_owned()
                        } else {
                            mapper
                        },
                        or_dash(&d["state"]),
                        d["twins"].as_object().map(|t| t.len()).unwrap_or(0),
                        or_dash(&d["lastOnline"]),
                    ));
                }
                out
            })
        }
        DeviceCommand::Get {
            device,
            output,
            admin,
        } => {
            let view = fetch(&admin, &device_path(&device)?)?;
            print(output, &view, |d| {
                let mut out = format!(
                    "device       {}\nname         {}\nprotocol     {}\nmapper       {}\ndescription  {}\nstate        {}\nlast online  {}\n",
                    text(&d["id"]),
                    text(&d["name"]),
                    or_dash(&d["protocol"]),
                    or_dash(&d["mapper"]),
                    or_dash(&d["description"]),
                    or_dash(&d["state"]),
                    or_dash(&d["lastOnline"]),
                );
                if let Some(attrs) = d["attributes"].as_object().filter(|a| !a.is_empty()) {
                    out.push_str("attributes\n");
                    for (name, value) in attrs {
                        out.push_str(&format!("  {name} = {}\n", text(value)));
                    }
                }
                out.push('\n');
                out.push_str(&twin_table(d));
                out
            })
        }
    }
}

pub fn twin(cmd: TwinCommand) -> Result<()> {
    match cmd {
        TwinCommand::Get {
            device,
            output,
            admin,
        } => {
            let view = fetch(&admin, &device_path(&device)?)?;
            match output {
                Output::Table => print(output, &view, twin_table),
                _ => print(output, &view["twins"], |_| String::new()),
            }
        }
        TwinCommand::Set {
            device,
            assignment,
            admin,
        } => {
            let Some((property, value)) = assignment.split_once('=') else {
                bail!("expected PROPERTY=VALUE, got {assignment:?}");
            };
            let path = format!("{}/twins/{property}", device_path(&device)?);
            let body = serde_json::json!({ "desired": value }).to_string();
            let answer = request(&admin, "PUT", &path, body.as_bytes())?;
            if answer.status != 200 {
                bail!("{} ({})", answer.error_text(), answer.status);
            }
            let stored = answer.json()?;
            let twin = &stored["twin"];
            let expected = text(&twin["expected"]);
            if expected != value {
                println!(
                    "{device} {property}: desired {expected} (asked {value}; a twin handler changed it), reported {}",
                    or_dash(&twin["actual"])
                );
            } else {
                println!(
                    "{device} {property}: desired {expected}, reported {}",
                    or_dash(&twin["actual"])
                );
            }
            Ok(())
        }
    }
}

/// `/devices/<namespace>/<name>` of `<namespace>/<name>`.
fn device_path(device: &str) -> Result<String> {
    match device.split_once('/') {
        Some((namespace, name))
            if !namespace.is_empty() && !name.is_empty() && !name.contains('/') =>
        {
            Ok(format!("/devices/{namespace}/{name}"))
        }
        _ => bail!("a device is <namespace>/<name>, like default/thermo-1; got {device:?}"),
    }
}

fn fetch(admin: &AdminArgs, path: &str) -> Result<Value> {
    let answer = request(admin, "GET", path, b"")?;
    if answer.status != 200 {
        bail!("{} ({})", answer.error_text(), answer.status);
    }
    answer.json()
}

fn print(output: Output, value: &Value, table: impl FnOnce(&Value) -> String) -> Result<()> {
    match output {
        Output::Table => print!("{}", table(value)),
        Output::Json => println!("{}", serde_json::to_string_pretty(value)?),
        Output::Yaml => print!(
            "{}",
            serde_norway::to_string(value).context("cannot write YAML")?
        ),
    }
    Ok(())
}

fn twin_table(device: &Value) -> String {
    let mut out = format!(
        "{:<24} {:<8} {:<20} {:<20}\n",
        "PROPERTY", "TYPE", "DESIRED", "REPORTED"
    );
    for (key, twin) in device["twins"].as_object().into_iter().flatten() {
        out.push_str(&format!(
            "{:<24} {:<8} {:<20} {:<20}\n",
            key,
            text(&twin["type"]),
            or_dash(&twin["expected"]),
            or_dash(&twin["actual"]),
        ));
    }
    out
}

fn text(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

fn or_dash(value: &Value) -> String {
    let t = text(value);
    if t.is_empty() { "-".to_owned() } else { t }
}
