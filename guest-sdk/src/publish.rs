//! Publishing on the node's MQTT broker (the `publish` import; twin handlers and, since world
//! 0.2, mappers).

#[cfg(feature = "mapper")]
use crate::bindings::mapper::wedge::device::publish as imp;
#[cfg(all(feature = "twin-handler", not(feature = "mapper")))]
use crate::bindings::twin_handler::wedge::device::publish as imp;

/// Publishes `payload` on `topic` (QoS 1, not retained). Fails, changing nothing, when the
/// manifest's `capabilities.topics` do not allow the topic; the error text comes from the host.
///
/// ```no_run
/// wedge_guest::publish::send("alerts/boiler", br#"{"too_hot":true}"#)?;
/// # Ok::<(), String>(())
/// ```
pub fn send(topic: &str, payload: impl AsRef<[u8]>) -> Result<(), String> {
    imp::send(topic, payload.as_ref())
}
