//! Serial ports for mappers (`wedge:device/serial`): RS-232/RS-485 lines such as Modbus RTU.
//!
//! A module opens only device paths its manifest grants under `capabilities.serial`; the path
//! must be a character device (so a grant can never be used to read a file), and the port is
//! locked exclusively (`flock`), as other serial tools lock it, so two drivers never interleave
//! frames on one line. Reads and writes are non-blocking on the host's runtime: a guest waiting
//! for a silent device is stopped by the call deadline like any other host call.

use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::time::Duration;

use rustix::fs::{FileType, FlockOperation, Mode, OFlags};
use rustix::termios::{ControlModes, OptionalActions, QueueSelector};
use tokio::io::unix::AsyncFd;

/// Parity bit of a line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Parity {
    /// No parity bit.
    None,
    /// Even parity.
    Even,
    /// Odd parity.
    Odd,
}

/// Line settings of a port.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LineSettings {
    /// Bits per second.
    pub baud_rate: u32,
    /// 5 to 8.
    pub data_bits: u8,
    /// Parity.
    pub parity: Parity,
    /// 1 or 2.
    pub stop_bits: u8,
}

/// Largest read a guest may ask for at once.
pub const MAX_READ: u32 = 64 * 1024;

/// Whether `path` matches one of the `capabilities.serial` patterns (`*` stands for any run of
/// characters other than `/`).
pub fn granted(patterns: &[String], path: &str) -> bool {
    patterns.iter().any(|p| glob(p.as_bytes(), path.as_bytes()))
}

fn glob(pattern: &[u8], text: &[u8]) -> bool {
    match pattern.split_first() {
        None => text.is_empty(),
        Some((b'*', rest)) => {
            let mut i = 0;
            loop {
                if glob(rest, &text[i..]) {
                    return true;
                }
                if i == text.len() || text[i] == b'/' {
                    return false;
                }
                i += 1;
            }
        }
        Some((c, rest)) => text.first() == Some(c) && glob(rest, &text[1..]),
    }
}

/// Checks one `capabilities.serial` entry: an absolute path under `/dev/`, no `..`.
pub fn check_pattern(pattern: &str) -> Result<(), String> {
    if !pattern.starts_with("/dev/") {
        return Err(format!(
            "capabilities.serial entry {pattern:?} must be a device path under /dev/ (e.g. /dev/ttyUSB* or /dev/serial/by-id/*)"
        ));
    }
    if pattern.split('/').any(|part| part == "..") {
        return Err(format!(
            "capabilities.serial entry {pattern:?} must not contain '..'"
        ));
    }
    Ok(())
}

/// An open, locked, configured serial port.
pub struct SerialPort {
    fd: AsyncFd<OwnedFd>,
    path: String,
}

impl std::fmt::Debug for SerialPort {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SerialPort")
            .field("path", &self.path)
            .finish()
    }
}

impl SerialPort {
    /// Opens `path` (already checked against the grants), locks it and applies `settings`
    /// in raw mode. Needs a tokio runtime (the mapper thread's).
    pub fn open(path: &str, settings: LineSettings) -> Result<SerialPort, String> {
        let fail = |what: &str, e: io::Error| format!("serial port {path}: {what}: {e}");
        if path.split('/').any(|part| part == "..") {
            return Err(format!("serial port {path}: '..' is not allowed"));
        }
        let fd = rustix::fs::open(
            path,
            OFlags::RDWR | OFlags::NOCTTY | OFlags::NONBLOCK | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| fail("cannot open", e.into()))?;
        let stat = rustix::fs::fstat(&fd).map_err(|e| fail("cannot stat", e.into()))?;
        if FileType::from_raw_mode(stat.st_mode) != FileType::CharacterDevice {
            return Err(format!("serial port {path}: not a character device"));
        }
        rustix::fs::flock(&fd, FlockOperation::NonBlockingLockExclusive).map_err(|e| {
            if e == rustix::io::Errno::WOULDBLOCK {
                format!("serial port {path}: busy (locked by another process or module)")
            } else {
                fail("cannot lock", e.into())
            }
        })?;
        configure(&fd, settings).map_err(|e| fail("cannot configure the line", e))?;
        // SAFETY: `fd` is an `OwnedFd` that the `AsyncFd` owns: it stays open and refers to
        // the same file description until the `AsyncFd` is dropped, and `as_raw_fd` always
        // returns it.
        let fd = unsafe { AsyncFd::register(fd) }
            .map_err(|e| fail("cannot register with the runtime", e.into()))?;
        Ok(SerialPort {
            fd,
            path: path.to_owned(),
        })
    }

    /// Writes all of `data`.
    pub async fn write(&self, data: &[u8]) -> Result<(), String> {
        let mut rest = data;
        while !rest.is_empty() {
            let mut guard = self
                .fd
                .writable()
                .await
                .map_err(|e| format!("serial port {}: {e}", self.path))?;
            match guard.try_io(|fd| rustix::io::write(fd.get_ref(), rest).map_err(io::Error::from))
            {
                Ok(Ok(n)) => rest = &rest[n..],
                Ok(Err(e)) => return Err(format!("serial port {}: write: {e}", self.path)),
                Err(_would_block) => continue,
            }
        }
        Ok(())
    }

    /// Waits up to `timeout` for input, then returns what is there (at most `max` bytes; empty
    /// at the timeout).
    pub async fn read(&self, max: u32, timeout: Duration) -> Result<Vec<u8>, String> {
        let max = max.clamp(1, MAX_READ) as usize;
        let read = async {
            loop {
                let mut guard = self.fd.readable().await?;
                let mut buf = vec![0u8; max];
                match guard.try_io(|fd| {
                    rustix::io::read(fd.get_ref(), &mut buf[..]).map_err(io::Error::from)
                }) {
                    Ok(Ok(n)) => {
                        buf.truncate(n);
                        return Ok::<_, io::Error>(buf);
                    }
                    Ok(Err(e)) => return Err(e),
                    Err(_would_block) => continue,
                }
            }
        };
        match tokio::time::timeout(timeout, read).await {
            Ok(Ok(bytes)) => Ok(bytes),
            Ok(Err(e)) => Err(format!("serial port {}: read: {e}", self.path)),
            Err(_) => Ok(Vec::new()),
        }
    }

    /// Discards input received and not yet read.
    pub fn discard_input(&self) -> Result<(), String> {
        rustix::termios::tcflush(self.fd.get_ref(), QueueSelector::IFlush)
            .map_err(|e| format!("serial port {}: flush: {e}", self.path))
    }
}

/// Raw mode with the line settings (and `CLOCAL | CREAD`: no modem control, receiver on).
fn configure(fd: &impl AsFd, settings: LineSettings) -> io::Result<()> {
    let invalid = |what: String| io::Error::new(io::ErrorKind::InvalidInput, what);
    let size = match settings.data_bits {
        5 => ControlModes::CS5,
        6 => ControlModes::CS6,
        7 => ControlModes::CS7,
        8 => ControlModes::CS8,
        n => return Err(invalid(format!("data bits must be 5 to 8, not {n}"))),
    };
    if !matches!(settings.stop_bits, 1 | 2) {
        return Err(invalid(format!(
            "stop bits must be 1 or 2, not {}",
            settings.stop_bits
        )));
    }
    if settings.baud_rate == 0 {
        return Err(invalid("the baud rate must not be 0".to_owned()));
    }
    let mut termios = rustix::termios::tcgetattr(fd)?;
    termios.make_raw();
    termios
        .control_modes
        .remove(ControlModes::CSIZE | ControlModes::CSTOPB | ControlModes::PARENB);
    termios.control_modes.remove(ControlModes::PARODD);
    termios
        .control_modes
        .insert(size | ControlModes::CLOCAL | ControlModes::CREAD);
    if settings.stop_bits == 2 {
        termios.control_modes.insert(ControlModes::CSTOPB);
    }
    match settings.parity {
        Parity::None => {}
        Parity::Even => termios.control_modes.insert(ControlModes::PARENB),
        Parity::Odd => termios
            .control_modes
            .insert(ControlModes::PARENB | ControlModes::PARODD),
    }
    termios.set_speed(settings.baud_rate)?;
    rustix::termios::tcsetattr(fd, OptionalActions::Now, &termios)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_match_one_path_segment_per_star() {
        let grants = vec!["/dev/ttyUSB*".to_owned(), "/dev/serial/by-id/*".to_owned()];
        assert!(granted(&grants, "/dev/ttyUSB0"));
        assert!(granted(&grants, "/dev/serial/by-id/usb-FTDI_1234-if00"));
        assert!(!granted(&grants, "/dev/ttyS0"));
        assert!(!granted(&grants, "/dev/ttyUSB0/../sda"));
        assert!(!granted(&grants, "/dev/serial/by-id/x/y"));
        assert!(granted(&["/dev/pts/7".to_owned()], "/dev/pts/7"));
        assert!(!granted(&["/dev/pts/7".to_owned()], "/dev/pts/70"));
    }

    #[test]
    fn patterns_must_be_device_paths() {
        assert!(check_pattern("/dev/ttyUSB*").is_ok());
        assert!(check_pattern("/etc/passwd").is_err());
        assert!(check_pattern("/dev/../etc/*").is_err());
        assert!(check_pattern("ttyUSB0").is_err());
    }

    #[tokio::test]
    async fn a_regular_file_is_not_a_serial_port() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("not-a-tty");
        std::fs::write(&file, b"x").expect("write");
        let settings = LineSettings {
            baud_rate: 9600,
            data_bits: 8,
            parity: Parity::None,
            stop_bits: 1,
        };
        let err = SerialPort::open(file.to_str().expect("utf-8"), settings).unwrap_err();
        assert!(err.contains("not a character device"), "{err}");
    }
}
