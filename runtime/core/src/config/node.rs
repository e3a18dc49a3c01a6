//! The node name: `hostnameOverride`, or the machine hostname.

use super::dns;
use super::error::ConfigError;
use super::model::EdgeCoreConfig;

const KEY: &str = "modules.edged.hostnameOverride";

impl EdgeCoreConfig {
    /// The name this node registers under: `modules.edged.hostnameOverride`
    /// if set, else the machine hostname (`/proc/sys/kernel/hostname`, then
    /// `$HOSTNAME`, then `localhost`), lower-cased like KubeEdge does.
    ///
    /// Errs if the result is not a DNS-1123 subdomain, since the API server
    /// would refuse the Node object; the error tells the user to set
    /// `hostnameOverride` when the machine hostname is the culprit.
    pub fn node_name(&self) -> Result<String, ConfigError> {
        node_name_from(&self.modules.edged.hostname_override, || {
            machine_hostname(
                std::fs::read_to_string("/proc/sys/kernel/hostname").ok(),
                std::env::var("HOSTNAME").ok(),
            )
        })
    }
}

/// First non-blank of the kernel hostname and `$HOSTNAME`, else `localhost`.
fn machine_hostname(proc_hostname: Option<String>, env_hostname: Option<String>) -> String {
    [proc_hostname, env_hostname]
        .into_iter()
        .flatten()
        .map(|h| h.trim().to_owned())
        .find(|h| !h.is_empty())
        .unwrap_or_else(|| "localhost".to_owned())
}

/// `hostname_override` or `machine()`, lower-cased and checked.
fn node_name_from(
    hostname_override: &str,
    machine: impl FnOnce() -> String,
) -> Result<String, ConfigError> {
    let overridden = !hostname_override.is_empty();
    let name = if overridden {
        hostname_override.to_owned()
    } else {
        machine()
    }
    .to_lowercase();
    match dns::check_subdomain(&name) {
        Ok(()) => Ok(name),
        Err(why) if overridden => Err(ConfigError::invalid(
            KEY,
            format!("{}: {why}, got {name:?}", dns::SUBDOMAIN_RULE),
        )),
        Err(why) => Err(ConfigError::invalid(
            KEY,
            format!(
                "is empty, and the machine hostname {name:?} is not a valid node name ({why}); \
                 set {KEY} to a name that {}",
                dns::SUBDOMAIN_RULE
            ),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hostname_fallback_chain() {
        let s = |x: &str| Some(x.to_owned());
        assert_eq!(machine_hostname(s("edge-1\n"), s("env")), "edge-1");
        assert_eq!(machine_hostname(s(" \n"), s("env-host")), "env-host");
        assert_eq!(machine_hostname(None, s("env-host")), "env-host");
        assert_eq!(machine_hostname(None, s("")), "localhost");
        assert_eq!(machine_hostname(None, None), "localhost");
    }

    #[test]
    fn override_wins_and_machine_name_is_lowercased() {
        let unused = || panic!("machine hostname must not be consulted");
        assert_eq!(node_name_from("edge-7", unused).unwrap(), "edge-7");
        assert_eq!(
            node_name_from("", || "Edge-Box.LAN".to_owned()).unwrap(),
            "edge-box.lan"
        );
    }

    #[test]
    fn invalid_names_name_the_key() {
        let err = node_name_from("", || "my_box".to_owned()).unwrap_err();
        let text = err.to_string();
        assert!(
            text.starts_with("modules.edged.hostnameOverride: "),
            "{text}"
        );
        assert!(text.contains("machine hostname \"my_box\""), "{text}");
        assert!(
            text.contains("set modules.edged.hostnameOverride"),
            "{text}"
        );

        let err = node_name_from("bad..name", || unreachable!()).unwrap_err();
        assert!(err.to_string().contains("DNS-1123 subdomain"), "{err}");
    }

    #[test]
    fn real_machine_name_resolves() {
        // Whatever this machine is called, the result is either a valid name
        // or an error naming the key; never a panic.
        match EdgeCoreConfig::default().node_name() {
            Ok(name) => assert!(dns::check_subdomain(&name).is_ok()),
            Err(e) => assert!(e.to_string().starts_with(KEY)),
        }
    }
}
