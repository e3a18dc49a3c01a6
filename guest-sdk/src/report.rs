//! What a mapper tells the node about its devices (the `report` import; feature `mapper`).

use crate::bindings::mapper::wedge::device::report as imp;
use crate::types::mapper_conv as conv;
use crate::{DeviceState, TwinValue};

/// Reports a value read from the device. It enters the same path as an MQTT twin update
/// (validation, twin handlers, versions, outputs). Fails when `device` is not one of this
/// mapper's devices, or when the update is refused on that path.
///
/// ```no_run
/// wedge_guest::report::actual("default/boiler", "temperature", 21.5)?;
/// # Ok::<(), String>(())
/// ```
pub fn actual(device: &str, property: &str, value: impl Into<TwinValue>) -> Result<(), String> {
    imp::actual(device, property, &conv::value_out(value.into()))
}

/// Reports the device's state.
///
/// ```no_run
/// use wedge_guest::DeviceState;
/// wedge_guest::report::state("default/boiler", DeviceState::Online)?;
/// # Ok::<(), String>(())
/// ```
pub fn state(device: &str, state: DeviceState) -> Result<(), String> {
    imp::state(device, conv::state_out(state))
}
