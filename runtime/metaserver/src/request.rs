//! What a Kubernetes API request asks for, read from its method, path and query the way
//! kube-apiserver's request-info resolver reads them.

use std::collections::HashMap;

/// The verb of a resource request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verb {
    /// GET of one object.
    Get,
    /// GET of a collection.
    List,
    /// GET of a collection or object with `watch=true` (or under `/watch/`).
    Watch,
    /// POST.
    Create,
    /// PUT.
    Update,
    /// PATCH.
    Patch,
    /// DELETE of one object.
    Delete,
    /// DELETE of a collection.
    DeleteCollection,
}

impl Verb {
    /// KubeEdge's Application verb (`updatestatus` for a PUT of the status subresource).
    pub fn application_verb(self, subresource: &str) -> &'static str {
        match self {
            Verb::Get => "get",
            Verb::List => "list",
            Verb::Watch => "watch",
            Verb::Create => "create",
            Verb::Update if subresource == "status" => "updatestatus",
            Verb::Update => "update",
            Verb::Patch => "patch",
            Verb::Delete => "delete",
            Verb::DeleteCollection => "deletecollection",
        }
    }
}

/// A request for a resource (`/api/v1/...`, `/apis/<group>/<version>/...`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResourceRequest {
    /// The verb.
    pub verb: Verb,
    /// `api` or `apis`.
    pub prefix: String,
    /// The API group (`""` for core).
    pub group: String,
    /// The version.
    pub version: String,
    /// The namespace (`""` for cluster-wide or cluster-scoped).
    pub namespace: String,
    /// The resource plural.
    pub resource: String,
    /// The object's name (`""` for a collection).
    pub name: String,
    /// The subresource (`status`, `log`, ...), `""` for none.
    pub subresource: String,
}

impl ResourceRequest {
    /// KubeEdge's key of the request: `/<group or core>/<version>/<resource>/<namespace or
    /// null>/<name or null>` (a namespaces request keys its namespace as `null`).
    pub fn key(&self) -> String {
        let group = if self.group.is_empty() {
            "core"
        } else {
            &self.group
        };
        let namespace = if self.resource == "namespaces" || self.namespace.is_empty() {
            "null"
        } else {
            &self.namespace
        };
        let name = if self.name.is_empty() {
            "null"
        } else {
            &self.name
        };
        format!(
            "/{group}/{}/{}/{namespace}/{name}",
            self.version, self.resource
        )
    }
}

/// What a request is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    /// A resource request.
    Resource(ResourceRequest),
    /// Discovery, version, health or OpenAPI: passed through to the cloud (GET only).
    PassThrough,
    /// Any other path.
    Unknown,
}

/// The paths kube-apiserver serves for discovery, passed through to the cloud.
const DISCOVERY: &[&str] = &[
    "/api",
    "/apis",
    "/version",
    "/healthz",
    "/livez",
    "/readyz",
    "/openapi/v2",
    "/openapi/v3",
];

/// Whether `path` is one the cloud answers for discovery (v1.23's pass-through list: the
/// fixed paths, `/api/<version>`, `/apis/<group>` and `/apis/<group>/<version>`, and OpenAPI
/// v3 documents).
pub fn is_discovery(path: &str) -> bool {
    let path = path.trim_end_matches('/');
    if DISCOVERY.contains(&path) || path.starts_with("/openapi/v3/") {
        return true;
    }
    let parts: Vec<&str> = path.split('/').collect();
    matches!(
        (parts.get(1), parts.len()),
        (Some(&"api"), 3) | (Some(&"apis"), 3 | 4)
    )
}

/// Reads a request; `query` is the parsed query string.
pub fn parse(method: &str, path: &str, query: &HashMap<String, String>) -> Request {
    if is_discovery(path) {
        return if method == "GET" {
            Request::PassThrough
        } else {
            Request::Unknown
        };
    }
    let parts: Vec<&str> = path
        .trim_matches('/')
        .split('/')
        .filter(|p| !p.is_empty())
        .collect();
    let (prefix, group, version, mut rest) = match parts.as_slice() {
        ["api", version, rest @ ..] => ("api", "", *version, rest),
        ["apis", group, version, rest @ ..] => ("apis", *group, *version, rest),
        _ => return Request::Unknown,
    };
    let mut watch_path = false;
    if rest.first() == Some(&"watch") {
        watch_path = true;
        rest = &rest[1..];
    }
    let (namespace, resource, name, subresource) = match rest {
        ["namespaces", ns, resource, tail @ ..] => {
            // `/namespaces/<ns>/<resource>[/<name>[/<sub>]]`, or `/namespaces/<name>/<sub>`
            // (a namespace's own subresource: `finalize`, `status`).
            if matches!(*resource, "status" | "finalize") && tail.is_empty() {
                ("", "namespaces", *ns, *resource)
            } else {
                let name = tail.first().copied().unwrap_or("");
                let sub = tail.get(1).copied().unwrap_or("");
                if tail.len() > 2 {
                    return Request::Unknown;
                }
                (*ns, *resource, name, sub)
            }
        }
        ["namespaces", name] => ("", "namespaces", *name, ""),
        [resource] => ("", *resource, "", ""),
        [resource, name] => ("", *resource, *name, ""),
        [resource, name, sub] => ("", *resource, *name, *sub),
        _ => return Request::Unknown,
    };
    let watch_query = query.get("watch").is_some_and(|v| go_bool(v));
    let verb = match (method, name.is_empty()) {
        ("GET", _) if watch_path || watch_query => Verb::Watch,
        ("GET", true) => Verb::List,
        ("GET", false) => Verb::Get,
        ("POST", _) => Verb::Create,
        ("PUT", _) => Verb::Update,
        ("PATCH", _) => Verb::Patch,
        ("DELETE", true) => Verb::DeleteCollection,
        ("DELETE", false) => Verb::Delete,
        _ => return Request::Unknown,
    };
    Request::Resource(ResourceRequest {
        verb,
        prefix: prefix.to_owned(),
        group: group.to_owned(),
        version: version.to_owned(),
        namespace: namespace.to_owned(),
        resource: resource.to_owned(),
        name: name.to_owned(),
        subresource: subresource.to_owned(),
    })
}

/// A query parameter's boolean as Go's `strconv.ParseBool` reads it (what kube-apiserver
/// accepts): `1`, `t`, `T`, `TRUE`, `true`, `True` (the Python client sends `watch=True`).
pub fn go_bool(value: &str) -> bool {
    matches!(value, "1" | "t" | "T" | "TRUE" | "true" | "True")
}

/// Parses a query string (`a=b&c=d`, percent-decoded, `+` as space).
pub fn query_map(query: Option<&str>) -> HashMap<String, String> {
    let mut map = HashMap::new();
    for pair in query.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        map.insert(decode(k), decode(v));
    }
    map
}

/// Percent-decodes a query component (`+` is a space).
pub fn decode(text: &str) -> String {
    fn hex(b: u8) -> Option<u8> {
        (b as char).to_digit(16).map(|d| d as u8)
    }
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let decoded = match bytes[i] {
            b'%' if i + 2 < bytes.len() => hex(bytes[i + 1]).zip(hex(bytes[i + 2])),
            _ => None,
        };
        match (bytes[i], decoded) {
            (_, Some((hi, lo))) => {
                out.push(hi << 4 | lo);
                i += 3;
            }
            (b'+', None) => {
                out.push(b' ');
                i += 1;
            }
            (b, None) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(method: &str, path: &str, query: &str) -> Request {
        parse(method, path, &query_map(Some(query)))
    }

    fn res(method: &str, path: &str, query: &str) -> ResourceRequest {
        match req(method, path, query) {
            Request::Resource(r) => r,
            other => panic!("{path}: {other:?}"),
        }
    }

    #[test]
    fn resource_paths_are_read_like_the_apiserver() {
        let r = res("GET", "/api/v1/namespaces/default/pods", "");
        assert_eq!(
            (r.verb, r.namespace.as_str(), r.resource.as_str()),
            (Verb::List, "default", "pods")
        );
        assert_eq!(r.key(), "/core/v1/pods/default/null");
        let r = res("GET", "/api/v1/pods", "watch=true");
        assert_eq!((r.verb, r.namespace.as_str()), (Verb::Watch, ""));
        assert_eq!(res("GET", "/api/v1/pods", "watch=True").verb, Verb::Watch);
        assert_eq!(res("GET", "/api/v1/pods", "watch=false").verb, Verb::List);
        let r = res(
            "GET",
            "/api/v1/watch/namespaces/kube-system/configmaps/a",
            "",
        );
        assert_eq!((r.verb, r.name.as_str()), (Verb::Watch, "a"));
        let r = res(
            "GET",
            "/apis/discovery.k8s.io/v1/namespaces/default/endpointslices",
            "",
        );
        assert_eq!(r.key(), "/discovery.k8s.io/v1/endpointslices/default/null");
        let r = res("GET", "/api/v1/namespaces/default", "");
        assert_eq!(
            (r.resource.as_str(), r.name.as_str()),
            ("namespaces", "default")
        );
        assert_eq!(r.key(), "/core/v1/namespaces/null/default");
        let r = res("PUT", "/api/v1/namespaces/default/pods/a/status", "");
        assert_eq!(r.verb.application_verb(&r.subresource), "updatestatus");
        let r = res("GET", "/api/v1/nodes/n1", "");
        assert_eq!((r.verb, r.name.as_str()), (Verb::Get, "n1"));
        assert_eq!(r.key(), "/core/v1/nodes/null/n1");
        let r = res("DELETE", "/api/v1/namespaces/default/pods", "");
        assert_eq!(r.verb, Verb::DeleteCollection);
    }

    #[test]
    fn discovery_passes_through_and_the_rest_is_unknown() {
        for p in [
            "/api",
            "/apis/",
            "/version",
            "/api/v1",
            "/apis/apps",
            "/apis/apps/v1",
            "/openapi/v3/api/v1",
        ] {
            assert_eq!(req("GET", p, ""), Request::PassThrough, "{p}");
        }
        assert_eq!(req("POST", "/version", ""), Request::Unknown);
        assert_eq!(req("GET", "/metrics", ""), Request::Unknown);
        assert_eq!(
            req("GET", "/api/v1/namespaces/a/pods/b/c/d", ""),
            Request::Unknown
        );
    }

    #[test]
    fn queries_are_decoded() {
        let q = query_map(Some("labelSelector=app%3Dweb%2Ctier+in+(a)&watch=1&x"));
        assert_eq!(q["labelSelector"], "app=web,tier in (a)");
        assert_eq!(q["watch"], "1");
        assert_eq!(q["x"], "");
        assert_eq!(query_map(Some("a=%zz%4"))["a"], "%zz%4");
    }
}
