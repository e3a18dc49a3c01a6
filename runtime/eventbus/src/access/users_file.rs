//! Reading a users file (`wedge.mqtt.usersFile`) and checking everything in it before the
//! broker uses it, so a mistake stops the eventbus with a message naming the entry rather than
//! leaving a user locked out or let in wider than meant.

use std::collections::HashMap;
use std::path::Path;

use serde::Deserialize;

use super::identity::literal_level;
use super::password::Secret;
use super::{AccessError, Acl, PasswordHash, User};
use crate::topics::valid_filter;

/// One entry of `users`, as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct UserEntry {
    name: String,
    #[serde(default)]
    password_hash: String,
    #[serde(default)]
    password: Option<String>,
    #[serde(flatten)]
    acl: Acl,
}

/// The whole file, as written; unknown keys are refused, so a typo is not silently ignored.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct UsersFile {
    #[serde(default)]
    users: Vec<UserEntry>,
    #[serde(default)]
    anonymous: Option<Acl>,
}

/// Reads and checks a users file.
pub(super) fn read_users_file(
    path: &Path,
) -> Result<(HashMap<String, User>, Option<Acl>), AccessError> {
    use std::os::unix::fs::PermissionsExt;
    let read = |source| AccessError::Read {
        path: path.to_owned(),
        source,
    };
    let meta = std::fs::metadata(path).map_err(read)?;
    let mode = meta.permissions().mode() & 0o777;
    if mode & 0o007 != 0 {
        return Err(AccessError::Exposed {
            path: path.to_owned(),
            mode,
        });
    }
    let text = std::fs::read_to_string(path).map_err(read)?;
    let invalid = |reason: String| AccessError::Invalid {
        path: path.to_owned(),
        reason,
    };
    let file: UsersFile = serde_norway::from_str(&text).map_err(|e| invalid(e.to_string()))?;
    let mut users = HashMap::new();
    let check_acl = |who: &str, acl: &Acl| -> Result<(), AccessError> {
        for (kind, patterns) in [
            ("publish", &acl.publish),
            ("subscribe", &acl.subscribe),
            ("deny", &acl.deny),
        ] {
            for p in patterns {
                let probe = p.replace("%u", "u").replace("%c", "c");
                if !valid_filter(&probe) {
                    return Err(invalid(format!(
                        "{who}: {kind} pattern {p:?} is not a valid MQTT filter"
                    )));
                }
            }
        }
        Ok(())
    };
    for (i, entry) in file.users.into_iter().enumerate() {
        let who = format!("users[{i}] ({})", entry.name);
        if entry.name.is_empty() {
            return Err(invalid(format!("users[{i}].name: must not be empty")));
        }
        if let Err(e) = literal_level(&entry.name) {
            return Err(invalid(format!(
                "users[{i}].name {:?}: a user name must be one literal topic level, as it may stand for %u in topic patterns: {e}",
                entry.name
            )));
        }
        if entry.password.is_some() {
            return Err(invalid(format!(
                "{who}.password: clear-text passwords are not accepted; store passwordHash (see README: MQTT users)"
            )));
        }
        let hash = PasswordHash::parse(&entry.password_hash)
            .map_err(|reason| invalid(format!("{who}.passwordHash: {reason}")))?;
        check_acl(&who, &entry.acl)?;
        let user = User {
            secret: Secret::Hash(hash),
            acl: entry.acl,
        };
        if users.insert(entry.name.clone(), user).is_some() {
            return Err(invalid(format!("{who}: the user is listed twice")));
        }
    }
    if let Some(acl) = &file.anonymous {
        check_acl("anonymous", acl)?;
        if acl.uses("%u") {
            return Err(invalid(
                "anonymous: patterns may not use %u: anonymous clients have no user name".into(),
            ));
        }
    }
    Ok((users, file.anonymous))
}
