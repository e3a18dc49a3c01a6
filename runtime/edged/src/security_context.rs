//! A pod's `securityContext` (pod-level `spec.securityContext` and each container's
//! `securityContext`) as Docker runs it, with kubelet's semantics: a container's value
//! overrides the pod's, and what Docker cannot honour is refused by field rather than ignored.
//!
//! - `runAsUser`/`runAsGroup` → the container's `User` (`uid` or `uid:gid`); a group without a
//!   user is refused (containerd refuses it too: Docker would take the image's user).
//! - `runAsNonRoot` → kubelet's check at container creation, against `runAsUser` or else the
//!   image's configured user ([`Engine::verify_run_as_non_root`]), with kubelet's messages.
//! - `privileged`, `capabilities`, `readOnlyRootFilesystem` → the same HostConfig settings;
//!   `allowPrivilegeEscalation: false` → `no-new-privileges`.
//! - `fsGroup` and `supplementalGroups` → `GroupAdd`; `fsGroup` also makes the pod's volume
//!   directories group-owned with the setgid bit ([`own_volume`]), as kubelet's volume
//!   ownership does.
//! - `sysctls` → Docker sysctls: `net.*` on the pod's sandbox, owner of the network namespace
//!   ([`sandbox_sysctls`]), the others (IPC: edged shares no IPC namespace) on each container.
//! - `seccompProfile`/`appArmorProfile` `Unconfined` → `seccomp=unconfined`/`apparmor=unconfined`;
//!   `RuntimeDefault` is the runtime's default profile; `Localhost` is refused. No seccomp
//!   profile at all follows kubelet's `seccompDefault` ([`apply_seccomp_default`]):
//!   unconfined unless it is set. No AppArmor profile is the runtime's default.
//! - `seLinuxOptions`, `procMount: Unmasked`, `supplementalGroupsPolicy: Strict` are refused;
//!   `windowsOptions` is ignored, as kubelet ignores it on Linux.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::engine::{Engine, EngineError};
use crate::pod::{Container, Pod, SpecError};

/// The largest id Kubernetes accepts for a user or group (`math.MaxInt32`).
const MAX_ID: i64 = i32::MAX as i64;

/// Pod-level `spec.securityContext`: defaults for every container, and the pod-wide settings
/// (groups, volume ownership, sysctls).
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PodSecurityContext {
    /// The uid containers run as, unless theirs says otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_as_user: Option<i64>,
    /// The primary gid containers run as, unless theirs says otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_as_group: Option<i64>,
    /// Refuse to start a container that would run as root.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_as_non_root: Option<bool>,
    /// A group every container gets, which also owns the pod's volumes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fs_group: Option<i64>,
    /// More groups every container gets.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub supplemental_groups: Vec<i64>,
    /// `Merge` (Docker's behaviour: the image's groups of the user are kept) or `Strict`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub supplemental_groups_policy: Option<String>,
    /// `OnRootMismatch` or `Always`: both re-own the volumes at every setup here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fs_group_change_policy: Option<String>,
    /// Namespaced kernel parameters for the pod.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sysctls: Vec<Sysctl>,
    /// Seccomp profile of every container, unless theirs says otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seccomp_profile: Option<Profile>,
    /// AppArmor profile of every container, unless theirs says otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub app_armor_profile: Option<Profile>,
    /// SELinux labels: refused when set (kept to say so).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub se_linux_options: Option<serde_json::Value>,
}

/// A container's `securityContext`: its own settings, overriding the pod's.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SecurityContext {
    /// The uid the container runs as.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_as_user: Option<i64>,
    /// The primary gid the container runs as.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_as_group: Option<i64>,
    /// Refuse to start the container if it would run as root.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_as_non_root: Option<bool>,
    /// Every capability and device, no confinement.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub privileged: Option<bool>,
    /// Capabilities added to or dropped from the engine's default set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capabilities: Option<Capabilities>,
    /// The image's filesystem mounted read-only (volumes keep their own mode).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read_only_root_filesystem: Option<bool>,
    /// `false` sets `no_new_privs`: setuid binaries and file capabilities gain nothing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allow_privilege_escalation: Option<bool>,
    /// `Default` or `Unmasked` (refused: it needs user namespaces).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proc_mount: Option<String>,
    /// Seccomp profile.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seccomp_profile: Option<Profile>,
    /// AppArmor profile.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub app_armor_profile: Option<Profile>,
    /// SELinux labels: refused when set (kept to say so).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub se_linux_options: Option<serde_json::Value>,
}

/// `capabilities`: Kubernetes names (`NET_ADMIN`, `ALL`), which Docker takes as they are.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
pub struct Capabilities {
    /// Added to the default set.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub add: Vec<String>,
    /// Removed from the default set.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub drop: Vec<String>,
}

/// A seccomp or AppArmor profile.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Profile {
    /// `RuntimeDefault`, `Unconfined` or `Localhost`.
    #[serde(default, rename = "type")]
    pub kind: String,
    /// The node-local profile of a `Localhost` profile.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub localhost_profile: Option<String>,
}

/// One namespaced kernel parameter.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
pub struct Sysctl {
    /// `net.ipv4.ip_unprivileged_port_start`, `kernel.shm_rmid_forced`...
    pub name: String,
    /// Its value, as written to `/proc/sys`.
    #[serde(default)]
    pub value: String,
}

/// What the engine sets for a container's security, from [`container_security`] (and, for a
/// sandbox, [`sandbox_sysctls`]). The default changes nothing of Docker's defaults.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SecurityPlan {
    /// The container's `User`: `uid` or `uid:gid`; `None` for the image's.
    pub user: Option<String>,
    /// Extra groups (`fsGroup`, then `supplementalGroups`), as numbers.
    pub group_add: Vec<String>,
    /// Privileged container.
    pub privileged: bool,
    /// Capabilities to add.
    pub cap_add: Vec<String>,
    /// Capabilities to drop.
    pub cap_drop: Vec<String>,
    /// Read-only root filesystem.
    pub readonly_rootfs: bool,
    /// `no-new-privileges`, `seccomp=unconfined`, `apparmor=unconfined`.
    pub security_opt: Vec<String>,
    /// Kernel parameters set in the container's namespaces.
    pub sysctls: BTreeMap<String, String>,
}

/// The settings that apply to a container once its own override the pod's.
#[derive(Debug, Default)]
struct Effective<'a> {
    run_as_user: Option<i64>,
    run_as_group: Option<i64>,
    run_as_non_root: Option<bool>,
    seccomp: Option<&'a Profile>,
    app_armor: Option<&'a Profile>,
}

impl<'a> Effective<'a> {
    fn of(pod: &'a Pod, container: &'a Container) -> Effective<'a> {
        let p = pod.spec.security_context.as_ref();
        let c = container.security_context.as_ref();
        Effective {
            run_as_user: c
                .and_then(|c| c.run_as_user)
                .or(p.and_then(|p| p.run_as_user)),
            run_as_group: c
                .and_then(|c| c.run_as_group)
                .or(p.and_then(|p| p.run_as_group)),
            run_as_non_root: c
                .and_then(|c| c.run_as_non_root)
                .or(p.and_then(|p| p.run_as_non_root)),
            seccomp: c
                .and_then(|c| c.seccomp_profile.as_ref())
                .or(p.and_then(|p| p.seccomp_profile.as_ref())),
            app_armor: c
                .and_then(|c| c.app_armor_profile.as_ref())
                .or(p.and_then(|p| p.app_armor_profile.as_ref())),
        }
    }
}

/// Kubelet's `seccompDefault` for a container that names no seccomp profile (nor does its
/// pod): the runtime's default profile when `runtime_default`, else unconfined, as kubelet
/// asks the runtime for by default. A profile the pod or container names is left as it is.
pub fn apply_seccomp_default(
    plan: &mut SecurityPlan,
    pod: &Pod,
    container: &Container,
    runtime_default: bool,
) {
    if Effective::of(pod, container).seccomp.is_none() && !runtime_default {
        plan.security_opt.push("seccomp=unconfined".to_owned());
    }
}

/// Whether a sysctl lives in the network namespace (the sandbox's, when the pod has one).
fn is_net(name: &str) -> bool {
    name.starts_with("net.") || name.starts_with("net/")
}

/// A sysctl name as Docker wants it: kubelet accepts `/` as the separator too.
fn dotted(name: &str) -> String {
    name.replace('/', ".")
}

/// The security settings of `container` of `pod`. With `sandboxed` the container joins its
/// pod's sandbox, which holds the `net.*` sysctls; without, it owns its network namespace and
/// gets them itself.
pub fn container_security(pod: &Pod, container: &Container, sandboxed: bool) -> SecurityPlan {
    let effective = Effective::of(pod, container);
    let pod_sc = pod.spec.security_context.as_ref();
    let c = container.security_context.as_ref();
    let user = match (effective.run_as_user, effective.run_as_group) {
        (Some(uid), Some(gid)) => Some(format!("{uid}:{gid}")),
        (Some(uid), None) => Some(uid.to_string()),
        // A group without a user is refused by `validate`.
        (None, _) => None,
    };
    let mut group_add: Vec<String> = Vec::new();
    if let Some(sc) = pod_sc {
        for gid in sc.fs_group.iter().chain(&sc.supplemental_groups) {
            let gid = gid.to_string();
            if !group_add.contains(&gid) {
                group_add.push(gid);
            }
        }
    }
    let mut security_opt = Vec::new();
    if c.and_then(|c| c.allow_privilege_escalation) == Some(false) {
        security_opt.push("no-new-privileges".to_owned());
    }
    if effective.seccomp.is_some_and(|p| p.kind == "Unconfined") {
        security_opt.push("seccomp=unconfined".to_owned());
    }
    if effective.app_armor.is_some_and(|p| p.kind == "Unconfined") {
        security_opt.push("apparmor=unconfined".to_owned());
    }
    let sysctls = pod_sc
        .map(|sc| sc.sysctls.as_slice())
        .unwrap_or_default()
        .iter()
        .filter(|s| !(sandboxed && is_net(&s.name)))
        .map(|s| (dotted(&s.name), s.value.clone()))
        .collect();
    let capabilities = c.and_then(|c| c.capabilities.as_ref());
    SecurityPlan {
        user,
        group_add,
        privileged: c.and_then(|c| c.privileged) == Some(true),
        cap_add: capabilities
            .map(|caps| caps.add.clone())
            .unwrap_or_default(),
        cap_drop: capabilities
            .map(|caps| caps.drop.clone())
            .unwrap_or_default(),
        readonly_rootfs: c.and_then(|c| c.read_only_root_filesystem) == Some(true),
        security_opt,
        sysctls,
    }
}

/// The `net.*` sysctls of `pod`, which its sandbox sets in the network namespace it owns (the
/// engine sets a joining container's on the namespace it joins, or refuses them, depending on
/// its version; kubelet sets them on the sandbox).
pub fn sandbox_sysctls(pod: &Pod) -> BTreeMap<String, String> {
    pod.spec
        .security_context
        .as_ref()
        .map(|sc| sc.sysctls.as_slice())
        .unwrap_or_default()
        .iter()
        .filter(|s| is_net(&s.name))
        .map(|s| (dotted(&s.name), s.value.clone()))
        .collect()
}

/// Why a spec cannot run as asked; the reason is `InvalidPodSpec`.
fn refuse(field: String, why: impl std::fmt::Display) -> SpecError {
    SpecError {
        reason: "InvalidPodSpec",
        message: format!("{field}: {why}"),
    }
}

/// Checks `pod`'s security settings and those of its init and app containers
/// (engine-independent): what Docker cannot honour is refused, naming the field.
pub fn validate(pod: &Pod) -> Result<(), SpecError> {
    if let Some(sc) = &pod.spec.security_context {
        validate_pod_level(pod, sc)?;
    }
    for (field, list) in [
        ("spec.initContainers", &pod.spec.init_containers),
        ("spec.containers", &pod.spec.containers),
    ] {
        for (i, c) in list.iter().enumerate() {
            validate_container(pod, c, &format!("{field}[{i}]"))?;
        }
    }
    Ok(())
}

/// Checks the pod-level `spec.securityContext`.
fn validate_pod_level(pod: &Pod, sc: &PodSecurityContext) -> Result<(), SpecError> {
    let at = |field: &str| format!("spec.securityContext.{field}");
    check_id(at("runAsUser"), sc.run_as_user)?;
    check_id(at("runAsGroup"), sc.run_as_group)?;
    check_id(at("fsGroup"), sc.fs_group)?;
    for (i, gid) in sc.supplemental_groups.iter().enumerate() {
        check_id(at(&format!("supplementalGroups[{i}]")), Some(*gid))?;
    }
    match sc.supplemental_groups_policy.as_deref() {
        None | Some("Merge") => {}
        Some("Strict") => {
            return Err(refuse(
                at("supplementalGroupsPolicy"),
                "Strict is not supported by this node (Docker always adds the groups the image \
                 gives the user); use Merge",
            ));
        }
        Some(other) => return Err(refuse(at("supplementalGroupsPolicy"), invalid(other))),
    }
    match sc.fs_group_change_policy.as_deref() {
        None | Some("OnRootMismatch" | "Always") => {}
        Some(other) => return Err(refuse(at("fsGroupChangePolicy"), invalid(other))),
    }
    for (i, sysctl) in sc.sysctls.iter().enumerate() {
        let field = at(&format!("sysctls[{i}].name"));
        if !is_sysctl_name(&sysctl.name) {
            return Err(refuse(
                field,
                format!("{:?} is not a valid sysctl name", sysctl.name),
            ));
        }
        if pod.spec.host_network && is_net(&sysctl.name) {
            return Err(refuse(
                field,
                format!(
                    "sysctl {:?} not allowed with host net enabled (it would change the node's network)",
                    sysctl.name
                ),
            ));
        }
    }
    check_profile(at("seccompProfile"), sc.seccomp_profile.as_ref())?;
    check_profile(at("appArmorProfile"), sc.app_armor_profile.as_ref())?;
    check_se_linux(at("seLinuxOptions"), sc.se_linux_options.as_ref())
}

/// Checks the `securityContext` of one container at `at` (`spec.containers[0]`; init
/// containers pass their own path), and the pod-level settings it depends on.
pub fn validate_container(pod: &Pod, container: &Container, at: &str) -> Result<(), SpecError> {
    let field = |name: &str| format!("{at}.securityContext.{name}");
    let effective = Effective::of(pod, container);
    if effective.run_as_group.is_some() && effective.run_as_user.is_none() {
        let from_container = container
            .security_context
            .as_ref()
            .is_some_and(|c| c.run_as_group.is_some());
        let path = if from_container {
            field("runAsGroup")
        } else {
            "spec.securityContext.runAsGroup".to_owned()
        };
        return Err(refuse(
            path,
            format!(
                "a group is set without a user for container {}: set runAsUser too (pod- or \
                 container-level), as containerd requires",
                container.name
            ),
        ));
    }
    let Some(sc) = &container.security_context else {
        return Ok(());
    };
    check_id(field("runAsUser"), sc.run_as_user)?;
    check_id(field("runAsGroup"), sc.run_as_group)?;
    if sc.allow_privilege_escalation == Some(false) {
        if sc.privileged == Some(true) {
            return Err(refuse(
                field("allowPrivilegeEscalation"),
                "cannot set allowPrivilegeEscalation to false and privileged to true",
            ));
        }
        let adds_sys_admin = sc.capabilities.as_ref().is_some_and(|caps| {
            caps.add
                .iter()
                .any(|c| matches!(c.as_str(), "SYS_ADMIN" | "CAP_SYS_ADMIN"))
        });
        if adds_sys_admin {
            return Err(refuse(
                field("allowPrivilegeEscalation"),
                "cannot set allowPrivilegeEscalation to false and capabilities.Add CAP_SYS_ADMIN",
            ));
        }
    }
    match sc.proc_mount.as_deref() {
        None | Some("Default") => {}
        Some("Unmasked") => {
            return Err(refuse(
                field("procMount"),
                "Unmasked needs a user namespace (hostUsers: false), which this node does not \
                 support; use Default",
            ));
        }
        Some(other) => return Err(refuse(field("procMount"), invalid(other))),
    }
    check_profile(field("seccompProfile"), sc.seccomp_profile.as_ref())?;
    check_profile(field("appArmorProfile"), sc.app_armor_profile.as_ref())?;
    check_se_linux(field("seLinuxOptions"), sc.se_linux_options.as_ref())
}

fn invalid(value: &str) -> String {
    format!("{value:?} is not a valid value")
}

/// A user or group id Kubernetes accepts: 0 to 2147483647.
fn check_id(field: String, id: Option<i64>) -> Result<(), SpecError> {
    match id {
        Some(id) if !(0..=MAX_ID).contains(&id) => Err(refuse(
            field,
            format!("{id} must be between 0 and {MAX_ID}, inclusive"),
        )),
        _ => Ok(()),
    }
}

/// `RuntimeDefault` and `Unconfined` are Docker's; a `Localhost` profile is a file kubelet
/// reads from its own directory, which this node does not have.
fn check_profile(field: String, profile: Option<&Profile>) -> Result<(), SpecError> {
    match profile.map(|p| p.kind.as_str()) {
        None | Some("RuntimeDefault" | "Unconfined") => Ok(()),
        Some("Localhost") => Err(refuse(
            field,
            "Localhost profiles are not supported by this node; use RuntimeDefault or Unconfined",
        )),
        Some(other) => Err(refuse(format!("{field}.type"), invalid(other))),
    }
}

/// SELinux labels: Docker on this node runs without SELinux labelling, so none can be set.
fn check_se_linux(field: String, options: Option<&serde_json::Value>) -> Result<(), SpecError> {
    let set = options
        .and_then(serde_json::Value::as_object)
        .is_some_and(|o| {
            o.values()
                .any(|v| v.as_str().is_some_and(|s| !s.is_empty()))
        });
    if set {
        return Err(refuse(
            field,
            "SELinux labels are not supported by this node; remove seLinuxOptions",
        ));
    }
    Ok(())
}

/// Kubernetes' sysctl name: dot- or slash-separated segments of `[a-z0-9_-]`, at most 253.
fn is_sysctl_name(name: &str) -> bool {
    name.len() <= 253
        && name.split(['.', '/']).all(|segment| {
            let b = segment.as_bytes();
            !b.is_empty()
                && b.iter().all(|c| {
                    c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'_' || *c == b'-'
                })
                && b[0].is_ascii_alphanumeric()
                && b[b.len() - 1].is_ascii_alphanumeric()
        })
}

/// Kubelet's pod description in messages: `<name>_<namespace>(<uid>)`.
fn pod_desc(pod: &Pod) -> String {
    format!(
        "{}_{}({})",
        pod.metadata.name,
        pod.namespace(),
        pod.metadata.uid
    )
}

/// Whether kubelet's `runAsNonRoot` check needs the image's configured user for `container`:
/// only when the check is asked and no `runAsUser` says who runs.
pub fn needs_image_user(pod: &Pod, container: &Container) -> bool {
    let effective = Effective::of(pod, container);
    effective.run_as_non_root == Some(true) && effective.run_as_user.is_none()
}

/// Kubelet's `runAsNonRoot` verdict for `container`, with `image_user` the image's configured
/// `User` (`""`, `uid`, `uid:gid`, `name`...; only read when [`needs_image_user`]): `Some`
/// carries kubelet's message when the container must not start.
pub fn run_as_non_root_error(pod: &Pod, container: &Container, image_user: &str) -> Option<String> {
    let effective = Effective::of(pod, container);
    if effective.run_as_non_root != Some(true) {
        return None;
    }
    let (desc, name) = (pod_desc(pod), &container.name);
    if let Some(uid) = effective.run_as_user {
        return (uid == 0).then(|| {
            format!(
                "container's runAsUser breaks non-root policy (pod: {desc:?}, container: {name})"
            )
        });
    }
    // As the runtime reports it: the part before `:`; numeric is a uid, else a user name.
    let user = image_user.split(':').next().unwrap_or_default();
    let root = || {
        format!(
            "container has runAsNonRoot and image will run as root (pod: {desc:?}, container: {name})"
        )
    };
    match user.parse::<i64>() {
        _ if user.is_empty() => Some(root()),
        Ok(0) => Some(root()),
        Ok(_) => None,
        Err(_) => Some(format!(
            "container has runAsNonRoot and image has non-numeric user ({user}), cannot verify \
             user is non-root (pod: {desc:?}, container: {name})"
        )),
    }
}

impl Engine {
    /// Kubelet's `runAsNonRoot` check for `container` of `pod`, whose image is present: an
    /// error is `CreateContainerConfigError` with kubelet's message, so the container waits
    /// and says why.
    pub async fn verify_run_as_non_root(
        &self,
        pod: &Pod,
        container: &Container,
    ) -> Result<(), EngineError> {
        let image_user = if needs_image_user(pod, container) {
            self.image_user(&container.image).await?
        } else {
            String::new()
        };
        match run_as_non_root_error(pod, container, &image_user) {
            None => Ok(()),
            Some(message) => Err(EngineError::Image {
                reason: "CreateContainerConfigError",
                message,
            }),
        }
    }
}

/// With `pod`'s `fsGroup` set, makes the volume directory `dir` and everything in it
/// group-owned by that group, group-readable (and writable when `writable`), directories
/// group-searchable with the setgid bit so new files inherit the group: kubelet's volume
/// ownership. Symbolic links are re-owned, never followed. Without `fsGroup`, nothing.
pub fn own_volume(dir: &Path, pod: &Pod, writable: bool) -> Result<(), String> {
    let Some(gid) = pod
        .spec
        .security_context
        .as_ref()
        .and_then(|sc| sc.fs_group)
    else {
        return Ok(());
    };
    let gid = u32::try_from(gid).map_err(|_| format!("fsGroup {gid} is out of range"))?;
    own_tree(dir, gid, writable)
        .map_err(|e| format!("cannot apply fsGroup {gid} to {}: {e}", dir.display()))
}

fn own_tree(path: &Path, gid: u32, writable: bool) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::os::unix::fs::lchown(path, None, Some(gid))?;
    let meta = std::fs::symlink_metadata(path)?;
    if meta.file_type().is_symlink() {
        return Ok(());
    }
    let mut mode = meta.permissions().mode() & 0o7777;
    mode |= if writable { 0o660 } else { 0o440 };
    if meta.is_dir() {
        mode |= 0o110 | 0o2000;
    }
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))?;
    if meta.is_dir() {
        for entry in std::fs::read_dir(path)? {
            own_tree(&entry?.path(), gid, writable)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(spec: serde_json::Value) -> Pod {
        let mut spec = spec;
        if spec.get("containers").is_none() {
            spec["containers"] = serde_json::json!([{"name": "app", "image": "img"}]);
        }
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "web", "namespace": "apps", "uid": "u-1"},
            "spec": spec,
        }))
        .unwrap()
    }

    fn first(p: &Pod, sandboxed: bool) -> SecurityPlan {
        container_security(p, &p.spec.containers[0], sandboxed)
    }

    #[test]
    fn seccomp_default_decides_only_where_no_profile_is_named() {
        let unset = pod(serde_json::json!({}));
        let named = pod(
            serde_json::json!({"securityContext": {"seccompProfile": {"type": "RuntimeDefault"}}}),
        );
        for (p, runtime_default, unconfined) in [
            (&unset, false, true),
            (&unset, true, false),
            (&named, false, false),
            (&named, true, false),
        ] {
            let mut plan = first(p, true);
            apply_seccomp_default(&mut plan, p, &p.spec.containers[0], runtime_default);
            assert_eq!(
                plan.security_opt.contains(&"seccomp=unconfined".to_owned()),
                unconfined,
                "{runtime_default}: {plan:?}"
            );
        }
    }

    #[test]
    fn nothing_set_changes_nothing() {
        let p = pod(serde_json::json!({}));
        assert_eq!(first(&p, true), SecurityPlan::default());
        validate(&p).unwrap();
        assert!(!needs_image_user(&p, &p.spec.containers[0]));
        assert_eq!(run_as_non_root_error(&p, &p.spec.containers[0], ""), None);
    }

    #[test]
    fn the_container_overrides_the_pod() {
        let p = pod(serde_json::json!({
            "securityContext": {
                "runAsUser": 1000, "runAsGroup": 3000, "fsGroup": 2000,
                "supplementalGroups": [4000, 2000],
                "seccompProfile": {"type": "Unconfined"}, "appArmorProfile": {"type": "Unconfined"},
                "windowsOptions": {"runAsUserName": "x"}
            },
            "containers": [
                {"name": "own", "image": "img", "securityContext": {
                    "runAsUser": 1001, "privileged": true, "readOnlyRootFilesystem": true,
                    "allowPrivilegeEscalation": false,
                    "capabilities": {"add": ["NET_ADMIN"], "drop": ["ALL"]},
                    "seccompProfile": {"type": "RuntimeDefault"}
                }},
                {"name": "inherits", "image": "img"}
            ]
        }));
        let own = first(&p, true);
        assert_eq!(own.user.as_deref(), Some("1001:3000"));
        assert_eq!(own.group_add, ["2000", "4000"]);
        assert!(own.privileged && own.readonly_rootfs);
        assert_eq!(own.cap_add, ["NET_ADMIN"]);
        assert_eq!(own.cap_drop, ["ALL"]);
        assert_eq!(
            own.security_opt,
            ["no-new-privileges", "apparmor=unconfined"]
        );
        let inherits = container_security(&p, &p.spec.containers[1], true);
        assert_eq!(inherits.user.as_deref(), Some("1000:3000"));
        assert!(!inherits.privileged && !inherits.readonly_rootfs);
        assert_eq!(
            inherits.security_opt,
            ["seccomp=unconfined", "apparmor=unconfined"]
        );
        // privileged with allowPrivilegeEscalation false is refused.
        assert!(
            validate(&p)
                .unwrap_err()
                .message
                .starts_with("spec.containers[0].securityContext.allowPrivilegeEscalation")
        );
    }

    #[test]
    fn net_sysctls_go_to_the_sandbox_others_to_each_container() {
        let p = pod(serde_json::json!({"securityContext": {"sysctls": [
            {"name": "net.ipv4.ip_unprivileged_port_start", "value": "80"},
            {"name": "kernel/shm_rmid_forced", "value": "1"}
        ]}}));
        validate(&p).unwrap();
        let kernel = BTreeMap::from([("kernel.shm_rmid_forced".to_owned(), "1".to_owned())]);
        assert_eq!(first(&p, true).sysctls, kernel);
        assert_eq!(
            sandbox_sysctls(&p),
            BTreeMap::from([(
                "net.ipv4.ip_unprivileged_port_start".to_owned(),
                "80".to_owned()
            )])
        );
        // Without a sandbox the container owns its network namespace.
        assert_eq!(first(&p, false).sysctls.len(), 2);
        let mut host = p.clone();
        host.spec.host_network = true;
        let e = validate(&host).unwrap_err();
        assert!(
            e.message
                .starts_with("spec.securityContext.sysctls[0].name"),
            "{e}"
        );
    }

    #[test]
    fn what_docker_cannot_honour_is_refused_by_field() {
        let cases = [
            (
                serde_json::json!({"securityContext": {"runAsGroup": 10}}),
                "spec.securityContext.runAsGroup",
            ),
            (
                serde_json::json!({"containers": [{"name": "app", "image": "img", "securityContext": {"runAsGroup": 10}}]}),
                "spec.containers[0].securityContext.runAsGroup",
            ),
            (
                serde_json::json!({"containers": [{"name": "app", "image": "img", "securityContext": {"seLinuxOptions": {"level": "s0:c1"}}}]}),
                "spec.containers[0].securityContext.seLinuxOptions",
            ),
            (
                serde_json::json!({"securityContext": {"seLinuxOptions": {"type": "spc_t"}}}),
                "spec.securityContext.seLinuxOptions",
            ),
            (
                serde_json::json!({"containers": [{"name": "app", "image": "img", "securityContext": {"procMount": "Unmasked"}}]}),
                "spec.containers[0].securityContext.procMount",
            ),
            (
                serde_json::json!({"initContainers": [{"name": "prep", "image": "img", "securityContext": {"procMount": "Unmasked"}}]}),
                "spec.initContainers[0].securityContext.procMount",
            ),
            (
                serde_json::json!({"securityContext": {"seccompProfile": {"type": "Localhost", "localhostProfile": "p.json"}}}),
                "spec.securityContext.seccompProfile",
            ),
            (
                serde_json::json!({"containers": [{"name": "app", "image": "img", "securityContext": {"appArmorProfile": {"type": "Localhost"}}}]}),
                "spec.containers[0].securityContext.appArmorProfile",
            ),
            (
                serde_json::json!({"securityContext": {"runAsUser": -1}}),
                "spec.securityContext.runAsUser",
            ),
            (
                serde_json::json!({"securityContext": {"supplementalGroupsPolicy": "Strict"}}),
                "spec.securityContext.supplementalGroupsPolicy",
            ),
            (
                serde_json::json!({"securityContext": {"sysctls": [{"name": "Net..x", "value": "1"}]}}),
                "spec.securityContext.sysctls[0].name",
            ),
            (
                serde_json::json!({"containers": [{"name": "app", "image": "img", "securityContext": {"allowPrivilegeEscalation": false, "capabilities": {"add": ["SYS_ADMIN"]}}}]}),
                "spec.containers[0].securityContext.allowPrivilegeEscalation",
            ),
        ];
        for (spec, field) in cases {
            let e = validate(&pod(spec.clone())).unwrap_err();
            assert_eq!(e.reason, "InvalidPodSpec");
            assert!(e.message.starts_with(&format!("{field}: ")), "{spec}: {e}");
        }
        // Empty SELinux options, Default procMount and a group with a user are fine.
        validate(&pod(serde_json::json!({
            "securityContext": {"runAsGroup": 10, "seLinuxOptions": {}},
            "containers": [{"name": "app", "image": "img", "securityContext": {"runAsUser": 5, "procMount": "Default"}}]
        })))
        .unwrap();
    }

    #[test]
    fn run_as_non_root_follows_kubelet() {
        let p = pod(serde_json::json!({"securityContext": {"runAsNonRoot": true}}));
        let c = &p.spec.containers[0];
        assert!(needs_image_user(&p, c));
        let root = "container has runAsNonRoot and image will run as root (pod: \"web_apps(u-1)\", container: app)";
        for user in ["", "0", "0:0"] {
            assert_eq!(
                run_as_non_root_error(&p, c, user).as_deref(),
                Some(root),
                "{user:?}"
            );
        }
        assert_eq!(
            run_as_non_root_error(&p, c, "nobody").as_deref(),
            Some(
                "container has runAsNonRoot and image has non-numeric user (nobody), cannot verify user is non-root (pod: \"web_apps(u-1)\", container: app)"
            )
        );
        assert!(
            run_as_non_root_error(&p, c, "root")
                .unwrap()
                .contains("non-numeric user (root)")
        );
        assert_eq!(run_as_non_root_error(&p, c, "1000:1000"), None);
        // An explicit user decides without the image.
        let mut explicit = p.clone();
        explicit.spec.containers[0].security_context = Some(SecurityContext {
            run_as_user: Some(0),
            ..SecurityContext::default()
        });
        let c = &explicit.spec.containers[0];
        assert!(!needs_image_user(&explicit, c));
        assert!(
            run_as_non_root_error(&explicit, c, "")
                .unwrap()
                .starts_with("container's runAsUser breaks non-root policy")
        );
        explicit.spec.containers[0].security_context = Some(SecurityContext {
            run_as_user: Some(1000),
            run_as_non_root: Some(false),
            ..SecurityContext::default()
        });
        assert_eq!(
            run_as_non_root_error(&explicit, &explicit.spec.containers[0], ""),
            None
        );
    }

    #[test]
    fn fs_group_owns_the_volume_with_setgid() {
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        let dir = tempfile::tempdir().unwrap();
        let vol = dir.path().join("vol");
        std::fs::create_dir_all(vol.join("sub")).unwrap();
        std::fs::write(vol.join("sub/secret"), b"x").unwrap();
        std::fs::set_permissions(vol.join("sub/secret"), PermissionsExt::from_mode(0o400)).unwrap();
        std::os::unix::fs::symlink("sub/secret", vol.join("link")).unwrap();
        // No fsGroup: untouched.
        own_volume(&vol, &pod(serde_json::json!({})), true).unwrap();
        assert_eq!(std::fs::metadata(&vol).unwrap().mode() & 0o2000, 0);
        // The process's own group: any user may give it its files.
        // SAFETY: getegid has no preconditions and cannot fail.
        let gid = unsafe { libc::getegid() };
        let p = pod(serde_json::json!({"securityContext": {"fsGroup": gid}}));
        own_volume(&vol, &p, false).unwrap();
        let meta = |p: &Path| std::fs::metadata(p).unwrap();
        assert_eq!(meta(&vol).gid(), gid);
        assert_eq!(meta(&vol).mode() & 0o2000, 0o2000);
        assert_eq!(meta(&vol.join("sub")).mode() & 0o2550, 0o2550);
        assert_eq!(meta(&vol.join("sub/secret")).gid(), gid);
        assert_eq!(meta(&vol.join("sub/secret")).mode() & 0o777, 0o440);
        assert_eq!(
            std::fs::symlink_metadata(vol.join("link")).unwrap().gid(),
            gid
        );
        own_volume(&vol, &p, true).unwrap();
        assert_eq!(meta(&vol.join("sub/secret")).mode() & 0o777, 0o660);
    }
}
