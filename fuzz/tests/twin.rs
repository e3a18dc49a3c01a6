//! Twin payloads: sequences of devicetwin requests with arbitrary bodies, run through the
//! pure handlers the module calls, in the module's order (cap checks, `prepare`, a hook's
//! replacement, `commit`), on a cache of a few devices.
//!
//! After every request:
//! - nothing panicked;
//! - the cache is what SQLite holds once the request's rows are written: `storage::apply`
//!   accepts them, and `storage::load_all` (what a restart reads) equals the cache — so a
//!   request changes the cache exactly by the rows it writes;
//! - a refused request (a result with an error `code`, or a cap) writes nothing and leaves
//!   the cache as it was;
//! - every MQTT payload and cloud content is JSON, every result topic is a topic.

use std::collections::BTreeMap;

use bolero::{TypeGenerator, check};
use rusqlite::Connection;
use serde_json::{Map, Value, json};
use wedge_devicetwin::device::Devices;
use wedge_devicetwin::effects::{CloudContent, Effects};
use wedge_devicetwin::hooks::HookVerdict;
use wedge_devicetwin::limits::Limits;
use wedge_devicetwin::topics::valid_device_id;
use wedge_devicetwin::{attributes, cloud_sync, membership, state, storage, twin_get, twin_update};
use wedge_eventbus::topics::valid_topic;
use wedge_fuzz::{CI_BUDGET, Few, Json, SHRINK_TIME, Word};

const NODE: &str = "edge-1";
const NOW: i64 = 1_700_000_000_000;
const MAX_PAYLOAD: usize = 4096;

/// Keys of devicetwin's wire JSON.
const KEYS: &[&str] = &[
    "event_id",
    "timestamp",
    "twin",
    "expected",
    "actual",
    "value",
    "metadata",
    "type",
    "optional",
    "expected_version",
    "actual_version",
    "cloud",
    "edge",
    "state",
    "attributes",
    "added_devices",
    "removed_devices",
    "devices",
    "id",
    "name",
    "description",
    "last_online",
];

/// Device ids, twin keys, types, values and states.
const WORDS: &[&str] = &[
    "default/thermo-1",
    "legacy-1",
    "default/valve-2",
    "temperature",
    "switch",
    "mode",
    "int",
    "string",
    "float",
    "boolean",
    "deleted",
    "double",
    "1",
    "-7",
    "3.5",
    "true",
    "on",
    "",
    "online",
    "offline",
    "ok",
    "unknown",
    "unhealthy",
    "ONLINE",
    "a/b/c",
    "x+y",
    "#",
];

/// Twin and attribute names: the seed's, new ones, and ones KubeEdge refuses.
const NAMES: &[&str] = &[
    "temperature",
    "switch",
    "mode",
    "unit",
    "humidity",
    "speed",
    "new-1",
    "bad name!",
];

/// Twin values: fit some types, not others.
const VALUES: &[&str] = &["1", "-7", "3.5", "true", "false", "on", "", "20", "x y"];

/// Twin and attribute types.
const TYPES: &[&str] = &[
    "int", "string", "float", "boolean", "deleted", "double", "bytes", "",
];

/// Device ids: the seed's, a new one of each generation, and odd ones.
const IDS: &[&str] = &[
    "default/thermo-1",
    "legacy-1",
    "default/valve-2",
    "new-3",
    "a/b/c",
    "",
];

/// States a mapper reports.
const STATES: &[&str] = &[
    "online",
    "offline",
    "ok",
    "unknown",
    "unhealthy",
    "ONLINE",
    "",
    "broken",
];

/// The cache every sequence starts from: two devices (one namespaced, one legacy) with twins
/// of several types and attributes, added the way the cloud adds them.
const SEED: &str = r#"{"event_id":"seed","timestamp":1,"added_devices":[
 {"id":"default/thermo-1","name":"thermo-1","state":"online","attributes":{"unit":{"value":"celsius","optional":false,"metadata":{"type":"string"}}},
  "twin":{"temperature":{"expected":{"value":"20","metadata":{"timestamp":1}},"actual":{"value":"19","metadata":{"timestamp":1}},"optional":false,"metadata":{"type":"int"},"expected_version":{"cloud":1,"edge":0},"actual_version":{"cloud":0,"edge":1}},
          "switch":{"expected":{"value":"on","metadata":{"timestamp":1}},"optional":true,"metadata":{"type":"string"},"expected_version":{"cloud":1,"edge":0}}}},
 {"id":"legacy-1","name":"legacy-1","twin":{"mode":{"actual":{"value":"true","metadata":{"timestamp":1}},"metadata":{"type":"boolean"},"actual_version":{"cloud":0,"edge":3}}}}
]}"#;

/// Small caps, so that sequences reach them.
const LIMITS: Limits = Limits {
    max_twins_per_device: 6,
    max_devices: 5,
};

/// One side (`expected` / `actual`) of a twin.
#[derive(Debug, Clone, TypeGenerator)]
struct SideGen {
    value: Option<Word>,
    timestamp: Option<i8>,
}

/// A twin on the wire, every field optional.
#[derive(Debug, Clone, TypeGenerator)]
struct TwinGen {
    expected: Option<SideGen>,
    actual: Option<SideGen>,
    optional: Option<bool>,
    kind: Option<Word>,
    expected_version: Option<(i8, i8)>,
    actual_version: Option<(i8, i8)>,
}

/// An attribute on the wire.
#[derive(Debug, Clone, TypeGenerator)]
struct AttrGen {
    value: Option<Word>,
    optional: Option<bool>,
    kind: Option<Word>,
}

/// A device in a membership message.
#[derive(Debug, Clone, TypeGenerator)]
struct DeviceGen {
    id: Word,
    name: Option<Word>,
    state: Option<Word>,
    attributes: Option<Few<(Word, Option<AttrGen>)>>,
    twin: Option<Few<(Word, Option<TwinGen>)>>,
}

/// A request body: one of the shapes devicetwin reads (any of them may reach any handler),
/// or any JSON, or bytes; then possibly damaged.
#[derive(Debug, Clone, TypeGenerator)]
enum Body {
    Twins {
        event_id: Option<Word>,
        twins: Option<Few<(Word, Option<TwinGen>)>>,
    },
    Twins2 {
        twins: Few<(Word, Option<TwinGen>)>,
    },
    Membership {
        added: Option<Few<DeviceGen>>,
        removed: Option<Few<DeviceGen>>,
    },
    Detail {
        devices: Option<Few<DeviceGen>>,
    },
    State {
        event_id: Option<Word>,
        state: Option<Word>,
        attributes: Option<Few<(Word, Option<AttrGen>)>>,
    },
    Json(Json),
    Raw(Vec<u8>),
}

/// What may be done to a body's bytes.
#[derive(Debug, Clone, TypeGenerator)]
enum Damage {
    None,
    None2,
    None3,
    None4,
    None5,
    /// One key set to any JSON value.
    Mistyped(Word, Json),
    Byte(u16, u8),
    Cut(u16),
}

fn words(list: &[(Word, Option<impl ToJson>)]) -> Value {
    let mut map = Map::new();
    for (k, v) in list.iter().take(3) {
        map.insert(
            k.text(NAMES),
            v.as_ref().map_or(Value::Null, ToJson::to_json),
        );
    }
    Value::Object(map)
}

trait ToJson {
    fn to_json(&self) -> Value;
}

impl ToJson for SideGen {
    fn to_json(&self) -> Value {
        let mut m = Map::new();
        if let Some(v) = &self.value {
            m.insert("value".into(), Value::String(v.text(VALUES)));
        }
        if let Some(t) = self.timestamp {
            m.insert("metadata".into(), json!({ "timestamp": i64::from(t) }));
        }
        Value::Object(m)
    }
}

impl ToJson for TwinGen {
    fn to_json(&self) -> Value {
        let mut m = Map::new();
        if let Some(s) = &self.expected {
            m.insert("expected".into(), s.to_json());
        }
        if let Some(s) = &self.actual {
            m.insert("actual".into(), s.to_json());
        }
        if let Some(o) = self.optional {
            m.insert("optional".into(), Value::Bool(o));
        }
        if let Some(k) = &self.kind {
            m.insert("metadata".into(), json!({ "type": k.text(TYPES) }));
        }
        for (key, v) in [
            ("expected_version", self.expected_version),
            ("actual_version", self.actual_version),
        ] {
            if let Some((cloud, edge)) = v {
                m.insert(
                    key.into(),
                    json!({ "cloud": i64::from(cloud), "edge": i64::from(edge) }),
                );
            }
        }
        Value::Object(m)
    }
}

impl ToJson for AttrGen {
    fn to_json(&self) -> Value {
        let mut m = Map::new();
        if let Some(v) = &self.value {
            m.insert("value".into(), Value::String(v.text(VALUES)));
        }
        if let Some(o) = self.optional {
            m.insert("optional".into(), Value::Bool(o));
        }
        if let Some(k) = &self.kind {
            m.insert("metadata".into(), json!({ "type": k.text(TYPES) }));
        }
        Value::Object(m)
    }
}

impl ToJson for DeviceGen {
    fn to_json(&self) -> Value {
        let mut m = Map::new();
        m.insert("id".into(), Value::String(self.id.text(IDS)));
        if let Some(v) = &self.name {
            m.insert("name".into(), Value::String(v.text(WORDS)));
        }
        if let Some(v) = &self.state {
            m.insert("state".into(), Value::String(v.text(STATES)));
        }
        if let Some(a) = &self.attributes {
            m.insert("attributes".into(), words(a));
        }
        if let Some(t) = &self.twin {
            m.insert("twin".into(), words(t));
        }
        Value::Object(m)
    }
}

fn devices(list: &Option<Few<DeviceGen>>) -> Value {
    list.as_ref().map_or(Value::Null, |l| {
        Value::Array(l.iter().take(4).map(ToJson::to_json).collect())
    })
}

impl Body {
    fn bytes(&self, damage: &Damage) -> Vec<u8> {
        let value = match self {
            Body::Twins { event_id, twins } => {
                let mut m = Map::new();
                if let Some(e) = event_id {
                    m.insert("event_id".into(), Value::String(e.text(WORDS)));
                }
                m.insert("timestamp".into(), Value::from(NOW));
                if let Some(t) = twins {
                    m.insert("twin".into(), words(t));
                }
                Value::Object(m)
            }
            Body::Twins2 { twins } => json!({ "event_id": "e", "twin": words(twins) }),
            Body::Membership { added, removed } => json!({
                "event_id": "m", "timestamp": 1,
                "added_devices": devices(added), "removed_devices": devices(removed),
            }),
            Body::Detail { devices: d } => json!({ "event_id": "d", "devices": devices(d) }),
            Body::State {
                event_id,
                state,
                attributes,
            } => {
                let mut m = Map::new();
                if let Some(e) = event_id {
                    m.insert("event_id".into(), Value::String(e.text(WORDS)));
                }
                if let Some(s) = state {
                    m.insert("state".into(), Value::String(s.text(STATES)));
                }
                if let Some(a) = attributes {
                    m.insert("attributes".into(), words(a));
                }
                Value::Object(m)
            }
            Body::Json(j) => j.value(KEYS, WORDS),
            Body::Raw(bytes) => return bytes.clone(),
        };
        let value = match (damage, value) {
            (Damage::Mistyped(key, j), Value::Object(mut m)) => {
                m.insert(key.text(KEYS), j.value(KEYS, WORDS));
                Value::Object(m)
            }
            (_, v) => v,
        };
        let mut bytes = serde_json::to_vec(&value).unwrap_or_default();
        match damage {
            Damage::Byte(at, b) if !bytes.is_empty() => {
                let i = usize::from(*at) % bytes.len();
                bytes[i] = *b;
            }
            Damage::Cut(at) => bytes.truncate(usize::from(*at) % (bytes.len() + 1)),
            _ => {}
        }
        bytes
    }
}

/// Which device a request names: one of the cache's (by index) or any id.
#[derive(Debug, Clone, TypeGenerator)]
enum DeviceSel {
    Known(u8),
    Known2(u8),
    Any(Word),
}

/// Twins of an update or sync.
type Twins = Few<(Word, Option<TwinGen>)>;

/// One request to devicetwin, with a body of the shape it reads (damaged at times), or with
/// any body.
#[derive(Debug, Clone, TypeGenerator)]
enum Op {
    /// A mapper's twin update; a hook may replace the n-th proposed value.
    TwinUpdate(DeviceSel, Option<Word>, Twins, Damage, Option<(u8, Word)>),
    TwinUpdate2(DeviceSel, Twins, Damage),
    CloudSync(DeviceSel, Twins, Damage),
    TwinGet(DeviceSel, Option<Word>, Damage),
    State(DeviceSel, Option<Word>, Damage),
    Attributes(DeviceSel, Few<(Word, Option<AttrGen>)>, Damage),
    MembershipUpdate(Option<Few<DeviceGen>>, Option<Few<DeviceGen>>, Damage),
    MembershipDetail(Option<Few<DeviceGen>>, Damage),
    MembershipGet(Option<Word>, Damage),
    /// The n-th request kind above with a body of any shape.
    AnyBody(u8, DeviceSel, Body, Damage),
}

/// The request kinds, for [`Op::AnyBody`].
#[derive(Clone, Copy)]
enum Kind {
    TwinUpdate,
    CloudSync,
    TwinGet,
    State,
    Attributes,
    MembershipUpdate,
    MembershipDetail,
    MembershipGet,
}

const KINDS: [Kind; 8] = [
    Kind::TwinUpdate,
    Kind::CloudSync,
    Kind::TwinGet,
    Kind::State,
    Kind::Attributes,
    Kind::MembershipUpdate,
    Kind::MembershipDetail,
    Kind::MembershipGet,
];

/// What an [`Op`] asks: a kind of request, its device (none for node requests), its body,
/// and a hook's replacement of the n-th proposed value.
struct Parts<'a> {
    kind: Kind,
    device: Option<&'a DeviceSel>,
    payload: Vec<u8>,
    hook: Option<&'a (u8, Word)>,
}

impl Op {
    fn parts(&self) -> Parts<'_> {
        let parts = |kind, device, payload, hook| Parts {
            kind,
            device,
            payload,
            hook,
        };
        let twins = |event_id: &Option<Word>, twins: &Twins, damage| {
            Body::Twins {
                event_id: event_id.clone(),
                twins: Some(twins.clone()),
            }
            .bytes(damage)
        };
        let state = |state: &Option<Word>, attributes, damage| {
            Body::State {
                event_id: Some(Word::Known(0)),
                state: state.clone(),
                attributes,
            }
            .bytes(damage)
        };
        match self {
            Op::TwinUpdate(sel, event_id, t, damage, hook) => parts(
                Kind::TwinUpdate,
                Some(sel),
                twins(event_id, t, damage),
                hook.as_ref(),
            ),
            Op::TwinUpdate2(sel, t, damage) => {
                parts(Kind::TwinUpdate, Some(sel), twins(&None, t, damage), None)
            }
            Op::CloudSync(sel, t, damage) => {
                parts(Kind::CloudSync, Some(sel), twins(&None, t, damage), None)
            }
            Op::TwinGet(sel, s, damage) => {
                parts(Kind::TwinGet, Some(sel), state(s, None, damage), None)
            }
            Op::State(sel, s, damage) => {
                parts(Kind::State, Some(sel), state(s, None, damage), None)
            }
            Op::Attributes(sel, a, damage) => parts(
                Kind::Attributes,
                Some(sel),
                state(&None, Some(a.clone()), damage),
                None,
            ),
            Op::MembershipUpdate(added, removed, damage) => parts(
                Kind::MembershipUpdate,
                None,
                Body::Membership {
                    added: added.clone(),
                    removed: removed.clone(),
                }
                .bytes(damage),
                None,
            ),
            Op::MembershipDetail(devices, damage) => parts(
                Kind::MembershipDetail,
                None,
                Body::Detail {
                    devices: devices.clone(),
                }
                .bytes(damage),
                None,
            ),
            Op::MembershipGet(s, damage) => {
                parts(Kind::MembershipGet, None, state(s, None, damage), None)
            }
            Op::AnyBody(kind, sel, body, damage) => parts(
                KINDS[usize::from(*kind) % KINDS.len()],
                Some(sel),
                body.bytes(damage),
                None,
            ),
        }
    }
}

fn fresh_id() -> String {
    "00000000-0000-4000-8000-000000000000".to_owned()
}

fn device_id(devices: &Devices, sel: &DeviceSel) -> String {
    match sel {
        DeviceSel::Known(i) | DeviceSel::Known2(i) => {
            let mut ids: Vec<&String> = devices.keys().collect();
            ids.sort();
            match ids.len() {
                0 => "default/thermo-1".to_owned(),
                n => ids[usize::from(*i) % n].clone(),
            }
        }
        DeviceSel::Any(w) => w.text(IDS),
    }
}

/// Runs one request as `DeviceTwin::handle` does; `None` when a cap refused it, or when
/// `classify` would never hand the module that device id (every id reaches the handlers
/// through `topics::valid_device_id`).
fn run(devices: &mut Devices, op: &Op) -> Option<Effects> {
    let mut ids = fresh_id;
    let Parts {
        kind,
        device: sel,
        payload,
        hook,
    } = op.parts();
    let device = match sel {
        Some(sel) => device_id(devices, sel),
        None => NODE.to_owned(),
    };
    if !valid_device_id(&device) {
        return None;
    }
    let now = NOW;
    Some(match kind {
        Kind::TwinUpdate => {
            let mut request =
                match twin_update::prepare(devices, &device, &payload, MAX_PAYLOAD, now) {
                    Ok(request) => request,
                    Err(answer) => return Some(answer),
                };
            LIMITS
                .check_twins(devices, &device, request.twin.keys())
                .ok()?;
            if let Some((n, value)) = hook {
                let changes = twin_update::proposals(devices, &device, &request);
                if !changes.is_empty() {
                    let change = &changes[usize::from(*n) % changes.len()];
                    let verdict = HookVerdict::Replace(value.text(VALUES));
                    if let Err(answer) = twin_update::reviewed(&mut request, change, verdict, now) {
                        return Some(answer);
                    }
                }
            }
            twin_update::commit(devices, &device, &request, now, &mut ids)
        }
        Kind::CloudSync => {
            LIMITS.check_sync(devices, &device, &payload).ok()?;
            cloud_sync::handle(devices, &device, &payload, now, &mut ids)
        }
        Kind::TwinGet => twin_get::get(devices, &device, &payload, now),
        Kind::State => state::update(devices, &device, &payload, now, &mut ids),
        Kind::Attributes => attributes::update(devices, &device, &payload, now, &mut ids),
        Kind::MembershipUpdate => {
            LIMITS.check_membership(devices, &payload).ok()?;
            membership::update(devices, NODE, &payload, now, &mut ids)
        }
        Kind::MembershipDetail => {
            LIMITS.check_membership(devices, &payload).ok()?;
            membership::detail_result(devices, NODE, &payload, now, &mut ids)
        }
        Kind::MembershipGet => membership::get(devices, NODE, &payload, now),
    })
}

/// True when `effects` answers with an error result (`{"code":…}` on a result topic).
fn refused(effects: &Effects) -> bool {
    effects.publish.iter().any(|p| {
        p.topic.ends_with("/result")
            && serde_json::from_str::<Value>(&p.payload)
                .ok()
                .and_then(|v| v.get("code").cloned())
                .is_some()
    })
}

/// A fresh in-memory store holding the seed devices, and the cache loaded from it.
fn seeded() -> (Connection, Devices) {
    let conn = Connection::open_in_memory().unwrap();
    for sql in storage::MIGRATIONS {
        conn.execute_batch(sql).unwrap();
    }
    let mut devices = Devices::new();
    let effects = membership::update(&mut devices, NODE, SEED.as_bytes(), NOW, &mut fresh_id);
    assert_eq!(devices.len(), 2, "seed applied: {effects:?}");
    storage::apply(&conn, &effects.rows).unwrap();
    let loaded = storage::load_all(&conn).unwrap();
    assert_eq!(normalised(&loaded), normalised(&devices), "seed round trip");
    (conn, loaded)
}

/// The cache as SQLite can hold it: an absent side value is stored as `""` (edgecore's
/// convention, documented in `storage.rs`).
fn normalised(devices: &Devices) -> BTreeMap<String, String> {
    devices
        .iter()
        .map(|(id, d)| {
            let mut d = d.clone();
            for twin in d.twins.values_mut() {
                for side in [&mut twin.expected, &mut twin.actual].into_iter().flatten() {
                    side.value.get_or_insert_with(String::new);
                }
            }
            (id.clone(), format!("{d:?}"))
        })
        .collect()
}

fn check_sequence(ops: &[Op]) {
    let (conn, mut devices) = seeded();
    for op in ops {
        let before = devices.clone();
        let Some(effects) = run(&mut devices, op) else {
            assert_eq!(
                devices, before,
                "a request refused by a cap changed the cache"
            );
            continue;
        };
        for p in &effects.publish {
            assert!(
                serde_json::from_str::<Value>(&p.payload).is_ok(),
                "MQTT payload is JSON: {}",
                p.payload
            );
            assert!(valid_topic(&p.topic), "result topic {:?}", p.topic);
        }
        for c in &effects.cloud {
            let text = match &c.content {
                CloudContent::Json(t) | CloudContent::Text(t) => t,
            };
            assert!(
                serde_json::from_str::<Value>(text).is_ok(),
                "cloud content is JSON"
            );
        }
        if refused(&effects) {
            assert!(
                effects.rows.is_empty(),
                "a refused request writes rows: {op:?}"
            );
            assert_eq!(
                devices, before,
                "a refused request changed the cache: {op:?}"
            );
        }
        let tx = conn.unchecked_transaction().unwrap();
        storage::apply(&tx, &effects.rows).expect("the store takes the rows");
        tx.commit().unwrap();
        let stored = storage::load_all(&conn).unwrap();
        assert_eq!(
            normalised(&stored),
            normalised(&devices),
            "cache and store differ after {op:?}\nrows {:?}",
            effects.rows
        );
    }
}

/// Sequences of requests with arbitrary bodies on a seeded cache.
#[test]
fn twin_request_sequences() {
    check!()
        // A fixed count: a long vector mostly holds what the generator pads with once its
        // input runs out.
        .with_type::<[Op; 6]>()
        .with_test_time(CI_BUDGET * 2)
        .with_shrink_time(SHRINK_TIME)
        .with_max_len(32 * 1024)
        .for_each(|ops| check_sequence(ops));
}
