//! What the devicetwin module tests share: a node around the module (real bus, real SQLite
//! file, the supervisor), the mailboxes of the modules it sends to (`eventbus` and the cloud
//! link `websocket`, registered on the real bus), and hooks that record every call.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE;
use rusqlite::{Connection, OptionalExtension};
use wedge_core::bus::Mailbox;
use wedge_core::health::{Health, ModuleState};
use wedge_core::metrics::{MetricsSource, PromWriter};
use wedge_core::module::{SupervisionSettings, Supervisor};
use wedge_core::outbox;
use wedge_core::store::StoreOptions;
use wedge_core::{Bus, Content, Message, Store};
use wedge_devicetwin::definition::DeviceDefinition;
use wedge_devicetwin::effects::DesiredValue;
use wedge_devicetwin::hooks::{HookFuture, HookVerdict, ProposedChange, TwinHooks, TwinLookup};
use wedge_devicetwin::module::DeviceTwin;
use wedge_devicetwin::settings::DeviceTwinSettings;
use wedge_devicetwin::storage;

/// Generous bound for anything that should happen "soon".
pub const WAIT: Duration = Duration::from_secs(20);

/// The node's name in every test.
pub const NODE: &str = "edge-1";

/// The database file of a node living in `dir`.
pub fn db_path(dir: &Path) -> PathBuf {
    dir.join("edgecore.db")
}

/// One hook call, with what SQLite held when it was made (to tell "after the commit" from
/// "before").
#[derive(Debug, Clone, PartialEq, Eq)]
#[allow(clippy::large_enum_variant)] // test records; size does not matter
pub enum HookCall {
    /// `desired`, with the `expected` column of that twin's row at the time of the call.
    Desired {
        /// What the hook got.
        value: DesiredValue,
        /// `device_twin.expected` of the row then (`None`: no row).
        stored_expected: Option<String>,
    },
    /// `device_defined`.
    Defined(DeviceDefinition),
    /// `device_removed`, with the number of `device` rows of that id at the time of the call.
    Removed {
        /// The device.
        device: String,
        /// `device` rows with that id then.
        rows_then: i64,
    },
}

/// Hooks that record every call and review nothing, except devices given to
/// [`RecordingHooks::stall_reviews`].
pub struct RecordingHooks {
    db: PathBuf,
    calls: Mutex<Vec<HookCall>>,
    stalls: Mutex<std::collections::HashMap<String, Duration>>,
    /// Cloud desired values reviewed by a clamp: device → ceiling.
    ceilings: Mutex<std::collections::HashMap<String, i64>>,
}

impl RecordingHooks {
    /// Hooks reading the database at `db` when called.
    pub fn new(db: PathBuf) -> Arc<RecordingHooks> {
        Arc::new(RecordingHooks {
            db,
            calls: Mutex::new(Vec::new()),
            stalls: Mutex::default(),
            ceilings: Mutex::default(),
        })
    }

    /// From now on, every change of `device` is reviewed: it takes `delay`, then is accepted
    /// (a slow twin handler).
    #[allow(dead_code)] // used by tests/reviews.rs only
    pub fn stall_reviews(&self, device: &str, delay: Duration) {
        self.stalls.lock().unwrap().insert(device.to_owned(), delay);
    }

    /// From now on, desired values the cloud proposes for `device` are clamped to `ceiling`
    /// (a safety twin handler), and the reviews are recorded.
    #[allow(dead_code)] // used by tests/module.rs only
    pub fn clamp_cloud_desired(&self, device: &str, ceiling: i64) {
        self.ceilings
            .lock()
            .unwrap()
            .insert(device.to_owned(), ceiling);
    }

    /// The calls so far, in order.
    pub fn calls(&self) -> Vec<HookCall> {
        self.calls.lock().unwrap().clone()
    }

    fn record(&self, call: HookCall) {
        self.calls.lock().unwrap().push(call);
    }

    fn conn(&self) -> Connection {
        Connection::open(&self.db).unwrap()
    }
}

impl TwinHooks for RecordingHooks {
    fn reviews(&self, device: &str) -> bool {
        self.stalls.lock().unwrap().contains_key(device)
            || self.ceilings.lock().unwrap().contains_key(device)
    }

    fn review(&self, change: ProposedChange, _twins: Arc<dyn TwinLookup>) -> HookFuture<'_> {
        let delay = self.stalls.lock().unwrap().get(&change.device).copied();
        let ceiling = self.ceilings.lock().unwrap().get(&change.device).copied();
        if let Some(ceiling) = ceiling
            && change.desired
            && change.proposer == wedge_devicetwin::hooks::Proposer::Cloud
        {
            let value: i64 = change.value.parse().unwrap();
            return Box::pin(async move {
                if value > ceiling {
                    HookVerdict::Replace(ceiling.to_string())
                } else {
                    HookVerdict::Accept
                }
            });
        }
        Box::pin(async move {
            if let Some(delay) = delay {
                tokio::time::sleep(delay).await;
            }
            HookVerdict::Accept
        })
    }

    fn desired(&self, value: DesiredValue) {
        let stored_expected = self
            .conn()
            .query_row(
                "SELECT expected FROM device_twin WHERE deviceid = ?1 AND name = ?2",
                [&value.device, &value.key],
                |r| r.get(0),
            )
            .optional()
            .unwrap();
        self.record(HookCall::Desired {
            value,
            stored_expected,
        });
    }

    fn device_defined(&self, definition: DeviceDefinition) {
        self.record(HookCall::Defined(definition));
    }

    fn device_removed(&self, device: &str) {
        let rows_then = self
            .conn()
            .query_row("SELECT count(*) FROM device WHERE id = ?1", [device], |r| {
                r.get(0)
            })
            .unwrap();
        self.record(HookCall::Removed {
            device: device.to_owned(),
            rows_then,
        });
    }
}

/// One MQTT publish the module handed to `eventbus`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Published {
    /// The topic (the message's resource).
    pub topic: String,
    /// The payload (the message's string content).
    pub payload: String,
}

impl Published {
    /// A field of the JSON payload.
    pub fn field(&self, name: &str) -> serde_json::Value {
        let value: serde_json::Value = serde_json::from_str(&self.payload).unwrap_or_else(|e| {
            panic!(
                "payload on {} is not JSON ({e}): {}",
                self.topic, self.payload
            )
        });
        value[name].clone()
    }

    /// The payload's `timestamp`.
    pub fn timestamp(&self) -> i64 {
        self.field("timestamp").as_i64().unwrap()
    }

    /// The payload's `event_id`.
    pub fn event_id(&self) -> String {
        self.field("event_id").as_str().unwrap().to_owned()
    }
}

/// The devicetwin module in a node: real bus, real store, real supervisor.
pub struct Node {
    /// The node's bus.
    pub bus: Bus,
    /// The store the module writes through.
    pub store: Store,
    /// The module.
    pub twin: Arc<DeviceTwin>,
    /// The hooks it calls.
    pub hooks: Arc<RecordingHooks>,
    /// What the module publishes over MQTT arrives here.
    pub eventbus: Mailbox,
    /// What the module sends to the cloud arrives here.
    pub cloud: Mailbox,
    db: PathBuf,
    probes: u64,
    supervisor: Option<Supervisor>,
}

impl Node {
    /// Opens (creating if needed) the store in `dir`, migrates it, runs `seed` SQL on it, then
    /// starts the module and waits until it reports running.
    pub async fn start(dir: &Path, settings: DeviceTwinSettings, seed: &str) -> Node {
        Node::start_with(dir, settings, seed, false).await
    }

    /// Like [`Node::start`], with the cloud link's durable outbox: cloud messages are stored in
    /// it (see [`Node::outbox_rows`]) instead of arriving on [`Node::cloud`].
    pub async fn start_with_outbox(dir: &Path, settings: DeviceTwinSettings, seed: &str) -> Node {
        Node::start_with(dir, settings, seed, true).await
    }

    async fn start_with(
        dir: &Path,
        settings: DeviceTwinSettings,
        seed: &str,
        with_outbox: bool,
    ) -> Node {
        let db = db_path(dir);
        let store = Store::open(&db, StoreOptions::default()).unwrap();
        store
            .migrate(storage::COMPONENT, storage::MIGRATIONS)
            .await
            .unwrap();
        if !seed.is_empty() {
            let seed = seed.to_owned();
            store
                .write(move |conn| Ok(conn.execute_batch(&seed)?))
                .await
                .unwrap();
        }
        let bus = Bus::new(8192);
        let eventbus = bus.register("eventbus", "bus").unwrap();
        let cloud = bus.register("websocket", "hub").unwrap();
        let health = Health::new();
        let mut supervisor =
            Supervisor::new(bus.clone(), health.clone(), SupervisionSettings::default());
        let hooks = RecordingHooks::new(db.clone());
        let mut twin = DeviceTwin::new(store.clone(), settings, hooks.clone());
        if with_outbox {
            store
                .migrate(outbox::COMPONENT, outbox::MIGRATIONS)
                .await
                .unwrap();
            twin = twin.with_outbox(outbox::Outbox::open(store.clone(), 1000).await.unwrap());
        }
        let twin = Arc::new(twin);
        supervisor.spawn(twin.clone()).unwrap();
        let deadline = Instant::now() + WAIT;
        while health.state("twin") != Some(ModuleState::Running) {
            assert!(Instant::now() < deadline, "twin not running");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        Node {
            bus,
            store,
            twin,
            hooks,
            eventbus,
            cloud,
            db,
            probes: 0,
            supervisor: Some(supervisor),
        }
    }

    /// Stops the module (every queued write committed and its outputs sent) and closes the
    /// store, as a process exit would.
    pub async fn stop(mut self) {
        if let Some(supervisor) = self.supervisor.take() {
            supervisor.shutdown().await;
        }
    }

    /// An independent connection to the database, as another process would open.
    pub fn db(&self) -> Connection {
        Connection::open(&self.db).unwrap()
    }

    /// `(resource, body)` of every outbox row, in seq order.
    pub fn outbox_rows(&self) -> Vec<(String, String)> {
        let db = self.db();
        let mut stmt = db
            .prepare("SELECT resource, body FROM outbox ORDER BY seq")
            .unwrap();
        stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
            .unwrap()
            .map(Result::unwrap)
            .collect()
    }

    /// Number of rows of `table` belonging to `device` (`id` for `device`, else `deviceid`).
    pub fn rows(&self, table: &str, device: &str) -> i64 {
        let column = if table == "device" { "id" } else { "deviceid" };
        self.db()
            .query_row(
                &format!("SELECT count(*) FROM {table} WHERE {column} = ?1"),
                [device],
                |r| r.get(0),
            )
            .unwrap()
    }

    /// Columns `(expected, actual, expected_meta, actual_meta, expected_version,
    /// actual_version, optional, attr_type, metadata)` of one twin row.
    pub fn twin_row(&self, device: &str, key: &str) -> Option<TwinRow> {
        self.db()
            .query_row(
                "SELECT expected, actual, expected_meta, actual_meta, expected_version,
                        actual_version, optional, attr_type, metadata
                 FROM device_twin WHERE deviceid = ?1 AND name = ?2",
                [device, key],
                |r| {
                    Ok(TwinRow {
                        expected: r.get(0)?,
                        actual: r.get(1)?,
                        expected_meta: r.get(2)?,
                        actual_meta: r.get(3)?,
                        expected_version: r.get(4)?,
                        actual_version: r.get(5)?,
                        optional: r.get(6)?,
                        attr_type: r.get(7)?,
                        metadata: r.get(8)?,
                    })
                },
            )
            .optional()
            .unwrap()
    }

    /// Sends `msg` to the module.
    pub async fn send(&self, msg: Message) {
        self.bus.send("twin", msg).await.unwrap();
    }

    /// An MQTT message on `topic`, as eventbus forwards it.
    pub async fn mqtt(&self, topic: &str, payload: &str) {
        self.send(mqtt_message(topic, payload)).await;
    }

    /// A message from the cloud's device controller, content as JSON.
    pub async fn cloud_sends(&self, op: &str, resource: &str, json: &str) {
        let msg = Message::build(
            "devicecontroller",
            "twin",
            op,
            resource,
            Content::from_raw(json.to_owned()).unwrap(),
        );
        self.send(msg).await;
    }

    /// A Device or DeviceModel object from metamanager (source `meta`, group `twin`).
    pub async fn meta_sends(&self, op: &str, resource: &str, json: &str) {
        let content = if json.is_empty() {
            Content::null()
        } else {
            Content::from_raw(json.to_owned()).unwrap()
        };
        self.send(Message::build("meta", "twin", op, resource, content))
            .await;
    }

    /// The cloud link came up or went down (edgehub's broadcast).
    pub async fn connection(&self, connected: bool) {
        let state = if connected {
            "cloud_connected"
        } else {
            "cloud_disconnected"
        };
        self.send(Message::build(
            "edgehub",
            "twin",
            "connect",
            "node/connection",
            Content::string(state),
        ))
        .await;
    }

    /// The cloud confirms message `msg_id`.
    pub async fn confirm(&self, msg_id: &str) {
        let mut ack = Message::build(
            "devicecontroller",
            "twin",
            "response",
            "twin",
            Content::ok(),
        );
        ack.header.parent_id = msg_id.to_owned();
        self.send(ack).await;
    }

    /// The next MQTT publish, checked to be routed as KubeEdge's twin publishes are.
    pub async fn next_publish(&mut self) -> Published {
        let msg = next(&mut self.eventbus).await;
        assert_eq!(
            (
                msg.route.source.as_str(),
                msg.route.group.as_str(),
                msg.route.operation.as_str()
            ),
            ("twin", "bus", "publish"),
            "{msg:?}"
        );
        Published {
            topic: msg.route.resource.clone(),
            payload: msg
                .content
                .as_string()
                .unwrap_or_else(|| panic!("publish content is not a string: {msg:?}")),
        }
    }

    /// The next `n` publishes.
    pub async fn publishes(&mut self, n: usize) -> Vec<Published> {
        let mut out = Vec::with_capacity(n);
        for _ in 0..n {
            out.push(self.next_publish().await);
        }
        out
    }

    /// Sends a membership get and returns every publish that came before its result. Requests
    /// are answered in arrival order and after the commits of the requests before them, so
    /// once this returns, everything sent earlier has been handled, written and published.
    pub async fn probe(&mut self) -> Vec<Published> {
        self.probes += 1;
        let event_id = format!("probe-{}", self.probes);
        let topic = format!("$hw/events/node/{NODE}/membership/get");
        self.mqtt(&topic, &format!(r#"{{"event_id":"{event_id}"}}"#))
            .await;
        let result_topic = format!("$hw/events/node/{NODE}/membership/get/result");
        let mut before = Vec::new();
        loop {
            let p = self.next_publish().await;
            if p.topic == result_topic && p.event_id() == event_id {
                return before;
            }
            before.push(p);
        }
    }

    /// A gauge or counter of the module's metrics.
    pub fn metric(&self, name: &str) -> f64 {
        let mut w = PromWriter::new();
        self.twin.write_metrics(&mut w);
        let text = w.finish();
        text.lines()
            .find_map(|line| {
                let rest = line.strip_prefix(name)?.strip_prefix(' ')?;
                rest.trim().parse().ok()
            })
            .unwrap_or_else(|| panic!("metric {name} not found in:\n{text}"))
    }
}

/// Columns of one `device_twin` row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TwinRow {
    /// `expected`.
    pub expected: String,
    /// `actual`.
    pub actual: String,
    /// `expected_meta`.
    pub expected_meta: String,
    /// `actual_meta`.
    pub actual_meta: String,
    /// `expected_version`.
    pub expected_version: String,
    /// `actual_version`.
    pub actual_version: String,
    /// `optional`.
    pub optional: bool,
    /// `attr_type`.
    pub attr_type: String,
    /// `metadata`.
    pub metadata: String,
}

/// The message eventbus builds for an MQTT message on a twin topic: source `bus`, group `user`,
/// op `response`, resource = URL-safe padded base64 of the topic, content = payload string.
pub fn mqtt_message(topic: &str, payload: &str) -> Message {
    Message::build(
        "bus",
        "user",
        "response",
        &URL_SAFE.encode(topic),
        Content::string(payload),
    )
}

/// The next message at `mailbox`, within [`WAIT`].
pub async fn next(mailbox: &mut Mailbox) -> Message {
    tokio::time::timeout(WAIT, mailbox.recv())
        .await
        .unwrap_or_else(|_| panic!("nothing arrived at {} within {WAIT:?}", mailbox.name()))
        .unwrap()
}

/// Fails if a message arrives at `mailbox` within `quiet`.
pub async fn nothing(mailbox: &mut Mailbox, quiet: Duration) {
    if let Ok(Some(m)) = tokio::time::timeout(quiet, mailbox.recv()).await {
        panic!("unexpected message at {}: {m:?}", mailbox.name());
    }
}

/// `template` with every `{name}` placeholder replaced.
pub fn fill(template: &str, vars: &[(&str, String)]) -> String {
    let mut out = template.to_owned();
    for (name, value) in vars {
        out = out.replace(&format!("{{{name}}}"), value);
    }
    assert!(
        !out.contains("{now}") && !out.contains("{id}"),
        "unfilled placeholder in {out}"
    );
    out
}
