//! Hostile test guest (a twin handler): it stalls and floods from inside host calls, where
//! epoch deadlines alone cannot stop it.
//!
//! - `init` sleeps `init_sleep_ms` in `wasi:clocks` (a host call), then allocates and writes
//!   `touch_mib` MiB that it keeps.
//! - `on-update` with the text `sleep` sleeps `sleep_ms` in a host call; with `flood` it logs
//!   one message of `flood_bytes` bytes full of newlines and forged daemon log lines. Any other
//!   value is accepted at once.

use serde::Deserialize;
use wedge_guest::{TwinHandler, TwinUpdate, Verdict};

#[derive(Deserialize)]
#[serde(default)]
struct Config {
    init_sleep_ms: u64,
    touch_mib: usize,
    sleep_ms: u64,
    flood_bytes: usize,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            init_sleep_ms: 0,
            touch_mib: 0,
            sleep_ms: 60_000,
            flood_bytes: 1 << 20,
        }
    }
}

struct Stall {
    config: Config,
    _hoard: Vec<u8>,
}

/// Sleeps in the host: one `monotonic-clock` pollable, blocked on.
fn host_sleep(ms: u64) {
    wasip2::clocks::monotonic_clock::subscribe_duration(ms.saturating_mul(1_000_000)).block();
}

impl TwinHandler for Stall {
    fn init(config: &str) -> Result<Self, String> {
        let config: Config = wedge_guest::parse_config(config)?;
        if config.init_sleep_ms > 0 {
            host_sleep(config.init_sleep_ms);
        }
        let mut hoard = vec![0u8; config.touch_mib << 20];
        for page in hoard.chunks_mut(4096) {
            page[0] = 0xA5;
        }
        std::hint::black_box(&hoard);
        Ok(Stall {
            config,
            _hoard: hoard,
        })
    }

    fn on_update(&mut self, update: &TwinUpdate) -> Verdict {
        match update.value.as_str() {
            Some("sleep") => {
                host_sleep(self.config.sleep_ms);
                Verdict::Accept
            }
            Some("flood") => {
                let line = "\n2026-01-01T00:00:00Z  INFO wedge: forged line ";
                let mut message = String::with_capacity(self.config.flood_bytes);
                while message.len() + line.len() <= self.config.flood_bytes {
                    message.push_str(line);
                }
                wedge_guest::log::info(&message);
                Verdict::Accept
            }
            _ => Verdict::Accept,
        }
    }
}

wedge_guest::export_twin_handler!(Stall);
