//! Garbage collection against the real Docker engine: dead containers beyond the limits are
//! removed oldest first, and an unused image is removed when the (simulated) disk usage crosses
//! the high threshold, while images in use stay.
//!
//! Needs a running engine and the `wedge-test/busybox:1` image, both set up by `.ci/setup`;
//! without them the tests fail and say so. Each test owns a node name of its own; the image
//! test keeps a container on every image it did not make, so that a pass can only ever remove
//! the test's own image, whatever else is on the engine.

mod common;

use std::collections::HashMap;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{IMAGE, WAIT, engine, unique};
use wedge_edged::disk::{DiskSource, SimulatedDisk};
use wedge_edged::engine::{ContainerPlan, Engine, labels};
use wedge_edged::gc::{ContainerGcPolicy, FsUsage, ImageGcPolicy};
use wedge_edged::gc_pass::{ImageGc, collect_containers};

/// A plan for container `name` of pod `uid` on `node`, attempt `restart`, running `script`.
fn plan(node: &str, uid: &str, name: &str, restart: u32, script: &str) -> ContainerPlan {
    let labels = HashMap::from([
        (labels::MANAGED.to_owned(), "true".to_owned()),
        (labels::NODE.to_owned(), node.to_owned()),
        (labels::POD_NAMESPACE.to_owned(), "default".to_owned()),
        (labels::POD_NAME.to_owned(), format!("pod-{uid}")),
        (labels::POD_UID.to_owned(), uid.to_owned()),
        (labels::CONTAINER_NAME.to_owned(), name.to_owned()),
        (labels::CONTAINER_HASH.to_owned(), "h".to_owned()),
        (labels::RESTART_COUNT.to_owned(), restart.to_string()),
    ]);
    ContainerPlan {
        name: format!("{node}-{uid}-{name}-{restart}"),
        image: IMAGE.to_owned(),
        entrypoint: Some(vec!["sh".into(), "-c".into(), script.into()]),
        cmd: None,
        env: Vec::new(),
        working_dir: None,
        labels,
        memory: None,
        nano_cpus: None,
        binds: Vec::new(),
        network_mode: None,
        published: Vec::new(),
        hostname: None,
        security: Default::default(),
        dns: Default::default(),
    }
}

/// Creates and starts a container; with `exits`, waits until it has exited.
async fn run(engine: &Engine, plan: &ContainerPlan, exits: bool) -> String {
    let id = engine.create(plan).await.unwrap();
    engine.start(&id).await.unwrap();
    let deadline = Instant::now() + WAIT;
    while exits && engine.inspect(&id).await.unwrap().unwrap().running {
        assert!(Instant::now() < deadline, "{} did not exit", plan.name);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    id
}

async fn ids(engine: &Engine, node: &str) -> Vec<String> {
    let mut ids: Vec<String> = engine
        .list(node)
        .await
        .unwrap()
        .into_iter()
        .map(|c| c.id)
        .collect();
    ids.sort();
    ids
}

#[tokio::test]
async fn dead_containers_beyond_the_limits_are_removed_oldest_first() {
    let engine = engine().await;
    let node = unique("gcnode");
    // Pod `a` crash-looped three times and has a running sidecar; pod `gone` is no longer
    // desired and left a dead container.
    let mut a_app = Vec::new();
    for restart in 0..3 {
        a_app.push(run(&engine, &plan(&node, "a", "app", restart, "exit 1"), true).await);
    }
    let side = run(&engine, &plan(&node, "a", "side", 0, "sleep 3600"), false).await;
    let gone = run(&engine, &plan(&node, "gone", "app", 0, "exit 0"), true).await;
    let desired = |uid: &str| uid == "a" || uid == "b";

    let policy = ContainerGcPolicy::default();
    assert_eq!(policy.max_per_pod_container, 1, "KubeEdge's default");
    let removed = collect_containers(&engine, &node, &policy, desired)
        .await
        .unwrap();
    assert_eq!(removed, [gone, a_app[0].clone(), a_app[1].clone()]);
    let mut left = vec![a_app[2].clone(), side.clone()];
    left.sort();
    assert_eq!(
        ids(&engine, &node).await,
        left,
        "the newest dead one and the running one stay"
    );
    // A second pass finds nothing more to do.
    let removed = collect_containers(&engine, &node, &policy, desired)
        .await
        .unwrap();
    assert!(removed.is_empty(), "{removed:?}");

    // Node-wide limit of 1 dead container, no per-pod limit: pod `b` has two dead ones. The
    // units are evened out to one each (b's older one goes); the newest of each desired
    // container stays even though two dead ones remain.
    let b0 = run(&engine, &plan(&node, "b", "job", 0, "exit 0"), true).await;
    let b1 = run(&engine, &plan(&node, "b", "job", 1, "exit 0"), true).await;
    let policy = ContainerGcPolicy {
        min_age: Duration::ZERO,
        max_per_pod_container: -1,
        max_containers: 1,
    };
    let removed = collect_containers(&engine, &node, &policy, desired)
        .await
        .unwrap();
    assert_eq!(removed, [b0]);
    let mut left = vec![a_app[2].clone(), side, b1];
    left.sort();
    assert_eq!(ids(&engine, &node).await, left);

    // With a minimum age no dead container is young enough to go.
    let policy = ContainerGcPolicy {
        min_age: Duration::from_secs(3600),
        max_per_pod_container: 0,
        max_containers: 0,
    };
    let removed = collect_containers(&engine, &node, &policy, |_| false)
        .await
        .unwrap();
    assert!(removed.is_empty(), "{removed:?}");

    for id in ids(&engine, &node).await {
        engine.remove(&id).await.unwrap();
    }
}

/// Builds a throw-away image of its own id (a tag would share busybox's id, so removing it
/// would only untag) from the test image.
fn build_image(reference: &str) {
    let mut child = Command::new("docker")
        .args(["build", "-q", "-t", reference, "--label"])
        .arg(format!("wedge.gc={reference}"))
        .arg("-")
        .env("DOCKER_BUILDKIT", "0")
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the docker CLI builds the test's images");
    use std::io::Write;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(format!("FROM {IMAGE}\n").as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "docker build {reference}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A container that is never started: it keeps `image` in use.
async fn hold(engine: &Engine, image: &str, name: String) -> String {
    let mut plan = plan("holder", "none", "hold", 0, "true");
    plan.name = name;
    plan.image = image.to_owned();
    plan.labels.clear();
    engine.create(&plan).await.unwrap()
}

fn usage(used_percent: u64) -> FsUsage {
    FsUsage {
        capacity: 1000,
        available: 1000 - used_percent * 10,
    }
}

#[tokio::test]
async fn an_unused_image_is_removed_above_the_high_threshold_and_one_in_use_is_kept() {
    let engine = engine().await;
    let tag = unique("t");
    // Every image already here is held by a container of this test: the pass can only
    // remove what the test makes (busybox is among them).
    let mut holders = Vec::new();
    for (i, image) in engine.list_images().await.unwrap().iter().enumerate() {
        holders.push(hold(&engine, &image.id, format!("gc-hold-{tag}-{i}")).await);
    }
    let free = format!("wedge-test/gc-free-{tag}:1");
    let used = format!("wedge-test/gc-used-{tag}:1");
    build_image(&free);
    build_image(&used);
    holders.push(hold(&engine, &used, format!("gc-hold-{tag}-used")).await);
    let id_of = |reference: &str| {
        let engine = engine.clone();
        let reference = reference.to_owned();
        async move {
            engine
                .docker()
                .expect("a Docker engine")
                .inspect_image(&reference)
                .await
                .ok()
                .and_then(|i| i.id)
        }
    };
    let free_id = id_of(&free).await.expect("built");
    let used_id = id_of(&used).await.expect("built");

    let disk = SimulatedDisk::new(usage(50));
    let policy = ImageGcPolicy::default();
    assert_eq!(
        (policy.high_threshold, policy.low_threshold),
        (85, 80),
        "KubeEdge's defaults since v1.16"
    );
    assert_eq!(policy.min_age, Duration::from_secs(120));
    let mut gc = ImageGc::new(policy, DiskSource::Simulated(disk.clone()));
    let t0 = Instant::now();

    // Below the threshold: nothing.
    let report = gc.collect(&engine, t0).await.unwrap();
    assert_eq!(report.plan.used_percent, 50);
    assert!(report.removed.is_empty(), "{report:?}");

    // Above it, but the image was first seen a minute ago: too young.
    disk.set(usage(90));
    let report = gc
        .collect(&engine, t0 + Duration::from_secs(60))
        .await
        .unwrap();
    assert_eq!(report.plan.to_free, 100);
    assert!(report.removed.is_empty(), "{report:?}");

    // Old enough now: the unused image goes, the one in use stays.
    let report = gc
        .collect(&engine, t0 + Duration::from_secs(121))
        .await
        .unwrap();
    assert_eq!(report.removed, std::slice::from_ref(&free_id), "{report:?}");
    assert_eq!(id_of(&free).await, None, "{free} is gone");
    assert_eq!(
        id_of(&used).await,
        Some(used_id.clone()),
        "{used} is in use"
    );
    assert!(id_of(IMAGE).await.is_some());

    // Nothing else is eligible: the pass says how short it fell, and removes nothing.
    let report = gc
        .collect(&engine, t0 + Duration::from_secs(122))
        .await
        .unwrap();
    assert!(report.removed.is_empty(), "{report:?}");
    assert_eq!(report.plan.freed, 0);

    // The eviction manager's reclaim under disk pressure: every unused image old enough
    // goes, whatever image GC's own thresholds say (the disk is at 50 % here); one in use
    // and one too young stay.
    disk.set(usage(50));
    let spare = format!("wedge-test/gc-spare-{tag}:1");
    build_image(&spare);
    assert_eq!(
        gc.collect_unused(&engine, t0 + Duration::from_secs(200))
            .await
            .unwrap(),
        0,
        "first seen now: too young"
    );
    let freed = gc
        .collect_unused(&engine, t0 + Duration::from_secs(321))
        .await
        .unwrap();
    assert!(freed > 0, "{spare} counted");
    assert_eq!(id_of(&spare).await, None, "{spare} is gone");
    assert_eq!(id_of(&used).await, Some(used_id), "{used} is in use");

    for id in holders {
        engine.remove(&id).await.unwrap();
    }
    let leftover = Command::new("docker")
        .args(["rmi", &used])
        .output()
        .unwrap();
    assert!(leftover.status.success(), "{leftover:?}");
}
