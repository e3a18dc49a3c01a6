//! The node's deployed modules: deploy, upgrade, remove, list, and reload after a restart.
//!
//! A module's file is kept under its content hash in the modules directory and its record in
//! the `wasm_modules` table. Deploying validates everything first (package, manifest,
//! compilation, world, `init`), then writes the file, commits the record, and only then swaps
//! the live module. A failure at any step leaves what was deployed untouched.
//!
//! Swaps are atomic for callers: the registry hands out `Arc`s, so a call that started on the
//! old version finishes there and every later call goes to the new one — no call is lost or
//! handled twice.
//!
//! Names are owned. The operator's modules (`wedge module deploy`, the module directory) have
//! manifest names, `[a-z0-9-]`. A module a Wasm pod brings is deployed under a name of its
//! pod's ([`pod_module_name`]: `<manifest>.<container>.<pod uid>`), which no manifest name can
//! be, so a pod never replaces, shadows or removes an operator's module or another pod's; and
//! a pod's mapper is refused for a protocol another module already drives.
//!
//! No lock is held while guest code runs: a deploy reserves its memory in the node's budget
//! and instantiates (running `init`, under its deadline) on its own, and only the commit and
//! swap are serialised, so one slow `init` delays no other deploy or removal.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use sha2::{Digest, Sha256};
use wedge_core::Store;
use wedge_core::metrics::{MetricsSource, PromWriter};

use crate::engine::{WasmEngine, hex};
use crate::error::WasmError;
use crate::guest_log::LogPolicy;
use crate::handler::HandlerModule;
use crate::lifecycle::ModuleStatus;
use crate::manifest::{Manifest, ModuleKind};
use crate::mapper::MapperModule;
use crate::memory::{MemoryBudget, Reservation};
use crate::package;
use crate::services::HostServices;

/// Migrations of the module store's table.
pub const MIGRATIONS: &[&str] = &["CREATE TABLE IF NOT EXISTS wasm_modules (
        name TEXT PRIMARY KEY NOT NULL,
        version TEXT NOT NULL,
        kind TEXT NOT NULL,
        sha256 TEXT NOT NULL,
        deployed_at INTEGER NOT NULL
    )"];

/// The module name of the module a pod's container brings: its manifest name, the container
/// and the pod's UID, joined by `.` (a character no manifest name has).
pub fn pod_module_name(manifest: &str, container: &str, pod_uid: &str) -> String {
    format!("{manifest}.{container}.{pod_uid}")
}

/// Whether `name` is a pod's module rather than one the operator deployed.
pub fn is_pod_module(name: &str) -> bool {
    name.contains('.')
}

/// The pod container a module is deployed for (see [`WasmHost::deploy_for_pod`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodModule {
    /// The pod's UID.
    pub pod_uid: String,
    /// The container's name.
    pub container: String,
}

/// Under which name a module is instantiated.
enum Naming<'a> {
    /// Its manifest's (the operator's deploys).
    Manifest,
    /// A pod's container's.
    Pod(&'a PodModule),
    /// Exactly this one (reloading a record).
    Exact(&'a str),
}

/// A live module.
#[derive(Clone)]
pub enum Deployed {
    /// A twin handler.
    Handler(Arc<HandlerModule>),
    /// A mapper.
    Mapper(Arc<MapperModule>),
}

impl Deployed {
    /// Its status.
    pub fn status(&self) -> ModuleStatus {
        match self {
            Deployed::Handler(h) => h.status(),
            Deployed::Mapper(m) => m.status(),
        }
    }

    fn manifest(&self) -> &Manifest {
        match self {
            Deployed::Handler(h) => h.manifest(),
            Deployed::Mapper(m) => m.manifest(),
        }
    }

    /// Its last log lines numbered after `after` (at most
    /// [`RECENT_LINES`](crate::guest_log::RECENT_LINES)), oldest first.
    pub fn log_lines(&self, after: u64) -> Vec<crate::GuestLogLine> {
        match self {
            Deployed::Handler(h) => h.log_lines(after),
            Deployed::Mapper(m) => m.log_lines(after),
        }
    }
}

/// Node-wide limits of guests (`wedge.modules`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GuestLimits {
    /// MiB of guest memory the node grants all modules together (the sum of their manifests'
    /// memory limits).
    pub memory_budget_mib: u32,
    /// How guest log lines are capped and rate-limited.
    pub log: LogPolicy,
}

impl Default for GuestLimits {
    fn default() -> GuestLimits {
        GuestLimits {
            memory_budget_mib: 512,
            log: LogPolicy::default(),
        }
    }
}

/// The Wasm host of a node.
pub struct WasmHost {
    engine: WasmEngine,
    services: HostServices,
    dir: PathBuf,
    store: Store,
    modules: RwLock<BTreeMap<String, Deployed>>,
    /// Code digest of each module, to tell the engine which compiled code is still in use.
    code: std::sync::Mutex<BTreeMap<String, String>>,
    /// Serialises the commit and swap of deploy/remove (never held while a guest runs).
    changes: tokio::sync::Mutex<()>,
    limits: GuestLimits,
    budget: Arc<MemoryBudget>,
    /// Each deployed module's share of the budget.
    reservations: std::sync::Mutex<BTreeMap<String, Reservation>>,
}

impl WasmHost {
    /// A host keeping module files in `dir` and records in `store` (whose `wasm_modules` table
    /// must exist: apply [`MIGRATIONS`] first).
    pub fn new(engine: WasmEngine, services: HostServices, dir: &Path, store: Store) -> WasmHost {
        WasmHost {
            engine,
            services,
            dir: dir.to_owned(),
            store,
            modules: RwLock::new(BTreeMap::new()),
            code: std::sync::Mutex::new(BTreeMap::new()),
            changes: tokio::sync::Mutex::new(()),
            limits: GuestLimits::default(),
            budget: MemoryBudget::new(GuestLimits::default().memory_budget_mib),
            reservations: std::sync::Mutex::new(BTreeMap::new()),
        }
    }

    /// The host with `limits` instead of the defaults (before any module is deployed).
    pub fn with_limits(mut self, limits: GuestLimits) -> WasmHost {
        self.budget = MemoryBudget::new(limits.memory_budget_mib);
        self.limits = limits;
        self
    }

    /// The node's guest memory budget.
    pub fn memory_budget(&self) -> &MemoryBudget {
        &self.budget
    }

    fn reservations(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Reservation>> {
        self.reservations.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The engine.
    pub fn engine(&self) -> &WasmEngine {
        &self.engine
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, BTreeMap<String, Deployed>> {
        self.modules.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, BTreeMap<String, Deployed>> {
        self.modules.write().unwrap_or_else(|e| e.into_inner())
    }

    /// Validates and starts a module from its packaged bytes, without persisting it: its
    /// memory limit reserved in the node's budget first, then compiled and instantiated.
    async fn instantiate(
        &self,
        bytes: &[u8],
        naming: Naming<'_>,
    ) -> Result<(Deployed, String, String, Reservation), WasmError> {
        let mut manifest = package::extract(bytes)
            .map_err(|e| WasmError::invalid_from("cannot package the component", e))?;
        match naming {
            Naming::Manifest => {}
            Naming::Pod(pod) => {
                manifest.name = pod_module_name(&manifest.name, &pod.container, &pod.pod_uid);
                if let Some(protocol) = manifest.protocol.as_deref()
                    && manifest.kind == ModuleKind::Mapper
                    && let Some(holder) = self.mapper_name_for(protocol)
                    && holder != manifest.name
                {
                    return Err(WasmError::invalid(format!(
                        "protocol {protocol:?} is already driven by module {holder:?}: a pod's \
                         mapper cannot take over a protocol"
                    )));
                }
            }
            Naming::Exact(name) => manifest.name = name.to_owned(),
        }
        let reservation = self
            .budget
            .reserve(&manifest.name, manifest.limits.memory_mib)?;
        let sha256 = hex(&Sha256::digest(bytes));
        let code = package::without_manifest(bytes)
            .map_err(|e| WasmError::invalid_from("cannot package the component", e))?;
        let (component, _, code_digest) = self.engine.component_with_digest(&code)?;
        let deployed = match manifest.kind {
            ModuleKind::TwinHandler => Deployed::Handler(Arc::new(
                HandlerModule::new(
                    &self.engine,
                    manifest,
                    sha256.clone(),
                    &component,
                    self.services.clone(),
                    self.limits.log,
                )
                .await?,
            )),
            ModuleKind::Mapper => Deployed::Mapper(Arc::new(
                MapperModule::start(
                    &self.engine,
                    manifest,
                    sha256.clone(),
                    &component,
                    self.services.clone(),
                    self.limits.log,
                )
                .await?,
            )),
        };
        Ok((deployed, sha256, code_digest, reservation))
    }

    /// Records which code `name` runs (`None`: removed) and releases code nobody runs.
    fn track_code(&self, name: &str, digest: Option<String>) {
        {
            let mut code = self.code.lock().unwrap_or_else(|e| e.into_inner());
            match digest {
                Some(d) => code.insert(name.to_owned(), d),
                None => code.remove(name),
            };
        }
        self.release_unused_code();
    }

    /// Lets the engine drop compiled code that no deployed module runs (e.g. loaded for a
    /// module whose deploy was refused, or replaced by an upgrade).
    fn release_unused_code(&self) {
        let in_use: std::collections::HashSet<String> = self
            .code
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .cloned()
            .collect();
        self.engine.retain_components(&in_use);
    }

    /// Deploys or upgrades a module from a packaged component (see `package`). Returns its
    /// status. On any error nothing already deployed changes.
    pub async fn deploy(&self, bytes: Vec<u8>) -> Result<ModuleStatus, WasmError> {
        self.deploy_named(bytes, Naming::Manifest).await
    }

    /// Deploys the module a pod's container brings, under the pod's own name for it
    /// ([`pod_module_name`]): it can replace only that container's earlier module. A mapper
    /// for a protocol another module drives is refused.
    pub async fn deploy_for_pod(
        &self,
        bytes: Vec<u8>,
        pod: &PodModule,
    ) -> Result<ModuleStatus, WasmError> {
        self.deploy_named(bytes, Naming::Pod(pod)).await
    }

    async fn deploy_named(
        &self,
        bytes: Vec<u8>,
        naming: Naming<'_>,
    ) -> Result<ModuleStatus, WasmError> {
        let (deployed, sha256, code_digest, reservation) =
            match self.instantiate(&bytes, naming).await {
                Ok(ok) => ok,
                Err(e) => {
                    self.release_unused_code();
                    return Err(e);
                }
            };
        let _serial = self.changes.lock().await;
        let manifest = deployed.manifest().clone();
        let file = self.file_of(&sha256);
        if !file.is_file() {
            write_atomically(&file, &bytes)?;
        }
        let record = manifest.clone();
        let sha = sha256.clone();
        let previous_sha = self
            .store
            .write(move |c| {
                let previous: Option<String> = c
                    .query_row(
                        "SELECT sha256 FROM wasm_modules WHERE name = ?1",
                        [&record.name],
                        |r| r.get(0),
                    )
                    .ok();
                c.execute(
                    "INSERT INTO wasm_modules (name, version, kind, sha256, deployed_at)
                     VALUES (?1, ?2, ?3, ?4, ?5)
                     ON CONFLICT(name) DO UPDATE SET version = excluded.version,
                        kind = excluded.kind, sha256 = excluded.sha256,
                        deployed_at = excluded.deployed_at",
                    rusqlite::params![
                        record.name,
                        record.version,
                        record.kind.as_str(),
                        sha,
                        wedge_core::time::now_ms()
                    ],
                )?;
                Ok(previous)
            })
            .await
            .map_err(WasmError::store)?;
        let status = deployed.status();
        let replaced = self.write().insert(manifest.name.clone(), deployed.clone());
        let old_share = self
            .reservations()
            .insert(manifest.name.clone(), reservation);
        self.track_code(&manifest.name, Some(code_digest));
        if let Some(old) = replaced {
            self.retire(old, &deployed).await;
        }
        drop(old_share);
        if let Some(previous) = previous_sha.filter(|p| *p != sha256) {
            let _ = std::fs::remove_file(self.file_of(&previous));
        }
        tracing::info!(
            module = %manifest.name,
            version = %manifest.version,
            kind = manifest.kind.as_str(),
            "module deployed"
        );
        Ok(status)
    }

    /// Stops a replaced module. A replaced mapper is stopped first (a device is never driven by
    /// two instances at once), then its devices are handed to its successor.
    async fn retire(&self, old: Deployed, new: &Deployed) {
        let Deployed::Mapper(old) = old else {
            return;
        };
        let devices = old.device_definitions().await.unwrap_or_default();
        old.stop_async().await;
        let Deployed::Mapper(new) = new else {
            return;
        };
        for device in devices {
            let id = device.id.clone();
            if let Err(e) = new.add_device(device).await {
                tracing::warn!(module = %new.manifest().name, device = %id, "device not moved to the upgraded mapper: {e}");
            }
        }
    }

    /// Removes a module: stops it, forgets its record and deletes its file.
    pub async fn remove(&self, name: &str) -> Result<(), WasmError> {
        let _serial = self.changes.lock().await;
        if !self.read().contains_key(name) {
            return Err(WasmError::NotFound(name.to_owned()));
        }
        let key = name.to_owned();
        let sha: Option<String> = self
            .store
            .write(move |c| {
                let sha = c
                    .query_row(
                        "SELECT sha256 FROM wasm_modules WHERE name = ?1",
                        [&key],
                        |r| r.get(0),
                    )
                    .ok();
                c.execute("DELETE FROM wasm_modules WHERE name = ?1", [&key])?;
                Ok(sha)
            })
            .await
            .map_err(WasmError::store)?;
        let removed = self.write().remove(name);
        self.track_code(name, None);
        if let Some(Deployed::Mapper(m)) = removed {
            m.stop_async().await;
        }
        self.reservations().remove(name);
        if let Some(sha) = sha {
            let _ = std::fs::remove_file(self.file_of(&sha));
        }
        tracing::info!(module = name, "module removed");
        Ok(())
    }

    /// Reloads every recorded module after a restart, and deletes files no record points to.
    /// A module that no longer loads is reported and skipped; the others still start.
    pub async fn load_persisted(&self) -> Vec<(String, Result<ModuleStatus, WasmError>)> {
        let records: Vec<(String, String)> = match self
            .store
            .read(|c| {
                let mut stmt = c.prepare("SELECT name, sha256 FROM wasm_modules ORDER BY name")?;
                let rows = stmt
                    .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
                    .collect::<Result<Vec<_>, _>>()?;
                Ok(rows)
            })
            .await
        {
            Ok(rows) => rows,
            Err(e) => return vec![("*".to_owned(), Err(WasmError::store(e)))],
        };
        let mut results = Vec::new();
        for (name, sha) in &records {
            let outcome = match std::fs::read(self.file_of(sha)) {
                Ok(bytes) => match self.instantiate(&bytes, Naming::Exact(name)).await {
                    Ok((deployed, _, code, reservation)) => {
                        let status = deployed.status();
                        self.write().insert(name.clone(), deployed);
                        self.reservations().insert(name.clone(), reservation);
                        self.track_code(name, Some(code));
                        Ok(status)
                    }
                    Err(e) => Err(e),
                },
                Err(e) => Err(WasmError::io_from(
                    format!("module file {} unreadable", self.file_of(sha).display()),
                    e,
                )),
            };
            if let Err(e) = &outcome {
                tracing::error!(module = %name, "module not loaded: {e}");
            }
            results.push((name.clone(), outcome));
        }
        self.remove_orphan_files(&records);
        results
    }

    fn remove_orphan_files(&self, records: &[(String, String)]) {
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            let is_module = path.extension().is_some_and(|e| e == "wasm");
            let known = path
                .file_stem()
                .and_then(|s| s.to_str())
                .is_some_and(|stem| records.iter().any(|(_, sha)| sha == stem));
            if is_module && !known {
                let _ = std::fs::remove_file(&path);
            }
        }
    }

    /// Deploys every `*.wasm` of `dir` not already deployed with the same content (the
    /// configured module directory, loaded at start).
    pub async fn load_directory(
        &self,
        dir: &Path,
    ) -> Vec<(PathBuf, Result<ModuleStatus, WasmError>)> {
        let mut files: Vec<PathBuf> = match std::fs::read_dir(dir) {
            Ok(entries) => entries
                .flatten()
                .map(|e| e.path())
                .filter(|p| p.extension().is_some_and(|e| e == "wasm"))
                .collect(),
            Err(e) => {
                return vec![(
                    dir.to_owned(),
                    Err(WasmError::io_from(
                        format!("cannot read module directory {}", dir.display()),
                        e,
                    )),
                )];
            }
        };
        files.sort();
        let mut results = Vec::new();
        for file in files {
            let outcome = match std::fs::read(&file) {
                Ok(bytes) => {
                    let sha = hex(&Sha256::digest(&bytes));
                    let same = self
                        .read()
                        .values()
                        .find(|d| d.status().sha256 == sha)
                        .map(|d| d.status());
                    match same {
                        Some(status) => Ok(status),
                        None => self.deploy(bytes).await,
                    }
                }
                Err(e) => Err(WasmError::io_from(
                    format!("cannot read {}", file.display()),
                    e,
                )),
            };
            if let Err(e) = &outcome {
                tracing::error!(file = %file.display(), "module not loaded: {e}");
            }
            results.push((file, outcome));
        }
        results
    }

    /// Every module's status, by name.
    pub fn list(&self) -> Vec<ModuleStatus> {
        self.read().values().map(Deployed::status).collect()
    }

    /// A module by name.
    pub fn get(&self, name: &str) -> Option<Deployed> {
        self.read().get(name).cloned()
    }

    /// Twin handlers bound to `device`, in name order.
    pub fn handlers_for(&self, device: &str) -> Vec<Arc<HandlerModule>> {
        self.read()
            .values()
            .filter_map(|d| match d {
                Deployed::Handler(h) if h.binds(device) => Some(h.clone()),
                _ => None,
            })
            .collect()
    }

    /// The mapper driving `protocol`: the operator's when there is one (a pod's mapper never
    /// shadows it).
    pub fn mapper_for_protocol(&self, protocol: &str) -> Option<Arc<MapperModule>> {
        let modules = self.read();
        let drivers: Vec<(&String, &Arc<MapperModule>)> = modules
            .iter()
            .filter_map(|(name, d)| match d {
                Deployed::Mapper(m) if m.protocol() == protocol => Some((name, m)),
                _ => None,
            })
            .collect();
        drivers
            .iter()
            .find(|(name, _)| !is_pod_module(name))
            .or(drivers.first())
            .map(|(_, m)| Arc::clone(m))
    }

    /// The name of the module driving `protocol`, if one does.
    fn mapper_name_for(&self, protocol: &str) -> Option<String> {
        self.mapper_for_protocol(protocol).map(|m| m.status().name)
    }

    /// Stops every mapper thread (at shutdown): all are cancelled first, then each is
    /// given its bounded wait.
    pub fn shutdown(&self) {
        for deployed in self.read().values() {
            if let Deployed::Mapper(m) = deployed {
                m.request_stop();
            }
        }
        for deployed in self.read().values() {
            if let Deployed::Mapper(m) = deployed {
                m.stop();
            }
        }
    }

    fn file_of(&self, sha256: &str) -> PathBuf {
        self.dir.join(format!("{sha256}.wasm"))
    }
}

impl MetricsSource for WasmHost {
    fn write_metrics(&self, w: &mut PromWriter) {
        let statuses = self.list();
        type Family = (
            &'static str,
            &'static str,
            &'static str,
            fn(&ModuleStatus) -> f64,
        );
        let families: [Family; 6] = [
            (
                "wedge_wasm_module_calls_total",
                "Calls into a Wasm module.",
                "counter",
                |s| s.calls as f64,
            ),
            (
                "wedge_wasm_module_traps_total",
                "Calls that trapped (deadline, memory, panic).",
                "counter",
                |s| s.traps as f64,
            ),
            (
                "wedge_wasm_module_restarts_total",
                "Re-instantiations after failures.",
                "counter",
                |s| s.restarts as f64,
            ),
            (
                "wedge_wasm_log_lines_dropped_total",
                "Guest log lines dropped over the module's rate (wedge.modules.logLinesPerSecond).",
                "counter",
                |s| s.log_dropped as f64,
            ),
            (
                "wedge_wasm_log_lines_truncated_total",
                "Guest log lines cut at wedge.modules.logLineBytes.",
                "counter",
                |s| s.log_truncated as f64,
            ),
            (
                "wedge_wasm_module_failures",
                "Consecutive failures (0 when healthy).",
                "gauge",
                |s| f64::from(s.failures),
            ),
        ];
        for (name, help, kind, value) in families {
            w.family(name, help, kind);
            for s in &statuses {
                w.sample(name, &[("module", &s.name), ("kind", s.kind)], value(s));
            }
        }
        w.family(
            "wedge_wasm_memory_reserved_bytes",
            "Guest memory reserved by deployed modules' limits.",
            "gauge",
        );
        w.sample(
            "wedge_wasm_memory_reserved_bytes",
            &[],
            (self.budget.reserved_mib() * 1024 * 1024) as f64,
        );
        w.family(
            "wedge_wasm_memory_budget_bytes",
            "The node's guest memory budget (wedge.modules.memoryBudgetMiB).",
            "gauge",
        );
        w.sample(
            "wedge_wasm_memory_budget_bytes",
            &[],
            (self.budget.limit_mib() * 1024 * 1024) as f64,
        );
        w.family(
            "wedge_wasm_module_state",
            "1 for the module's current state.",
            "gauge",
        );
        for s in &statuses {
            w.sample(
                "wedge_wasm_module_state",
                &[("module", &s.name), ("state", s.state.as_str())],
                1.0,
            );
        }
    }
}

fn write_atomically(path: &Path, bytes: &[u8]) -> Result<(), WasmError> {
    let fail = |e| WasmError::io_from(format!("cannot write {}", path.display()), e);
    if let Some(dir) = path.parent() {
        wedge_core::private_fs::ensure_private_dir(dir).map_err(fail)?;
    }
    wedge_core::private_fs::write_atomically(path, bytes).map_err(fail)
}
