use std::os::unix::fs::PermissionsExt;

use super::*;

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
        .admit(Some(("thermo-mapper", "s3cret")), "m1", None)
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
            policy.admit(Some(login), "m1", None).await,
            Err(Refusal::BadCredentials)
        );
    }
    assert!(
        policy
            .admit(Some(("thermo-mapper", "s3cret")), "m1", None)
            .await
            .is_ok()
    );
    // A will outside the user's topics is refused at CONNECT.
    assert_eq!(
        policy
            .admit(
                Some(("thermo-mapper", "s3cret")),
                "m1",
                Some("$hw/events/device/default/thermo-2/twin/update")
            )
            .await,
        Err(Refusal::WillNotAllowed)
    );
    // Anonymous clients get the anonymous entry.
    let anonymous = policy.admit(None, "a", None).await.unwrap();
    assert!(anonymous.may_subscribe("$hw/events/node/edge-1/membership/get/result"));
    assert!(!anonymous.may_publish("$hw/events/device/default/thermo-1/twin/update"));
}

#[tokio::test]
async fn without_a_users_file_kubeedges_user_or_anyone_may_do_everything() {
    let open = AccessPolicy::build(None, None).unwrap();
    assert!(open.anonymous().is_some());
    let grant = open.admit(None, "x", Some("$hw/any")).await.unwrap();
    assert!(grant.may_publish("$hw/events/device/d/twin/update") && grant.may_subscribe("$hw/#"));
    let kubeedge = Credentials {
        username: "edge".into(),
        password: "pw".into(),
    };
    let closed = AccessPolicy::build(Some(&kubeedge), None).unwrap();
    assert!(closed.anonymous().is_none());
    assert_eq!(
        closed.admit(None, "x", None).await,
        Err(Refusal::BadCredentials)
    );
    assert_eq!(
        closed.admit(Some(("edge", "nope")), "x", None).await,
        Err(Refusal::BadCredentials)
    );
    assert!(closed.admit(Some(("edge", "pw")), "x", None).await.is_ok());
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
