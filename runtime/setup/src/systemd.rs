//! The systemd unit: rendered from `packaging/wedge.service` (the file the .deb installs)
//! with the paths of this join, installed, enabled and started.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::SetupError;
use crate::join::write_whole;
use crate::layout::{DATA_DIR, KUBEEDGE_DIR, Layout};

/// The unit as shipped.
pub const UNIT: &str = include_str!("../../../packaging/wedge.service");
/// Its name.
pub const UNIT_NAME: &str = "wedge.service";
/// The binary path the shipped unit names.
const SHIPPED_BINARY: &str = "/usr/bin/wedge";
/// The service's user and group.
pub const SERVICE_USER: &str = "wedge";

/// Whether systemd manages this machine (what `sd_booted()` checks).
pub fn running() -> bool {
    Path::new("/run/systemd/system").is_dir()
}

/// The unit for `binary` and `layout`: the shipped one with its paths replaced.
pub fn render(binary: &Path, layout: &Layout) -> String {
    let config = layout.config();
    let mut writable = format!("ReadWritePaths={}", layout.kubeedge_dir.display());
    if layout.data_dir != Path::new(DATA_DIR) {
        // Only `StateDirectory` is writable under `ProtectSystem=strict`.
        writable.push_str(&format!("\nReadWritePaths={}", layout.data_dir.display()));
    }
    UNIT.replace(SHIPPED_BINARY, &binary.display().to_string())
        .replace(
            &format!("{KUBEEDGE_DIR}/config/edgecore.yaml"),
            &config.display().to_string(),
        )
        .replace(&format!("ReadWritePaths={KUBEEDGE_DIR}"), &writable)
        .replace(
            &format!("--data-dir {DATA_DIR}"),
            &format!("--data-dir {}", layout.data_dir.display()),
        )
}

/// A drop-in giving the service the `docker` group, so edged reaches Docker's socket.
pub const DOCKER_DROP_IN: &str = "# Written by `wedge join`: edged runs pods on Docker.\n\
[Service]\nSupplementaryGroups=docker\n";

/// Where the unit and its drop-in go under `unit_dir`.
pub fn unit_paths(unit_dir: &Path) -> (PathBuf, PathBuf) {
    (
        unit_dir.join(UNIT_NAME),
        unit_dir.join(format!("{UNIT_NAME}.d")).join("docker.conf"),
    )
}

/// What [`install`] did, a line each.
pub type Steps = Vec<String>;

/// Installs the service: the `wedge` system user (when missing), ownership of the node's
/// KubeEdge directory and data directory, the unit (and the Docker drop-in when `docker`),
/// then `systemctl daemon-reload` and `enable --now`.
pub fn install(
    binary: &Path,
    layout: &Layout,
    unit_dir: &Path,
    docker: bool,
) -> Result<Steps, SetupError> {
    let mut steps = Steps::new();
    if !service_user_exists() {
        run(Command::new("useradd").args([
            "--system",
            "--user-group",
            "--home-dir",
            &layout.data_dir.display().to_string(),
            "--no-create-home",
            "--shell",
            "/usr/sbin/nologin",
            SERVICE_USER,
        ]))?;
        steps.push(format!("created system user {SERVICE_USER}"));
    }
    steps.extend(hand_over(layout)?);
    let (unit, drop_in) = unit_paths(unit_dir);
    write_whole(&unit, render(binary, layout).as_bytes(), 0o644)?;
    steps.push(format!("wrote {}", unit.display()));
    if docker {
        if group_exists("docker") {
            write_whole(&drop_in, DOCKER_DROP_IN.as_bytes(), 0o644)?;
            steps.push(format!("wrote {} (group docker)", drop_in.display()));
        } else {
            steps.push(
                "edged is on but there is no docker group: pods cannot start until Docker \
                 (or a CRI runtime) is installed"
                    .to_owned(),
            );
        }
    }
    run(Command::new("systemctl").arg("daemon-reload"))?;
    run(Command::new("systemctl").args(["enable", "--now", UNIT_NAME]))?;
    steps.push(format!("systemctl enable --now {UNIT_NAME}"));
    Ok(steps)
}

/// Gives the node's KubeEdge directory and data directory (made when missing) to the service
/// user, so the unit (or its command run by hand as that user) can write them: what `join`
/// wrote as root included.
pub fn hand_over(layout: &Layout) -> Result<Steps, SetupError> {
    let mut steps = Steps::new();
    for dir in [&layout.kubeedge_dir, &layout.data_dir] {
        std::fs::create_dir_all(dir).map_err(|e| SetupError::io("cannot create", dir, e))?;
        run(Command::new("chown")
            .arg("-R")
            .arg(format!("{SERVICE_USER}:{SERVICE_USER}"))
            .arg(dir))?;
        steps.push(format!("{} owned by {SERVICE_USER}", dir.display()));
    }
    Ok(steps)
}

/// Whether the service user exists (the .deb's postinst makes it).
pub fn service_user_exists() -> bool {
    user_exists(SERVICE_USER)
}

/// Stops and disables the service and removes its unit files; what is not there is skipped.
pub fn uninstall(unit_dir: &Path) -> Result<Steps, SetupError> {
    let mut steps = Steps::new();
    let (unit, drop_in) = unit_paths(unit_dir);
    if running() && unit.exists() {
        run(Command::new("systemctl").args(["disable", "--now", UNIT_NAME]))?;
        steps.push(format!("systemctl disable --now {UNIT_NAME}"));
    }
    for file in [&drop_in, &unit] {
        if file.exists() {
            std::fs::remove_file(file).map_err(|e| SetupError::io("cannot remove", file, e))?;
            steps.push(format!("removed {}", file.display()));
        }
    }
    if let Some(dir) = drop_in.parent() {
        let _ = std::fs::remove_dir(dir);
    }
    if running() && !steps.is_empty() {
        run(Command::new("systemctl").arg("daemon-reload"))?;
    }
    Ok(steps)
}

fn user_exists(name: &str) -> bool {
    listed("/etc/passwd", name)
}

/// Whether group `name` exists.
pub fn group_exists(name: &str) -> bool {
    listed("/etc/group", name)
}

/// Whether `name` is the first field of a line of `file` (passwd/group format).
fn listed(file: &str, name: &str) -> bool {
    std::fs::read_to_string(file)
        .map(|text| text.lines().any(|l| l.split(':').next() == Some(name)))
        .unwrap_or(false)
}

fn run(command: &mut Command) -> Result<(), SetupError> {
    let shown = format!("{command:?}").replace('"', "");
    let output = command
        .output()
        .map_err(|e| SetupError::Systemd(format!("cannot run {shown}: {e}")))?;
    if output.status.success() {
        return Ok(());
    }
    Err(SetupError::Systemd(format!(
        "{shown} failed ({}): {}",
        output.status,
        String::from_utf8_lossy(&output.stderr).trim()
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shipped_unit_runs_the_default_layout_hardened() {
        for line in [
            "User=wedge",
            "ExecStart=/usr/bin/wedge run --config /etc/kubeedge/config/edgecore.yaml --data-dir /var/lib/wedge",
            "Restart=always",
            "LimitNOFILE=65536",
            "ProtectSystem=strict",
            "NoNewPrivileges=yes",
            "ReadWritePaths=/etc/kubeedge",
        ] {
            assert!(UNIT.lines().any(|l| l == line), "no {line:?} in the unit");
        }
        assert_eq!(render(Path::new(SHIPPED_BINARY), &Layout::default()), UNIT);
    }

    #[test]
    fn a_join_elsewhere_renders_its_own_paths() {
        let layout = Layout {
            kubeedge_dir: "/srv/kubeedge".into(),
            data_dir: "/srv/wedge".into(),
        };
        let unit = render(Path::new("/opt/wedge/bin/wedge"), &layout);
        assert!(unit.contains(
            "ExecStart=/opt/wedge/bin/wedge run --config /srv/kubeedge/config/edgecore.yaml --data-dir /srv/wedge"
        ));
        assert!(unit.contains("ReadWritePaths=/srv/kubeedge\nReadWritePaths=/srv/wedge\n"));
        assert!(!unit.contains("/etc/kubeedge/config"));
    }

    #[test]
    fn uninstall_of_nothing_does_nothing() {
        let dir = tempfile::tempdir().unwrap();
        assert!(uninstall(dir.path()).unwrap().is_empty());
    }
}
