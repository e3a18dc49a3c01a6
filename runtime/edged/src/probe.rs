//! Liveness, readiness and startup probes with Kubernetes' semantics.
//!
//! [`run`] performs one probe (exec in the container, HTTP GET or a TCP connect to the pod's
//! address) within its timeout. [`Prober`] is the per-container state machine: a startup
//! probe holds the others until it succeeds and restarts the container after
//! `failureThreshold` failures; liveness restarts after `failureThreshold` consecutive
//! failures; readiness flips after `successThreshold` successes or `failureThreshold`
//! failures. A container with a readiness probe is not ready until it first succeeds.

use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::engine::Engine;
use crate::pod::{Container, Probe};

/// Which probe.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ProbeKind {
    /// `startupProbe`.
    Startup,
    /// `livenessProbe`.
    Liveness,
    /// `readinessProbe`.
    Readiness,
}

impl ProbeKind {
    /// The three, in the order they are considered.
    pub const ALL: [ProbeKind; 3] = [
        ProbeKind::Startup,
        ProbeKind::Liveness,
        ProbeKind::Readiness,
    ];

    /// The container's probe of this kind.
    pub fn of(self, container: &Container) -> Option<&Probe> {
        match self {
            ProbeKind::Startup => container.startup_probe.as_ref(),
            ProbeKind::Liveness => container.liveness_probe.as_ref(),
            ProbeKind::Readiness => container.readiness_probe.as_ref(),
        }
    }

    fn name(self) -> &'static str {
        match self {
            ProbeKind::Startup => "startup",
            ProbeKind::Liveness => "liveness",
            ProbeKind::Readiness => "readiness",
        }
    }

    /// The name as kubelet's events start with it (`Liveness probe failed: ...`).
    pub fn title(self) -> &'static str {
        match self {
            ProbeKind::Startup => "Startup",
            ProbeKind::Liveness => "Liveness",
            ProbeKind::Readiness => "Readiness",
        }
    }
}

/// Runs `probe` once against container `id` of `container`, reachable at `ip`.
pub async fn run(
    engine: &Engine,
    id: &str,
    ip: &str,
    container: &Container,
    probe: &Probe,
) -> Result<(), String> {
    let limit = Duration::from_secs(u64::from(probe.timeout()));
    let attempt = async {
        if let Some(exec) = &probe.exec {
            let (code, output) = engine
                .exec(id, &exec.command, limit)
                .await
                .map_err(|e| e.to_string())?;
            return if code == 0 {
                Ok(())
            } else {
                Err(format!("command exited with {code}: {}", output.trim()))
            };
        }
        if let Some(http) = &probe.http_get {
            let port = resolve_port(&http.port, container)?;
            let host = http.host.as_deref().unwrap_or(ip);
            let path = http.path.as_deref().unwrap_or("/");
            return http_get(host, port, path).await;
        }
        if let Some(tcp) = &probe.tcp_socket {
            let port = resolve_port(&tcp.port, container)?;
            let host = tcp.host.as_deref().unwrap_or(ip);
            return tokio::net::TcpStream::connect((host, port))
                .await
                .map(drop)
                .map_err(|e| format!("tcp {host}:{port}: {e}"));
        }
        Err("the probe has no action (exec, httpGet or tcpSocket)".to_owned())
    };
    match tokio::time::timeout(limit, attempt).await {
        Ok(outcome) => outcome,
        Err(_) => Err(format!("timed out after {limit:?}")),
    }
}

/// A port given as a number or as the name of one of the container's ports.
fn resolve_port(port: &serde_json::Value, container: &Container) -> Result<u16, String> {
    if let Some(n) = port.as_u64() {
        return u16::try_from(n).map_err(|_| format!("port {n} is out of range"));
    }
    if let Some(name) = port.as_str() {
        if let Ok(n) = name.parse::<u16>() {
            return Ok(n);
        }
        return container
            .ports
            .iter()
            .find(|p| p.name.as_deref() == Some(name))
            .map(|p| p.container_port)
            .ok_or_else(|| format!("no container port named {name:?}"));
    }
    Err(format!("port {port} is neither a number nor a name"))
}

async fn http_get(host: &str, port: u16, path: &str) -> Result<(), String> {
    let mut stream = tokio::net::TcpStream::connect((host, port))
        .await
        .map_err(|e| format!("http {host}:{port}: {e}"))?;
    let request = format!(
        "GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nUser-Agent: wedge-probe\r\nConnection: close\r\n\r\n"
    );
    stream
        .write_all(request.as_bytes())
        .await
        .map_err(|e| format!("http {host}:{port}: {e}"))?;
    let mut head = Vec::new();
    let mut buf = [0u8; 512];
    while !head.windows(2).any(|w| w == b"\r\n") && head.len() < 4096 {
        let n = stream
            .read(&mut buf)
            .await
            .map_err(|e| format!("http {host}:{port}: {e}"))?;
        if n == 0 {
            break;
        }
        head.extend_from_slice(&buf[..n]);
    }
    let line = String::from_utf8_lossy(&head);
    let status: u16 = line
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("http {host}:{port}{path}: no HTTP status in the answer"))?;
    if (200..400).contains(&status) {
        Ok(())
    } else {
        Err(format!("http {host}:{port}{path}: HTTP {status}"))
    }
}

/// What a probe result asks of edged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Nothing beyond the state change.
    Keep,
    /// Kill the container; the restart policy takes over. The text says why.
    Restart(String),
}

#[derive(Debug, Clone, Default)]
struct Counters {
    successes: u32,
    failures: u32,
    last: Option<Instant>,
    in_flight: bool,
}

/// Probe state of one container instance (a new container starts a new one).
#[derive(Debug, Clone)]
pub struct Prober {
    /// The engine id this state belongs to.
    pub container_id: String,
    started_at: Instant,
    started: bool,
    ready: bool,
    counters: [Counters; 3],
}

fn slot(kind: ProbeKind) -> usize {
    match kind {
        ProbeKind::Startup => 0,
        ProbeKind::Liveness => 1,
        ProbeKind::Readiness => 2,
    }
}

impl Prober {
    /// State for container `container_id` of `container`, seen running since `started_at`.
    pub fn new(container_id: String, container: &Container, started_at: Instant) -> Prober {
        Prober {
            container_id,
            started_at,
            started: container.startup_probe.is_none(),
            ready: container.readiness_probe.is_none(),
            counters: Default::default(),
        }
    }

    /// Whether a `kind` probe should run at `now`: its initial delay and period have passed,
    /// none is in flight, and (but for startup) the startup probe has succeeded.
    pub fn due(&self, kind: ProbeKind, probe: &Probe, now: Instant) -> bool {
        let c = &self.counters[slot(kind)];
        if c.in_flight || (kind != ProbeKind::Startup && !self.started) {
            return false;
        }
        if kind == ProbeKind::Startup && self.started {
            return false;
        }
        let first = self.started_at + Duration::from_secs(u64::from(probe.initial_delay_seconds));
        match c.last {
            None => now >= first,
            Some(last) => now >= last + Duration::from_secs(u64::from(probe.period())),
        }
    }

    /// Marks a `kind` probe as running from `now`.
    pub fn begin(&mut self, kind: ProbeKind, now: Instant) {
        let c = &mut self.counters[slot(kind)];
        c.in_flight = true;
        c.last = Some(now);
    }

    /// Books a result; says whether the container must be restarted.
    pub fn record(
        &mut self,
        kind: ProbeKind,
        probe: &Probe,
        outcome: &Result<(), String>,
    ) -> Verdict {
        let c = &mut self.counters[slot(kind)];
        c.in_flight = false;
        match outcome {
            Ok(()) => {
                c.successes += 1;
                c.failures = 0;
            }
            Err(_) => {
                c.failures += 1;
                c.successes = 0;
            }
        }
        let (successes, failures) = (c.successes, c.failures);
        match (kind, outcome) {
            (ProbeKind::Startup, Ok(())) => self.started = true,
            (ProbeKind::Readiness, Ok(())) if successes >= probe.successes() => self.ready = true,
            (ProbeKind::Readiness, Err(_)) if failures >= probe.failures() => self.ready = false,
            (ProbeKind::Startup | ProbeKind::Liveness, Err(why))
                if failures >= probe.failures() =>
            {
                return Verdict::Restart(format!(
                    "{} probe failed {failures} times: {why}",
                    kind.name()
                ));
            }
            _ => {}
        }
        Verdict::Keep
    }

    /// Whether the container counts as ready (its readiness probe, if any, last said so).
    pub fn ready(&self) -> bool {
        self.started && self.ready
    }

    /// Whether the startup probe (if any) has succeeded.
    pub fn started(&self) -> bool {
        self.started
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn container(json: serde_json::Value) -> Container {
        serde_json::from_value(json).unwrap()
    }

    #[test]
    fn liveness_restarts_after_consecutive_failures_only() {
        let c = container(serde_json::json!({"name": "a", "image": "i",
            "livenessProbe": {"exec": {"command": ["true"]}, "failureThreshold": 2, "periodSeconds": 1}}));
        let probe = c.liveness_probe.clone().unwrap();
        let t0 = Instant::now();
        let mut p = Prober::new("id".into(), &c, t0);
        assert!(p.ready(), "no readiness probe: ready when running");
        assert!(p.due(ProbeKind::Liveness, &probe, t0));
        p.begin(ProbeKind::Liveness, t0);
        assert!(
            !p.due(ProbeKind::Liveness, &probe, t0 + Duration::from_secs(5)),
            "in flight"
        );
        let fail = Err("boom".to_owned());
        assert_eq!(p.record(ProbeKind::Liveness, &probe, &fail), Verdict::Keep);
        assert!(!p.due(ProbeKind::Liveness, &probe, t0), "period not over");
        assert!(p.due(ProbeKind::Liveness, &probe, t0 + Duration::from_secs(1)));
        assert_eq!(
            p.record(ProbeKind::Liveness, &probe, &Ok(())),
            Verdict::Keep
        );
        assert_eq!(p.record(ProbeKind::Liveness, &probe, &fail), Verdict::Keep);
        assert!(matches!(
            p.record(ProbeKind::Liveness, &probe, &fail),
            Verdict::Restart(why) if why.contains("liveness probe failed 2 times: boom")
        ));
    }

    #[test]
    fn readiness_gates_and_startup_holds_the_others() {
        let c = container(serde_json::json!({"name": "a", "image": "i",
            "startupProbe": {"tcpSocket": {"port": 80}, "initialDelaySeconds": 2},
            "readinessProbe": {"httpGet": {"port": "web"}, "successThreshold": 2, "failureThreshold": 1}}));
        let (startup, readiness) = (
            c.startup_probe.clone().unwrap(),
            c.readiness_probe.clone().unwrap(),
        );
        let t0 = Instant::now();
        let mut p = Prober::new("id".into(), &c, t0);
        assert!(!p.ready() && !p.started());
        assert!(!p.due(ProbeKind::Startup, &startup, t0), "initial delay");
        assert!(
            !p.due(
                ProbeKind::Readiness,
                &readiness,
                t0 + Duration::from_secs(60)
            ),
            "held by startup"
        );
        assert!(p.due(ProbeKind::Startup, &startup, t0 + Duration::from_secs(2)));
        p.record(ProbeKind::Startup, &startup, &Ok(()));
        assert!(p.started() && !p.ready());
        assert!(
            !p.due(ProbeKind::Startup, &startup, t0 + Duration::from_secs(60)),
            "startup is done"
        );
        p.record(ProbeKind::Readiness, &readiness, &Ok(()));
        assert!(!p.ready(), "two successes needed");
        p.record(ProbeKind::Readiness, &readiness, &Ok(()));
        assert!(p.ready());
        assert_eq!(
            p.record(ProbeKind::Readiness, &readiness, &Err("503".into())),
            Verdict::Keep
        );
        assert!(!p.ready(), "one failure is enough");
    }

    #[test]
    fn named_ports_resolve_through_the_container() {
        let c = container(
            serde_json::json!({"name": "a", "image": "i", "ports": [{"name": "web", "containerPort": 8080}]}),
        );
        assert_eq!(resolve_port(&serde_json::json!("web"), &c), Ok(8080));
        assert_eq!(resolve_port(&serde_json::json!(80), &c), Ok(80));
        assert_eq!(resolve_port(&serde_json::json!("81"), &c), Ok(81));
        assert!(resolve_port(&serde_json::json!("db"), &c).is_err());
        assert!(resolve_port(&serde_json::json!(70000), &c).is_err());
    }
}
