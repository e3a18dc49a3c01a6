//! Hostile test guest: `on_update` allocates without bound when the value is the text `bomb`
//! (1 MiB at a time, each written to so none of it can be optimised away); anything else is
//! accepted. The host's memory limit must stop it (the allocation failure aborts, a trap).

use wedge_guest::{TwinHandler, TwinUpdate, Verdict};

struct MemoryBomb;

impl TwinHandler for MemoryBomb {
    fn init(_config: &str) -> Result<Self, String> {
        Ok(MemoryBomb)
    }

    fn on_update(&mut self, update: &TwinUpdate) -> Verdict {
        if update.value.as_str() == Some("bomb") {
            let mut hoard: Vec<Vec<u8>> = Vec::new();
            loop {
                hoard.push(vec![0xA5; 1 << 20]);
                std::hint::black_box(&hoard);
            }
        }
        Verdict::Accept
    }
}

wedge_guest::export_twin_handler!(MemoryBomb);
