//! Wasm pods: a pod whose `runtimeClassName` is Wedge's Wasm class, or whose images all name
//! Wasm modules (`wasm://<module>`), runs its containers as modules in the node's Wasm host
//! instead of on Docker, with the same status reporting.
//!
//! edged depends on no other module, so it reaches the Wasm host through [`WasmPods`], which
//! the `wedge` binary implements over its host. A container's image says where its module
//! comes from ([`ModuleRef`]): the node's module store, or a ConfigMap key holding the module
//! file (fetched through metamanager, so it is cached for offline starts).

use std::future::Future;
use std::pin::Pin;

/// A boxed future, as the trait returns them.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Runtime class that marks a pod as a Wasm pod unless configured otherwise.
pub const DEFAULT_RUNTIME_CLASS: &str = "wedge-wasm";

/// Where a Wasm container's module comes from, from its `image`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ModuleRef {
    /// `wasm://<name>` or a bare `<name>`: a module already in the node's module store.
    Store(String),
    /// `configmap://<configmap>/<key>`: the module file in a ConfigMap's `binaryData` key.
    ConfigMap {
        /// ConfigMap name, in the pod's namespace.
        name: String,
        /// Key holding the module file.
        key: String,
    },
}

impl ModuleRef {
    /// Reads a container image as a module reference.
    pub fn parse(image: &str) -> Result<ModuleRef, String> {
        if let Some(rest) = image.strip_prefix("configmap://") {
            let (name, key) = rest
                .split_once('/')
                .filter(|(n, k)| !n.is_empty() && !k.is_empty())
                .ok_or_else(|| {
                    format!("image {image:?}: expected configmap://<configmap>/<key>")
                })?;
            return Ok(ModuleRef::ConfigMap {
                name: name.to_owned(),
                key: key.to_owned(),
            });
        }
        if image.contains("://") && !image.starts_with("wasm://") {
            return Err(format!(
                "image {image:?}: a Wasm module comes from wasm://<module> (the node's module store) or configmap://<configmap>/<key>"
            ));
        }
        let name = image.trim_start_matches("wasm://");
        if name.is_empty() || name.contains('/') {
            return Err(format!("image {image:?}: not a module name"));
        }
        Ok(ModuleRef::Store(name.to_owned()))
    }

    /// Whether an image names a Wasm module rather than a container image.
    pub fn is_wasm_image(image: &str) -> bool {
        image.starts_with("wasm://") || image.starts_with("configmap://")
    }
}

/// A module to run for a container.
pub enum ModuleSource {
    /// A module already deployed on the node, by name.
    Store(String),
    /// A packaged module file to deploy (the pod owns the deployment).
    File(Vec<u8>),
}

/// What the Wasm host says of a module.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModuleState {
    /// Running (instantiated or ready for its next call).
    pub running: bool,
    /// Re-instantiations after failures.
    pub restarts: u64,
    /// Why it last failed, if it did.
    pub last_error: Option<String>,
    /// SHA-256 of the deployed file, reported as the image id.
    pub sha256: String,
}

/// The node's Wasm host, as edged uses it.
pub trait WasmPods: Send + Sync + 'static {
    /// Makes the module available; returns its name.
    fn start(&self, source: ModuleSource) -> BoxFuture<'_, Result<String, String>>;
    /// Removes a module a pod deployed.
    fn stop(&self, name: &str) -> BoxFuture<'_, Result<(), String>>;
    /// The module's state; `None` when it is not deployed.
    fn state(&self, name: &str) -> Option<ModuleState>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn images_name_modules() {
        assert_eq!(
            ModuleRef::parse("wasm://virtual-thermometer"),
            Ok(ModuleRef::Store("virtual-thermometer".into()))
        );
        assert_eq!(
            ModuleRef::parse("threshold"),
            Ok(ModuleRef::Store("threshold".into()))
        );
        assert_eq!(
            ModuleRef::parse("configmap://modules/limit.wasm"),
            Ok(ModuleRef::ConfigMap {
                name: "modules".into(),
                key: "limit.wasm".into()
            })
        );
        assert!(ModuleRef::parse("configmap://modules").is_err());
        assert!(ModuleRef::parse("https://example.invalid/x.wasm").is_err());
        assert!(ModuleRef::parse("library/busybox").is_err());
        assert!(ModuleRef::is_wasm_image("wasm://x"));
        assert!(!ModuleRef::is_wasm_image("busybox:1"));
    }
}
