//! Mappers: long-lived device drivers, each on its own thread.
//!
//! A mapper's calls do device I/O through WASI sockets and may run guest code for up to their
//! deadline, so each mapper owns a thread (with a single-threaded tokio runtime for the async
//! WASI implementation) that runs its instance, polls every device on its collect cycle, and
//! executes commands (add/remove device, write a desired value, poll now) sent from async
//! code. After a trap the instance is discarded; once the back-off allows, a fresh one is
//! initialised and given its devices again, so a crash costs polls, not configuration.
//!
//! Every call (and `init`) runs under the manifest's wall-clock deadline: epoch interruption
//! stops guest code, a tokio timeout stops a guest waiting in a host call (a connect to a
//! full accept queue, a read that never comes). Stopping the mapper cancels the call in
//! progress the same way, so removing a module or shutting down never waits on a guest.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, oneshot, watch};
use wasmtime::Store;

use crate::bindings::{mapper, wit_types};
use crate::engine::WasmEngine;
use crate::error::WasmError;
use crate::guest_log::{GuestLog, LogPolicy};
use crate::host_state::{HostState, new_store, to_wit};
use crate::lifecycle::{Backoff, CallStats, ModuleStatus, RunState, init_outcome, trap_error};
use crate::linking::{Pre, pre_instantiate};
use crate::manifest::{Manifest, ModuleKind};
use crate::reporting::{DeviceRules, DrivenDevices, PushTarget};
use crate::services::HostServices;
use crate::value::TwinValue;

/// Collect cycle of a property that names none (`collectCycle` 0 or unset), as KubeEdge's
/// mapper-framework defaults it; also the cycle of a device without properties.
pub const DEFAULT_COLLECT_CYCLE: Duration = Duration::from_secs(1);

/// How long [`MapperModule::stop`] waits for the thread to end after cancelling its call.
const STOP_WAIT: Duration = Duration::from_secs(2);

/// One property of a device handed to a mapper.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Property {
    /// Name (twin key).
    pub name: String,
    /// `int`, `float`, `boolean` or `string`.
    pub value_type: String,
    /// Protocol-specific visitor config, JSON text.
    pub visitor: String,
    /// Collect cycle in ms (0: device default).
    pub collect_cycle_ms: u32,
    /// `reportToCloud`: values the guest reports enter the twin path only when set, as a
    /// KubeEdge mapper reports only such properties.
    pub report_to_cloud: bool,
    /// `reportCycle` in ms (0: 1 s): at most one push per cycle.
    pub report_cycle_ms: u32,
    /// `pushMethod.mqtt`: where reported values are also published.
    pub push: Option<PushTarget>,
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

impl Property {
    fn collect_cycle(&self) -> Duration {
        match self.collect_cycle_ms {
            0 => DEFAULT_COLLECT_CYCLE,
            ms => Duration::from_millis(u64::from(ms)),
        }
    }
}

impl Device {
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
    Stop,
}

/// State visible from outside the mapper's thread.
struct Shared {
    backoff: Mutex<Backoff>,
    stats: CallStats,
    stopped: std::sync::atomic::AtomicBool,
    /// The definitions of the devices driven, readable while a call is in progress.
    definitions: Mutex<BTreeMap<String, Device>>,
    /// Set to true to cancel whatever the thread is doing.
    stop: watch::Sender<bool>,
    log: Arc<GuestLog>,
}

/// A deployed mapper.
pub struct MapperModule {
    manifest: Manifest,
    sha256: String,
    commands: mpsc::UnboundedSender<Command>,
    shared: Arc<Shared>,
    devices: DrivenDevices,
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
}

impl MapperModule {
    /// Links `component` as a mapper, starts its thread and waits for its `init` (under the
    /// call deadline). A component of the wrong world or a refused configuration fails here,
    /// at deploy time.
    pub(crate) async fn start(
        engine: &WasmEngine,
        manifest: Manifest,
        sha256: String,
        component: &wasmtime::component::Component,
        services: HostServices,
        log: LogPolicy,
    ) -> Result<MapperModule, WasmError> {
        let Pre::Mapper(pre) = pre_instantiate(engine, component, ModuleKind::Mapper)? else {
            return Err(WasmError::engine("linked for the wrong world"));
        };
        let (commands, inbox) = mpsc::unbounded_channel();
        let (stop, stop_rx) = watch::channel(false);
        let shared = Arc::new(Shared {
            backoff: Mutex::default(),
            stats: CallStats::default(),
            stopped: Default::default(),
            definitions: Mutex::default(),
            stop,
            log: Arc::new(GuestLog::new(log)),
        });
        let devices: DrivenDevices = Arc::new(RwLock::new(HashMap::new()));
        let (ready_tx, ready_rx) = oneshot::channel();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| WasmError::engine_from("cannot start mapper runtime", e))?;
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
            stop: stop_rx,
        };
        let thread = std::thread::Builder::new()
            .name(format!("wedge-mapper-{}", manifest.name))
            .spawn(move || {
                runtime.block_on(async move {
                    let first = runner.ensure_live().await;
                    let ok = first.is_ok();
                    let _ = ready_tx.send(first);
                    if ok {
                        runner.run(inbox).await;
                    }
                    // The instance goes with the runner, on this thread.
                    drop(runner);
                });
            })
            .map_err(|e| WasmError::engine_from("cannot start mapper thread", e))?;
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
            Err(_) => Err(WasmError::engine("mapper thread ended during init")),
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
            .map_err(|_| WasmError::Stopped(self.manifest.name.clone()))?;
        rx.await
            .unwrap_or_else(|_| Err(WasmError::Stopped(self.manifest.name.clone())))
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

    /// Polls a device now, all its properties, outside their cycles.
    pub async fn poll(&self, device: &str) -> Result<(), WasmError> {
        let d = device.to_owned();
        self.ask(|reply| Command::Poll(d, reply)).await
    }

    /// The definitions of the devices it drives (answered at once, even while a call runs).
    pub async fn device_definitions(&self) -> Result<Vec<Device>, WasmError> {
        Ok(self
            .shared
            .definitions
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .cloned()
            .collect())
    }

    /// The devices it drives.
    pub fn devices(&self) -> Vec<String> {
        let mut ids: Vec<String> = self
            .devices
            .read()
            .map(|d| d.keys().cloned().collect())
            .unwrap_or_default();
        ids.sort();
        ids
    }

    /// Cancels the call in progress and asks the thread to end, without waiting.
    pub(crate) fn request_stop(&self) {
        self.shared
            .stopped
            .store(true, std::sync::atomic::Ordering::Relaxed);
        self.shared.stop.send_replace(true);
        let _ = self.commands.send(Command::Stop);
    }

    /// Stops the thread and drops the instance. A call in progress is cancelled (a guest
    /// blocked in a host call does not hold this up); the thread gets [`STOP_WAIT`] to end,
    /// after which it is left to finish on its own and the caller goes on.
    pub fn stop(&self) {
        self.request_stop();
        let thread = self.thread.lock().ok().and_then(|mut t| t.take());
        let Some(thread) = thread else { return };
        let deadline = Instant::now() + STOP_WAIT;
        while !thread.is_finished() {
            if Instant::now() >= deadline {
                tracing::warn!(module = %self.manifest.name, "mapper thread still busy {STOP_WAIT:?} after stop; left to end on its own");
                return;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        let _ = thread.join();
    }

    /// [`MapperModule::stop`] for async code: the wait for the thread sleeps on the runtime's
    /// timer instead of blocking a worker thread (a mapper stuck in a host call would otherwise
    /// hold a tokio worker for up to [`STOP_WAIT`]).
    pub async fn stop_async(&self) {
        self.request_stop();
        let thread = self.thread.lock().ok().and_then(|mut t| t.take());
        let Some(thread) = thread else { return };
        let deadline = tokio::time::Instant::now() + STOP_WAIT;
        while !thread.is_finished() {
            if tokio::time::Instant::now() >= deadline {
                tracing::warn!(module = %self.manifest.name, "mapper thread still busy {STOP_WAIT:?} after stop; left to end on its own");
                return;
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        // Finished: the join returns at once.
        let _ = thread.join();
    }

    /// Its last log lines numbered after `after`, oldest first.
    pub fn log_lines(&self, after: u64) -> Vec<crate::GuestLogLine> {
        self.shared.log.lines_after(after)
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
            log_dropped: self.shared.log.dropped(),
            log_truncated: self.shared.log.truncated(),
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

/// One export call.
enum Call<'a> {
    Add(&'a wit_types::Device),
    Remove(&'a str),
    Write(&'a str, &'a str, &'a wit_types::TwinValue),
    Poll(&'a str, &'a [String]),
}

impl Call<'_> {
    async fn run(&self, live: &mut Live) -> wasmtime::Result<Result<(), String>> {
        let Live { store, bindings } = live;
        match *self {
            Call::Add(device) => bindings.call_add_device(store, device).await,
            Call::Remove(id) => bindings.call_remove_device(store, id).await.map(Ok),
            Call::Write(device, property, value) => {
                bindings
                    .call_write_property(store, device, property, value)
                    .await
            }
            Call::Poll(device, properties) => bindings.call_poll(store, device, properties).await,
        }
    }
}

/// How a bounded call ended.
enum Bounded<T> {
    Done(T),
    TimedOut,
    Stopped,
}

/// A device and when each of its properties is next due.
struct Scheduled {
    device: Device,
    /// Per property (in the device's order): its cycle and next due time. A device without
    /// properties has one entry under the name `""`, polled with no properties, so that its
    /// mapper can still report its state.
    properties: Vec<(String, Duration, Instant)>,
}

impl Scheduled {
    fn new(device: Device) -> Scheduled {
        let now = Instant::now();
        let mut properties: Vec<(String, Duration, Instant)> = device
            .properties
            .iter()
            .map(|p| (p.name.clone(), p.collect_cycle(), now))
            .collect();
        if properties.is_empty() {
            properties.push((String::new(), DEFAULT_COLLECT_CYCLE, now));
        }
        Scheduled { device, properties }
    }

    fn next_due(&self) -> Option<Instant> {
        self.properties.iter().map(|(_, _, next)| *next).min()
    }

    /// The properties due at `now`, each moved to its next cycle; `None` when nothing is due.
    fn take_due(&mut self, now: Instant) -> Option<Vec<String>> {
        let mut due = Vec::new();
        let mut any = false;
        for (name, cycle, next) in &mut self.properties {
            if *next <= now {
                any = true;
                // Skip cycles missed while the mapper was busy instead of polling in a burst.
                while *next <= now {
                    *next += *cycle;
                }
                if !name.is_empty() {
                    due.push(name.clone());
                }
            }
        }
        any.then_some(due)
    }

    fn all_properties(&self) -> Vec<String> {
        self.device
            .properties
            .iter()
            .map(|p| p.name.clone())
            .collect()
    }
}

/// The mapper thread's state.
struct Runner {
    engine: WasmEngine,
    manifest: Manifest,
    pre: mapper::MapperPre<HostState>,
    services: HostServices,
    shared: Arc<Shared>,
    device_ids: DrivenDevices,
    live: Option<Live>,
    devices: BTreeMap<String, Scheduled>,
    last_poll_error: BTreeMap<String, String>,
    started_once: bool,
    stop: watch::Receiver<bool>,
}

impl Runner {
    async fn run(&mut self, mut inbox: mpsc::UnboundedReceiver<Command>) {
        let mut stop = self.stop.clone();
        loop {
            if *stop.borrow() {
                return;
            }
            let now = Instant::now();
            let next_due = self.devices.values().filter_map(Scheduled::next_due).min();
            let wait = next_due
                .map(|due| due.saturating_duration_since(now))
                .unwrap_or(Duration::from_secs(3600));
            tokio::select! {
                biased;
                _ = stop.wait_for(|s| *s) => return,
                command = inbox.recv() => match command {
                    Some(Command::Stop) | None => return,
                    Some(command) => self.execute(command).await,
                },
                _ = tokio::time::sleep(wait) => self.poll_due().await,
            }
        }
    }

    async fn execute(&mut self, command: Command) {
        match command {
            Command::Add(device, reply) => {
                let wit = device.to_wit();
                let result = self.call(Call::Add(&wit)).await;
                if result.is_ok() {
                    let rules = Arc::new(DeviceRules::of(&device));
                    self.write_ids(|ids| {
                        ids.insert(device.id.clone(), rules);
                    });
                    self.definitions().insert(device.id.clone(), device.clone());
                    self.devices
                        .insert(device.id.clone(), Scheduled::new(device));
                }
                let _ = reply.send(result);
            }
            Command::Remove(id, reply) => {
                self.devices.remove(&id);
                self.definitions().remove(&id);
                self.last_poll_error.remove(&id);
                self.write_ids(|ids| {
                    ids.remove(&id);
                });
                let result = self.call(Call::Remove(&id)).await;
                let _ = reply.send(result);
            }
            Command::Write(device, property, value, reply) => {
                let value = to_wit(value);
                let result = self.call(Call::Write(&device, &property, &value)).await;
                let _ = reply.send(result);
            }
            Command::Poll(device, reply) => {
                let properties = self
                    .devices
                    .get(&device)
                    .map(Scheduled::all_properties)
                    .unwrap_or_default();
                let _ = reply.send(self.poll_one(&device, &properties).await);
            }
            Command::Stop => {}
        }
    }

    fn definitions(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Device>> {
        self.shared
            .definitions
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }

    fn write_ids(&self, f: impl FnOnce(&mut HashMap<String, Arc<DeviceRules>>)) {
        if let Ok(mut ids) = self.device_ids.write() {
            f(&mut ids);
        }
    }

    async fn poll_due(&mut self) {
        let now = Instant::now();
        let due: Vec<(String, Vec<String>)> = self
            .devices
            .iter_mut()
            .filter_map(|(id, s)| s.take_due(now).map(|props| (id.clone(), props)))
            .collect();
        for (id, properties) in due {
            if *self.stop.borrow() {
                return;
            }
            let outcome = self.poll_one(&id, &properties).await;
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
            Err(WasmError::Stopped(_)) => {}
            Err(e) => {
                let text = e.to_string();
                if self.last_poll_error.get(device) != Some(&text) {
                    tracing::warn!(module = %self.manifest.name, device, "poll failed: {text}");
                    self.last_poll_error.insert(device.to_owned(), text);
                }
            }
        }
    }

    async fn poll_one(&mut self, device: &str, properties: &[String]) -> Result<(), WasmError> {
        self.call(Call::Poll(device, properties)).await
    }

    fn call_limit(&self) -> Duration {
        Duration::from_millis(u64::from(self.manifest.limits.call_timeout_ms))
    }

    /// Runs `work` under the call deadline, cancelled by a stop.
    /// The epoch clock runs meanwhile (the guest's deadline is in epochs).
    async fn bounded<T>(&self, work: impl Future<Output = T>) -> Bounded<T> {
        let _clock = self.engine.guest_running();
        let mut stop = self.stop.clone();
        tokio::select! {
            biased;
            _ = stop.wait_for(|s| *s) => Bounded::Stopped,
            outcome = tokio::time::timeout(self.call_limit(), work) => match outcome {
                Ok(done) => Bounded::Done(done),
                Err(_) => Bounded::TimedOut,
            },
        }
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

    /// Runs one export under the deadline; a guest `Err` is returned as `WasmError::Guest`, a
    /// trap or an overrun discards the instance.
    async fn call(&mut self, call: Call<'_>) -> Result<(), WasmError> {
        self.ensure_live().await?;
        let ticks = self.timeout_ticks();
        let Some(mut live) = self.live.take() else {
            return Err(WasmError::NotFound(self.manifest.name.clone()));
        };
        CallStats::bump(&self.shared.stats.calls);
        live.store.set_epoch_deadline(ticks);
        let outcome = match self.bounded(call.run(&mut live)).await {
            Bounded::Done(Ok(result)) => Ok(result),
            Bounded::Done(Err(trap)) => Err(trap_error(&self.manifest, &trap)),
            Bounded::TimedOut => Err(self.overran("the call")),
            // The instance is dropped mid-call; nothing is counted against the module.
            Bounded::Stopped => return Err(WasmError::Stopped(self.manifest.name.clone())),
        };
        match outcome {
            Ok(Ok(())) => {
                self.live = Some(live);
                self.backoff().record_success();
                Ok(())
            }
            Ok(Err(guest)) => {
                self.live = Some(live);
                Err(WasmError::Guest(guest))
            }
            Err(error) => {
                CallStats::bump(&self.shared.stats.traps);
                drop(live);
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
        WasmEngine::ticks_for(self.call_limit())
    }

    /// Instantiates and initialises the mapper if it has no live instance, and hands a fresh
    /// instance the devices the old one drove.
    async fn ensure_live(&mut self) -> Result<(), WasmError> {
        if self.live.is_some() {
            return Ok(());
        }
        self.backoff().check(&self.manifest.name)?;
        match self.instantiate().await {
            Ok(mut live) => {
                if self.started_once {
                    CallStats::bump(&self.shared.stats.restarts);
                }
                self.started_once = true;
                let devices: Vec<wit_types::Device> =
                    self.devices.values().map(|s| s.device.to_wit()).collect();
                for device in devices {
                    live.store.set_epoch_deadline(self.timeout_ticks());
                    let outcome = self.bounded(Call::Add(&device).run(&mut live)).await;
                    match outcome {
                        Bounded::Done(Ok(Ok(()))) => {}
                        Bounded::Stopped => {
                            return Err(WasmError::Stopped(self.manifest.name.clone()));
                        }
                        Bounded::Done(Ok(Err(_))) => {
                            tracing::warn!(module = %self.manifest.name, device = %device.id, "device not re-added after restart");
                        }
                        Bounded::Done(Err(_)) | Bounded::TimedOut => {
                            // The instance is unusable; the next call starts another one.
                            tracing::warn!(module = %self.manifest.name, device = %device.id, "device not re-added after restart: the instance failed");
                            return Ok(());
                        }
                    }
                }
                self.live = Some(live);
                Ok(())
            }
            Err(WasmError::Stopped(name)) => Err(WasmError::Stopped(name)),
            Err(e) => {
                self.backoff().record_failure(e.to_string());
                Err(e)
            }
        }
    }

    /// A fresh instance with `init` run, within the call deadline.
    async fn instantiate(&self) -> Result<Live, WasmError> {
        let mut store = new_store(
            &self.engine,
            &self.manifest,
            self.services.clone(),
            self.device_ids.clone(),
            self.shared.log.clone(),
            self.timeout_ticks(),
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
        let bindings = match self.bounded(started).await {
            Bounded::Done(outcome) => outcome?,
            Bounded::TimedOut => return Err(self.overran("init")),
            Bounded::Stopped => return Err(WasmError::Stopped(self.manifest.name.clone())),
        };
        Ok(Live { store, bindings })
    }
}
