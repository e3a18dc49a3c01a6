//! Restart back-off and crash-loop detection, shared by every kind of module.
//!
//! A trap discards the instance (its memory may be inconsistent). The next call re-instantiates
//! it, but not before a delay that doubles with each consecutive failure; a module that keeps
//! failing is reported as crash-looping while it keeps being retried at the capped delay.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::error::WasmError;

/// First restart delay.
pub const BACKOFF_INITIAL: Duration = Duration::from_millis(50);
/// Longest restart delay.
pub const BACKOFF_MAX: Duration = Duration::from_secs(30);
/// Consecutive failures from which a module counts as crash-looping.
pub const CRASH_LOOP_AFTER: u32 = 5;

/// Where a module stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum RunState {
    /// Instantiated, or ready to be on the next call.
    Running,
    /// Failed; waiting out its back-off.
    Restarting,
    /// Failed [`CRASH_LOOP_AFTER`] times in a row; still retried at the capped delay.
    CrashLoop,
    /// Removed or shut down.
    Stopped,
}

impl RunState {
    /// The name used in listings and metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            RunState::Running => "running",
            RunState::Restarting => "restarting",
            RunState::CrashLoop => "crash-loop",
            RunState::Stopped => "stopped",
        }
    }
}

/// Consecutive failures and when the next attempt may happen.
#[derive(Debug, Default)]
pub(crate) struct Backoff {
    failures: u32,
    retry_at: Option<Instant>,
    last_error: Option<String>,
}

impl Backoff {
    /// Records a failure and schedules the next attempt.
    pub(crate) fn record_failure(&mut self, error: String) {
        self.failures = self.failures.saturating_add(1);
        let exponent = self.failures.saturating_sub(1).min(16);
        let delay = BACKOFF_INITIAL
            .saturating_mul(1u32 << exponent)
            .min(BACKOFF_MAX);
        self.retry_at = Some(Instant::now() + delay);
        self.last_error = Some(error);
    }

    /// A call succeeded: the module is healthy again.
    pub(crate) fn record_success(&mut self) {
        self.failures = 0;
        self.retry_at = None;
    }

    /// Whether an attempt may be made now; otherwise the error to answer the call with.
    pub(crate) fn check(&self, module: &str) -> Result<(), WasmError> {
        match self.retry_at {
            Some(at) if Instant::now() < at => Err(WasmError::Restarting {
                module: module.to_owned(),
                failures: self.failures,
                retry_in_ms: at.saturating_duration_since(Instant::now()).as_millis() as u64,
                last_error: self.last_error.clone().unwrap_or_default(),
            }),
            _ => Ok(()),
        }
    }

    /// The state this back-off implies.
    pub(crate) fn state(&self) -> RunState {
        match self.failures {
            0 => RunState::Running,
            n if n >= CRASH_LOOP_AFTER => RunState::CrashLoop,
            _ => RunState::Restarting,
        }
    }

    pub(crate) fn failures(&self) -> u32 {
        self.failures
    }

    pub(crate) fn last_error(&self) -> Option<String> {
        self.last_error.clone()
    }
}

/// Counters of one module.
#[derive(Debug, Default)]
pub(crate) struct CallStats {
    pub(crate) calls: AtomicU64,
    pub(crate) traps: AtomicU64,
    pub(crate) restarts: AtomicU64,
}

impl CallStats {
    pub(crate) fn bump(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn get(counter: &AtomicU64) -> u64 {
        counter.load(Ordering::Relaxed)
    }
}

/// What listings and `/metrics` show about a module.
#[derive(Debug, Clone, Serialize)]
pub struct ModuleStatus {
    /// Module name.
    pub name: String,
    /// Version from its manifest.
    pub version: String,
    /// `mapper` or `twin-handler`.
    pub kind: &'static str,
    /// SHA-256 of the deployed file.
    pub sha256: String,
    /// Current state.
    pub state: RunState,
    /// Consecutive failures.
    pub failures: u32,
    /// Re-instantiations after failures.
    pub restarts: u64,
    /// Calls made.
    pub calls: u64,
    /// Calls that trapped.
    pub traps: u64,
    /// Why it last failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    /// Guest log lines dropped over the rate limit.
    pub log_dropped: u64,
    /// Guest log lines cut at the length cap.
    pub log_truncated: u64,
}

/// The error for a call of `manifest`'s module that trapped.
pub(crate) fn trap_error(
    manifest: &crate::manifest::Manifest,
    trap: &wasmtime::Error,
) -> WasmError {
    WasmError::Trap {
        module: manifest.name.clone(),
        reason: describe_trap(
            trap,
            manifest.limits.call_timeout_ms,
            manifest.limits.memory_mib,
        ),
    }
}

/// The outcome of a module's `init` call.
pub(crate) fn init_outcome(
    manifest: &crate::manifest::Manifest,
    outcome: wasmtime::Result<Result<(), String>>,
) -> Result<(), WasmError> {
    match outcome {
        Ok(Ok(())) => Ok(()),
        Ok(Err(refused)) => Err(WasmError::Init(refused)),
        Err(trap) => Err(trap_error(manifest, &trap)),
    }
}

/// Turns a wasmtime call error into words an operator can act on.
fn describe_trap(e: &wasmtime::Error, timeout_ms: u32, memory_mib: u32) -> String {
    if let Some(trap) = e.downcast_ref::<wasmtime::Trap>() {
        return match trap {
            wasmtime::Trap::Interrupt => {
                format!("the call exceeded its time limit of {timeout_ms} ms")
            }
            wasmtime::Trap::UnreachableCodeReached => {
                "the guest panicked (unreachable code reached)".to_owned()
            }
            other => format!("wasm trap: {other}"),
        };
    }
    let text = format!("{e:#}");
    if text.contains("growing memory") || text.contains("memory") && text.contains("limit") {
        return format!("the guest exceeded its memory limit of {memory_mib} MiB");
    }
    text.lines().next().unwrap_or_default().to_owned()
}
