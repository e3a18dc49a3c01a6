//! The device plane driven from the cloud: a KubeEdge mapper (the real one of `../shared/dmi/`,
//! over DMI) and a Wasm mapper (`virtual-thermometer`) on the Wedge node get their Devices from
//! CloudCore; `kubectl patch device` of a desired value reaches each device and comes back in
//! its DeviceStatus; a twin handler (`threshold`, set to clamp desired setpoints from the
//! cloud to 50) clamps one on its way; `kubectl delete device` makes the KubeEdge mapper let go
//! of its device.

use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use wedge_tests::dmi_mapper::{DmiMapper, example_devices};
use wedge_tests::realcloud::wait_for;

use crate::Bed;

const WAIT: Duration = Duration::from_secs(60);

/// A Wasm-driven thermometer: protocol `virtual`, a constant signal at 21 until written.
const WASM_DEVICE: &str = "apiVersion: devices.kubeedge.io/v1beta1
kind: DeviceModel
metadata:
  name: rc-wasm-thermometer
  namespace: default
spec:
  protocol: virtual
  properties:
  - name: temperature
    type: INT
    accessMode: ReadWrite
---
apiVersion: devices.kubeedge.io/v1beta1
kind: Device
metadata:
  name: rc-wasm-1
  namespace: default
spec:
  deviceModelRef:
    name: rc-wasm-thermometer
  nodeName: __NODE__
  protocol:
    protocolName: virtual
    configData:
      signal: constant
      base: 21
  properties:
  - name: temperature
    collectCycle: 500
    reportToCloud: true
    visitors:
      protocolName: virtual
      configData: {}
";

/// The reported value of `property` in the DeviceStatus of `device`, if any.
fn reported(bed: &Bed, device: &str, property: &str) -> Result<Option<String>> {
    let Some(status) = bed.cloud.get_opt(&["devicestatus", device])? else {
        return Ok(None);
    };
    Ok(status["status"]["twins"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|t| t["propertyName"] == property)
        .and_then(|t| t["reported"]["value"].as_str())
        .map(str::to_owned))
}

fn cloud_shows(bed: &Bed, device: &str, property: &str, value: &str) -> Result<()> {
    let at = Instant::now();
    wait_for(
        &format!("{device} {property} = {value} in its DeviceStatus"),
        WAIT,
        || match reported(bed, device, property)? {
            Some(v) if v == value => Ok(Some(())),
            other => bail!("DeviceStatus holds {other:?}"),
        },
    )?;
    println!(
        "    {device} {property} = {value} in the cloud {:.1?} later",
        at.elapsed()
    );
    Ok(())
}

/// `kubectl patch device` of the desired value of property number `index`.
fn patch_desired(bed: &Bed, device: &str, index: usize, value: &str) -> Result<()> {
    let patch = format!(
        r#"[{{"op":"add","path":"/spec/properties/{index}/desired","value":{{"value":"{value}"}}}}]"#
    );
    bed.cloud
        .kubectl(&["patch", "device", device, "--type=json", "-p", &patch])
        .map(|_| ())
}

/// The conformance check.
pub fn desired_values_reach_dmi_and_wasm_mappers_and_a_deleted_device_leaves_its_mapper(
    bed: &mut Bed,
) -> Result<()> {
    // The outage check's device is of the same protocol; it is not this mapper's.
    let _ = bed
        .cloud
        .kubectl(&["delete", "device", "rc-thermo-1", "--ignore-not-found"]);
    let node = bed.node.name.clone();
    bed.cloud
        .apply(&example_devices()?.replace("nodeName: edge-1", &format!("nodeName: {node}")))?;
    bed.cloud.apply(&WASM_DEVICE.replace("__NODE__", &node))?;

    // The KubeEdge mapper registers with the node and gets vdev-1 (from the cloud) with its
    // desired value 30, which it writes to the device; the reading reaches the cloud.
    let mapper_dir = bed.node.dir().join("mapper");
    std::fs::create_dir_all(&mapper_dir)?;
    let mut mapper = DmiMapper::start(&mapper_dir, &bed.node.dmi_socket())?;
    let write =
        |v: &str| format!("VIRTUALDEVICE WRITE device=vdev-1 key=setpoint value={v} via=desired");
    mapper.wait_log(&write("30"), WAIT)?;
    cloud_shows(bed, "vdev-1", "setpoint", "30")?;

    // The Wasm mapper on the same node drives rc-wasm-1.
    let package = wedge_tests::guests::module("virtual-thermometer");
    let data = bed.node.data_dir().to_str().context("data dir")?.to_owned();
    let (ok, out, err) = wedge_tests::wedge_cmd(&[
        "module",
        "deploy",
        package.to_str().context("package path")?,
        "--data-dir",
        &data,
    ])?;
    ensure!(ok, "deploy virtual-thermometer: {out}{err}");
    cloud_shows(bed, "rc-wasm-1", "temperature", "21")?;

    // kubectl patch device: each device gets its new desired value and reports it.
    let at = Instant::now();
    patch_desired(bed, "vdev-1", 1, "35")?;
    mapper.wait_log(&write("35"), WAIT)?;
    println!(
        "    vdev-1 setpoint 35 written by the KubeEdge mapper {:.1?} after kubectl patch",
        at.elapsed()
    );
    cloud_shows(bed, "vdev-1", "setpoint", "35")?;
    patch_desired(bed, "rc-wasm-1", 0, "27")?;
    cloud_shows(bed, "rc-wasm-1", "temperature", "27")?;

    // A safety handler: desired setpoints from the cloud above 50 are clamped to 50. The
    // cloud asks for 90; the device gets 50.
    let clamp = wedge_tests::hostile::repackage("threshold", |m| {
        m.name = "setpoint-clamp".into();
        m.config = serde_json::json!({"rules": [{
            "property": "setpoint", "max": 50, "action": "clamp",
            "side": "desired", "source": "cloud"
        }]});
    })?;
    let file = bed.node.dir().join("setpoint-clamp.wasm");
    std::fs::write(&file, clamp)?;
    let (ok, out, err) = wedge_tests::wedge_cmd(&[
        "module",
        "deploy",
        file.to_str().context("package path")?,
        "--data-dir",
        &data,
    ])?;
    ensure!(ok, "deploy setpoint-clamp: {out}{err}");
    patch_desired(bed, "vdev-1", 1, "90")?;
    mapper.wait_log(&write("50"), WAIT)?;
    cloud_shows(bed, "vdev-1", "setpoint", "50")?;
    ensure!(
        !mapper.log().contains(&write("90")),
        "the unclamped value reached the device:\n{}",
        mapper.log()
    );

    // kubectl delete device: the mapper lets go of it (its REST API no longer knows it).
    let reading = "/api/v1/device/default/vdev-1/temperature";
    let body = mapper.rest_get(reading)?;
    ensure!(
        body.contains("\"Value\":\"23\""),
        "before the delete: {body}"
    );
    bed.cloud.kubectl(&["delete", "device", "vdev-1"])?;
    wait_for("vdev-1 gone from the mapper", WAIT, || {
        let body = mapper.rest_get(reading)?;
        if body.contains("not found device default/vdev-1") {
            Ok(Some(()))
        } else {
            bail!("the mapper still answers {body}")
        }
    })?;
    mapper.stop();
    Ok(())
}
