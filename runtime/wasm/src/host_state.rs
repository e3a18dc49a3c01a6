//! The state of one guest instance, and the imports it calls.
//!
//! Every capability check happens here, on the host side of the call: a guest asking for a
//! topic or device it was not granted gets an error value back, never a trap, and nothing is
//! sent.

use std::sync::Arc;

use wasmtime::component::{Resource, ResourceTable};
use wasmtime_wasi::{WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};
use wasmtime_wasi_http::{WasiHttpCtx, WasiHttpCtxView, WasiHttpView};

use crate::bindings::{handler, mapper, wit_types};
use crate::capabilities;
use crate::guest_log::{Admit, GuestLog};
use crate::http::GrantedHttp;
use crate::manifest::Manifest;
use crate::memory::StoreMemory;
use crate::reporting::{DeviceRules, DrivenDevices, PushClock};
use crate::serial::{self, LineSettings, Parity, SerialPort};
use crate::services::{DeviceState, HostServices, TwinReader};
use crate::value::TwinValue;

/// Per-instance state held by the wasmtime store.
pub(crate) struct HostState {
    wasi: WasiCtx,
    http: WasiHttpCtx,
    http_hooks: GrantedHttp,
    table: ResourceTable,
    serial_grants: Vec<String>,
    pub(crate) limits: StoreMemory,
    module: Arc<str>,
    log: Arc<GuestLog>,
    topics: Vec<String>,
    bound_devices: Vec<String>,
    services: HostServices,
    /// Devices a mapper drives, with their reporting rules (reports about others are refused).
    pub(crate) mapper_devices: DrivenDevices,
    /// When each property last pushed.
    push_clock: PushClock,
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
        mapper_devices: DrivenDevices,
        log: Arc<GuestLog>,
    ) -> HostState {
        let grants = Arc::new(manifest.endpoint_grants());
        let module = manifest.name.clone();
        let http_hooks = GrantedHttp {
            module: Arc::from(manifest.name.as_str()),
            grants: grants.clone(),
        };
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
            http: WasiHttpCtx::new(),
            http_hooks,
            table: ResourceTable::new(),
            serial_grants: manifest.capabilities.serial.clone(),
            limits,
            module: Arc::from(manifest.name.as_str()),
            log,
            topics: manifest.capabilities.topics.clone(),
            bound_devices: manifest.devices.clone(),
            services,
            mapper_devices,
            push_clock: PushClock::default(),
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
    mapper_devices: DrivenDevices,
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

impl WasiHttpView for HostState {
    fn http(&mut self) -> WasiHttpCtxView<'_> {
        WasiHttpCtxView {
            ctx: &mut self.http,
            table: &mut self.table,
            hooks: &mut self.http_hooks,
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
        let Some(rules) = self.rules(&device) else {
            return Err(format!("device {device:?} is not driven by this mapper"));
        };
        let value = from_wit(value);
        let routing = self.push_clock.route(
            &rules,
            &device,
            &property,
            &value,
            std::time::Instant::now(),
        )?;
        if let Some((topic, payload)) = routing.push {
            // The push is the Device's configuration, not the guest's doing: its failure is
            // logged, and the report goes on.
            if let Err(e) = self
                .services
                .publisher
                .publish(&self.module, &topic, payload)
            {
                tracing::debug!(module = %self.module, device, property, topic, "pushMethod.mqtt publish failed: {e}");
            }
        }
        if !routing.to_twin {
            return Ok(());
        }
        self.services
            .mapper_sink
            .report_actual(&self.module, &device, &property, value)
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
        self.rules(device).is_some()
    }

    fn rules(&self, device: &str) -> Option<Arc<DeviceRules>> {
        self.mapper_devices.read().ok()?.get(device).cloned()
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

impl mapper::wedge::device::publish::Host for HostState {
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

use mapper::wedge::device::serial as wit_serial;

impl wit_serial::Host for HostState {
    async fn open(
        &mut self,
        path: String,
        settings: wit_serial::Settings,
    ) -> Result<Resource<SerialPort>, String> {
        if !serial::granted(&self.serial_grants, &path) {
            tracing::debug!(module = %self.module, path, grants = ?self.serial_grants, "serial port refused: not granted by capabilities.serial");
            return Err(format!(
                "serial port {path:?} refused: capabilities.serial grants only {:?}",
                self.serial_grants
            ));
        }
        let settings = LineSettings {
            baud_rate: settings.baud_rate,
            data_bits: settings.data_bits,
            parity: match settings.parity {
                wit_serial::Parity::None => Parity::None,
                wit_serial::Parity::Even => Parity::Even,
                wit_serial::Parity::Odd => Parity::Odd,
            },
            stop_bits: settings.stop_bits,
        };
        let port = SerialPort::open(&path, settings)?;
        self.table
            .push(port)
            .map_err(|e| format!("serial port {path}: {e}"))
    }
}

impl wit_serial::HostPort for HostState {
    async fn write(&mut self, port: Resource<SerialPort>, data: Vec<u8>) -> Result<(), String> {
        let port = self.table.get(&port).map_err(|e| e.to_string())?;
        port.write(&data).await
    }

    async fn read(
        &mut self,
        port: Resource<SerialPort>,
        max: u32,
        timeout_ms: u32,
    ) -> Result<Vec<u8>, String> {
        let port = self.table.get(&port).map_err(|e| e.to_string())?;
        port.read(max, std::time::Duration::from_millis(u64::from(timeout_ms)))
            .await
    }

    fn discard_input(&mut self, port: Resource<SerialPort>) -> Result<(), String> {
        let port = self.table.get(&port).map_err(|e| e.to_string())?;
        port.discard_input()
    }

    fn drop(&mut self, port: Resource<SerialPort>) -> wasmtime::Result<()> {
        self.table.delete(port)?;
        Ok(())
    }
}
