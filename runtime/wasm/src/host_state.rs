//! The state of one guest instance, and the imports it calls.
//!
//! Every capability check happens here, on the host side of the call: a guest asking for a
//! topic or device it was not granted gets an error value back, never a trap, and nothing is
//! sent.

use std::collections::HashSet;
use std::sync::{Arc, RwLock};

use wasmtime::component::ResourceTable;
use wasmtime_wasi::{WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};

use crate::bindings::{handler, mapper, wit_types};
use crate::capabilities;
use crate::guest_log::{Admit, GuestLog};
use crate::manifest::Manifest;
use crate::memory::StoreMemory;
use crate::services::{DeviceState, HostServices, TwinReader};
use crate::value::TwinValue;

/// Per-instance state held by the wasmtime store.
pub(crate) struct HostState {
    wasi: WasiCtx,
    table: ResourceTable,
    pub(crate) limits: StoreMemory,
    module: Arc<str>,
    log: Arc<GuestLog>,
    topics: Vec<String>,
    bound_devices: Vec<String>,
    services: HostServices,
    /// Devices a mapper drives (reports about others are refused).
    pub(crate) mapper_devices: Arc<RwLock<HashSet<String>>>,
    /// Twin access for the handler call in progress.
    pub(crate) twin_reader: Option<Arc<dyn TwinReader>>,
}

impl HostState {
    /// Fresh state for an instance of `manifest`'s module: WASI with no files, no environment,
    /// no arguments, and TCP only to the manifest's endpoints; its log lines go through the
    /// module's `log`.
    pub(crate) fn new(
        manifest: &Manifest,
        services: HostServices,
        mapper_devices: Arc<RwLock<HashSet<String>>>,
        log: Arc<GuestLog>,
    ) -> HostState {
        let grants = Arc::new(manifest.endpoint_grants());
        let module = manifest.name.clone();
        let mut wasi = WasiCtxBuilder::new();
        wasi.allow_tcp(!grants.is_empty())
            .allow_udp(!grants.is_empty())
            .allow_ip_name_lookup(grants.has_names())
            .socket_addr_check(move |addr, use_| {
                let grants = grants.clone();
                let module = module.clone();
                Box::pin(async move {
                    let allowed = grants.allows(addr, use_).await;
                    if !allowed {
                        // The guest gets `access-denied` (PermissionDenied), never a trap; the
                        // operator learns which address and grants, at debug level so a
                        // retrying mapper cannot flood the log.
                        tracing::debug!(
                            %module,
                            %addr,
                            use_ = ?use_,
                            grants = %grants.describe(),
                            "socket refused: not granted by capabilities.endpoints"
                        );
                    }
                    allowed
                })
            });
        let limits = StoreMemory::new(manifest.limits.memory_mib);
        HostState {
            wasi: wasi.build(),
            table: ResourceTable::new(),
            limits,
            module: Arc::from(manifest.name.as_str()),
            log,
            topics: manifest.capabilities.topics.clone(),
            bound_devices: manifest.devices.clone(),
            services,
            mapper_devices,
            twin_reader: None,
        }
    }

    fn bound(&self, device: &str) -> bool {
        self.bound_devices
            .iter()
            .any(|p| capabilities::device_matches(p, device))
    }
}

/// A store for one instance of `manifest`'s module, with its memory limit and a call deadline
/// of `ticks` epochs that traps.
pub(crate) fn new_store(
    engine: &crate::engine::WasmEngine,
    manifest: &Manifest,
    services: HostServices,
    mapper_devices: Arc<RwLock<HashSet<String>>>,
    log: Arc<GuestLog>,
    ticks: u64,
) -> wasmtime::Store<HostState> {
    let state = HostState::new(manifest, services, mapper_devices, log);
    let mut store = wasmtime::Store::new(engine.engine(), state);
    store.limiter(|s| &mut s.limits);
    store.set_epoch_deadline(ticks);
    store.epoch_deadline_trap();
    store
}

impl WasiView for HostState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

/// Converts between the host's value type and the generated one.
pub(crate) fn to_wit(value: TwinValue) -> wit_types::TwinValue {
    match value {
        TwinValue::Text(s) => wit_types::TwinValue::Text(s),
        TwinValue::Integer(i) => wit_types::TwinValue::Integer(i),
        TwinValue::Float(f) => wit_types::TwinValue::Float(f),
        TwinValue::Boolean(b) => wit_types::TwinValue::Boolean(b),
    }
}

/// Converts a guest value back.
pub(crate) fn from_wit(value: wit_types::TwinValue) -> TwinValue {
    match value {
        wit_types::TwinValue::Text(s) => TwinValue::Text(s),
        wit_types::TwinValue::Integer(i) => TwinValue::Integer(i),
        wit_types::TwinValue::Float(f) => TwinValue::Float(f),
        wit_types::TwinValue::Boolean(b) => TwinValue::Boolean(b),
    }
}

impl wit_types::Host for HostState {}

impl mapper::wedge::device::log::Host for HostState {
    fn write(&mut self, level: mapper::wedge::device::log::Level, message: String) {
        use mapper::wedge::device::log::Level;
        let module = &*self.module;
        match self.log.admit() {
            Admit::Drop => return,
            Admit::Write { dropped: 0 } => {}
            Admit::Write { dropped } => {
                tracing::warn!(
                    module,
                    dropped,
                    "guest log lines dropped over the module's rate (wedge.modules.logLinesPerSecond)"
                );
            }
        }
        let message = self.log.render(&message);
        let name = match level {
            Level::Trace => "trace",
            Level::Debug => "debug",
            Level::Info => "info",
            Level::Warn => "warn",
            Level::Error => "error",
        };
        match level {
            Level::Trace => tracing::trace!(module, "{message}"),
            Level::Debug => tracing::debug!(module, "{message}"),
            Level::Info => tracing::info!(module, "{message}"),
            Level::Warn => tracing::warn!(module, "{message}"),
            Level::Error => tracing::error!(module, "{message}"),
        }
        self.log.remember(name, message);
    }
}

impl mapper::wedge::device::report::Host for HostState {
    fn actual(
        &mut self,
        device: String,
        property: String,
        value: wit_types::TwinValue,
    ) -> Result<(), String> {
        if !self.drives(&device) {
            return Err(format!("device {device:?} is not driven by this mapper"));
        }
        self.services
            .mapper_sink
            .report_actual(&self.module, &device, &property, from_wit(value))
    }

    fn state(&mut self, device: String, state: wit_types::DeviceState) -> Result<(), String> {
        if !self.drives(&device) {
            return Err(format!("device {device:?} is not driven by this mapper"));
        }
        let state = match state {
            wit_types::DeviceState::Online => DeviceState::Online,
            wit_types::DeviceState::Offline => DeviceState::Offline,
            wit_types::DeviceState::Ok => DeviceState::Ok,
            wit_types::DeviceState::Unknown => DeviceState::Unknown,
            wit_types::DeviceState::Unhealthy => DeviceState::Unhealthy,
        };
        self.services
            .mapper_sink
            .report_state(&self.module, &device, state)
    }
}

impl HostState {
    fn drives(&self, device: &str) -> bool {
        self.mapper_devices
            .read()
            .map(|d| d.contains(device))
            .unwrap_or(false)
    }
}

impl handler::wedge::device::twin_read::Host for HostState {
    fn actual(&mut self, device: String, property: String) -> Option<wit_types::TwinValue> {
        if !self.bound(&device) {
            return None;
        }
        self.twin_reader
            .as_ref()?
            .actual(&device, &property)
            .map(to_wit)
    }

    fn desired(&mut self, device: String, property: String) -> Option<wit_types::TwinValue> {
        if !self.bound(&device) {
            return None;
        }
        self.twin_reader
            .as_ref()?
            .desired(&device, &property)
            .map(to_wit)
    }
}

impl handler::wedge::device::publish::Host for HostState {
    fn send(&mut self, topic: String, payload: Vec<u8>) -> Result<(), String> {
        if !capabilities::topic_allowed(&self.topics, &topic) {
            tracing::warn!(module = %self.module, topic, "publish refused: topic not in the manifest");
            return Err(format!(
                "publish to {topic:?} refused: the manifest allows only {:?}",
                self.topics
            ));
        }
        self.services
            .publisher
            .publish(&self.module, &topic, payload)
    }
}
