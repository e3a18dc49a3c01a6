use std::net::Ipv4Addr;

use super::*;

const SECOND: Duration = Duration::from_secs(1);

fn ip(text: &str) -> IpAddr {
    text.parse().unwrap()
}

#[test]
fn a_burst_of_failures_then_one_per_refill_period() {
    let mut t = LoginThrottle::new(3, 10 * SECOND, 100, SECOND);
    let start = Instant::now();
    let source = ip("10.0.0.1");
    for i in 0..3 {
        let name = [i; 32];
        assert_eq!(t.verdict(source, &name, start), Verdict::Open, "{i}");
        t.failed(source, &name, start);
    }
    let other = [9; 32];
    assert_eq!(t.verdict(source, &other, start), Verdict::Address);
    assert_eq!(
        t.verdict(source, &other, start + 9 * SECOND),
        Verdict::Address
    );
    // Another address is not held back.
    assert_eq!(t.verdict(ip("10.0.0.2"), &other, start), Verdict::Open);
    // One refill period later, one more failure is allowed, and only one.
    let later = start + 10 * SECOND;
    assert_eq!(t.verdict(source, &other, later), Verdict::Open);
    t.failed(source, &other, later);
    assert_eq!(t.verdict(source, &other, later), Verdict::Address);
    // Whole again after the burst's worth of refills.
    assert_eq!(
        t.verdict(source, &other, later + 30 * SECOND),
        Verdict::Open
    );
}

#[test]
fn a_name_guessed_from_many_addresses_is_throttled() {
    let mut t = LoginThrottle::new(100, SECOND, 2, 30 * SECOND);
    let now = Instant::now();
    let name = [1; 32];
    t.failed(ip("10.0.0.1"), &name, now);
    t.failed(ip("10.0.0.2"), &name, now);
    assert_eq!(t.verdict(ip("10.0.0.3"), &name, now), Verdict::Name);
    assert_eq!(t.verdict(ip("10.0.0.3"), &[2; 32], now), Verdict::Open);
    // Failures counted while spent do not lock the name out for longer than one refill.
    for _ in 0..50 {
        t.failed_name(&name, now);
    }
    assert_eq!(
        t.verdict(ip("10.0.0.3"), &name, now + 30 * SECOND),
        Verdict::Open
    );
}

#[test]
fn ipv6_sources_count_per_64_and_mapped_ipv4_as_ipv4() {
    let mut t = LoginThrottle::new(1, 60 * SECOND, 100, SECOND);
    let now = Instant::now();
    t.failed(ip("2001:db8:1:2::1"), &[1; 32], now);
    assert_eq!(
        t.verdict(ip("2001:db8:1:2:ffff::9"), &[2; 32], now),
        Verdict::Address
    );
    assert_eq!(
        t.verdict(ip("2001:db8:1:3::1"), &[2; 32], now),
        Verdict::Open
    );
    t.failed(ip("192.0.2.7"), &[3; 32], now);
    let mapped = IpAddr::V6("192.0.2.7".parse::<Ipv4Addr>().unwrap().to_ipv6_mapped());
    assert_eq!(t.verdict(mapped, &[4; 32], now), Verdict::Address);
}

#[test]
fn tables_stay_bounded() {
    let mut t = LoginThrottle::new(1, SECOND, 1, SECOND);
    let now = Instant::now();
    for i in 0..(MAX_TRACKED as u32 + 100) {
        let source = IpAddr::from(i.to_be_bytes());
        let mut name = [0; 32];
        name[..4].copy_from_slice(&i.to_be_bytes());
        t.failed(source, &name, now);
        let _ = t.warn_due(source, now);
    }
    assert!(t.addresses.whole_at.len() <= MAX_TRACKED);
    assert!(t.names.whole_at.len() <= MAX_TRACKED);
    assert!(t.logged.len() <= MAX_TRACKED);
    // Once their budgets are whole again, old keys make room for new ones.
    let later = now + 2 * SECOND;
    let newcomer = ip("203.0.113.1");
    t.failed(newcomer, &[0xff; 32], later);
    assert_eq!(t.verdict(newcomer, &[0xfe; 32], later), Verdict::Address);
}

#[test]
fn warnings_once_per_source_per_period() {
    let mut t = LoginThrottle::default();
    let now = Instant::now();
    let source = ip("10.0.0.1");
    assert_eq!(t.warn_due(source, now), Some(0));
    for _ in 0..5 {
        assert_eq!(t.warn_due(source, now + SECOND), None);
    }
    assert_eq!(t.warn_due(ip("10.0.0.2"), now), Some(0));
    assert_eq!(t.warn_due(source, now + LOG_PERIOD), Some(5));
    assert_eq!(t.warn_due(source, now + LOG_PERIOD), None);
}
