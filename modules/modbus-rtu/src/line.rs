//! What a transaction needs from a serial line, as a trait so the exchange logic runs against
//! scripted byte streams in native unit tests and against `wedge_guest::serial` in the guest.

use std::time::Duration;

use wedge_guest::serial::SerialPort;

/// A half-duplex byte line.
pub trait Line {
    /// Drops input received and not read yet.
    fn discard_input(&mut self) -> Result<(), String>;
    /// Sends all of `bytes`.
    fn write_all(&mut self, bytes: &[u8]) -> Result<(), String>;
    /// Waits up to `timeout` for input and returns what arrived, at most `max` bytes; empty
    /// when nothing arrived in that time.
    fn read(&mut self, max: usize, timeout: Duration) -> Result<Vec<u8>, String>;
}

impl Line for SerialPort {
    fn discard_input(&mut self) -> Result<(), String> {
        SerialPort::discard_input(self)
    }

    fn write_all(&mut self, bytes: &[u8]) -> Result<(), String> {
        SerialPort::write_all(self, bytes)
    }

    fn read(&mut self, max: usize, timeout: Duration) -> Result<Vec<u8>, String> {
        SerialPort::read(self, max, timeout)
    }
}
