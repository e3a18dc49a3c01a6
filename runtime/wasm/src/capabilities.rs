//! Checks of what a guest asks to touch against what its manifest grants.

/// True when `filter` is a valid MQTT topic filter (`+` whole levels, `#` only last).
pub fn valid_topic_filter(filter: &str) -> bool {
    if filter.is_empty() {
        return false;
    }
    let levels: Vec<&str> = filter.split('/').collect();
    levels.iter().enumerate().all(|(i, level)| match *level {
        "#" => i == levels.len() - 1,
        "+" => true,
        l => !l.contains('#') && !l.contains('+'),
    })
}

/// True when the concrete `topic` matches MQTT `filter`.
pub fn topic_matches(filter: &str, topic: &str) -> bool {
    let mut f = filter.split('/');
    let mut t = topic.split('/');
    loop {
        match (f.next(), t.next()) {
            (Some("#"), _) => return true,
            (Some("+"), Some(_)) => {}
            (Some(fl), Some(tl)) if fl == tl => {}
            (None, None) => return true,
            _ => return false,
        }
    }
}

/// True when `topic` is concrete (no wildcards) and some filter grants it.
pub fn topic_allowed(filters: &[String], topic: &str) -> bool {
    !topic.is_empty()
        && !topic.contains(['+', '#'])
        && filters.iter().any(|f| topic_matches(f, topic))
}

/// True when a device id matches a manifest pattern: exact, or `*` matching any run of
/// characters (including `/`, so `default/*` binds every device of a namespace).
pub fn device_matches(pattern: &str, device: &str) -> bool {
    match pattern.split_once('*') {
        None => pattern == device,
        Some((prefix, rest)) => {
            let Some(tail) = device.strip_prefix(prefix) else {
                return false;
            };
            (0..=tail.len())
                .filter(|i| tail.is_char_boundary(*i))
                .any(|i| device_matches(rest, &tail[i..]))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn topic_filters() {
        assert!(valid_topic_filter("a/+/c/#"));
        assert!(!valid_topic_filter("a/#/c"));
        assert!(!valid_topic_filter("a/b+"));
        assert!(topic_matches("a/+/c/#", "a/b/c/d/e"));
        assert!(topic_matches("a/+/c/#", "a/b/c"));
        assert!(!topic_matches("a/+/c", "a/b/d"));
        assert!(topic_allowed(&["wedge/alerts/#".into()], "wedge/alerts/t1"));
        assert!(!topic_allowed(&["wedge/alerts/#".into()], "wedge/other"));
        assert!(!topic_allowed(&["#".into()], "wedge/+"));
    }

    #[test]
    fn device_patterns() {
        assert!(device_matches("*", "default/thermo-1"));
        assert!(device_matches("default/*", "default/thermo-1"));
        assert!(!device_matches("default/*", "other/thermo-1"));
        assert!(device_matches("default/thermo-*", "default/thermo-12"));
        assert!(device_matches("*-1", "default/thermo-1"));
        assert!(device_matches("dev-1", "dev-1"));
        assert!(!device_matches("dev-1", "dev-10"));
    }
}
