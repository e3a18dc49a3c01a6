//! Pod sandboxes against the real Docker engine, through the engine and the plans directly (as
//! a pod worker will call them): the containers of a pod share the sandbox's network
//! namespace (localhost, one IP, its hostname), host ports are published by the sandbox, a
//! sandbox stops at once on SIGTERM, and a change of host port replaces it while an
//! environment change does not.
//!
//! Needs a running engine and the `wedge-test/busybox:1` and `wedge-test/pause:1` images, all
//! set up by `.ci/setup`; without them the tests fail and say so. Each test owns a node name
//! of its own and removes every container labelled with it, also when it fails.

mod common;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use common::{IMAGE, PAUSE_IMAGE, WAIT, engine, unique};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use wedge_edged::engine::{Engine, ManagedContainer, labels};
use wedge_edged::plan::container_plan;
use wedge_edged::pod::Pod;
use wedge_edged::sandbox::{self, Step};

/// Removes every container of its node when dropped, so a failed test leaves nothing behind.
struct Cleanup(String);

impl Drop for Cleanup {
    fn drop(&mut self) {
        let filter = format!("label={}={}", labels::NODE, self.0);
        let Ok(listed) = Command::new("docker")
            .args(["ps", "-aq", "--filter", &filter])
            .output()
        else {
            return;
        };
        let ids = String::from_utf8_lossy(&listed.stdout).to_string();
        let ids: Vec<&str> = ids.split_whitespace().collect();
        if !ids.is_empty() {
            let _ = Command::new("docker")
                .args(["rm", "-f", "-v"])
                .args(&ids)
                .output();
        }
    }
}

fn pod(name: &str, containers: Value) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "default", "uid": unique("uid")},
        "spec": {"containers": containers},
    }))
    .unwrap()
}

fn container(name: &str, script: &str) -> Value {
    json!({"name": name, "image": IMAGE, "imagePullPolicy": "Never", "command": ["sh", "-c", script]})
}

/// Serves `body` on port 8080 with busybox's httpd.
fn web_server(name: &str, body: &str) -> Value {
    container(
        name,
        &format!("mkdir -p /www && echo {body} > /www/index.html && exec httpd -f -p 8080 -h /www"),
    )
}

async fn listed(engine: &Engine, node: &str, pod: &Pod) -> Vec<ManagedContainer> {
    engine
        .list(node)
        .await
        .unwrap()
        .into_iter()
        .filter(|c| c.pod_uid == pod.metadata.uid)
        .collect()
}

/// One pod worker pass as the module is to run it: the sandbox per [`sandbox::step`], then
/// every app container that is missing or not joined to the current sandbox. Returns the
/// sandbox's id.
async fn converge(engine: &Engine, node: &str, pod: &Pod) -> String {
    let ours = listed(engine, node, pod).await;
    let id = match sandbox::step(pod, PAUSE_IMAGE, false, &ours) {
        Step::Ready { sandbox, stale } => {
            assert!(stale.is_empty(), "{stale:?}");
            sandbox.id.clone()
        }
        Step::Create { attempt, stale } => {
            for app in ours.iter().filter(|c| !c.sandbox) {
                engine
                    .stop_and_remove(&app.id, Duration::from_secs(1))
                    .await
                    .unwrap();
            }
            for old in stale {
                engine.remove_sandbox(&old.id).await.unwrap();
            }
            engine.ensure_sandbox_image(PAUSE_IMAGE).await.unwrap();
            let plan = sandbox::plan(node, pod, PAUSE_IMAGE, attempt);
            engine.run_sandbox(&plan).await.unwrap()
        }
        Step::NoSandbox { .. } => panic!("a pod on the bridge gets a sandbox"),
    };
    let ours = listed(engine, node, pod).await;
    for spec in &pod.spec.containers {
        let current = ours.iter().find(|c| !c.sandbox && c.container == spec.name);
        if current.is_some_and(|c| sandbox::joined(c, Some(&id)) && c.state == "running") {
            continue;
        }
        if let Some(c) = current {
            engine
                .stop_and_remove(&c.id, Duration::from_secs(1))
                .await
                .unwrap();
        }
        let plan = container_plan(
            node,
            pod,
            spec,
            0,
            Path::new("/nonexistent"),
            &[],
            Some(&id),
        )
        .unwrap();
        let app = engine.create(&plan).await.unwrap();
        engine.start(&app).await.unwrap();
    }
    id
}

/// Runs `cmd` in container `id` until it exits 0; its output.
async fn exec_until_ok(engine: &Engine, id: &str, cmd: &[&str]) -> String {
    let cmd: Vec<String> = cmd.iter().map(|s| (*s).to_owned()).collect();
    let deadline = Instant::now() + WAIT;
    loop {
        let (code, out) = engine
            .exec(id, &cmd, Duration::from_secs(10))
            .await
            .unwrap();
        if code == 0 {
            return out;
        }
        assert!(
            Instant::now() < deadline,
            "{cmd:?} in {id} kept failing: {code} {out}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn app_id<'a>(ours: &'a [ManagedContainer], name: &str) -> &'a str {
    &ours
        .iter()
        .find(|c| !c.sandbox && c.container == name)
        .unwrap_or_else(|| panic!("no container {name} in {ours:?}"))
        .id
}

/// A free TCP port on the host (free when asked: the engine takes it right after).
fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

/// `GET /` on the host's `port`; the response, or the error.
async fn http_get(port: u16) -> Result<String, std::io::Error> {
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port)).await?;
    stream.write_all(b"GET / HTTP/1.0\r\n\r\n").await?;
    let mut response = String::new();
    tokio::time::timeout(Duration::from_secs(5), stream.read_to_string(&mut response))
        .await
        .map_err(std::io::Error::other)??;
    Ok(response)
}

/// Waits until the host's `port` serves `body`.
async fn served(port: u16, body: &str) {
    let deadline = Instant::now() + WAIT;
    loop {
        let answer = http_get(port).await;
        if answer.as_ref().is_ok_and(|r| r.contains(body)) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "host port {port} does not serve {body:?}: {answer:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn the_containers_of_a_pod_share_the_sandboxes_network() {
    let engine = engine().await;
    let node = unique("sbnode");
    let _cleanup = Cleanup(node.clone());
    let name = unique("shared");
    let pod = pod(
        &name,
        json!([
            web_server("server", "hello-from-server"),
            container("client", "sleep 3600")
        ]),
    );
    let sandbox_id = converge(&engine, &node, &pod).await;

    // The engine tells the sandbox from the app containers, by its labels.
    let ours = listed(&engine, &node, &pod).await;
    assert_eq!(ours.len(), 3, "{ours:?}");
    let sandboxes: Vec<&ManagedContainer> = ours.iter().filter(|c| c.sandbox).collect();
    assert_eq!(sandboxes.len(), 1, "{ours:?}");
    let sb = sandboxes[0];
    assert_eq!(sb.id, sandbox_id);
    assert_eq!(
        (sb.container.as_str(), sb.state.as_str(), sb.restart_count),
        ("POD", "running", 0)
    );
    assert_eq!(sb.hash, sandbox::sandbox_hash(&pod));
    assert_eq!(sb.sandbox_id, None);
    for app in ours.iter().filter(|c| !c.sandbox) {
        assert_eq!(
            app.sandbox_id.as_deref(),
            Some(sandbox_id.as_str()),
            "{app:?}"
        );
        assert_eq!(app.state, "running");
    }
    let inspected = engine
        .docker()
        .expect("a Docker engine")
        .inspect_container(&sandbox_id, None)
        .await
        .unwrap();
    assert_eq!(
        inspected.name.as_deref(),
        Some(format!("/k8s_POD_{name}_default_{}_0", pod.metadata.uid).as_str())
    );
    let sandbox_labels = inspected.config.unwrap().labels.unwrap();
    assert_eq!(sandbox_labels[labels::DOCKER_TYPE], "podsandbox");
    assert_eq!(sandbox_labels[labels::CONTAINER_NAME], "POD");
    assert_eq!(sandbox_labels[labels::POD_NAME], name);
    assert_eq!(sandbox_labels[labels::NODE], node);
    let client = app_id(&ours, "client");
    let client_labels = engine
        .docker()
        .expect("a Docker engine")
        .inspect_container(client, None)
        .await
        .unwrap()
        .config
        .unwrap()
        .labels
        .unwrap();
    assert_eq!(client_labels[labels::DOCKER_TYPE], "container");
    assert_eq!(client_labels[labels::SANDBOX_ID], sandbox_id);

    // localhost between containers: the client reaches the server's port.
    let page = exec_until_ok(
        &engine,
        client,
        &["wget", "-q", "-O-", "http://127.0.0.1:8080/"],
    )
    .await;
    assert_eq!(page.trim(), "hello-from-server");

    // One IP, the sandbox's, in both containers; the pod's hostname.
    let ip = engine
        .sandbox_ip(&sandbox_id)
        .await
        .unwrap()
        .expect("a running sandbox on the bridge has an IP");
    for c in ["server", "client"] {
        let id = app_id(&ours, c);
        let addr = exec_until_ok(
            &engine,
            id,
            &["/bin/busybox", "ip", "-o", "-4", "addr", "show"],
        )
        .await;
        assert!(addr.contains(&format!("inet {ip}/")), "{c}: {addr}");
        let host = exec_until_ok(&engine, id, &["/bin/busybox", "hostname"]).await;
        assert_eq!(host.trim(), sandbox::hostname(&pod), "{c}");
        // The engine reports no address of the container's own.
        assert_eq!(engine.inspect(id).await.unwrap().unwrap().ip, "");
    }

    // A pass over a converged pod changes nothing.
    assert_eq!(converge(&engine, &node, &pod).await, sandbox_id);
    let again: Vec<String> = listed(&engine, &node, &pod)
        .await
        .into_iter()
        .map(|c| c.id)
        .collect();
    assert!(ours.iter().all(|c| again.contains(&c.id)), "{again:?}");

    // The pause process exits 0 on SIGTERM: stopping takes no grace period.
    for c in ours.iter().filter(|c| !c.sandbox) {
        engine
            .stop_and_remove(&c.id, Duration::from_secs(1))
            .await
            .unwrap();
    }
    let started = Instant::now();
    engine
        .stop(&sandbox_id, Duration::from_secs(30))
        .await
        .unwrap();
    let took = started.elapsed();
    assert!(took < Duration::from_secs(5), "stopping took {took:?}");
    let run = engine.inspect(&sandbox_id).await.unwrap().unwrap();
    assert!(!run.running);
    assert_eq!(run.exit_code, 0, "exited on SIGTERM, not killed");
    assert_eq!(engine.sandbox_ip(&sandbox_id).await.unwrap(), None);
    // A dead sandbox is replaced by the next attempt.
    let ours = listed(&engine, &node, &pod).await;
    assert_eq!(
        sandbox::step(&pod, PAUSE_IMAGE, false, &ours),
        Step::Create {
            attempt: 1,
            stale: vec![&ours[0]]
        }
    );
    let started = Instant::now();
    engine.remove_sandbox(&sandbox_id).await.unwrap();
    assert!(started.elapsed() < Duration::from_secs(5));
    assert!(listed(&engine, &node, &pod).await.is_empty());
}

#[tokio::test]
async fn host_ports_are_published_by_the_sandbox_and_a_port_change_replaces_it() {
    let engine = engine().await;
    let node = unique("sbnode");
    let _cleanup = Cleanup(node.clone());
    let first_port = free_port();
    let mut web = web_server("web", "served-through-the-sandbox");
    web["ports"] = json!([{"containerPort": 8080, "hostPort": first_port}]);
    let mut pod = pod(&unique("ported"), json!([web]));
    let first = converge(&engine, &node, &pod).await;
    served(first_port, "served-through-the-sandbox").await;
    let inspected = engine
        .docker()
        .expect("a Docker engine")
        .inspect_container(&first, None)
        .await
        .unwrap();
    let bindings = inspected.host_config.unwrap().port_bindings.unwrap();
    assert!(bindings.contains_key("8080/tcp"), "{bindings:?}");

    // An environment change is the app container's, not the sandbox's.
    let before_env = sandbox::sandbox_hash(&pod);
    pod.spec.containers[0].env =
        serde_json::from_value(json!([{"name": "MODE", "value": "edge"}])).unwrap();
    assert_eq!(sandbox::sandbox_hash(&pod), before_env);
    let ours = listed(&engine, &node, &pod).await;
    assert!(
        matches!(sandbox::step(&pod, PAUSE_IMAGE, false, &ours), Step::Ready { sandbox, .. } if sandbox.id == first)
    );

    // A new host port is the sandbox's: it is replaced, the container follows it.
    let second_port = free_port();
    pod.spec.containers[0].ports[0].host_port = Some(second_port);
    assert_ne!(sandbox::sandbox_hash(&pod), before_env);
    let ours = listed(&engine, &node, &pod).await;
    let Step::Create { attempt, stale } = sandbox::step(&pod, PAUSE_IMAGE, false, &ours) else {
        panic!("a changed host port keeps the sandbox: {ours:?}");
    };
    assert_eq!((attempt, stale.len()), (1, 1));
    let second = converge(&engine, &node, &pod).await;
    assert_ne!(second, first);
    served(second_port, "served-through-the-sandbox").await;
    assert!(
        http_get(first_port).await.is_err(),
        "the old host port is released"
    );
    let ours = listed(&engine, &node, &pod).await;
    assert_eq!(ours.len(), 2, "{ours:?}");
    let new_sandbox = ours.iter().find(|c| c.sandbox).unwrap();
    assert_eq!(
        (new_sandbox.id.as_str(), new_sandbox.restart_count),
        (second.as_str(), 1)
    );
    assert!(sandbox::joined(
        ours.iter().find(|c| !c.sandbox).unwrap(),
        Some(&second)
    ));
}

#[tokio::test]
async fn a_missing_sandbox_image_names_the_setting() {
    let engine = engine().await;
    let err = engine
        .ensure_sandbox_image("wedge-test/no-such-pause:1")
        .await
        .unwrap_err();
    let wedge_edged::engine::EngineError::Image { reason, message } = &err else {
        panic!("{err:?}");
    };
    assert_eq!(*reason, "ErrImagePull");
    assert!(message.contains("podSandboxImage"), "{message}");
    assert!(message.contains("wedge-test/no-such-pause:1"), "{message}");
}
