//! `wedge run` as a user runs it: the real binary, real files, real sockets, real signals.

use std::net::TcpListener;
use std::time::Duration;

use wedge_tests::{Daemon, admin_socket, free_port, give_to_nobody, http_get};

const STOP_WITHIN: Duration = Duration::from_secs(5);

/// Held by the tests that run the embedded MQTT broker on its default port
/// (`tcp://127.0.0.1:1884`): run at once, one of them finds the port taken, and the
/// no-arguments test, which allows no ERROR line, fails.
static DEFAULT_BROKER_PORT: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Takes [`DEFAULT_BROKER_PORT`]; a test that panicked while holding it does not matter here.
fn default_broker_port() -> std::sync::MutexGuard<'static, ()> {
    DEFAULT_BROKER_PORT
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

#[test]
fn runs_with_no_arguments_as_a_normal_user_and_stops_on_sigterm() {
    let _port = default_broker_port();
    let home = tempfile::tempdir().unwrap();
    give_to_nobody(home.path()).unwrap();
    let mut wedge = Daemon::start(&["run"], &[("HOME", home.path())], true).unwrap();
    // No TCP by default: the admin API is the unix socket in the user's data dir.
    let data_dir = home.path().join(".local/share/wedge");
    let socket = admin_socket(&data_dir);
    let health = wedge
        .wait_healthy(socket.clone(), Duration::from_secs(10))
        .unwrap();
    let health: serde_json::Value = serde_json::from_str(&health).unwrap();
    assert_eq!(health["status"], "ok");
    assert_eq!(health["modules"]["metamanager"]["state"], "running");

    let db = data_dir.join("edgecore.db");
    assert!(
        db.is_file(),
        "database not in the user's data dir: {}",
        wedge.log()
    );
    assert!(
        !data_dir.join("admin.token").exists(),
        "no token without TCP"
    );

    let (code, metrics) = http_get(socket, "/metrics").unwrap();
    assert_eq!(code, 200);
    for family in [
        "wedge_module_up{module=\"metamanager\",state=\"running\"} 1",
        "wedge_bus_messages_delivered_total{module=\"metamanager\"}",
        "wedge_store_commit_batches_total",
        "wedge_store_commit_seconds_bucket",
        "wedge_metamanager_messages_total{operation=\"insert\"}",
        "process_resident_memory_bytes",
    ] {
        assert!(
            metrics.contains(family),
            "{family} missing from /metrics:\n{metrics}"
        );
    }

    wedge.signal(libc::SIGTERM).unwrap();
    let status = wedge.wait_exit(STOP_WITHIN).unwrap();
    let log = wedge.log();
    assert!(status.success(), "exit {status}:\n{log}");
    assert!(
        !log.contains("ERROR"),
        "errors logged on a cloud-less default run:\n{log}"
    );
    assert!(
        log.contains("node ready") && log.contains("stopped"),
        "{log}"
    );
}

#[test]
fn sigint_stops_cleanly_and_leaves_a_complete_database() {
    let _port = default_broker_port();
    let data = tempfile::tempdir().unwrap();
    let (mut wedge, admin) = Daemon::run_local(data.path(), &[]).unwrap();
    wedge.wait_healthy(admin, Duration::from_secs(10)).unwrap();
    wedge.stop(libc::SIGINT, STOP_WITHIN).unwrap();

    let db = data.path().join("edgecore.db");
    let conn = rusqlite::Connection::open(&db).unwrap();
    let columns: Vec<String> = conn
        .prepare("SELECT name FROM pragma_table_info('meta')")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(columns, ["key", "type", "value"]);
    // The final checkpoint folded the WAL back into the file.
    let wal = data.path().join("edgecore.db-wal");
    assert!(!wal.exists() || std::fs::metadata(&wal).unwrap().len() == 0);
}

fn start_fails(args: &[&str]) -> String {
    let mut wedge = Daemon::start(args, &[], false).unwrap();
    let status = wedge.wait_exit(Duration::from_secs(10)).unwrap();
    let log = wedge.log();
    assert!(
        !status.success(),
        "wedge started although it should not have:\n{log}"
    );
    assert!(
        !log.contains("panicked"),
        "a start-up error must not be a panic:\n{log}"
    );
    log
}

#[test]
fn a_corrupt_database_stops_start_up_with_a_clear_error() {
    let data = tempfile::tempdir().unwrap();
    let db = data.path().join("edgecore.db");
    std::fs::write(&db, vec![0x5a; 8192]).unwrap();
    let addr = format!("127.0.0.1:{}", free_port());
    let log = start_fails(&[
        "run",
        "--data-dir",
        data.path().to_str().unwrap(),
        "--admin-addr",
        &addr,
    ]);
    assert!(log.contains("not an SQLite database"), "{log}");
    assert!(
        log.contains(db.to_str().unwrap()),
        "the error names the file:\n{log}"
    );
    assert_eq!(
        std::fs::read(&db).unwrap(),
        vec![0x5a; 8192],
        "the file was left as it was"
    );
}

/// A data directory other users can write into (where they could plant links the node would
/// write through) stops the start, naming it, before anything is written there.
#[test]
fn a_data_directory_others_can_write_is_refused_naming_it() {
    use std::os::unix::fs::PermissionsExt;
    let root = tempfile::tempdir().unwrap();
    let shared = root.path().join("shared");
    std::fs::create_dir(&shared).unwrap();
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o777)).unwrap();
    let addr = format!("127.0.0.1:{}", free_port());
    let log = start_fails(&[
        "run",
        "--data-dir",
        shared.to_str().unwrap(),
        "--admin-addr",
        &addr,
    ]);
    assert!(log.contains("wedge.dataDir"), "{log}");
    assert!(log.contains(shared.to_str().unwrap()), "{log}");
    assert!(log.contains("0777"), "{log}");
    assert_eq!(
        std::fs::read_dir(&shared).unwrap().count(),
        0,
        "nothing was written there"
    );
}

#[test]
fn an_unusable_admin_address_or_config_is_a_clear_error() {
    let data = tempfile::tempdir().unwrap();
    let dir = data.path().to_str().unwrap();
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let log = start_fails(&["run", "--data-dir", dir, "--admin-addr", &addr]);
    assert!(
        log.contains(&format!("cannot listen on admin address {addr}")),
        "{log}"
    );

    let config = data.path().join("edgecore.yaml");
    std::fs::write(
        &config,
        "modules:\n  metaManager:\n    remoteQueryTimout: 5\n",
    )
    .unwrap();
    let log = start_fails(&[
        "run",
        "--config",
        config.to_str().unwrap(),
        "--data-dir",
        dir,
    ]);
    assert!(
        log.contains("modules.metaManager.remoteQueryTimout"),
        "{log}"
    );
    assert!(log.contains(config.to_str().unwrap()), "{log}");
}

#[test]
fn json_logs_are_one_object_per_line() {
    let _port = default_broker_port();
    let data = tempfile::tempdir().unwrap();
    let (mut wedge, admin) = Daemon::run_local(data.path(), &["--log-format", "json"]).unwrap();
    wedge.wait_healthy(admin, Duration::from_secs(10)).unwrap();
    wedge.stop(libc::SIGTERM, STOP_WITHIN).unwrap();
    let log = wedge.log();
    let lines: Vec<&str> = log.lines().collect();
    assert!(lines.len() >= 3, "{log}");
    for line in lines {
        let v: serde_json::Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
        assert!(v["level"].is_string() && v["fields"].is_object(), "{line}");
    }
}
