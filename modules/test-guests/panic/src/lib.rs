//! Hostile test guest: `on_update` panics when the value is the text `panic`; anything else is
//! accepted. Built with `panic = "abort"`, the panic is a trap that the host must contain.

use wedge_guest::{TwinHandler, TwinUpdate, Verdict};

struct Panic;

impl TwinHandler for Panic {
    fn init(_config: &str) -> Result<Self, String> {
        Ok(Panic)
    }

    fn on_update(&mut self, update: &TwinUpdate) -> Verdict {
        if update.value.as_str() == Some("panic") {
            panic!(
                "test-panic: asked to panic by {}/{}",
                update.device, update.property
            );
        }
        Verdict::Accept
    }
}

wedge_guest::export_twin_handler!(Panic);
