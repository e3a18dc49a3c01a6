//! The objects MetaServer serves, their resource versions, and the watches on them.
//!
//! metamanager's SQLite table is the durable copy; this is its image in memory, loaded from
//! it at start and kept current by metamanager's change feed (`feed`), so a LIST answers
//! without touching the disk and a WATCH sees each committed change once.
//!
//! **Resource versions** are the cloud's: every object keeps the `metadata.resourceVersion`
//! kube-apiserver gave it, so a client can send it back to the cloud (an update through
//! MetaServer) and informers compare versions the way they do against the apiserver. The
//! cache's *revision* is the highest version it has seen; a LIST answers with it and a WATCH
//! resumes after it. A change whose object carries no newer version (a delete, an object
//! without one) gets `revision + 1`.
//!
//! **History**: the last [`HISTORY`] changes are kept, so a WATCH from a version the client
//! saw replays what it missed (after a dropped connection, after the cloud was away). A
//! version older than the history answers `410 Gone` (`Expired`), which makes an informer
//! relist, as kube-apiserver does once its watch cache has moved on. After a restart the
//! history starts empty at the stored revision.
//!
//! **Watches** are bounded: at most [`MAX_WATCHES`] at once, each with a queue of
//! [`WATCH_QUEUE`] events. A watcher that does not read its queue is ended (its stream
//! closes; the client re-watches from the last version it saw and gets the rest from the
//! history) and counted, so a slow reader never holds memory or the feed.
//!
//! Invariants: `objects` never holds two versions of one object; every change with a version
//! above `compacted` is in `history`; a watcher gets a change at most once, and only changes
//! with a version above the one it started from.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};

use serde_json::Value;
use tokio::sync::mpsc;

use crate::catalog::ResourceType;

/// Changes kept for watches that resume.
pub const HISTORY: usize = 4096;
/// Watches open at once.
pub const MAX_WATCHES: usize = 1000;
/// Events queued for one watcher before it counts as not reading.
pub const WATCH_QUEUE: usize = 1024;

/// `(group, resource, namespace, name)`.
pub type ObjectKey = (String, String, String, String);

/// One object as served.
#[derive(Debug)]
pub struct Stored {
    /// Its resource version (the cloud's, or the cache's for one that had none).
    pub rv: u64,
    /// The object.
    pub object: Value,
    /// The object's JSON text, made once.
    pub text: Arc<str>,
    /// What it is.
    pub rtype: Arc<ResourceType>,
}

/// What a watcher is sent.
#[derive(Debug, Clone)]
pub enum WatchEvent {
    /// `ADDED`, `MODIFIED` or `DELETED`, with the object's JSON.
    Object(&'static str, Arc<str>),
    /// A `BOOKMARK` at this revision.
    Bookmark(u64),
}

/// What a watcher wants.
pub struct WatchSpec {
    /// API group.
    pub group: String,
    /// Resource plural.
    pub resource: String,
    /// Namespace, `""` for all.
    pub namespace: String,
    /// Object name, `""` for all.
    pub name: String,
    /// Label and field selectors together.
    pub selects: Box<dyn Fn(&Value) -> bool + Send + Sync>,
    /// Whether it takes bookmarks.
    pub bookmarks: bool,
}

impl WatchSpec {
    fn covers(&self, key: &ObjectKey) -> bool {
        key.0 == self.group
            && key.1 == self.resource
            && (self.namespace.is_empty() || key.2 == self.namespace)
            && (self.name.is_empty() || key.3 == self.name)
    }

    /// The event this change is for this watcher: an object entering its selection is
    /// `ADDED`, leaving it `DELETED`, staying in it `MODIFIED` (kube-apiserver's rule).
    fn event_for(&self, change: &Change) -> Option<WatchEvent> {
        if !self.covers(&change.key) {
            return None;
        }
        let was = change
            .old
            .as_ref()
            .is_some_and(|o| (self.selects)(&o.object));
        let is = change
            .new
            .as_ref()
            .is_some_and(|n| (self.selects)(&n.object));
        match (was, is, &change.new) {
            (false, true, Some(n)) => Some(WatchEvent::Object("ADDED", n.text.clone())),
            (true, true, Some(n)) => Some(WatchEvent::Object("MODIFIED", n.text.clone())),
            (true, false, _) => Some(WatchEvent::Object("DELETED", change.gone_text())),
            _ => None,
        }
    }
}

/// One change to the cache.
#[derive(Debug, Clone)]
struct Change {
    rv: u64,
    key: ObjectKey,
    old: Option<Arc<Stored>>,
    new: Option<Arc<Stored>>,
}

impl Change {
    /// The object a `DELETED` event carries: the last state, at the change's version.
    fn gone_text(&self) -> Arc<str> {
        let last = self.old.as_ref().or(self.new.as_ref());
        match last {
            Some(s) => {
                let mut object = s.object.clone();
                set_rv(&mut object, self.rv);
                Arc::from(object.to_string())
            }
            None => Arc::from("{}"),
        }
    }
}

/// Why a watch cannot start.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WatchRefused {
    /// The version is older than the history.
    #[error("too old resource version: {requested} ({oldest})")]
    Gone {
        /// The version asked for.
        requested: u64,
        /// The oldest version a watch can start from.
        oldest: u64,
    },
    /// [`MAX_WATCHES`] are open.
    #[error("too many watches open on this MetaServer ({0}); try again later")]
    TooMany(usize),
}

/// An open watch: what happened since the version it started from, then the live feed.
pub struct Watch {
    /// Its id (to end it).
    pub id: u64,
    /// Events before the feed: the objects (from no version) or the missed changes.
    pub initial: Vec<WatchEvent>,
    /// The live feed; it ends when the watcher is dropped for not reading.
    pub events: mpsc::Receiver<WatchEvent>,
}

struct Watcher {
    spec: WatchSpec,
    from: u64,
    tx: mpsc::Sender<WatchEvent>,
}

#[derive(Default)]
struct Inner {
    objects: BTreeMap<ObjectKey, Arc<Stored>>,
    revision: u64,
    history: VecDeque<Change>,
    compacted: u64,
    watchers: HashMap<u64, Watcher>,
    next_id: u64,
}

/// Counters of the cache.
#[derive(Debug, Default)]
pub struct CacheStats {
    /// Changes applied.
    pub changes: AtomicU64,
    /// Changes ignored: an older or the same version of what is stored.
    pub stale: AtomicU64,
    /// Watchers ended because they did not read.
    pub shed: AtomicU64,
    /// Watches refused with 410 Gone.
    pub gone: AtomicU64,
    /// Watches refused for [`MAX_WATCHES`].
    pub refused: AtomicU64,
}

/// The cache (module docs).
#[derive(Default)]
pub struct Cache {
    inner: RwLock<Inner>,
    /// Its counters.
    pub stats: CacheStats,
}

impl Cache {
    /// Writes the cache's counters and gauges (`wedge_metaserver_*`).
    pub fn write_metrics(&self, w: &mut wedge_core::metrics::PromWriter) {
        let counters = [
            (
                "wedge_metaserver_changes_total",
                "Changes applied to MetaServer's objects.",
                &self.stats.changes,
            ),
            (
                "wedge_metaserver_stale_total",
                "Changes ignored: the same or an older version than the one held.",
                &self.stats.stale,
            ),
            (
                "wedge_metaserver_watchers_shed_total",
                "Watchers ended because they did not read their events.",
                &self.stats.shed,
            ),
            (
                "wedge_metaserver_watch_gone_total",
                "Watches refused with 410 Gone (a version older than the history).",
                &self.stats.gone,
            ),
            (
                "wedge_metaserver_watch_refused_total",
                "Watches refused because the most are open (429).",
                &self.stats.refused,
            ),
        ];
        for (name, help, value) in counters {
            w.family(name, help, "counter");
            w.sample(name, &[], value.load(Ordering::Relaxed) as f64);
        }
        let gauges = [
            (
                "wedge_metaserver_objects",
                "Objects MetaServer serves from the node.",
                self.len() as f64,
            ),
            (
                "wedge_metaserver_watches",
                "Watches open.",
                self.watches() as f64,
            ),
            (
                "wedge_metaserver_revision",
                "The highest resource version MetaServer has seen.",
                self.revision() as f64,
            ),
        ];
        for (name, help, value) in gauges {
            w.family(name, help, "gauge");
            w.sample(name, &[], value);
        }
    }
}

/// The `metadata.resourceVersion` of `object` as a number (0 when absent or not a number).
pub fn rv_of(object: &Value) -> u64 {
    object["metadata"]["resourceVersion"]
        .as_str()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

fn set_rv(object: &mut Value, rv: u64) {
    if let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.insert("resourceVersion".into(), Value::String(rv.to_string()));
    }
}

impl Cache {
    fn read(&self) -> RwLockReadGuard<'_, Inner> {
        self.inner.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self) -> RwLockWriteGuard<'_, Inner> {
        self.inner.write().unwrap_or_else(|e| e.into_inner())
    }

    /// The highest version seen.
    pub fn revision(&self) -> u64 {
        self.read().revision
    }

    /// Objects held.
    pub fn len(&self) -> usize {
        self.read().objects.len()
    }

    /// Whether no object is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Watches open.
    pub fn watches(&self) -> usize {
        self.read().watchers.len()
    }

    /// Stores `object` (of type `rtype`, named in its metadata): added, or replacing an older
    /// version; the same or an older version than the stored one changes nothing.
    pub fn put(&self, rtype: Arc<ResourceType>, mut object: Value) {
        let namespace = if rtype.namespaced {
            object["metadata"]["namespace"]
                .as_str()
                .unwrap_or("")
                .to_owned()
        } else {
            String::new()
        };
        let Some(name) = object["metadata"]["name"].as_str().map(str::to_owned) else {
            return;
        };
        let key = (rtype.group.clone(), rtype.resource.clone(), namespace, name);
        let object_rv = rv_of(&object);
        let mut inner = self.write();
        let old = inner.objects.get(&key).cloned();
        if let Some(old) = &old {
            let same_or_older = object_rv != 0 && object_rv <= old.rv;
            if same_or_older || (object_rv == 0 && old.object == object) {
                self.stats.stale.fetch_add(1, Ordering::Relaxed);
                return;
            }
        }
        let rv = if object_rv == 0 {
            let rv = inner.revision + 1;
            set_rv(&mut object, rv);
            rv
        } else {
            object_rv
        };
        let text: Arc<str> = Arc::from(object.to_string());
        let new = Arc::new(Stored {
            rv,
            object,
            text,
            rtype,
        });
        inner.objects.insert(key.clone(), new.clone());
        self.record(
            &mut inner,
            Change {
                rv,
                key,
                old,
                new: Some(new),
            },
        );
    }

    /// Removes the object of `rtype` named `namespace/name`, if held; `object_rv` is the
    /// version the delete carries, if any.
    pub fn delete(&self, rtype: &ResourceType, namespace: &str, name: &str, object_rv: u64) {
        let namespace = if rtype.namespaced { namespace } else { "" };
        let key = (
            rtype.group.clone(),
            rtype.resource.clone(),
            namespace.to_owned(),
            name.to_owned(),
        );
        let mut inner = self.write();
        let Some(old) = inner.objects.remove(&key) else {
            return;
        };
        let rv = if object_rv > inner.revision {
            object_rv
        } else {
            inner.revision + 1
        };
        self.record(
            &mut inner,
            Change {
                rv,
                key,
                old: Some(old),
                new: None,
            },
        );
    }

    fn record(&self, inner: &mut Inner, change: Change) {
        self.stats.changes.fetch_add(1, Ordering::Relaxed);
        inner.revision = inner.revision.max(change.rv);
        let mut shed = Vec::new();
        for (id, w) in &inner.watchers {
            if change.rv <= w.from {
                continue;
            }
            if let Some(event) = w.spec.event_for(&change)
                && w.tx.try_send(event).is_err()
            {
                shed.push(*id);
            }
        }
        for id in shed {
            inner.watchers.remove(&id);
            self.stats.shed.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(
                watcher = id,
                "metaserver: a watcher that does not read was ended"
            );
        }
        inner.history.push_back(change);
        while inner.history.len() > HISTORY {
            if let Some(dropped) = inner.history.pop_front() {
                inner.compacted = inner.compacted.max(dropped.rv);
            }
        }
    }

    /// Marks the end of the initial load: a watch can resume only from a version at or after
    /// what was loaded (the history of the load itself is not kept).
    pub fn loaded(&self) {
        let mut inner = self.write();
        inner.history.clear();
        inner.compacted = inner.revision;
    }

    /// The objects of `group`/`resource` in `namespace` (`""`: all) that `selects` takes,
    /// in key order, with the revision they are current at.
    pub fn list(
        &self,
        group: &str,
        resource: &str,
        namespace: &str,
        selects: &dyn Fn(&Value) -> bool,
    ) -> (u64, Vec<Arc<Stored>>) {
        let inner = self.read();
        let start = (
            group.to_owned(),
            resource.to_owned(),
            namespace.to_owned(),
            String::new(),
        );
        let items = inner
            .objects
            .range(start..)
            .take_while(|(k, _)| {
                k.0 == group && k.1 == resource && (namespace.is_empty() || k.2 == namespace)
            })
            .filter(|(_, s)| selects(&s.object))
            .map(|(_, s)| s.clone())
            .collect();
        (inner.revision, items)
    }

    /// One object.
    pub fn get(
        &self,
        group: &str,
        resource: &str,
        namespace: &str,
        name: &str,
    ) -> Option<Arc<Stored>> {
        let key = (
            group.to_owned(),
            resource.to_owned(),
            namespace.to_owned(),
            name.to_owned(),
        );
        self.read().objects.get(&key).cloned()
    }

    /// Opens a watch from version `from` (`None`: the current objects as `ADDED`, then what
    /// changes).
    pub fn watch(&self, spec: WatchSpec, from: Option<u64>) -> Result<Watch, WatchRefused> {
        let mut inner = self.write();
        if inner.watchers.len() >= MAX_WATCHES {
            self.stats.refused.fetch_add(1, Ordering::Relaxed);
            return Err(WatchRefused::TooMany(MAX_WATCHES));
        }
        let (initial, start) = match from {
            None => {
                let initial = inner
                    .objects
                    .iter()
                    .filter(|(k, s)| spec.covers(k) && (spec.selects)(&s.object))
                    .map(|(_, s)| WatchEvent::Object("ADDED", s.text.clone()))
                    .collect();
                (initial, inner.revision)
            }
            Some(rv) if rv < inner.compacted => {
                self.stats.gone.fetch_add(1, Ordering::Relaxed);
                return Err(WatchRefused::Gone {
                    requested: rv,
                    oldest: inner.compacted,
                });
            }
            Some(rv) => {
                let initial = inner
                    .history
                    .iter()
                    .filter(|c| c.rv > rv)
                    .filter_map(|c| spec.event_for(c))
                    .collect();
                (initial, rv.max(inner.revision))
            }
        };
        let (tx, events) = mpsc::channel(WATCH_QUEUE);
        let id = inner.next_id;
        inner.next_id += 1;
        inner.watchers.insert(
            id,
            Watcher {
                spec,
                from: start,
                tx,
            },
        );
        Ok(Watch {
            id,
            initial,
            events,
        })
    }

    /// Ends watch `id` (its client went away).
    pub fn unwatch(&self, id: u64) {
        self.write().watchers.remove(&id);
    }

    /// Sends a bookmark at the current revision to every watcher that takes them and has
    /// room (a full queue skips one; the next bookmark comes later).
    pub fn bookmark(&self) {
        let inner = self.read();
        for w in inner.watchers.values().filter(|w| w.spec.bookmarks) {
            let _ = w.tx.try_send(WatchEvent::Bookmark(inner.revision));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::by_store_type;
    use serde_json::json;

    fn cm(name: &str, rv: u64, data: &str) -> Value {
        json!({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": name, "namespace": "default", "resourceVersion": rv.to_string(), "labels": {"app": data}},
               "data": {"k": data}})
    }

    fn spec(label: &'static str) -> WatchSpec {
        WatchSpec {
            group: String::new(),
            resource: "configmaps".into(),
            namespace: "default".into(),
            name: String::new(),
            selects: Box::new(move |o| label.is_empty() || o["metadata"]["labels"]["app"] == label),
            bookmarks: true,
        }
    }

    fn kinds(events: &[WatchEvent]) -> Vec<String> {
        events
            .iter()
            .map(|e| match e {
                WatchEvent::Object(t, text) => {
                    let v: Value = serde_json::from_str(text).unwrap();
                    format!(
                        "{t} {} {}",
                        v["metadata"]["name"].as_str().unwrap(),
                        v["metadata"]["resourceVersion"].as_str().unwrap()
                    )
                }
                WatchEvent::Bookmark(rv) => format!("BOOKMARK {rv}"),
            })
            .collect()
    }

    fn drain(w: &mut Watch) -> Vec<WatchEvent> {
        let mut out = Vec::new();
        while let Ok(e) = w.events.try_recv() {
            out.push(e);
        }
        out
    }

    #[test]
    fn versions_order_changes_and_watches_resume() {
        let cache = Cache::default();
        let t = Arc::new(by_store_type("configmap", None, None).unwrap());
        cache.put(t.clone(), cm("a", 10, "x"));
        cache.put(t.clone(), cm("b", 11, "x"));
        cache.loaded();
        assert_eq!(cache.revision(), 11);
        let mut fresh = cache.watch(spec(""), None).unwrap();
        assert_eq!(kinds(&fresh.initial), ["ADDED a 10", "ADDED b 11"]);
        // A resend of the same version and an older one change nothing.
        cache.put(t.clone(), cm("a", 10, "x"));
        cache.put(t.clone(), cm("a", 9, "old"));
        assert_eq!(cache.stats.stale.load(Ordering::Relaxed), 2);
        cache.put(t.clone(), cm("a", 12, "y"));
        cache.delete(&t, "default", "b", 0);
        assert_eq!(kinds(&drain(&mut fresh)), ["MODIFIED a 12", "DELETED b 13"]);
        // Resuming from 11 replays both; from 12 only the delete; from 5 is too old.
        let resumed = cache.watch(spec(""), Some(11)).unwrap();
        assert_eq!(kinds(&resumed.initial), ["MODIFIED a 12", "DELETED b 13"]);
        let resumed = cache.watch(spec(""), Some(12)).unwrap();
        assert_eq!(kinds(&resumed.initial), ["DELETED b 13"]);
        assert_eq!(
            cache.watch(spec(""), Some(5)).err(),
            Some(WatchRefused::Gone {
                requested: 5,
                oldest: 11
            })
        );
        let (rv, items) = cache.list("", "configmaps", "", &|_| true);
        assert_eq!((rv, items.len()), (13, 1));
    }

    #[test]
    fn selectors_turn_changes_into_added_and_deleted() {
        let cache = Cache::default();
        let t = Arc::new(by_store_type("configmap", None, None).unwrap());
        cache.put(t.clone(), cm("a", 10, "web"));
        let mut web = cache.watch(spec("web"), None).unwrap();
        cache.put(t.clone(), cm("a", 11, "db"));
        cache.put(t.clone(), cm("a", 12, "web"));
        cache.bookmark();
        assert_eq!(
            kinds(&drain(&mut web)),
            ["DELETED a 11", "ADDED a 12", "BOOKMARK 12"]
        );
    }

    #[test]
    fn a_watcher_that_does_not_read_is_ended_and_the_rest_go_on() {
        let cache = Cache::default();
        let t = Arc::new(by_store_type("configmap", None, None).unwrap());
        let mut slow = cache.watch(spec(""), None).unwrap();
        for i in 0..(WATCH_QUEUE as u64 + 5) {
            cache.put(t.clone(), cm("a", 100 + i, &i.to_string()));
        }
        assert_eq!(cache.stats.shed.load(Ordering::Relaxed), 1);
        assert_eq!(cache.watches(), 0);
        assert_eq!(drain(&mut slow).len(), WATCH_QUEUE);
        assert!(slow.events.try_recv().is_err());
        // The history is bounded too.
        for i in 0..(HISTORY as u64 + 10) {
            cache.put(t.clone(), cm("b", 10_000 + i, "z"));
        }
        assert!(matches!(
            cache.watch(spec(""), Some(100)),
            Err(WatchRefused::Gone { .. })
        ));
    }
}
