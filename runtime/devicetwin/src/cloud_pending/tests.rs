//! The confirm/resend rules of §5.7 with an injected clock.

use super::*;

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

fn tracked(t0: Instant) -> Pending<&'static str> {
    let mut p = Pending::new(RESEND_AFTER);
    p.track("m1".into(), "first");
    p.track("m2".into(), "second");
    p.traffic(t0);
    p
}

#[test]
fn resend_after_sixty_quiet_seconds_all_at_once_in_order() {
    let t0 = Instant::now();
    let mut p = tracked(t0);
    assert_eq!(RESEND_AFTER, secs(60));
    assert_eq!(p.deadline(), Some(t0 + secs(60)));
    assert!(p.due(t0 + secs(59)).is_empty());
    assert_eq!(p.due(t0 + secs(60)), vec!["first", "second"]);
    // Still unconfirmed, and the next resend is a full period later.
    assert_eq!(p.len(), 2);
    assert_eq!(p.deadline(), Some(t0 + secs(120)));
    assert!(p.due(t0 + secs(119)).is_empty());
    assert_eq!(p.due(t0 + secs(120)), vec!["first", "second"]);
}

#[test]
fn any_traffic_postpones_the_resend() {
    let t0 = Instant::now();
    let mut p = tracked(t0);
    p.traffic(t0 + secs(50));
    assert!(p.due(t0 + secs(60)).is_empty());
    assert!(p.due(t0 + secs(109)).is_empty());
    assert_eq!(p.due(t0 + secs(110)), vec!["first", "second"]);
}

#[test]
fn confirmation_by_parent_id_removes_only_that_message() {
    let t0 = Instant::now();
    let mut p = tracked(t0);
    assert!(p.confirm("m1"));
    assert!(!p.confirm("m1"));
    assert!(!p.confirm("unknown"));
    assert_eq!(p.len(), 1);
    assert_eq!(p.due(t0 + secs(60)), vec!["second"]);
    assert!(p.confirm("m2"));
    assert!(p.is_empty());
    assert_eq!(p.deadline(), None);
    assert!(p.due(t0 + secs(200)).is_empty());
}

#[test]
fn disconnection_drops_everything() {
    let t0 = Instant::now();
    let mut p = tracked(t0);
    p.disconnected();
    assert!(p.is_empty());
    assert!(p.due(t0 + secs(600)).is_empty());
    // After reconnecting, new messages are tracked as usual.
    p.track("m3".into(), "third");
    p.traffic(t0 + secs(600));
    assert_eq!(p.due(t0 + secs(660)), vec!["third"]);
}

#[test]
fn tracking_an_id_again_replaces_it_in_place() {
    let t0 = Instant::now();
    let mut p = tracked(t0);
    p.track("m1".into(), "first again");
    assert_eq!(p.len(), 2);
    assert_eq!(p.due(t0 + secs(60)), vec!["first again", "second"]);
}

#[test]
fn without_traffic_the_first_check_starts_the_quiet_period() {
    let t0 = Instant::now();
    let mut p = Pending::new(secs(5));
    p.track("m".into(), 1);
    assert_eq!(p.deadline(), None);
    assert!(p.due(t0).is_empty());
    assert_eq!(p.deadline(), Some(t0 + secs(5)));
    assert!(p.due(t0 + secs(4)).is_empty());
    assert_eq!(p.due(t0 + secs(5)), vec![1]);
}

#[test]
fn checks_with_nothing_pending_still_restart_the_quiet_period() {
    // KubeEdge's timer fires (and restarts) whether or not anything is pending.
    let t0 = Instant::now();
    let mut p: Pending<u8> = Pending::new(RESEND_AFTER);
    p.traffic(t0);
    assert!(p.due(t0 + secs(60)).is_empty());
    p.track("m".into(), 7);
    assert!(p.due(t0 + secs(100)).is_empty());
    assert_eq!(p.due(t0 + secs(120)), vec![7]);
}
