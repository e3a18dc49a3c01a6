//! Bus → MQTT: what each operation sent to the eventbus asks for (KubeEdge's `pubMQTT` switch).

use bytes::Bytes;
use wedge_core::Message;
use wedge_core::message::operation;

use crate::topics::{auth_info_result_topic, valid_filter, valid_topic};

/// Operations the eventbus understands besides `publish`.
pub mod ops {
    /// Subscribe to the topic in the resource (and remember it).
    pub const SUBSCRIBE: &str = "subscribe";
    /// Unsubscribe from the topic in the resource (and forget it).
    pub const UNSUBSCRIBE: &str = "unsubscribe";
    /// Publish `content.message` as JSON on `content.message.topic`.
    pub const MESSAGE: &str = "message";
    /// Publish an auth-info result for this node.
    pub const GET_RESULT: &str = "get_result";
    /// The only resource `get_result` acts on.
    pub const AUTH_INFO: &str = "auth_info";
}

/// What to do for one bus message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Publish `payload` on `topic` (to both brokers in mode 1).
    Publish {
        /// The topic.
        topic: String,
        /// The payload.
        payload: Bytes,
    },
    /// Subscribe to a filter and store it in `sub_topics`.
    Subscribe(String),
    /// Unsubscribe from a filter and delete it from `sub_topics`.
    Unsubscribe(String),
    /// Nothing to do; the text says why (logged by the caller).
    Ignore(String),
    /// The cloud link's connect/disconnect broadcast, which edgehub sends to the `bus` group
    /// as edgecore does: nothing for the eventbus to do, and nothing wrong.
    LinkState,
}

/// The action for `msg`, for node `node`.
pub fn action(msg: &Message, node: &str) -> Action {
    let resource = msg.route.resource.as_str();
    match msg.route.operation.as_str() {
        operation::PUBLISH => {
            if msg.content.is_null() {
                return Action::Ignore("publish with null content".to_owned());
            }
            // A string yields its text; any other JSON its sorted-key serialisation.
            publish(resource, Bytes::from(msg.content.to_bytes()))
        }
        ops::SUBSCRIBE | ops::UNSUBSCRIBE => {
            if !valid_filter(resource) {
                return Action::Ignore(format!("{resource:?} is not a valid topic filter"));
            }
            if msg.route.operation == ops::SUBSCRIBE {
                Action::Subscribe(resource.to_owned())
            } else {
                Action::Unsubscribe(resource.to_owned())
            }
        }
        ops::MESSAGE => {
            let Ok(body) = msg.content.parse::<serde_json::Value>() else {
                return Action::Ignore("message content is not JSON".to_owned());
            };
            let Some(inner) = body.get("message").filter(|m| m.is_object()) else {
                return Action::Ignore("message content has no \"message\" object".to_owned());
            };
            let Some(topic) = inner.get("topic").and_then(|t| t.as_str()) else {
                return Action::Ignore("message.topic is missing or not a string".to_owned());
            };
            // serde_json's map is ordered by key, like Go's json.Marshal of a map.
            publish(
                topic,
                Bytes::from(serde_json::to_vec(inner).unwrap_or_default()),
            )
        }
        ops::GET_RESULT => {
            if resource != ops::AUTH_INFO {
                return Action::Ignore(format!("get_result for {resource:?} (only auth_info)"));
            }
            let payload = match serde_json::from_str::<serde_json::Value>(msg.content.raw()) {
                Ok(value) => serde_json::to_vec(&value).unwrap_or_default(),
                Err(_) => msg.content.raw().as_bytes().to_vec(),
            };
            publish(&auth_info_result_topic(node), Bytes::from(payload))
        }
        wedge_core::message::operation::CONNECT => Action::LinkState,
        other => Action::Ignore(format!("unknown operation {other:?}")),
    }
}

fn publish(topic: &str, payload: Bytes) -> Action {
    if !valid_topic(topic) {
        return Action::Ignore(format!("{topic:?} is not a valid topic to publish to"));
    }
    Action::Publish {
        topic: topic.to_owned(),
        payload,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wedge_core::Content;

    fn msg(op: &str, resource: &str, content: Content) -> Message {
        Message::build("wasm", "bus", op, resource, content)
    }

    fn published(a: Action) -> (String, String) {
        match a {
            Action::Publish { topic, payload } => {
                (topic, String::from_utf8(payload.to_vec()).unwrap())
            }
            other => panic!("expected a publish, got {other:?}"),
        }
    }

    #[test]
    fn the_cloud_links_state_is_nothing_to_publish_and_no_error() {
        let connected = msg(
            "connect",
            "node/connection",
            Content::string("cloud_connected"),
        );
        assert_eq!(action(&connected, "n"), Action::LinkState);
        assert!(matches!(
            action(&msg("frobnicate", "x", Content::null()), "n"),
            Action::Ignore(_)
        ));
    }

    #[test]
    fn publish_uses_string_text_or_sorted_json() {
        let a = action(&msg("publish", "a/b", Content::string("hi")), "n");
        assert_eq!(published(a), ("a/b".to_owned(), "hi".to_owned()));
        let content = Content::from_raw(r#"{"z":1,"a":2}"#).unwrap();
        let a = action(&msg("publish", "a/b", content), "n");
        assert_eq!(published(a).1, r#"{"a":2,"z":1}"#);
        assert!(matches!(
            action(&msg("publish", "a/b", Content::null()), "n"),
            Action::Ignore(_)
        ));
        assert!(matches!(
            action(&msg("publish", "a/#", Content::string("x")), "n"),
            Action::Ignore(_)
        ));
    }

    #[test]
    fn subscribe_and_unsubscribe() {
        assert_eq!(
            action(&msg("subscribe", "x/+/y", Content::null()), "n"),
            Action::Subscribe("x/+/y".to_owned())
        );
        assert_eq!(
            action(&msg("unsubscribe", "x/#", Content::null()), "n"),
            Action::Unsubscribe("x/#".to_owned())
        );
        assert!(matches!(
            action(&msg("subscribe", "x/#/y", Content::null()), "n"),
            Action::Ignore(_)
        ));
    }

    #[test]
    fn message_publishes_the_inner_object() {
        let content =
            Content::from_raw(r#"{"message":{"topic":"t/1","data":{"b":1,"a":0}}}"#).unwrap();
        let (topic, payload) = published(action(&msg("message", "", content), "n"));
        assert_eq!(topic, "t/1");
        assert_eq!(payload, r#"{"data":{"a":0,"b":1},"topic":"t/1"}"#);
        let content = Content::from_raw(r#"{"message":{"data":1}}"#).unwrap();
        assert!(matches!(
            action(&msg("message", "", content), "n"),
            Action::Ignore(_)
        ));
    }

    #[test]
    fn get_result_only_for_auth_info() {
        let content = Content::from_raw(r#"{"secret":"s","name":"x"}"#).unwrap();
        let (topic, payload) = published(action(
            &msg("get_result", "auth_info", content.clone()),
            "edge-1",
        ));
        assert_eq!(topic, "$hw/events/node/edge-1/authInfo/get/result");
        assert_eq!(payload, r#"{"name":"x","secret":"s"}"#);
        assert!(matches!(
            action(&msg("get_result", "other", content), "n"),
            Action::Ignore(_)
        ));
        assert!(matches!(
            action(&msg("frobnicate", "x", Content::null()), "n"),
            Action::Ignore(_)
        ));
    }
}
