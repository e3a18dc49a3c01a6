//! KubeEdge message envelopes (`{"header","route","content"}`) for the envelope and
//! WebSocket frame targets: mostly well-formed, with keys missing, mistyped, added, or bytes
//! damaged, so most inputs reach the code after the parse.

use bolero::TypeGenerator;
use serde_json::{Map, Value};

use crate::{Json, Word};

/// The envelope's keys (and a few of the contents the cloud sends).
pub const KEYS: &[&str] = &[
    "msg_id",
    "parent_msg_id",
    "timestamp",
    "resourceversion",
    "sync",
    "type",
    "source",
    "destination",
    "group",
    "operation",
    "resource",
    "header",
    "route",
    "router",
    "content",
    "Object",
    "Err",
    "ErrStatus",
    "reason",
    "code",
];

/// Words found in envelopes: module, group and operation names, contents.
pub const WORDS: &[&str] = &[
    "edgecontroller",
    "metamanager",
    "twin",
    "resource",
    "meta",
    "insert",
    "update",
    "response",
    "query",
    "default/pod/nginx",
    "OK",
    "ping",
    "ack",
    "",
    "NotFound",
    "\u{3c}\\u003c",
    "a\"b",
];

/// A header or route key of the right type (its kind decides which part is used), or absent.
#[derive(Debug, Clone, TypeGenerator)]
struct Field(Option<(Word, i64, bool)>);

impl Field {
    fn value(&self, want: Want) -> Option<Value> {
        let (word, n, b) = self.0.as_ref()?;
        Some(match want {
            Want::Text => Value::String(word.text(WORDS)),
            Want::Int => Value::from(*n),
            Want::Bool => Value::Bool(*b),
        })
    }
}

#[derive(Clone, Copy)]
enum Want {
    Text,
    Int,
    Bool,
}

/// An envelope whose parts may be missing, mistyped or extra, then possibly damaged.
#[derive(Debug, Clone, TypeGenerator)]
pub struct Envelope {
    header: [Field; 6],
    route: [Field; 5],
    /// `router` (accepted on input) instead of `route`.
    router: bool,
    content: Option<Json>,
    extra: Option<(Word, Json)>,
    /// Pretty-printed (whitespace inside the content is kept as received).
    pretty: bool,
    damage: Damage,
}

#[derive(Debug, Clone, TypeGenerator)]
enum Damage {
    None,
    None2,
    None3,
    None4,
    Byte(u16, u8),
    Cut(u16),
    NoHeader,
    NoRoute,
    /// One key of the header (0–5) or route (6–10) set to any JSON value instead.
    Mistyped(u8, Json),
}

const HEADER: [(&str, Want); 6] = [
    ("msg_id", Want::Text),
    ("parent_msg_id", Want::Text),
    ("timestamp", Want::Int),
    ("resourceversion", Want::Text),
    ("sync", Want::Bool),
    ("type", Want::Text),
];

const ROUTE: [&str; 5] = ["source", "destination", "group", "operation", "resource"];

impl Envelope {
    /// The envelope's bytes.
    pub fn bytes(&self) -> Vec<u8> {
        let mut top = Map::new();
        if let Some((k, v)) = &self.extra {
            top.insert(k.text(KEYS), v.value(KEYS, WORDS));
        }
        if !matches!(self.damage, Damage::NoHeader) {
            let fields = &self.header;
            let mut map = Map::new();
            for ((key, want), field) in HEADER.iter().zip(fields) {
                if let Some(v) = field.value(*want) {
                    map.insert((*key).to_owned(), v);
                }
            }
            if let Damage::Mistyped(i, j) = &self.damage
                && let Some((key, _)) = HEADER.get(usize::from(*i) % 11)
            {
                map.insert((*key).to_owned(), j.value(KEYS, WORDS));
            }
            top.insert("header".into(), Value::Object(map));
        }
        if !matches!(self.damage, Damage::NoRoute) {
            let fields = &self.route;
            let mut map = Map::new();
            for (key, field) in ROUTE.iter().zip(fields) {
                if let Some(v) = field.value(Want::Text) {
                    map.insert((*key).to_owned(), v);
                }
            }
            if let Damage::Mistyped(i, j) = &self.damage
                && let Some(key) = (usize::from(*i) % 11)
                    .checked_sub(6)
                    .and_then(|i| ROUTE.get(i))
            {
                map.insert((*key).to_owned(), j.value(KEYS, WORDS));
            }
            let key = if self.router { "router" } else { "route" };
            top.insert(key.into(), Value::Object(map));
        }
        if let Some(c) = &self.content {
            top.insert("content".into(), c.value(KEYS, WORDS));
        }
        let top = Value::Object(top);
        let mut bytes = if self.pretty {
            serde_json::to_vec_pretty(&top)
        } else {
            serde_json::to_vec(&top)
        }
        .unwrap_or_default();
        match self.damage {
            Damage::None
            | Damage::None2
            | Damage::None3
            | Damage::None4
            | Damage::NoHeader
            | Damage::NoRoute
            | Damage::Mistyped(..) => {}
            Damage::Byte(at, b) => {
                if !bytes.is_empty() {
                    let i = usize::from(at) % bytes.len();
                    bytes[i] = b;
                }
            }
            Damage::Cut(at) => bytes.truncate(usize::from(at) % (bytes.len() + 1)),
        }
        bytes
    }
}
