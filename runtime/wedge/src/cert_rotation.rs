//! Scheduled rotation of the node certificate (`modules.edgeHub.rotateCertificates`,
//! `spec/kubeedge-compat.md` §2).
//!
//! One task per node: it reads the current certificate, sleeps until NotBefore + a random
//! 70–90 % of its validity (so nodes issued together do not rotate together), has the cloud
//! sign a new key with the current certificate as proof (edgehub's [`rotate`]), and then makes
//! the cloud link redial so the new certificate is presented. Failures are retried (2 s
//! doubling to 32 s) with the files left as they were; nothing here can stop the node.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use wedge_edgehub::bootstrap::{
    CertPaths, CertStatus, read_cert_status, rotate, rotation_due, rotation_fraction,
    rotation_retry_delay,
};
use wedge_edgehub::link::EdgeHub;

/// The longest single sleep: waits are cut into steps and the wall clock read again after
/// each, so a clock set forward or a suspended machine does not delay a rotation by the
/// missed time (a tokio sleep runs on the monotonic clock).
const MAX_STEP: Duration = Duration::from_secs(3600);

/// The CA, certificate and key files `modules.edgeHub` names (bootstrap and rotation write
/// the same three).
pub fn cert_paths(hub: &wedge_core::config::EdgeHub) -> CertPaths {
    CertPaths {
        ca: hub.tls_ca_file.clone().into(),
        cert: hub.tls_cert_file.clone().into(),
        key: hub.tls_private_key_file.clone().into(),
    }
}

/// Where rotation asks and what it replaces.
#[derive(Debug, Clone)]
pub struct RotationSettings {
    /// The cloud's certificate server (`httpServer`).
    pub server: String,
    /// The node name the certificate must carry (`system:node:<node>`).
    pub node: String,
    /// The CA, certificate and key files.
    pub paths: CertPaths,
}

impl RotationSettings {
    /// The settings from `modules.edgeHub`, or `None` when rotation is off: turned off with
    /// `rotateCertificates: false`, or impossible because no `httpServer` is set (logged, since
    /// the certificate will then expire unattended).
    pub fn from_config(hub: &wedge_core::config::EdgeHub, node: &str) -> Option<RotationSettings> {
        if !hub.rotate_certificates {
            return None;
        }
        if hub.http_server.trim().is_empty() {
            tracing::warn!(
                "modules.edgeHub.rotateCertificates is on but httpServer is not set; the node \
                 certificate will not be rotated"
            );
            return None;
        }
        Some(RotationSettings {
            server: hub.http_server.clone(),
            node: node.to_owned(),
            paths: cert_paths(hub),
        })
    }
}

/// The running rotation task; [`RotationTask::stop`] ends it.
pub struct RotationTask {
    cancel: CancellationToken,
    task: JoinHandle<()>,
}

impl RotationTask {
    /// Starts rotating per `settings`, telling `hub` to redial after each rotation.
    pub fn spawn(settings: RotationSettings, hub: Arc<EdgeHub>) -> RotationTask {
        let cancel = CancellationToken::new();
        let task = tokio::spawn(run(settings, hub, cancel.clone()));
        RotationTask { cancel, task }
    }

    /// Cancels the task and waits for it. A rotation cut short leaves the files as they were
    /// (they are replaced in one step after the new certificate has arrived).
    pub async fn stop(self) {
        self.cancel.cancel();
        if let Err(e) = self.task.await
            && e.is_panic()
        {
            tracing::error!("certificate rotation task panicked: {e}");
        }
    }
}

/// When the certificate with `status` should be rotated: at the chosen point of its validity
/// when it is usable, at once otherwise (an expired or foreign certificate will most likely be
/// refused, and the retry loop then says why, every 32 s at most).
fn next_due(status: &CertStatus, now: SystemTime, fraction: f64) -> SystemTime {
    match status {
        CertStatus::Valid {
            not_before,
            not_after,
        } => rotation_due(*not_before, *not_after, fraction),
        _ => now,
    }
}

async fn run(settings: RotationSettings, hub: Arc<EdgeHub>, cancel: CancellationToken) {
    let RotationSettings {
        server,
        node,
        paths,
    } = &settings;
    loop {
        let now = SystemTime::now();
        let status = read_cert_status(&paths.cert, node, now);
        let due = next_due(&status, now, rotation_fraction());
        let wait = due.duration_since(now).unwrap_or_default();
        match &status {
            CertStatus::Valid { not_after, .. } => tracing::info!(
                rotate_in_s = wait.as_secs(),
                expires_in_s = not_after.duration_since(now).unwrap_or_default().as_secs(),
                "node certificate rotation scheduled"
            ),
            other => tracing::warn!(
                status = ?other,
                cert = %paths.cert.display(),
                "node certificate is not usable; trying to rotate it now"
            ),
        }
        if !sleep_until(due, &cancel).await {
            return;
        }
        let mut attempt = 0;
        loop {
            let result = tokio::select! {
                _ = cancel.cancelled() => return,
                result = rotate(server, node, paths) => result,
            };
            match result {
                Ok(()) => break,
                Err(e) => {
                    let delay = rotation_retry_delay(attempt);
                    attempt = attempt.saturating_add(1);
                    tracing::warn!(
                        attempt,
                        "certificate rotation failed: {e}; the current files are kept; retrying in {delay:?}"
                    );
                    let retry_at = SystemTime::now() + delay;
                    if !sleep_until(retry_at, &cancel).await {
                        return;
                    }
                }
            }
        }
        tracing::info!(cert = %paths.cert.display(), "node certificate rotated");
        // A session that is up still presents the old certificate: end it, and the redial
        // reads the new files. Without a session the next dial reads them anyway, and a
        // reconnect request would only end that fresh session again.
        if hub.is_connected() {
            tracing::info!("reconnecting to the cloud to present the new certificate");
            hub.reconnect();
        }
    }
}

/// Sleeps until the wall clock reaches `due`; false when cancelled first.
async fn sleep_until(due: SystemTime, cancel: &CancellationToken) -> bool {
    loop {
        let Ok(left) = due.duration_since(SystemTime::now()) else {
            return !cancel.is_cancelled();
        };
        if left.is_zero() {
            return !cancel.is_cancelled();
        }
        tokio::select! {
            _ = cancel.cancelled() => return false,
            _ = tokio::time::sleep(left.min(MAX_STEP)) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::UNIX_EPOCH;

    #[test]
    fn a_valid_certificate_rotates_within_70_to_90_percent_of_its_validity() {
        let nb = UNIX_EPOCH + Duration::from_secs(1_000_000);
        let na = nb + Duration::from_secs(100);
        let status = CertStatus::Valid {
            not_before: nb,
            not_after: na,
        };
        let now = nb + Duration::from_secs(10);
        assert_eq!(next_due(&status, now, 0.75), nb + Duration::from_secs(75));
        for _ in 0..100 {
            let due = next_due(&status, now, rotation_fraction());
            assert!(due >= nb + Duration::from_secs(70) && due < nb + Duration::from_secs(90));
        }
    }

    #[test]
    fn an_unusable_certificate_rotates_at_once() {
        let now = UNIX_EPOCH + Duration::from_secs(1_000_000);
        for status in [
            CertStatus::Missing,
            CertStatus::Unreadable("x".to_owned()),
            CertStatus::WrongCn {
                found: "other".to_owned(),
            },
            CertStatus::Expired {
                not_after: now - Duration::from_secs(1),
            },
        ] {
            assert_eq!(next_due(&status, now, 0.8), now, "{status:?}");
        }
    }

    #[tokio::test]
    async fn sleeping_ends_at_the_due_time_or_on_cancel() {
        let cancel = CancellationToken::new();
        assert!(sleep_until(SystemTime::now() - Duration::from_secs(5), &cancel).await);
        let started = std::time::Instant::now();
        assert!(sleep_until(SystemTime::now() + Duration::from_millis(50), &cancel).await);
        assert!(started.elapsed() >= Duration::from_millis(45));
        let stopper = cancel.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(20)).await;
            stopper.cancel();
        });
        let started = std::time::Instant::now();
        assert!(!sleep_until(SystemTime::now() + Duration::from_secs(60), &cancel).await);
        assert!(started.elapsed() < Duration::from_secs(5));
    }
}
