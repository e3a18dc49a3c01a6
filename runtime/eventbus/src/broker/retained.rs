//! Retained messages, bounded by topic count and by payload bytes (`wedge.broker.maxRetained*`):
//! without a byte cap, 2,000 retained topics of 256 KiB kept 750 MB resident for good.
//!
//! A payload is copied into its own allocation when it is retained, so the bytes counted are
//! the bytes held (a payload sliced from a connection's read buffer would pin that buffer).

use std::collections::HashMap;

use bytes::Bytes;
use rumqttc::QoS;

use crate::topics::matches;

/// Why a retained message was not kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NotKept {
    /// `maxRetainedTopics` reached.
    Topics,
    /// `maxRetainedBytes` would be exceeded.
    Bytes,
}

/// The retained messages.
pub(crate) struct Retained {
    messages: HashMap<String, (Bytes, QoS)>,
    bytes: u64,
    max_topics: usize,
    max_bytes: u64,
}

impl Retained {
    /// An empty store with these caps.
    pub fn new(max_topics: usize, max_bytes: u64) -> Retained {
        Retained {
            messages: HashMap::new(),
            bytes: 0,
            max_topics,
            max_bytes,
        }
    }

    /// Stores, replaces or (empty payload) clears the retained message of `topic`. When the
    /// new one does not fit, the old one stays.
    pub fn set(&mut self, topic: &str, payload: &Bytes, qos: QoS) -> Result<(), NotKept> {
        if payload.is_empty() {
            if let Some((old, _)) = self.messages.remove(topic) {
                self.bytes -= old.len() as u64;
            }
            return Ok(());
        }
        let old = self.messages.get(topic).map_or(0, |(p, _)| p.len() as u64);
        if old == 0 && self.messages.len() >= self.max_topics {
            return Err(NotKept::Topics);
        }
        if self.bytes - old + payload.len() as u64 > self.max_bytes {
            return Err(NotKept::Bytes);
        }
        self.bytes = self.bytes - old + payload.len() as u64;
        self.messages
            .insert(topic.to_owned(), (Bytes::copy_from_slice(payload), qos));
        Ok(())
    }

    /// The retained messages matching `filter`: a direct look-up for a filter without
    /// wildcards, a scan otherwise.
    pub fn matching(&self, filter: &str) -> Vec<(&str, &Bytes, QoS)> {
        if !filter.contains(['+', '#']) {
            return self
                .messages
                .get_key_value(filter)
                .map(|(t, (p, q))| (t.as_str(), p, *q))
                .into_iter()
                .collect();
        }
        self.messages
            .iter()
            .filter(|(topic, _)| matches(topic, filter))
            .map(|(t, (p, q))| (t.as_str(), p, *q))
            .collect()
    }

    /// Payload bytes held.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn caps_topics_and_bytes_and_keeps_the_old_message() {
        let mut r = Retained::new(2, 10);
        let p = |s: &'static str| Bytes::from_static(s.as_bytes());
        r.set("a", &p("12345"), QoS::AtMostOnce).unwrap();
        r.set("b", &p("123"), QoS::AtMostOnce).unwrap();
        assert_eq!(r.set("c", &p("1"), QoS::AtMostOnce), Err(NotKept::Topics));
        assert_eq!(
            r.set("b", &p("123456"), QoS::AtMostOnce),
            Err(NotKept::Bytes)
        );
        assert_eq!(r.matching("b")[0].1, &p("123"), "old message kept");
        r.set("b", &p("12345"), QoS::AtMostOnce).unwrap();
        assert_eq!(r.bytes(), 10);
        r.set("a", &Bytes::new(), QoS::AtMostOnce).unwrap();
        assert_eq!(r.bytes(), 5);
        assert_eq!(r.matching("+").len(), 1);
        assert!(r.matching("a").is_empty());
    }
}
