//! Hostile test guest: `on_update` never returns when the value is the text `spin`; anything
//! else is accepted. The host's per-call time limit (epoch deadline) must stop it.

use wedge_guest::{TwinHandler, TwinUpdate, Verdict};

struct Spin;

impl TwinHandler for Spin {
    fn init(_config: &str) -> Result<Self, String> {
        Ok(Spin)
    }

    fn on_update(&mut self, update: &TwinUpdate) -> Verdict {
        if update.value.as_str() == Some("spin") {
            let mut n: u64 = 0;
            loop {
                n = std::hint::black_box(n.wrapping_add(1));
            }
        }
        Verdict::Accept
    }
}

wedge_guest::export_twin_handler!(Spin);
