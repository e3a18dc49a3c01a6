//! One serial line shared by every device on it: RS-485 is multi-drop, several slaves on one
//! pair of wires behind one port. The port is opened at the first exchange, kept while devices
//! use the line, and opened again after the line itself failed (an adapter unplugged and back).
//!
//! Exchanges never overlap: the host makes one call at a time into a mapper instance, and an
//! exchange runs to its end (answer, error or timeout) inside that call.

use std::io;
use std::time::Duration;

use modbus_core::pdu::{Error, Request, Response};
use wedge_guest::serial::{SerialPort, Settings};

use crate::config::quiet_time;
use crate::transaction::{timed_out, transact};

/// A line and, while it works, its open port.
pub struct Bus {
    path: String,
    settings: Settings,
    quiet: Duration,
    port: Option<SerialPort>,
}

impl Bus {
    /// A line at `path`, not opened yet.
    pub fn new(path: &str, settings: Settings) -> Bus {
        Bus {
            path: path.to_owned(),
            quiet: quiet_time(&settings),
            settings,
            port: None,
        }
    }

    /// How the line is set up.
    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    /// Sends `request` to `slave` and waits up to `timeout` for the answer, opening the port
    /// first if needed. A line that failed (not a slave that stayed silent) is closed, so the
    /// next exchange opens it again.
    pub fn exchange(
        &mut self,
        slave: u8,
        request: &Request,
        timeout: Duration,
    ) -> Result<Response, Error> {
        let mut port = match self.port.take() {
            Some(port) => port,
            None => SerialPort::open(&self.path, self.settings)
                .map_err(|e| Error::Io(io::Error::other(e)))?,
        };
        let result = transact(&mut port, slave, request, timeout, self.quiet);
        let line_failed = matches!(&result, Err(e @ Error::Io(_)) if !timed_out(e));
        if !line_failed {
            self.port = Some(port);
        }
        result
    }
}
