//! The devicetwin module: one receive loop that owns the order of requests, a device cache
//! shared with the hooks, and the ordered output stage.
//!
//! The loop never waits for a commit. Each request is applied to the cache (after the hooks
//! have reviewed it), its rows are queued with the store, and its outputs are handed to the
//! stage, which publishes them only after the commit. So concurrent updates share commits,
//! every result is published after its change is durable, and requests are answered in the
//! order they arrived — per device, and overall except around hook reviews: an update a hook
//! reviews runs its review as a task (`reviews.rs`) while other devices go on, and later
//! requests of that device wait for it.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use tokio::sync::mpsc;
use wedge_core::message::{group, module};
use wedge_core::metrics::{MetricsSource, PromWriter};
use wedge_core::module::{Module, ModuleContext, ModuleError};
use wedge_core::{Bus, Message, Store, StoreError};

use crate::cloud_pending::Pending;
use crate::definition::{self, Catalog, DeviceDefinition};
use crate::device::Devices;
use crate::effects::{DesiredValue, Effects, RowChange};
use crate::hooks::{HookVerdict, ProposedChange, Proposer, TwinHooks, TwinLookup};
use crate::inbound::{DefinitionKind, Request, classify};
use crate::output::{Job, Outputs, run_stage};
use crate::reviews::{Reviewed, Reviews, Scope};
use crate::settings::DeviceTwinSettings;
use crate::stats::Stats;
use crate::topics::{DeviceTopic, NodeTopic};
use crate::{storage, twin_update};
use wedge_core::outbox::Outbox;

/// How often pending cloud messages are checked for re-sending.
const RESEND_CHECK: Duration = Duration::from_secs(5);
/// How long a stopping loop waits for hook reviews in flight to end.
const REVIEW_DRAIN: Duration = Duration::from_secs(2);

/// The device cache, shared with hooks that read twins during a review.
#[derive(Clone, Default)]
pub struct DeviceCache(Arc<RwLock<Devices>>);

impl DeviceCache {
    pub(crate) fn read(&self) -> std::sync::RwLockReadGuard<'_, Devices> {
        self.0.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Devices> {
        self.0.write().unwrap_or_else(|e| e.into_inner())
    }

    /// A copy of one device (for tests and diagnostics).
    pub fn device(&self, id: &str) -> Option<crate::device::DeviceRecord> {
        self.read().get(id).cloned()
    }

    /// Number of devices.
    pub fn len(&self) -> usize {
        self.read().len()
    }

    /// True when no device is known.
    pub fn is_empty(&self) -> bool {
        self.read().is_empty()
    }
}

impl TwinLookup for DeviceCache {
    fn twin(&self, device: &str, key: &str) -> Option<(Option<String>, Option<String>)> {
        let devices = self.read();
        let twin = devices.get(device)?.twins.get(key)?;
        let value =
            |side: &Option<crate::wire::TwinValue>| side.as_ref().and_then(|v| v.value.clone());
        Some((value(&twin.expected), value(&twin.actual)))
    }
}

/// The devicetwin module (bus name `twin`, group `twin`).
pub struct DeviceTwin {
    store: Store,
    settings: DeviceTwinSettings,
    hooks: Arc<dyn TwinHooks>,
    cache: DeviceCache,
    stats: Arc<Stats>,
    outputs: Mutex<Option<Arc<Outputs>>>,
    definitions: Mutex<Catalog>,
    local_loaded: AtomicBool,
    outbox: Option<Outbox>,
}

impl DeviceTwin {
    /// A module over `store` (migrated with [`storage::MIGRATIONS`]) calling `hooks`.
    pub fn new(
        store: Store,
        settings: DeviceTwinSettings,
        hooks: Arc<dyn TwinHooks>,
    ) -> DeviceTwin {
        DeviceTwin {
            store,
            settings,
            hooks,
            cache: DeviceCache::default(),
            stats: Arc::new(Stats::default()),
            outputs: Mutex::new(None),
            definitions: Mutex::new(Catalog::new()),
            local_loaded: AtomicBool::new(false),
            outbox: None,
        }
    }

    /// Writes cloud-bound messages into the cloud link's durable `outbox`, in the same
    /// transaction as the change each reports, instead of handing them to edgehub after the
    /// commit: so they survive a crash right after that commit, and wait for the link instead
    /// of being dropped while it is down (where edgecore drops them).
    pub fn with_outbox(mut self, outbox: Outbox) -> DeviceTwin {
        self.outbox = Some(outbox);
        self
    }

    /// The device cache.
    pub fn cache(&self) -> &DeviceCache {
        &self.cache
    }

    /// The module's counters.
    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    /// The protocol of device `id`'s definition (`""` when it has none).
    pub fn protocol_of(&self, id: &str) -> String {
        self.catalog()
            .definition(id)
            .map(|d| d.protocol.clone())
            .unwrap_or_default()
    }

    fn catalog(&self) -> std::sync::MutexGuard<'_, Catalog> {
        self.definitions.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn outputs(&self, bus: &Bus) -> Arc<Outputs> {
        let mut slot = self.outputs.lock().unwrap_or_else(|e| e.into_inner());
        slot.get_or_insert_with(|| {
            Arc::new(Outputs {
                bus: bus.clone(),
                hooks: self.hooks.clone(),
                stats: self.stats.clone(),
                connected: AtomicBool::new(false),
                outbox: self.outbox.clone(),
                pending: Mutex::new(Pending::new(self.settings.resend_after)),
            })
        })
        .clone()
    }

    async fn reload(&self) -> Result<(), StoreError> {
        self.store.barrier().await?;
        let devices = self.store.read(storage::load_all).await?;
        *self.cache.write() = devices;
        Ok(())
    }
}

impl Module for DeviceTwin {
    fn name(&self) -> &'static str {
        module::TWIN
    }

    fn group(&self) -> &'static str {
        group::TWIN
    }

    async fn run(self: Arc<Self>, mut ctx: ModuleContext) -> Result<(), ModuleError> {
        // A restart after a failure may follow a half-applied request: the cache is rebuilt
        // from what is committed.
        self.reload()
            .await
            .map_err(|e| ModuleError::from(format!("cannot load devices: {e}")))?;
        let outputs = self.outputs(ctx.bus());
        let failed = Arc::new(AtomicBool::new(false));
        let (jobs, queue) = mpsc::channel(self.settings.max_in_flight.max(1));
        let stage = tokio::spawn(run_stage(queue, outputs.clone(), failed.clone()));
        let mut turn = Turn {
            twin: &self,
            outputs: &outputs,
            jobs,
            failed: failed.clone(),
        };
        if !self.local_loaded.swap(true, Ordering::AcqRel) {
            turn.load_stored_definitions().await;
            turn.load_local_definitions().await;
            turn.pending_desired();
        }
        ctx.ready();
        let period = RESEND_CHECK
            .min(self.settings.resend_after)
            .max(Duration::from_millis(10));
        let mut resend = tokio::time::interval(period);
        resend.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut reviews = Reviews::new();
        loop {
            tokio::select! {
                (device, reviewed) = reviews.next(), if reviews.any() => {
                    // The mailbox may not be read while requests wait for reviews: stay
                    // seen as alive.
                    ctx.alive();
                    if failed.swap(false, Ordering::AcqRel) {
                        self.reload().await.map_err(|e| {
                            ModuleError::from(format!("cannot reload devices: {e}"))
                        })?;
                    }
                    turn.finish_review(&device, reviewed).await;
                    turn.resume(&device, &mut reviews).await;
                }
                msg = ctx.recv(), if reviews.accepting() => match msg {
                    Some(msg) => {
                        if failed.swap(false, Ordering::AcqRel) {
                            self.reload().await.map_err(|e| {
                                ModuleError::from(format!("cannot reload devices: {e}"))
                            })?;
                        }
                        turn.dispatch(msg, &mut reviews).await;
                    }
                    None => break,
                },
                _ = resend.tick() => {
                    ctx.alive();
                    outputs.resend_due().await;
                }
            }
        }
        // Reviews in flight get a short while to end (handlers have deadlines of their own),
        // so their updates are answered before the module stops.
        let _ = tokio::time::timeout(REVIEW_DRAIN, async {
            while reviews.any() {
                let (device, reviewed) = reviews.next().await;
                turn.finish_review(&device, reviewed).await;
                turn.resume(&device, &mut reviews).await;
            }
        })
        .await;
        // Closing the queue lets the stage finish: every queued write is committed and its
        // outputs sent before the module reports stopped.
        drop(turn);
        stage
            .await
            .map_err(|e| ModuleError::from(format!("output stage: {e}")))?;
        Ok(())
    }
}

impl MetricsSource for DeviceTwin {
    fn write_metrics(&self, w: &mut PromWriter) {
        let pending = self
            .outputs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            .map(|o| o.pending_count())
            .unwrap_or(0);
        self.stats.write(w, self.cache.len(), pending);
    }
}

/// One incarnation's handling of requests.
struct Turn<'a> {
    twin: &'a DeviceTwin,
    outputs: &'a Arc<Outputs>,
    jobs: mpsc::Sender<Job>,
    /// Raised when a request changed the cache but was not stored: the loop reloads the cache
    /// from SQLite before the next request.
    failed: Arc<AtomicBool>,
}

/// What a request does when the outbox refuses its cloud messages (full, or its share full).
enum WhenRefused {
    /// Store the change all the same and count the messages as dropped: a change the cloud
    /// asked for (the cloud holds it and syncs it again), or a message nobody waits on.
    StoreAnyway,
    /// Fail the request whole — nothing is stored — and answer with these effects, if any: a
    /// change a local client (a mapper) made must never be answered success while the cloud
    /// will not hear of it.
    Fail(Option<Effects>),
}

/// What every handler that changes the cache takes: the devices, the device (or node) id, the
/// request body, the time, and a source of fresh ids.
type Handler = fn(&mut Devices, &str, &[u8], i64, &mut dyn FnMut() -> String) -> Effects;

fn new_id() -> String {
    wedge_core::message::new_id()
}

impl Turn<'_> {
    /// Queues `effects`: rows to the store now, the rest to the stage. `on_failure` answers a
    /// failed write; `refused` says what happens when the outbox refuses the cloud messages.
    async fn emit(&self, mut effects: Effects, on_failure: Option<Effects>, refused: WhenRefused) {
        let (outbox_rows, cloud) = match self.outputs.stage(&mut effects) {
            Ok(Some(s)) => (Some(s.rows), Some((s.messages, s.reservation))),
            Ok(None) => (None, None),
            Err(refusal) => match refused {
                WhenRefused::StoreAnyway => {
                    self.twin
                        .stats
                        .cloud_dropped
                        .fetch_add(refusal.messages as u64, Ordering::Relaxed);
                    tracing::warn!(
                        "{} cloud message(s) of a cloud-side change not stored: {}",
                        refusal.messages,
                        refusal.reason
                    );
                    (None, None)
                }
                WhenRefused::Fail(answer) => {
                    let refused = self
                        .twin
                        .stats
                        .cloud_refused
                        .fetch_add(1, Ordering::Relaxed);
                    if refused.is_power_of_two() || refused == 0 {
                        tracing::warn!(
                            refused_so_far = refused + 1,
                            "request refused: its cloud message(s) cannot be stored ({})",
                            refusal.reason
                        );
                    }
                    // The handler already changed the cache: it is rebuilt from what is stored.
                    self.failed.store(true, Ordering::Release);
                    if let Some(answer) = answer {
                        self.queue_outputs(answer).await;
                    }
                    return;
                }
            },
        };
        if effects
            .publish
            .iter()
            .any(|p| p.payload.contains("\"code\":"))
        {
            self.twin.stats.errors.fetch_add(1, Ordering::Relaxed);
        }
        let write = if effects.rows.is_empty() && outbox_rows.is_none() {
            None
        } else {
            // The rows (and staged cloud messages) go to the writer; the stage only sends the
            // rest.
            let rows = std::mem::take(&mut effects.rows);
            let queued = self
                .twin
                .store
                .submit(move |conn| {
                    storage::apply(conn, &rows)?;
                    match &outbox_rows {
                        Some(staged) => staged.insert(conn),
                        None => Ok(()),
                    }
                })
                .await;
            match queued {
                Ok(w) => Some(w),
                Err(e) => {
                    tracing::error!("devicetwin write not queued: {e}");
                    if let Some(answer) = on_failure {
                        self.outputs.send(answer).await;
                    }
                    return;
                }
            }
        };
        let job = Job {
            write,
            cloud,
            effects,
            on_failure,
        };
        if self.jobs.send(job).await.is_err() {
            tracing::error!("devicetwin output stage is gone; outputs dropped");
        }
    }

    /// Counts and logs a request refused by a cap (the first, then every power of two).
    fn over_limit(&self, over: &crate::limits::OverLimit) {
        let n = self.twin.stats.over_limit.fetch_add(1, Ordering::Relaxed) + 1;
        if n.is_power_of_two() {
            tracing::warn!(refused_so_far = n, "request refused: {over}");
        }
    }

    /// Whether a request that adds twins or devices fits the caps; one that does not is
    /// counted and logged, and changes nothing.
    fn fits(
        &self,
        check: impl FnOnce(
            &crate::limits::Limits,
            &crate::device::Devices,
        ) -> Result<(), crate::limits::OverLimit>,
    ) -> bool {
        let limits = self.twin.settings.limits;
        let verdict = check(&limits, &self.twin.cache.read());
        match verdict {
            Ok(()) => true,
            Err(over) => {
                self.over_limit(&over);
                false
            }
        }
    }

    /// Queues outputs that need no write (an error answer), in order behind earlier requests.
    async fn queue_outputs(&self, effects: Effects) {
        if effects
            .publish
            .iter()
            .any(|p| p.payload.contains("\"code\":"))
        {
            self.twin.stats.errors.fetch_add(1, Ordering::Relaxed);
        }
        let job = Job {
            write: None,
            cloud: None,
            effects,
            on_failure: None,
        };
        if self.jobs.send(job).await.is_err() {
            tracing::error!("devicetwin output stage is gone; outputs dropped");
        }
    }

    /// Handles `msg` now, or parks it behind a review it must stay ordered with.
    async fn dispatch(&mut self, msg: Message, reviews: &mut Reviews) {
        let request = classify(&msg);
        match Scope::of(&request) {
            Scope::Device(device) if reviews.busy(&device) => reviews.park(device, msg, request),
            Scope::Global if reviews.any() => reviews.hold(msg, request),
            _ => self.handle(msg, request, reviews).await,
        }
    }

    /// After `device`'s review: its parked requests in order (until one starts another
    /// review), then a held request once no review runs.
    async fn resume(&mut self, device: &str, reviews: &mut Reviews) {
        while !reviews.busy(device) {
            let Some((msg, request)) = reviews.unpark(device) else {
                break;
            };
            self.handle(msg, request, reviews).await;
        }
        if let Some((msg, request)) = reviews.take_held() {
            self.handle(msg, request, reviews).await;
        }
    }

    /// Applies what a finished review decided.
    async fn finish_review(&mut self, device: &str, reviewed: Reviewed) {
        match reviewed {
            Reviewed::Answer(answer) => self.emit(answer, None, WhenRefused::StoreAnyway).await,
            Reviewed::Commit(request, now) => self.commit_update(device, &request, now).await,
        }
    }

    async fn handle(&mut self, msg: Message, request: Request, reviews: &mut Reviews) {
        let now = wedge_core::time::now_ms();
        let payload = msg.content.to_bytes();
        let node = self.twin.settings.node_name.clone();
        match request {
            Request::Confirm { parent } => {
                self.twin.stats.count("confirm");
                self.outputs.confirm(&parent);
            }
            Request::Connection(connected) => {
                tracing::info!(connected, "cloud connection state");
                self.outputs.set_connected(connected);
                if connected {
                    // Through the ordered stage like any output (and, with an outbox, stored).
                    let ask = crate::membership::detail_request(&node, now, &mut new_id);
                    let effects = Effects {
                        cloud: vec![ask],
                        ..Effects::default()
                    };
                    self.emit(effects, None, WhenRefused::StoreAnyway).await;
                }
            }
            // The same requests reach devicetwin over MQTT (node and device topics) and from
            // the cloud (resources); they share one handler each.
            Request::Node {
                kind: NodeTopic::MembershipUpdated,
                ..
            }
            | Request::MembershipUpdate => {
                if !self.fits(|l, d| l.check_membership(d, &payload)) {
                    return;
                }
                self.apply(
                    "membership",
                    crate::membership::update,
                    &node,
                    &payload,
                    now,
                )
                .await;
            }
            Request::Node {
                kind: NodeTopic::MembershipDetailResult,
                ..
            }
            | Request::MembershipDetail => {
                if !self.fits(|l, d| l.check_membership(d, &payload)) {
                    return;
                }
                self.apply(
                    "membership",
                    crate::membership::detail_result,
                    &node,
                    &payload,
                    now,
                )
                .await;
            }
            Request::Node {
                kind: NodeTopic::MembershipGet,
                ..
            } => {
                self.twin.stats.count("membership");
                let effects = crate::membership::get(&self.twin.cache.read(), &node, &payload, now);
                self.emit(effects, None, WhenRefused::StoreAnyway).await;
            }
            Request::Device {
                device,
                kind: DeviceTopic::AttributesUpdated,
            }
            | Request::CloudAttributes { device } => {
                self.apply(
                    "attributes",
                    crate::attributes::update,
                    &device,
                    &payload,
                    now,
                )
                .await;
            }
            Request::Device {
                device,
                kind: DeviceTopic::TwinCloudUpdated,
            }
            | Request::CloudSync { device } => {
                if !self.fits(|l, d| l.check_sync(d, &device, &payload)) {
                    return;
                }
                let payload = self.reviewed_sync(&device, &payload).await;
                self.apply(
                    "cloud_sync",
                    crate::cloud_sync::handle,
                    &device,
                    &payload,
                    now,
                )
                .await;
            }
            Request::Device {
                device,
                kind: DeviceTopic::TwinUpdate,
            } => {
                self.twin.stats.count("twin_update");
                self.twin_update(&device, &payload, now, reviews).await;
            }
            Request::Device {
                device,
                kind: DeviceTopic::TwinGet,
            } => {
                self.twin.stats.count("twin_get");
                let effects = crate::twin_get::get(&self.twin.cache.read(), &device, &payload, now);
                self.emit(effects, None, WhenRefused::StoreAnyway).await;
            }
            Request::Device {
                device,
                kind: DeviceTopic::StateUpdate,
            } => {
                // A mapper's state change, like its twin updates, is refused whole when the
                // cloud cannot be told (KubeEdge answers a failed state update with nothing).
                self.apply_with(
                    "state_update",
                    crate::state::update,
                    &device,
                    &payload,
                    now,
                    WhenRefused::Fail(None),
                )
                .await;
            }
            Request::Device {
                kind: DeviceTopic::StateGet,
                ..
            } => {
                // KubeEdge has no handler for it either.
                self.twin.stats.count("ignored");
            }
            Request::Definition {
                kind,
                id,
                deleted,
                local,
            } => {
                self.twin.stats.count("definition");
                self.definition(kind, &id, deleted, local, &msg).await;
            }
            Request::Ignored(why) => {
                self.twin.stats.count("ignored");
                tracing::debug!(
                    source = %msg.route.source,
                    operation = %msg.route.operation,
                    resource = %msg.route.resource,
                    "devicetwin ignores message: {why}"
                );
            }
        }
    }

    /// A mapper's update: checks, hook review (a task of its own, see `reviews.rs`), then
    /// the version rules.
    async fn twin_update(&mut self, device: &str, payload: &[u8], now: i64, reviews: &mut Reviews) {
        let max = self.twin.settings.max_payload;
        let prepared = twin_update::prepare(&self.twin.cache.read(), device, payload, max, now);
        let mut request = match prepared {
            Ok(request) => request,
            Err(answer) => return self.emit(answer, None, WhenRefused::StoreAnyway).await,
        };
        let limits = self.twin.settings.limits;
        let fits = limits.check_twins(&self.twin.cache.read(), device, request.twin.keys());
        if let Err(over) = fits {
            self.over_limit(&over);
            let answer = twin_update::error_result(
                device,
                &request.event_id,
                now,
                crate::validate::BAD_REQUEST,
                &over.to_string(),
            );
            return self.queue_outputs(answer).await;
        }
        let changes = if self.twin.hooks.reviews(device) {
            twin_update::proposals(&self.twin.cache.read(), device, &request)
        } else {
            Vec::new()
        };
        if changes.is_empty() {
            return self.commit_update(device, &request, now).await;
        }
        let lookup: Arc<dyn TwinLookup> = Arc::new(self.twin.cache.clone());
        let hooks = self.twin.hooks.clone();
        let if_lost = twin_update::error_result(
            device,
            &request.event_id,
            now,
            twin_update::INTERNAL_ERROR,
            "the twin handler review failed",
        );
        reviews.spawn(device.to_owned(), if_lost, async move {
            for change in changes {
                let verdict = hooks.review(change.clone(), lookup.clone()).await;
                if let Err(answer) = twin_update::reviewed(&mut request, &change, verdict, now) {
                    return Reviewed::Answer(answer);
                }
            }
            Reviewed::Commit(request, now)
        });
    }

    /// Applies a checked (and reviewed) update and queues its effects.
    async fn commit_update(&mut self, device: &str, request: &crate::wire::TwinMessage, now: i64) {
        let effects = twin_update::commit(
            &mut self.twin.cache.write(),
            device,
            request,
            now,
            &mut new_id,
        );
        let answer = |reason: &str| {
            twin_update::error_result(
                device,
                &request.event_id,
                now,
                twin_update::INTERNAL_ERROR,
                reason,
            )
        };
        let on_failure = answer("failed to store the twin update");
        let refused = answer(
            "the twin update was not applied: its message to the cloud cannot be stored (the \
             cloud outbox is full while the cloud is unreachable)",
        );
        self.emit(effects, Some(on_failure), WhenRefused::Fail(Some(refused)))
            .await;
    }

    /// Runs a handler that changes the cache and queues its effects. Removed devices are also
    /// told to the hooks — after the commit, by the output stage.
    async fn apply(
        &mut self,
        kind: &'static str,
        handler: Handler,
        id: &str,
        payload: &[u8],
        now: i64,
    ) {
        self.apply_with(kind, handler, id, payload, now, WhenRefused::StoreAnyway)
            .await;
    }

    /// [`Self::apply`] with what happens when the outbox refuses the cloud messages.
    async fn apply_with(
        &mut self,
        kind: &'static str,
        handler: Handler,
        id: &str,
        payload: &[u8],
        now: i64,
        refused: WhenRefused,
    ) {
        self.twin.stats.count(kind);
        let mut effects = {
            let mut devices = self.twin.cache.write();
            handler(&mut devices, id, payload, now, &mut new_id)
        };
        effects.removed = crate::membership::removed_ids(&effects);
        self.emit(effects, None, refused).await;
    }

    /// A `Device` or `DeviceModel` from metamanager (the cloud's objects, kept in
    /// `device_object` for the next start) or from a reload of the devices directory (`local`:
    /// not kept, the directory is read again at start).
    async fn definition(
        &mut self,
        kind: DefinitionKind,
        id: &str,
        deleted: bool,
        local: bool,
        msg: &Message,
    ) {
        if deleted {
            if !local {
                let owned = id.to_owned();
                self.store_object(move |conn| crate::objects::delete(conn, kind, &owned))
                    .await;
            }
            let known = {
                let mut catalog = self.twin.catalog();
                match kind {
                    DefinitionKind::Device => catalog.remove_device(id),
                    DefinitionKind::DeviceModel => catalog.remove_model(id),
                }
            };
            if known && kind == DefinitionKind::Device {
                // The rows stay until the cloud's membership removes the device; the mapper
                // stops driving it now.
                self.twin.hooks.device_removed(id);
            }
            return;
        }
        let body = msg.content.to_bytes();
        let object = definition::object_from_message(&msg.route.resource, &body);
        match object {
            Ok(Some(object)) => {
                if !local {
                    let text = String::from_utf8_lossy(&body).into_owned();
                    let owned = id.to_owned();
                    self.store_object(move |conn| crate::objects::put(conn, kind, &owned, &text))
                        .await;
                }
                let (previous, changed) = {
                    let mut catalog = self.twin.catalog();
                    let previous = catalog.definitions();
                    (previous, catalog.put(object))
                };
                self.defined(changed, Some(previous)).await;
            }
            Ok(None) => {}
            Err(e) => tracing::warn!(resource = %msg.route.resource, "device object refused: {e}"),
        }
    }

    /// Devices newly defined (or changed). An unknown device gets its rows; a known one gets
    /// twins for properties it did not have. A desired value is the cloud's word (a Device
    /// object, or a local file standing in for the cloud): twin handlers review it
    /// (`source: cloud`) before it is stored, and a changed one is written like a cloud sync
    /// (document, delta, the mappers told after the commit). `previous` holds the definitions
    /// before this change; without it (a restart re-reading its own definitions) desired
    /// values of known devices are left as the twins have them. Every definition is then
    /// handed to the hooks (the mapper of its protocol) with the twins' desired values.
    async fn defined(
        &mut self,
        definitions: Vec<DeviceDefinition>,
        previous: Option<Vec<DeviceDefinition>>,
    ) {
        let now = wedge_core::time::now_ms();
        for mut def in definitions {
            let known = self.twin.cache.read().contains_key(&def.id);
            if !known && !self.fits(|l, d| l.check_new_device(d)) {
                continue;
            }
            let names = def.properties.iter().map(|p| &p.name);
            if !self.fits(|l, d| l.check_definition(d, &def.id, names)) {
                continue;
            }
            if !known {
                for property in &mut def.properties {
                    if let Some(value) = property.desired.take() {
                        property.desired = self
                            .reviewed_desired(
                                &def.id,
                                &property.name,
                                value,
                                &property.value_type,
                                None,
                            )
                            .await;
                    }
                }
                let record = definition::new_record(&def, now);
                let desired = def
                    .properties
                    .iter()
                    .filter_map(|p| {
                        Some(DesiredValue {
                            device: def.id.clone(),
                            key: p.name.clone(),
                            value: p.desired.clone()?,
                            value_type: p.value_type.clone(),
                        })
                    })
                    .collect();
                self.twin
                    .cache
                    .write()
                    .insert(def.id.clone(), record.clone());
                tracing::info!(device = %def.id, protocol = %def.protocol, "device defined");
                let effects = Effects {
                    rows: vec![RowChange::PutDevice(record)],
                    desired,
                    ..Effects::default()
                };
                self.emit(effects, None, WhenRefused::StoreAnyway).await;
            } else {
                self.new_properties(&def, now).await;
                if let Some(previous) = &previous {
                    let before = previous.iter().find(|p| p.id == def.id);
                    self.desired_changes(&def, before, now).await;
                }
            }
            let twins = self.twin.cache.read().get(&def.id).map(|r| r.twins.clone());
            if let Some(twins) = twins {
                for property in &mut def.properties {
                    property.desired = twins
                        .get(&property.name)
                        .and_then(|t| t.expected.as_ref())
                        .and_then(|e| e.value.clone())
                        .filter(|v| !v.is_empty());
                }
            }
            self.twin.hooks.device_defined(def);
        }
    }

    /// Twins for the properties a known device's new definition adds.
    async fn new_properties(&mut self, def: &DeviceDefinition, now: i64) {
        let fresh = definition::new_record(def, now);
        let rows: Vec<RowChange> = {
            let mut devices = self.twin.cache.write();
            let Some(record) = devices.get_mut(&def.id) else {
                return;
            };
            let mut rows = Vec::new();
            for (key, twin) in fresh.twins {
                if record.twins.contains_key(&key) {
                    continue;
                }
                record.twins.insert(key.clone(), twin.clone());
                rows.push(RowChange::PutTwin {
                    device: def.id.clone(),
                    key,
                    twin,
                });
            }
            rows
        };
        if !rows.is_empty() {
            let effects = Effects {
                rows,
                ..Effects::default()
            };
            self.emit(effects, None, WhenRefused::StoreAnyway).await;
        }
    }

    /// Desired values a changed definition changes: reviewed, then written as a cloud sync.
    async fn desired_changes(
        &mut self,
        def: &DeviceDefinition,
        before: Option<&DeviceDefinition>,
        now: i64,
    ) {
        for property in &def.properties {
            let Some(value) = property.desired.clone() else {
                continue;
            };
            let was = before
                .and_then(|b| b.properties.iter().find(|p| p.name == property.name))
                .and_then(|p| p.desired.clone());
            if was.as_deref() == Some(value.as_str()) {
                continue;
            }
            let stored = self
                .twin
                .cache
                .read()
                .get(&def.id)
                .and_then(|r| r.twins.get(&property.name).cloned());
            let previous = stored
                .as_ref()
                .and_then(|t| t.expected.as_ref())
                .and_then(|e| e.value.clone());
            let Some(value) = self
                .reviewed_desired(
                    &def.id,
                    &property.name,
                    value,
                    &property.value_type,
                    previous,
                )
                .await
            else {
                continue;
            };
            let effects = {
                let mut devices = self.twin.cache.write();
                let Some(record) = devices.get_mut(&def.id) else {
                    return;
                };
                crate::cloud_sync::desired_write(record, &property.name, &value, now, &mut new_id)
            };
            tracing::info!(device = %def.id, key = %property.name, value = %value, "desired value from the device's definition");
            self.emit(effects, None, WhenRefused::StoreAnyway).await;
        }
    }

    /// A cloud sync as the twin handlers leave it: each desired value it writes is reviewed
    /// (`source: cloud`); a replaced one is synced as replaced, a refused key is left out
    /// (logged; the twin keeps its value). Without reviewing handlers, or for a body that does
    /// not parse (the sync path refuses it with KubeEdge's answer), the payload is unchanged.
    async fn reviewed_sync(&self, device: &str, payload: &[u8]) -> Vec<u8> {
        if !self.twin.hooks.reviews(device) {
            return payload.to_vec();
        }
        let Ok(mut request) = crate::wire::parse_cloud_update(payload) else {
            return payload.to_vec();
        };
        let stored = self.twin.cache.read().get(device).map(|r| r.twins.clone());
        let keys: Vec<String> = request.twin.keys().cloned().collect();
        let mut changed = false;
        for key in keys {
            let Some(Some(twin)) = request.twin.get(&key) else {
                continue;
            };
            let Some(value) = twin.expected.as_ref().and_then(|e| e.value.clone()) else {
                continue;
            };
            let old = stored.as_ref().and_then(|t| t.get(&key));
            let requested_type = twin.metadata.as_ref().map(|m| m.kind.clone());
            let value_type = old
                .map(|t| t.attr_type.clone())
                .or(requested_type)
                .unwrap_or_else(|| "string".to_owned());
            if value_type == crate::mapper_update::DELETED {
                continue;
            }
            let previous = old
                .and_then(|t| t.expected.as_ref())
                .and_then(|e| e.value.clone());
            let verdict = self
                .reviewed_desired(device, &key, value.clone(), &value_type, previous)
                .await;
            match verdict {
                Some(reviewed) if reviewed == value => {}
                Some(reviewed) => {
                    if let Some(Some(twin)) = request.twin.get_mut(&key)
                        && let Some(expected) = twin.expected.as_mut()
                    {
                        expected.value = Some(reviewed);
                        changed = true;
                    }
                }
                None => {
                    request.twin.remove(&key);
                    changed = true;
                }
            }
        }
        if !changed {
            return payload.to_vec();
        }
        crate::wire::to_json(&request).into_bytes()
    }

    /// A desired value from the cloud (a Device object), as the twin handlers leave it:
    /// `None` when one rejects it (or fails), which is logged and leaves the twin as it is.
    async fn reviewed_desired(
        &self,
        device: &str,
        key: &str,
        value: String,
        value_type: &str,
        previous: Option<String>,
    ) -> Option<String> {
        if !self.twin.hooks.reviews(device) {
            return Some(value);
        }
        let change = ProposedChange {
            device: device.to_owned(),
            key: key.to_owned(),
            desired: true,
            value: value.clone(),
            value_type: value_type.to_owned(),
            previous,
            proposer: Proposer::Cloud,
        };
        let lookup: Arc<dyn TwinLookup> = Arc::new(self.twin.cache.clone());
        match self.twin.hooks.review(change, lookup).await {
            HookVerdict::Accept => Some(value),
            HookVerdict::Replace(replaced) => {
                tracing::info!(%device, %key, proposed = %value, stored = %replaced, "desired value replaced by a twin handler");
                Some(replaced)
            }
            HookVerdict::Reject(reason) | HookVerdict::Failed(reason) => {
                tracing::warn!(%device, %key, %value, "desired value refused by a twin handler: {reason}");
                None
            }
        }
    }

    /// Queues a write of the `device_object` table (its order with other writes does not
    /// matter: nothing else reads it while the node runs).
    async fn store_object(
        &self,
        op: impl FnOnce(&rusqlite::Connection) -> Result<(), StoreError> + Send + 'static,
    ) {
        if let Err(e) = self.twin.store.submit(op).await {
            tracing::error!("device object not stored: {e}");
        }
    }

    /// Reads the cloud's Device and DeviceModel objects stored before a restart.
    async fn load_stored_definitions(&mut self) {
        let stored = match self.twin.store.read(crate::objects::all).await {
            Ok(stored) => stored,
            Err(StoreError::Closed) => return,
            Err(e) => {
                tracing::error!("stored device definitions not loaded: {e}");
                return;
            }
        };
        let mut changed = Vec::new();
        {
            let mut catalog = self.twin.catalog();
            for (resource, body) in stored {
                match definition::object_from_message(&resource, body.as_bytes()) {
                    Ok(Some(object)) => changed.extend(catalog.put(object)),
                    Ok(None) => {}
                    Err(e) => tracing::warn!(%resource, "stored device object not read: {e}"),
                }
            }
        }
        self.defined(changed, None).await;
    }

    /// After a restart, desired values the devices have not reported yet go to their mappers
    /// again (a desired value is applied until the device reports it).
    fn pending_desired(&self) {
        let pending: Vec<DesiredValue> = self
            .twin
            .cache
            .read()
            .values()
            .flat_map(|record| {
                record.twins.iter().filter_map(|(key, twin)| {
                    let expected = twin.expected.as_ref()?.value.clone()?;
                    let actual = twin.actual.as_ref().and_then(|a| a.value.clone());
                    (twin.attr_type != crate::mapper_update::DELETED
                        && !expected.is_empty()
                        && Some(&expected) != actual.as_ref())
                    .then(|| DesiredValue {
                        device: record.id.clone(),
                        key: key.clone(),
                        value: expected,
                        value_type: twin.attr_type.clone(),
                    })
                })
            })
            .collect();
        for value in pending {
            tracing::info!(device = %value.device, key = %value.key, value = %value.value, "desired value not reported yet; sent to the mapper again");
            self.twin.hooks.desired(value);
        }
    }

    /// Reads `wedge.devices.dir` once per process: its devices are added as if the cloud had
    /// sent them. A file that cannot be read is logged and skipped; the node still starts.
    async fn load_local_definitions(&mut self) {
        let Some(dir) = self.twin.settings.devices_dir.clone() else {
            return;
        };
        let load = match tokio::task::spawn_blocking(move || definition::load_directory(&dir)).await
        {
            Ok(Ok(load)) => load,
            Ok(Err(e)) => {
                tracing::error!("local device definitions not loaded: {e}");
                return;
            }
            Err(e) => {
                tracing::error!("local device definitions not loaded: {e}");
                return;
            }
        };
        for error in &load.errors {
            tracing::error!("local device definitions: {error}");
        }
        let mut changed = Vec::new();
        {
            let mut catalog = self.twin.catalog();
            for object in load.objects {
                changed.extend(catalog.put(object));
            }
            for (device, model) in catalog.waiting() {
                tracing::warn!(%device, %model, "device waits for its DeviceModel");
            }
        }
        self.defined(changed, None).await;
    }
}
