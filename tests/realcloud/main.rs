//! The conformance suite: a real KubeEdge cloud (etcd, kube-apiserver, CloudCore v1.23.1 from
//! `../shared/realcloud`), a `wedge run` node joined with a real join token, and checks that
//! drive it through the Kubernetes API the way an operator does and expect what KubeEdge's own
//! edgecore v1.23.1 does on the same cloud.
//!
//! One cloud serves every check (it takes half a minute to start), so this is a harness of its
//! own (`harness = false`): checks run in order, a failure is reported and the rest still run,
//! the cloud is stopped at the end, and the last line is `realcloud: N passed, M failed`.
//! `cargo test --test realcloud -- <filter>` runs the checks whose name contains `<filter>`.

mod checks;
mod cluster;
mod device;
mod dmi;
mod hold;
mod join;
mod keadm;
mod lease;
mod metaserver;
mod pods;
mod router;

use std::process::ExitCode;
use std::time::Instant;

use anyhow::Result;
use wedge_tests::realcloud::{RealCloud, RealNode, RealNodeOptions};
use wedge_tests::tally::Tally;

/// What every check gets: the cloud and the joined node.
pub struct Bed {
    /// The real cloud.
    pub cloud: RealCloud,
    /// The Wedge node joined to it.
    pub node: RealNode,
    /// The node's servicebus port (`modules.serviceBus.port`).
    pub servicebus_port: u16,
    /// The node's MetaServer port (`modules.metaManager.metaServer.server`).
    pub metaserver_port: u16,
}

/// One check: it gets the test bed and says what went wrong.
pub type Check = Box<dyn FnOnce(&mut Bed) -> Result<()>>;

fn main() -> ExitCode {
    let filter: Option<String> = std::env::args().skip(1).find(|a| !a.starts_with('-'));
    let wanted = |name: &str| filter.as_deref().is_none_or(|f| name.contains(f));
    let started = Instant::now();
    let mut bed = match setup() {
        Ok(bed) => bed,
        Err(e) => {
            eprintln!("realcloud: the test bed did not come up: {e:#}");
            println!("realcloud: 0 passed, 1 failed");
            return ExitCode::FAILURE;
        }
    };
    println!(
        "realcloud: cloud up and node {} joined in {:.1?}",
        bed.node.name,
        started.elapsed()
    );
    // The lease is watched while the other checks run, and judged after them, before the
    // outage (an outage stops renewals by design).
    let lease_watch = lease::watch(&bed);
    let checks: Vec<(&str, Check)> = vec![
        (
            "node_is_ready_with_a_kubelets_status",
            Box::new(checks::node_is_ready_with_a_kubelets_status),
        ),
        (
            "join_writes_a_certificate_and_refuses_another_clouds_token",
            Box::new(join::join_writes_a_certificate_and_refuses_another_clouds_token),
        ),
        (
            "pod_with_configmap_secret_runs",
            Box::new(pods::pod_with_configmap_secret_runs),
        ),
        (
            "an_idle_pod_is_not_rewritten",
            Box::new(pods::an_idle_pod_is_not_rewritten),
        ),
        (
            "a_configmap_edit_reaches_the_running_pod",
            Box::new(pods::a_configmap_edit_reaches_the_running_pod),
        ),
        (
            "graceful_delete_stops_containers_and_removes_the_pod",
            Box::new(pods::graceful_delete_stops_containers_and_removes_the_pod),
        ),
        (
            "force_delete_removes_the_pod_at_once",
            Box::new(pods::force_delete_removes_the_pod_at_once),
        ),
        (
            "a_pod_the_node_cannot_run_names_the_field",
            Box::new(pods::a_pod_the_node_cannot_run_names_the_field),
        ),
        (
            "pods_sharing_a_configmap_start_together",
            Box::new(cluster::pods_sharing_a_configmap_start_together),
        ),
        (
            "a_pod_whose_sandbox_is_removed_shows_its_new_ip",
            Box::new(cluster::a_pod_whose_sandbox_is_removed_shows_its_new_ip),
        ),
        (
            "pod_events_explain_a_missing_image_and_a_failing_probe",
            Box::new(cluster::pod_events_explain_a_missing_image_and_a_failing_probe),
        ),
        (
            "a_pod_asking_for_more_than_the_node_has_is_refused",
            Box::new(cluster::a_pod_asking_for_more_than_the_node_has_is_refused),
        ),
        ("lease_is_renewed_for_three_minutes", lease_watch),
        (
            "desired_values_reach_dmi_and_wasm_mappers_and_a_deleted_device_leaves_its_mapper",
            Box::new(
                dmi::desired_values_reach_dmi_and_wasm_mappers_and_a_deleted_device_leaves_its_mapper,
            ),
        ),
        (
            "a_held_pod_waits_for_unhold_upgrade",
            Box::new(hold::a_held_pod_waits_for_unhold_upgrade),
        ),
        (
            "rules_carry_messages_through_eventbus_and_servicebus",
            Box::new(router::rules_carry_messages_through_eventbus_and_servicebus),
        ),
        (
            "keadm_ctl_gets_describes_logs_execs_and_restarts_a_pod",
            Box::new(keadm::keadm_ctl_gets_describes_logs_execs_and_restarts_a_pod),
        ),
        (
            "metaserver_lists_watches_and_serves_through_an_outage",
            Box::new(metaserver::metaserver_lists_watches_and_serves_through_an_outage),
        ),
        (
            "twin_reports_through_an_outage_end_at_the_edges_value",
            Box::new(device::twin_reports_through_an_outage_end_at_the_edges_value),
        ),
    ];
    let mut tally = Tally::new("realcloud");
    for (name, check) in checks {
        if !wanted(name) {
            continue;
        }
        let at = Instant::now();
        let outcome = check(&mut bed);
        tally.record(name, at.elapsed(), outcome);
    }
    if tally.failed() {
        println!("--- wedge log (last 60 lines) ---");
        let log = bed.node.daemon.log();
        let lines: Vec<&str> = log.lines().rev().take(60).collect();
        for line in lines.iter().rev() {
            println!("{line}");
        }
        println!("{}", bed.cloud.logs_tail());
    }
    if let Err(e) = bed.node.stop() {
        println!("realcloud: cleaning up the node failed: {e:#}");
    }
    tally.finish()
}

fn setup() -> Result<Bed> {
    // CloudCore's router, for the rules check; its dynamicController, for MetaServer's.
    // SAFETY: no other thread exists yet; up.sh reads it from the environment it inherits.
    unsafe { std::env::set_var("CLOUD_MODULES", "router dynamicController") };
    let cloud = RealCloud::start()?;
    let mut options = RealNodeOptions::new("wedge-conformance");
    let servicebus_port = wedge_tests::free_port();
    let metaserver_port = wedge_tests::free_port();
    options.sets = vec![
        // KubeEdge's default is off; the events check needs them.
        "modules.edged.reportEvent=true".into(),
        "modules.serviceBus.enable=true".into(),
        format!("modules.serviceBus.port={servicebus_port}"),
        "modules.metaManager.metaServer.enable=true".into(),
        format!("modules.metaManager.metaServer.server=127.0.0.1:{metaserver_port}"),
    ];
    let node = RealNode::join(&cloud, options)?;
    Ok(Bed {
        cloud,
        node,
        servicebus_port,
        metaserver_port,
    })
}
