//! Tools for the hostile-guest tests and their benchmark (`guest-bench`): guests re-packaged
//! with another manifest, HTTP calls with a deadline, a listener whose accept queue is full,
//! twin round trips timed over MQTT, and the daemon's resident memory.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use wedge_wasm::{Manifest, package};

use crate::guests::module_bytes;
use crate::mqtt::MqttClient;
use crate::{AdminEndpoint, AdminStream};

/// A node on the embedded broker with [`devices_yaml`]`(3)` and `wedge_extra` (YAML lines of
/// its `wedge:` section), as the hostile-guest tests and `guest-bench` run it.
pub fn start_node(dir: &std::path::Path, wedge_extra: &str) -> Result<crate::node::TwinNode> {
    crate::node::TwinNode::start_with(
        dir,
        crate::node::Broker::Embedded,
        &devices_yaml(3),
        &crate::node::Extra {
            wedge: wedge_extra.to_owned(),
            ..Default::default()
        },
    )
}

/// Devices for hostile-guest tests: `default/stall-0` (bound to the `test-stall` handler),
/// `default/free-1` .. `free-<free>` (bound to nothing) and `default/blocked-1` (protocol
/// `blocking`, driven by `test-blocking-connect` once deployed). Each has a string twin `mode`.
pub fn devices_yaml(free: usize) -> String {
    let mut yaml = String::from(
        "apiVersion: devices.kubeedge.io/v1beta1
kind: DeviceModel
metadata:
  name: plain
  namespace: default
spec:
  properties:
  - name: mode
    type: STRING
    accessMode: ReadWrite
",
    );
    let mut names: Vec<(String, &str)> = vec![("stall-0".into(), "none")];
    names.extend((1..=free).map(|i| (format!("free-{i}"), "none")));
    names.push(("blocked-1".into(), "blocking"));
    for (name, protocol) in names {
        yaml.push_str(&format!(
            "---
apiVersion: devices.kubeedge.io/v1beta1
kind: Device
metadata:
  name: {name}
  namespace: default
spec:
  deviceModelRef:
    name: plain
  nodeName: edge-1
  protocol:
    protocolName: {protocol}
  properties:
  - name: mode
    visitors:
      protocolName: {protocol}
      configData: {{}}
"
        ));
    }
    yaml
}

/// The packaged guest `modules/<relative>` with its manifest changed by `edit`.
pub fn repackage(relative: &str, edit: impl FnOnce(&mut Manifest)) -> Result<Vec<u8>> {
    let bytes = module_bytes(relative);
    let mut manifest = package::extract(&bytes)?;
    edit(&mut manifest);
    let code = package::without_manifest(&bytes)?;
    Ok(package::embed(&code, &manifest)?)
}

/// An HTTP/1.1 request with a body to a node's admin API (its unix socket, or TCP for the
/// open paths), answered within `timeout`; returns status code and body.
pub fn http(
    admin: impl Into<AdminEndpoint>,
    method: &str,
    path: &str,
    body: &[u8],
    timeout: Duration,
) -> Result<(u16, String)> {
    let mut stream = AdminStream::connect(&admin.into(), timeout)?;
    write!(
        stream,
        "{method} {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nContent-Type: application/wasm\r\nContent-Length: {}\r\n\r\n",
        body.len()
    )?;
    stream.write_all(body)?;
    let mut response = Vec::new();
    stream
        .read_to_end(&mut response)
        .with_context(|| format!("{method} {path}: no complete answer within {timeout:?}"))?;
    crate::parse_response(&String::from_utf8_lossy(&response))
}

/// `POST /modules` with `bytes`; (status, body, time to answer).
pub fn deploy(
    admin: impl Into<AdminEndpoint>,
    bytes: &[u8],
    timeout: Duration,
) -> Result<(u16, String, Duration)> {
    let started = Instant::now();
    let (code, body) = http(admin, "POST", "/modules", bytes, timeout)?;
    Ok((code, body, started.elapsed()))
}

/// A loopback listener whose accept queue is full: a connect to it never completes (its
/// SYNs are dropped) until the listener goes away.
pub struct FullAcceptQueue {
    _listener: OwnedFd,
    _queued: Vec<TcpStream>,
    /// Where it listens.
    pub addr: SocketAddr,
}

impl FullAcceptQueue {
    /// Listens with a backlog of 0 and fills the queue with connections never accepted.
    pub fn new() -> Result<FullAcceptQueue> {
        // SAFETY: plain socket calls on a descriptor this function owns.
        let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_STREAM, 0) };
        if fd < 0 {
            bail!("socket: {}", std::io::Error::last_os_error());
        }
        // SAFETY: `fd` is a fresh descriptor owned by nobody else.
        let listener = unsafe { OwnedFd::from_raw_fd(fd) };
        let mut sa: libc::sockaddr_in = unsafe { std::mem::zeroed() };
        sa.sin_family = libc::AF_INET as libc::sa_family_t;
        sa.sin_addr.s_addr = u32::from_ne_bytes([127, 0, 0, 1]);
        let len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
        // SAFETY: `sa` is a valid sockaddr_in of `len` bytes.
        if unsafe {
            libc::bind(
                listener.as_raw_fd(),
                (&sa as *const libc::sockaddr_in).cast(),
                len,
            )
        } != 0
        {
            bail!("bind: {}", std::io::Error::last_os_error());
        }
        // SAFETY: as above.
        if unsafe { libc::listen(listener.as_raw_fd(), 0) } != 0 {
            bail!("listen: {}", std::io::Error::last_os_error());
        }
        let mut bound: libc::sockaddr_in = unsafe { std::mem::zeroed() };
        let mut bound_len = len;
        // SAFETY: `bound` has room for a sockaddr_in.
        if unsafe {
            libc::getsockname(
                listener.as_raw_fd(),
                (&mut bound as *mut libc::sockaddr_in).cast(),
                &mut bound_len,
            )
        } != 0
        {
            bail!("getsockname: {}", std::io::Error::last_os_error());
        }
        let addr = SocketAddr::from(([127, 0, 0, 1], u16::from_be(bound.sin_port)));
        let mut queued = Vec::new();
        for _ in 0..16 {
            match TcpStream::connect_timeout(&addr, Duration::from_millis(300)) {
                Ok(s) => queued.push(s),
                Err(_) => {
                    return Ok(FullAcceptQueue {
                        _listener: listener,
                        _queued: queued,
                        addr,
                    });
                }
            }
        }
        bail!("the accept queue of {addr} never filled up")
    }
}

/// Resident memory of process `pid`, in KiB.
pub fn rss_kib(pid: u32) -> Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .context("no VmRSS")
}

/// The topic of a twin update of `default/<device>`.
pub fn update_topic(device: &str) -> String {
    format!("$hw/events/device/default/{device}/twin/update")
}

/// A mapper update setting twin `mode` of `default/<device>` to `value`.
pub fn update(mqtt: &MqttClient, device: &str, event: &str, value: &str) -> Result<()> {
    mqtt.publish(
        &update_topic(device),
        format!(
            r#"{{"event_id":"{event}","timestamp":1,"twin":{{"mode":{{"actual":{{"value":"{value}"}}}}}}}}"#
        ),
    )
}

/// Waits for the result of `event` on `default/<device>` and returns it.
pub fn result_of(
    mqtt: &mut MqttClient,
    device: &str,
    event: &str,
    timeout: Duration,
) -> Result<serde_json::Value> {
    let topic = format!("{}/result", update_topic(device));
    let deadline = Instant::now() + timeout;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            bail!("no result for {event} on {device} within {timeout:?}");
        }
        let text = mqtt.expect(&topic, left)?;
        let v: serde_json::Value = serde_json::from_str(&text)?;
        if v["event_id"] == event {
            return Ok(v);
        }
    }
}

/// One timed round trip: an update of `default/<device>` to its result.
pub fn round_trip(
    mqtt: &mut MqttClient,
    device: &str,
    event: &str,
) -> Result<(Duration, serde_json::Value)> {
    let started = Instant::now();
    update(mqtt, device, event, "ok")?;
    let result = result_of(mqtt, device, event, Duration::from_secs(10))?;
    Ok((started.elapsed(), result))
}

/// The value of the first sample of `family` whose labels contain `label` in `/metrics`.
pub fn metric(admin: SocketAddr, family: &str, label: &str) -> Result<f64> {
    let (_, text) = crate::http_get(admin, "/metrics")?;
    text.lines()
        .filter(|l| l.starts_with(family) && l.contains(label))
        .find_map(|l| l.rsplit(' ').next()?.parse().ok())
        .with_context(|| format!("no {family} sample with {label} in /metrics"))
}
