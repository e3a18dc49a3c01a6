//! One wasmtime engine per node, its epoch clock, and the on-disk cache of compiled components.

use std::collections::HashMap;
use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};
use wasmtime::component::Component;
use wasmtime::{Config, Engine, InstanceAllocationStrategy, OptLevel, PoolingAllocationConfig};

use crate::error::WasmError;

/// How often the epoch advances: the granularity of call deadlines.
pub const EPOCH_TICK: Duration = Duration::from_millis(2);

/// Upper bound of one module's linear memory; manifests ask for less.
const MAX_MEMORY_BYTES: usize = crate::manifest::MAX_MEMORY_MIB as usize * 1024 * 1024;

/// Sizing of the instance pool.
#[derive(Debug, Clone)]
pub struct EngineSettings {
    /// Component instances alive at once (every module instance is one).
    pub max_instances: u32,
}

impl Default for EngineSettings {
    fn default() -> EngineSettings {
        EngineSettings { max_instances: 512 }
    }
}

/// The epoch clock. It advances only while guest code may run (some [`GuestRunning`] is
/// alive): a deadline is set at the start of each call, relative to the epoch then, so a
/// clock that stands still between calls changes no deadline, and a node whose modules are
/// idle (or that has none) is not woken 500 times a second.
struct Ticker {
    state: Arc<(Mutex<ClockState>, std::sync::Condvar)>,
    thread: Option<std::thread::JoinHandle<()>>,
}

#[derive(Default)]
struct ClockState {
    /// Calls (or instantiations) under way.
    running: usize,
    stop: bool,
    /// Epochs advanced since the engine started.
    ticks: u64,
}

fn clock(state: &Mutex<ClockState>) -> std::sync::MutexGuard<'_, ClockState> {
    state
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Ticker {
    fn start(engine: Engine) -> std::io::Result<Ticker> {
        let state: Arc<(Mutex<ClockState>, std::sync::Condvar)> = Arc::default();
        let shared = state.clone();
        let thread = std::thread::Builder::new()
            .name("wedge-wasm-epoch".to_owned())
            .spawn(move || {
                let (lock, wake) = &*shared;
                loop {
                    let mut s = clock(lock);
                    while s.running == 0 && !s.stop {
                        s = wake
                            .wait(s)
                            .unwrap_or_else(std::sync::PoisonError::into_inner);
                    }
                    if s.stop {
                        return;
                    }
                    drop(s);
                    std::thread::sleep(EPOCH_TICK);
                    engine.increment_epoch();
                    clock(lock).ticks += 1;
                }
            })?;
        Ok(Ticker {
            state,
            thread: Some(thread),
        })
    }
}

impl Drop for Ticker {
    fn drop(&mut self) {
        let (lock, wake) = &*self.state;
        clock(lock).stop = true;
        wake.notify_all();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Keeps the epoch clock running while guest code may execute: hold one across every
/// instantiation and call whose deadline is enforced by epochs.
#[must_use = "the clock stops when the guard is dropped"]
pub struct GuestRunning {
    state: Arc<(Mutex<ClockState>, std::sync::Condvar)>,
}

impl Drop for GuestRunning {
    fn drop(&mut self) {
        let (lock, _) = &*self.state;
        let mut s = clock(lock);
        s.running = s.running.saturating_sub(1);
    }
}

/// The node's Wasm engine: compilation with a persistent cache, and the epoch clock that
/// bounds every call.
#[derive(Clone)]
pub struct WasmEngine {
    engine: Engine,
    cache_dir: PathBuf,
    engine_key: String,
    /// Compiled components by code digest, so modules with the same code (several deployments
    /// of one mapper, an upgrade that only changes the manifest) share one copy of the machine
    /// code instead of each mapping its own.
    loaded: Arc<Mutex<HashMap<String, Component>>>,
    ticker: Arc<Ticker>,
}

/// How a component was obtained, for logs and benchmarks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CompileSource {
    /// Compiled now (and written to the cache).
    Compiled,
    /// Loaded precompiled from the cache.
    Cached,
}

impl WasmEngine {
    /// An engine with pooled instances and epoch interruption; compiled components are cached
    /// in `cache_dir`.
    pub fn new(cache_dir: &Path, settings: &EngineSettings) -> Result<WasmEngine, WasmError> {
        let mut pool = PoolingAllocationConfig::default();
        pool.total_component_instances(settings.max_instances)
            .total_core_instances(settings.max_instances * 4)
            .total_memories(settings.max_instances * 2)
            .total_tables(settings.max_instances * 4)
            .total_stacks(settings.max_instances)
            .max_memory_size(MAX_MEMORY_BYTES);
        let mut config = Config::new();
        config
            .wasm_component_model(true)
            .epoch_interruption(true)
            .cranelift_opt_level(OptLevel::Speed)
            .memory_reservation(MAX_MEMORY_BYTES as u64)
            .memory_guard_size(32 << 20)
            .allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
        let engine = Engine::new(&config)
            .map_err(|e| WasmError::engine_from("cannot create the engine", e))?;
        // Compiled code is loaded from here without checks (`Component::deserialize_file`):
        // a directory anyone else can write into would run their code.
        wedge_core::private_fs::ensure_private_dir(cache_dir).map_err(|e| {
            WasmError::io_from(format!("cannot use cache dir {}", cache_dir.display()), e)
        })?;
        let mut hasher = DefaultHasher::new();
        engine.precompile_compatibility_hash().hash(&mut hasher);
        let engine_key = format!("{:016x}", hasher.finish());
        let ticker = Ticker::start(engine.clone())
            .map_err(|e| WasmError::engine_from("cannot start epoch thread", e))?;
        Ok(WasmEngine {
            engine,
            cache_dir: cache_dir.to_owned(),
            engine_key,
            loaded: Arc::default(),
            ticker: Arc::new(ticker),
        })
    }

    /// Starts the epoch clock (if no other call holds it running) until the guard is
    /// dropped: hold it across guest code whose deadline is set in epochs.
    pub fn guest_running(&self) -> GuestRunning {
        let (lock, wake) = &*self.ticker.state;
        let mut s = clock(lock);
        s.running += 1;
        if s.running == 1 {
            wake.notify_one();
        }
        GuestRunning {
            state: self.ticker.state.clone(),
        }
    }

    /// Epochs advanced since the engine started: zero growth while no guest code runs.
    pub fn epoch_ticks(&self) -> u64 {
        clock(&self.ticker.state.0).ticks
    }

    /// The wasmtime engine.
    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// Epoch ticks that cover `timeout` (at least one).
    pub fn ticks_for(timeout: Duration) -> u64 {
        (timeout.as_micros() / EPOCH_TICK.as_micros()).max(1) as u64
    }

    /// Compiles `bytes`, or loads the cached compilation of the same bytes for this engine
    /// (from memory when another module already uses that code, else from the disk cache).
    pub fn component(&self, bytes: &[u8]) -> Result<(Component, CompileSource), WasmError> {
        self.component_with_digest(bytes)
            .map(|(component, source, _)| (component, source))
    }

    /// [`WasmEngine::component`], also returning the code digest that names it in memory.
    pub fn component_with_digest(
        &self,
        bytes: &[u8],
    ) -> Result<(Component, CompileSource, String), WasmError> {
        let digest = hex(&Sha256::digest(bytes));
        if let Some(component) = self.loaded().get(&digest) {
            return Ok((component.clone(), CompileSource::Cached, digest));
        }
        let (component, source) = self.load_or_compile(bytes, &digest)?;
        self.loaded().insert(digest.clone(), component.clone());
        Ok((component, source, digest))
    }

    fn loaded(&self) -> std::sync::MutexGuard<'_, HashMap<String, Component>> {
        self.loaded.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Keeps in memory only the components whose digests are in `in_use`; the disk cache
    /// stays. Called by the registry after a deploy or removal.
    pub fn retain_components(&self, in_use: &std::collections::HashSet<String>) {
        self.loaded().retain(|digest, _| in_use.contains(digest));
    }

    fn load_or_compile(
        &self,
        bytes: &[u8],
        digest: &str,
    ) -> Result<(Component, CompileSource), WasmError> {
        let cached = self
            .cache_dir
            .join(format!("{digest}-{}.cwasm", self.engine_key));
        if cached.is_file() {
            // SAFETY: the file is in Wedge's own cache directory, written only by
            // `precompile_component` of an engine with the same compatibility hash (part of the
            // file name), and named by the SHA-256 of the source it was compiled from.
            match unsafe { Component::deserialize_file(&self.engine, &cached) } {
                Ok(component) => return Ok((component, CompileSource::Cached)),
                Err(e) => {
                    tracing::warn!(file = %cached.display(), "cached module unusable, recompiling: {e:#}");
                }
            }
        }
        let started = Instant::now();
        let compiled = self
            .engine
            .precompile_component(bytes)
            .map_err(|e| WasmError::invalid_from("cannot compile the component", e))?;
        if let Err(e) = wedge_core::private_fs::write_atomically(&cached, &compiled) {
            tracing::warn!(file = %cached.display(), "cannot cache compiled module: {e}");
        }
        // SAFETY: `compiled` was produced just now by this engine's `precompile_component`.
        let component = unsafe { Component::deserialize(&self.engine, &compiled) }
            .map_err(|e| WasmError::invalid_from("cannot compile the component", e))?;
        tracing::debug!(
            elapsed_ms = started.elapsed().as_millis() as u64,
            "component compiled"
        );
        Ok((component, CompileSource::Compiled))
    }
}

/// Lower-case hex of a digest.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_epoch_clock_runs_only_while_guest_code_may() {
        let dir = tempfile::tempdir().unwrap();
        let engine = WasmEngine::new(dir.path(), &EngineSettings { max_instances: 4 }).unwrap();
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(engine.epoch_ticks(), 0, "idle: the clock stands still");
        let guard = engine.guest_running();
        let nested = engine.guest_running();
        std::thread::sleep(Duration::from_millis(50));
        drop(nested);
        std::thread::sleep(Duration::from_millis(20));
        let ran = engine.epoch_ticks();
        assert!(ran >= 5, "ticks while a guest runs: {ran}");
        drop(guard);
        std::thread::sleep(Duration::from_millis(10));
        let stopped = engine.epoch_ticks();
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(engine.epoch_ticks(), stopped, "stops with the last guard");
    }
}
