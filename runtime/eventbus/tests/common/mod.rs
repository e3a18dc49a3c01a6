//! What the eventbus tests share: a node around the module (real bus, real SQLite file, the
//! supervisor), real MQTT clients, and a mosquitto process the test starts and kills.

#![allow(dead_code)]

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rumqttc::{AsyncClient, Event, MqttOptions, Packet, Publish, QoS};
use tokio::sync::mpsc;
use wedge_core::bus::Mailbox;
use wedge_core::health::Health;
use wedge_core::module::{SupervisionSettings, Supervisor};
use wedge_core::store::StoreOptions;
use wedge_core::{Bus, Content, Message, Store};
use wedge_eventbus::{BrokerUrl, EventBus, EventBusSettings, MIGRATIONS};

/// Generous bound for anything that should happen "soon".
pub const WAIT: Duration = Duration::from_secs(20);

/// A port nobody listens on right now.
pub fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind an ephemeral port");
    listener.local_addr().expect("local address").port()
}

pub fn url(port: u16) -> BrokerUrl {
    BrokerUrl {
        host: "127.0.0.1".to_owned(),
        port,
        tls: false,
    }
}

/// Settings for tests: the given mode, brokers on the given ports, fast redials.
pub fn settings(mode: u8, internal_port: u16, external_port: u16) -> EventBusSettings {
    let config = wedge_core::config::EventBus {
        mqtt_mode: mode,
        ..Default::default()
    };
    let mut s = EventBusSettings::from_config(&config, "edge-test").expect("valid settings");
    s.internal = url(internal_port);
    s.external = url(external_port);
    s.reconnect_initial = Duration::from_millis(100);
    s.reconnect_max = Duration::from_millis(500);
    s
}

/// The node around the module: bus, store, supervisor, and the mailboxes of the modules the
/// eventbus sends to (`twin` and the cloud link `websocket`).
pub struct Node {
    pub bus: Bus,
    pub store: Store,
    pub health: Health,
    pub eventbus: Arc<EventBus>,
    pub twin: Mailbox,
    pub cloud: Mailbox,
    supervisor: Option<Supervisor>,
}

impl Node {
    /// Starts the eventbus over the database in `dir` and waits until it reports running.
    pub async fn start(dir: &Path, settings: EventBusSettings) -> Node {
        let store = Store::open(&dir.join("edgecore.db"), StoreOptions::default()).expect("store");
        store
            .migrate(wedge_eventbus::COMPONENT, MIGRATIONS)
            .await
            .expect("migrations");
        let bus = Bus::new(1024);
        let twin = bus.register("twin", "twin").expect("twin mailbox");
        let cloud = bus.register("websocket", "hub").expect("cloud mailbox");
        let health = Health::new();
        let mut supervisor =
            Supervisor::new(bus.clone(), health.clone(), SupervisionSettings::default());
        let eventbus = Arc::new(EventBus::new(store.clone(), settings));
        supervisor.spawn(eventbus.clone()).expect("spawn eventbus");
        let node = Node {
            bus,
            store,
            health,
            eventbus,
            twin,
            cloud,
            supervisor: Some(supervisor),
        };
        node.wait_running().await;
        node
    }

    async fn wait_running(&self) {
        let deadline = Instant::now() + WAIT;
        while self.health.state("eventbus") != Some(wedge_core::health::ModuleState::Running) {
            assert!(
                Instant::now() < deadline,
                "eventbus not running: {:?}",
                self.health.snapshot()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Sends a message to the eventbus as module `source` would.
    pub async fn to_eventbus(&self, source: &str, op: &str, resource: &str, content: Content) {
        let msg = Message::build(source, "bus", op, resource, content);
        self.bus
            .send("eventbus", msg)
            .await
            .expect("eventbus mailbox");
    }

    /// Stops the module and its brokers.
    pub async fn stop(mut self) {
        if let Some(s) = self.supervisor.take() {
            s.shutdown().await;
        }
    }

    /// Rows of `sub_topics`, read back through the store.
    pub async fn stored_topics(&self) -> Vec<String> {
        wedge_eventbus::sub_topics::all(&self.store)
            .await
            .expect("read sub_topics")
    }
}

/// The next message at `mailbox`, within [`WAIT`].
pub async fn next(mailbox: &mut Mailbox) -> Message {
    tokio::time::timeout(WAIT, mailbox.recv())
        .await
        .unwrap_or_else(|_| panic!("nothing arrived at {} within {WAIT:?}", mailbox.name()))
        .expect("mailbox open")
}

/// Fails if a message arrives at `mailbox` within `quiet`.
pub async fn nothing(mailbox: &mut Mailbox, quiet: Duration) {
    if let Ok(Some(m)) = tokio::time::timeout(quiet, mailbox.recv()).await {
        panic!("unexpected message at {}: {m:?}", mailbox.name());
    }
}

/// Empties `mailbox`.
pub fn drain(mailbox: &mut Mailbox) {
    while mailbox.try_recv().is_some() {}
}

/// Publishes on `topic` every 200 ms until a message whose resource is `resource` arrives at
/// `mailbox` (the subscription may take a moment to reach a broker), then returns it. Other
/// messages are skipped.
pub async fn publish_until(
    client: &TestClient,
    topic: &str,
    payload: &str,
    mailbox: &mut Mailbox,
    resource: &str,
) -> Message {
    let deadline = Instant::now() + WAIT;
    loop {
        client.publish(topic, payload).await;
        let until = Instant::now() + Duration::from_millis(200);
        while let Ok(Some(msg)) = tokio::time::timeout_at(until.into(), mailbox.recv()).await {
            if msg.route.resource == resource {
                return msg;
            }
        }
        assert!(
            Instant::now() < deadline,
            "no message for {topic} reached {} within {WAIT:?}",
            mailbox.name()
        );
    }
}

/// What a test client's event loop reports.
#[derive(Debug)]
pub enum Seen {
    Publish(Publish),
    SubAck,
    ConnAck,
    Error(String),
}

/// A real MQTT client (rumqttc), its event loop driven by a task.
pub struct TestClient {
    pub client: AsyncClient,
    events: mpsc::Receiver<Seen>,
    task: tokio::task::JoinHandle<()>,
}

impl TestClient {
    /// Connects (retrying until the broker answers, within [`WAIT`]).
    pub async fn connect(port: u16, id: &str) -> TestClient {
        Self::connect_with(MqttOptions::new(id, "127.0.0.1", port)).await
    }

    /// Connects with explicit options; fails on an error before CONNACK.
    pub async fn connect_with(options: MqttOptions) -> TestClient {
        let mut client = Self::spawn(options);
        let deadline = Instant::now() + WAIT;
        loop {
            match tokio::time::timeout_at(deadline.into(), client.events.recv()).await {
                Ok(Some(Seen::ConnAck)) => return client,
                Ok(Some(_)) => continue,
                _ => panic!("test client did not connect within {WAIT:?}"),
            }
        }
    }

    /// Starts the client without waiting for anything.
    pub fn spawn(mut options: MqttOptions) -> TestClient {
        options.set_max_packet_size(32 * 1024 * 1024, 32 * 1024 * 1024);
        let (client, mut eventloop) = AsyncClient::new(options, 100);
        let (tx, events) = mpsc::channel(1000);
        let task = tokio::spawn(async move {
            loop {
                let seen = match eventloop.poll().await {
                    Ok(Event::Incoming(Packet::Publish(p))) => Seen::Publish(p),
                    Ok(Event::Incoming(Packet::SubAck(_))) => Seen::SubAck,
                    Ok(Event::Incoming(Packet::ConnAck(_))) => Seen::ConnAck,
                    Ok(_) => continue,
                    Err(e) => {
                        let _ = tx.try_send(Seen::Error(e.to_string()));
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                };
                if tx.send(seen).await.is_err() {
                    break;
                }
            }
        });
        TestClient {
            client,
            events,
            task,
        }
    }

    /// The next event, within [`WAIT`].
    pub async fn next_event(&mut self) -> Seen {
        tokio::time::timeout(WAIT, self.events.recv())
            .await
            .expect("test client event within the wait")
            .expect("test client running")
    }

    /// Subscribes with QoS 1 and waits for the SUBACK.
    pub async fn subscribe(&mut self, filter: &str) {
        self.client
            .subscribe(filter, QoS::AtLeastOnce)
            .await
            .expect("queue subscribe");
        loop {
            if let Seen::SubAck = self.next_event().await {
                return;
            }
        }
    }

    /// Publishes with QoS 1, retain false.
    pub async fn publish(&self, topic: &str, payload: impl Into<Vec<u8>>) {
        self.client
            .publish(topic, QoS::AtLeastOnce, false, payload.into())
            .await
            .expect("queue publish");
    }

    /// The next PUBLISH received, within [`WAIT`].
    pub async fn next_publish(&mut self) -> Publish {
        loop {
            if let Seen::Publish(p) = self.next_event().await {
                return p;
            }
        }
    }

    /// The next PUBLISH if one arrives within `wait`.
    pub async fn publish_within(&mut self, wait: Duration) -> Option<Publish> {
        let until = tokio::time::Instant::now() + wait;
        while let Ok(Some(seen)) = tokio::time::timeout_at(until, self.events.recv()).await {
            if let Seen::Publish(p) = seen {
                return Some(p);
            }
        }
        None
    }

    /// Fails if a PUBLISH arrives within `quiet`.
    pub async fn no_publish(&mut self, quiet: Duration) {
        let until = tokio::time::Instant::now() + quiet;
        while let Ok(Some(seen)) = tokio::time::timeout_at(until, self.events.recv()).await {
            if let Seen::Publish(p) = seen {
                panic!("unexpected publish on {}: {:?}", p.topic, p.payload);
            }
        }
    }
}

impl Drop for TestClient {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A mosquitto broker started by the test on 127.0.0.1, killed (by pid) when dropped.
pub struct Mosquitto {
    child: Option<Child>,
    pub port: u16,
    config: PathBuf,
    log: PathBuf,
    _dir: tempfile::TempDir,
}

/// The mosquitto binary; the test fails (never skips) when it is not installed.
fn mosquitto_binary() -> PathBuf {
    for dir in std::env::var("PATH").unwrap_or_default().split(':').chain([
        "/usr/sbin",
        "/usr/local/sbin",
        "/sbin",
    ]) {
        let candidate = Path::new(dir).join("mosquitto");
        if candidate.is_file() {
            return candidate;
        }
    }
    panic!(
        "mosquitto is not installed: these tests need a real external broker \
         (apt-get install mosquitto mosquitto-clients; .ci/setup installs it)"
    );
}

impl Mosquitto {
    /// Starts mosquitto on a free port, anonymous access.
    pub fn start() -> Mosquitto {
        Self::start_with(free_port(), "")
    }

    /// Starts mosquitto on `port` with extra configuration lines.
    pub fn start_with(port: u16, extra: &str) -> Mosquitto {
        let dir = tempfile::tempdir().expect("tempdir");
        let config = dir.path().join("mosquitto.conf");
        let log = dir.path().join("mosquitto.log");
        let text = format!(
            "listener {port} 127.0.0.1\nallow_anonymous true\npersistence false\n{extra}\n"
        );
        std::fs::write(&config, text).expect("write mosquitto.conf");
        let mut broker = Mosquitto {
            child: None,
            port,
            config,
            log,
            _dir: dir,
        };
        broker.launch();
        broker
    }

    fn launch(&mut self) {
        let log = std::fs::File::create(&self.log).expect("mosquitto log file");
        let child = Command::new(mosquitto_binary())
            .arg("-c")
            .arg(&self.config)
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log handle"))
            .stderr(log)
            .spawn()
            .expect("start mosquitto");
        self.child = Some(child);
        let deadline = Instant::now() + WAIT;
        while std::net::TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            if let Some(Ok(Some(status))) = self.child.as_mut().map(|c| c.try_wait()) {
                panic!(
                    "mosquitto exited ({status}): {}",
                    std::fs::read_to_string(&self.log).unwrap_or_default()
                );
            }
            assert!(
                Instant::now() < deadline,
                "mosquitto did not listen on {}",
                self.port
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Kills the broker (connections drop at once).
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts it again on the same port and configuration.
    pub fn restart(&mut self) {
        self.kill();
        self.launch();
    }
}

impl Drop for Mosquitto {
    fn drop(&mut self) {
        self.kill();
    }
}

pub mod pki;
pub mod scenarios;
