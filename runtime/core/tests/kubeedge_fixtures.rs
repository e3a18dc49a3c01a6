//! Every edgecore.yaml KubeEdge v1.12 - v1.23 writes loads, the keys Wedge
//! ignores are named, and misspelt keys are still refused by name.

use std::path::PathBuf;
use std::time::Duration;

use wedge_core::config::{ConfigError, EdgeCoreConfig};

fn fixture(name: &str) -> String {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/kubeedge-config")
        .join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn load(name: &str) -> EdgeCoreConfig {
    EdgeCoreConfig::from_yaml_str(&fixture(name)).unwrap_or_else(|e| panic!("{name}: {e}"))
}

const FIXTURES: &[&str] = &[
    "v1.12.0-defaultconfig.yaml",
    "v1.17.0-defaultconfig.yaml",
    "v1.23.1-defaultconfig.yaml",
    "v1.23.1-minconfig.yaml",
    "v1.23.1-keadm-join.yaml",
];

#[test]
fn every_fixture_loads() {
    for name in FIXTURES {
        let c = load(name);
        assert!(c.node_name().is_ok(), "{name}");
        c.validate().unwrap();
    }
}

#[test]
fn generated_defaults_name_only_the_image_endpoint() {
    // KubeEdge's own defaults say nothing, except that its image service has
    // an endpoint of its own: Wedge pulls through `containerRuntimeEndpoint`
    // (containerd serves both on one socket).
    let endpoints = ["modules.edged.tailoredKubeletConfig.imageServiceEndpoint"];
    for name in ["v1.23.1-defaultconfig.yaml", "v1.23.1-minconfig.yaml"] {
        assert_eq!(load(name).not_implemented(), endpoints, "{name}");
    }
    // v1.17 also wrote them as flags, which v1.23 no longer reads.
    let mut v117 = endpoints.map(str::to_owned).to_vec();
    v117.extend([
        "modules.edged.remoteRuntimeEndpoint".to_owned(),
        "modules.edged.remoteImageEndpoint".to_owned(),
    ]);
    assert_eq!(load("v1.17.0-defaultconfig.yaml").not_implemented(), v117);
    // v1.12 ran dockershim: its flag-level endpoints were KubeEdge's default.
    assert_eq!(
        load("v1.12.0-defaultconfig.yaml").not_implemented(),
        Vec::<String>::new()
    );
}

#[test]
fn keadm_join_names_what_the_operator_chose() {
    let c = load("v1.23.1-keadm-join.yaml");
    assert_eq!(
        c.not_implemented(),
        [
            "modules.edged.tailoredKubeletConfig.cgroupDriver",
            "modules.edged.tailoredKubeletConfig.imageServiceEndpoint",
            "modules.edged.nodeLabels",
        ]
    );
    let line = c.not_implemented_line().unwrap();
    assert!(
        line.starts_with(
            "accepted, not implemented: modules.edged.tailoredKubeletConfig.cgroupDriver, "
        ),
        "{line}"
    );
    assert!(!line.contains('\n'));
    // What it sets that Wedge acts on.
    assert!(c.modules.edge_hub.enable);
    assert_eq!(c.modules.edge_hub.websocket.server, "198.51.100.7:10000");
    assert_eq!(c.node_name().unwrap(), "edge-node-1");
    assert_eq!(c.modules.event_bus.mqtt_mode, 0);
    assert!(c.modules.edge_stream.enable);
    assert_eq!(c.modules.edge_stream.server, "198.51.100.7:10004");
}

#[test]
fn kubeedge_values_reach_the_effective_settings() {
    let k = load("v1.12.0-defaultconfig.yaml").kubelet();
    assert_eq!(
        (
            k.image_gc_high_threshold_percent,
            k.image_gc_low_threshold_percent
        ),
        (80, 40)
    );
    assert_eq!(k.node_status_report_frequency, Duration::from_secs(300));
    assert_eq!(k.read_only_port, 10350);
    let c = load("v1.17.0-defaultconfig.yaml");
    assert_eq!(c.modules.edged.root_directory, "/var/lib/edged");
    assert_eq!(
        c.kubelet().container_runtime_endpoint,
        "unix:///run/containerd/containerd.sock"
    );
}

fn refused(text: &str) -> (String, String) {
    match EdgeCoreConfig::from_yaml_str(text) {
        Err(ConfigError::Parse { key, message }) => (key, message),
        other => panic!("expected an unknown-key error, got {other:?}"),
    }
}

#[test]
fn misspelt_keys_are_still_refused_by_name() {
    let base = fixture("v1.23.1-defaultconfig.yaml");
    for (from, to, key) in [
        (
            "    minimumGCAge: 0s",
            "    minimumGCAgee: 0s",
            "modules.edged.minimumGCAgee",
        ),
        (
            "      maxPods: 110",
            "      maxPodz: 110",
            "modules.edged.tailoredKubeletConfig.maxPodz",
        ),
        (
            "      dummyServer:",
            "      dumyServer:",
            "modules.metaManager.metaServer.dumyServer",
        ),
        (
            "    tlsTunnelCAFile:",
            "    tlsTunnelCaFile:",
            "modules.edgeStream.tlsTunnelCaFile",
        ),
        (
            "        verbosity: 0",
            "        verbosty: 0",
            "modules.edged.tailoredKubeletConfig.logging.verbosty",
        ),
    ] {
        assert!(base.contains(from), "{from}");
        let (got, message) = refused(&base.replacen(from, to, 1));
        assert_eq!(got, key);
        assert!(
            message.starts_with("unknown key; expected one of: "),
            "{message}"
        );
    }
}

#[test]
fn go_durations_and_bad_durations() {
    let c = EdgeCoreConfig::from_yaml_str(
        "modules:\n  edged:\n    tailoredKubeletConfig:\n      nodeStatusUpdateFrequency: 5s\n      \
         imageGCHighThresholdPercent: 70\n      imageGCLowThresholdPercent: 60\n      imageMinimumGCAge: 2h45m\n",
    )
    .unwrap();
    let k = c.kubelet();
    assert_eq!(k.node_status_update_frequency, Duration::from_secs(5));
    assert_eq!(k.image_gc_high_threshold_percent, 70);
    assert_eq!(k.image_minimum_gc_age, Duration::from_secs(9900));
    let (key, message) =
        refused("modules:\n  edged:\n    tailoredKubeletConfig:\n      syncFrequency: 10\n");
    assert_eq!(key, "modules.edged.tailoredKubeletConfig.syncFrequency");
    assert!(message.contains("Go duration"), "{message}");
}
