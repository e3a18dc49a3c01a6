//! Pods through the whole node: the cloud-hub simulator inserts a pod, `wedge run` stores it
//! (metamanager), runs it on the real Docker engine (edged) and its status reaches the cloud as
//! a `podpatch`; a restart with the cloud away brings the pod back from local state without
//! recreating it; a pod deleted from local state while the node is down is removed at start.
//!
//! Needs a running Docker engine and the `wedge-test/busybox:1` image (`bash .ci/setup`).

use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use serde_json::{Value, json};
use wedge_core::{Content, Message};
use wedge_tests::cloud_node::CloudNode;
use wedge_tests::cloudhub::{CloudHub, CloudHubOptions};

const WAIT: Duration = Duration::from_secs(30);
/// Kubernetes' default `terminationGracePeriodSeconds`, which the test pods leave unset. Their
/// `sleep` runs as PID 1 and ignores SIGTERM, so a deleted pod's container lives this long
/// before it is killed: a wait for it to go allows this on top of [`WAIT`].
const GRACE: Duration = Duration::from_secs(30);
const IMAGE: &str = "wedge-test/busybox:1";

/// Ids of running containers of pod `uid`, from the engine itself.
fn running_containers(uid: &str) -> Result<Vec<String>> {
    let out = Command::new("docker")
        .args([
            "ps",
            "--quiet",
            "--no-trunc",
            "--filter",
            &format!("label=io.kubernetes.pod.uid={uid}"),
            // App containers, not the pod's sandbox (a new sandbox would replace them too).
            "--filter",
            "label=io.kubernetes.docker.type=container",
        ])
        .output()
        .context("these tests need the docker CLI and a running engine (bash .ci/setup)")?;
    if !out.status.success() {
        bail!(
            "docker ps failed (is the engine running? bash .ci/setup starts it): {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let mut ids: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_owned)
        .collect();
    ids.sort();
    Ok(ids)
}

fn wait_containers(uid: &str, within: Duration, want: impl Fn(&[String]) -> bool) -> Vec<String> {
    let deadline = Instant::now() + within;
    loop {
        let ids = running_containers(uid).unwrap();
        if want(&ids) {
            return ids;
        }
        assert!(Instant::now() < deadline, "containers of {uid}: {ids:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn check_image() {
    for image in [IMAGE, wedge_tests::cloud_node::PAUSE_IMAGE] {
        let ok = Command::new("docker")
            .args(["image", "inspect", image])
            .output()
            .is_ok_and(|o| o.status.success());
        assert!(
            ok,
            "these tests need the image {image} in a running Docker engine (bash .ci/setup)"
        );
    }
}

/// The newest pod status the cloud received for pod `name` after `since`.
fn status_after(hub: &CloudHub, name: &str, since: Instant, want: &str) -> Value {
    status_where(hub, name, since, |p| p["status"]["phase"] == want)
}

/// Whether a podpatch says the pod runs with every container ready.
fn all_ready(patch: &Value) -> bool {
    patch["status"]["phase"] == "Running"
        && patch["status"]["containerStatuses"]
            .as_array()
            .is_some_and(|c| c.iter().all(|c| c["ready"] == true))
}

fn pod_insert(name: &str, uid: &str) -> Message {
    cloud_insert(&json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "uid": uid},
        "spec": {
            "nodeName": "edge-1",
            "containers": [{"name": "app", "image": IMAGE, "imagePullPolicy": "Never",
                            "command": ["sleep", "3600"]}]
        }
    }))
}

/// The cloud's insert of `pod` (in its namespace, `default` when it names none), as
/// edgecontroller sends it.
fn cloud_insert(pod: &Value) -> Message {
    let name = pod["metadata"]["name"].as_str().unwrap_or_default();
    let namespace = pod["metadata"]["namespace"].as_str().unwrap_or("default");
    let mut msg = Message::build(
        "edgecontroller",
        "resource",
        "insert",
        &format!("{namespace}/pod/{name}"),
        Content::json(pod).unwrap(),
    );
    msg.header.resource_version = "1".into();
    msg
}

/// The cloud's delete of pod `name` (`uid`).
fn pod_delete(name: &str, uid: &str) -> Message {
    let mut delete = Message::build(
        "edgecontroller",
        "resource",
        "delete",
        &format!("default/pod/{name}"),
        Content::json(&json!({"metadata": {"name": name, "namespace": "default", "uid": uid}}))
            .unwrap(),
    );
    delete.header.resource_version = "2".into();
    delete
}

fn unique(prefix: &str) -> String {
    format!("{prefix}-{}", &wedge_core::message::new_id()[..8])
}

#[test]
fn a_cloud_pod_runs_on_docker_reports_status_and_survives_an_offline_restart() {
    check_image();
    let mut hub = CloudHub::start(CloudHubOptions::default()).unwrap();
    let mut node = CloudNode::start_with_edged(&hub, "    messageQPS: 0\n").unwrap();
    hub.wait_connected(WAIT).unwrap();
    let (name, uid) = (unique("web"), unique("uid"));
    let start = Instant::now();
    hub.send_acked(pod_insert(&name, &uid)).unwrap();
    let patch = status_after(&hub, &name, start, "Running");
    assert_eq!(patch["metadata"]["uid"], uid.as_str());
    assert_eq!(patch["status"]["containerStatuses"][0]["ready"], true);
    let ids = wait_containers(&uid, WAIT, |ids| ids.len() == 1);
    the_read_only_port_gives_no_way_into_the_pod(&node, &name);

    // Restart with the cloud away: the pod comes back from SQLite, and is not recreated.
    hub.stop();
    node.daemon
        .stop(libc::SIGTERM, Duration::from_secs(10))
        .unwrap();
    node.restart().unwrap();
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(
        running_containers(&uid).unwrap(),
        ids,
        "the running container is kept"
    );

    // The cloud returns: statuses reach it again (the periodic report), same container.
    hub.restart().unwrap();
    let back = Instant::now();
    hub.wait_connected(WAIT).unwrap();
    status_after(&hub, &name, back, "Running");
    assert_eq!(
        running_containers(&uid).unwrap(),
        ids,
        "reconnecting recreates nothing"
    );

    // The cloud deletes the pod: its containers go.
    hub.send_acked(pod_delete(&name, &uid)).unwrap();
    wait_containers(&uid, WAIT + GRACE, <[String]>::is_empty);
    node.daemon
        .stop(libc::SIGTERM, Duration::from_secs(10))
        .unwrap();
}

/// One request to the node's read-only kubelet port (`127.0.0.1:10350`, no credentials), as
/// any local user can send it: the status code and the whole answer.
fn read_only_port(request: &str) -> (u16, String) {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", 10350)).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    stream.write_all(request.as_bytes()).unwrap();
    let mut answer = Vec::new();
    let _ = stream.read_to_end(&mut answer);
    let answer = String::from_utf8_lossy(&answer).into_owned();
    let code = answer
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    (code, answer)
}

/// The read-only port serves what a kubelet's does (health, figures) and refuses exec,
/// attach and logs, which reach edged only through the tunnel in the same process; idle
/// sockets beyond its cap cost their senders the idlest, never the port.
fn the_read_only_port_gives_no_way_into_the_pod(node: &CloudNode, pod: &str) {
    let upgrade = "Connection: Upgrade\r\nUpgrade: SPDY/3.1\r\n\
                   X-Stream-Protocol-Version: v4.channel.k8s.io\r\n";
    for (method, path, extra) in [
        (
            "POST",
            format!("/exec/default/{pod}/app?command=id&output=1"),
            upgrade,
        ),
        (
            "GET",
            format!("/exec/default/{pod}/app?command=id&output=1"),
            "",
        ),
        (
            "POST",
            format!("/attach/default/{pod}/app?output=1"),
            upgrade,
        ),
        ("GET", format!("/containerLogs/default/{pod}/app"), ""),
    ] {
        let (code, answer) = read_only_port(&format!(
            "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n{extra}Connection: close\r\n\r\n"
        ));
        assert_eq!(code, 403, "{method} {path}: {answer}");
        assert!(answer.contains("tunnel"), "{answer}");
    }
    let (code, answer) =
        read_only_port("GET /stats/summary HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    assert_eq!(code, 200, "{answer}");
    assert!(answer.contains(pod), "{answer}");

    // 70 sockets that never send a request (the cap is 64): health still answers at once.
    let idle: Vec<_> = (0..70)
        .map(|_| std::net::TcpStream::connect(("127.0.0.1", 10350)).unwrap())
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    let asked = Instant::now();
    let (code, answer) =
        read_only_port("GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    let took = asked.elapsed();
    assert_eq!(code, 200, "{answer}");
    assert!(took < Duration::from_secs(3), "healthz took {took:?}");
    drop(idle);
    let evicted = node
        .metric("wedge_edged_read_only_port_refused_total{reason=\"evicted\"}")
        .unwrap();
    assert!(evicted >= 7.0, "evicted {evicted}");
    let refused = node
        .metric("wedge_edged_read_only_port_refused_total{reason=\"route\"}")
        .unwrap();
    assert_eq!(refused, 4.0);
}

#[test]
fn a_pod_deleted_from_local_state_while_the_node_is_down_is_removed_at_start() {
    check_image();
    let hub = CloudHub::start(CloudHubOptions::default()).unwrap();
    let mut node = CloudNode::start_with_edged(&hub, "    messageQPS: 0\n").unwrap();
    hub.wait_connected(WAIT).unwrap();
    let (name, uid) = (unique("gone"), unique("uid"));
    hub.send_acked(pod_insert(&name, &uid)).unwrap();
    wait_containers(&uid, WAIT, |ids| ids.len() == 1);
    node.daemon
        .stop(libc::SIGTERM, Duration::from_secs(10))
        .unwrap();

    let db = rusqlite::Connection::open(node.data.join("edgecore.db")).unwrap();
    let removed = db
        .execute(
            "DELETE FROM meta WHERE key = ?1",
            [format!("default/pod/{name}")],
        )
        .unwrap();
    assert_eq!(removed, 1);
    drop(db);

    node.restart().unwrap();
    wait_containers(&uid, WAIT + GRACE, <[String]>::is_empty);
    node.daemon
        .stop(libc::SIGTERM, Duration::from_secs(10))
        .unwrap();
}

/// Answers `call` the way cloudcore's edgecontroller does: a `resource`-group response
/// carrying `{"Object": object, "Err": null}`, with the call's id as parent.
fn answer(hub: &CloudHub, call: &Message, object: Value) {
    let mut reply = call.response(Content::json(&json!({"Object": object, "Err": null})).unwrap());
    reply.route.source = "edgecontroller".into();
    reply.route.group = "resource".into();
    hub.send(reply).unwrap();
}

/// Waits for the node's remote call `op` on `resource` and answers it with the object it
/// carried.
fn answer_remote(hub: &CloudHub, op: &str, resource: &str) -> Message {
    let call = wait_call(hub, op, resource);
    let object: Value = serde_json::from_str(call.content.raw()).unwrap();
    answer(hub, &call, object);
    call
}

/// Waits for the node's call `op` on `resource`.
fn wait_call(hub: &CloudHub, op: &str, resource: &str) -> Message {
    hub.wait_for(
        |m| {
            m.message
                .as_ref()
                .is_some_and(|m| m.route.operation == op && m.route.resource == resource)
        },
        WAIT,
    )
    .unwrap()
    .message
    .unwrap()
}

#[test]
fn the_node_registers_reports_its_status_and_renews_its_lease() {
    check_image();
    let hub = CloudHub::start(CloudHubOptions::default()).unwrap();
    let mut node = CloudNode::start_with_edged(&hub, "    messageQPS: 0\n").unwrap();
    hub.wait_connected(WAIT).unwrap();

    let register = answer_remote(&hub, "insert", "null/node/edge-1");
    let object: Value = serde_json::from_str(register.content.raw()).unwrap();
    assert_eq!(object["kind"], "Node");
    let cpus = std::thread::available_parallelism()
        .unwrap()
        .get()
        .to_string();
    assert_eq!(object["status"]["capacity"]["cpu"], cpus.as_str());
    assert!(
        object["status"]["capacity"]["memory"]
            .as_str()
            .unwrap()
            .ends_with("Ki")
    );
    assert!(
        object["status"]["nodeInfo"]["containerRuntimeVersion"]
            .as_str()
            .unwrap()
            .starts_with("docker://")
    );

    // Then the lease as kubelet keeps it: read it; the cloud has none (CloudCore answers a
    // NotFound Status), so create it; renew what the cloud returned, resourceVersion included.
    let key = "kube-node-lease/lease/edge-1";
    let query = wait_call(&hub, "query", key);
    let mut missing = query.response(
        Content::json(&json!({"Object": null, "Err": {"ErrStatus": {
            "status": "Failure", "reason": "NotFound", "code": 404,
            "message": "leases.coordination.k8s.io \"edge-1\" not found"}}}))
        .unwrap(),
    );
    missing.route.source = "edgecontroller".into();
    missing.route.group = "resource".into();
    hub.send(missing).unwrap();
    let create = wait_call(&hub, "insert", key);
    let mut lease: Value = serde_json::from_str(create.content.raw()).unwrap();
    assert_eq!(lease["spec"]["holderIdentity"], "edge-1");
    assert_eq!(lease["spec"]["leaseDurationSeconds"], 40);
    lease["metadata"]["resourceVersion"] = json!("7");
    answer(&hub, &create, lease);
    let renewal = wait_call(&hub, "update", key);
    let renewed: Value = serde_json::from_str(renewal.content.raw()).unwrap();
    assert_eq!(renewed["metadata"]["resourceVersion"], "7", "{renewed}");
    let patch = hub
        .wait_for(
            |m| {
                m.message.as_ref().is_some_and(|m| {
                    m.route.operation == "patch" && m.route.resource == "null/nodepatch/edge-1"
                })
            },
            WAIT,
        )
        .unwrap()
        .message
        .unwrap();
    let patch: Value = serde_json::from_str(&patch.content.as_string().unwrap()).unwrap();
    let ready = patch["status"]["conditions"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["type"] == "Ready"))
        .cloned()
        .unwrap_or_default();
    assert_eq!(ready["status"], "True", "{patch}");
    node.daemon
        .stop(libc::SIGTERM, Duration::from_secs(10))
        .unwrap();
}

/// A Wasm pod runs one module from the node's store and brings another in a ConfigMap. The
/// module it brings is named like the operator's `threshold` but is deployed under the pod's
/// own name for it, so the operator's stays as it was, and deleting the pod removes only the
/// pod's. A pod of a namespace not in `wasmPodModuleNamespaces` cannot bring one at all.
#[test]
fn a_wasm_pod_runs_its_modules_in_the_wasm_host_and_reports_running() {
    use base64::Engine as _;
    let modules = tempfile::tempdir().unwrap();
    for module in ["virtual-thermometer", "threshold"] {
        std::fs::copy(
            wedge_tests::guests::module(module),
            modules.path().join(format!("{module}.wasm")),
        )
        .unwrap();
    }
    let threshold = wedge_tests::guests::module_bytes("threshold");
    let hub = CloudHub::start(CloudHubOptions::default()).unwrap();
    let mut node = CloudNode::start_with(
        &hub,
        wedge_tests::cloud_node::NodeOptions {
            edge_hub_extra: "    messageQPS: 0\n",
            edged: true,
            modules_dir: Some(modules.path()),
            wedge_extra: "  edged:\n    wasmPodModuleNamespaces: [default]\n",
            ..Default::default()
        },
    )
    .unwrap();
    hub.wait_connected(WAIT).unwrap();
    let module_names = || -> Vec<String> {
        let (code, body) = wedge_tests::http_get(node.admin_socket(), "/modules").unwrap();
        assert_eq!(code, 200, "{body}");
        let listed: Value = serde_json::from_str(&body).unwrap();
        listed
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|m| m["name"].as_str().map(str::to_owned))
            .collect()
    };
    assert_eq!(module_names(), ["threshold", "virtual-thermometer"]);

    // One container from the module store, one from a ConfigMap key the cloud serves.
    let (name, uid) = (unique("wasm"), unique("uid"));
    let pod = json!({
        "metadata": {"name": name, "namespace": "default", "uid": uid},
        "spec": {
            "nodeName": "edge-1",
            "runtimeClassName": "wedge-wasm",
            "containers": [
                {"name": "thermometer", "image": "wasm://virtual-thermometer"},
                {"name": "limit", "image": "configmap://modules/threshold.wasm"},
            ]
        }
    });
    let start = Instant::now();
    hub.send_acked(cloud_insert(&pod)).unwrap();
    let query = hub
        .wait_for(
            |m| {
                m.message.as_ref().is_some_and(|m| {
                    m.route.operation == "query" && m.route.resource == "default/configmap/modules"
                })
            },
            WAIT,
        )
        .unwrap()
        .message
        .unwrap();
    let configmap = json!({
        "metadata": {"name": "modules", "namespace": "default"},
        "binaryData": {"threshold.wasm": base64::engine::general_purpose::STANDARD.encode(&threshold)}
    });
    let mut reply =
        query.response(Content::json(&json!({"Object": configmap, "Err": null})).unwrap());
    reply.route.source = "edgecontroller".into();
    reply.route.group = "resource".into();
    hub.send(reply).unwrap();

    // A pod is Running once one container runs; the other may still be waiting for its module.
    let patch = status_where(&hub, &name, start, all_ready);
    let statuses = patch["status"]["containerStatuses"].as_array().unwrap();
    let ids: Vec<&str> = statuses
        .iter()
        .map(|s| s["containerID"].as_str().unwrap())
        .collect();
    let owned = format!("threshold.limit.{uid}");
    assert_eq!(
        ids,
        [
            "wasm://virtual-thermometer".to_owned(),
            format!("wasm://{owned}")
        ],
        "{patch}"
    );
    assert!(statuses.iter().all(|s| s["ready"] == true), "{patch}");
    assert!(
        running_containers(&uid).unwrap().is_empty(),
        "nothing ran on Docker"
    );
    assert_eq!(
        module_names(),
        [
            "threshold".to_owned(),
            owned.clone(),
            "virtual-thermometer".to_owned()
        ]
    );

    // A tenant's pod (namespace not listed) cannot bring a module: a clear waiting reason,
    // and its ConfigMap is never even fetched.
    let (tenant, tenant_uid) = (unique("tenant-wasm"), unique("uid"));
    let sent = Instant::now();
    hub.send_acked(cloud_insert(&json!({
        "metadata": {"name": tenant, "namespace": "tenant", "uid": tenant_uid},
        "spec": {
            "nodeName": "edge-1",
            "runtimeClassName": "wedge-wasm",
            "containers": [{"name": "limit", "image": "configmap://modules/threshold.wasm"}]
        }
    })))
    .unwrap();
    let resource = format!("tenant/podpatch/{tenant}");
    let refused = hub
        .wait_for(
            |m| {
                m.at > sent
                    && m.message.as_ref().is_some_and(|m| {
                        m.route.resource == resource
                            && m.content.as_string().is_some_and(|t| {
                                t.contains("CreateContainerConfigError")
                                    && t.contains("wedge.edged.wasmPodModuleNamespaces")
                            })
                    })
            },
            WAIT,
        )
        .is_ok();
    assert!(refused, "the tenant's pod was not refused with its reason");
    assert!(
        !hub.received()
            .iter()
            .any(|m| m.message.as_ref().is_some_and(|m| {
                m.route.operation == "query" && m.route.resource == "tenant/configmap/modules"
            })),
        "the tenant's ConfigMap was fetched"
    );

    // Deleting the pod removes the module it brought; the store's modules stay.
    hub.send_acked(pod_delete(&name, &uid)).unwrap();
    let deadline = Instant::now() + WAIT;
    loop {
        let names = module_names();
        if !names.contains(&owned) {
            assert_eq!(names, ["threshold", "virtual-thermometer"]);
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{owned} still deployed: {names:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    node.daemon
        .stop(libc::SIGTERM, Duration::from_secs(10))
        .unwrap();
}

/// The newest status the cloud received for pod `name` after `since` that `want` accepts.
fn status_where(
    hub: &CloudHub,
    name: &str,
    since: Instant,
    want: impl Fn(&Value) -> bool,
) -> Value {
    let resource = format!("default/podpatch/{name}");
    let parse = |m: &Message| {
        (m.route.resource == resource && m.route.operation == "patch")
            .then(|| serde_json::from_str::<Value>(&m.content.as_string()?).ok())
            .flatten()
    };
    let found = hub
        .wait_for(
            |m| m.at > since && m.message.as_ref().and_then(parse).is_some_and(|p| want(&p)),
            WAIT,
        )
        .unwrap();
    parse(&found.message.unwrap()).unwrap()
}

#[test]
fn a_wasm_pod_runs_a_module_from_an_https_url_pinned_by_sha256() {
    use sha2::Digest as _;
    let threshold = wedge_tests::guests::module_bytes("threshold");
    let sha: String = sha2::Sha256::digest(&threshold)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let hub = CloudHub::start(CloudHubOptions::default()).unwrap();
    // The module server's certificate comes from the simulator's CA, trusted through
    // wedge.edged.moduleCaFile (it is in no system store).
    let files = wedge_tests::https_files::HttpsFiles::start(
        hub.ca(),
        vec![("/threshold.wasm".into(), threshold.clone())],
    )
    .unwrap();
    let ca = tempfile::tempdir().unwrap();
    let ca_file = ca.path().join("modules-ca.pem");
    std::fs::write(&ca_file, hub.ca().ca_pem()).unwrap();
    let wedge_extra = format!(
        "  edged:\n    moduleCaFile: {}\n    wasmPodModuleNamespaces: [default]\n",
        ca_file.display()
    );
    let mut node = CloudNode::start_with(
        &hub,
        wedge_tests::cloud_node::NodeOptions {
            edge_hub_extra: "    messageQPS: 0\n",
            edged: true,
            wedge_extra: &wedge_extra,
            ..Default::default()
        },
    )
    .unwrap();
    hub.wait_connected(WAIT).unwrap();

    // No runtimeClassName: an https:// image alone makes it a Wasm pod.
    let wasm_pod = |name: &str, uid: &str, image: &str| {
        cloud_insert(&json!({
            "metadata": {"name": name, "namespace": "default", "uid": uid},
            "spec": {"nodeName": "edge-1", "containers": [{"name": "limit", "image": image}]}
        }))
    };
    let url = files.url("/threshold.wasm");
    let (good, good_uid) = (unique("https"), unique("uid"));
    let start = Instant::now();
    hub.send_acked(wasm_pod(&good, &good_uid, &format!("{url}@sha256:{sha}")))
        .unwrap();
    let patch = status_after(&hub, &good, start, "Running");
    let status = &patch["status"]["containerStatuses"][0];
    // Deployed under the pod's own name for it: <manifest>.<container>.<pod uid>.
    let module = format!("threshold.limit.{good_uid}");
    assert_eq!(status["containerID"], format!("wasm://{module}"), "{patch}");
    assert_eq!(status["imageID"], format!("sha256:{sha}"), "{patch}");
    assert_eq!(status["ready"], true, "{patch}");
    // Kept by digest in the default cache, <rootDirectory>/wasm-modules.
    let cached = node.data.parent().unwrap().join("kubelet/wasm-modules");
    assert_eq!(
        std::fs::read(cached.join(format!("{sha}.wasm"))).unwrap(),
        threshold
    );

    // The same URL pinned to another digest: refused, naming both; the good pod runs on.
    let wrong = "0".repeat(64);
    let (bad, bad_uid) = (unique("https-bad"), unique("uid"));
    let sent = Instant::now();
    hub.send_acked(wasm_pod(&bad, &bad_uid, &format!("{url}@sha256:{wrong}")))
        .unwrap();
    let patch = status_where(&hub, &bad, sent, |p| {
        p["status"]["containerStatuses"][0]["state"]["waiting"]["reason"] == "ErrImagePull"
    });
    let message = patch["status"]["containerStatuses"][0]["state"]["waiting"]["message"]
        .as_str()
        .unwrap_or_default();
    assert!(message.contains(&format!("sha256:{wrong}")), "{patch}");
    assert!(message.contains(&format!("sha256:{sha}")), "{patch}");
    assert_ne!(patch["status"]["phase"], "Running", "{patch}");
    let (code, body) = wedge_tests::http_get(node.admin_socket(), "/modules").unwrap();
    assert_eq!(code, 200);
    let modules: Value = serde_json::from_str(&body).unwrap();
    let threshold_state = modules
        .as_array()
        .and_then(|m| m.iter().find(|m| m["name"] == module.as_str()))
        .map(|m| m["state"].clone());
    assert_eq!(threshold_state, Some(json!("running")), "{body}");
    let reports = hub.received();
    let good_since = reports.iter().filter(|m| {
        m.at > sent
            && m.message
                .as_ref()
                .is_some_and(|m| m.route.resource == format!("default/podpatch/{good}"))
    });
    for report in good_since {
        let text = report
            .message
            .as_ref()
            .unwrap()
            .content
            .as_string()
            .unwrap();
        let patch: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(patch["status"]["phase"], "Running", "{text}");
    }
    // One download: the failure of the wrong pin is not retried on every relist.
    assert_eq!(files.requests(), 2, "one GET per pin");
    node.daemon
        .stop(libc::SIGTERM, Duration::from_secs(10))
        .unwrap();
}
