//! The `edgecore.yaml` a join writes: the cloud's addresses, the certificate paths of the
//! [`Layout`], the node name, and KubeEdge's defaults for the rest — then the operator's
//! `--set key=value` overrides, as `keadm join --set` takes them.

use serde_norway::{Mapping, Value};

use crate::SetupError;
use crate::layout::Layout;

/// What goes into the config besides the [`Layout`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeSettings {
    /// CloudHub's WebSocket address, `host:port`.
    pub cloud: String,
    /// CloudHub's HTTPS address (certificates), `https://host:port`.
    pub https_server: String,
    /// The node's name.
    pub node: String,
    /// Whether edged runs pods.
    pub edged: bool,
}

/// The config text: `settings` over KubeEdge's defaults, then each `(key, value)` of `sets`
/// (a dotted key as `wedge config print` shows it; the value read as YAML, so `true`, `10`
/// and `[a, b]` keep their types). The result is checked as `wedge config check` checks it.
pub fn render(
    layout: &Layout,
    settings: &NodeSettings,
    sets: &[(String, String)],
) -> Result<String, SetupError> {
    let certs = layout.certs();
    let path = |p: &std::path::Path| Value::String(p.display().to_string());
    let mut root = Mapping::new();
    put(
        &mut root,
        "apiVersion",
        "edgecore.config.kubeedge.io/v1alpha2".into(),
    );
    put(&mut root, "kind", "EdgeCore".into());
    let mut modules = Mapping::new();
    let mut edgehub = Mapping::new();
    put(&mut edgehub, "enable", true.into());
    put(&mut edgehub, "tlsCaFile", path(&certs.ca));
    put(&mut edgehub, "tlsCertFile", path(&certs.cert));
    put(&mut edgehub, "tlsPrivateKeyFile", path(&certs.key));
    let mut websocket = Mapping::new();
    put(&mut websocket, "enable", true.into());
    put(&mut websocket, "server", settings.cloud.clone().into());
    put(&mut edgehub, "websocket", websocket.into());
    put(
        &mut edgehub,
        "httpServer",
        settings.https_server.clone().into(),
    );
    put(&mut modules, "edgeHub", edgehub.into());
    // The tunnel for kubectl logs/exec, off as keadm writes it, but pointing at the cloud's
    // tunnel port (10004) with the node's certificate, so enabling it is one key.
    let mut stream = Mapping::new();
    put(&mut stream, "enable", false.into());
    let cloud_host = match settings.cloud.rsplit_once(':') {
        Some((host, _)) => host,
        None => settings.cloud.as_str(),
    };
    put(&mut stream, "server", format!("{cloud_host}:10004").into());
    put(&mut stream, "tlsTunnelCAFile", path(&certs.ca));
    put(&mut stream, "tlsTunnelCertFile", path(&certs.cert));
    put(&mut stream, "tlsTunnelPrivateKeyFile", path(&certs.key));
    put(&mut modules, "edgeStream", stream.into());
    let mut edged = Mapping::new();
    put(&mut edged, "enable", settings.edged.into());
    put(&mut edged, "hostnameOverride", settings.node.clone().into());
    // Pods' volumes live with the node's state, which the service user owns (KubeEdge's
    // /var/lib/kubelet is root's).
    put(
        &mut edged,
        "rootDirectory",
        path(&layout.data_dir.join("kubelet")),
    );
    put(&mut modules, "edged", edged.into());
    let mut twin = Mapping::new();
    put(&mut twin, "enable", true.into());
    put(&mut twin, "dmiSockPath", path(&layout.dmi_socket()));
    put(&mut modules, "deviceTwin", twin.into());
    put(&mut root, "modules", modules.into());
    let mut wedge = Mapping::new();
    put(&mut wedge, "dataDir", path(&layout.data_dir));
    put(&mut root, "wedge", wedge.into());
    let mut root = Value::Mapping(root);
    for (key, value) in sets {
        set(&mut root, key, value)?;
    }
    let text = serde_norway::to_string(&root)
        .map_err(|e| SetupError::Invalid(format!("cannot write the config: {e}")))?;
    wedge_core::config::EdgeCoreConfig::from_yaml_str(&text)?;
    Ok(text)
}

fn put(map: &mut Mapping, key: &str, value: Value) {
    map.insert(Value::String(key.to_owned()), value);
}

/// Parses `key=value` as `--set` takes it.
pub fn parse_set(arg: &str) -> Result<(String, String), SetupError> {
    match arg.split_once('=') {
        Some((key, value)) if !key.trim().is_empty() => {
            Ok((key.trim().to_owned(), value.to_owned()))
        }
        _ => Err(SetupError::Invalid(format!(
            "--set {arg:?}: expected KEY=VALUE, e.g. modules.edged.podSandboxImage=kubeedge/pause:3.6"
        ))),
    }
}

/// Sets the dotted `key` of `root` to `value` read as YAML, making mappings on the way.
fn set(root: &mut Value, key: &str, value: &str) -> Result<(), SetupError> {
    let parsed: Value = serde_norway::from_str(value)
        .map_err(|e| SetupError::Invalid(format!("--set {key}: {value:?} is not YAML: {e}")))?;
    let mut at = root;
    let parts: Vec<&str> = key.split('.').collect();
    if parts.iter().any(|p| p.is_empty()) {
        return Err(SetupError::Invalid(format!(
            "--set {key}: an empty part in the key"
        )));
    }
    for (i, part) in parts.iter().enumerate() {
        let Value::Mapping(map) = at else {
            return Err(SetupError::Invalid(format!(
                "--set {key}: {} is not a mapping",
                parts[..i].join(".")
            )));
        };
        let name = Value::String((*part).to_owned());
        if i + 1 == parts.len() {
            map.insert(name, parsed);
            return Ok(());
        }
        at = map
            .entry(name)
            .or_insert_with(|| Value::Mapping(Mapping::new()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use wedge_core::config::EdgeCoreConfig;

    fn settings() -> NodeSettings {
        NodeSettings {
            cloud: "10.0.0.1:10000".into(),
            https_server: "https://10.0.0.1:10002".into(),
            node: "edge-1".into(),
            edged: true,
        }
    }

    #[test]
    fn the_config_names_the_cloud_the_node_and_the_layouts_files() {
        let text = render(&Layout::default(), &settings(), &[]).expect("valid");
        let config = EdgeCoreConfig::from_yaml_str(&text).expect("valid");
        let hub = &config.modules.edge_hub;
        assert!(hub.enable);
        assert_eq!(hub.websocket.server, "10.0.0.1:10000");
        assert_eq!(hub.http_server, "https://10.0.0.1:10002");
        assert_eq!(hub.tls_cert_file, "/etc/kubeedge/certs/server.crt");
        assert_eq!(hub.tls_private_key_file, "/etc/kubeedge/certs/server.key");
        assert_eq!(hub.tls_ca_file, "/etc/kubeedge/ca/rootCA.crt");
        assert!(hub.token.is_empty(), "the token is used at join, not kept");
        let stream = &config.modules.edge_stream;
        assert!(!stream.enable, "the tunnel is off until asked for");
        assert_eq!(stream.server, "10.0.0.1:10004");
        assert_eq!(stream.tls_tunnel_cert_file, hub.tls_cert_file);
        assert_eq!(stream.tls_tunnel_ca_file, hub.tls_ca_file);
        assert_eq!(config.node_name().expect("a name"), "edge-1");
        assert!(config.modules.edged.enable);
        assert_eq!(config.data_dir(), std::path::Path::new("/var/lib/wedge"));
        assert_eq!(
            config.modules.edged.root_directory,
            "/var/lib/wedge/kubelet"
        );
    }

    #[test]
    fn set_overrides_with_typed_values_and_makes_mappings() {
        let sets = [
            parse_set("modules.edged.podSandboxImage=local/pause:1").unwrap(),
            parse_set("modules.edged.enable=false").unwrap(),
            parse_set("modules.eventBus.mqttServerInternal=tcp://127.0.0.1:2883").unwrap(),
        ];
        let text = render(&Layout::default(), &settings(), &sets).expect("valid");
        let config = EdgeCoreConfig::from_yaml_str(&text).expect("valid");
        assert_eq!(config.modules.edged.pod_sandbox_image, "local/pause:1");
        assert!(!config.modules.edged.enable);
        assert_eq!(
            config.modules.event_bus.mqtt_server_internal,
            "tcp://127.0.0.1:2883"
        );
    }

    #[test]
    fn a_bad_set_is_refused_naming_the_key() {
        assert!(parse_set("no-equals").is_err());
        let unknown = [parse_set("modules.edged.podSandboxImag=x").unwrap()];
        let err = render(&Layout::default(), &settings(), &unknown).unwrap_err();
        assert!(err.to_string().contains("podSandboxImag"), "{err}");
        let through_scalar = [parse_set("kind.x=1").unwrap()];
        let err = render(&Layout::default(), &settings(), &through_scalar).unwrap_err();
        assert!(err.to_string().contains("kind is not a mapping"), "{err}");
    }

    #[test]
    fn a_bad_node_name_is_refused() {
        let mut bad = settings();
        bad.node = "Edge_1".into();
        let err = render(&Layout::default(), &bad, &[]).unwrap_err();
        assert!(err.to_string().contains("hostnameOverride"), "{err}");
    }
}
