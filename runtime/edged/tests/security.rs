//! `securityContext` and `imagePullSecrets` on a real engine: edged on the real bus, the test
//! playing metamanager, and what the containers see from inside checked through files they
//! write into an emptyDir. The pull-secret test runs a real registry (Debian's
//! `docker-registry`, htpasswd authentication).
//!
//! Needs a running engine and the test images (`bash .ci/setup`), and for the registry test
//! the `docker-registry` and `apache2-utils` packages; without them the tests fail and say so.

mod common;
#[path = "security/node.rs"]
mod node;
#[path = "security/registry.rs"]
mod registry;

use std::os::unix::fs::{MetadataExt, PermissionsExt};

use base64::Engine as _;
use common::unique;
use node::{Node, container, pod, running, sh, uid};
use serde_json::{Value, json};

/// Mounts emptyDir `data` at `/data` in every container of `pod`, init containers included.
fn with_data(mut pod: Value) -> Value {
    pod["spec"]["volumes"] = json!([{"name": "data", "emptyDir": {}}]);
    for list in ["initContainers", "containers"] {
        // `get_mut`: indexing would add a `null` list, which is no pod spec.
        let containers = pod["spec"].get_mut(list).and_then(Value::as_array_mut);
        for c in containers.into_iter().flatten() {
            c["volumeMounts"] = json!([{"name": "data", "mountPath": "/data"}]);
        }
    }
    pod
}

#[tokio::test]
async fn run_as_user_and_group_are_seen_inside_and_fs_group_makes_the_empty_dir_writable() {
    let (ids, denied) = (unique("ids"), unique("nofsgroup"));
    let mut with_ids = with_data(pod(
        &ids,
        json!({
            "securityContext": {"runAsUser": 1000, "runAsGroup": 3000, "fsGroup": 2000, "supplementalGroups": [4000]},
            "initContainers": [sh("init", "busybox id -u > /data/init-uid")],
            "containers": [
                sh("pod-level", "busybox id -u > /data/uid; busybox id -g > /data/gid; busybox id -G > /data/groups; sleep 3600"),
                sh("own", "busybox id -u > /data/own-uid; busybox id -g > /data/own-gid; sleep 3600"),
            ],
        }),
    ));
    with_ids["spec"]["containers"][1]["securityContext"] =
        json!({"runAsUser": 1001, "runAsGroup": 1002});
    // The same non-root user without fsGroup: the emptyDir is world-writable (as kubelet makes
    // it), but nothing in it is given to a group.
    let without = with_data(pod(
        &denied,
        json!({
            "restartPolicy": "Never",
            "securityContext": {"runAsUser": 1000},
            "containers": [sh("app", "echo x > /data/f")],
        }),
    ));
    let mut node = Node::start().await;
    node.insert(&with_ids).await;
    node.insert(&without).await;
    node.wait_status(&ids, |s| running(s, 2)).await;
    let data = node.empty_dir(&with_ids, "data");
    assert_eq!(
        node.wait_file(&data.join("groups")).await.trim(),
        "3000 2000 4000"
    );
    assert_eq!(node.wait_file(&data.join("uid")).await.trim(), "1000");
    assert_eq!(node.wait_file(&data.join("gid")).await.trim(), "3000");
    assert_eq!(node.wait_file(&data.join("own-gid")).await.trim(), "1002");
    assert_eq!(node.wait_file(&data.join("own-uid")).await.trim(), "1001");
    // Init containers are containers too.
    assert_eq!(node.wait_file(&data.join("init-uid")).await.trim(), "1000");
    // fsGroup owns the directory, setgid: what the containers write is the group's.
    let dir = std::fs::metadata(&data).unwrap();
    assert_eq!(dir.gid(), 2000);
    assert_eq!(
        dir.permissions().mode() & 0o2070,
        0o2070,
        "{:o}",
        dir.mode()
    );
    assert_eq!(std::fs::metadata(data.join("uid")).unwrap().gid(), 2000);
    assert_eq!(std::fs::metadata(data.join("uid")).unwrap().uid(), 1000);

    let status = node
        .wait_status(&denied, |s| s["phase"] == "Succeeded")
        .await;
    assert_eq!(
        container(&status, "app")["state"]["terminated"]["exitCode"],
        0,
        "{status}"
    );
    let plain = node.empty_dir(&without, "data");
    let dir = std::fs::metadata(&plain).unwrap();
    assert_eq!((dir.gid(), dir.permissions().mode() & 0o7777), (0, 0o777));
    let written = std::fs::metadata(plain.join("f")).unwrap();
    assert_eq!((written.uid(), written.gid()), (1000, 0));
    node.stop().await;
}

#[tokio::test]
async fn a_read_only_root_filesystem_keeps_the_empty_dir_writable() {
    let name = unique("readonly");
    let mut p = with_data(pod(
        &name,
        json!({"containers": [sh(
            "app",
            "if busybox touch /x 2>/dev/null; then echo writable > /data/root; else echo read-only > /data/root; fi; echo ok > /data/volume; sleep 3600",
        )]}),
    ));
    p["spec"]["containers"][0]["securityContext"] = json!({"readOnlyRootFilesystem": true});
    let mut node = Node::start().await;
    node.insert(&p).await;
    node.wait_status(&name, |s| running(s, 1)).await;
    let data = node.empty_dir(&p, "data");
    assert_eq!(node.wait_file(&data.join("volume")).await.trim(), "ok");
    assert_eq!(node.wait_file(&data.join("root")).await.trim(), "read-only");
    node.stop().await;
}

/// The effective capability set in a `/proc/self/status` excerpt.
fn cap_eff(status: &str) -> u64 {
    status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())
        .unwrap_or_else(|| panic!("no CapEff in {status:?}"))
}

#[tokio::test]
async fn dropped_capabilities_are_gone_added_ones_there_and_escalation_and_seccomp_follow() {
    let name = unique("caps");
    let script = |out: &str| {
        format!(
            "busybox touch /tmp/f; if busybox chown 1:1 /tmp/f 2>/dev/null; then echo allowed > /data/{out}-chown; \
             else echo denied > /data/{out}-chown; fi; busybox grep -E 'CapEff|NoNewPrivs|Seccomp:' /proc/self/status > /data/{out}-status; sleep 3600"
        )
    };
    let mut p = with_data(pod(
        &name,
        json!({
            "securityContext": {"seccompProfile": {"type": "Unconfined"}},
            "containers": [sh("limited", &script("limited")), sh("control", &script("control"))],
        }),
    ));
    p["spec"]["containers"][1]["securityContext"] =
        json!({"seccompProfile": {"type": "RuntimeDefault"}});
    p["spec"]["containers"][0]["securityContext"] = json!({
        "capabilities": {"drop": ["CHOWN"], "add": ["NET_ADMIN"]},
        "allowPrivilegeEscalation": false,
    });
    let mut node = Node::start().await;
    node.insert(&p).await;
    node.wait_status(&name, |s| running(s, 2)).await;
    let data = node.empty_dir(&p, "data");
    let (chown, net_admin) = (1u64 << 0, 1u64 << 12);
    let limited = node.wait_file(&data.join("limited-status")).await;
    assert_eq!(cap_eff(&limited) & chown, 0, "{limited}");
    assert_eq!(cap_eff(&limited) & net_admin, net_admin, "{limited}");
    assert!(limited.contains("NoNewPrivs:\t1"), "{limited}");
    // The pod's Unconfined seccomp profile: no filter (mode 0).
    assert!(limited.contains("Seccomp:\t0"), "{limited}");
    assert_eq!(
        node.wait_file(&data.join("limited-chown")).await.trim(),
        "denied"
    );
    // Docker's defaults, unchanged, in the other container.
    let control = node.wait_file(&data.join("control-status")).await;
    assert_eq!(cap_eff(&control) & (chown | net_admin), chown, "{control}");
    assert!(control.contains("NoNewPrivs:\t0"), "{control}");
    // Its own RuntimeDefault overrides the pod's: Docker's filter (mode 2).
    assert!(control.contains("Seccomp:\t2"), "{control}");
    assert_eq!(
        node.wait_file(&data.join("control-chown")).await.trim(),
        "allowed"
    );
    node.stop().await;
}

#[tokio::test]
async fn run_as_non_root_with_a_root_image_waits_with_kubelets_message() {
    let name = unique("nonroot");
    let mut p = pod(
        &name,
        json!({
            "securityContext": {"runAsNonRoot": true},
            "containers": [sh("root", "sleep 3600"), sh("user", "sleep 3600")],
        }),
    );
    p["spec"]["containers"][1]["securityContext"] = json!({"runAsUser": 1000});
    let mut node = Node::start().await;
    node.insert(&p).await;
    let status = node
        .wait_status(&name, |s| {
            container(s, "root")["state"]["waiting"]["reason"] == "CreateContainerConfigError"
                && container(s, "user")["state"]["running"].is_object()
        })
        .await;
    assert_eq!(
        container(&status, "root")["state"]["waiting"]["message"],
        format!(
            "container has runAsNonRoot and image will run as root (pod: \"{name}_default({})\", container: root)",
            uid(&p)
        ),
        "{status}"
    );
    let created: Vec<String> = node
        .containers(uid(&p))
        .await
        .into_iter()
        .filter(|c| !c.sandbox)
        .map(|c| c.container)
        .collect();
    assert_eq!(created, ["user"], "the refused container is never created");
    node.stop().await;
}

#[tokio::test]
async fn a_refused_field_is_named_in_the_status_and_nothing_starts() {
    let name = unique("selinux");
    let mut p = pod(&name, json!({"containers": [sh("app", "sleep 3600")]}));
    p["spec"]["containers"][0]["securityContext"] = json!({"seLinuxOptions": {"type": "spc_t"}});
    let mut node = Node::start().await;
    node.insert(&p).await;
    let status = node.wait_status(&name, |s| s["reason"].is_string()).await;
    assert_eq!(status["reason"], "InvalidPodSpec");
    assert!(
        status["message"]
            .as_str()
            .unwrap_or_default()
            .starts_with("spec.containers[0].securityContext.seLinuxOptions: "),
        "{status}"
    );
    node.serve_for(std::time::Duration::from_millis(500)).await;
    assert!(node.containers(uid(&p)).await.is_empty());
    node.stop().await;
}

#[tokio::test]
async fn net_sysctls_are_set_on_the_sandbox_and_seen_by_its_containers() {
    let name = unique("sysctl");
    let p = with_data(pod(
        &name,
        json!({
            "securityContext": {"sysctls": [
                {"name": "net.ipv4.ip_unprivileged_port_start", "value": "80"},
                {"name": "kernel.shm_rmid_forced", "value": "1"},
            ]},
            "containers": [sh("app", "cat /proc/sys/net/ipv4/ip_unprivileged_port_start > /data/net; cat /proc/sys/kernel/shm_rmid_forced > /data/kernel; sleep 3600")],
        }),
    ));
    let mut node = Node::start().await;
    node.insert(&p).await;
    node.wait_status(&name, |s| running(s, 1)).await;
    let data = node.empty_dir(&p, "data");
    assert_eq!(node.wait_file(&data.join("net")).await.trim(), "80");
    assert_eq!(node.wait_file(&data.join("kernel")).await.trim(), "1");
    // Where the engine holds them: net.* on the sandbox, the others on the container.
    for c in node.containers(uid(&p)).await {
        let inspected = node
            .engine
            .docker()
            .expect("a Docker engine")
            .inspect_container(&c.id, None)
            .await
            .unwrap();
        let sysctls = inspected
            .host_config
            .and_then(|h| h.sysctls)
            .unwrap_or_default();
        let mut names: Vec<&str> = sysctls.keys().map(String::as_str).collect();
        names.sort_unstable();
        let expected = if c.sandbox {
            ["net.ipv4.ip_unprivileged_port_start"]
        } else {
            ["kernel.shm_rmid_forced"]
        };
        assert_eq!(names, expected, "{}", c.container);
    }
    node.stop().await;
}

/// A `kubernetes.io/dockerconfigjson` Secret named `name` for `registry` with `auth`.
fn pull_secret(name: &str, registry: &str, user: &str, password: &str) -> Value {
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    let config = json!({"auths": {registry: {"auth": b64(&format!("{user}:{password}"))}}});
    json!({
        "metadata": {"name": name, "namespace": "default"},
        "type": "kubernetes.io/dockerconfigjson",
        "data": {".dockerconfigjson": b64(&config.to_string())},
    })
}

#[tokio::test]
async fn image_pull_secrets_authenticate_against_a_real_registry() {
    const USER: &str = "wedge";
    const PASSWORD: &str = "s3cret-pull-pw";
    const WRONG: &str = "not-the-pw";
    let mut registry = registry::Registry::start(USER, PASSWORD).await;
    let engine = common::engine().await;
    let image = registry
        .push(
            engine.docker().expect("a Docker engine"),
            common::IMAGE,
            "wedge/busybox",
            "auth",
            registry.credentials(USER, PASSWORD),
        )
        .await;
    assert!(
        engine
            .docker()
            .expect("a Docker engine")
            .inspect_image(&image)
            .await
            .is_err(),
        "only a pull may bring {image} back"
    );
    let app = json!([{"name": "app", "image": image, "imagePullPolicy": "Always", "command": ["sh", "-c", "sleep 3600"]}]);
    let (anonymous, missing, wrong, authed) = (
        unique("anon"),
        unique("missing"),
        unique("wrong"),
        unique("authed"),
    );
    let mut node = Node::start().await;
    node.objects.insert(
        "default/secret/regcred".into(),
        pull_secret("regcred", &registry.address, USER, PASSWORD),
    );
    // The scheme form of the key, with the wrong password.
    node.objects.insert(
        "default/secret/badcred".into(),
        pull_secret(
            "badcred",
            &format!("http://{}", registry.address),
            USER,
            WRONG,
        ),
    );
    node.insert(&pod(&anonymous, json!({"containers": app})))
        .await;
    node.insert(&pod(
        &missing,
        json!({"containers": app, "imagePullSecrets": [{"name": "absent"}]}),
    ))
    .await;
    node.insert(&pod(
        &wrong,
        json!({"containers": app, "imagePullSecrets": [{"name": "badcred"}]}),
    ))
    .await;
    for name in [&anonymous, &missing, &wrong] {
        let status = node
            .wait_status(name, |s| {
                container(s, "app")["state"]["waiting"]["reason"] == "ErrImagePull"
            })
            .await;
        let message = container(&status, "app")["state"]["waiting"]["message"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        assert!(message.contains(&image), "{name}: {message}");
        assert!(
            !message.contains(PASSWORD) && !message.contains(WRONG),
            "{name}: {message}"
        );
    }
    // The right secret (after an unrelated missing one, which is skipped) pulls the image.
    node.insert(&pod(
        &authed,
        json!({"containers": app, "imagePullSecrets": [{"name": "absent"}, {"name": "regcred"}]}),
    ))
    .await;
    node.wait_status(&authed, |s| running(s, 1)).await;
    assert!(
        engine
            .docker()
            .expect("a Docker engine")
            .inspect_image(&image)
            .await
            .is_ok()
    );
    node.stop().await;
    drop(registry);
}
