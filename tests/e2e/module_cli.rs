//! `wedge module ...` against a running `wedge run`: deploy, list, remove, restart, the module
//! directory, and scaffolding a new module that builds and deploys.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use wedge_tests::guests::module;
use wedge_tests::{Daemon, wedge_bin, wedge_cmd};

const STOP_WITHIN: Duration = Duration::from_secs(5);

fn cli(args: &[&str]) -> (bool, String, String) {
    wedge_cmd(args).unwrap()
}

/// `wedge module list` through the node's unix socket, found from its data directory.
fn list(data_dir: &str) -> String {
    let (ok, out, err) = cli(&["module", "list", "--data-dir", data_dir]);
    assert!(ok, "{err}");
    out
}

#[test]
fn deploy_list_remove_on_a_running_node_and_across_a_restart() {
    let threshold = module("threshold");
    let data = tempfile::tempdir().unwrap();
    let (mut wedge, admin) = Daemon::run_local(data.path(), &[]).unwrap();
    wedge.wait_healthy(admin, Duration::from_secs(20)).unwrap();
    let admin = data.path().to_str().unwrap();

    let (ok, out, err) = cli(&[
        "module",
        "deploy",
        threshold.to_str().unwrap(),
        "--data-dir",
        admin,
    ]);
    assert!(ok, "{err}");
    assert_eq!(
        out.trim(),
        "deployed threshold 0.1.0 (twin-handler, running)"
    );
    let listed = list(admin);
    assert!(
        listed
            .lines()
            .any(|l| l.starts_with("threshold ") && l.contains("running")),
        "{listed}"
    );

    // Its log: the line `init` wrote, from the node's ring of the module's last lines.
    let (ok, out, err) = cli(&["module", "logs", "threshold", "--data-dir", admin]);
    assert!(ok, "{err}");
    assert!(
        out.lines()
            .any(|l| l.contains(" INFO  threshold ready with 3 rules")),
        "{out}"
    );
    let (ok, _, err) = cli(&["module", "logs", "nope", "--data-dir", admin]);
    assert!(
        !ok && err.contains("no module named \"nope\"") && err.contains("404"),
        "{err}"
    );
    // --follow prints what is there and keeps waiting for more.
    let mut follow = Command::new(wedge_bin())
        .args([
            "module",
            "logs",
            "threshold",
            "--follow",
            "--data-dir",
            admin,
        ])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(follow.stdout.take().unwrap()),
        &mut first,
    )
    .unwrap();
    assert!(first.contains("threshold ready"), "{first}");
    std::thread::sleep(Duration::from_millis(700));
    assert!(follow.try_wait().unwrap().is_none(), "--follow ended");
    follow.kill().unwrap();
    follow.wait().unwrap();

    let junk = data.path().join("junk.wasm");
    std::fs::write(&junk, b"not a component").unwrap();
    let (ok, _, err) = cli(&[
        "module",
        "deploy",
        junk.to_str().unwrap(),
        "--data-dir",
        admin,
    ]);
    assert!(!ok);
    assert!(
        err.contains("deploy refused (400)") && err.contains("not a WebAssembly component"),
        "{err}"
    );

    wedge.stop(libc::SIGTERM, STOP_WITHIN).unwrap();
    let (mut wedge, admin2) = Daemon::run_local(data.path(), &[]).unwrap();
    wedge.wait_healthy(admin2, Duration::from_secs(20)).unwrap();
    let admin2 = admin;
    assert!(
        list(admin2).contains("threshold "),
        "the module came back after the restart"
    );
    assert!(wedge.log().contains("module reloaded"), "{}", wedge.log());

    let (ok, out, err) = cli(&["module", "remove", "threshold", "--data-dir", admin2]);
    assert!(ok, "{err}");
    assert_eq!(out.trim(), "removed threshold");
    assert!(!list(admin2).contains("threshold "));
    let (ok, _, err) = cli(&["module", "remove", "threshold", "--data-dir", admin2]);
    assert!(!ok && err.contains("404"), "{err}");
    wedge.stop(libc::SIGTERM, STOP_WITHIN).unwrap();

    let (ok, _, err) = cli(&["module", "list", "--data-dir", admin2]);
    assert!(!ok && err.contains("is `wedge run` running there"), "{err}");
}

#[test]
fn the_configured_module_directory_is_deployed_at_start() {
    let shelf = tempfile::tempdir().unwrap();
    for name in ["threshold", "virtual-thermometer"] {
        std::fs::copy(module(name), shelf.path().join(format!("{name}.wasm"))).unwrap();
    }
    let data = tempfile::tempdir().unwrap();
    let config = data.path().join("edgecore.yaml");
    std::fs::write(
        &config,
        format!("wedge:\n  modules:\n    dir: {}\n", shelf.path().display()),
    )
    .unwrap();
    let (mut wedge, admin) =
        Daemon::run_local(data.path(), &["--config", config.to_str().unwrap()]).unwrap();
    wedge.wait_healthy(admin, Duration::from_secs(20)).unwrap();
    let listed = list(data.path().to_str().unwrap());
    assert!(
        listed.contains("threshold ") && listed.contains("virtual-thermometer "),
        "{listed}"
    );
    wedge.stop(libc::SIGTERM, STOP_WITHIN).unwrap();
}

fn build(crate_dir: &Path, out: &Path, target: &Path) -> String {
    let output = Command::new(wedge_bin())
        .args([
            "module",
            "build",
            crate_dir.to_str().unwrap(),
            "--out-dir",
            out.to_str().unwrap(),
        ])
        .env("CARGO_TARGET_DIR", target)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "build of {} failed:\n{stderr}",
        crate_dir.display()
    );
    assert!(
        stderr.contains("validating") && stderr.contains("packaged"),
        "progress shown: {stderr}"
    );
    String::from_utf8_lossy(&output.stdout).trim().to_owned()
}

/// `wedge module dev` on a scaffolded crate: deployed at start, again after a change of its
/// manifest's version, and a change that does not compile leaves that version running.
fn dev_loop(crate_dir: &Path, target: &Path, admin: &str) {
    use std::io::BufRead as _;
    let mut dev = Command::new(wedge_bin())
        .args([
            "module",
            "dev",
            crate_dir.to_str().unwrap(),
            "--data-dir",
            admin,
        ])
        .env("CARGO_TARGET_DIR", target)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    let out = dev.stdout.take().unwrap();
    let err = dev.stderr.take().unwrap();
    let tx2 = tx.clone();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(out).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(err).lines().map_while(Result::ok) {
            let _ = tx2.send(line);
        }
    });
    let mut seen = Vec::new();
    // Lines of the two streams may arrive in either order: a line seen earlier counts.
    let mut wait_for = |what: &str| {
        if seen.iter().any(|l: &String| l.contains(what)) {
            return;
        }
        let deadline = std::time::Instant::now() + Duration::from_secs(120);
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            match rx.recv_timeout(left) {
                Ok(line) => {
                    let found = line.contains(what);
                    seen.push(line);
                    if found {
                        return;
                    }
                }
                Err(_) => panic!("no {what:?} from module dev:\n{}", seen.join("\n")),
            }
        }
    };
    wait_for("deployed my-limit 0.1.0 (twin-handler, running)");
    wait_for("watching");
    let manifest = crate_dir.join("wedge.toml");
    let text = std::fs::read_to_string(&manifest).unwrap();
    std::fs::write(
        &manifest,
        text.replace("version = \"0.1.0\"", "version = \"0.1.1\""),
    )
    .unwrap();
    wait_for("deployed my-limit 0.1.1 (twin-handler, running)");
    let lib = crate_dir.join("src/lib.rs");
    let source = std::fs::read_to_string(&lib).unwrap();
    std::fs::write(&lib, format!("{source}\nfn broken( {{\n")).unwrap();
    wait_for("build failed");
    let listed = list(admin);
    assert!(
        listed
            .lines()
            .any(|l| l.starts_with("my-limit ") && l.contains("0.1.1") && l.contains("running")),
        "{listed}"
    );
    std::fs::write(&lib, source).unwrap();
    let _ = dev.kill();
    let _ = dev.wait();
}

#[test]
fn new_modules_build_and_deploy() {
    let work = tempfile::tempdir().unwrap();
    let dir = work.path().to_str().unwrap();
    let target = work.path().join("target");
    let out = work.path().join("out");
    for (name, kind) in [("my-limit", "twin-handler"), ("my-driver", "mapper")] {
        let (ok, stdout, err) = cli(&["module", "new", name, "--kind", kind, "--dir", dir]);
        assert!(ok, "{err}");
        assert!(
            stdout.contains(&format!("created {dir}/{name} ({kind})")),
            "{stdout}"
        );
        assert!(
            work.path().join(name).join("Cargo.lock").is_file(),
            "{name}: the scaffold carries the SDK's lock file"
        );
    }
    let (ok, _, err) = cli(&[
        "module", "new", "my-limit", "--kind", "mapper", "--dir", dir,
    ]);
    assert!(!ok && err.contains("already exists"), "{err}");
    let (ok, _, err) = cli(&[
        "module", "new", "Bad_Name", "--kind", "mapper", "--dir", dir,
    ]);
    assert!(!ok && err.contains("a-z, 0-9"), "{err}");

    let limit = build(&work.path().join("my-limit"), &out, &target);
    let driver = build(&work.path().join("my-driver"), &out, &target);
    assert_eq!(limit, out.join("my-limit.wasm").to_str().unwrap());

    let data = tempfile::tempdir().unwrap();
    let (mut wedge, admin) = Daemon::run_local(data.path(), &[]).unwrap();
    wedge.wait_healthy(admin, Duration::from_secs(20)).unwrap();
    let admin = data.path().to_str().unwrap();
    for file in [&limit, &driver] {
        let (ok, _, err) = cli(&["module", "deploy", file, "--data-dir", admin]);
        assert!(ok, "{file}: {err}");
    }
    let listed = list(admin);
    assert!(
        listed.contains("my-limit ") && listed.contains("my-driver "),
        "{listed}"
    );
    dev_loop(&work.path().join("my-limit"), &target, admin);
    wedge.stop(libc::SIGTERM, STOP_WITHIN).unwrap();

    // A crate without a manifest is refused before anything is built.
    std::fs::remove_file(work.path().join("my-limit/wedge.toml")).unwrap();
    let (ok, _, err) = cli(&[
        "module",
        "build",
        work.path().join("my-limit").to_str().unwrap(),
    ]);
    assert!(!ok && err.contains("wedge.toml"), "{err}");
}

#[test]
fn precompile_fills_the_component_cache_and_refuses_junk() {
    let cache = tempfile::tempdir().unwrap();
    let thermometer = module("virtual-thermometer");
    let dir = cache.path().to_str().unwrap();
    let (ok, _, err) = cli(&[
        "module",
        "precompile",
        "--cache-dir",
        dir,
        "--max-instances",
        "512",
        thermometer.to_str().unwrap(),
    ]);
    assert!(ok, "{err}");
    let entries = std::fs::read_dir(cache.path()).unwrap().count();
    assert!(entries > 0, "nothing written to the cache");

    let junk = cache.path().join("junk.wasm");
    std::fs::write(&junk, b"not a component").unwrap();
    let (ok, _, err) = cli(&[
        "module",
        "precompile",
        "--cache-dir",
        dir,
        "--max-instances",
        "512",
        junk.to_str().unwrap(),
    ]);
    assert!(!ok);
    assert!(!err.is_empty());
}

/// `wedge module test`, with no node: the threshold handler reviews updates, the virtual
/// thermometer drives the example device of `conf/examples/` and writes a desired value.
#[test]
fn modules_are_tried_without_a_node() {
    let threshold = module("threshold");
    let hot =
        r#"{"device":"default/thermo-1","property":"temperature","value":"120","type":"float"}"#;
    let damp = r#"[{"device":"default/thermo-1","property":"humidity","value":"130","type":"float","desired":true},
                  {"device":"default/thermo-1","property":"temperature","value":"21","type":"float"}]"#;
    let (ok, out, err) = cli(&[
        "module",
        "test",
        threshold.to_str().unwrap(),
        "--update",
        hot,
        "--update",
        damp,
    ]);
    assert!(ok, "{out}\n{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[0], "loaded threshold 0.1.0 (twin-handler)", "{out}");
    assert!(
        lines[1].starts_with("default/thermo-1 temperature = 120 (reported, float): reject: ")
            && lines[1].contains("85"),
        "{out}"
    );
    assert_eq!(
        lines[2],
        "default/thermo-1 humidity = 130 (desired, float): replace with 100"
    );
    assert_eq!(
        lines[3],
        "default/thermo-1 temperature = 21 (reported, float): accept"
    );
    assert!(
        out.contains("log INFO  threshold ready with 3 rules"),
        "{out}"
    );
    assert!(out.contains("3 call(s), 0 trap(s)"), "{out}");

    // A handler given a device, and an update that is not one, are named.
    let example =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../conf/examples/virtual-thermometer.yaml");
    let (ok, _, err) = cli(&[
        "module",
        "test",
        threshold.to_str().unwrap(),
        "--device",
        example.to_str().unwrap(),
    ]);
    assert!(!ok && err.contains("takes --update, not --device"), "{err}");
    let (ok, _, err) = cli(&[
        "module",
        "test",
        threshold.to_str().unwrap(),
        "--update",
        "{}",
    ]);
    assert!(!ok && err.contains("missing field"), "{err}");

    let thermometer = module("virtual-thermometer");
    let (ok, out, err) = cli(&[
        "module",
        "test",
        thermometer.to_str().unwrap(),
        "--device",
        example.to_str().unwrap(),
        "--set",
        "setpoint=30",
        "--seconds",
        "2.5",
    ]);
    assert!(ok, "{out}\n{err}");
    assert!(out.starts_with("loaded virtual-thermometer "), "{out}");
    assert!(
        out.contains("driving default/thermo-1 (3 properties)"),
        "{out}"
    );
    assert!(
        out.contains("set default/thermo-1 setpoint = 30 (written by the mapper)"),
        "{out}"
    );
    assert!(
        out.lines()
            .any(|l| l.contains(" report default/thermo-1 setpoint = 30")),
        "{out}"
    );
    assert!(
        out.lines()
            .any(|l| l.contains(" report default/thermo-1 temperature = ")),
        "{out}"
    );
}

#[test]
fn client_commands_find_the_node_from_its_config() {
    let data = tempfile::tempdir().unwrap();
    let config = data.path().join("edgecore.yaml");
    std::fs::write(
        &config,
        format!("wedge:\n  dataDir: {}\n", data.path().display()),
    )
    .unwrap();
    let config = config.to_str().unwrap();
    let admin = std::net::SocketAddr::from(([127, 0, 0, 1], wedge_tests::free_port()));
    let addr = admin.to_string();
    let mut wedge = Daemon::start(
        &["run", "--config", config, "--admin-addr", &addr],
        &[],
        false,
    )
    .unwrap();
    wedge.wait_healthy(admin, Duration::from_secs(20)).unwrap();
    // The unix socket in the config's data directory, found from the config alone.
    let (ok, out, err) = cli(&["module", "list", "--config", config]);
    assert!(ok, "{err}");
    assert!(out.starts_with("NAME"), "{out}");
    let (ok, _, err) = cli(&["device", "list", "--config", config]);
    assert!(ok, "{err}");
    // Over TCP, the token file of the config's data directory.
    let (ok, _, err) = cli(&["module", "list", "--config", config, "--admin-addr", &addr]);
    assert!(ok, "{err}");
    // A config that does not load is named, not guessed around.
    let (ok, _, err) = cli(&["module", "list", "--config", "/nonexistent/edgecore.yaml"]);
    assert!(!ok && err.contains("/nonexistent/edgecore.yaml"), "{err}");
    wedge.stop(libc::SIGTERM, STOP_WITHIN).unwrap();
}
