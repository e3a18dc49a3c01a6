//! Reading a body the way Go's `encoding/json` reads it into KubeEdge's `BaseMessage`, with
//! Go's errors, so that a twin get's 400 reason matches edgecore's.
//!
//! Go first checks the whole body against the JSON grammar; [`check_syntax`] does the same a byte
//! at a time, stopping at the same byte with the same message and offset, which the reason then
//! shows as Go's `%#v` of the error (`&json.SyntaxError{msg:"invalid character 'x' looking for
//! beginning of value", Offset:1}`). Go then fills the struct: keys match fields ignoring case,
//! `null` leaves a field alone, a value of the wrong type is an error. Go's `%#v` of such a type
//! error contains a process-specific pointer, so the reason carries its `Error()` text instead
//! (`json: cannot unmarshal number into Go struct field BaseMessage.event_id of type string`).
//!
//! Expected results in the tests were produced with Go itself.

use std::fmt;

/// Bytes as text the way Go turns them into a JSON string: every byte that does not start a
/// valid UTF-8 sequence becomes one U+FFFD (Rust's lossy conversion would merge some of them).
pub(crate) fn go_lossy_utf8(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len());
    let mut rest = bytes;
    while !rest.is_empty() {
        match std::str::from_utf8(rest) {
            Ok(text) => {
                out.push_str(text);
                break;
            }
            Err(err) => {
                let (valid, bad) = rest.split_at(err.valid_up_to());
                out.push_str(std::str::from_utf8(valid).unwrap_or_default());
                out.push(char::REPLACEMENT_CHARACTER);
                rest = bad.get(1..).unwrap_or_default();
            }
        }
    }
    out
}

/// Why Go's decoder refused a body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum ReadError {
    /// Not JSON: Go's scanner message and the count of bytes read when it stopped.
    Syntax { msg: String, offset: usize },
    /// JSON, but a value of the wrong type: what was found (`number`, `number 1.5`, `string`,
    /// `bool`, `array`, `object`) and, inside the object, the field and its Go type.
    Type {
        found: String,
        field: Option<(&'static str, &'static str)>,
    },
}

impl fmt::Display for ReadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReadError::Syntax { msg, offset } => {
                write!(
                    f,
                    "&json.SyntaxError{{msg:{}, Offset:{offset}}}",
                    go_quote(msg)
                )
            }
            ReadError::Type {
                found,
                field: Some((name, go_type)),
            } => write!(
                f,
                "json: cannot unmarshal {found} into Go struct field BaseMessage.{name} of type {go_type}"
            ),
            ReadError::Type { found, field: None } => write!(
                f,
                "json: cannot unmarshal {found} into Go value of type dttype.BaseMessage"
            ),
        }
    }
}

/// Reads `event_id` from a get request as Go fills `{"event_id": string, "timestamp": int64}`.
pub(super) fn read_event_id(payload: &[u8]) -> Result<String, ReadError> {
    check_syntax(payload)?;
    let mut cur = Cursor {
        bytes: payload,
        pos: 0,
    };
    cur.skip_space();
    match cur.peek() {
        b'n' => return Ok(String::new()),
        b'{' => cur.pos += 1,
        other => {
            return Err(ReadError::Type {
                found: kind_of(other).to_owned(),
                field: None,
            });
        }
    }
    let mut event_id = String::new();
    while cur.pos < payload.len() {
        cur.skip_space();
        match cur.peek() {
            b'}' => break,
            b',' => {
                cur.pos += 1;
                cur.skip_space();
            }
            _ => {}
        }
        let key = cur.string();
        cur.skip_space();
        cur.pos += 1; // ':'
        cur.skip_space();
        let first = cur.peek();
        if go_field_eq(&key, "event_id") {
            match first {
                b'"' => event_id = cur.string(),
                b'n' => cur.skip_value(),
                other => return Err(type_error(kind_of(other).to_owned(), "event_id", "string")),
            }
        } else if go_field_eq(&key, "timestamp") {
            match first {
                b'n' => cur.skip_value(),
                b'-' | b'0'..=b'9' => {
                    let literal = cur.scalar();
                    if literal.parse::<i64>().is_err() {
                        let found = format!("number {literal}");
                        return Err(type_error(found, "timestamp", "int64"));
                    }
                }
                other => return Err(type_error(kind_of(other).to_owned(), "timestamp", "int64")),
            }
        } else {
            cur.skip_value();
        }
    }
    Ok(event_id)
}

fn type_error(found: String, name: &'static str, go_type: &'static str) -> ReadError {
    ReadError::Type {
        found,
        field: Some((name, go_type)),
    }
}

/// Go's name for the kind of value starting with `first`.
fn kind_of(first: u8) -> &'static str {
    match first {
        b'"' => "string",
        b't' | b'f' => "bool",
        b'[' => "array",
        b'{' => "object",
        _ => "number",
    }
}

/// Go matches JSON keys to fields ignoring case, with its simple case folding: besides ASCII,
/// `ſ` (U+017F) folds to `S` and the Kelvin sign (U+212A) to `K`.
fn go_field_eq(key: &str, field: &str) -> bool {
    let fold = |c: char| match c {
        '\u{17f}' => 'S',
        '\u{212a}' => 'K',
        c => c.to_ascii_uppercase(),
    };
    key.chars().map(fold).eq(field.chars().map(fold))
}

/// A reader over a body that already passed [`check_syntax`], so it needs no error handling
/// of its own (it still never reads out of bounds).
struct Cursor<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    fn peek(&self) -> u8 {
        self.bytes.get(self.pos).copied().unwrap_or(0)
    }

    fn skip_space(&mut self) {
        while is_space(self.peek()) {
            self.pos += 1;
        }
    }

    /// A number or literal: everything up to the next delimiter.
    fn scalar(&mut self) -> &'a str {
        let start = self.pos;
        while self.pos < self.bytes.len()
            && !matches!(
                self.peek(),
                b',' | b'}' | b']' | b' ' | b'\t' | b'\r' | b'\n'
            )
        {
            self.pos += 1;
        }
        // Scalars are ASCII (the syntax check saw to that).
        std::str::from_utf8(&self.bytes[start..self.pos]).unwrap_or_default()
    }

    fn skip_string(&mut self) {
        self.pos += 1;
        while self.pos < self.bytes.len() {
            match self.peek() {
                b'\\' => self.pos += 2,
                b'"' => {
                    self.pos += 1;
                    return;
                }
                _ => self.pos += 1,
            }
        }
    }

    fn skip_value(&mut self) {
        match self.peek() {
            b'"' => self.skip_string(),
            b'{' | b'[' => {
                let mut depth = 0usize;
                while self.pos < self.bytes.len() {
                    match self.peek() {
                        b'"' => {
                            self.skip_string();
                            continue;
                        }
                        b'{' | b'[' => depth += 1,
                        b'}' | b']' => {
                            depth = depth.saturating_sub(1);
                            if depth == 0 {
                                self.pos += 1;
                                return;
                            }
                        }
                        _ => {}
                    }
                    self.pos += 1;
                }
            }
            _ => {
                self.scalar();
            }
        }
    }

    /// Decodes the string at the cursor as Go does: escapes resolved, a `\u` surrogate that is
    /// not half of a valid pair becomes U+FFFD, invalid UTF-8 bytes become U+FFFD each.
    fn string(&mut self) -> String {
        let mut out = String::new();
        self.pos += 1;
        let mut run = self.pos;
        while self.pos < self.bytes.len() {
            let c = self.peek();
            if c != b'"' && c != b'\\' {
                self.pos += 1;
                continue;
            }
            out.push_str(&go_lossy_utf8(&self.bytes[run..self.pos]));
            if c == b'"' {
                self.pos += 1;
                return out;
            }
            let escape = self.bytes.get(self.pos + 1).copied().unwrap_or(0);
            self.pos += 2;
            match escape {
                b'b' => out.push('\u{8}'),
                b'f' => out.push('\u{c}'),
                b'n' => out.push('\n'),
                b'r' => out.push('\r'),
                b't' => out.push('\t'),
                b'u' => out.push(self.unicode_escape()),
                other => out.push(char::from(other)), // `"`, `\`, `/`
            }
            run = self.pos;
        }
        out
    }

    /// The char of a `\uXXXX` escape whose `\u` was just read, joining a surrogate pair.
    fn unicode_escape(&mut self) -> char {
        let first = self.hex4(self.pos).unwrap_or(0xfffd);
        self.pos += 4;
        if (0xd800..0xdc00).contains(&first)
            && self.bytes.get(self.pos..self.pos + 2) == Some(b"\\u")
            && let Some(second) = self.hex4(self.pos + 2)
            && (0xdc00..0xe000).contains(&second)
        {
            self.pos += 6;
            let joined = 0x10000 + ((first - 0xd800) << 10) + (second - 0xdc00);
            return char::from_u32(joined).unwrap_or(char::REPLACEMENT_CHARACTER);
        }
        // Lone surrogates are not chars: Go substitutes U+FFFD, like `from_u32` failing here.
        char::from_u32(first).unwrap_or(char::REPLACEMENT_CHARACTER)
    }

    fn hex4(&self, at: usize) -> Option<u32> {
        let digits = std::str::from_utf8(self.bytes.get(at..at + 4)?).ok()?;
        u32::from_str_radix(digits, 16).ok()
    }
}

/// JSON whitespace, as Go's scanner defines it.
fn is_space(c: u8) -> bool {
    matches!(c, b' ' | b'\t' | b'\r' | b'\n')
}

/// Go's limit on nested arrays and objects.
const MAX_DEPTH: usize = 10_000;

/// What the scanner expects next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Expect {
    Value,
    /// Right after `[`.
    ValueOrClose,
    /// Right after `{`.
    KeyOrClose,
    /// After `,` in an object.
    Key,
    /// A value (or key) just ended.
    AfterValue,
    /// The top-level value ended: only whitespace may follow.
    Done,
    InString,
    StringEscape,
    /// Inside `\uXXXX`, with this many hex digits read.
    UnicodeEscape(u8),
    Minus,
    /// `0`, or the end of an integer part.
    Zero,
    Integer,
    Dot,
    Fraction,
    Exponent,
    ExponentSign,
    ExponentDigits,
    /// Inside `true`/`false`/`null`, at this index of the word.
    Literal(&'static str, usize),
}

/// What an open container expects after its current value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Open {
    /// An object, after a key: `:`.
    ObjectKey,
    /// An object, after a member's value: `,` or `}`.
    ObjectValue,
    /// An array: `,` or `]`.
    Array,
}

/// Go's JSON syntax check, a byte at a time, with its error texts.
struct Scanner {
    expect: Expect,
    open: Vec<Open>,
}

impl Scanner {
    /// True once a complete top-level value has been read.
    fn ended(&self) -> bool {
        self.expect == Expect::Done || (self.expect == Expect::AfterValue && self.open.is_empty())
    }

    fn push(&mut self, open: Open) -> Result<(), String> {
        if self.open.len() >= MAX_DEPTH {
            return Err("exceeded max depth".to_owned());
        }
        self.open.push(open);
        Ok(())
    }

    /// Takes one byte; on error returns Go's context text ("looking for beginning of value").
    fn step(&mut self, c: u8) -> Result<(), String> {
        use Expect::*;
        loop {
            // Arms that `continue` hand the same byte to the state they switched to.
            match self.expect {
                Value => {
                    self.expect = match c {
                        _ if is_space(c) => Value,
                        b'{' => {
                            self.push(Open::ObjectKey)?;
                            KeyOrClose
                        }
                        b'[' => {
                            self.push(Open::Array)?;
                            ValueOrClose
                        }
                        b'"' => InString,
                        b'-' => Minus,
                        b'0' => Zero,
                        b'1'..=b'9' => Integer,
                        b't' => Literal("true", 1),
                        b'f' => Literal("false", 1),
                        b'n' => Literal("null", 1),
                        _ => return Err("looking for beginning of value".to_owned()),
                    };
                }
                ValueOrClose => {
                    if !is_space(c) {
                        self.expect = if c == b']' { AfterValue } else { Value };
                        continue;
                    }
                }
                KeyOrClose => {
                    if !is_space(c) {
                        if c == b'}' {
                            // An empty object ends like one after a member's value.
                            if let Some(top) = self.open.last_mut() {
                                *top = Open::ObjectValue;
                            }
                            self.expect = AfterValue;
                        } else {
                            self.expect = Key;
                        }
                        continue;
                    }
                }
                Key => match c {
                    _ if is_space(c) => {}
                    b'"' => self.expect = InString,
                    _ => return Err("looking for beginning of object key string".to_owned()),
                },
                AfterValue => {
                    let Some(top) = self.open.last_mut() else {
                        self.expect = Done;
                        continue;
                    };
                    match (*top, c) {
                        _ if is_space(c) => {}
                        (Open::ObjectKey, b':') => {
                            *top = Open::ObjectValue;
                            self.expect = Value;
                        }
                        (Open::ObjectKey, _) => return Err("after object key".to_owned()),
                        (Open::ObjectValue, b',') => {
                            *top = Open::ObjectKey;
                            self.expect = Key;
                        }
                        (Open::ObjectValue, b'}') | (Open::Array, b']') => {
                            self.open.pop();
                        }
                        (Open::ObjectValue, _) => {
                            return Err("after object key:value pair".to_owned());
                        }
                        (Open::Array, b',') => self.expect = Value,
                        (Open::Array, _) => return Err("after array element".to_owned()),
                    }
                }
                Done => {
                    if !is_space(c) {
                        return Err("after top-level value".to_owned());
                    }
                }
                InString => match c {
                    b'"' => self.expect = AfterValue,
                    b'\\' => self.expect = StringEscape,
                    0..=0x1f => return Err("in string literal".to_owned()),
                    _ => {}
                },
                StringEscape => match c {
                    b'b' | b'f' | b'n' | b'r' | b't' | b'\\' | b'/' | b'"' => {
                        self.expect = InString;
                    }
                    b'u' => self.expect = UnicodeEscape(0),
                    _ => return Err("in string escape code".to_owned()),
                },
                UnicodeEscape(read) => {
                    if !c.is_ascii_hexdigit() {
                        return Err("in \\u hexadecimal character escape".to_owned());
                    }
                    self.expect = if read == 3 {
                        InString
                    } else {
                        UnicodeEscape(read + 1)
                    };
                }
                Minus => match c {
                    b'0' => self.expect = Zero,
                    b'1'..=b'9' => self.expect = Integer,
                    _ => return Err("in numeric literal".to_owned()),
                },
                Integer => {
                    if !c.is_ascii_digit() {
                        self.expect = Zero;
                        continue;
                    }
                }
                Zero => match c {
                    b'.' => self.expect = Dot,
                    b'e' | b'E' => self.expect = Exponent,
                    _ => {
                        self.expect = AfterValue;
                        continue;
                    }
                },
                Dot => {
                    if !c.is_ascii_digit() {
                        return Err("after decimal point in numeric literal".to_owned());
                    }
                    self.expect = Fraction;
                }
                Fraction => match c {
                    b'0'..=b'9' => {}
                    b'e' | b'E' => self.expect = Exponent,
                    _ => {
                        self.expect = AfterValue;
                        continue;
                    }
                },
                Exponent => {
                    self.expect = ExponentSign;
                    if c != b'+' && c != b'-' {
                        continue;
                    }
                }
                ExponentSign => {
                    if !c.is_ascii_digit() {
                        return Err("in exponent of numeric literal".to_owned());
                    }
                    self.expect = ExponentDigits;
                }
                ExponentDigits => {
                    if !c.is_ascii_digit() {
                        self.expect = AfterValue;
                        continue;
                    }
                }
                Literal(word, at) => {
                    let want = word.as_bytes()[at];
                    if c != want {
                        return Err(format!(
                            "in literal {word} (expecting {})",
                            quote_char(want)
                        ));
                    }
                    self.expect = if at + 1 == word.len() {
                        AfterValue
                    } else {
                        Literal(word, at + 1)
                    };
                }
            }
            return Ok(());
        }
    }
}

/// Go's validity check of a whole body (done before it decodes anything). The offset is the
/// number of bytes read including the bad one; at the end of input Go feeds a space to finish
/// a pending number or literal, so a truncated `tru` is "invalid character ' ' in literal true".
fn check_syntax(payload: &[u8]) -> Result<(), ReadError> {
    let mut scanner = Scanner {
        expect: Expect::Value,
        open: Vec::new(),
    };
    let invalid = |c: u8, context: String, offset: usize| ReadError::Syntax {
        msg: format!("invalid character {} {context}", quote_char(c)),
        offset,
    };
    for (i, &c) in payload.iter().enumerate() {
        scanner
            .step(c)
            .map_err(|context| invalid(c, context, i + 1))?;
    }
    if scanner.ended() {
        return Ok(());
    }
    scanner
        .step(b' ')
        .map_err(|context| invalid(b' ', context, payload.len()))?;
    if scanner.ended() {
        return Ok(());
    }
    Err(ReadError::Syntax {
        msg: "unexpected end of JSON input".to_owned(),
        offset: payload.len(),
    })
}

/// How Go's scanner names a byte: the byte taken as the char U+0000–U+00FF, quoted in `'…'`.
fn quote_char(c: u8) -> String {
    match c {
        b'\'' => r"'\''".to_owned(),
        b'"' => r#"'"'"#.to_owned(),
        _ => format!("'{}'", go_escape(char::from(c), '\'')),
    }
}

/// Go's `%#v` of a string: double-quoted with Go's escapes.
fn go_quote(text: &str) -> String {
    let mut out = String::from("\"");
    for c in text.chars() {
        out.push_str(&go_escape(c, '"'));
    }
    out.push('"');
    out
}

/// One char as Go's `strconv.Quote` writes it inside `quote` marks.
fn go_escape(c: char, quote: char) -> String {
    match c {
        '\\' => r"\\".to_owned(),
        c if c == quote => format!("\\{c}"),
        c if go_printable(c) => c.to_string(),
        '\u{7}' => r"\a".to_owned(),
        '\u{8}' => r"\b".to_owned(),
        '\u{c}' => r"\f".to_owned(),
        '\n' => r"\n".to_owned(),
        '\r' => r"\r".to_owned(),
        '\t' => r"\t".to_owned(),
        '\u{b}' => r"\v".to_owned(),
        c if c < ' ' || c == '\u{7f}' => format!("\\x{:02x}", u32::from(c)),
        c if u32::from(c) < 0x10000 => format!("\\u{:04x}", u32::from(c)),
        c => format!("\\U{:08x}", u32::from(c)),
    }
}

/// Go's `unicode.IsPrint` for the chars that can reach it here (ASCII and Latin-1, from
/// [`quote_char`]): printable ASCII, and U+00A1–U+00FF except the soft hyphen U+00AD. Higher
/// chars never occur in these messages.
fn go_printable(c: char) -> bool {
    match u32::from(c) {
        0x20..=0x7e => true,
        0xa1..=0xff => c != '\u{ad}',
        0x00..=0xa0 => false,
        _ => true,
    }
}

#[cfg(test)]
mod tests;
