//! Per-module health as the supervisor sees it; read by `/healthz` and `/metrics`.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use serde::Serialize;

use crate::metrics::{MetricsSource, PromWriter};

/// Life-cycle state of a supervised module.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ModuleState {
    /// Spawned, not yet receiving.
    Starting,
    /// Receiving messages and answering health pings.
    Running,
    /// Failed (panic, error or unresponsive) and waiting out its back-off before a restart.
    Restarting,
    /// Stopped by shutdown.
    Stopped,
}

impl ModuleState {
    fn as_str(self) -> &'static str {
        match self {
            ModuleState::Starting => "starting",
            ModuleState::Running => "running",
            ModuleState::Restarting => "restarting",
            ModuleState::Stopped => "stopped",
        }
    }
}

/// What `/healthz` reports for one module.
#[derive(Debug, Clone, Serialize)]
pub struct ModuleHealth {
    /// Current state.
    pub state: ModuleState,
    /// Restarts since the node started.
    pub restarts: u64,
    /// Why the module last failed, if it ever did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
}

/// Shared table of module health; cheap to clone.
#[derive(Clone, Default)]
pub struct Health {
    modules: Arc<Mutex<BTreeMap<String, ModuleHealth>>>,
    /// Woken on every change, for [`Health::wait_all_running`].
    changed: Arc<tokio::sync::Notify>,
}

impl Health {
    /// An empty table.
    pub fn new() -> Health {
        Health::default()
    }

    fn with<R>(&self, f: impl FnOnce(&mut BTreeMap<String, ModuleHealth>) -> R) -> R {
        // Only this file touches the map and never panics while holding the lock.
        let mut guard = self.modules.lock().unwrap_or_else(|e| e.into_inner());
        f(&mut guard)
    }

    /// [`Health::with`] for a change: waiters are woken after it.
    fn update(&self, f: impl FnOnce(&mut BTreeMap<String, ModuleHealth>)) {
        self.with(f);
        self.changed.notify_waiters();
    }

    /// Returns once every registered module is running (woken by changes, never polling).
    pub async fn wait_all_running(&self) {
        loop {
            let changed = self.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            if self.all_running() {
                return;
            }
            changed.await;
        }
    }

    /// Sets a module's state, adding it if new.
    pub fn set_state(&self, module: &str, state: ModuleState) {
        self.update(|m| {
            m.entry(module.to_owned())
                .or_insert(ModuleHealth {
                    state,
                    restarts: 0,
                    last_error: None,
                })
                .state = state;
        });
    }

    /// Records a failure and the restart that follows it.
    pub fn record_failure(&self, module: &str, error: String) {
        self.update(|m| {
            if let Some(h) = m.get_mut(module) {
                h.state = ModuleState::Restarting;
                h.restarts += 1;
                h.last_error = Some(error);
            }
        });
    }

    /// A copy of every module's health, by name.
    pub fn snapshot(&self) -> BTreeMap<String, ModuleHealth> {
        self.with(|m| m.clone())
    }

    /// The state of one module.
    pub fn state(&self, module: &str) -> Option<ModuleState> {
        self.with(|m| m.get(module).map(|h| h.state))
    }

    /// True when every registered module is running (vacuously true with none enabled).
    pub fn all_running(&self) -> bool {
        self.with(|m| m.values().all(|h| h.state == ModuleState::Running))
    }
}

impl MetricsSource for Health {
    /// Writes module state and restart counters.
    fn write_metrics(&self, w: &mut PromWriter) {
        let snapshot = self.snapshot();
        w.family(
            "wedge_module_up",
            "1 when the module is running, 0 otherwise.",
            "gauge",
        );
        for (name, h) in &snapshot {
            let up = if h.state == ModuleState::Running {
                1.0
            } else {
                0.0
            };
            w.sample(
                "wedge_module_up",
                &[("module", name), ("state", h.state.as_str())],
                up,
            );
        }
        w.family(
            "wedge_module_restarts_total",
            "Times the supervisor restarted the module.",
            "counter",
        );
        for (name, h) in &snapshot {
            w.sample(
                "wedge_module_restarts_total",
                &[("module", name)],
                h.restarts as f64,
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn waiting_for_all_running_wakes_on_the_change_that_completes_it() {
        let health = Health::new();
        health.set_state("a", ModuleState::Starting);
        health.set_state("b", ModuleState::Running);
        let waiter = tokio::spawn({
            let health = health.clone();
            async move { health.wait_all_running().await }
        });
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        assert!(!waiter.is_finished(), "a is still starting");
        health.set_state("a", ModuleState::Running);
        tokio::time::timeout(std::time::Duration::from_secs(5), waiter)
            .await
            .expect("woken by the change")
            .unwrap();
    }
}
