//! MQTT → bus: what KubeEdge's eventbus does with each message it hears.
//!
//! Device and node topics (`$hw/events/device...`, `$hw/events/node...`) go to the twin module as
//! `response` messages whose resource is the base64 topic; everything else goes to the cloud as
//! `upload`, resource = topic. Source `bus`, group `user`, content = the payload as a JSON string.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use wedge_core::message::{group, module, operation};
use wedge_core::{Bus, BusError, Content, Message};

use crate::broker::Delivery;
use crate::stats::{DropReason, Stats};
use crate::topics::{is_twin_topic, twin_resource};

/// The message edgecore builds for an MQTT message, and the module it goes to.
pub fn to_message(topic: &str, payload: &[u8]) -> (&'static str, Message) {
    // Go's string(payload): invalid UTF-8 becomes U+FFFD when marshalled.
    let content = Content::string(String::from_utf8_lossy(payload));
    if is_twin_topic(topic) {
        let msg = Message::build(
            group::BUS,
            group::USER,
            operation::RESPONSE,
            &twin_resource(topic),
            content,
        );
        (module::TWIN, msg)
    } else {
        let msg = Message::build(group::BUS, group::USER, operation::UPLOAD, topic, content);
        (module::EDGEHUB, msg)
    }
}

/// Forwards broker deliveries onto the bus until `token` is cancelled or every sender is gone.
/// Runs as its own task so a full mailbox downstream never stalls the module's receive loop.
pub async fn forward(
    mut deliveries: mpsc::Receiver<Delivery>,
    bus: Bus,
    stats: Arc<Stats>,
    max_payload: usize,
    token: CancellationToken,
) {
    loop {
        let delivery = tokio::select! {
            _ = token.cancelled() => break,
            d = deliveries.recv() => match d {
                Some(d) => d,
                None => break,
            },
        };
        stats.mqtt_received.fetch_add(1, Ordering::Relaxed);
        if delivery.payload.len() > max_payload {
            tracing::warn!(
                topic = %delivery.topic,
                size = delivery.payload.len(),
                limit = max_payload,
                "MQTT payload over the size limit; dropped"
            );
            stats.count_drop(DropReason::Oversized);
            continue;
        }
        let (destination, msg) = to_message(&delivery.topic, &delivery.payload);
        let sent = tokio::select! {
            _ = token.cancelled() => break,
            sent = bus.send(destination, msg) => sent,
        };
        match sent {
            Ok(()) if destination == module::TWIN => {
                stats.to_twin.fetch_add(1, Ordering::Relaxed);
            }
            Ok(()) => {
                stats.to_cloud.fetch_add(1, Ordering::Relaxed);
            }
            Err(BusError::UnknownModule(_)) => {
                // As edgecore: a message for a module that is not running is dropped.
                tracing::debug!(topic = %delivery.topic, module = destination, "destination module not running; dropped");
                stats.count_drop(DropReason::NoDestination);
            }
            Err(e) => {
                tracing::debug!(topic = %delivery.topic, "not forwarded: {e}");
                stats.count_drop(DropReason::NoDestination);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn twin_topics_become_base64_responses() {
        let (dest, msg) = to_message(
            "$hw/events/device/default/thermo-1/twin/update",
            b"{\"a\":1}",
        );
        assert_eq!(dest, "twin");
        assert_eq!(msg.route.source, "bus");
        assert_eq!(msg.route.group, "user");
        assert_eq!(msg.route.operation, "response");
        assert_eq!(
            msg.route.resource,
            "JGh3L2V2ZW50cy9kZXZpY2UvZGVmYXVsdC90aGVybW8tMS90d2luL3VwZGF0ZQ=="
        );
        assert_eq!(msg.content.raw(), r#""{\"a\":1}""#);
        assert!(!msg.header.id.is_empty());
    }

    #[test]
    fn other_topics_become_uploads() {
        let (dest, msg) = to_message("factory/user/line1", b"hello");
        assert_eq!(dest, "websocket");
        assert_eq!(msg.route.operation, "upload");
        assert_eq!(msg.route.resource, "factory/user/line1");
        assert_eq!(msg.content.as_string().as_deref(), Some("hello"));
        let (_, msg) = to_message("$hw/events/upload/x", b"\xff");
        assert_eq!(msg.route.operation, "upload");
        assert_eq!(msg.content.as_string().as_deref(), Some("\u{fffd}"));
    }
}
