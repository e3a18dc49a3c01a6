//! Shared parts of Wedge's fuzz targets (`tests/*.rs`, one file per target).
//!
//! Each target is a `bolero` check: under plain `cargo test` it runs as a bounded random test
//! (a few seconds, the CI run); under `cargo bolero test` the same closure is driven
//! coverage-guided by libFuzzer (the long run, see `fuzz/README.md`). What lives here:
//! - [`Json`]: a JSON value generator biased toward the keys and words a target's parser
//!   knows, so random inputs get past the first `{` and reach the code behind it;
//! - [`Payload`]: bytes for a parser — well-formed JSON, JSON with one byte broken, or raw
//!   bytes — because a byte-level fuzzer alone rarely builds valid JSON;
//!
//! bolero prints each run's figures itself (`run time | iterations/s | rng inputs | exit
//! reason`, seen with `-- --nocapture`).

#![warn(missing_docs)]

pub mod envelope;

use std::time::Duration;

use bolero::{Driver, TypeGenerator, ValueGenerator};
use serde_json::{Map, Number, Value};

/// A short list (0 to 3 items). bolero's lists run to 64 items, which spends a random input
/// on a handful of values and pads the rest with defaults; parsers see more shapes when
/// lists are short.
#[derive(Debug, Clone)]
pub struct Few<T>(pub Vec<T>);

impl<T> Default for Few<T> {
    fn default() -> Self {
        Few(Vec::new())
    }
}

impl<T: TypeGenerator> TypeGenerator for Few<T> {
    fn generate<D: Driver>(driver: &mut D) -> Option<Self> {
        bolero::produce::<Vec<T>>()
            .with()
            .len(0usize..=3)
            .generate(driver)
            .map(Few)
    }
}

impl<T> std::ops::Deref for Few<T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        &self.0
    }
}

/// Time each target gets under `cargo test` when nothing else is asked: together about a
/// minute for every target on the 2-core CI machine. `BOLERO_RANDOM_TEST_TIME_MS` (or
/// `BOLERO_RANDOM_ITERATIONS`) overrides it for a longer random run.
pub const CI_BUDGET: Duration = Duration::from_secs(6);

/// How long a failing target may spend shrinking its input before it reports: bolero's own
/// default lets one failure hold the CI run for minutes.
pub const SHRINK_TIME: Duration = Duration::from_secs(10);

/// A string: one of the target's known words (three times in four) or any text.
#[derive(Debug, Clone, TypeGenerator)]
pub enum Word {
    /// The n-th known word (modulo the vocabulary's length).
    Known(u8),
    /// The same, so that known words are drawn more often than arbitrary text.
    Known2(u8),
    /// The same again.
    Known3(u8),
    /// Anything.
    Any(String),
}

impl Word {
    /// The text, with `words` as the vocabulary.
    pub fn text(&self, words: &[&str]) -> String {
        match self {
            Word::Known(i) | Word::Known2(i) | Word::Known3(i) => words
                .get(usize::from(*i) % words.len().max(1))
                .map_or_else(String::new, |w| (*w).to_owned()),
            // Short: long text only eats the generator's input.
            Word::Any(s) => s.chars().take(12).collect(),
        }
    }
}

/// A JSON value whose object keys and strings are mostly words the parser under test knows.
#[derive(Debug, Clone, TypeGenerator)]
pub enum Json {
    /// `null`.
    Null,
    /// `true` / `false`.
    Bool(bool),
    /// A small integer (versions, codes, timestamps near zero).
    Small(i8),
    /// Any integer.
    Int(i64),
    /// Any float (NaN and infinities become `null`, which JSON cannot write).
    Float(f64),
    /// A string.
    Str(Word),
    /// A list.
    Arr(Few<Json>),
    /// An object (a repeated key keeps its last value, as `serde_json::Map` does).
    Obj(Few<(Word, Json)>),
}

impl Json {
    /// The value, with `keys` for object keys and `words` for strings.
    pub fn value(&self, keys: &[&str], words: &[&str]) -> Value {
        match self {
            Json::Null => Value::Null,
            Json::Bool(b) => Value::Bool(*b),
            Json::Small(n) => Value::from(*n),
            Json::Int(n) => Value::from(*n),
            Json::Float(f) => Number::from_f64(*f).map_or(Value::Null, Value::Number),
            Json::Str(w) => Value::String(w.text(words)),
            Json::Arr(items) => Value::Array(items.iter().map(|j| j.value(keys, words)).collect()),
            Json::Obj(fields) => {
                let mut map = Map::new();
                for (k, v) in fields.iter() {
                    map.insert(k.text(keys), v.value(keys, words));
                }
                Value::Object(map)
            }
        }
    }
}

/// The bytes of a payload for a parser.
#[derive(Debug, Clone, TypeGenerator)]
pub enum Payload {
    /// Well-formed JSON.
    Json(Json),
    /// JSON with one byte overwritten at a position (modulo its length): almost valid.
    Broken(Json, u16, u8),
    /// JSON cut short after a number of bytes (modulo its length).
    Truncated(Json, u16),
    /// Anything.
    Raw(Vec<u8>),
}

impl Payload {
    /// The bytes, with `keys` and `words` as the JSON vocabulary.
    pub fn bytes(&self, keys: &[&str], words: &[&str]) -> Vec<u8> {
        match self {
            Payload::Json(j) => json_bytes(j, keys, words),
            Payload::Broken(j, at, byte) => {
                let mut bytes = json_bytes(j, keys, words);
                if !bytes.is_empty() {
                    let i = usize::from(*at) % bytes.len();
                    bytes[i] = *byte;
                }
                bytes
            }
            Payload::Truncated(j, at) => {
                let mut bytes = json_bytes(j, keys, words);
                let keep = usize::from(*at) % (bytes.len() + 1);
                bytes.truncate(keep);
                bytes
            }
            Payload::Raw(bytes) => bytes.clone(),
        }
    }
}

fn json_bytes(j: &Json, keys: &[&str], words: &[&str]) -> Vec<u8> {
    serde_json::to_vec(&j.value(keys, words)).unwrap_or_default()
}
