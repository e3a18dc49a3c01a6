//! Serial ports (RS-232, RS-485) for mappers: the `serial` import of world 0.2.
//!
//! A module opens only device paths its manifest grants under `capabilities.serial`
//! (`/dev/ttyUSB*`, `/dev/serial/by-id/*`); anything else fails with the host's error, never a
//! trap. The port is held exclusively while the [`SerialPort`] lives.
//!
//! ```no_run
//! use std::time::Duration;
//! use wedge_guest::serial::{Parity, SerialPort, Settings};
//!
//! let port = SerialPort::open("/dev/ttyUSB0", Settings { baud_rate: 19200, parity: Parity::Even, ..Settings::default() })?;
//! port.write_all(&[0x01, 0x03, 0x00, 0x00, 0x00, 0x01, 0x84, 0x0a])?;
//! let reply = port.read_exact(7, Duration::from_millis(500))?;
//! # Ok::<(), String>(())
//! ```

use std::time::{Duration, Instant};

use crate::bindings::mapper::wedge::device::serial as imp;

/// Parity bit of a line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Parity {
    /// No parity bit.
    #[default]
    None,
    /// Even parity.
    Even,
    /// Odd parity.
    Odd,
}

impl Parity {
    /// Parses KubeEdge's spelling (`none`, `even`, `odd`; also `N`, `E`, `O`), ignoring case.
    ///
    /// ```
    /// # #[cfg(feature = "mapper")] {
    /// use wedge_guest::serial::Parity;
    /// assert_eq!(Parity::parse("Even"), Some(Parity::Even));
    /// assert_eq!(Parity::parse("x"), None);
    /// # }
    /// ```
    pub fn parse(text: &str) -> Option<Parity> {
        match text.trim().to_ascii_lowercase().as_str() {
            "none" | "n" | "" => Some(Parity::None),
            "even" | "e" => Some(Parity::Even),
            "odd" | "o" => Some(Parity::Odd),
            _ => None,
        }
    }
}

/// Line settings; the default is 9600 baud, 8 data bits, no parity, 1 stop bit (8N1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Settings {
    /// Bits per second.
    pub baud_rate: u32,
    /// 5 to 8.
    pub data_bits: u8,
    /// Parity.
    pub parity: Parity,
    /// 1 or 2.
    pub stop_bits: u8,
}

impl Default for Settings {
    fn default() -> Settings {
        Settings {
            baud_rate: 9600,
            data_bits: 8,
            parity: Parity::None,
            stop_bits: 1,
        }
    }
}

/// An open serial port, closed when dropped.
pub struct SerialPort {
    port: imp::Port,
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
    /// Opens the port at `path`. Fails when the manifest does not grant it, it is not a serial
    /// device, another process holds it, or the settings are not possible.
    pub fn open(path: &str, settings: Settings) -> Result<SerialPort, String> {
        let wit = imp::Settings {
            baud_rate: settings.baud_rate,
            data_bits: settings.data_bits,
            parity: match settings.parity {
                Parity::None => imp::Parity::None,
                Parity::Even => imp::Parity::Even,
                Parity::Odd => imp::Parity::Odd,
            },
            stop_bits: settings.stop_bits,
        };
        Ok(SerialPort {
            port: imp::open(path, wit)?,
            path: path.to_owned(),
        })
    }

    /// The path it was opened with.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// Writes all of `data`.
    pub fn write_all(&self, data: &[u8]) -> Result<(), String> {
        self.port.write(data)
    }

    /// Waits up to `timeout` for input and returns what has arrived, at most `max` bytes (empty
    /// when nothing came in time).
    pub fn read(&self, max: usize, timeout: Duration) -> Result<Vec<u8>, String> {
        let max = u32::try_from(max).unwrap_or(u32::MAX);
        self.port.read(max, millis(timeout))
    }

    /// Reads exactly `len` bytes within `timeout` in all; fails with a message saying how many
    /// arrived when the time runs out.
    pub fn read_exact(&self, len: usize, timeout: Duration) -> Result<Vec<u8>, String> {
        let started = Instant::now();
        let mut got = Vec::with_capacity(len);
        while got.len() < len {
            let left = timeout.saturating_sub(started.elapsed());
            if left.is_zero() {
                return Err(format!(
                    "serial port {}: timed out after {timeout:?} with {} of {len} bytes",
                    self.path,
                    got.len()
                ));
            }
            let chunk = self.read(len - got.len(), left)?;
            got.extend_from_slice(&chunk);
        }
        Ok(got)
    }

    /// Discards input received and not read (stale bytes of an earlier exchange).
    pub fn discard_input(&self) -> Result<(), String> {
        self.port.discard_input()
    }
}

fn millis(d: Duration) -> u32 {
    u32::try_from(d.as_millis()).unwrap_or(u32::MAX).max(1)
}
