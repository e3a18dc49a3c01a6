//! Errors of the Wasm host.

/// What went wrong in the Wasm host.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WasmError {
    /// The engine could not be set up.
    #[error("wasm engine: {0}")]
    Engine(String),
    /// A file could not be read or written.
    #[error("{0}")]
    Io(String),
    /// The bytes are not a valid component, or not for the declared world.
    #[error("invalid module: {0}")]
    Invalid(String),
    /// The module's `init` refused its configuration.
    #[error("module init failed: {0}")]
    Init(String),
    /// No module of that name.
    #[error("no module named {0:?}")]
    NotFound(String),
    /// The module is waiting out its restart back-off after failures.
    #[error(
        "module {module:?} is restarting after {failures} failure(s); next attempt in {retry_in_ms} ms (last error: {last_error})"
    )]
    Restarting {
        /// Module name.
        module: String,
        /// Consecutive failures.
        failures: u32,
        /// Time until the next attempt.
        retry_in_ms: u64,
        /// Why it last failed.
        last_error: String,
    },
    /// The call trapped or ran out of time or memory; the instance was discarded.
    #[error("module {module:?} trapped: {reason}")]
    Trap {
        /// Module name.
        module: String,
        /// The trap, e.g. `wasm trap: interrupt` for a deadline.
        reason: String,
    },
    /// The guest returned an error.
    #[error("{0}")]
    Guest(String),
    /// Deploying the module would exceed the node's guest memory budget.
    #[error(
        "module {module:?} asks for {asked_mib} MiB of memory, but {reserved_mib} MiB of the node's guest memory budget of {budget_mib} MiB (wedge.modules.memoryBudgetMiB) is reserved by other modules"
    )]
    MemoryBudget {
        /// Module name.
        module: String,
        /// Its manifest's memory limit.
        asked_mib: u64,
        /// Reserved by the other modules.
        reserved_mib: u64,
        /// The node's budget.
        budget_mib: u64,
    },
    /// The module was stopped (removed, replaced or shut down) while the call ran.
    #[error("module {0:?} was stopped")]
    Stopped(String),
    /// Persisting the module store failed.
    #[error("module store: {0}")]
    Store(String),
}
