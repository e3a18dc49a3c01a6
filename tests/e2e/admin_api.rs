//! The admin API of the real binary under hostile or careless clients (rows 8 and 10 of
//! issue 15): who may deploy, what a non-loopback bind does, half requests, idle-socket floods
//! under systemd's default `nofile` of 1024, and fd exhaustion.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::time::{Duration, Instant};

use wedge_tests::guests::module;
use wedge_tests::node::{Broker, write_config};
use wedge_tests::twin_fixtures::THERMOMETERS;
use wedge_tests::{
    AdminEndpoint, AdminStream, Daemon, NOBODY, admin_socket, admin_token, free_port, http_get,
    http_request, is_root, raise_nofile_limit, wedge_bin, wedge_cmd,
};

const STOP_WITHIN: Duration = Duration::from_secs(5);

/// A node with its own MQTT port, TCP admin on a free loopback port, and `wedge_extra` (YAML
/// lines indented by two spaces) added to its `wedge:` section.
fn start(dir: &Path, wedge_extra: &str, nofile: Option<(u64, u64)>) -> (Daemon, SocketAddr, u16) {
    let (config, mqtt_port) = write_config(dir, Broker::Embedded, THERMOMETERS).unwrap();
    let mut text = std::fs::read_to_string(&config).unwrap();
    text.push_str(wedge_extra);
    std::fs::write(&config, text).unwrap();
    let admin = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let addr = admin.to_string();
    let args = [
        "run",
        "--config",
        config.to_str().unwrap(),
        "--data-dir",
        dir.to_str().unwrap(),
        "--admin-addr",
        &addr,
    ];
    let mut daemon = Daemon::start_limited(&args, &[], false, nofile).unwrap();
    daemon.wait_healthy(admin, Duration::from_secs(20)).unwrap();
    (daemon, admin, mqtt_port)
}

/// The value of the first sample of `metric` (with its labels) in `/metrics`.
fn metric(admin: impl Into<AdminEndpoint>, sample: &str) -> f64 {
    let (code, body) = http_get(admin, "/metrics").unwrap();
    assert_eq!(code, 200);
    body.lines()
        .find_map(|l| l.strip_prefix(sample)?.trim().parse().ok())
        .unwrap_or_else(|| panic!("{sample} not in /metrics:\n{body}"))
}

#[test]
fn deploys_need_the_owners_socket_or_the_token() {
    let dir = tempfile::tempdir().unwrap();
    let (mut wedge, admin, _) = start(dir.path(), "", None);
    let data = dir.path().to_str().unwrap();

    // The unix socket: this user's only.
    let socket = admin_socket(dir.path());
    let meta = std::fs::symlink_metadata(&socket).unwrap();
    assert_eq!(meta.permissions().mode() & 0o777, 0o600, "socket mode");
    // SAFETY: geteuid has no preconditions.
    assert_eq!(meta.uid(), unsafe { libc::geteuid() }, "socket owner");
    if is_root() {
        // Another local user (nobody), with the data directory open to all: the socket's own
        // mode keeps it out.
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let bin_dir = tempfile::tempdir().unwrap();
        std::fs::set_permissions(bin_dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let bin = bin_dir.path().join("wedge");
        std::fs::copy(wedge_bin(), &bin).unwrap();
        use std::os::unix::process::CommandExt;
        let out = std::process::Command::new(&bin)
            .args(["module", "list", "--admin-socket", socket.to_str().unwrap()])
            .env_clear()
            .uid(NOBODY)
            .gid(NOBODY)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && err.contains("Permission denied"),
            "another user reached the admin socket: {err}"
        );
    }
    let token_file = dir.path().join("admin.token");
    assert_eq!(
        std::fs::metadata(&token_file).unwrap().permissions().mode() & 0o777,
        0o600,
        "token file mode"
    );
    let token = admin_token(dir.path()).unwrap();
    assert_eq!(token.len(), 64);

    // TCP without (or with a wrong) token: health and metrics only.
    assert_eq!(http_get(admin, "/healthz").unwrap().0, 200);
    assert_eq!(http_get(admin, "/metrics").unwrap().0, 200);
    let threshold = std::fs::read(module("threshold")).unwrap();
    let wrong = format!("Bearer {}", "0".repeat(64));
    for (method, path, headers, body) in [
        ("POST", "/modules", vec![], &threshold[..]),
        (
            "POST",
            "/modules",
            vec![("Authorization", wrong.as_str())],
            &threshold[..],
        ),
        ("GET", "/modules", vec![], &b""[..]),
        ("DELETE", "/modules/threshold", vec![], &b""[..]),
    ] {
        let (code, answer) = http_request(admin, method, path, &headers, body).unwrap();
        assert_eq!(code, 401, "{method} {path} without the token: {answer}");
        assert!(answer.contains("Bearer"), "{answer}");
    }
    assert_eq!(
        metric(admin, "wedge_admin_unauthorized_total{listener=\"tcp\"}"),
        4.0
    );
    let (ok, _, err) = wedge_cmd(&["module", "list", "--data-dir", data]).unwrap();
    assert!(ok, "nothing was deployed by the refused requests: {err}");

    // The CLI over TCP: refused without the token, accepted with it.
    let addr = admin.to_string();
    let elsewhere = tempfile::tempdir().unwrap();
    let threshold_path = module("threshold");
    let (ok, _, err) = wedge_cmd(&[
        "module",
        "deploy",
        threshold_path.to_str().unwrap(),
        "--admin-addr",
        &addr,
        "--data-dir",
        elsewhere.path().to_str().unwrap(),
    ])
    .unwrap();
    assert!(
        !ok && err.contains("401") && err.contains("--token-file"),
        "{err}"
    );
    let (ok, out, err) = wedge_cmd(&[
        "module",
        "deploy",
        threshold_path.to_str().unwrap(),
        "--admin-addr",
        &addr,
        "--token-file",
        token_file.to_str().unwrap(),
    ])
    .unwrap();
    assert!(ok, "{err}");
    assert!(out.contains("deployed threshold"), "{out}");
    // A raw request with the token, and the CLI finding the token from --data-dir.
    let bearer = format!("Bearer {token}");
    let (code, listed) =
        http_request(admin, "GET", "/modules", &[("Authorization", &bearer)], b"").unwrap();
    assert_eq!(code, 200);
    assert!(listed.contains("\"threshold\""), "{listed}");
    let (ok, out, err) =
        wedge_cmd(&["module", "list", "--admin-addr", &addr, "--data-dir", data]).unwrap();
    assert!(ok && out.contains("threshold "), "{out}{err}");
    // The unix socket needs no token.
    let (ok, out, err) = wedge_cmd(&["module", "remove", "threshold", "--data-dir", data]).unwrap();
    assert!(ok, "{err}");
    assert_eq!(out.trim(), "removed threshold");

    wedge.stop(libc::SIGTERM, STOP_WITHIN).unwrap();
    assert!(!socket.exists(), "the socket is removed at stop");
}

#[test]
fn a_non_loopback_admin_address_is_refused_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().to_str().unwrap();
    for addr in [
        format!("0.0.0.0:{}", free_port()),
        format!("[::]:{}", free_port()),
    ] {
        let mut wedge = Daemon::start(
            &["run", "--data-dir", data, "--admin-addr", &addr],
            &[],
            false,
        )
        .unwrap();
        let status = wedge.wait_exit(Duration::from_secs(10)).unwrap();
        let log = wedge.log();
        assert!(!status.success(), "started on {addr}:\n{log}");
        assert!(
            log.contains("wedge.adminAddr")
                && log.contains("not a loopback address")
                && log.contains("wedge.admin.allowInsecureRemote"),
            "{log}"
        );
        assert!(!log.contains("panicked"), "{log}");
    }
    let file = dir.path().join("remote.yaml");
    std::fs::write(&file, "wedge:\n  adminAddr: 0.0.0.0:10240\n").unwrap();
    let (ok, _, err) = wedge_cmd(&["config", "check", file.to_str().unwrap()]).unwrap();
    assert!(!ok && err.contains("wedge.adminAddr"), "{err}");
    std::fs::write(
        &file,
        "wedge:\n  adminAddr: 0.0.0.0:10240\n  admin:\n    allowInsecureRemote: true\n",
    )
    .unwrap();
    let (ok, _, err) = wedge_cmd(&["config", "check", file.to_str().unwrap()]).unwrap();
    assert!(ok, "the explicit opt-in is accepted: {err}");
}

/// Reads until the peer closes the connection; the time it took, or `None` if still open at
/// `deadline`.
fn closed_by(stream: &mut TcpStream, deadline: Instant) -> Option<Instant> {
    let mut buf = [0u8; 512];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return None;
        }
        stream.set_read_timeout(Some(left)).ok()?;
        match stream.read(&mut buf) {
            Ok(0) => return Some(Instant::now()),
            Ok(_) => continue,
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {
                return Some(Instant::now());
            }
            Err(_) => return None,
        }
    }
}

#[test]
fn half_requests_and_slow_bodies_are_cut_off() {
    raise_nofile_limit().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let extra = "  admin:\n    headerTimeoutMs: 1000\n    bodyTimeoutMs: 1000\n    \
                 maxBodyBytes: 4096\n    maxConnections: 4096\n";
    let (mut wedge, admin, _) = start(dir.path(), extra, None);

    // 2,000 half requests (headers never finished) and idle sockets.
    let opened = Instant::now();
    let mut half: Vec<(TcpStream, Instant)> = (0..2000)
        .map(|i| {
            let mut s = TcpStream::connect(admin).unwrap();
            if i % 2 == 0 {
                s.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
                    .unwrap();
            }
            (s, Instant::now())
        })
        .collect();
    let open_ms = opened.elapsed().as_millis();
    // Health keeps answering meanwhile.
    let (code, _) = http_get(admin, "/healthz").unwrap();
    assert_eq!(code, 200);
    let deadline = Instant::now() + Duration::from_secs(15);
    let mut longest = Duration::ZERO;
    let mut still_open = 0;
    for (s, at) in &mut half {
        match closed_by(s, deadline) {
            Some(t) => longest = longest.max(t.duration_since(*at)),
            None => still_open += 1,
        }
    }
    eprintln!(
        "2000 half requests (opened in {open_ms} ms): each closed at most {longest:?} after it \
         was opened (headerTimeoutMs 1000), {still_open} still open"
    );
    assert_eq!(still_open, 0, "half requests held past the header timeout");
    assert!(longest < Duration::from_secs(4), "{longest:?}");
    drop(half);
    assert!(metric(admin, "wedge_admin_header_timeouts_total{listener=\"tcp\"}") >= 2000.0);

    // A body that stops half-way: 408 after bodyTimeoutMs (on the socket: no token needed).
    let socket = AdminEndpoint::Unix(admin_socket(dir.path()));
    let mut slow = AdminStream::connect(&socket, Duration::from_secs(5)).unwrap();
    slow.write_all(b"POST /modules HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\nabc")
        .unwrap();
    let started = Instant::now();
    let mut answer = String::new();
    let _ = slow.read_to_string(&mut answer);
    let waited = started.elapsed();
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(
        waited >= Duration::from_millis(900) && waited < Duration::from_secs(4),
        "{waited:?}"
    );
    // A body over maxBodyBytes: 413 before it is read.
    let (code, answer) =
        http_request(socket.clone(), "POST", "/modules", &[], &[0u8; 5000]).unwrap();
    assert_eq!(code, 413, "{answer}");
    assert!(answer.contains("wedge.admin.maxBodyBytes"), "{answer}");
    // Health needs no token, so it reads no body: one announcing 64 MiB, of which 3 bytes
    // come, is answered at once (not after bodyTimeoutMs, and nothing is buffered).
    let mut big = std::net::TcpStream::connect(admin).unwrap();
    big.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 67108864\r\n\r\nabc")
        .unwrap();
    let asked = Instant::now();
    let mut head = [0u8; 12];
    big.read_exact(&mut head).unwrap();
    assert_eq!(&head, b"HTTP/1.1 200", "{}", String::from_utf8_lossy(&head));
    assert!(
        asked.elapsed() < Duration::from_millis(800),
        "{:?}",
        asked.elapsed()
    );

    wedge.stop(libc::SIGTERM, STOP_WITHIN).unwrap();
}

#[test]
fn health_answers_under_nofile_1024_with_1100_idle_sockets_on_each_port() {
    raise_nofile_limit().unwrap();
    let dir = tempfile::tempdir().unwrap();
    // systemd's default: soft 1024; the hard limit above it.
    let (mut wedge, admin, mqtt_port) = start(dir.path(), "", Some((1024, 4096)));
    let log = wedge.log();
    assert!(
        log.contains("open files limit (RLIMIT_NOFILE) soft_before=1024 soft=4096 hard=4096"),
        "{log}"
    );

    let mut idle = Vec::new();
    for _ in 0..1100 {
        idle.push(TcpStream::connect(admin).unwrap());
        idle.push(TcpStream::connect(("127.0.0.1", mqtt_port)).unwrap());
    }
    // Let the daemon accept what it will.
    std::thread::sleep(Duration::from_millis(500));
    let asked = Instant::now();
    let (code, body) = http_get(admin, "/healthz").unwrap();
    let tcp_ms = asked.elapsed().as_millis();
    assert_eq!(code, 200, "{body}");
    let socket = admin_socket(dir.path());
    let asked = Instant::now();
    let (code, _) = http_get(socket.clone(), "/healthz").unwrap();
    let unix_ms = asked.elapsed().as_millis();
    assert_eq!(code, 200);
    let open_fds = metric(socket.clone(), "process_open_fds");
    let max_fds = metric(socket.clone(), "process_max_fds");
    let admin_conns = metric(socket.clone(), "wedge_admin_connections{listener=\"tcp\"}");
    let evicted = metric(
        socket.clone(),
        "wedge_admin_connections_evicted_total{listener=\"tcp\"}",
    );
    let mqtt = wedge_tests::mqtt::MqttClient::connect(mqtt_port, "late-client");
    eprintln!(
        "1100 idle sockets on the admin port and 1100 on MQTT: /healthz 200 in {tcp_ms} ms \
         (TCP), {unix_ms} ms (unix); open fds {open_fds} of {max_fds}; admin TCP connections \
         {admin_conns} (cap 128), {evicted} evicted; a new MQTT client: {}",
        match &mqtt {
            Ok(_) => "CONNACK".to_owned(),
            Err(e) => format!("no CONNACK ({e})"),
        }
    );
    assert_eq!(max_fds, 4096.0);
    assert!(admin_conns <= 129.0, "{admin_conns}");
    assert!(evicted >= 1100.0 - 128.0, "{evicted}");
    assert!(
        !wedge.log().contains("Too many open files"),
        "{}",
        wedge.log()
    );
    drop(mqtt);
    drop(idle);
    wedge.stop(libc::SIGTERM, STOP_WITHIN).unwrap();
}

#[test]
fn the_admin_accept_loop_survives_fd_exhaustion() {
    raise_nofile_limit().unwrap();
    let dir = tempfile::tempdir().unwrap();
    // Hard = soft = 512, and a connection cap above it: accepts fail with EMFILE.
    let extra = "  admin:\n    headerTimeoutMs: 60000\n    maxConnections: 4096\n";
    let t0 = Instant::now();
    let (mut wedge, admin, _) = start(dir.path(), extra, Some((512, 512)));
    eprintln!("started in {:?}", t0.elapsed());
    let mut flood = Vec::new();
    for _ in 0..700 {
        flood.push(TcpStream::connect(admin).unwrap());
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    while !wedge.log().contains("admin API cannot accept a connection") {
        assert!(
            Instant::now() < deadline,
            "no EMFILE reached:\n{}",
            wedge.log()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    eprintln!("EMFILE reached at {:?}", t0.elapsed());
    // Free the descriptors: the loop picks up again by itself.
    drop(flood);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match http_get(admin, "/healthz") {
            Ok((200, _)) => break,
            other => assert!(
                Instant::now() < deadline,
                "no health after the flood: {other:?}\n{}",
                wedge.log()
            ),
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let exhausted = metric(
        admin,
        "wedge_admin_accept_fd_exhausted_total{listener=\"tcp\"}",
    );
    eprintln!(
        "fd exhaustion: {exhausted} failed accepts counted, health back at {:?}",
        t0.elapsed()
    );
    assert!(exhausted >= 1.0);
    wedge.stop(libc::SIGTERM, STOP_WITHIN).unwrap();
}

/// `/healthz` says 503, with why, while the database's disk is full, and 200 once there is
/// room again: a node that cannot store what it acknowledges is not healthy.
#[test]
fn health_says_the_store_is_unwritable_while_its_disk_is_full() {
    assert!(
        is_root(),
        "this test mounts a small tmpfs: run the suite as root (bash .ci/setup)"
    );
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir(&data).unwrap();
    let mounted = std::process::Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=24m,mode=0700", "tmpfs"])
        .arg(&data)
        .output()
        .unwrap();
    assert!(mounted.status.success(), "mount tmpfs: {mounted:?}");
    struct Unmount<'a>(&'a Path);
    impl Drop for Unmount<'_> {
        fn drop(&mut self) {
            let _ = std::process::Command::new("umount")
                .arg("-l")
                .arg(self.0)
                .output();
        }
    }
    let _unmount = Unmount(&data);
    let (mut wedge, admin, _) = start(&data, "", None);
    let (code, body) = http_get(admin, "/healthz").unwrap();
    assert_eq!(code, 200, "{body}");

    // Fill the disk: write until the file system says no more.
    let ballast = data.join("ballast");
    {
        let mut file = std::fs::File::create(&ballast).unwrap();
        let block = vec![0u8; 1 << 20];
        while file.write_all(&block).is_ok() {}
        let _ = file.sync_all();
    }
    let (code, body) = http_get(admin, "/healthz").unwrap();
    assert_eq!(code, 503, "{body}");
    assert!(body.contains("storeUnwritable"), "{body}");
    assert!(body.contains("bytes free"), "{body}");

    // Room again: healthy once a commit failed meanwhile is 10 s old (or one succeeds).
    std::fs::remove_file(&ballast).unwrap();
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let (code, body) = http_get(admin, "/healthz").unwrap();
        if code == 200 {
            break;
        }
        assert!(Instant::now() < deadline, "{code} {body}");
        std::thread::sleep(Duration::from_millis(200));
    }
    wedge.stop(libc::SIGTERM, STOP_WITHIN).unwrap();
}
