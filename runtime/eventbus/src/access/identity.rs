//! The names that stand for `%u` and `%c` in a users file's topic patterns.
//!
//! A client chooses its client id, and a user name is only as careful as whoever wrote the users
//! file. Pasted into a pattern as given, `+`, `#` or `/` in either would turn one client's
//! topics into a wildcard over other clients' topics (client id `+` makes `clients/%c/#` cover
//! every client), an empty one would make a level no client owns, and a leading `$` would reach
//! the system's `$`-topics through a pattern like `%c/#`. So a name may stand for a
//! placeholder only when it is one literal topic level; otherwise the CONNECT is refused.

/// Why a name cannot stand for `%u` or `%c`: it is not one literal topic level.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum NotALevel {
    /// Empty: the pattern would get an empty level.
    #[error("it is empty")]
    Empty,
    /// `+` or `#`: the pattern would get a wildcard.
    #[error("it contains the wildcard {0:?}")]
    Wildcard(char),
    /// `/`: the pattern would get extra levels, reaching into another name's topics.
    #[error("it contains the level separator '/'")]
    Separator,
    /// NUL, which no MQTT topic may contain.
    #[error("it contains NUL")]
    Nul,
    /// A leading `$`: a pattern starting with the placeholder would reach `$`-topics.
    #[error("it starts with '$'")]
    Dollar,
}

/// Checks that `name` is one literal topic level, so it can stand for `%u` or `%c`.
pub fn literal_level(name: &str) -> Result<(), NotALevel> {
    if name.is_empty() {
        return Err(NotALevel::Empty);
    }
    if name.starts_with('$') {
        return Err(NotALevel::Dollar);
    }
    match name.chars().find(|c| matches!(c, '+' | '#' | '/' | '\0')) {
        Some('/') => Err(NotALevel::Separator),
        Some('\0') => Err(NotALevel::Nul),
        Some(c) => Err(NotALevel::Wildcard(c)),
        None => Ok(()),
    }
}

/// `pattern` with `%u` replaced by `user` and `%c` by `client_id`, in one pass, so a `%c` or
/// `%u` inside a substituted name is left as it is rather than substituted again.
pub(crate) fn substitute(pattern: &str, user: &str, client_id: &str) -> String {
    let mut out = String::with_capacity(pattern.len());
    let mut rest = pattern;
    while let Some(i) = rest.find('%') {
        out.push_str(&rest[..i]);
        let tail = &rest[i..];
        if let Some(after) = tail.strip_prefix("%u") {
            out.push_str(user);
            rest = after;
        } else if let Some(after) = tail.strip_prefix("%c") {
            out.push_str(client_id);
            rest = after;
        } else {
            out.push('%');
            rest = &tail[1..];
        }
    }
    out.push_str(rest);
    out
}
