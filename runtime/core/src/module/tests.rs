use std::sync::Mutex as StdMutex;
use std::time::Duration;

use super::*;
use crate::message::Content;
use crate::metrics::MetricsSource;

/// A module that echoes, and misbehaves on command.
struct Echo {
    starts: StdMutex<u32>,
    stopped: Arc<StdMutex<Vec<&'static str>>>,
    name: &'static str,
}

impl Echo {
    fn new(name: &'static str, stopped: Arc<StdMutex<Vec<&'static str>>>) -> Arc<Echo> {
        Arc::new(Echo {
            starts: StdMutex::new(0),
            stopped,
            name,
        })
    }
}

impl Module for Echo {
    fn name(&self) -> &'static str {
        self.name
    }
    fn group(&self) -> &'static str {
        "test"
    }
    async fn run(self: Arc<Self>, mut ctx: ModuleContext) -> Result<(), ModuleError> {
        *self.starts.lock().unwrap() += 1;
        while let Some(msg) = ctx.recv().await {
            match msg.route.operation.as_str() {
                "panic" => panic!("asked to panic"),
                "fail" => return Err("asked to fail".into()),
                "hang" => std::future::pending::<()>().await,
                _ => {
                    let reply = msg.response(Content::string(format!(
                        "start {}",
                        self.starts.lock().unwrap()
                    )));
                    let _ = ctx.bus().send_response(reply);
                }
            }
        }
        self.stopped.lock().unwrap().push(self.name);
        Ok(())
    }
}

fn fast() -> SupervisionSettings {
    SupervisionSettings {
        ping_interval: Duration::from_millis(20),
        ping_misses: 2,
        backoff_initial: Duration::from_millis(10),
        backoff_max: Duration::from_millis(40),
        stable_after: Duration::from_secs(60),
        stop_timeout: Duration::from_secs(1),
    }
}

async fn ask(bus: &Bus, module: &str, op: &str) -> String {
    let req = Message::build("test", "test", op, "r", Content::null());
    let reply = bus
        .send_sync(module, req, Duration::from_secs(2))
        .await
        .unwrap();
    reply.content.as_string().unwrap()
}

async fn wait_running(health: &Health, module: &str) {
    for _ in 0..200 {
        if health.state(module) == Some(ModuleState::Running) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!("{module} never became running: {:?}", health.snapshot());
}

#[tokio::test]
async fn failures_restart_the_module_with_its_mailbox() {
    let bus = Bus::new(16);
    let health = Health::new();
    let mut sup = Supervisor::new(bus.clone(), health.clone(), fast());
    let stopped = Arc::default();
    sup.spawn(Echo::new("echo", stopped)).unwrap();
    wait_running(&health, "echo").await;
    assert!(health.all_running());
    assert_eq!(ask(&bus, "echo", "hello").await, "start 1");

    for (n, op) in ["panic", "fail", "hang"].into_iter().enumerate() {
        bus.send("echo", Message::build("t", "t", op, "r", Content::null()))
            .await
            .unwrap();
        // Queued behind the failure: handled by the next incarnation.
        assert_eq!(ask(&bus, "echo", "hello").await, format!("start {}", n + 2));
        let h = &health.snapshot()["echo"];
        assert_eq!(h.restarts, n as u64 + 1);
        let last = h.last_error.clone().unwrap();
        let expected = [
            "panicked: asked to panic",
            "failed: asked to fail",
            "health pings",
        ][n];
        assert!(last.contains(expected), "{last}");
    }
    let mut w = crate::metrics::PromWriter::new();
    health.write_metrics(&mut w);
    assert!(
        w.finish()
            .contains("wedge_module_restarts_total{module=\"echo\"} 3")
    );
    sup.shutdown().await;
}

#[tokio::test]
async fn shutdown_stops_in_reverse_spawn_order() {
    let bus = Bus::new(16);
    let health = Health::new();
    let mut sup = Supervisor::new(bus.clone(), health.clone(), fast());
    let stopped: Arc<StdMutex<Vec<&'static str>>> = Arc::default();
    sup.spawn(Echo::new("first", stopped.clone())).unwrap();
    sup.spawn(Echo::new("second", stopped.clone())).unwrap();
    wait_running(&health, "first").await;
    wait_running(&health, "second").await;
    sup.shutdown().await;
    assert_eq!(*stopped.lock().unwrap(), vec!["second", "first"]);
    assert_eq!(health.state("first"), Some(ModuleState::Stopped));
    assert!(!health.all_running());
    assert!(!bus.has_module("first"));
}

/// A module that serves a TCP port from a task spawned with its token, then hangs on command:
/// the kubelet port of an edged that a slow runtime made miss its pings.
struct Listener {
    addr: std::net::SocketAddr,
    bound: StdMutex<Vec<Result<(), String>>>,
}

impl Module for Listener {
    fn name(&self) -> &'static str {
        "listener"
    }
    fn group(&self) -> &'static str {
        "test"
    }
    async fn run(self: Arc<Self>, mut ctx: ModuleContext) -> Result<(), ModuleError> {
        let bound = tokio::net::TcpListener::bind(self.addr).await;
        self.bound
            .lock()
            .unwrap()
            .push(bound.as_ref().map(|_| ()).map_err(|e| e.to_string()));
        if let Ok(listener) = bound {
            let token = ctx.token().clone();
            tokio::spawn(async move {
                loop {
                    tokio::select! {
                        _ = token.cancelled() => return,
                        _ = listener.accept() => {}
                    }
                }
            });
        }
        while let Some(msg) = ctx.recv().await {
            if msg.route.operation == "hang" {
                std::future::pending::<()>().await;
            }
        }
        Ok(())
    }
}

#[tokio::test]
async fn an_aborted_incarnations_tasks_end_so_the_next_one_gets_its_port_back() {
    let bus = Bus::new(16);
    let health = Health::new();
    let mut sup = Supervisor::new(bus.clone(), health.clone(), fast());
    let addr = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let module = Arc::new(Listener {
        addr,
        bound: StdMutex::new(Vec::new()),
    });
    sup.spawn(module.clone()).unwrap();
    wait_running(&health, "listener").await;
    bus.send(
        "listener",
        Message::build("t", "t", "hang", "r", Content::null()),
    )
    .await
    .unwrap();
    for _ in 0..200 {
        if module.bound.lock().unwrap().len() >= 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let bound = module.bound.lock().unwrap().clone();
    assert_eq!(bound.len(), 2, "restarted once: {bound:?}");
    assert_eq!(bound[1], Ok(()), "the second incarnation binds the port");
    sup.shutdown().await;
}
