//! The servicebus module: takes the router's messages (`source` `router_servicebus`), keeps
//! the allow-list of cloud URLs, calls apps on the node for the cloud, and runs the HTTP
//! server edge apps call the cloud through.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use tokio::sync::{Semaphore, watch};
use tokio_util::sync::CancellationToken;
use wedge_core::message::{group, module, operation};
use wedge_core::metrics::{MetricsSource, PromWriter};
use wedge_core::{Bus, Message, Module, ModuleContext, ModuleError, Store};

use crate::app_call;
use crate::server::{self, MAX_IN_FLIGHT, ServerState};
use crate::settings::ServiceBusSettings;
use crate::stats::Stats;
use crate::target_urls;

/// The `source` of the cloud router's servicebus messages.
pub const ROUTER_SOURCE: &str = "router_servicebus";

/// Operation that allows a URL (and opens the HTTP server).
pub const START: &str = "start";

/// Operation that forbids a URL again (and closes the server with the last one).
pub const STOP: &str = "stop";

/// Cloud calls to apps on the node in flight at once; the module waits for a free one.
pub const MAX_APP_CALLS: usize = 64;

/// KubeEdge's servicebus, as a Wedge module.
pub struct ServiceBus {
    store: Store,
    settings: ServiceBusSettings,
    stats: Arc<Stats>,
    connected: Arc<AtomicBool>,
    allowed: watch::Sender<Arc<Vec<String>>>,
    calls: Arc<Semaphore>,
    in_flight: Arc<Semaphore>,
}

/// The running HTTP server of one module incarnation.
struct Listening {
    stop: CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

impl ServiceBus {
    /// A servicebus over `store` (migrated with [`target_urls::COMPONENT`] /
    /// [`target_urls::MIGRATIONS`]).
    pub fn new(store: Store, settings: ServiceBusSettings) -> ServiceBus {
        ServiceBus {
            store,
            settings,
            stats: Arc::new(Stats::default()),
            connected: Arc::new(AtomicBool::new(false)),
            allowed: watch::Sender::new(Arc::new(Vec::new())),
            calls: Arc::new(Semaphore::new(MAX_APP_CALLS)),
            in_flight: Arc::new(Semaphore::new(MAX_IN_FLIGHT)),
        }
    }

    /// The module's counters.
    pub fn stats(&self) -> Arc<Stats> {
        self.stats.clone()
    }

    /// Reads the allow-list back from the store and publishes it to the server.
    async fn refresh(&self) -> Result<usize, ModuleError> {
        let urls = target_urls::all(&self.store).await?;
        let n = urls.len();
        self.stats.allowed_urls.store(n as u64, Ordering::Relaxed);
        self.allowed.send_replace(Arc::new(urls));
        Ok(n)
    }

    /// Opens the HTTP server unless it listens already; a port that cannot be bound is
    /// logged and tried again at the next `start`.
    async fn listen(&self, server: &mut Option<Listening>, bus: &Bus, token: &CancellationToken) {
        if server.as_ref().is_some_and(|s| !s.task.is_finished()) {
            return;
        }
        let listener = match server::bind(&self.settings.listen).await {
            Ok(l) => l,
            Err(e) => {
                tracing::error!("servicebus: {e}");
                return;
            }
        };
        tracing::info!(address = %self.settings.listen, "servicebus: listening for edge apps");
        let stop = token.child_token();
        let state = ServerState {
            bus: bus.clone(),
            allowed: self.allowed.subscribe(),
            connected: self.connected.clone(),
            timeout: self.settings.timeout,
            in_flight: self.in_flight.clone(),
            stats: self.stats.clone(),
        };
        self.stats.listening.store(true, Ordering::Relaxed);
        let task = tokio::spawn(server::serve(listener, state, stop.clone()));
        *server = Some(Listening { stop, task });
    }

    async fn close(&self, server: &mut Option<Listening>) {
        if let Some(s) = server.take() {
            s.stop.cancel();
            let _ = s.task.await;
            tracing::info!(address = %self.settings.listen, "servicebus: no rule left; stopped listening");
        }
        self.stats.listening.store(false, Ordering::Relaxed);
    }

    /// Calls the app `msg` names on a task of its own (waiting for a free slot when
    /// [`MAX_APP_CALLS`] are in flight) and sends its answer to the cloud.
    async fn call_app(&self, msg: Message, ctx: &mut ModuleContext) {
        // The module's token ends the wait too (the semaphore is never closed).
        let token = ctx.token().clone();
        let wait = async {
            tokio::select! {
                _ = token.cancelled() => None,
                p = self.calls.clone().acquire_owned() => p.ok(),
            }
        };
        let Some(permit) = ctx.alive_during(wait).await else {
            return;
        };
        let bus = ctx.bus().clone();
        let stats = self.stats.clone();
        let timeout = self.settings.app_timeout;
        tokio::spawn(async move {
            let _permit = permit;
            let reply = match app_call::call(&msg, timeout).await {
                Ok(response) => {
                    stats.app_calls_answered.fetch_add(1, Ordering::Relaxed);
                    app_call::answer(&msg, &response)
                }
                Err(e) => {
                    stats.app_calls_failed.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(resource = %msg.route.resource, "servicebus: {e}");
                    app_call::failure(&msg, &e)
                }
            };
            if let Err(e) = bus.send(module::EDGEHUB, reply).await {
                tracing::warn!(
                    "servicebus: the answer to {} was not sent: {e}",
                    msg.header.id
                );
            }
        });
    }

    async fn handle(
        &self,
        msg: Message,
        server: &mut Option<Listening>,
        ctx: &mut ModuleContext,
    ) -> Result<(), ModuleError> {
        if msg.route.operation == operation::CONNECT {
            let up = msg.content.as_string().as_deref() == Some("cloud_connected");
            self.connected.store(up, Ordering::Relaxed);
            return Ok(());
        }
        if msg.route.source != ROUTER_SOURCE {
            tracing::debug!(source = %msg.route.source, op = %msg.route.operation, "servicebus: not the router's; ignored");
            return Ok(());
        }
        let resource = msg.route.resource.clone();
        match msg.route.operation.as_str() {
            START => {
                target_urls::insert(&self.store, &resource).await?;
                let n = self.refresh().await?;
                tracing::info!(url = %resource, allowed = n, "servicebus: a rule allows edge apps to call this URL");
                let token = ctx.token().clone();
                self.listen(server, ctx.bus(), &token).await;
            }
            STOP => {
                let removed = target_urls::delete(&self.store, &resource).await?;
                let n = self.refresh().await?;
                tracing::info!(url = %resource, removed, allowed = n, "servicebus: a rule no longer allows this URL");
                if n == 0 {
                    self.close(server).await;
                }
            }
            _ => self.call_app(msg, ctx).await,
        }
        Ok(())
    }
}

impl Module for ServiceBus {
    fn name(&self) -> &'static str {
        module::SERVICEBUS
    }

    fn group(&self) -> &'static str {
        group::BUS
    }

    async fn run(self: Arc<Self>, mut ctx: ModuleContext) -> Result<(), ModuleError> {
        let mut server = None;
        if self.refresh().await? > 0 {
            let token = ctx.token().clone();
            self.listen(&mut server, ctx.bus(), &token).await;
        }
        let outcome = loop {
            let Some(msg) = ctx.recv().await else {
                break Ok(());
            };
            if let Err(e) = self.handle(msg, &mut server, &mut ctx).await {
                break Err(e);
            }
        };
        self.close(&mut server).await;
        outcome
    }
}

impl MetricsSource for ServiceBus {
    fn write_metrics(&self, w: &mut PromWriter) {
        self.stats.write_metrics(w);
    }
}
