//! The processes a run starts (the daemon, mosquitto) and the guarantee that they stop: each is
//! a [`Managed`] that sends SIGTERM on drop, and the kernel sends SIGTERM if twin-load itself
//! dies without running its destructors.

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

/// How long a stopped process may take to exit after SIGTERM before it gets SIGKILL.
const STOP_GRACE: Duration = Duration::from_secs(10);

/// A child process with its output in a log file; stopped with SIGTERM when dropped.
pub struct Managed {
    name: &'static str,
    child: Child,
    log: PathBuf,
    stopped: Option<ExitStatus>,
}

impl Managed {
    /// Starts `cmd` with stdin closed and stdout/stderr appended to `log`.
    ///
    /// The child gets its own process group, so a Ctrl-C at the terminal reaches only
    /// twin-load, which then stops its children in order; and it asks the kernel for SIGTERM
    /// when its parent dies, so not even a SIGKILL of twin-load leaves it running.
    ///
    /// Must be called from the thread that lives as long as the run (the main thread):
    /// the kernel's parent-death signal fires when the spawning *thread* exits.
    pub fn spawn(name: &'static str, mut cmd: Command, log: &Path) -> Result<Managed> {
        let out = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .with_context(|| format!("cannot open {}", log.display()))?;
        cmd.stdin(Stdio::null())
            .stdout(out.try_clone()?)
            .stderr(out)
            .process_group(0);
        // SAFETY: the closure runs between fork and exec and only makes the prctl syscall,
        // which is async-signal-safe, allocates nothing and touches no locks.
        unsafe {
            cmd.pre_exec(|| {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = cmd
            .spawn()
            .with_context(|| format!("cannot start {name} ({:?})", cmd.get_program()))?;
        Ok(Managed {
            name,
            child,
            log: log.to_owned(),
            stopped: None,
        })
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The exit status if the process has ended.
    pub fn exited(&mut self) -> Option<ExitStatus> {
        if self.stopped.is_none() {
            self.stopped = self.child.try_wait().ok().flatten();
        }
        self.stopped
    }

    /// The last `lines` lines of the process's output.
    pub fn log_tail(&self, lines: usize) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }

    /// An error saying the process ended (or did not become ready), with its output's tail.
    pub fn failure(&mut self, what: &str) -> anyhow::Error {
        let status = match self.exited() {
            Some(status) => format!("exited with {status}"),
            None => "still running".to_owned(),
        };
        anyhow::anyhow!(
            "{} {what} ({status}); last lines of {}:\n{}",
            self.name,
            self.log.display(),
            self.log_tail(40)
        )
    }

    /// Sends SIGTERM and waits for the exit, escalating to SIGKILL after [`STOP_GRACE`].
    pub fn stop(&mut self) -> Option<ExitStatus> {
        if let Some(status) = self.exited() {
            return Some(status);
        }
        let pid = self.child.id() as libc::pid_t;
        // SAFETY: plain syscall on our own, not yet reaped, child.
        unsafe { libc::kill(pid, libc::SIGTERM) };
        let deadline = Instant::now() + STOP_GRACE;
        while Instant::now() < deadline {
            if let Some(status) = self.exited() {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        eprintln!(
            "twin-load: {} did not exit {STOP_GRACE:?} after SIGTERM; killing it",
            self.name
        );
        let _ = self.child.kill();
        self.stopped = self.child.wait().ok();
        self.stopped
    }
}

impl Drop for Managed {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A loopback port that was free a moment ago.
pub fn free_port() -> Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .context("cannot bind an ephemeral loopback port")?
        .port())
}

/// Resident set size of `pid` in KiB (VmRSS), if the process exists.
pub fn rss_kib(pid: u32) -> Option<u64> {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// Polls `GET /healthz` on `admin` until it answers 200; fails if `process` exits first or
/// `timeout` passes.
pub async fn wait_healthy(
    process: &mut Managed,
    admin: SocketAddr,
    timeout: Duration,
) -> Result<()> {
    let deadline = Instant::now() + timeout;
    let mut last = String::from("no answer");
    while Instant::now() < deadline {
        if process.exited().is_some() {
            return Err(process.failure("ended before /healthz answered 200"));
        }
        match wedge_tests::http_get(admin, "/healthz") {
            Ok((200, _)) => return Ok(()),
            Ok((code, body)) => last = format!("{code} {}", body.trim()),
            Err(e) => last = e.to_string(),
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Err(process.failure(&format!(
        "not healthy after {timeout:?} (last /healthz: {last})"
    )))
}

/// Waits until something accepts TCP connections on `addr`; fails if `process` exits first or
/// `timeout` passes.
pub async fn wait_listening(
    process: &mut Managed,
    addr: SocketAddr,
    timeout: Duration,
) -> Result<()> {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if process.exited().is_some() {
            return Err(process.failure(&format!("ended before listening on {addr}")));
        }
        if TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok() {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Err(process.failure(&format!("not listening on {addr} after {timeout:?}")))
}

/// The daemon binary: `explicit` if given, else the release `wedge` of the target directory
/// this program was built in, else `target/release/wedge` below the current directory.
pub fn find_wedge(explicit: Option<&Path>) -> Result<PathBuf> {
    if let Some(path) = explicit {
        if !path.is_file() {
            bail!("--wedge {}: no such file", path.display());
        }
        return Ok(path.to_owned());
    }
    let mut candidates = Vec::new();
    if let Ok(exe) = std::env::current_exe() {
        // <target>/<profile>/twin-load: next to us when built in release, else the sibling
        // release directory. A debug daemon would measure the wrong thing.
        if let Some(profile_dir) = exe.parent() {
            if profile_dir.file_name().is_some_and(|n| n == "release") {
                candidates.push(profile_dir.join("wedge"));
            } else if let Some(target) = profile_dir.parent() {
                candidates.push(target.join("release").join("wedge"));
            }
        }
    }
    candidates.push(PathBuf::from("target/release/wedge"));
    if let Some(found) = candidates.iter().find(|p| p.is_file()) {
        return Ok(found.clone());
    }
    bail!(
        "no release wedge binary found (looked at {}); build it with \
         `cargo build --release -p wedge` or pass --wedge PATH",
        candidates
            .iter()
            .map(|p| p.display().to_string())
            .collect::<Vec<_>>()
            .join(", ")
    )
}

/// The mosquitto binary: `explicit` if given, else the first `mosquitto` on PATH or in the
/// sbin directories packages install it to (often not on a normal user's PATH).
pub fn find_mosquitto(explicit: Option<&Path>) -> Result<PathBuf> {
    if let Some(path) = explicit {
        if !path.is_file() {
            bail!("--mosquitto {}: no such file", path.display());
        }
        return Ok(path.to_owned());
    }
    let path_var = std::env::var_os("PATH").unwrap_or_default();
    let mut dirs: Vec<PathBuf> = std::env::split_paths(&path_var).collect();
    dirs.extend(["/usr/sbin", "/usr/local/sbin", "/sbin"].map(PathBuf::from));
    dirs.iter()
        .map(|d| d.join("mosquitto"))
        .find(|p| p.is_file())
        .context("mosquitto not found on PATH or in /usr/sbin; install it or pass --mosquitto PATH")
}
