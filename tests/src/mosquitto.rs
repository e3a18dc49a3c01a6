//! A mosquitto broker started by a test, on a free loopback port, killed when dropped.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

/// A running mosquitto.
pub struct Mosquitto {
    child: Child,
    /// Its port on 127.0.0.1.
    pub port: u16,
    log: PathBuf,
    _dir: tempfile::TempDir,
}

/// The mosquitto binary; an error (never a skip) when it is not installed.
pub fn mosquitto_binary() -> Result<PathBuf> {
    for dir in std::env::var("PATH").unwrap_or_default().split(':').chain([
        "/usr/sbin",
        "/usr/local/sbin",
        "/sbin",
    ]) {
        let candidate = Path::new(dir).join("mosquitto");
        if candidate.is_file() {
            return Ok(candidate);
        }
    }
    bail!(
        "mosquitto is not installed: this test needs a real external broker \
         (apt-get install mosquitto; .ci/setup installs it)"
    )
}

impl Mosquitto {
    /// Starts mosquitto with anonymous access and no persistence; waits until it accepts
    /// connections.
    pub fn start() -> Result<Mosquitto> {
        let port = crate::free_port();
        let dir = tempfile::tempdir()?;
        let config = dir.path().join("mosquitto.conf");
        let log = dir.path().join("mosquitto.log");
        std::fs::write(
            &config,
            format!(
                "listener {port} 127.0.0.1\nallow_anonymous true\npersistence false\n\
                 max_queued_messages 100000\nmax_inflight_messages 0\n"
            ),
        )?;
        let log_file = std::fs::File::create(&log)?;
        let child = Command::new(mosquitto_binary()?)
            .arg("-c")
            .arg(&config)
            .stdin(Stdio::null())
            .stdout(log_file.try_clone()?)
            .stderr(log_file)
            .spawn()
            .context("cannot start mosquitto")?;
        let broker = Mosquitto {
            child,
            port,
            log,
            _dir: dir,
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            if Instant::now() > deadline {
                bail!(
                    "mosquitto did not listen on {port}:\n{}",
                    std::fs::read_to_string(&broker.log).unwrap_or_default()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(broker)
    }
}

impl Drop for Mosquitto {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
