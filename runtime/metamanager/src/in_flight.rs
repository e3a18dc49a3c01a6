//! Remote queries in flight, by question, so that one question asked twice at once is asked of
//! the cloud once.
//!
//! CloudCore v1.23.1 queues what it sends a node by object (`AckMessageKeyFunc`: the object's
//! UID) and keeps only the newest message per key until the node has it. Two answers about
//! the same object (two pods of one namespace asking for `kube-root-ca.crt`) sent before the
//! first is written leave one in the queue: the other requester waited out its whole timeout
//! (seen as a Deployment's second pod starting 20 s after the first). kubelet never asks
//! twice at once either: its object cache fetches each object once for all its readers.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use wedge_core::Message;

/// Questions on their way to the cloud, each with the requests that joined it.
#[derive(Clone, Default)]
pub(crate) struct InFlight(Arc<Mutex<HashMap<String, Vec<Message>>>>);

/// What makes two requests the same question: operation, resource and content.
pub(crate) fn question_of(msg: &Message) -> String {
    format!(
        "{}\n{}\n{}",
        msg.route.operation,
        msg.route.resource,
        msg.content.raw()
    )
}

impl InFlight {
    /// Joins `msg` to the same question already in flight (true: its answer will serve `msg`
    /// too), or opens the question with `msg` as its asker (false).
    pub(crate) fn join(&self, question: &str, msg: &Message) -> bool {
        let mut map = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        match map.get_mut(question) {
            Some(joined) => {
                joined.push(msg.clone());
                true
            }
            None => {
                map.insert(question.to_owned(), Vec::new());
                false
            }
        }
    }

    /// Closes `question`: the requests that joined it, to be answered with its answer. A later
    /// request asks the cloud again.
    pub(crate) fn close(&self, question: &str) -> Vec<Message> {
        let mut map = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        map.remove(question).unwrap_or_default()
    }

    /// How many questions are in flight.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wedge_core::Content;

    fn query(resource: &str, content: Content) -> Message {
        Message::build("edged", "meta", "query", resource, content)
    }

    #[test]
    fn the_same_question_is_asked_once_and_answers_everyone_who_joined() {
        let flights = InFlight::default();
        let first = query("default/configmap/kube-root-ca.crt", Content::null());
        let second = query("default/configmap/kube-root-ca.crt", Content::null());
        let q = question_of(&first);
        assert_eq!(q, question_of(&second), "ids do not make another question");
        assert!(!flights.join(&q, &first));
        assert!(flights.join(&q, &second));
        let joined = flights.close(&q);
        assert_eq!(joined.len(), 1);
        assert_eq!(joined[0].header.id, second.header.id);
        assert_eq!(flights.len(), 0);
        assert!(
            !flights.join(&q, &first),
            "after the answer, a new question"
        );
    }

    #[test]
    fn another_object_or_another_body_is_another_question() {
        let a = query("default/configmap/a", Content::null());
        let b = query("other/configmap/a", Content::null());
        let token_1 = query(
            "default/serviceaccounttoken/default",
            Content::string("{\"pod\":\"p1\"}"),
        );
        let token_2 = query(
            "default/serviceaccounttoken/default",
            Content::string("{\"pod\":\"p2\"}"),
        );
        assert_ne!(question_of(&a), question_of(&b));
        assert_ne!(question_of(&token_1), question_of(&token_2));
    }
}
