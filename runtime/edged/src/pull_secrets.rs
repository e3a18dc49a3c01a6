//! `spec.imagePullSecrets`: registry credentials from the pod's Secrets, matched to an image
//! as kubelet's credential keyring matches them, and handed to the engine's pull.
//!
//! The Secrets come through metamanager like every Secret a pod uses
//! ([`Objects`]), so they are cached for a restart without the cloud. Both of Kubernetes'
//! forms are read: `.dockerconfigjson` (`{"auths": {<registry>: <entry>}}`) and the older
//! `.dockercfg` (the bare map); an entry holds `auth` (base64 `user:password`) or
//! `username`/`password`.
//!
//! A registry key may carry a scheme, a port and a path prefix (`https://index.docker.io/v1/`,
//! `registry.local:5000/team`); `/v1/` and `/v2/` mean the registry itself, and a host part may
//! be a glob (`*.example.com`). A key matches an image of the same host (part by part, same
//! port) whose repository path starts with the key's path; more specific keys come first.
//! Docker Hub has four names (`index.docker.io`, `docker.io`, `registry-1.docker.io`, and
//! images without a registry), which all match each other.
//!
//! As kubelet, a Secret that is missing or unreadable is logged (naming it) and the pull is
//! still tried with what remains, anonymously when no credential matches.

use base64::Engine as _;
use bollard::auth::DockerCredentials;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::objects::{Kind, ObjectData};
use crate::pod::Pod;
use crate::projected::Objects;

/// The key of a `kubernetes.io/dockerconfigjson` Secret.
pub const DOCKER_CONFIG_JSON: &str = ".dockerconfigjson";
/// The key of a `kubernetes.io/dockercfg` Secret.
pub const DOCKER_CFG: &str = ".dockercfg";

/// Docker Hub's canonical host here: every name of Docker Hub is read as this one.
const DOCKER_HUB: &str = "docker.io";

/// An entry of `spec.imagePullSecrets`: the name of a Secret in the pod's namespace.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize)]
pub struct PullSecretRef {
    /// The Secret's name.
    #[serde(default)]
    pub name: String,
}

/// A user name and password for one registry key. `Debug` never shows the password.
#[derive(Clone, PartialEq, Eq)]
pub struct RegistryAuth {
    /// The user name.
    pub username: String,
    /// The password (or token).
    pub password: String,
}

impl std::fmt::Debug for RegistryAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RegistryAuth")
            .field("username", &self.username)
            .field("password", &"<redacted>")
            .finish()
    }
}

/// Where a registry key or an image points: host (Docker Hub as [`DOCKER_HUB`]), port, and
/// path (`/team/app`, empty for the whole registry).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Location {
    /// Host name or address, without the port.
    pub host: String,
    /// The port, if named.
    pub port: Option<String>,
    /// `/`-led repository path, or empty.
    pub path: String,
}

impl Location {
    /// `host[:port][path]`, the form kubelet sorts keys by.
    fn key(&self) -> String {
        match &self.port {
            Some(port) => format!("{}:{port}{}", self.host, self.path),
            None => format!("{}{}", self.host, self.path),
        }
    }

    /// The registry's address, as Docker names it in credentials.
    fn server(&self) -> String {
        match &self.port {
            Some(port) => format!("{}:{port}", self.host),
            None => self.host.clone(),
        }
    }
}

/// Splits `host[:port]` and reads Docker Hub's names as one.
fn host_port(authority: &str) -> (String, Option<String>) {
    let (host, port) = match authority.rsplit_once(':') {
        Some((host, port)) if !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit()) => {
            (host, Some(port.to_owned()))
        }
        _ => (authority, None),
    };
    let host = match host {
        "index.docker.io" | "registry-1.docker.io" | "docker.io" => DOCKER_HUB,
        other => other,
    };
    (host.to_owned(), port)
}

/// A registry key of a docker config: scheme dropped, `/v1/` and `/v2/` read as the
/// registry itself (kubelet's `BasicDockerKeyring.Add`).
pub fn parse_key(key: &str) -> Location {
    let rest = key
        .strip_prefix("https://")
        .or_else(|| key.strip_prefix("http://"))
        .unwrap_or(key);
    let (authority, path) = match rest.find('/') {
        Some(i) => rest.split_at(i),
        None => (rest, ""),
    };
    let mut path = path;
    if path.starts_with("/v1/") || path.starts_with("/v2/") {
        path = &path[3..];
    }
    if path == "/" {
        path = "";
    }
    let (host, port) = host_port(authority);
    Location {
        host,
        port,
        path: path.to_owned(),
    }
}

/// Where `image` is pulled from: its registry (Docker Hub when the first component names
/// none: no `.`, no `:`, not `localhost`) and repository path, tag and digest dropped.
pub fn image_location(image: &str) -> Location {
    let name = image.split('@').next().unwrap_or(image);
    // A `:` after the last `/` starts the tag.
    let name = match name.rfind(':') {
        Some(i) if !name[i..].contains('/') => &name[..i],
        _ => name,
    };
    let (first, rest) = match name.split_once('/') {
        Some((first, rest)) if first.contains(['.', ':']) || first == "localhost" => (first, rest),
        _ => (DOCKER_HUB, name),
    };
    let (host, port) = host_port(first);
    // Docker Hub's official images live under `library/`.
    let path = if host == DOCKER_HUB && !rest.contains('/') {
        format!("/library/{rest}")
    } else {
        format!("/{rest}")
    };
    Location { host, port, path }
}

/// Whether credentials for `key` apply to `image` (kubelet's `URLsMatch`): same port, same
/// number of host parts each matching (globs allowed in the key), and the key's path a prefix
/// of the image's.
pub fn matches(key: &Location, image: &Location) -> bool {
    let key_parts: Vec<&str> = key.host.split('.').collect();
    let image_parts: Vec<&str> = image.host.split('.').collect();
    key.port == image.port
        && key_parts.len() == image_parts.len()
        && image.path.starts_with(&key.path)
        && key_parts
            .iter()
            .zip(&image_parts)
            .all(|(pattern, part)| glob(pattern.as_bytes(), part.as_bytes()))
}

/// `*` (any run) and `?` (any one byte) glob matching of one host part.
fn glob(pattern: &[u8], text: &[u8]) -> bool {
    match pattern.split_first() {
        None => text.is_empty(),
        Some((b'*', rest)) => (0..=text.len()).any(|skip| glob(rest, &text[skip..])),
        Some((b'?', rest)) => !text.is_empty() && glob(rest, &text[1..]),
        Some((c, rest)) => text.first() == Some(c) && glob(rest, &text[1..]),
    }
}

/// The `(registry key, credential)` pairs of a pull Secret's data: `.dockerconfigjson` or
/// else `.dockercfg`. An error says what is wrong without quoting any secret.
pub fn parse_secret(data: &ObjectData) -> Result<Vec<(String, RegistryAuth)>, String> {
    let (key, bytes) = if let Some(bytes) = data.get(DOCKER_CONFIG_JSON) {
        (DOCKER_CONFIG_JSON, bytes)
    } else if let Some(bytes) = data.get(DOCKER_CFG) {
        (DOCKER_CFG, bytes)
    } else {
        return Err(format!(
            "it has neither {DOCKER_CONFIG_JSON} nor {DOCKER_CFG}"
        ));
    };
    let config: Value =
        serde_json::from_slice(bytes).map_err(|e| format!("{key} is not JSON ({e})"))?;
    let auths = if key == DOCKER_CONFIG_JSON {
        &config["auths"]
    } else {
        &config
    };
    let Some(auths) = auths.as_object() else {
        return Err(format!("{key} holds no registry map"));
    };
    let mut out = Vec::new();
    for (registry, entry) in auths {
        let field = |name: &str| entry[name].as_str().unwrap_or_default().to_owned();
        let auth = field("auth");
        let credential = if auth.is_empty() {
            RegistryAuth {
                username: field("username"),
                password: field("password"),
            }
        } else {
            let decoded = base64::engine::general_purpose::STANDARD
                .decode(auth.trim())
                .ok()
                .and_then(|bytes| String::from_utf8(bytes).ok())
                .ok_or_else(|| format!("{key}: the auth of {registry:?} is not base64 text"))?;
            let (username, password) = decoded
                .split_once(':')
                .ok_or_else(|| format!("{key}: the auth of {registry:?} is not user:password"))?;
            RegistryAuth {
                username: username.to_owned(),
                password: password.to_owned(),
            }
        };
        out.push((registry.clone(), credential));
    }
    Ok(out)
}

/// The credentials of a pod's pull Secrets, by registry key (kubelet's keyring).
#[derive(Debug, Default)]
pub struct Keyring {
    entries: Vec<(Location, RegistryAuth)>,
}

impl Keyring {
    /// Adds one Secret's credentials, in its order.
    pub fn add(&mut self, credentials: Vec<(String, RegistryAuth)>) {
        for (key, auth) in credentials {
            self.entries.push((parse_key(&key), auth));
        }
    }

    /// The credentials that apply to `image`, most specific key first (kubelet sorts its
    /// keys in reverse, so `quay.io/team` comes before `quay.io`), each Secret's order kept
    /// within a key; empty when none applies (the pull is then anonymous).
    pub fn lookup(&self, image: &str) -> Vec<DockerCredentials> {
        let target = image_location(image);
        let mut found: Vec<(String, usize, &RegistryAuth)> = self
            .entries
            .iter()
            .enumerate()
            .filter(|(_, (key, _))| matches(key, &target))
            .map(|(i, (key, auth))| (key.key(), i, auth))
            .collect();
        found.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
        found
            .into_iter()
            .map(|(_, _, auth)| DockerCredentials {
                username: Some(auth.username.clone()),
                password: Some(auth.password.clone()),
                serveraddress: Some(target.server()),
                ..DockerCredentials::default()
            })
            .collect()
    }
}

/// The credentials `pod`'s pull Secrets hold for `image`, fetched through `objects`. A Secret
/// that is missing, cannot be fetched or cannot be read is logged at warn with its name, and
/// the others still count (kubelet does the same). A pod without pull Secrets asks nothing.
pub async fn credentials(
    pod: &Pod,
    image: &str,
    objects: &mut Objects<'_>,
) -> Vec<DockerCredentials> {
    let mut keyring = Keyring::default();
    for secret in &pod.spec.image_pull_secrets {
        if secret.name.is_empty() {
            continue;
        }
        let parsed = match objects.get(Kind::Secret, &secret.name).await {
            Ok(Some(data)) => parse_secret(data),
            Ok(None) => Err(objects.missing(Kind::Secret, &secret.name)),
            Err(e) => Err(e),
        };
        match parsed {
            Ok(credentials) => keyring.add(credentials),
            Err(e) => tracing::warn!(
                pod = %pod.key(),
                secret = %secret.name,
                "image pull secret not used, pulling without it: {e}"
            ),
        }
    }
    keyring.lookup(image)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn loc(host: &str, port: Option<&str>, path: &str) -> Location {
        Location {
            host: host.into(),
            port: port.map(str::to_owned),
            path: path.into(),
        }
    }

    fn b64(s: &str) -> String {
        base64::engine::general_purpose::STANDARD.encode(s)
    }

    #[test]
    fn images_resolve_to_their_registry() {
        let hub = |path: &str| loc("docker.io", None, path);
        assert_eq!(image_location("busybox"), hub("/library/busybox"));
        assert_eq!(image_location("busybox:1.36"), hub("/library/busybox"));
        assert_eq!(image_location("team/app:1"), hub("/team/app"));
        assert_eq!(image_location("docker.io/team/app"), hub("/team/app"));
        assert_eq!(image_location("docker.io/busybox"), hub("/library/busybox"));
        assert_eq!(image_location("index.docker.io/team/app"), hub("/team/app"));
        assert_eq!(
            image_location("127.0.0.1:5000/wedge/busybox:auth"),
            loc("127.0.0.1", Some("5000"), "/wedge/busybox")
        );
        assert_eq!(
            image_location("registry.local/app@sha256:abc"),
            loc("registry.local", None, "/app")
        );
        assert_eq!(
            image_location("localhost/app"),
            loc("localhost", None, "/app")
        );
    }

    #[test]
    fn keys_drop_scheme_and_api_version() {
        for hub in [
            "https://index.docker.io/v1/",
            "index.docker.io",
            "docker.io",
            "registry-1.docker.io",
            "https://registry-1.docker.io/v2/",
        ] {
            assert_eq!(parse_key(hub), loc("docker.io", None, ""), "{hub}");
        }
        assert_eq!(
            parse_key("http://registry.local:5000/team"),
            loc("registry.local", Some("5000"), "/team")
        );
    }

    #[test]
    fn matching_follows_kubelets_keyring() {
        let image = image_location("registry.local:5000/team/app:1");
        assert!(matches(&parse_key("registry.local:5000"), &image));
        assert!(matches(
            &parse_key("https://registry.local:5000/team"),
            &image
        ));
        assert!(matches(&parse_key("*.local:5000"), &image));
        assert!(!matches(&parse_key("registry.local"), &image), "port");
        assert!(!matches(&parse_key("registry.local:5000/other"), &image));
        assert!(!matches(&parse_key("local:5000"), &image), "parts");
        assert!(!matches(&parse_key("other.local:5000"), &image));
        for hub in [
            "https://index.docker.io/v1/",
            "docker.io",
            "registry-1.docker.io",
        ] {
            assert!(
                matches(&parse_key(hub), &image_location("busybox")),
                "{hub}"
            );
            assert!(!matches(&parse_key(hub), &image), "{hub}");
        }
    }

    #[test]
    fn secrets_of_both_forms_parse_and_the_most_specific_key_comes_first() {
        let json = serde_json::json!({"auths": {
            "registry.local:5000": {"auth": b64("any:pw1")},
            "https://registry.local:5000/team": {"username": "team", "password": "pw2", "email": "x@y"},
        }});
        let cfg =
            serde_json::json!({"https://index.docker.io/v1/": {"auth": b64("hub:pw:with:colons")}});
        let mut keyring = Keyring::default();
        keyring.add(
            parse_secret(&ObjectData::from([(
                DOCKER_CONFIG_JSON.to_owned(),
                json.to_string().into_bytes(),
            )]))
            .unwrap(),
        );
        keyring.add(
            parse_secret(&ObjectData::from([(
                DOCKER_CFG.to_owned(),
                cfg.to_string().into_bytes(),
            )]))
            .unwrap(),
        );
        let users = |image: &str| {
            keyring
                .lookup(image)
                .into_iter()
                .map(|c| {
                    (
                        c.username.unwrap(),
                        c.password.unwrap(),
                        c.serveraddress.unwrap(),
                    )
                })
                .collect::<Vec<_>>()
        };
        let server = "registry.local:5000".to_owned();
        assert_eq!(
            users("registry.local:5000/team/app:1"),
            [
                ("team".into(), "pw2".into(), server.clone()),
                ("any".into(), "pw1".into(), server.clone())
            ]
        );
        assert_eq!(
            users("registry.local:5000/other/app"),
            [("any".into(), "pw1".into(), server)]
        );
        assert_eq!(
            users("busybox:1"),
            [("hub".into(), "pw:with:colons".into(), "docker.io".into())]
        );
        assert!(users("quay.io/app").is_empty());
    }

    #[test]
    fn unreadable_secrets_say_why_without_the_password() {
        let bad = |key: &str, value: &str| {
            parse_secret(&ObjectData::from([(
                key.to_owned(),
                value.as_bytes().to_vec(),
            )]))
            .unwrap_err()
        };
        assert!(bad("other", "{}").contains("neither"));
        assert!(bad(DOCKER_CONFIG_JSON, "not json").contains("not JSON"));
        assert!(bad(DOCKER_CONFIG_JSON, "{\"auths\": 1}").contains("no registry map"));
        let e = bad(
            DOCKER_CONFIG_JSON,
            &serde_json::json!({"auths": {"r.io": {"auth": b64("s3cret-no-colon")}}}).to_string(),
        );
        assert!(
            e.contains("not user:password") && !e.contains("s3cret"),
            "{e}"
        );
        let auth = RegistryAuth {
            username: "u".into(),
            password: "s3cret".into(),
        };
        assert!(!format!("{auth:?}").contains("s3cret"));
    }
}
