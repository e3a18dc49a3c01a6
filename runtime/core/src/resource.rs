//! Edge resource names: `<namespace>/<type>/<name>`, or `<namespace>/<type>` for lists.

use std::fmt;

/// A parsed resource string, borrowing from the message it came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Resource<'a> {
    /// The namespace segment (`default`, `kube-node-lease`, or the literal `null` for nodes).
    pub namespace: &'a str,
    /// The resource type (`pod`, `configmap`, `podpatch`, ...).
    pub kind: &'a str,
    /// The object name; `None` for the list form used by `query` and `response`.
    pub name: Option<&'a str>,
}

/// Why a resource string is not of the form `<ns>/<type>[/<name>]`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("resource {resource:?} is not of the form <namespace>/<type>[/<name>]: {reason}")]
pub struct ResourceError {
    /// The offending resource string.
    pub resource: String,
    /// What is wrong with it.
    pub reason: &'static str,
}

impl<'a> Resource<'a> {
    /// Parses `<ns>/<type>/<name>` or `<ns>/<type>`. A name may itself contain `/` (everything
    /// after the second separator is the name), which keeps keys like `default/secret/a/b` intact.
    pub fn parse(resource: &'a str) -> Result<Resource<'a>, ResourceError> {
        let fail = |reason| ResourceError {
            resource: resource.to_owned(),
            reason,
        };
        let mut parts = resource.splitn(3, '/');
        let namespace = parts.next().unwrap_or_default();
        let kind = parts
            .next()
            .ok_or_else(|| fail("missing the type segment"))?;
        let name = parts.next();
        if namespace.is_empty() {
            return Err(fail("empty namespace segment"));
        }
        if kind.is_empty() {
            return Err(fail("empty type segment"));
        }
        if name == Some("") {
            return Err(fail("empty name segment"));
        }
        Ok(Resource {
            namespace,
            kind,
            name,
        })
    }

    /// True for the list form `<ns>/<type>`.
    pub fn is_list(&self) -> bool {
        self.name.is_none()
    }

    /// The same object under another type, e.g. a pod's `podpatch` or `podstatus` key.
    pub fn sibling(&self, kind: &str) -> String {
        match self.name {
            Some(name) => format!("{}/{}/{}", self.namespace, kind, name),
            None => format!("{}/{}", self.namespace, kind),
        }
    }
}

impl fmt::Display for Resource<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name {
            Some(name) => write!(f, "{}/{}/{}", self.namespace, self.kind, name),
            None => write!(f, "{}/{}", self.namespace, self.kind),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_object_and_list_forms() {
        let r = Resource::parse("default/pod/nginx").unwrap();
        assert_eq!(
            (r.namespace, r.kind, r.name),
            ("default", "pod", Some("nginx"))
        );
        assert!(!r.is_list());
        let l = Resource::parse("default/pod").unwrap();
        assert_eq!((l.namespace, l.kind, l.name), ("default", "pod", None));
        assert!(l.is_list());
        let n = Resource::parse("null/node/edge-1").unwrap();
        assert_eq!(n.namespace, "null");
        assert_eq!(n.to_string(), "null/node/edge-1");
    }

    #[test]
    fn name_keeps_extra_separators() {
        let r = Resource::parse("default/secret/a/b").unwrap();
        assert_eq!(r.name, Some("a/b"));
        assert_eq!(r.sibling("podpatch"), "default/podpatch/a/b");
    }

    #[test]
    fn rejects_malformed() {
        for bad in ["", "pod", "/pod/x", "default//x", "default/pod/"] {
            let err = Resource::parse(bad).unwrap_err();
            assert_eq!(err.resource, bad);
        }
    }
}
