//! Device definitions and JSON helpers shared by the twin tests.

/// A `thermometer` model (temperature INT, humidity FLOAT) and two devices using it:
/// `default/thermo-1` (protocol `virtual`, desired temperature 25) and `default/thermo-2`
/// (a protocol no mapper speaks).
pub const THERMOMETERS: &str = "apiVersion: devices.kubeedge.io/v1beta1
kind: DeviceModel
metadata:
  name: thermometer
  namespace: default
spec:
  protocol: virtual
  properties:
  - name: temperature
    type: INT
    accessMode: ReadWrite
  - name: humidity
    type: FLOAT
    accessMode: ReadOnly
---
apiVersion: devices.kubeedge.io/v1beta1
kind: Device
metadata:
  name: thermo-1
  namespace: default
spec:
  deviceModelRef:
    name: thermometer
  nodeName: edge-1
  protocol:
    protocolName: virtual
    configData:
      signal: constant
      base: 21
  properties:
  - name: temperature
    collectCycle: 200
    reportToCloud: true
    desired:
      value: \"25\"
    visitors:
      protocolName: virtual
      configData: {}
  - name: humidity
    collectCycle: 200
    reportToCloud: true
    visitors:
      protocolName: virtual
      configData: {}
---
apiVersion: devices.kubeedge.io/v1beta1
kind: Device
metadata:
  name: thermo-2
  namespace: default
spec:
  deviceModelRef:
    name: thermometer
  nodeName: edge-1
  protocol:
    protocolName: other
  properties:
  - name: temperature
    visitors:
      protocolName: other
      configData: {}
";

/// `n` devices `default/load-<i>` with one INT `temperature` twin, no protocol a mapper drives.
pub fn load_devices(n: usize) -> String {
    let mut yaml = String::from(
        "apiVersion: devices.kubeedge.io/v1beta1
kind: DeviceModel
metadata:
  name: load
  namespace: default
spec:
  properties:
  - name: temperature
    type: INT
",
    );
    for i in 0..n {
        yaml.push_str(&format!(
            "---
apiVersion: devices.kubeedge.io/v1beta1
kind: Device
metadata:
  name: load-{i}
  namespace: default
spec:
  deviceModelRef:
    name: load
  protocol:
    protocolName: none
  properties:
  - name: temperature
"
        ));
    }
    yaml
}

/// `json` with every `"timestamp":<digits>` written as `"timestamp":0`, so payloads can be
/// compared byte for byte.
pub fn zero_timestamps(json: &str) -> String {
    let key = "\"timestamp\":";
    let mut out = String::with_capacity(json.len());
    let mut rest = json;
    while let Some(i) = rest.find(key) {
        out.push_str(&rest[..i + key.len()]);
        rest = &rest[i + key.len()..];
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        if digits > 0 {
            out.push('0');
        }
        rest = &rest[digits..];
    }
    out.push_str(rest);
    out
}

/// The `event_id` of a payload.
pub fn event_id(json: &str) -> String {
    serde_json::from_str::<serde_json::Value>(json)
        .ok()
        .and_then(|v| v["event_id"].as_str().map(str::to_owned))
        .unwrap_or_default()
}

/// `json` with its `event_id` value replaced by `<id>`.
pub fn blank_event_id(json: &str) -> String {
    let id = event_id(json);
    json.replacen(
        &format!("\"event_id\":\"{id}\""),
        "\"event_id\":\"<id>\"",
        1,
    )
}
