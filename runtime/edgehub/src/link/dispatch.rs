//! Where an inbound cloud message goes (§2 "Inbound dispatch"), as a pure decision.

use wedge_core::Message;
use wedge_core::message::{group, module};

/// The destination of an inbound message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dispatch {
    /// A reply: complete the pending request whose id is `parent_msg_id` (drop if none).
    Reply,
    /// Every module of this bus group.
    Group(&'static str),
    /// The module of this name.
    Module(&'static str),
    /// Nobody takes it.
    Drop,
}

/// Decides where an inbound (non-control) message goes; first match wins, else [`Dispatch::Drop`].
pub fn route_inbound(msg: &Message) -> Dispatch {
    let is_reply = msg.parent_id().is_some();
    match msg.route.group.as_str() {
        group::RESOURCE | group::FUNC if is_reply => Dispatch::Reply,
        group::RESOURCE | group::FUNC => Dispatch::Group(group::META),
        group::TWIN => Dispatch::Group(group::TWIN),
        group::USER if is_reply => Dispatch::Reply,
        group::USER => match msg.route.source.as_str() {
            "router_eventbus" => Dispatch::Module(module::EVENTBUS),
            "router_servicebus" => Dispatch::Module(module::SERVICEBUS),
            _ => Dispatch::Drop,
        },
        group::TASKMANAGER => Dispatch::Module(module::TASKMANAGER),
        _ => Dispatch::Drop,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wedge_core::Content;

    fn msg(group: &str, source: &str, parent: &str) -> Message {
        let mut m = Message::build(source, group, "update", "default/pod/a", Content::null());
        m.header.parent_id = parent.to_owned();
        m
    }

    #[test]
    fn follows_the_spec_table() {
        let cases = [
            (
                msg("resource", "edgecontroller", ""),
                Dispatch::Group("meta"),
            ),
            (msg("resource", "edgecontroller", "p"), Dispatch::Reply),
            (msg("func", "x", ""), Dispatch::Group("meta")),
            (msg("func", "x", "p"), Dispatch::Reply),
            (msg("twin", "devicecontroller", ""), Dispatch::Group("twin")),
            (
                msg("twin", "devicecontroller", "p"),
                Dispatch::Group("twin"),
            ),
            (msg("user", "router_eventbus", "p"), Dispatch::Reply),
            (
                msg("user", "router_eventbus", ""),
                Dispatch::Module("eventbus"),
            ),
            (
                msg("user", "router_servicebus", ""),
                Dispatch::Module("servicebus"),
            ),
            (msg("user", "other", ""), Dispatch::Drop),
            (msg("taskmanager", "x", ""), Dispatch::Module("taskmanager")),
            (
                msg("taskmanager", "x", "p"),
                Dispatch::Module("taskmanager"),
            ),
            (msg("meta", "x", ""), Dispatch::Drop),
            (msg("", "", ""), Dispatch::Drop),
        ];
        for (m, want) in cases {
            assert_eq!(route_inbound(&m), want, "{:?}", m.route);
        }
    }
}
