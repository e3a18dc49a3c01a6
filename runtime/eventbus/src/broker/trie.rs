//! Subscriptions indexed by topic level, so routing a message costs the depth of its topic and
//! the subscriptions that match it, not the number of filters held: a client holding 200,000
//! filters on other topics no longer slows every twin round trip down.
//!
//! Subscribers are keys (the router's connection generations), each filter holds a QoS per
//! key. The `$` rule (MQTT-4.7.2-1) is applied while walking: a topic starting with `$` is not
//! matched by a wildcard in the first level.

use std::collections::HashMap;

use rumqttc::QoS;

/// A subscriber's key (unique per connection).
pub(crate) type Key = u64;

/// One level. Kept small (boxed children, subscriber lists as vectors: nearly always one
/// entry), since a hostile client's filters each cost a few nodes.
#[derive(Default)]
struct Node {
    /// Literal next levels.
    children: HashMap<Box<str>, Box<Node>>,
    /// The `+` next level.
    plus: Option<Box<Node>>,
    /// Subscribers of `<this prefix>/#` (at the root: `#`).
    hash: Vec<(Key, QoS)>,
    /// Subscribers whose filter ends exactly here.
    here: Vec<(Key, QoS)>,
}

/// Sets `key`'s QoS in `subs`.
fn put(subs: &mut Vec<(Key, QoS)>, key: Key, qos: QoS) {
    match subs.iter_mut().find(|(k, _)| *k == key) {
        Some(entry) => entry.1 = qos,
        None => {
            subs.push((key, qos));
            subs.shrink_to_fit();
        }
    }
}

/// Removes `key` from `subs`.
fn take(subs: &mut Vec<(Key, QoS)>, key: Key) {
    subs.retain(|(k, _)| *k != key);
    subs.shrink_to_fit();
}

impl Node {
    fn is_empty(&self) -> bool {
        self.children.is_empty()
            && self.plus.is_none()
            && self.hash.is_empty()
            && self.here.is_empty()
    }
}

/// The subscription index. The caller has validated every filter ([`crate::topics::valid_filter`]).
#[derive(Default)]
pub(crate) struct FilterTrie {
    root: Node,
}

impl FilterTrie {
    /// Adds (or changes the QoS of) `key`'s subscription to `filter`.
    pub fn insert(&mut self, filter: &str, key: Key, qos: QoS) {
        let mut node = &mut self.root;
        for level in filter.split('/') {
            match level {
                "#" => {
                    put(&mut node.hash, key, qos);
                    return;
                }
                "+" => node = node.plus.get_or_insert_with(Box::default),
                literal => node = node.children.entry(literal.into()).or_default(),
            }
        }
        put(&mut node.here, key, qos);
    }

    /// Removes `key`'s subscription to `filter`, pruning emptied branches.
    pub fn remove(&mut self, filter: &str, key: Key) {
        let levels: Vec<&str> = filter.split('/').collect();
        remove_in(&mut self.root, &levels, key);
    }

    /// Every subscriber whose filters match `topic`, with the highest QoS among its matching
    /// filters.
    pub fn matches(&self, topic: &str) -> HashMap<Key, QoS> {
        let levels: Vec<&str> = topic.split('/').collect();
        let mut out = HashMap::new();
        visit(&self.root, &levels, 0, topic.starts_with('$'), &mut out);
        out
    }
}

fn add(out: &mut HashMap<Key, QoS>, subs: &[(Key, QoS)]) {
    for (key, qos) in subs {
        let best = out.entry(*key).or_insert(*qos);
        if (*qos as u8) > (*best as u8) {
            *best = *qos;
        }
    }
}

fn visit(node: &Node, levels: &[&str], i: usize, dollar: bool, out: &mut HashMap<Key, QoS>) {
    // Wildcards in the first level never match `$` topics.
    let wildcards = !(i == 0 && dollar);
    if wildcards {
        // `prefix/#` matches the prefix itself and everything below it.
        add(out, &node.hash);
    }
    let Some(level) = levels.get(i) else {
        add(out, &node.here);
        return;
    };
    if let Some(child) = node.children.get(*level) {
        visit(child, levels, i + 1, dollar, out);
    }
    if wildcards && let Some(plus) = &node.plus {
        visit(plus, levels, i + 1, dollar, out);
    }
}

/// Returns true when `node` became empty.
fn remove_in(node: &mut Node, levels: &[&str], key: Key) -> bool {
    match levels.split_first() {
        None => take(&mut node.here, key),
        Some((&"#", _)) => take(&mut node.hash, key),
        Some((&"+", rest)) => {
            if let Some(plus) = &mut node.plus
                && remove_in(plus, rest, key)
            {
                node.plus = None;
            }
        }
        Some((literal, rest)) => {
            if let Some(child) = node.children.get_mut(*literal)
                && remove_in(child, rest, key)
            {
                node.children.remove(*literal);
            }
        }
    }
    node.is_empty()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topics::matches;

    const FILTERS: &[&str] = &[
        "#",
        "+",
        "+/+",
        "a",
        "a/#",
        "a/+",
        "a/+/c",
        "a/b/c",
        "+/b/#",
        "$hw/#",
        "$hw/events/device/+/+/twin/+",
        "$hw/events/device/+/twin/+",
        "/#",
        "+/",
        "a//c",
        "a/+/+/#",
    ];
    const TOPICS: &[&str] = &[
        "a",
        "a/b",
        "a/b/c",
        "a/b/c/d",
        "a//c",
        "/x",
        "x/",
        "x/b/y",
        "$hw/events/device/ns/d/twin/update",
        "$hw/events/device/d/twin/update",
        "$SYS/x",
        "b",
    ];

    #[test]
    fn agrees_with_the_reference_matcher() {
        let mut trie = FilterTrie::default();
        for (i, f) in FILTERS.iter().enumerate() {
            trie.insert(f, i as Key, QoS::AtMostOnce);
        }
        for topic in TOPICS {
            let mut got: Vec<Key> = trie.matches(topic).into_keys().collect();
            got.sort_unstable();
            let want: Vec<Key> = FILTERS
                .iter()
                .enumerate()
                .filter(|(_, f)| matches(topic, f))
                .map(|(i, _)| i as Key)
                .collect();
            assert_eq!(got, want, "topic {topic}");
        }
    }

    #[test]
    fn best_qos_and_pruning() {
        let mut trie = FilterTrie::default();
        trie.insert("a/+", 1, QoS::AtMostOnce);
        trie.insert("a/#", 1, QoS::AtLeastOnce);
        trie.insert("a/b", 2, QoS::AtMostOnce);
        assert_eq!(trie.matches("a/b").get(&1), Some(&QoS::AtLeastOnce));
        assert_eq!(trie.matches("a/b").len(), 2);
        trie.remove("a/#", 1);
        trie.remove("a/+", 1);
        trie.remove("a/b", 2);
        assert!(trie.root.is_empty(), "every branch pruned");
        // Removing what is not there changes nothing.
        trie.remove("x/y", 3);
        assert!(trie.matches("a/b").is_empty());
    }
}
