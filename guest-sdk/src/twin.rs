//! Read-only access to the twins of the devices this module is bound to (the `twin-read`
//! import; feature `twin-handler`).

use crate::TwinValue;
use crate::bindings::twin_handler::wedge::device::twin_read as imp;
use crate::types::twin_handler_conv as conv;

/// The current reported (`actual`) value of a property; `None` when the device is not bound to
/// this module, unknown, or the property has no value.
///
/// ```no_run
/// if let Some(t) = wedge_guest::twin::actual("default/boiler", "temperature") {
///     wedge_guest::info!("temperature is {t}");
/// }
/// ```
pub fn actual(device: &str, property: &str) -> Option<TwinValue> {
    imp::actual(device, property).map(conv::value_in)
}

/// The current desired (`expected`) value of a property, as [`actual`] does.
///
/// ```no_run
/// let setpoint = wedge_guest::twin::desired("default/boiler", "setpoint")
///     .and_then(|v| v.as_f64());
/// ```
pub fn desired(device: &str, property: &str) -> Option<TwinValue> {
    imp::desired(device, property).map(conv::value_in)
}
