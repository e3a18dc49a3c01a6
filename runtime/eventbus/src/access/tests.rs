use std::net::Ipv4Addr;
use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

use super::*;

/// A source address for a test's CONNECT.
fn from(last: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(10, 0, 0, last))
}

/// Writes `text` as a users file (mode 600) and builds the policy.
fn policy_of(dir: &Path, text: &str) -> Result<AccessPolicy, AccessError> {
    let path = dir.join("users.yaml");
    std::fs::write(&path, text).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    AccessPolicy::build(None, Some(&path))
}

/// A users file with `thermo-mapper` (password `s3cret`, its device's topics only) and an
/// anonymous client that may only subscribe to membership results.
fn users_file(dir: &Path, mode: u32) -> PathBuf {
    let hash = PasswordHash::derive(b"s3cret", b"saltsalt", MIN_ITERATIONS);
    let path = dir.join("mqtt-users.yaml");
    std::fs::write(
        &path,
        format!(
            "users:\n\
             - name: thermo-mapper\n  passwordHash: \"{hash}\"\n  \
               publish: [\"$hw/events/device/default/thermo-1/#\", \"clients/%c/#\"]\n  \
               subscribe: [\"$hw/events/device/default/thermo-1/#\"]\n\
             anonymous:\n  subscribe: [\"$hw/events/node/+/membership/get/result\"]\n"
        ),
    )
    .unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
    path
}

#[test]
fn patterns_cover_topics_and_narrower_filters_only() {
    assert!(covers(
        "$hw/events/device/default/thermo-1/#",
        "$hw/events/device/default/thermo-1/twin/update"
    ));
    assert!(covers(
        "$hw/events/device/+/+/twin/update",
        "$hw/events/device/default/thermo-1/twin/update"
    ));
    assert!(!covers(
        "$hw/events/device/default/thermo-1/#",
        "$hw/events/device/default/thermo-2/twin/update"
    ));
    // A filter is covered only when every topic it matches is.
    assert!(covers("a/#", "a/+/c"));
    assert!(covers("a/+/c", "a/+/c"));
    assert!(!covers("a/b/c", "a/+/c"));
    assert!(!covers("a/+", "a/#"));
    assert!(!covers("a/b", "a/b/c"));
    assert!(!covers("a/b/c", "a/b"));
    assert!(covers("#", "$hw/anything"));
}

#[tokio::test]
async fn users_log_in_with_their_password_and_get_their_topics() {
    let dir = tempfile::tempdir().unwrap();
    let policy = AccessPolicy::build(None, Some(&users_file(dir.path(), 0o600))).unwrap();
    assert_eq!(policy.user_count(), 1);
    let grant = policy
        .admit(Some(("thermo-mapper", "s3cret")), "m1", None, from(1))
        .await
        .unwrap();
    assert!(grant.may_publish("$hw/events/device/default/thermo-1/twin/update"));
    assert!(!grant.may_publish("$hw/events/device/default/thermo-2/twin/update"));
    assert!(grant.may_publish("clients/m1/status"));
    assert!(!grant.may_publish("clients/m2/status"));
    assert!(grant.may_subscribe("$hw/events/device/default/thermo-1/twin/+/result"));
    assert!(!grant.may_subscribe("$hw/#"));
    // Wrong password, unknown user; a second right log-in takes the remembered path.
    for login in [("thermo-mapper", "wrong"), ("nobody", "s3cret")] {
        assert_eq!(
            policy.admit(Some(login), "m1", None, from(1)).await,
            Err(Refusal::BadCredentials)
        );
    }
    assert!(
        policy
            .admit(Some(("thermo-mapper", "s3cret")), "m1", None, from(1))
            .await
            .is_ok()
    );
    // A will outside the user's topics is refused at CONNECT.
    assert_eq!(
        policy
            .admit(
                Some(("thermo-mapper", "s3cret")),
                "m1",
                Some("$hw/events/device/default/thermo-2/twin/update"),
                from(1)
            )
            .await,
        Err(Refusal::WillNotAllowed)
    );
    // Anonymous clients get the anonymous entry.
    let anonymous = policy.admit(None, "a", None, from(1)).await.unwrap();
    assert!(anonymous.may_subscribe("$hw/events/node/edge-1/membership/get/result"));
    assert!(!anonymous.may_publish("$hw/events/device/default/thermo-1/twin/update"));
}

#[tokio::test]
async fn without_a_users_file_kubeedges_user_or_anyone_may_do_everything() {
    let open = AccessPolicy::build(None, None).unwrap();
    assert!(open.anonymous().is_some());
    let grant = open
        .admit(None, "x", Some("$hw/any"), from(1))
        .await
        .unwrap();
    assert!(grant.may_publish("$hw/events/device/d/twin/update") && grant.may_subscribe("$hw/#"));
    let kubeedge = Credentials {
        username: "edge".into(),
        password: "pw".into(),
    };
    let closed = AccessPolicy::build(Some(&kubeedge), None).unwrap();
    assert!(closed.anonymous().is_none());
    assert_eq!(
        closed.admit(None, "x", None, from(1)).await,
        Err(Refusal::BadCredentials)
    );
    assert_eq!(
        closed
            .admit(Some(("edge", "nope")), "x", None, from(1))
            .await,
        Err(Refusal::BadCredentials)
    );
    assert!(
        closed
            .admit(Some(("edge", "pw")), "x", None, from(1))
            .await
            .is_ok()
    );
}

#[test]
fn bad_users_files_are_refused_naming_the_entry() {
    let dir = tempfile::tempdir().unwrap();
    let exposed = users_file(dir.path(), 0o644);
    let e = AccessPolicy::build(None, Some(&exposed)).unwrap_err();
    assert!(e.to_string().contains("readable by other users"), "{e}");
    let write = |text: &str| {
        let path = dir.path().join("bad.yaml");
        std::fs::write(&path, text).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        AccessPolicy::build(None, Some(&path))
            .unwrap_err()
            .to_string()
    };
    let weak = PasswordHash::derive(b"x", b"saltsalt", MIN_ITERATIONS).replace("$1000$", "$10$");
    let cases = [
        (
            "users:\n- name: a\n  password: clear\n",
            "users[0] (a).password: clear-text",
        ),
        (
            "users:\n- name: a\n  passwordHash: md5$x\n",
            "users[0] (a).passwordHash",
        ),
        (
            &format!("users:\n- name: a\n  passwordHash: \"{weak}\"\n") as &str,
            "at least 1000",
        ),
        (
            "users:\n- name: a\n  passwordHsh: x\n",
            "unknown field `passwordHsh`",
        ),
        (
            "anonymous:\n  publish: [\"a/#/b\"]\n",
            "anonymous: publish pattern \"a/#/b\"",
        ),
        (
            &format!("users:\n- name: a/+\n  passwordHash: \"{weak}\"\n") as &str,
            "users[0].name \"a/+\": a user name must be one literal topic level",
        ),
        (
            &format!("users:\n- name: \"#\"\n  passwordHash: \"{weak}\"\n") as &str,
            "users[0].name \"#\": a user name must be one literal topic level, as it may stand for %u in topic patterns: it contains the wildcard '#'",
        ),
        (
            "anonymous:\n  subscribe: [\"clients/%u/#\"]\n",
            "anonymous: patterns may not use %u",
        ),
    ];
    for (text, expected) in cases {
        let e = write(text);
        assert!(e.contains(expected), "{expected}: {e}");
    }
}

#[test]
fn a_hash_made_with_pythons_hashlib_as_readme_shows_verifies() {
    // `python3 -c '...pbkdf2_hmac("sha256", b"pw", salt, 100000)...'` from README.
    let hash = PasswordHash::parse(
        "pbkdf2-sha256$100000$qsDJW4/d+q+lUGSWBKclFg==$pON39wh/TcCGr6F7/cSdPPYKFRzrkXjHmX9gnzSx6PM=",
    )
    .unwrap();
    assert!(hash.verify(b"pw"));
    assert!(!hash.verify(b"pW"));
}

/// A users file whose `device` user (password `pw`) owns `clients/%c/#` and `users/%u/#`, and
/// whose `plain` user (password `pw`) has fixed topics only.
fn placeholder_users() -> String {
    let hash = PasswordHash::derive(b"pw", b"saltsalt", MIN_ITERATIONS);
    format!(
        "users:\n\
         - name: device\n  passwordHash: \"{hash}\"\n  \
           publish: [\"clients/%c/#\"]\n  subscribe: [\"clients/%c/#\", \"users/%u/#\"]\n\
         - name: plain\n  passwordHash: \"{hash}\"\n  subscribe: [\"public/#\"]\n\
         anonymous:\n  subscribe: [\"guests/%c/#\"]\n"
    )
}

#[tokio::test]
async fn client_ids_are_never_wildcards_in_patterns() {
    let dir = tempfile::tempdir().unwrap();
    let policy = policy_of(dir.path(), &placeholder_users()).unwrap();
    let device = Some(("device", "pw"));
    for (id, why) in [
        ("+", NotALevel::Wildcard('+')),
        ("#", NotALevel::Wildcard('#')),
        ("+/+", NotALevel::Wildcard('+')),
        ("m1/#", NotALevel::Separator),
        ("m1/x", NotALevel::Separator),
        ("m\u{0}1", NotALevel::Nul),
        ("$hw", NotALevel::Dollar),
        ("", NotALevel::Empty),
    ] {
        assert_eq!(
            policy.admit(device, id, None, from(1)).await,
            Err(Refusal::BadClientId(why)),
            "client id {id:?}"
        );
        // Anonymous clients' patterns use %c too.
        assert_eq!(
            policy.admit(None, id, None, from(1)).await,
            Err(Refusal::BadClientId(why)),
            "anonymous client id {id:?}"
        );
    }
    // A literal id gets its own topics only.
    let grant = policy.admit(device, "m1", None, from(1)).await.unwrap();
    assert!(grant.may_publish("clients/m1/status"));
    assert!(grant.may_subscribe("clients/m1/#"));
    assert!(grant.may_subscribe("users/device/inbox"));
    assert!(!grant.may_subscribe("clients/+/#"));
    assert!(!grant.may_publish("clients/m2/status"));
    // Where no pattern uses %c, the client id appears in no topic and is not checked.
    let plain = policy
        .admit(Some(("plain", "pw")), "+", None, from(1))
        .await
        .unwrap();
    assert!(plain.may_subscribe("public/x") && !plain.may_subscribe("clients/+/#"));
}

#[test]
fn names_are_substituted_once_and_literally() {
    assert_eq!(
        identity::substitute("a/%u/%c/%x/%%", "u%c", "c%u"),
        "a/u%c/c%u/%x/%%"
    );
    assert_eq!(identity::literal_level("thermo-1.a_b"), Ok(()));
    assert_eq!(identity::literal_level("%c"), Ok(()));
}

#[test]
fn a_user_name_for_percent_u_must_be_a_literal_level() {
    let acl = Acl {
        publish: vec!["users/%u/#".to_owned()],
        subscribe: Vec::new(),
        deny: Vec::new(),
    };
    // Users file names are checked at load; KubeEdge's user has no %u. Checked here as well.
    assert_eq!(
        grant(&acl, "a/+", "c1"),
        Err(Refusal::BadUserName(NotALevel::Separator))
    );
    assert!(grant(&acl, "a", "+").is_ok());
}

/// Median of three timings of a refused log-in of `name`, each from its own address (so the
/// address budget is not what is measured).
async fn refusal_time(policy: &AccessPolicy, name: &str, first_source: u8) -> Duration {
    let mut times = Vec::new();
    for i in 0..3 {
        let started = std::time::Instant::now();
        let refused = policy
            .admit(Some((name, "wrong")), "c1", None, from(first_source + i))
            .await;
        times.push(started.elapsed());
        assert_eq!(refused, Err(Refusal::BadCredentials));
    }
    times.sort();
    times[1]
}

#[tokio::test]
async fn unknown_users_cost_as_much_to_refuse_as_known_ones() {
    // Two users with different costs: the cheap one is padded up to the costly one, and an
    // unknown name is checked against a dummy as costly.
    let costly = PasswordHash::derive(b"pw", b"saltsalt", 20_000);
    let cheap = PasswordHash::derive(b"pw", b"saltsalt", MIN_ITERATIONS);
    let dir = tempfile::tempdir().unwrap();
    let policy = policy_of(
        dir.path(),
        &format!(
            "users:\n- name: costly\n  passwordHash: \"{costly}\"\n\
             - name: cheap\n  passwordHash: \"{cheap}\"\n"
        ),
    )
    .unwrap();
    let known = refusal_time(&policy, "costly", 10).await;
    let unknown = refusal_time(&policy, "nobody", 20).await;
    let padded = refusal_time(&policy, "cheap", 30).await;
    eprintln!("refusal times: known {known:?}, unknown {unknown:?}, cheap user padded {padded:?}");
    assert!(
        unknown >= known * 3 / 10,
        "unknown {unknown:?} vs known {known:?}"
    );
    assert!(
        padded >= known * 3 / 10,
        "padded {padded:?} vs known {known:?}"
    );
    assert_eq!(policy.password_checks(), 9);
}

#[tokio::test]
async fn failures_from_one_address_are_throttled_without_checking() {
    let dir = tempfile::tempdir().unwrap();
    let policy = policy_of(dir.path(), &placeholder_users()).unwrap();
    *policy.throttle() =
        LoginThrottle::new(3, Duration::from_secs(600), 100, Duration::from_secs(1));
    // `device` logs in once from elsewhere, so its password is remembered.
    let device = Some(("device", "pw"));
    assert!(policy.admit(device, "m1", None, from(2)).await.is_ok());
    let guesser = from(1);
    for i in 0..3 {
        let name = format!("guess-{i}");
        assert_eq!(
            policy.admit(Some((&name, "x")), "c", None, guesser).await,
            Err(Refusal::BadCredentials)
        );
    }
    let checks = policy.password_checks();
    assert_eq!(checks, 4);
    // The next attempts from that address are refused at once, without PBKDF2 work, even
    // with a right password that was never checked.
    for login in [("guess-9", "x"), ("plain", "pw")] {
        let started = std::time::Instant::now();
        assert_eq!(
            policy.admit(Some(login), "c", None, guesser).await,
            Err(Refusal::Throttled)
        );
        assert!(started.elapsed() < Duration::from_millis(50));
    }
    assert_eq!(policy.password_checks(), checks);
    // A password remembered as right costs nothing and still gets in from there.
    assert!(policy.admit(device, "m1", None, guesser).await.is_ok());
    // Another address logs in at once, with a password never checked before.
    assert!(
        policy
            .admit(Some(("plain", "pw")), "c", None, from(3))
            .await
            .is_ok()
    );
    assert_eq!(policy.password_checks(), checks + 1);
}

#[tokio::test]
async fn a_guessed_name_is_throttled_from_every_address() {
    let dir = tempfile::tempdir().unwrap();
    let policy = policy_of(dir.path(), &placeholder_users()).unwrap();
    *policy.throttle() =
        LoginThrottle::new(100, Duration::from_secs(1), 2, Duration::from_secs(600));
    let device = Some(("device", "pw"));
    assert!(policy.admit(device, "m1", None, from(9)).await.is_ok());
    for source in [from(1), from(2)] {
        assert_eq!(
            policy
                .admit(Some(("device", "guess")), "c", None, source)
                .await,
            Err(Refusal::BadCredentials)
        );
    }
    let checks = policy.password_checks();
    // Throttled for everyone, even with the right (remembered) password: else a throttled
    // guesser would learn when it guessed right.
    for source in [from(3), from(9)] {
        assert_eq!(
            policy.admit(device, "m1", None, source).await,
            Err(Refusal::Throttled)
        );
    }
    assert_eq!(policy.password_checks(), checks);
    // Other names are not held back.
    assert!(
        policy
            .admit(Some(("plain", "pw")), "c", None, from(3))
            .await
            .is_ok()
    );
}

#[tokio::test]
async fn a_throttled_address_cannot_probe_remembered_passwords_for_free() {
    let dir = tempfile::tempdir().unwrap();
    let policy = policy_of(dir.path(), &placeholder_users()).unwrap();
    *policy.throttle() =
        LoginThrottle::new(1, Duration::from_secs(600), 3, Duration::from_secs(600));
    let device = Some(("device", "pw"));
    assert!(policy.admit(device, "m1", None, from(9)).await.is_ok());
    let guesser = from(1);
    assert_eq!(
        policy.admit(Some(("other", "x")), "c", None, guesser).await,
        Err(Refusal::BadCredentials)
    );
    // Each guess refused for the address spends the name's budget, so after three the right
    // password is refused too.
    for guess in ["a", "b", "c"] {
        assert_eq!(
            policy
                .admit(Some(("device", guess)), "m1", None, guesser)
                .await,
            Err(Refusal::Throttled)
        );
    }
    assert_eq!(
        policy.admit(device, "m1", None, guesser).await,
        Err(Refusal::Throttled)
    );
}

#[test]
fn lanes_are_one_per_address_and_forgotten_once_unused() {
    let lanes = lanes::Lanes::default();
    let a = lanes.lane(from(1));
    assert!(Arc::ptr_eq(&a, &lanes.lane(from(1))));
    assert!(!Arc::ptr_eq(&a, &lanes.lane(from(2))));
    // IPv6 addresses of one /64 share a lane.
    let v6 = |text: &str| text.parse::<IpAddr>().unwrap();
    assert!(Arc::ptr_eq(
        &lanes.lane(v6("2001:db8::1")),
        &lanes.lane(v6("2001:db8::2"))
    ));
    for i in 0..(throttle::MAX_TRACKED as u32 + 100) {
        let _ = lanes.lane(IpAddr::from(i.to_be_bytes()));
    }
    assert!(lanes.len() <= throttle::MAX_TRACKED + 1, "{}", lanes.len());
    // A lane in use is kept through pruning.
    assert!(Arc::ptr_eq(&a, &lanes.lane(from(1))));
}

#[test]
fn deny_patterns_win_over_allow_patterns() {
    let acl = Acl {
        publish: vec!["#".to_owned()],
        subscribe: vec!["#".to_owned()],
        deny: vec!["test/nosubscribe".to_owned()],
    };
    let g = grant(&acl, "", "c1").unwrap();
    assert!(!g.may_subscribe("test/nosubscribe"));
    assert!(!g.may_publish("test/nosubscribe"));
    // A broader filter is granted, but what the deny pattern covers is not delivered on it.
    assert!(g.may_subscribe("+/+"));
    assert!(!g.may_receive("test/nosubscribe"));
    assert!(g.may_receive("TopicA/B"));
}
