//! `wedge config print` and `wedge config check`.

use wedge_core::config::{DEFAULT_CONFIG_YAML, EdgeCoreConfig};
use wedge_tests::wedge_cmd;

#[test]
fn print_shows_the_effective_config() {
    let (ok, out, err) = wedge_cmd(&["config", "print"]).unwrap();
    assert!(ok, "{err}");
    let printed = EdgeCoreConfig::from_yaml_str(&out).unwrap();
    assert_eq!(printed, EdgeCoreConfig::embedded_default());

    let (ok, out, _) = wedge_cmd(&["config", "print", "--defaults"]).unwrap();
    assert!(ok);
    assert_eq!(out, DEFAULT_CONFIG_YAML);

    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("edgecore.yaml");
    std::fs::write(&file, "modules:\n  edgeHub:\n    heartbeat: 5\n").unwrap();
    let (ok, out, _) = wedge_cmd(&["config", "print", "--config", file.to_str().unwrap()]).unwrap();
    assert!(ok);
    let merged = EdgeCoreConfig::from_yaml_str(&out).unwrap();
    assert_eq!(merged.modules.edge_hub.heartbeat, 5);
    assert_eq!(
        merged.modules.edge_hub.message_qps, 30,
        "other keys keep their defaults"
    );
}

#[test]
fn check_accepts_good_files_and_names_every_bad_key() {
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("good.yaml");
    std::fs::write(
        &good,
        "apiVersion: edgecore.config.kubeedge.io/v1alpha2\nkind: EdgeCore\nmodules:\n  edged:\n    hostnameOverride: edge-node-1\n",
    )
    .unwrap();
    let (ok, out, err) = wedge_cmd(&["config", "check", good.to_str().unwrap()]).unwrap();
    assert!(ok, "{err}");
    assert!(out.contains("valid (node name edge-node-1)"), "{out}");

    for (text, key) in [
        (
            "modules:\n  edgeHub:\n    heartbaet: 5\n",
            "modules.edgeHub.heartbaet",
        ),
        (
            "modules:\n  eventBus:\n    mqttMode: 7\n",
            "modules.eventBus.mqttMode",
        ),
        (
            "modules:\n  edged:\n    hostnameOverride: Not_A_Name\n",
            "modules.edged.hostnameOverride",
        ),
        (
            "modules:\n  edgeHub:\n    enable: true\n    quic:\n      enable: true\n",
            "modules.edgeHub",
        ),
        ("wedge:\n  adminAddr: nowhere\n", "wedge.adminAddr"),
        (
            "wedge:\n  edgeHub:\n    maxFrameBytes: 100\n",
            "wedge.edgeHub.maxFrameBytes",
        ),
        ("kind: Pod\n", "kind"),
        ("modules: [\n", "invalid YAML"),
    ] {
        let bad = dir.path().join("bad.yaml");
        std::fs::write(&bad, text).unwrap();
        let (ok, _, err) = wedge_cmd(&["config", "check", bad.to_str().unwrap()]).unwrap();
        assert!(!ok, "{text:?} was accepted");
        assert!(
            err.contains(key),
            "{text:?}: error does not name {key}: {err}"
        );
    }
    let (ok, _, err) = wedge_cmd(&["config", "check", "/nonexistent/edgecore.yaml"]).unwrap();
    assert!(!ok);
    assert!(err.contains("/nonexistent/edgecore.yaml"), "{err}");
}

/// The files KubeEdge v1.12 – v1.23 generate (`tests/fixtures/kubeedge-config/`) pass
/// `wedge config check`, which names the keys Wedge ignores on one line; misspelt keys in
/// the same files are still refused by name.
#[test]
fn check_accepts_kubeedge_generated_files() {
    let fixtures =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/kubeedge-config");
    for name in [
        "v1.12.0-defaultconfig.yaml",
        "v1.17.0-defaultconfig.yaml",
        "v1.23.1-defaultconfig.yaml",
        "v1.23.1-minconfig.yaml",
        "v1.23.1-keadm-join.yaml",
    ] {
        let file = fixtures.join(name);
        let (ok, out, err) = wedge_cmd(&["config", "check", file.to_str().unwrap()]).unwrap();
        assert!(ok, "{name}: {err}");
        assert!(out.contains(": valid (node name "), "{name}: {out}");
        let listed: Vec<&str> = out
            .lines()
            .filter(|l| l.starts_with("accepted, not implemented: "))
            .collect();
        assert!(listed.len() <= 1, "{name}: one line at most: {out}");
        if name == "v1.23.1-keadm-join.yaml" {
            let line = listed.first().copied().unwrap_or_default();
            for key in [
                "modules.edged.tailoredKubeletConfig.cgroupDriver",
                "modules.edged.tailoredKubeletConfig.imageServiceEndpoint",
            ] {
                assert!(line.contains(key), "{key} not named: {out}");
            }
            // Acted on: the runtime endpoint picks Docker or a CRI runtime; edgeStream runs
            // the cloudstream tunnel.
            for key in ["containerRuntimeEndpoint", "edgeStream"] {
                assert!(!line.contains(key), "{key} is acted on: {out}");
            }
        }
    }

    let dir = tempfile::tempdir().unwrap();
    let join = std::fs::read_to_string(fixtures.join("v1.23.1-keadm-join.yaml")).unwrap();
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
    ] {
        let bad = dir.path().join("bad.yaml");
        std::fs::write(&bad, join.replacen(from, to, 1)).unwrap();
        let (ok, _, err) = wedge_cmd(&["config", "check", bad.to_str().unwrap()]).unwrap();
        assert!(!ok, "{key} was accepted");
        assert!(err.contains(&format!("{key}: unknown key")), "{err}");
    }
}

#[test]
fn completions_are_printed_for_each_shell() {
    for shell in ["bash", "zsh", "fish"] {
        let (ok, out, err) = wedge_tests::wedge_cmd(&["completions", shell]).unwrap();
        assert!(ok, "{shell}: {err}");
        for word in ["run", "module", "hash-password"] {
            assert!(out.contains(word), "{shell} completion lacks {word}");
        }
    }
    let (ok, _, err) = wedge_tests::wedge_cmd(&["completions", "tcsh"]).unwrap();
    assert!(!ok && err.contains("tcsh"), "{err}");
}
