//! Mappers: long-lived device drivers, each on its own thread.
//!
//! A mapper's calls do blocking device I/O through WASI sockets, so each mapper owns a thread
//! that runs its instance, polls every device on its collect cycle, and executes commands
//! (add/remove device, write a desired value, poll now) sent from async code. After a trap the
//! instance is discarded; once the back-off allows, a fresh one is initialised and given its
//! devices again, so a crash costs polls, not configuration.

use std::collections::{BTreeMap, HashSet};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use tokio::sync::oneshot;
use wasmtime::Store;

use crate::bindings::{mapper, wit_types};
use crate::engine::WasmEngine;
use crate::error::WasmError;
use crate::host_state::{HostState, new_store, to_wit};
use crate::lifecycle::{Backoff, CallStats, ModuleStatus, RunState, init_outcome, trap_error};
use crate::linking::{Pre, pre_instantiate};
use crate::manifest::{Manifest, ModuleKind};
use crate::services::HostServices;
use crate::value::TwinValue;

/// Collect cycle of a device whose properties name none.
pub const DEFAULT_COLLECT_CYCLE: Duration = Duration::from_secs(1);

/// One property of a device handed to a mapper.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Property {
    /// Name (twin key).
    pub name: String,
    /// `int`, `float`, `boolean` or `string`.
    pub value_type: String,
    /// Protocol-specific visitor config, JSON text.
    pub visitor: String,
    /// Collect cycle in ms (0: device default).
    pub collect_cycle_ms: u32,
}

/// A device handed to a mapper.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Device {
    /// Device id (`<ns>/<name>` or legacy one segment).
    pub id: String,
    /// Protocol name; must be the mapper's.
    pub protocol: String,
    /// Protocol configuration, JSON text.
    pub protocol_config: String,
    /// Properties to read and write.
    pub properties: Vec<Property>,
}

impl Device {
    fn collect_cycle(&self) -> Duration {
        self.properties
            .iter()
            .map(|p| p.collect_cycle_ms)
            .filter(|ms| *ms > 0)
            .min()
            .map(|ms| Duration::from_millis(u64::from(ms)))
            .unwrap_or(DEFAULT_COLLECT_CYCLE)
    }

    fn to_wit(&self) -> wit_types::Device {
        wit_types::Device {
            id: self.id.clone(),
            protocol: self.protocol.clone(),
            protocol_config: self.protocol_config.clone(),
            properties: self
                .properties
                .iter()
                .map(|p| wit_types::Property {
                    name: p.name.clone(),
                    value_type: p.value_type.clone(),
                    visitor: p.visitor.clone(),
                    collect_cycle_ms: p.collect_cycle_ms,
                })
                .collect(),
        }
    }
}

type Reply<T> = oneshot::Sender<Result<T, WasmError>>;

enum Command {
    Add(Device, Reply<()>),
    Remove(String, Reply<()>),
    Write(String, String, TwinValue, Reply<()>),
    Poll(String, Reply<()>),
    Definitions(Reply<Vec<Device>>),
    Stop,
}

/// State visible from outside the mapper's thread.
#[derive(Default)]
struct Shared {
    backoff: Mutex<Backoff>,
    stats: CallStats,
    stopped: std::sync::atomic::AtomicBool,
}

/// A deployed mapper.
pub struct MapperModule {
    manifest: Manifest,
    sha256: String,
    commands: mpsc::Sender<Command>,
    shared: Arc<Shared>,
    devices: Arc<RwLock<HashSet<String>>>,
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
}

impl MapperModule {
    /// Links `component` as a mapper, starts its thread and waits for its `init`. A component of
    /// the wrong world or a refused configuration fails here, at deploy time.
    pub(crate) async fn start(
        engine: &WasmEngine,
        manifest: Manifest,
        sha256: String,
        component: &wasmtime::component::Component,
        services: HostServices,
    ) -> Result<MapperModule, WasmError> {
        let Pre::Mapper(pre) = pre_instantiate(engine, component, ModuleKind::Mapper)? else {
            return Err(WasmError::Engine("linked for the wrong world".to_owned()));
        };
        let (commands, inbox) = mpsc::channel();
        let shared = Arc::new(Shared::default());
        let devices = Arc::new(RwLock::new(HashSet::new()));
        let (ready_tx, ready_rx) = oneshot::channel();
        let mut runner = Runner {
            engine: engine.clone(),
            manifest: manifest.clone(),
            pre,
            services,
            shared: shared.clone(),
            device_ids: devices.clone(),
            live: None,
            devices: BTreeMap::new(),
            last_poll_error: BTreeMap::new(),
            started_once: false,
        };
        let thread = std::thread::Builder::new()
            .name(format!("wedge-mapper-{}", manifest.name))
            .spawn(move || {
                let first = runner.ensure_live();
                let ok = first.is_ok();
                let _ = ready_tx.send(first);
                if ok {
                    runner.run(inbox);
                }
            })
            .map_err(|e| WasmError::Engine(format!("cannot start mapper thread: {e}")))?;
        match ready_rx.await {
            Ok(Ok(())) => Ok(MapperModule {
                manifest,
                sha256,
                commands,
                shared,
                devices,
                thread: Mutex::new(Some(thread)),
            }),
            Ok(Err(e)) => {
                let _ = thread.join();
                Err(e)
            }
            Err(_) => Err(WasmError::Engine("mapper thread ended during init".into())),
        }
    }

    /// The manifest.
    pub fn manifest(&self) -> &Manifest {
        &self.manifest
    }

    /// The protocol this mapper drives.
    pub fn protocol(&self) -> &str {
        self.manifest.protocol.as_deref().unwrap_or_default()
    }

    async fn ask<T>(&self, make: impl FnOnce(Reply<T>) -> Command) -> Result<T, WasmError> {
        let (tx, rx) = oneshot::channel();
        self.commands
            .send(make(tx))
            .map_err(|_| WasmError::NotFound(self.manifest.name.clone()))?;
        rx.await
            .unwrap_or_else(|_| Err(WasmError::NotFound(self.manifest.name.clone())))
    }

    /// Starts driving `device` (polled on its collect cycle from now on).
    pub async fn add_device(&self, device: Device) -> Result<(), WasmError> {
        if device.protocol != self.protocol() {
            return Err(WasmError::Guest(format!(
                "device {} speaks {:?}, mapper {} drives {:?}",
                device.id,
                device.protocol,
                self.manifest.name,
                self.protocol()
            )));
        }
        self.ask(|reply| Command::Add(device, reply)).await
    }

    /// Stops driving a device.
    pub async fn remove_device(&self, id: &str) -> Result<(), WasmError> {
        let id = id.to_owned();
        self.ask(|reply| Command::Remove(id, reply)).await
    }

    /// Writes a desired value to the device.
    pub async fn write_property(
        &self,
        device: &str,
        property: &str,
        value: TwinValue,
    ) -> Result<(), WasmError> {
        let (d, p) = (device.to_owned(), property.to_owned());
        self.ask(|reply| Command::Write(d, p, value, reply)).await
    }

    /// Polls a device now, outside its cycle.
    pub async fn poll(&self, device: &str) -> Result<(), WasmError> {
        let d = device.to_owned();
        self.ask(|reply| Command::Poll(d, reply)).await
    }

    /// The definitions of the devices it drives.
    pub async fn device_definitions(&self) -> Result<Vec<Device>, WasmError> {
        self.ask(Command::Definitions).await
    }

    /// The devices it drives.
    pub fn devices(&self) -> Vec<String> {
        let mut ids: Vec<String> = self
            .devices
            .read()
            .map(|d| d.iter().cloned().collect())
            .unwrap_or_default();
        ids.sort();
        ids
    }

    /// Stops the thread and drops the instance; waits for a call in progress to finish.
    pub fn stop(&self) {
        self.shared
            .stopped
            .store(true, std::sync::atomic::Ordering::Relaxed);
        let _ = self.commands.send(Command::Stop);
        let thread = self.thread.lock().ok().and_then(|mut t| t.take());
        if let Some(thread) = thread {
            let _ = thread.join();
        }
    }

    /// Status for listings and metrics.
    pub fn status(&self) -> ModuleStatus {
        let backoff = self
            .shared
            .backoff
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let stopped = self
            .shared
            .stopped
            .load(std::sync::atomic::Ordering::Relaxed);
        ModuleStatus {
            name: self.manifest.name.clone(),
            version: self.manifest.version.clone(),
            kind: self.manifest.kind.as_str(),
            sha256: self.sha256.clone(),
            state: if stopped {
                RunState::Stopped
            } else {
                backoff.state()
            },
            failures: backoff.failures(),
            restarts: CallStats::get(&self.shared.stats.restarts),
            calls: CallStats::get(&self.shared.stats.calls),
            traps: CallStats::get(&self.shared.stats.traps),
            last_error: backoff.last_error(),
        }
    }
}

impl Drop for MapperModule {
    fn drop(&mut self) {
        self.stop();
    }
}

struct Live {
    store: Store<HostState>,
    bindings: mapper::Mapper,
}

struct Scheduled {
    device: Device,
    cycle: Duration,
    next: Instant,
}

/// The mapper thread's state.
struct Runner {
    engine: WasmEngine,
    manifest: Manifest,
    pre: mapper::MapperPre<HostState>,
    services: HostServices,
    shared: Arc<Shared>,
    device_ids: Arc<RwLock<HashSet<String>>>,
    live: Option<Live>,
    devices: BTreeMap<String, Scheduled>,
    last_poll_error: BTreeMap<String, String>,
    started_once: bool,
}

impl Runner {
    fn run(&mut self, inbox: mpsc::Receiver<Command>) {
        loop {
            let now = Instant::now();
            let next_due = self.devices.values().map(|s| s.next).min();
            let wait = next_due
                .map(|due| due.saturating_duration_since(now))
                .unwrap_or(Duration::from_secs(3600));
            match inbox.recv_timeout(wait) {
                Ok(Command::Stop) | Err(RecvTimeoutError::Disconnected) => return,
                Ok(command) => self.execute(command),
                Err(RecvTimeoutError::Timeout) => self.poll_due(),
            }
        }
    }

    fn execute(&mut self, command: Command) {
        match command {
            Command::Add(device, reply) => {
                let wit = device.to_wit();
                let result = self.call(|l| l.bindings.call_add_device(&mut l.store, &wit));
                if result.is_ok() {
                    self.write_ids(|ids| {
                        ids.insert(device.id.clone());
                    });
                    let cycle = device.collect_cycle();
                    self.devices.insert(
                        device.id.clone(),
                        Scheduled {
                            device,
                            cycle,
                            next: Instant::now(),
                        },
                    );
                }
                let _ = reply.send(result);
            }
            Command::Remove(id, reply) => {
                self.devices.remove(&id);
                self.last_poll_error.remove(&id);
                self.write_ids(|ids| {
                    ids.remove(&id);
                });
                let result =
                    self.call(|l| l.bindings.call_remove_device(&mut l.store, &id).map(Ok));
                let _ = reply.send(result);
            }
            Command::Write(device, property, value, reply) => {
                let value = to_wit(value);
                let result = self.call(|l| {
                    l.bindings
                        .call_write_property(&mut l.store, &device, &property, &value)
                });
                let _ = reply.send(result);
            }
            Command::Poll(device, reply) => {
                let _ = reply.send(self.poll_one(&device));
            }
            Command::Definitions(reply) => {
                let _ = reply.send(Ok(self
                    .devices
                    .values()
                    .map(|s| s.device.clone())
                    .collect()));
            }
            Command::Stop => {}
        }
    }

    fn write_ids(&self, f: impl FnOnce(&mut HashSet<String>)) {
        if let Ok(mut ids) = self.device_ids.write() {
            f(&mut ids);
        }
    }

    fn poll_due(&mut self) {
        let now = Instant::now();
        let due: Vec<String> = self
            .devices
            .iter()
            .filter(|(_, s)| s.next <= now)
            .map(|(id, _)| id.clone())
            .collect();
        for id in due {
            if let Some(s) = self.devices.get_mut(&id) {
                s.next = now + s.cycle;
            }
            let outcome = self.poll_one(&id);
            self.note_poll(&id, outcome);
        }
    }

    /// Logs a poll failure once per distinct error, and its recovery.
    fn note_poll(&mut self, device: &str, outcome: Result<(), WasmError>) {
        match outcome {
            Ok(()) => {
                if self.last_poll_error.remove(device).is_some() {
                    tracing::info!(module = %self.manifest.name, device, "polling works again");
                }
            }
            Err(e) => {
                let text = e.to_string();
                if self.last_poll_error.get(device) != Some(&text) {
                    tracing::warn!(module = %self.manifest.name, device, "poll failed: {text}");
                    self.last_poll_error.insert(device.to_owned(), text);
                }
            }
        }
    }

    fn poll_one(&mut self, device: &str) -> Result<(), WasmError> {
        self.call(|l| l.bindings.call_poll(&mut l.store, device))
    }

    /// Runs one export under the deadline; a guest `Err` is returned as `WasmError::Guest`, a
    /// trap discards the instance.
    fn call(
        &mut self,
        f: impl FnOnce(&mut Live) -> wasmtime::Result<Result<(), String>>,
    ) -> Result<(), WasmError> {
        self.ensure_live()?;
        let ticks = self.timeout_ticks();
        let Some(live) = self.live.as_mut() else {
            return Err(WasmError::NotFound(self.manifest.name.clone()));
        };
        CallStats::bump(&self.shared.stats.calls);
        live.store.set_epoch_deadline(ticks);
        match f(live) {
            Ok(Ok(())) => {
                self.backoff().record_success();
                Ok(())
            }
            Ok(Err(guest)) => Err(WasmError::Guest(guest)),
            Err(trap) => {
                CallStats::bump(&self.shared.stats.traps);
                self.live = None;
                let error = trap_error(&self.manifest, &trap);
                tracing::warn!("mapper: {error}");
                self.backoff().record_failure(error.to_string());
                Err(error)
            }
        }
    }

    fn backoff(&self) -> std::sync::MutexGuard<'_, Backoff> {
        self.shared
            .backoff
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }

    fn timeout_ticks(&self) -> u64 {
        WasmEngine::ticks_for(Duration::from_millis(u64::from(
            self.manifest.limits.call_timeout_ms,
        )))
    }

    /// Instantiates and initialises the mapper if it has no live instance, and hands a fresh
    /// instance the devices the old one drove.
    fn ensure_live(&mut self) -> Result<(), WasmError> {
        if self.live.is_some() {
            return Ok(());
        }
        self.backoff().check(&self.manifest.name)?;
        match self.instantiate() {
            Ok(live) => {
                if self.started_once {
                    CallStats::bump(&self.shared.stats.restarts);
                }
                self.started_once = true;
                self.live = Some(live);
                let devices: Vec<wit_types::Device> =
                    self.devices.values().map(|s| s.device.to_wit()).collect();
                for device in devices {
                    let id = device.id.clone();
                    let ticks = self.timeout_ticks();
                    if let Some(live) = self.live.as_mut() {
                        live.store.set_epoch_deadline(ticks);
                        let result = live.bindings.call_add_device(&mut live.store, &device);
                        if !matches!(result, Ok(Ok(()))) {
                            tracing::warn!(module = %self.manifest.name, device = %id, "device not re-added after restart");
                        }
                    }
                }
                Ok(())
            }
            Err(e) => {
                self.backoff().record_failure(e.to_string());
                Err(e)
            }
        }
    }

    fn instantiate(&self) -> Result<Live, WasmError> {
        let mut store = new_store(
            &self.engine,
            &self.manifest,
            self.services.clone(),
            self.device_ids.clone(),
            self.timeout_ticks(),
        );
        let bindings = self
            .pre
            .instantiate(&mut store)
            .map_err(|e| WasmError::Invalid(format!("cannot instantiate: {e:#}")))?;
        let init = bindings.call_init(&mut store, &self.manifest.config_json());
        init_outcome(&self.manifest, init)?;
        Ok(Live { store, bindings })
    }
}
