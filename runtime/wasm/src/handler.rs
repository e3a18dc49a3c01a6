//! Twin handlers: short synchronous calls inside the twin update path.
//!
//! One instance per module, behind a mutex: calls are microseconds long, so serialising them
//! costs less than pooling instances would. A trap discards the instance; the next call
//! re-instantiates it from the `InstancePre` once the back-off allows.
//!
//! Every call, and the instantiation with `init`, runs under a wall-clock deadline (the
//! manifest's `call-timeout-ms`) twice over: epoch interruption stops guest code that spins,
//! and a tokio timeout around the call's future stops a guest parked in a host call (a sleep,
//! a connect, a read) — dropping the future cancels the call where the host awaits, and the
//! instance, left mid-call, is discarded like after a trap.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use wasmtime::Store;

use crate::bindings::{handler, wit_types};
use crate::engine::WasmEngine;
use crate::error::WasmError;
use crate::guest_log::{GuestLog, LogPolicy};
use crate::host_state::{HostState, from_wit, new_store, to_wit};
use crate::lifecycle::{Backoff, CallStats, ModuleStatus, init_outcome, trap_error};
use crate::linking::{Pre, pre_instantiate};
use crate::manifest::{Manifest, ModuleKind};
use crate::services::{HostServices, TwinReader};
use crate::value::TwinValue;

/// Who proposes a twin change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UpdateSource {
    /// A mapper (Wasm `report` or MQTT `twin/update`).
    Mapper,
    /// A cloud sync.
    Cloud,
}

/// A proposed change to one twin property.
#[derive(Debug, Clone, PartialEq)]
pub struct TwinUpdate {
    /// Device id.
    pub device: String,
    /// Property (twin key).
    pub property: String,
    /// True for the desired (`expected`) side, false for the reported (`actual`) side.
    pub desired: bool,
    /// Proposed value.
    pub value: TwinValue,
    /// Value stored now on that side.
    pub previous: Option<TwinValue>,
    /// Who proposes it.
    pub source: UpdateSource,
}

/// A handler's decision.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    /// Store as proposed.
    Accept,
    /// Store this value instead.
    Replace(TwinValue),
    /// Refuse, with a reason for the sender.
    Reject(String),
}

struct Live {
    store: Store<HostState>,
    bindings: handler::TwinHandler,
}

/// A deployed twin handler.
pub struct HandlerModule {
    manifest: Manifest,
    sha256: String,
    engine: WasmEngine,
    pre: handler::TwinHandlerPre<HostState>,
    services: HostServices,
    timeout_ticks: u64,
    /// The wall-clock limit of one call (and of instantiation with `init`).
    call_limit: Duration,
    log: Arc<GuestLog>,
    /// The instance; an async lock because calls await inside the guest.
    live: tokio::sync::Mutex<Option<Live>>,
    backoff: Mutex<Backoff>,
    stats: CallStats,
}

impl HandlerModule {
    /// Links `component` as a twin handler and instantiates it once (running `init`), so a
    /// component of the wrong world or a refused configuration fails here, at deploy time.
    pub(crate) async fn new(
        engine: &WasmEngine,
        manifest: Manifest,
        sha256: String,
        component: &wasmtime::component::Component,
        services: HostServices,
        log: LogPolicy,
    ) -> Result<HandlerModule, WasmError> {
        let Pre::Handler(pre) = pre_instantiate(engine, component, ModuleKind::TwinHandler)? else {
            return Err(WasmError::engine("linked for the wrong world"));
        };
        let call_limit = Duration::from_millis(u64::from(manifest.limits.call_timeout_ms));
        let timeout_ticks = WasmEngine::ticks_for(call_limit);
        let module = HandlerModule {
            manifest,
            sha256,
            engine: engine.clone(),
            pre,
            services,
            timeout_ticks,
            call_limit,
            log: Arc::new(GuestLog::new(log)),
            live: tokio::sync::Mutex::new(None),
            backoff: Mutex::new(Backoff::default()),
            stats: CallStats::default(),
        };
        let live = module.instantiate().await?;
        *module.live.lock().await = Some(live);
        Ok(module)
    }

    fn backoff(&self) -> std::sync::MutexGuard<'_, Backoff> {
        // Only plain bookkeeping happens under this lock; a poisoned one is still consistent.
        self.backoff.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A fresh instance with `init` run, all within the call deadline.
    async fn instantiate(&self) -> Result<Live, WasmError> {
        let mut store = new_store(
            &self.engine,
            &self.manifest,
            self.services.clone(),
            Arc::default(),
            self.log.clone(),
            self.timeout_ticks,
        );
        let config = self.manifest.config_json();
        let started = async {
            let bindings = self
                .pre
                .instantiate_async(&mut store)
                .await
                .map_err(|e| WasmError::invalid_from("cannot instantiate", e))?;
            let init = bindings.call_init(&mut store, &config).await;
            init_outcome(&self.manifest, init)?;
            Ok::<_, WasmError>(bindings)
        };
        let _clock = self.engine.guest_running();
        let bindings = match tokio::time::timeout(self.call_limit, started).await {
            Ok(outcome) => outcome?,
            Err(_) => return Err(self.overran("init")),
        };
        Ok(Live { store, bindings })
    }

    /// The error of a call cut at its deadline while the guest waited in a host call.
    fn overran(&self, what: &str) -> WasmError {
        WasmError::Trap {
            module: self.manifest.name.clone(),
            reason: format!(
                "{what} exceeded its time limit of {} ms (stopped while waiting in a host call)",
                self.manifest.limits.call_timeout_ms
            ),
        }
    }

    /// The manifest.
    pub fn manifest(&self) -> &Manifest {
        &self.manifest
    }

    /// True when the manifest binds `device`.
    pub fn binds(&self, device: &str) -> bool {
        self.manifest
            .devices
            .iter()
            .any(|p| crate::capabilities::device_matches(p, device))
    }

    /// Asks the handler about `update`. `twins` answers the guest's twin reads during the call.
    /// A trap fails this call only (the instance is discarded and restarted with back-off).
    pub async fn on_update(
        &self,
        update: TwinUpdate,
        twins: Option<Arc<dyn TwinReader>>,
    ) -> Result<Verdict, WasmError> {
        let mut slot = self.live.lock().await;
        if slot.is_none() {
            self.backoff().check(&self.manifest.name)?;
            match self.instantiate().await {
                Ok(live) => {
                    CallStats::bump(&self.stats.restarts);
                    *slot = Some(live);
                }
                Err(e) => {
                    self.backoff().record_failure(e.to_string());
                    return Err(e);
                }
            }
        }
        let Some(live) = slot.as_mut() else {
            return Err(WasmError::NotFound(self.manifest.name.clone()));
        };
        CallStats::bump(&self.stats.calls);
        live.store.data_mut().twin_reader = twins;
        live.store.set_epoch_deadline(self.timeout_ticks);
        let request = wit_types::TwinUpdate {
            device: update.device,
            property: update.property,
            desired: update.desired,
            value: to_wit(update.value),
            previous: update.previous.map(to_wit),
            source: match update.source {
                UpdateSource::Mapper => wit_types::UpdateSource::Mapper,
                UpdateSource::Cloud => wit_types::UpdateSource::Cloud,
            },
        };
        let call = live.bindings.call_on_update(&mut live.store, &request);
        let clock = self.engine.guest_running();
        let outcome = match tokio::time::timeout(self.call_limit, call).await {
            Ok(outcome) => outcome.map_err(|trap| trap_error(&self.manifest, &trap)),
            Err(_) => Err(self.overran("the call")),
        };
        drop(clock);
        live.store.data_mut().twin_reader = None;
        match outcome {
            Ok(verdict) => {
                self.backoff().record_success();
                Ok(match verdict {
                    wit_types::Verdict::Accept => Verdict::Accept,
                    wit_types::Verdict::Replace(v) => Verdict::Replace(from_wit(v)),
                    wit_types::Verdict::Reject(reason) => Verdict::Reject(reason),
                })
            }
            Err(error) => {
                CallStats::bump(&self.stats.traps);
                *slot = None;
                tracing::warn!("twin handler: {error}");
                self.backoff().record_failure(error.to_string());
                Err(error)
            }
        }
    }

    /// Its last log lines numbered after `after`, oldest first.
    pub fn log_lines(&self, after: u64) -> Vec<crate::GuestLogLine> {
        self.log.lines_after(after)
    }

    /// Status for listings and metrics.
    pub fn status(&self) -> ModuleStatus {
        let backoff = self.backoff();
        ModuleStatus {
            name: self.manifest.name.clone(),
            version: self.manifest.version.clone(),
            kind: self.manifest.kind.as_str(),
            sha256: self.sha256.clone(),
            state: backoff.state(),
            failures: backoff.failures(),
            restarts: CallStats::get(&self.stats.restarts),
            calls: CallStats::get(&self.stats.calls),
            traps: CallStats::get(&self.stats.traps),
            last_error: backoff.last_error(),
            log_dropped: self.log.dropped(),
            log_truncated: self.log.truncated(),
        }
    }
}
