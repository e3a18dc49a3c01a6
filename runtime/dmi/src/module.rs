//! The `dmi` module: serves DMI on the node's socket, remembers registered mappers, and runs
//! one worker per mapper that keeps its devices in step with the node's definitions.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use wedge_core::message::{group, module};
use wedge_core::metrics::{MetricsSource, PromWriter};
use wedge_core::module::{Module, ModuleContext, ModuleError};
use wedge_core::{Bus, Store};
use wedge_device::definition::DeviceDefinition;

use crate::pb;
use crate::pb::device_manager_service_server::DeviceManagerServiceServer;
use crate::server::Manager;
use crate::state::{MapperLink, State};

/// Counters for `/metrics`.
#[derive(Debug, Default)]
pub(crate) struct Stats {
    /// Reports handed to devicetwin.
    pub reports: AtomicU64,
    /// Reports refused because devicetwin's mailbox was full (the mapper reports again).
    pub reports_refused: AtomicU64,
    /// Calls to mappers that succeeded.
    pub calls: AtomicU64,
    /// Calls to mappers that failed (each is tried again).
    pub calls_failed: AtomicU64,
}

/// Who else drives a protocol on the node: the name of the Wasm mapper of a protocol, if any.
pub type ProtocolOwner = Arc<dyn Fn(&str) -> Option<String> + Send + Sync>;

/// What the server, the workers and the hooks share.
pub(crate) struct Shared {
    pub store: Store,
    /// Set by the daemon: a protocol a Wasm mapper drives is not given to a DMI mapper too.
    pub owner: Mutex<Option<ProtocolOwner>>,
    state: Mutex<State>,
    pub stats: Stats,
    /// The bus and the workers' stop signal of the current run.
    run: Mutex<Option<(Bus, CancellationToken)>>,
}

impl Shared {
    pub(crate) fn lock(&self) -> MutexGuard<'_, State> {
        // Plain map updates only; a poisoned lock still holds consistent maps.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn current_run(&self) -> Option<(Bus, CancellationToken)> {
        self.run.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// The bus of the current run, `None` between runs.
    pub(crate) fn bus(&self) -> Option<Bus> {
        self.current_run().map(|(bus, _)| bus)
    }

    /// Starts the worker of the mapper of `info.protocol` at `generation` (the module must be
    /// running; otherwise its next run starts it).
    pub(crate) fn start_worker(self: &Arc<Self>, info: pb::MapperInfo, generation: u64) {
        let Some((_, token)) = self.current_run() else {
            return;
        };
        let shared = self.clone();
        tokio::spawn(async move {
            tokio::select! {
                _ = token.cancelled() => {}
                _ = worker(shared, info, generation) => {}
            }
        });
    }
}

/// Back-off between failed calls to one mapper.
const RETRY_FIRST: Duration = Duration::from_millis(500);
const RETRY_MAX: Duration = Duration::from_secs(30);

/// Keeps the mapper of `info.protocol` in step until a newer registration replaces it.
async fn worker(shared: Arc<Shared>, info: pb::MapperInfo, generation: u64) {
    let protocol = info.protocol.clone();
    let socket = PathBuf::from(String::from_utf8_lossy(&info.address).into_owned());
    let mut client = crate::client::connect(socket);
    let mut backoff = RETRY_FIRST;
    loop {
        let wake = {
            let state = shared.lock();
            match state.mappers.get(&protocol) {
                Some(link) if link.generation == generation => link.wake.clone(),
                _ => return,
            }
        };
        let notified = wake.notified();
        let step = shared.lock().next_step(&protocol, generation);
        let Some(step) = step else {
            notified.await;
            continue;
        };
        match crate::client::call(&mut client, &step).await {
            Ok(()) => {
                shared.stats.calls.fetch_add(1, Ordering::Relaxed);
                tracing::info!(mapper = %info.name, device = %step.id, call = ?CallName(&step), "DMI mapper updated");
                shared.lock().done(&protocol, generation, step);
                backoff = RETRY_FIRST;
            }
            Err(status) => {
                shared.stats.calls_failed.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(
                    mapper = %info.name,
                    device = %step.id,
                    call = ?CallName(&step),
                    "DMI call to the mapper failed, trying again in {backoff:?}: {}",
                    status.message()
                );
                shared.lock().retry(&protocol, generation, &step);
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(RETRY_MAX);
            }
        }
    }
}

/// The name of a step's device call, for logs.
struct CallName<'a>(&'a crate::state::Step);

impl std::fmt::Debug for CallName<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        use crate::state::DeviceCall;
        let name = match self.0.call {
            DeviceCall::Register(_) => "RegisterDevice",
            DeviceCall::Update(_) => "UpdateDevice",
            DeviceCall::Remove { .. } => "RemoveDevice",
        };
        f.write_str(name)
    }
}

/// Settings of the module.
#[derive(Debug, Clone)]
pub struct DmiSettings {
    /// The socket DMI is served on (see [`crate::socket_path`]).
    pub socket: PathBuf,
}

/// The `dmi` module.
pub struct Dmi {
    shared: Arc<Shared>,
    settings: DmiSettings,
}

impl Dmi {
    /// The module over `store` (whose [`crate::MIGRATIONS`] must be applied).
    pub fn new(store: Store, settings: DmiSettings) -> Dmi {
        Dmi {
            shared: Arc::new(Shared {
                store,
                state: Mutex::new(State::default()),
                owner: Mutex::new(None),
                stats: Stats::default(),
                run: Mutex::new(None),
            }),
            settings,
        }
    }

    /// Names who else drives a protocol on this node (the Wasm host's mapper of it): a DMI
    /// mapper registering for such a protocol is refused, so no device has two drivers.
    pub fn set_protocol_owner(&self, owner: ProtocolOwner) {
        *self.shared.owner.lock().unwrap_or_else(|e| e.into_inner()) = Some(owner);
    }

    /// A device was defined on the node, or its definition changed: the DMI mapper of its
    /// protocol gets it (RegisterDevice, or UpdateDevice when it had another form of it).
    pub fn device_defined(&self, definition: DeviceDefinition) {
        self.shared.lock().define(definition);
    }

    /// A device was removed from the node: its DMI mapper lets go of it (RemoveDevice).
    pub fn device_removed(&self, device: &str) {
        self.shared.lock().remove(device);
    }

    /// A twin's desired value differs from the reported one: the DMI mapper driving the device
    /// gets the device again with that desired value (UpdateDevice, which mapper-framework
    /// mappers apply by writing every desired value to the device).
    pub fn desired(&self, device: &str, key: &str, value: &str) {
        self.shared.lock().desire(device, key, value);
    }

    /// Protocols with a registered DMI mapper, and the mapper's name.
    pub fn mappers(&self) -> Vec<(String, String)> {
        self.shared
            .lock()
            .mappers
            .iter()
            .map(|(protocol, link)| (protocol.clone(), link.info.name.clone()))
            .collect()
    }

    async fn load_mappers(&self) -> Result<(), ModuleError> {
        let stored = self
            .shared
            .store
            .read(crate::store::all)
            .await
            .map_err(|e| format!("cannot read registered DMI mappers: {e}"))?;
        // A protocol a Wasm mapper drives now (deployed while this node was down, or loaded
        // from `wedge.modules.dir`) is not the remembered mapper's any more: one driver per
        // protocol, and the module the operator deployed wins. The mapper is forgotten; should
        // it register again, it is refused while the module drives the protocol.
        let owner = self
            .shared
            .owner
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let mut kept = Vec::with_capacity(stored.len());
        for info in stored {
            match owner.as_ref().and_then(|owner| owner(&info.protocol)) {
                Some(module) => {
                    tracing::warn!(mapper = %info.name, protocol = %info.protocol, "DMI mapper remembered from before the restart forgotten: the Wasm mapper {module} drives the protocol now");
                    let protocol = info.protocol.clone();
                    self.shared
                        .store
                        .write(move |conn| crate::store::remove(conn, &protocol))
                        .await
                        .map_err(|e| format!("cannot forget DMI mapper {}: {e}", info.name))?;
                }
                None => kept.push(info),
            }
        }
        let mut state = self.shared.lock();
        for info in kept {
            if state.mappers.contains_key(&info.protocol) {
                continue;
            }
            state.generation += 1;
            let generation = state.generation;
            tracing::info!(mapper = %info.name, protocol = %info.protocol, "DMI mapper remembered from before the restart");
            state.mappers.insert(
                info.protocol.clone(),
                MapperLink::new(info, generation, true),
            );
        }
        Ok(())
    }

    fn bind(&self) -> Result<tokio::net::UnixListener, ModuleError> {
        let socket = &self.settings.socket;
        if let Some(dir) = socket.parent() {
            std::fs::create_dir_all(dir).map_err(|e| {
                format!(
                    "cannot create the DMI socket's directory {}: {e}",
                    dir.display()
                )
            })?;
        }
        // A socket file left by an earlier run (or edgecore) would make bind fail.
        match std::fs::remove_file(socket) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                return Err(
                    format!("cannot remove the old DMI socket {}: {e}", socket.display()).into(),
                );
            }
        }
        tokio::net::UnixListener::bind(socket)
            .map_err(|e| format!("cannot serve DMI on {}: {e}", socket.display()).into())
    }
}

impl Module for Dmi {
    fn name(&self) -> &'static str {
        module::DMI
    }

    fn group(&self) -> &'static str {
        group::TWIN
    }

    async fn run(self: Arc<Self>, mut ctx: ModuleContext) -> Result<(), ModuleError> {
        self.load_mappers().await?;
        let listener = self.bind()?;
        let token = ctx.token().child_token();
        *self.shared.run.lock().unwrap_or_else(|e| e.into_inner()) =
            Some((ctx.bus().clone(), token.clone()));
        let links: Vec<(pb::MapperInfo, u64)> = self
            .shared
            .lock()
            .mappers
            .values()
            .map(|l| (l.info.clone(), l.generation))
            .collect();
        for (info, generation) in links {
            self.shared.start_worker(info, generation);
        }
        tracing::info!(socket = %self.settings.socket.display(), "serving DMI for KubeEdge mappers");
        let service = DeviceManagerServiceServer::new(Manager {
            shared: self.shared.clone(),
        });
        // Every connection passes through the `:authority` shim (see `authority.rs`).
        let (connections, incoming) = tokio::sync::mpsc::channel(16);
        let accepting = token.clone();
        tokio::spawn(async move {
            loop {
                let accepted = tokio::select! {
                    _ = accepting.cancelled() => return,
                    accepted = listener.accept() => accepted,
                };
                match accepted {
                    Ok((stream, _)) => {
                        let (ours, tonics) = tokio::io::duplex(64 * 1024);
                        tokio::spawn(crate::authority::relay(stream, ours));
                        if connections
                            .send(Ok::<_, std::io::Error>(tonics))
                            .await
                            .is_err()
                        {
                            return;
                        }
                    }
                    Err(e) => {
                        tracing::warn!("DMI socket accept failed: {e}");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                }
            }
        });
        let incoming = tokio_stream::wrappers::ReceiverStream::new(incoming);
        let stop = token.clone();
        let server = tonic::transport::Server::builder()
            .add_service(service)
            .serve_with_incoming_shutdown(incoming, async move { stop.cancelled().await });
        ctx.ready();
        tokio::pin!(server);
        // Once the mailbox ends (shutdown), only the server is waited for: it drains its
        // connections, and `recv` would answer `None` at once forever (a busy loop).
        let mut mailbox_open = true;
        let result = loop {
            tokio::select! {
                result = &mut server => break result,
                msg = ctx.recv(), if mailbox_open => match msg {
                    Some(msg) => tracing::debug!(operation = %msg.route.operation, resource = %msg.route.resource, "dmi ignores bus message"),
                    None => {
                        mailbox_open = false;
                        token.cancel();
                    }
                },
            }
        };
        token.cancel();
        let _ = std::fs::remove_file(&self.settings.socket);
        result.map_err(|e| format!("DMI server on {}: {e}", self.settings.socket.display()).into())
    }
}

impl MetricsSource for Dmi {
    fn write_metrics(&self, w: &mut PromWriter) {
        let stats = &self.shared.stats;
        let load = |a: &AtomicU64| a.load(Ordering::Relaxed) as f64;
        w.family(
            "wedge_dmi_reports_total",
            "DMI reports of KubeEdge mappers, by what became of them (refused: devicetwin was busy; the mapper reports again).",
            "counter",
        );
        w.sample(
            "wedge_dmi_reports_total",
            &[("result", "accepted")],
            load(&stats.reports),
        );
        w.sample(
            "wedge_dmi_reports_total",
            &[("result", "refused")],
            load(&stats.reports_refused),
        );
        w.family(
            "wedge_dmi_mapper_calls_total",
            "Calls to DMI mappers (RegisterDevice, UpdateDevice, ...); failed ones are tried again.",
            "counter",
        );
        w.sample(
            "wedge_dmi_mapper_calls_total",
            &[("result", "ok")],
            load(&stats.calls),
        );
        w.sample(
            "wedge_dmi_mapper_calls_total",
            &[("result", "failed")],
            load(&stats.calls_failed),
        );
        w.family("wedge_dmi_mappers", "DMI mappers registered.", "gauge");
        w.sample(
            "wedge_dmi_mappers",
            &[],
            self.shared.lock().mappers.len() as f64,
        );
    }
}
