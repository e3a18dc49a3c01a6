//! Keeping the node's Wasm mappers in step with its device definitions and desired values,
//! level-triggered.
//!
//! devicetwin calls the hooks from its own loop and must not wait for a mapper (a mapper call
//! may block on device I/O up to its deadline), so a hook only records what changed: the
//! definition (or its removal), a pending desired value, and the device id in the *dirty set*
//! of every mapper concerned. One worker per mapper takes ids from its set and makes the calls
//! that bring the mapper to the recorded state: let go of a device it should not drive; add a
//! device it lacks (or whose definition changed); then write the device's pending desired
//! values. A device is therefore always added before its desired values are written, and
//! removed after them. Nothing queues without bound: the sets hold each device at most once,
//! and a value desired twice before the mapper takes it is written once, the latest. A call
//! looks its mapper up by name when it runs, so it reaches the instance deployed by then.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::{Notify, oneshot};
use wedge_devicetwin::definition::DeviceDefinition;
use wedge_wasm::{MapperModule, TwinValue, WasmHost};

use super::{Definitions, lock, mapper_for, mapper_named, to_wasm};

/// A desired value waiting to be written: (value, twin type).
type Pending = (String, String);

/// What one mapper's worker has to look at.
#[derive(Default)]
struct Work {
    dirty: BTreeSet<String>,
    /// Callers of [`Drive::settle`] waiting for the set to empty.
    settled: Vec<oneshot::Sender<()>>,
    wake: Arc<Notify>,
    /// Whether a worker task runs for it.
    running: bool,
    /// Whether the worker is in the middle of a device.
    busy: bool,
}

/// The recorded state, and the work of every mapper.
#[derive(Default)]
struct State {
    /// Desired values not written yet, by device and property.
    desired: BTreeMap<String, BTreeMap<String, Pending>>,
    /// By mapper name.
    work: HashMap<String, Work>,
}

/// The mapper side of the Wasm hooks.
pub(super) struct Drive {
    host: Arc<WasmHost>,
    definitions: Definitions,
    state: Mutex<State>,
    runtime: tokio::runtime::Handle,
}

impl Drive {
    pub(super) fn new(host: Arc<WasmHost>, definitions: Definitions) -> Arc<Drive> {
        Arc::new(Drive {
            host,
            definitions,
            state: Mutex::default(),
            runtime: tokio::runtime::Handle::current(),
        })
    }

    fn state(&self) -> MutexGuard<'_, State> {
        lock(&self.state)
    }

    /// Marks `device` for mapper `name` to look at, starting its worker if needed.
    pub(super) fn touch(self: &Arc<Self>, name: &str, device: &str) {
        let start = {
            let mut state = self.state();
            let work = state.work.entry(name.to_owned()).or_default();
            work.dirty.insert(device.to_owned());
            work.wake.notify_one();
            !std::mem::replace(&mut work.running, true)
        };
        if start {
            let drive = self.clone();
            let name = name.to_owned();
            self.runtime.spawn(async move { drive.work(name).await });
        }
    }

    /// Records a desired value of `device` to be written by mapper `name`.
    pub(super) fn desire(self: &Arc<Self>, name: &str, device: &str, key: &str, value: Pending) {
        self.state()
            .desired
            .entry(device.to_owned())
            .or_default()
            .insert(key.to_owned(), value);
        self.touch(name, device);
    }

    /// Records a desired value of `device` that no Wasm mapper drives yet: the mapper deployed
    /// for its protocol later writes it when it is handed the device (one value per twin is
    /// kept, the latest).
    pub(super) fn remember(&self, device: &str, key: &str, value: Pending) {
        self.state()
            .desired
            .entry(device.to_owned())
            .or_default()
            .insert(key.to_owned(), value);
    }

    /// Forgets what was desired of `device` (it was removed).
    pub(super) fn forget(&self, device: &str) {
        self.state().desired.remove(device);
    }

    /// Returns once mapper `name` has looked at everything marked for it so far.
    pub(super) async fn settle(&self, name: &str) {
        let waiting = {
            let mut state = self.state();
            match state.work.get_mut(name) {
                Some(work) if work.busy || !work.dirty.is_empty() => {
                    let (tx, rx) = oneshot::channel();
                    work.settled.push(tx);
                    Some(rx)
                }
                _ => None,
            }
        };
        if let Some(rx) = waiting {
            let _ = rx.await;
        }
    }

    /// The worker of mapper `name`.
    async fn work(self: Arc<Self>, name: String) {
        loop {
            let (next, wake) = {
                let mut state = self.state();
                let work = state.work.entry(name.clone()).or_default();
                let next = work.dirty.pop_first();
                work.busy = next.is_some();
                if next.is_none() {
                    for waiter in work.settled.drain(..) {
                        let _ = waiter.send(());
                    }
                }
                (next, work.wake.clone())
            };
            match next {
                Some(device) => self.reconcile(&name, &device).await,
                None => wake.notified().await,
            }
        }
    }

    /// Brings mapper `name` to the recorded state of `device`.
    async fn reconcile(&self, name: &str, device: &str) {
        let Some(mapper) = mapper_named(&self.host, name) else {
            // Removed meanwhile; a later deploy of a mapper for the protocol gets the device.
            return;
        };
        let definition = lock(&self.definitions).get(device).cloned();
        let chosen = definition.as_ref().and_then(|d| {
            mapper_for(&self.host, &d.protocol).filter(|m| m.manifest().name == name)
        });
        let drives = mapper.devices().iter().any(|d| d == device);
        let Some(definition) = definition.filter(|_| chosen.is_some()) else {
            if drives {
                match mapper.remove_device(device).await {
                    Ok(()) => tracing::info!(mapper = %name, %device, "device no longer driven"),
                    Err(e) => {
                        tracing::warn!(mapper = %name, %device, "mapper failed to let go of the device: {e}")
                    }
                }
            }
            return;
        };
        if !self.add(&mapper, name, &definition).await {
            return;
        }
        let pending = self
            .state()
            .desired
            .get(device)
            .cloned()
            .unwrap_or_default();
        for (key, (value, value_type)) in pending {
            self.write(&mapper, name, device, &key, &value, &value_type)
                .await;
            // Written (or refused for good): no longer pending, unless desired anew meanwhile.
            let mut state = self.state();
            if let Some(values) = state.desired.get_mut(device) {
                if values.get(&key).is_some_and(|(v, _)| *v == value) {
                    values.remove(&key);
                }
                if values.is_empty() {
                    state.desired.remove(device);
                }
            }
        }
    }

    /// Hands `definition` to the mapper unless it drives exactly that already (so re-sent
    /// definitions and upgrades do not reset a device); false when the mapper refused it.
    async fn add(&self, mapper: &MapperModule, name: &str, definition: &DeviceDefinition) -> bool {
        let device = to_wasm(definition);
        if let Ok(driven) = mapper.device_definitions().await
            && driven.contains(&device)
        {
            return true;
        }
        match mapper.add_device(device).await {
            Ok(()) => {
                tracing::info!(mapper = %name, device = %definition.id, "device handed to its mapper");
                super::reporting_notes(name, definition);
                true
            }
            Err(e) => {
                tracing::warn!(
                    mapper = %name,
                    device = %definition.id,
                    protocol = %definition.protocol,
                    "mapper refused the device: {e}"
                );
                false
            }
        }
    }

    async fn write(
        &self,
        mapper: &MapperModule,
        name: &str,
        device: &str,
        key: &str,
        value: &str,
        value_type: &str,
    ) {
        let typed = match TwinValue::from_kubeedge(value, value_type) {
            Ok(v) => v,
            Err(reason) => {
                tracing::warn!(mapper = %name, %device, %key, %value, "desired value not written: {reason}");
                return;
            }
        };
        if let Err(e) = mapper.write_property(device, key, typed).await {
            tracing::warn!(mapper = %name, %device, %key, %value, "desired value not written to the device: {e}");
        }
    }
}
