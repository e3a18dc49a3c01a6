//! The module contract and the supervisor that keeps modules alive.
//!
//! A module is a long-running tokio task that owns one bus mailbox. The [`Supervisor`] spawns it
//! with a [`ModuleContext`], and restarts it with exponential back-off when it panics, returns an
//! error, returns while the node is still running, or stops answering health pings — the same
//! job as the health check KubeEdge's devicetwin runs for its workers, done here for every
//! module. The mailbox survives restarts, so messages queued for a crashed module are handled by
//! its next incarnation.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::{Mutex, OwnedMutexGuard, mpsc};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::bus::{Bus, BusError, Mailbox};
use crate::health::{Health, ModuleState};
use crate::message::Message;

/// The error a module's `run` may end with; the supervisor logs it and restarts the module.
pub type ModuleError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// A Wedge module: edgehub, metamanager, eventbus, devicetwin, edged...
pub trait Module: Send + Sync + 'static {
    /// The bus name (KubeEdge's module name, e.g. `metamanager`).
    fn name(&self) -> &'static str;

    /// The bus group (KubeEdge's group, e.g. `meta`).
    fn group(&self) -> &'static str;

    /// Runs until `ctx` is cancelled. Called again after a failure, with a fresh context over the
    /// same mailbox; state that must survive a restart belongs in `self` or in the store.
    fn run(
        self: Arc<Self>,
        ctx: ModuleContext,
    ) -> impl Future<Output = Result<(), ModuleError>> + Send;
}

/// What a running module gets: its mailbox, the bus, and its shutdown signal.
pub struct ModuleContext {
    name: &'static str,
    bus: Bus,
    health: Health,
    cancel: CancellationToken,
    mailbox: OwnedMutexGuard<Mailbox>,
    pings: OwnedMutexGuard<mpsc::Receiver<()>>,
    ready: bool,
}

impl ModuleContext {
    /// The module's name.
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// The node's bus.
    pub fn bus(&self) -> &Bus {
        &self.bus
    }

    /// The module's shutdown signal; child tasks should stop when it fires. It fires at the
    /// node's shutdown and also when this incarnation of the module ends (returned, failed,
    /// or aborted for missing its health pings), before the supervisor starts the next one.
    pub fn token(&self) -> &CancellationToken {
        &self.cancel
    }

    /// True once shutdown has begun.
    pub fn is_cancelled(&self) -> bool {
        self.cancel.is_cancelled()
    }

    /// Marks the module as running in `/healthz`. [`ModuleContext::recv`] does this on its first
    /// call; modules with start-up work before their first receive may call it earlier.
    pub fn ready(&mut self) {
        if !self.ready {
            self.ready = true;
            self.health.set_state(self.name, ModuleState::Running);
        }
    }

    /// The next message, or `None` once shutdown has begun. Answers the supervisor's health
    /// pings while waiting, so a module that keeps calling `recv` is seen as alive.
    ///
    /// Cancel-safe: it can be one branch of a `select!` beside timers or other sources.
    pub async fn recv(&mut self) -> Option<Message> {
        self.ready();
        loop {
            tokio::select! {
                biased;
                _ = self.cancel.cancelled() => return None,
                Some(()) = self.pings.recv() => continue,
                msg = self.mailbox.recv() => return msg,
            }
        }
    }

    /// The next message if one is already queued, without waiting; `None` when the mailbox is
    /// empty or shutdown has begun. Lets a busy module take a batch after a [`recv`].
    ///
    /// [`recv`]: ModuleContext::recv
    pub fn try_recv(&mut self) -> Option<Message> {
        if self.cancel.is_cancelled() {
            return None;
        }
        self.mailbox.try_recv()
    }

    /// Answers pending health pings without waiting, for loops that are busy outside `recv`.
    pub fn alive(&mut self) {
        while self.pings.try_recv().is_ok() {}
    }

    /// Awaits `work`, answering health pings meanwhile: for a step of the loop that may wait
    /// on something slow outside the node (a container runtime) and must not get the module
    /// restarted for it. Messages wait in the mailbox until it is done.
    pub async fn alive_during<F: std::future::Future>(&mut self, work: F) -> F::Output {
        tokio::pin!(work);
        loop {
            tokio::select! {
                biased;
                out = &mut work => return out,
                Some(()) = self.pings.recv() => {}
            }
        }
    }
}

/// Timing of health pings and restarts.
#[derive(Debug, Clone)]
pub struct SupervisionSettings {
    /// How often a module is pinged.
    pub ping_interval: Duration,
    /// Consecutive unanswered pings after which the module is restarted.
    pub ping_misses: u32,
    /// First restart delay; doubles per consecutive failure.
    pub backoff_initial: Duration,
    /// Longest restart delay.
    pub backoff_max: Duration,
    /// A module that ran this long before failing starts over at `backoff_initial`.
    pub stable_after: Duration,
    /// How long shutdown waits for a module before aborting it.
    pub stop_timeout: Duration,
}

impl Default for SupervisionSettings {
    fn default() -> SupervisionSettings {
        SupervisionSettings {
            ping_interval: Duration::from_secs(5),
            ping_misses: 3,
            backoff_initial: Duration::from_millis(100),
            backoff_max: Duration::from_secs(30),
            stable_after: Duration::from_secs(60),
            stop_timeout: Duration::from_secs(3),
        }
    }
}

impl SupervisionSettings {
    /// The settings `wedge.supervision` asks for; the rest keep their defaults.
    pub fn from_config(config: &crate::config::SupervisionSettings) -> SupervisionSettings {
        SupervisionSettings {
            ping_interval: Duration::from_secs(u64::from(config.ping_interval.max(1))),
            ping_misses: config.ping_misses.max(1),
            backoff_initial: Duration::from_millis(config.restart_backoff_initial_ms.max(1)),
            backoff_max: Duration::from_millis(config.restart_backoff_max_ms.max(1)),
            ..SupervisionSettings::default()
        }
    }
}

struct Supervised {
    name: &'static str,
    token: CancellationToken,
    task: JoinHandle<()>,
}

/// Starts modules, restarts them when they fail, stops them in order.
pub struct Supervisor {
    bus: Bus,
    health: Health,
    settings: SupervisionSettings,
    root: CancellationToken,
    modules: Vec<Supervised>,
}

impl Supervisor {
    /// A supervisor over `bus`, reporting into `health`.
    pub fn new(bus: Bus, health: Health, settings: SupervisionSettings) -> Supervisor {
        Supervisor {
            bus,
            health,
            settings,
            root: CancellationToken::new(),
            modules: Vec::new(),
        }
    }

    /// Registers `module` on the bus and starts it under supervision. Modules are stopped in the
    /// reverse order they were spawned, so spawn consumers before producers.
    pub fn spawn<M: Module>(&mut self, module: Arc<M>) -> Result<(), BusError> {
        let name = module.name();
        let mailbox = self.bus.register(name, module.group())?;
        self.health.set_state(name, ModuleState::Starting);
        let token = self.root.child_token();
        let task = tokio::spawn(supervise(
            module,
            Arc::new(Mutex::new(mailbox)),
            self.bus.clone(),
            self.health.clone(),
            self.settings.clone(),
            token.clone(),
        ));
        self.modules.push(Supervised { name, token, task });
        Ok(())
    }

    /// Stops every module, last spawned first, each within `stop_timeout`.
    pub async fn shutdown(self) {
        for supervised in self.modules.into_iter().rev() {
            supervised.token.cancel();
            let mut task = supervised.task;
            if tokio::time::timeout(self.settings.stop_timeout, &mut task)
                .await
                .is_err()
            {
                tracing::warn!(module = supervised.name, "did not stop in time; aborting");
                task.abort();
                let _ = task.await;
            }
            self.health.set_state(supervised.name, ModuleState::Stopped);
            self.bus.unregister(supervised.name);
        }
        self.root.cancel();
    }
}

async fn supervise<M: Module>(
    module: Arc<M>,
    mailbox: Arc<Mutex<Mailbox>>,
    bus: Bus,
    health: Health,
    settings: SupervisionSettings,
    token: CancellationToken,
) {
    let name = module.name();
    let (ping_tx, ping_rx) = mpsc::channel::<()>(1);
    let pings = Arc::new(Mutex::new(ping_rx));
    let mut backoff = settings.backoff_initial;
    loop {
        // Each incarnation has a token of its own, cancelled when it ends: what it spawned
        // with `ctx.token()` (a listener, a timer task) stops with it, so an incarnation
        // aborted for missing its pings does not keep holding its port from the next one.
        let incarnation = token.child_token();
        let _end_incarnation = incarnation.clone().drop_guard();
        let ctx = ModuleContext {
            name,
            bus: bus.clone(),
            health: health.clone(),
            cancel: incarnation.clone(),
            // The previous incarnation has ended (or was aborted and awaited), so both locks
            // are free again.
            mailbox: mailbox.clone().lock_owned().await,
            pings: pings.clone().lock_owned().await,
            ready: false,
        };
        let started = Instant::now();
        let mut task = tokio::spawn(module.clone().run(ctx));
        let mut ticker = tokio::time::interval(settings.ping_interval);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        ticker.tick().await;
        let mut misses = 0u32;
        let failure = loop {
            tokio::select! {
                joined = &mut task => break match joined {
                    Ok(Ok(())) if token.is_cancelled() => {
                        health.set_state(name, ModuleState::Stopped);
                        return;
                    }
                    Ok(Ok(())) => "returned while the node was still running".to_owned(),
                    Ok(Err(e)) => format!("failed: {e}"),
                    Err(e) if e.is_panic() => format!("panicked: {}", panic_text(e.into_panic())),
                    Err(e) => format!("task ended: {e}"),
                },
                _ = ticker.tick() => match ping_tx.try_send(()) {
                    Ok(()) => misses = 0,
                    Err(_) => {
                        misses += 1;
                        if misses >= settings.ping_misses {
                            task.abort();
                            let _ = (&mut task).await;
                            break format!(
                                "did not answer {misses} health pings ({:?} apart)",
                                settings.ping_interval
                            );
                        }
                    }
                },
            }
        };
        incarnation.cancel();
        if token.is_cancelled() {
            health.set_state(name, ModuleState::Stopped);
            return;
        }
        if started.elapsed() >= settings.stable_after {
            backoff = settings.backoff_initial;
        }
        tracing::error!(module = name, "module {failure}; restarting in {backoff:?}");
        health.record_failure(name, failure);
        tokio::select! {
            _ = tokio::time::sleep(backoff) => {}
            _ = token.cancelled() => {
                health.set_state(name, ModuleState::Stopped);
                return;
            }
        }
        backoff = (backoff * 2).min(settings.backoff_max);
        health.set_state(name, ModuleState::Starting);
    }
}

fn panic_text(payload: Box<dyn std::any::Any + Send>) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "non-string panic payload".to_owned()
    }
}

#[cfg(test)]
mod tests;
