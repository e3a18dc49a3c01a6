//! Logging into the node's log (the `log` import, available in both worlds). The host tags each
//! line with the module's name.
//!
//! Use the functions with a ready message, or the crate's macros ([`info!`](crate::info) and
//! friends) with format arguments:
//!
//! ```no_run
//! wedge_guest::log::info("mapper started");
//! let device = "default/boiler";
//! wedge_guest::warn!("device {device} did not answer, retrying");
//! ```

#[cfg(feature = "mapper")]
use crate::bindings::mapper::wedge::device::log as imp;
#[cfg(all(feature = "twin-handler", not(feature = "mapper")))]
use crate::bindings::twin_handler::wedge::device::log as imp;

/// Severity of a log line.
///
/// ```no_run
/// wedge_guest::log::write(wedge_guest::log::Level::Debug, "polled");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Level {
    /// Very detailed tracing.
    Trace,
    /// Debugging detail.
    Debug,
    /// Normal operation.
    Info,
    /// Something unexpected that the module handles.
    Warn,
    /// Something failed.
    Error,
}

/// Writes one line at `level`.
///
/// ```no_run
/// use wedge_guest::log::{write, Level};
/// write(Level::Error, "register read failed");
/// ```
pub fn write(level: Level, message: &str) {
    let level = match level {
        Level::Trace => imp::Level::Trace,
        Level::Debug => imp::Level::Debug,
        Level::Info => imp::Level::Info,
        Level::Warn => imp::Level::Warn,
        Level::Error => imp::Level::Error,
    };
    imp::write(level, message);
}

/// Writes one line at [`Level::Trace`].
///
/// ```no_run
/// wedge_guest::log::trace("raw frame received");
/// ```
pub fn trace(message: &str) {
    write(Level::Trace, message)
}

/// Writes one line at [`Level::Debug`].
///
/// ```no_run
/// wedge_guest::log::debug("polling");
/// ```
pub fn debug(message: &str) {
    write(Level::Debug, message)
}

/// Writes one line at [`Level::Info`].
///
/// ```no_run
/// wedge_guest::log::info("initialised");
/// ```
pub fn info(message: &str) {
    write(Level::Info, message)
}

/// Writes one line at [`Level::Warn`].
///
/// ```no_run
/// wedge_guest::log::warn("slow device");
/// ```
pub fn warn(message: &str) {
    write(Level::Warn, message)
}

/// Writes one line at [`Level::Error`].
///
/// ```no_run
/// wedge_guest::log::error("connection lost");
/// ```
pub fn error(message: &str) {
    write(Level::Error, message)
}

/// Logs a formatted line at trace level: `trace!("frame {:02x?}", bytes)`.
///
/// ```no_run
/// wedge_guest::trace!("frame {:02x?}", [1u8, 2, 3]);
/// ```
#[macro_export]
macro_rules! trace {
    ($($arg:tt)+) => { $crate::log::write($crate::log::Level::Trace, &::std::format!($($arg)+)) };
}

/// Logs a formatted line at debug level: `debug!("polling {}", id)`.
///
/// ```no_run
/// wedge_guest::debug!("polling {}", "default/boiler");
/// ```
#[macro_export]
macro_rules! debug {
    ($($arg:tt)+) => { $crate::log::write($crate::log::Level::Debug, &::std::format!($($arg)+)) };
}

/// Logs a formatted line at info level: `info!("added {}", id)`.
///
/// ```no_run
/// wedge_guest::info!("added {}", "default/boiler");
/// ```
#[macro_export]
macro_rules! info {
    ($($arg:tt)+) => { $crate::log::write($crate::log::Level::Info, &::std::format!($($arg)+)) };
}

/// Logs a formatted line at warn level: `warn!("retrying {}", id)`.
///
/// ```no_run
/// wedge_guest::warn!("retrying {}", "default/boiler");
/// ```
#[macro_export]
macro_rules! warn {
    ($($arg:tt)+) => { $crate::log::write($crate::log::Level::Warn, &::std::format!($($arg)+)) };
}

/// Logs a formatted line at error level: `error!("read failed: {}", e)`.
///
/// ```no_run
/// wedge_guest::error!("read failed: {}", "timed out");
/// ```
#[macro_export]
macro_rules! error {
    ($($arg:tt)+) => { $crate::log::write($crate::log::Level::Error, &::std::format!($($arg)+)) };
}
