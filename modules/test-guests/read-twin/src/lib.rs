//! Benchmark guest: each `on_update` makes exactly one host call (a twin read of the property
//! being updated) and accepts, so the host's call overhead can be measured with one import.

use wedge_guest::{TwinHandler, TwinUpdate, Verdict, twin};

struct ReadTwin;

impl TwinHandler for ReadTwin {
    fn init(_config: &str) -> Result<Self, String> {
        Ok(ReadTwin)
    }

    fn on_update(&mut self, update: &TwinUpdate) -> Verdict {
        // The read does not change the verdict: the call itself is what is measured.
        let _current = twin::actual(&update.device, &update.property);
        Verdict::Accept
    }
}

wedge_guest::export_twin_handler!(ReadTwin);
