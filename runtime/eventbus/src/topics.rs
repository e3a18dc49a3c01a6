//! KubeEdge's MQTT topics and the MQTT 3.1.1 topic rules both brokers paths rely on.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE;

/// Topics the eventbus always subscribes to (KubeEdge v1.17+ plus the ≤v1.16 device pair, which
/// never overlaps the new one, so devices of either generation are heard).
pub const DEFAULT_TOPICS: &[&str] = &[
    "$hw/events/upload/#",
    "$hw/events/device/+/+/state/update",
    "$hw/events/device/+/+/twin/+",
    "$hw/events/node/+/membership/get",
    "SYS/dis/upload_records",
    "+/user/#",
    "$hw/events/device/+/state/update",
    "$hw/events/device/+/twin/+",
];

/// True for topics whose messages go to the twin module (as a base64 resource) rather than to
/// the cloud.
pub fn is_twin_topic(topic: &str) -> bool {
    topic.starts_with("$hw/events/device") || topic.starts_with("$hw/events/node")
}

/// The resource KubeEdge gives a twin-bound message: the whole topic in URL-safe base64 with
/// `=` padding (Go's `base64.URLEncoding`).
pub fn twin_resource(topic: &str) -> String {
    URL_SAFE.encode(topic.as_bytes())
}

/// The topic a node's auth-info result is published on.
pub fn auth_info_result_topic(node: &str) -> String {
    format!("$hw/events/node/{node}/authInfo/get/result")
}

/// A topic name a client may publish to: not empty, no wildcards, no NUL.
pub fn valid_topic(topic: &str) -> bool {
    !topic.is_empty() && !topic.contains(['+', '#', '\0'])
}

/// A topic filter a client may subscribe to: `#` only as the whole last level, `+` only as a
/// whole level.
pub fn valid_filter(filter: &str) -> bool {
    if filter.is_empty() || filter.contains('\0') {
        return false;
    }
    let levels: Vec<&str> = filter.split('/').collect();
    let last = levels.len() - 1;
    levels.iter().enumerate().all(|(i, level)| match *level {
        "#" => i == last,
        "+" => true,
        other => !other.contains(['+', '#']),
    })
}

/// Whether `topic` matches `filter`. Topics starting with `$` are not matched by filters whose
/// first level is a wildcard (MQTT-4.7.2-1), but are matched by filters that spell the `$` level,
/// which is how every `$hw/...` topic reaches the eventbus.
pub fn matches(topic: &str, filter: &str) -> bool {
    if topic.starts_with('$') && (filter.starts_with('+') || filter.starts_with('#')) {
        return false;
    }
    let mut topic_levels = topic.split('/');
    for f in filter.split('/') {
        if f == "#" {
            return true;
        }
        match topic_levels.next() {
            Some(t) if f == "+" || f == t => continue,
            _ => return false,
        }
    }
    topic_levels.next().is_none()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn twin_resource_is_padded_url_safe_base64() {
        let topic = "$hw/events/device/default/thermo-1/twin/update";
        assert_eq!(
            twin_resource(topic),
            "JGh3L2V2ZW50cy9kZXZpY2UvZGVmYXVsdC90aGVybW8tMS90d2luL3VwZGF0ZQ=="
        );
        // '?' and '>' bytes give '_' and '-' in the URL-safe alphabet.
        assert_eq!(twin_resource("a??>"), "YT8_Pg==");
    }

    #[test]
    fn twin_topics() {
        assert!(is_twin_topic("$hw/events/device/d/twin/update"));
        assert!(is_twin_topic("$hw/events/node/n/membership/get"));
        assert!(!is_twin_topic("$hw/events/upload/x"));
        assert!(!is_twin_topic("factory/user/x"));
    }

    #[test]
    fn filters_and_matching() {
        assert!(valid_filter("a/+/b/#"));
        assert!(valid_filter("#"));
        assert!(!valid_filter("a/#/b"));
        assert!(!valid_filter("a/b#"));
        assert!(!valid_filter("a+/b"));
        assert!(!valid_filter(""));
        assert!(valid_topic("$hw/events/upload/x"));
        assert!(!valid_topic("a/+"));
        assert!(!valid_topic(""));

        let t = "$hw/events/device/default/thermo-1/twin/update";
        assert!(matches(t, "$hw/events/device/+/+/twin/+"));
        assert!(!matches(t, "$hw/events/device/+/twin/+"));
        assert!(!matches(t, "#"));
        assert!(!matches(t, "+/events/#"));
        assert!(matches("$hw/events/upload/a/b", "$hw/events/upload/#"));
        assert!(matches("$hw/events/upload", "$hw/events/upload/#"));
        assert!(matches("factory/user/x/y", "+/user/#"));
        assert!(!matches("factory/line1/user/x", "+/user/#"));
        assert!(matches("SYS/dis/upload_records", "SYS/dis/upload_records"));
        assert!(!matches("a/b/c", "a/b"));
        assert!(!matches("a/b", "a/b/c"));
        assert!(matches("a//c", "a/+/c"));
    }
}
