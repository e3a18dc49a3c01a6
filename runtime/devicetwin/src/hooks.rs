//! How devicetwin reaches code outside it — the node's Wasm twin handlers and mappers —
//! without depending on the Wasm host: the daemon implements [`TwinHooks`].

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use crate::definition::DeviceDefinition;
use crate::effects::DesiredValue;

/// Who proposes a change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Proposer {
    /// A mapper (MQTT `twin/update` or a Wasm `report`).
    Mapper,
    /// A cloud sync.
    Cloud,
}

/// One side of one twin a request wants to write, after validation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProposedChange {
    /// Device id.
    pub device: String,
    /// Twin key.
    pub key: String,
    /// True for `expected`, false for `actual`.
    pub desired: bool,
    /// The proposed value (already valid for `value_type`).
    pub value: String,
    /// The twin's type.
    pub value_type: String,
    /// The value stored now on that side.
    pub previous: Option<String>,
    /// Who proposes it.
    pub proposer: Proposer,
}

/// A hook's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HookVerdict {
    /// Keep the value.
    Accept,
    /// Store this value instead (must be valid for the twin's type).
    Replace(String),
    /// Refuse the whole request (400, with this reason).
    Reject(String),
    /// The hook failed (e.g. a trapping handler): refuse the request with 500 and this reason.
    Failed(String),
}

/// Read access to twins while a hook runs.
pub trait TwinLookup: Send + Sync {
    /// `(expected, actual)` values of a twin, as stored now.
    fn twin(&self, device: &str, key: &str) -> Option<(Option<String>, Option<String>)>;
}

/// A boxed future, for object-safe async hooks.
pub type HookFuture<'a> = Pin<Box<dyn Future<Output = HookVerdict> + Send + 'a>>;

/// What devicetwin calls outside itself.
pub trait TwinHooks: Send + Sync + 'static {
    /// True when some hook wants to review changes of `device` (fast path: false skips
    /// [`TwinHooks::review`] entirely).
    fn reviews(&self, device: &str) -> bool;
    /// Reviews one proposed change; runs inside the update path, before anything is stored.
    fn review(&self, change: ProposedChange, twins: Arc<dyn TwinLookup>) -> HookFuture<'_>;
    /// A desired value differs from the reported one, after its commit.
    fn desired(&self, value: DesiredValue);
    /// A device definition arrived (or changed).
    fn device_defined(&self, definition: DeviceDefinition);
    /// A device was removed.
    fn device_removed(&self, device: &str);
}

/// Hooks that do nothing: no handlers, no mappers.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoHooks;

impl TwinHooks for NoHooks {
    fn reviews(&self, _device: &str) -> bool {
        false
    }
    fn review(&self, _change: ProposedChange, _twins: Arc<dyn TwinLookup>) -> HookFuture<'_> {
        Box::pin(async { HookVerdict::Accept })
    }
    fn desired(&self, _value: DesiredValue) {}
    fn device_defined(&self, _definition: DeviceDefinition) {}
    fn device_removed(&self, _device: &str) {}
}
