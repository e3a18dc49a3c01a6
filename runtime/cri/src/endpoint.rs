//! Which socket a container runtime endpoint names.

use std::path::PathBuf;

use crate::CriError;

/// The unix socket path of a container runtime endpoint: `unix:///path/to.sock`, as KubeEdge's
/// `containerRuntimeEndpoint` and kubelet's flags write it, or a bare absolute path. Anything
/// else (`tcp://`, `npipe://`, a relative path) is refused here, with the endpoint named, rather
/// than failing later with a confusing dial error: on Linux CRI runtimes listen on unix
/// sockets only.
pub fn socket_path(endpoint: &str) -> Result<PathBuf, CriError> {
    let bad = |reason: &str| CriError::BadEndpoint {
        endpoint: endpoint.to_owned(),
        reason: reason.to_owned(),
    };
    let path = if let Some(rest) = endpoint.strip_prefix("unix://") {
        rest
    } else if let Some((scheme, _)) = endpoint.split_once("://") {
        return Err(bad(&format!(
            "scheme {scheme:?} is not supported: use unix:///absolute/path/to.sock"
        )));
    } else {
        endpoint
    };
    if path.is_empty() {
        return Err(bad("no socket path: use unix:///absolute/path/to.sock"));
    }
    if !path.starts_with('/') {
        return Err(bad(
            "the socket path must be absolute: use unix:///absolute/path/to.sock",
        ));
    }
    Ok(PathBuf::from(path))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unix_url_and_bare_path() {
        assert_eq!(
            socket_path("unix:///run/containerd/containerd.sock").unwrap(),
            PathBuf::from("/run/containerd/containerd.sock")
        );
        assert_eq!(
            socket_path("/run/x.sock").unwrap(),
            PathBuf::from("/run/x.sock")
        );
    }

    #[test]
    fn other_forms_are_refused_naming_the_endpoint() {
        for endpoint in [
            "tcp://127.0.0.1:1234",
            "npipe:////./pipe/containerd",
            "unix://relative.sock",
            "unix://",
            "",
            "run/x.sock",
        ] {
            let err = socket_path(endpoint).unwrap_err();
            assert!(matches!(err, CriError::BadEndpoint { .. }), "{endpoint}");
            assert!(
                err.to_string().contains(&format!("{endpoint:?}")),
                "{err} should name {endpoint:?}"
            );
        }
    }
}
