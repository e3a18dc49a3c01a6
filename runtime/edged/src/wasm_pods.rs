//! Wasm pods: a pod whose `runtimeClassName` is Wedge's Wasm class, or whose images all name
//! Wasm modules (`wasm://<module>`), runs its containers as modules in the node's Wasm host
//! instead of on Docker, with the same status reporting.
//!
//! edged depends on no other module, so it reaches the Wasm host through [`WasmPods`], which
//! the `wedge` binary implements over its host. A container's image says where its module
//! comes from ([`ModuleRef`]): the node's module store, a ConfigMap key holding the module
//! file (fetched through metamanager, so it is cached for offline starts), or an HTTPS URL
//! pinned by SHA-256 (fetched and cached by [`crate::module_fetch`]).

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
    /// `https://<host>[:port]/<path>@sha256:<hex>`: a module file downloaded over HTTPS. The
    /// digest pins the content, so what runs is what the pod's author hashed, whoever serves
    /// it, and a cached copy can be trusted without asking the server again.
    Https {
        /// The URL, without the `@sha256:` pin.
        url: String,
        /// The pinned SHA-256 of the module file: 64 lowercase hex digits.
        sha256: String,
    },
}

/// What a container image naming a Wasm module may look like, for error messages.
const ACCEPTED_FORMS: &str = "a Wasm module comes from wasm://<module> (the node's module store), configmap://<configmap>/<key> or https://<host>[:port]/<path>@sha256:<64 lowercase hex digits>";

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
        if image.starts_with("https://") {
            return parse_https(image);
        }
        if image.starts_with("http://") {
            return Err(format!(
                "image {image:?}: modules are fetched over HTTPS only; {ACCEPTED_FORMS}"
            ));
        }
        if image.contains("://") && !image.starts_with("wasm://") {
            return Err(format!("image {image:?}: {ACCEPTED_FORMS}"));
        }
        let name = image.trim_start_matches("wasm://");
        // `.` only appears in the names of modules pods brought: another pod's are not
        // this pod's to run (or read the logs of).
        if name.is_empty() || name.contains('/') || name.contains('.') {
            return Err(format!("image {image:?}: not a module name"));
        }
        Ok(ModuleRef::Store(name.to_owned()))
    }

    /// Whether an image names a Wasm module rather than a container image. Any `https://` or
    /// `http://` image counts: no container image reference has a scheme, so such an image can
    /// only be meant as a module, and [`ModuleRef::parse`] then says precisely what is wrong
    /// with it instead of the engine refusing an odd image name.
    pub fn is_wasm_image(image: &str) -> bool {
        ["wasm://", "configmap://", "https://", "http://"]
            .iter()
            .any(|scheme| image.starts_with(scheme))
    }
}

/// `https://<host>[:port]/<path>@sha256:<hex>`, split at the last `@sha256:` (as an OCI
/// digest reference is).
fn parse_https(image: &str) -> Result<ModuleRef, String> {
    let Some((url, sha256)) = image.rsplit_once("@sha256:") else {
        return Err(format!(
            "image {image:?}: an https:// module must be pinned by its digest (append @sha256:<64 lowercase hex digits>); {ACCEPTED_FORMS}"
        ));
    };
    if sha256.len() != 64
        || !sha256
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    {
        return Err(format!(
            "image {image:?}: the digest after @sha256: must be 64 lowercase hex digits, not {sha256:?}"
        ));
    }
    let uri: hyper::Uri = url
        .parse()
        .map_err(|e| format!("image {image:?}: {url:?} is not a URL: {e}"))?;
    let authority = uri.authority().map(|a| a.as_str()).unwrap_or_default();
    if uri.host().is_none_or(str::is_empty) || authority.contains('@') {
        return Err(format!(
            "image {image:?}: the URL needs a host (and no user:password@); {ACCEPTED_FORMS}"
        ));
    }
    if uri.path().len() < 2 {
        return Err(format!(
            "image {image:?}: the URL needs a path to the module file; {ACCEPTED_FORMS}"
        ));
    }
    Ok(ModuleRef::Https {
        url: url.to_owned(),
        sha256: sha256.to_owned(),
    })
}

/// A module to run for a container.
pub enum ModuleSource {
    /// A module already deployed on the node, by name.
    Store(String),
    /// A packaged module file to deploy for a pod's container, which owns the deployment: it
    /// is deployed under a name of the pod's, so it never replaces or removes a module the
    /// operator or another pod deployed.
    File {
        /// The packaged module.
        bytes: Vec<u8>,
        /// The pod's UID.
        pod_uid: String,
        /// The container's name.
        container: String,
    },
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
    /// The lines the module wrote to its guest log after line number `after` (0: every line
    /// still kept), oldest first: a Wasm container's `kubectl logs`. `None` when the module
    /// is not deployed; a host that keeps no log answers with no lines.
    fn log_lines(&self, name: &str, after: u64) -> Option<Vec<ModuleLogLine>> {
        let _ = after;
        self.state(name).map(|_| Vec::new())
    }
}

/// One line a module wrote through its log import.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModuleLogLine {
    /// Its number, counting on across the module's instances: a reader asks for what came
    /// after the last one it saw.
    pub seq: u64,
    /// When it was written, Unix ms.
    pub unix_ms: u64,
    /// `trace`, `debug`, `info`, `warn` or `error`.
    pub level: String,
    /// The line, as the host kept it (escaped and capped).
    pub text: String,
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
        // Another pod's module (its name has dots) is not a store module.
        assert!(ModuleRef::parse("wasm://threshold.limit.0f3c").is_err());
        assert!(ModuleRef::parse("library/busybox").is_err());
        assert!(ModuleRef::is_wasm_image("wasm://x"));
        assert!(!ModuleRef::is_wasm_image("busybox:1"));
    }

    const PIN: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    #[test]
    fn https_images_are_pinned_by_sha256() {
        assert_eq!(
            ModuleRef::parse(&format!("https://example.com/m/limit.wasm@sha256:{PIN}")),
            Ok(ModuleRef::Https {
                url: "https://example.com/m/limit.wasm".into(),
                sha256: PIN.into()
            })
        );
        // A port, a query and an `@` in the path: the split is at the last `@sha256:`.
        assert_eq!(
            ModuleRef::parse(&format!(
                "https://127.0.0.1:8443/a@sha256:x/m.wasm?v=1@sha256:{PIN}"
            )),
            Ok(ModuleRef::Https {
                url: "https://127.0.0.1:8443/a@sha256:x/m.wasm?v=1".into(),
                sha256: PIN.into()
            })
        );
        assert!(ModuleRef::is_wasm_image(&format!(
            "https://example.com/m.wasm@sha256:{PIN}"
        )));
    }

    #[test]
    fn bad_https_images_are_refused_naming_the_accepted_forms() {
        let err = |image: &str| ModuleRef::parse(image).unwrap_err();
        let unpinned = err("https://example.com/x.wasm");
        assert!(unpinned.contains("must be pinned"), "{unpinned}");
        for message in [&unpinned, &err("ftp://example.com/x.wasm")] {
            for form in [
                "wasm://<module>",
                "configmap://<configmap>/<key>",
                "https://<host>",
            ] {
                assert!(message.contains(form), "{message}");
            }
        }
        let plain = err(&format!("http://example.com/x.wasm@sha256:{PIN}"));
        assert!(plain.contains("HTTPS only"), "{plain}");
        assert!(ModuleRef::is_wasm_image("http://example.com/x.wasm"));
        for digest in [
            &PIN[1..],
            &PIN.to_uppercase(),
            &format!("{}g", &PIN[1..]),
            "",
        ] {
            let message = err(&format!("https://example.com/x.wasm@sha256:{digest}"));
            assert!(message.contains("64 lowercase hex digits"), "{message}");
        }
        for url in [
            "https://example.com",
            "https://example.com/",
            "https://u:p@example.com/x.wasm",
        ] {
            let message = err(&format!("{url}@sha256:{PIN}"));
            assert!(message.contains("the URL needs"), "{url}: {message}");
        }
        let message = err(&format!("https:///x.wasm@sha256:{PIN}"));
        assert!(message.contains("is not a URL"), "{message}");
    }
}
