//! The servicebus module on a real bus and a real SQLite file, calling a real HTTP app and
//! served to a real HTTP client. The cloud's side is the `websocket` mailbox edgehub would
//! own: these tests read what the module hands edgehub and answer as CloudCore's router does
//! (the real router is exercised by `tests/realcloud`).

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::http::HeaderMap;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use wedge_core::health::{Health, ModuleState};
use wedge_core::module::SupervisionSettings;
use wedge_core::store::StoreOptions;
use wedge_core::{Bus, Content, Mailbox, Message, Store, Supervisor};
use wedge_servicebus::wire::{HttpRequest, HttpResponse};
use wedge_servicebus::{ServiceBus, ServiceBusSettings};

const WAIT: Duration = Duration::from_secs(10);

struct Node {
    bus: Bus,
    store: Store,
    health: Health,
    cloud: Mailbox,
    listen: String,
    supervisor: Option<Supervisor>,
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

impl Node {
    async fn start(dir: &std::path::Path, port: u16) -> Node {
        let store = Store::open(&dir.join("edgecore.db"), StoreOptions::default()).expect("store");
        store
            .migrate(wedge_servicebus::COMPONENT, wedge_servicebus::MIGRATIONS)
            .await
            .expect("migrations");
        let bus = Bus::new(1024);
        let cloud = bus.register("websocket", "hub").expect("cloud mailbox");
        let health = Health::new();
        let mut supervisor =
            Supervisor::new(bus.clone(), health.clone(), SupervisionSettings::default());
        let settings = ServiceBusSettings {
            listen: format!("127.0.0.1:{port}"),
            timeout: Duration::from_secs(5),
            app_timeout: Duration::from_secs(2),
        };
        supervisor
            .spawn(Arc::new(ServiceBus::new(store.clone(), settings)))
            .expect("spawn");
        let node = Node {
            bus,
            store,
            health,
            cloud,
            listen: format!("127.0.0.1:{port}"),
            supervisor: Some(supervisor),
        };
        let deadline = Instant::now() + WAIT;
        while node.health.state("servicebus") != Some(ModuleState::Running) {
            assert!(Instant::now() < deadline, "servicebus not running");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        node
    }

    async fn router_sends(&self, op: &str, resource: &str, content: Content) -> Message {
        let msg = Message::build("router_servicebus", "user", op, resource, content);
        self.bus
            .send("servicebus", msg.clone())
            .await
            .expect("send");
        msg
    }

    async fn link(&self, state: &str) {
        let msg = Message::build(
            "edgehub",
            "bus",
            "connect",
            "node/connection",
            Content::string(state),
        );
        self.bus.send("servicebus", msg).await.expect("send");
    }

    async fn cloud_gets(&mut self) -> Message {
        tokio::time::timeout(WAIT, self.cloud.recv())
            .await
            .expect("a message for the cloud in time")
            .expect("mailbox open")
    }

    async fn stop(mut self) -> Store {
        if let Some(s) = self.supervisor.take() {
            s.shutdown().await;
        }
        self.store
    }
}

/// A real app: `/url` answers with what it got (body and the `user` header), status 201.
async fn app() -> u16 {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let router = axum::Router::new().route(
        "/url",
        axum::routing::any(|headers: HeaderMap, body: String| async move {
            let user = headers
                .get("user")
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default()
                .to_owned();
            (
                axum::http::StatusCode::CREATED,
                format!("Reply from server: {body} [user]: {user}"),
            )
        }),
    );
    tokio::spawn(async move { axum::serve(listener, router).await });
    port
}

/// POSTs `body` to `addr` with HTTP/1.1 and returns the response body.
async fn post(addr: &str, body: &str) -> std::io::Result<String> {
    let mut stream = tokio::net::TcpStream::connect(addr).await?;
    let request = format!(
        "POST / HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).await?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer).await?;
    Ok(answer
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default())
}

async fn post_json(addr: &str, body: &str) -> serde_json::Value {
    let text = post(addr, body).await.expect("the servicebus answers");
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("not JSON ({e}): {text:?}"))
}

#[tokio::test]
async fn a_cloud_call_reaches_the_app_and_its_answer_goes_back() {
    let dir = tempfile::tempdir().unwrap();
    let mut node = Node::start(dir.path(), free_port()).await;
    let port = app().await;
    let request = HttpRequest {
        header: [("User".to_owned(), vec!["I am user".to_owned()])].into(),
        body: b"Hello World!".to_vec(),
        method: "POST".to_owned(),
        url: String::new(),
    };
    let sent = node
        .router_sends(
            "POST",
            &format!("{port}:/url"),
            Content::json(&request).unwrap(),
        )
        .await;
    let reply = node.cloud_gets().await;
    assert_eq!(reply.header.parent_id, sent.header.id);
    assert_eq!(reply.route.source, "servicebus");
    assert_eq!(reply.route.group, "user");
    assert_eq!(reply.route.operation, "upload");
    let response: HttpResponse = reply.content.parse().unwrap();
    assert_eq!(response.status_code, 201);
    assert_eq!(
        String::from_utf8_lossy(&response.body),
        "Reply from server: Hello World! [user]: I am user"
    );
    assert!(
        response.header.contains_key("Content-Type"),
        "{:?}",
        response.header
    );

    // Nobody on the port: the cloud is told 404, as edgecore tells it.
    let closed = free_port();
    let sent = node
        .router_sends(
            "GET",
            &format!("{closed}:/x"),
            Content::json(&HttpRequest::default()).unwrap(),
        )
        .await;
    let reply = node.cloud_gets().await;
    assert_eq!(reply.header.parent_id, sent.header.id);
    let response: HttpResponse = reply.content.parse().unwrap();
    assert_eq!(response.status_code, 404);

    // A resource that is not port:path is a 400, and the module carries on.
    node.router_sends("GET", "nonsense", Content::null()).await;
    let response: HttpResponse = node.cloud_gets().await.content.parse().unwrap();
    assert_eq!(response.status_code, 400);
    assert!(String::from_utf8_lossy(&response.body).contains("nonsense"));
    node.stop().await;
}

#[tokio::test]
async fn an_edge_app_calls_an_allowed_cloud_url_and_nothing_else() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let mut node = Node::start(dir.path(), port).await;
    let addr = node.listen.clone();
    // No rule yet: nothing listens, as on edgecore.
    assert!(
        post(&addr, "{}").await.is_err(),
        "listening before any rule"
    );

    let url = "http://127.0.0.1:9000/echo";
    node.router_sends("start", url, Content::null()).await;
    node.link("cloud_connected").await;
    let deadline = Instant::now() + WAIT;
    while tokio::net::TcpStream::connect(&addr).await.is_err() {
        assert!(
            Instant::now() < deadline,
            "the server did not open on start"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    let body = format!(r#"{{"method":"POST","targetURL":"{url}","payload":""}}"#);
    let call = tokio::spawn({
        let addr = addr.clone();
        let body = body.clone();
        async move { post_json(&addr, &body).await }
    });
    // What reaches the cloud: upload of the raw request, as Go marshals a []byte (base64).
    let upload = node.cloud_gets().await;
    assert_eq!(upload.route.source, "servicebus");
    assert_eq!(upload.route.group, "user");
    assert_eq!(upload.route.operation, "upload");
    assert_eq!(upload.route.resource, url);
    assert!(upload.header.sync);
    let carried: String = upload.content.parse().unwrap();
    use base64::Engine;
    assert_eq!(
        base64::engine::general_purpose::STANDARD
            .decode(carried)
            .unwrap(),
        body.as_bytes()
    );
    // The router answers with the endpoint's body as a string.
    let answer = upload.response(Content::string("Hello World"));
    assert!(
        node.bus.send_response(answer).is_none(),
        "nobody waited for the answer"
    );
    let got = call.await.unwrap();
    assert_eq!(got["code"], 200, "{got}");
    assert_eq!(got["body"], "Hello World", "{got}");

    let other = post_json(
        &addr,
        r#"{"method":"GET","targetURL":"http://example.invalid/"}"#,
    )
    .await;
    assert_eq!(other["code"], 400);
    assert!(
        other["msg"].as_str().unwrap().contains("is not allowed"),
        "{other}"
    );
    let bad = post_json(&addr, "not json").await;
    assert_eq!(bad["msg"], "invalid params");

    // The cloud away: refused at once, nothing queued for the cloud.
    node.link("cloud_disconnected").await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    let offline = post_json(&addr, &body).await;
    assert_eq!(offline["code"], 503, "{offline}");
    assert!(
        node.cloud.try_recv().is_none(),
        "a request went to the cloud while offline"
    );

    // The allow-list survives a restart, and the server comes back with it.
    let store = node.stop().await;
    drop(store);
    let node = Node::start(dir.path(), port).await;
    let deadline = Instant::now() + WAIT;
    while tokio::net::TcpStream::connect(&addr).await.is_err() {
        assert!(
            Instant::now() < deadline,
            "the server did not reopen after a restart"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // The cloud stops the rule with the URL path-joined (`http:/...`): it is still forgotten,
    // and the server closes with the last rule.
    node.router_sends("stop", "http:/127.0.0.1:9000/echo", Content::null())
        .await;
    let deadline = Instant::now() + WAIT;
    while tokio::net::TcpStream::connect(&addr).await.is_ok() {
        assert!(
            Instant::now() < deadline,
            "the server stayed open with no rule"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        wedge_servicebus::target_urls::all(&node.store)
            .await
            .unwrap()
            .is_empty()
    );
    node.stop().await;
}
