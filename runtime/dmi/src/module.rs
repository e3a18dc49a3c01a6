//! The `dmi` module: serves DMI on the node's socket, remembers registered mappers, and runs
//! one worker per mapper that keeps its devices in step with the node's definitions.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;
use wedge_core::message::{group, module};
use wedge_core::metrics::{MetricsSource, PromWriter};
use wedge_core::module::{Module, ModuleContext, ModuleError};
use wedge_core::{Bus, Store};
use wedge_device::definition::DeviceDefinition;

use crate::accept::Acceptor;
use crate::error::DmiError;
use crate::inflight::InFlightLayer;
use crate::owner::{self, Verified};
use crate::pb;
use crate::pb::device_manager_service_server::DeviceManagerServiceServer;
use crate::peer::{Gate, Peer, PeerIo};
use crate::rate::TokenBucket;
use crate::server::Manager;
use crate::settings::DmiSettings;
use crate::state::{MapperLink, State};
use crate::stats::{DmiCounters, Stats, Throttle};

/// Who else drives a protocol on the node: the name of the Wasm mapper of a protocol, if any.
pub type ProtocolOwner = Arc<dyn Fn(&str) -> Option<String> + Send + Sync>;

/// What the server, the workers and the hooks share.
pub(crate) struct Shared {
    pub store: Store,
    /// The module's settings (access, limits), fixed for the module's life.
    pub settings: DmiSettings,
    /// Set by the daemon: a protocol a Wasm mapper drives is not given to a DMI mapper too.
    pub owner: Mutex<Option<ProtocolOwner>>,
    state: Mutex<State>,
    pub stats: Stats,
    /// Keeps refusals from flooding the log.
    pub throttle: Throttle,
    /// The node's registration rate.
    pub register_bucket: Mutex<TokenBucket>,
    /// Registrations one at a time: the holder of a protocol is checked and replaced as one
    /// step (the check probes the holder's socket, so it cannot run under the state lock).
    pub register_lock: tokio::sync::Mutex<()>,
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

    /// Starts the worker of the mapper of `info.protocol` at `generation`, registered by
    /// `owner_uid` (the module must be running; otherwise its next run starts it).
    pub(crate) fn start_worker(
        self: &Arc<Self>,
        info: pb::MapperInfo,
        owner_uid: u32,
        generation: u64,
    ) {
        let Some((_, token)) = self.current_run() else {
            return;
        };
        let shared = self.clone();
        tokio::spawn(async move {
            tokio::select! {
                _ = token.cancelled() => {}
                _ = worker(shared, info, owner_uid, generation) => {}
            }
        });
    }
}

/// Back-off between failed calls to one mapper.
const RETRY_FIRST: Duration = Duration::from_millis(500);
const RETRY_MAX: Duration = Duration::from_secs(30);

/// Keeps the mapper of `info.protocol` in step until a newer registration replaces it.
async fn worker(shared: Arc<Shared>, info: pb::MapperInfo, owner_uid: u32, generation: u64) {
    let protocol = info.protocol.clone();
    let socket = owner::socket_of(&info.address);
    let mut client = crate::client::connect(socket, owner_uid);
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
                Stats::bump(&shared.stats.calls);
                tracing::info!(mapper = %info.name, device = %step.id, call = ?CallName(&step), "DMI mapper updated");
                shared.lock().done(&protocol, generation, step);
                backoff = RETRY_FIRST;
            }
            Err(status) => {
                Stats::bump(&shared.stats.calls_failed);
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

/// The `dmi` module.
pub struct Dmi {
    shared: Arc<Shared>,
}

impl Dmi {
    /// The module over `store` (whose [`crate::MIGRATIONS`] must be applied). `settings` are
    /// checked when the module runs ([`DmiSettings::check`]).
    pub fn new(store: Store, settings: DmiSettings) -> Dmi {
        let register_bucket = TokenBucket::new(settings.limits.registrations, Instant::now());
        Dmi {
            shared: Arc::new(Shared {
                store,
                settings,
                state: Mutex::new(State::default()),
                owner: Mutex::new(None),
                stats: Stats::default(),
                throttle: Throttle::new(Duration::from_secs(10)),
                register_bucket: Mutex::new(register_bucket),
                register_lock: tokio::sync::Mutex::new(()),
                run: Mutex::new(None),
            }),
        }
    }

    /// The module's counters now: what it did and what it refused, by reason (the same
    /// numbers `/metrics` shows).
    pub fn counters(&self) -> DmiCounters {
        self.shared.stats.snapshot()
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

    /// Loads the mappers registered before the restart: a protocol a Wasm mapper drives now is
    /// dropped, and every other mapper is re-verified (`owner.rs`) before it is trusted.
    async fn load_mappers(&self, gate: &Gate) -> Result<(), DmiError> {
        let stored = self.shared.store.read(crate::store::all).await?;
        // A protocol a Wasm mapper drives now (deployed while this node was down, or loaded
        // from `wedge.modules.dir`) is not the remembered mapper's any more: one driver per
        // protocol, and the module the operator deployed wins. The mapper is forgotten; should
        // it register again, it is refused while the module drives the protocol.
        let wasm_owner = self
            .shared
            .owner
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let mut kept = Vec::with_capacity(stored.len());
        for (info, stored_owner) in stored {
            let forget = match wasm_owner.as_ref().and_then(|owner| owner(&info.protocol)) {
                Some(module) => Some(format!("the Wasm mapper {module} drives the protocol now")),
                None => {
                    let listener = owner::listener_of(&owner::socket_of(&info.address)).await;
                    match owner::verify(stored_owner, listener, |p| gate.admits(p), owner::alive) {
                        Verified::Keep(owner) => {
                            if Some(owner) != stored_owner {
                                let (record, row) = (info.clone(), owner);
                                self.shared
                                    .store
                                    .write(move |conn| crate::store::put(conn, &record, &row))
                                    .await?;
                            }
                            kept.push((info.clone(), owner));
                            None
                        }
                        Verified::Forget(reason) => {
                            Stats::bump(&self.shared.stats.forgotten_unverified);
                            Some(reason)
                        }
                    }
                }
            };
            if let Some(reason) = forget {
                tracing::warn!(mapper = %info.name, protocol = %info.protocol, "DMI mapper remembered from before the restart forgotten: {reason}");
                let protocol = info.protocol.clone();
                self.shared
                    .store
                    .write(move |conn| crate::store::remove(conn, &protocol))
                    .await?;
                // After a restart of the module alone, the link is still held: let it go too.
                self.shared.lock().mappers.remove(&info.protocol);
            }
        }
        let rate = self.shared.settings.limits.reports;
        let mut state = self.shared.lock();
        for (info, owner) in kept {
            if state.mappers.contains_key(&info.protocol) {
                continue;
            }
            state.generation += 1;
            let generation = state.generation;
            tracing::info!(mapper = %info.name, protocol = %info.protocol, owner = %owner, "DMI mapper remembered from before the restart");
            state.mappers.insert(
                info.protocol.clone(),
                MapperLink::new(info, owner, rate, generation, true),
            );
        }
        Ok(())
    }

    /// The gRPC server with the HTTP/2 limits of the settings (see [`crate::Limits`]).
    fn server(
        &self,
    ) -> tonic::transport::Server<
        tower::layer::util::Stack<InFlightLayer, tower::layer::util::Identity>,
    > {
        let limits = &self.shared.settings.limits;
        tonic::transport::Server::builder()
            .max_frame_size(crate::authority::MAX_FRAME as u32)
            .http2_max_header_list_size(limits.max_header_list_size)
            .max_concurrent_streams(limits.max_concurrent_streams)
            .initial_stream_window_size(limits.stream_window)
            .initial_connection_window_size(limits.connection_window)
            // Fixed windows: adaptive ones would grow to what a client's pace asks for.
            .http2_adaptive_window(Some(false))
            .layer(InFlightLayer::new(
                limits.max_requests_in_flight,
                self.shared.clone(),
            ))
    }

    async fn serve(self: Arc<Self>, mut ctx: ModuleContext) -> Result<(), DmiError> {
        let settings = &self.shared.settings;
        settings.check()?;
        let socket = settings.socket.clone();
        let own = Peer::own().map_err(|source| DmiError::Socket {
            path: socket.clone(),
            what: "read the node's own credentials",
            source,
        })?;
        let gate = Arc::new(Gate::new(&settings.access, settings.socket_group, own.uid));
        self.load_mappers(&gate).await?;
        let listener = crate::socket::bind(&socket, settings.socket_group)?;
        let token = ctx.token().child_token();
        *self.shared.run.lock().unwrap_or_else(|e| e.into_inner()) =
            Some((ctx.bus().clone(), token.clone()));
        let links: Vec<(pb::MapperInfo, u32, u64)> = self
            .shared
            .lock()
            .mappers
            .values()
            .map(|l| (l.info.clone(), l.owner.uid, l.generation))
            .collect();
        for (info, owner_uid, generation) in links {
            self.shared.start_worker(info, owner_uid, generation);
        }
        tracing::info!(
            socket = %socket.display(),
            mode = format!("{:o}", crate::socket::mode(settings.socket_group)),
            "serving DMI for KubeEdge mappers"
        );
        let service = DeviceManagerServiceServer::new(Manager {
            shared: self.shared.clone(),
            gate: gate.clone(),
        })
        .max_decoding_message_size(settings.limits.max_message_size);
        // Every connection is checked and passes through the `:authority` shim (`accept.rs`).
        let (connections, incoming) = tokio::sync::mpsc::channel::<std::io::Result<PeerIo>>(16);
        let acceptor = Acceptor {
            listener,
            gate,
            shared: self.shared.clone(),
            slots: Arc::new(tokio::sync::Semaphore::new(settings.limits.max_connections)),
            connections,
        };
        tokio::spawn(acceptor.run(token.clone()));
        let incoming = tokio_stream::wrappers::ReceiverStream::new(incoming);
        let stop = token.clone();
        let server = self
            .server()
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
        let _ = std::fs::remove_file(&socket);
        result.map_err(|source| DmiError::Serve {
            path: socket,
            source,
        })
    }
}

impl Module for Dmi {
    fn name(&self) -> &'static str {
        module::DMI
    }

    fn group(&self) -> &'static str {
        group::TWIN
    }

    async fn run(self: Arc<Self>, ctx: ModuleContext) -> Result<(), ModuleError> {
        self.serve(ctx).await.map_err(ModuleError::from)
    }
}

impl MetricsSource for Dmi {
    fn write_metrics(&self, w: &mut PromWriter) {
        let mappers = self.shared.lock().mappers.len();
        self.shared.stats.write(w, mappers);
    }
}
