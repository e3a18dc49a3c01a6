//! The node lease, watched for three minutes while the other checks run: kubelet renews it
//! every `nodeLeaseDurationSeconds / 4` (10 s) with the lease's current `resourceVersion`.

use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{Result, bail, ensure};

use crate::Bed;

/// How long the lease is watched.
const WATCH: Duration = Duration::from_secs(180);

/// The renewal period the node must keep (10 s), with room for a slow renewal.
const STALE_AFTER: Duration = Duration::from_secs(25);

/// Starts watching the lease; the returned check waits for the watch to end and judges it.
pub fn watch(bed: &Bed) -> crate::Check {
    let kubectl = bed.cloud.kubectl_client();
    let node = bed.node.name.clone();
    let watcher: JoinHandle<Result<usize>> = std::thread::spawn(move || {
        let started = Instant::now();
        let mut renewals = Vec::new();
        let mut last_change = Instant::now();
        while started.elapsed() < WATCH {
            let lease = kubectl.get_opt(&["-n", "kube-node-lease", "lease", &node])?;
            let renew = lease
                .as_ref()
                .and_then(|l| l["spec"]["renewTime"].as_str().map(str::to_owned));
            if let Some(renew) = renew
                && renewals.last() != Some(&renew)
            {
                renewals.push(renew);
                last_change = Instant::now();
            }
            if last_change.elapsed() > STALE_AFTER {
                bail!(
                    "renewTime has not moved for {:?} after {:?} of watching (renewals seen: {renewals:?})",
                    last_change.elapsed(),
                    started.elapsed()
                );
            }
            std::thread::sleep(Duration::from_secs(2));
        }
        Ok(renewals.len())
    });
    Box::new(move |bed: &mut Bed| {
        let renewals = match watcher.join() {
            Ok(result) => result?,
            Err(_) => bail!("the lease watcher panicked"),
        };
        // 180 s at one renewal per 10 s.
        ensure!(renewals >= 15, "only {renewals} renewals in {WATCH:?}");
        let log = bed.node.daemon.log();
        ensure!(
            !log.contains("lease not renewed, the cloud refused"),
            "the node logged refused renewals"
        );
        println!("    lease renewed {renewals} times in {WATCH:?}");
        Ok(())
    })
}
