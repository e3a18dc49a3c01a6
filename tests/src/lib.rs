//! Support for Wedge's end-to-end tests: start the real `wedge` binary, talk to it over real
//! sockets, and always stop what a test started.
//!
//! Tests that need a part that is missing (the binary not built, a port taken) fail with a
//! message that says what is missing; nothing here skips.

#![warn(missing_docs)]

pub mod cloud_node;
pub mod cloudhub;
pub mod dmi_client;
pub mod dmi_mapper;
pub mod guests;
pub mod hostile;
pub mod http_device;
pub mod https_files;
pub mod inproc_link;
pub mod kube_http;
pub mod modbus_rtu_server;
pub mod modbus_server;
pub mod mosquitto;
pub mod mqtt;
pub mod node;
pub mod realcloud;
pub mod tally;
pub mod twin_fixtures;
pub mod wasm_node;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

/// The `wedge` binary of the current build profile, next to the test executable's `deps/`.
pub fn wedge_bin() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    // Tests live in target/<profile>/deps, the load generators in target/<profile>.
    let dir = exe.parent().expect("the executable has a directory");
    let profile_dir = if dir.ends_with("deps") {
        dir.parent().expect("deps has a parent")
    } else {
        dir
    };
    let bin = profile_dir.join("wedge");
    assert!(
        bin.is_file(),
        "the wedge binary is missing at {}: build it first with `cargo build --workspace --bins` \
         (the README's test command does)",
        bin.display()
    );
    bin
}

/// A loopback port that was free a moment ago, never the same twice in one process.
///
/// Drawn at random below the kernel's ephemeral range (32768–60999 here): a port the kernel
/// handed out would be free again once released, and the next outgoing connection of any
/// test may take it as its source port before the daemon that was given it binds it (seen as
/// `Address already in use` at a node's start). Falls back to a kernel-chosen port when no
/// random one binds.
pub fn free_port() -> u16 {
    use std::hash::{BuildHasher, RandomState};
    static GIVEN: std::sync::Mutex<std::collections::BTreeSet<u16>> =
        std::sync::Mutex::new(std::collections::BTreeSet::new());
    let mut given = GIVEN.lock().unwrap_or_else(|e| e.into_inner());
    for attempt in 0u64..2_000 {
        let random = RandomState::new().hash_one(attempt);
        let port = 20_000 + (random % 12_000) as u16;
        if given.contains(&port) {
            continue;
        }
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            given.insert(port);
            return port;
        }
    }
    let port = TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("bind an ephemeral loopback port");
    given.insert(port);
    port
}

/// Where a node's admin API is reached: its TCP address (`--admin-addr`) or its unix socket
/// (`<data dir>/admin.sock` by default).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AdminEndpoint {
    /// Loopback TCP: `/healthz` and `/metrics` open, the rest needs the token.
    Tcp(SocketAddr),
    /// The unix socket (mode 0600): everything, for the daemon's user and root.
    Unix(PathBuf),
}

impl From<SocketAddr> for AdminEndpoint {
    fn from(addr: SocketAddr) -> Self {
        AdminEndpoint::Tcp(addr)
    }
}

impl From<PathBuf> for AdminEndpoint {
    fn from(path: PathBuf) -> Self {
        AdminEndpoint::Unix(path)
    }
}

impl From<&Path> for AdminEndpoint {
    fn from(path: &Path) -> Self {
        AdminEndpoint::Unix(path.to_owned())
    }
}

impl std::fmt::Display for AdminEndpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AdminEndpoint::Tcp(addr) => write!(f, "{addr}"),
            AdminEndpoint::Unix(path) => write!(f, "{}", path.display()),
        }
    }
}

/// The admin socket of a node whose data directory is `data_dir`.
pub fn admin_socket(data_dir: &Path) -> PathBuf {
    data_dir.join("admin.sock")
}

/// The admin token a node with TCP on wrote into `data_dir`.
pub fn admin_token(data_dir: &Path) -> Result<String> {
    let file = data_dir.join("admin.token");
    let text = std::fs::read_to_string(&file)
        .with_context(|| format!("no admin token at {}", file.display()))?;
    Ok(text.trim().to_owned())
}

/// A connected stream to an admin endpoint.
pub enum AdminStream {
    /// TCP.
    Tcp(TcpStream),
    /// Unix socket.
    Unix(std::os::unix::net::UnixStream),
}

impl AdminStream {
    /// Connects within 2 s, reads time out after `read_timeout`.
    pub fn connect(endpoint: &AdminEndpoint, read_timeout: Duration) -> Result<AdminStream> {
        let stream = match endpoint {
            AdminEndpoint::Tcp(addr) => {
                let s = TcpStream::connect_timeout(addr, Duration::from_secs(2))?;
                s.set_read_timeout(Some(read_timeout))?;
                AdminStream::Tcp(s)
            }
            AdminEndpoint::Unix(path) => {
                let s = std::os::unix::net::UnixStream::connect(path)
                    .with_context(|| format!("cannot connect to {}", path.display()))?;
                s.set_read_timeout(Some(read_timeout))?;
                AdminStream::Unix(s)
            }
        };
        Ok(stream)
    }
}

impl Read for AdminStream {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match self {
            AdminStream::Tcp(s) => s.read(buf),
            AdminStream::Unix(s) => s.read(buf),
        }
    }
}

impl Write for AdminStream {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match self {
            AdminStream::Tcp(s) => s.write(buf),
            AdminStream::Unix(s) => s.write(buf),
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            AdminStream::Tcp(s) => s.flush(),
            AdminStream::Unix(s) => s.flush(),
        }
    }
}

/// An HTTP/1.1 GET to a node's admin API (TCP or unix socket); returns status code and body.
pub fn http_get(admin: impl Into<AdminEndpoint>, path: &str) -> Result<(u16, String)> {
    http_request(admin, "GET", path, &[], b"")
}

/// An HTTP/1.1 request with extra `headers` and `body` to a node's admin API; returns status
/// code and body.
pub fn http_request(
    admin: impl Into<AdminEndpoint>,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Result<(u16, String)> {
    let endpoint = admin.into();
    let mut stream = AdminStream::connect(&endpoint, Duration::from_secs(5))?;
    let mut head = format!(
        "{method} {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    stream.write_all(head.as_bytes())?;
    // A server may answer (413, 401) from the head alone and close without reading the body,
    // as nginx and hyper do: the answer is already on its way, so a body write cut short by
    // the close is not the request's result; what the server said is.
    if let Err(e) = stream.write_all(body)
        && !matches!(
            e.kind(),
            std::io::ErrorKind::BrokenPipe | std::io::ErrorKind::ConnectionReset
        )
    {
        return Err(e.into());
    }
    let mut response = String::new();
    stream.read_to_string(&mut response)?;
    parse_response(&response)
}

/// The status code and body of a whole HTTP/1.1 response.
pub fn parse_response(response: &str) -> Result<(u16, String)> {
    let status = response
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .with_context(|| format!("no HTTP status in {response:?}"))?;
    let body = response
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    Ok((status, body))
}

/// Raises this process's soft open-files limit to its hard limit (tests that open thousands of
/// sockets); returns the new soft limit.
pub fn raise_nofile_limit() -> Result<u64> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit read and write a struct we own.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) != 0 {
            bail!("getrlimit: {}", std::io::Error::last_os_error());
        }
        limit.rlim_cur = limit.rlim_max;
        if libc::setrlimit(libc::RLIMIT_NOFILE, &limit) != 0 {
            bail!("setrlimit: {}", std::io::Error::last_os_error());
        }
    }
    Ok(limit.rlim_cur)
}

/// The unprivileged identity daemons run as when the tests run as root.
pub const NOBODY: u32 = 65534;

/// True when the tests run as root.
pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// Makes `path` owned by [`NOBODY`] (when running as root), so a daemon started as nobody can
/// use it as its HOME or data directory.
pub fn give_to_nobody(path: &Path) -> Result<()> {
    if !is_root() {
        return Ok(());
    }
    use std::os::unix::ffi::OsStrExt;
    let c_path = std::ffi::CString::new(path.as_os_str().as_bytes())?;
    // SAFETY: c_path is a valid NUL-terminated path; chown does not retain it.
    let rc = unsafe { libc::chown(c_path.as_ptr(), NOBODY, NOBODY) };
    if rc != 0 {
        bail!(
            "chown {} failed: {}",
            path.display(),
            std::io::Error::last_os_error()
        );
    }
    Ok(())
}

/// A running `wedge` process; killed on drop if the test did not stop it.
pub struct Daemon {
    child: Child,
    log: PathBuf,
    _log_dir: tempfile::TempDir,
}

impl Daemon {
    /// Starts `wedge` with `args`, a clean environment plus `env`, and stderr to a log file.
    /// With `as_nobody` and when running as root, the process runs as [`NOBODY`].
    pub fn start(args: &[&str], env: &[(&str, &Path)], as_nobody: bool) -> Result<Daemon> {
        Daemon::start_limited(args, env, as_nobody, None)
    }

    /// Like [`Daemon::start`], with the open-files limit (`RLIMIT_NOFILE` soft, hard) set for
    /// the daemon before it runs, as `prlimit --nofile` or systemd's `LimitNOFILE` would.
    pub fn start_limited(
        args: &[&str],
        env: &[(&str, &Path)],
        as_nobody: bool,
        nofile: Option<(u64, u64)>,
    ) -> Result<Daemon> {
        let log_dir = tempfile::tempdir()?;
        let log = log_dir.path().join("wedge.log");
        let log_file = std::fs::File::create(&log)?;
        let drop_privileges = as_nobody && is_root();
        let bin = if drop_privileges {
            // The checkout may sit below a directory nobody cannot enter: run a copy from
            // a directory anyone can read.
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(log_dir.path(), std::fs::Permissions::from_mode(0o755))?;
            let copy = log_dir.path().join("wedge");
            std::fs::copy(wedge_bin(), &copy).context("cannot copy the wedge binary")?;
            copy
        } else {
            wedge_bin()
        };
        let mut cmd = Command::new(bin);
        cmd.args(args)
            .env_clear()
            .env("PATH", "/usr/bin:/bin")
            .stdin(Stdio::null())
            .stdout(log_file.try_clone()?)
            .stderr(log_file);
        for (key, value) in env {
            cmd.env(key, value);
        }
        if drop_privileges {
            use std::os::unix::process::CommandExt;
            cmd.uid(NOBODY).gid(NOBODY);
        }
        if let Some((soft, hard)) = nofile {
            use std::os::unix::process::CommandExt;
            // SAFETY: the closure only calls setrlimit, which is async-signal-safe, on a
            // struct on its own stack.
            unsafe {
                cmd.pre_exec(move || {
                    let limit = libc::rlimit {
                        rlim_cur: soft,
                        rlim_max: hard,
                    };
                    if libc::setrlimit(libc::RLIMIT_NOFILE, &limit) != 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                    Ok(())
                });
            }
        }
        let child = cmd.spawn().context("cannot start the wedge binary")?;
        Ok(Daemon {
            child,
            log,
            _log_dir: log_dir,
        })
    }

    /// Starts `wedge run` with its state in `data_dir`, its admin API on a free loopback port,
    /// and `extra` arguments; returns the daemon and its admin address.
    pub fn run_local(data_dir: &Path, extra: &[&str]) -> Result<(Daemon, SocketAddr)> {
        Daemon::run_local_env(data_dir, extra, &[])
    }

    /// Like [`Daemon::run_local`], with environment variables `env` (e.g. `RUST_LOG`).
    pub fn run_local_env(
        data_dir: &Path,
        extra: &[&str],
        env: &[(&str, &Path)],
    ) -> Result<(Daemon, SocketAddr)> {
        let admin = SocketAddr::from(([127, 0, 0, 1], free_port()));
        let data_dir = data_dir.to_str().context("data dir is not UTF-8")?;
        let addr = admin.to_string();
        let mut args = vec!["run", "--data-dir", data_dir, "--admin-addr", &addr];
        args.extend_from_slice(extra);
        Ok((Daemon::start(&args, env, false)?, admin))
    }

    /// Sends `signal` and checks that the daemon exits successfully within `timeout`.
    pub fn stop(&mut self, signal: i32, timeout: Duration) -> Result<()> {
        self.signal(signal)?;
        let status = self.wait_exit(timeout)?;
        if !status.success() {
            bail!("wedge exited with {status}:\n{}", self.log());
        }
        Ok(())
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Everything the daemon logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Polls `GET /healthz` until it answers 200, the process exits, or `timeout` passes.
    pub fn wait_healthy(
        &mut self,
        admin: impl Into<AdminEndpoint>,
        timeout: Duration,
    ) -> Result<String> {
        let admin = admin.into();
        let deadline = Instant::now() + timeout;
        let mut last = String::from("no answer");
        while Instant::now() < deadline {
            if let Some(status) = self.child.try_wait()? {
                bail!(
                    "wedge exited with {status} before becoming healthy:\n{}",
                    self.log()
                );
            }
            match http_get(admin.clone(), "/healthz") {
                Ok((200, body)) => return Ok(body),
                Ok((code, body)) => last = format!("{code} {body}"),
                Err(e) => last = e.to_string(),
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        bail!(
            "wedge not healthy after {timeout:?} (last: {last}):\n{}",
            self.log()
        )
    }

    /// Sends a signal.
    pub fn signal(&self, signal: i32) -> Result<()> {
        // SAFETY: plain syscall on a pid we own.
        if unsafe { libc::kill(self.child.id() as i32, signal) } != 0 {
            bail!("kill failed: {}", std::io::Error::last_os_error());
        }
        Ok(())
    }

    /// Waits up to `timeout` for the process to exit.
    pub fn wait_exit(&mut self, timeout: Duration) -> Result<ExitStatus> {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if let Some(status) = self.child.try_wait()? {
                return Ok(status);
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        bail!("wedge still running after {timeout:?}:\n{}", self.log())
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Runs `wedge` with `args` to completion; returns (success, stdout, stderr).
pub fn wedge_cmd(args: &[&str]) -> Result<(bool, String, String)> {
    let out = Command::new(wedge_bin())
        .args(args)
        .stdin(Stdio::null())
        .output()
        .context("cannot run the wedge binary")?;
    Ok((
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    ))
}
