//! The `labelSelector` and `fieldSelector` query parameters of list and watch requests, parsed
//! and matched the way kube-apiserver does, so that kubectl, client-go informers and edge apps
//! see the same objects from MetaServer as from the cloud.
//!
//! Label selectors follow `k8s.io/apimachinery/pkg/labels` (`Parse`): `k=v`, `k==v`, `k!=v`,
//! `k in (a,b)`, `k notin (a,b)`, `k`, `!k`, `k>1`, `k<1`, comma-separated, with keys checked as
//! qualified names and values as label values. Field selectors follow
//! `k8s.io/apimachinery/pkg/fields` (`ParseSelector`): `f=v`, `f==v`, `f!=v`, comma-separated,
//! with `\` escaping `\`, `,` and `=` in values, and only the fields kube-apiserver lets each
//! resource select on (`pkg/apis/core/v1/conversion.go` and the registries' selectable fields).
//! Both are pure: no I/O, no panics on any input.

use serde_json::Value;

/// Why a selector was refused. Each is a `400 Bad Request` whose message names the bad part,
/// worded as kube-apiserver words it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SelectorError {
    /// The `labelSelector` does not parse or names an invalid key or value.
    #[error("{0}")]
    Label(String),
    /// The `fieldSelector` does not parse (a term without operator, a bad escape).
    #[error("{0}")]
    Field(String),
    /// The `fieldSelector` names a field the resource cannot be selected on.
    #[error("{} is not a known field selector: only {}", quote(.field), quote_list(.supported))]
    UnsupportedField {
        /// The field as the request spelled it.
        field: String,
        /// The fields the resource supports, in kube-apiserver's order.
        supported: Vec<&'static str>,
    },
}

/// Go's `%q` for the plain strings selectors carry.
fn quote(text: &str) -> String {
    format!("{text:?}")
}

/// `"a", "b", "c"`.
fn quote_list(items: &[&'static str]) -> String {
    items
        .iter()
        .map(|item| quote(item))
        .collect::<Vec<_>>()
        .join(", ")
}

// ------------------------------------------------------------------------------------------
// Label selectors
// ------------------------------------------------------------------------------------------

/// A parsed `labelSelector` query parameter: the requirements an object's labels must all meet.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LabelSelector {
    requirements: Vec<Requirement>,
}

/// One `key op values` requirement of a label selector.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Requirement {
    key: String,
    op: Op,
    /// Sorted and without duplicates, as apimachinery's string set lists them.
    values: Vec<String>,
}

/// The operators of a label requirement.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    In,
    NotIn,
    Equals,
    DoubleEquals,
    NotEquals,
    Exists,
    DoesNotExist,
    GreaterThan,
    LessThan,
}

impl LabelSelector {
    /// Parses `text` as kube-apiserver parses a `labelSelector`; the empty (or blank) text
    /// selects everything.
    pub fn parse(text: &str) -> Result<LabelSelector, SelectorError> {
        let tokens = lex(text);
        let mut parser = Parser {
            tokens,
            position: 0,
        };
        let mut requirements = parser.parse().map_err(SelectorError::Label)?;
        // apimachinery keeps the requirements sorted by key; matching does not care, but equal
        // selectors then compare equal.
        requirements.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(LabelSelector { requirements })
    }

    /// Whether an object whose `metadata.labels` is `labels` (`None` when it has none) is
    /// selected. Labels whose value is not a string count as absent.
    pub fn matches(&self, labels: Option<&Value>) -> bool {
        let map = labels.and_then(Value::as_object);
        self.requirements.iter().all(|requirement| {
            let value = map
                .and_then(|map| map.get(&requirement.key))
                .and_then(Value::as_str);
            requirement.matches(value)
        })
    }

    /// Whether the selector selects everything, so a caller can skip matching.
    pub fn is_empty(&self) -> bool {
        self.requirements.is_empty()
    }
}

impl Requirement {
    fn matches(&self, value: Option<&str>) -> bool {
        let contains = |v: &str| self.values.iter().any(|wanted| wanted == v);
        match self.op {
            Op::In | Op::Equals | Op::DoubleEquals => value.is_some_and(contains),
            Op::NotIn | Op::NotEquals => !value.is_some_and(contains),
            Op::Exists => value.is_some(),
            Op::DoesNotExist => value.is_none(),
            Op::GreaterThan | Op::LessThan => {
                let Some(have) = value.and_then(|v| v.parse::<i64>().ok()) else {
                    return false;
                };
                // NewRequirement checked there is exactly one integer value.
                let Some(bound) = self.values.first().and_then(|v| v.parse::<i64>().ok()) else {
                    return false;
                };
                if self.op == Op::GreaterThan {
                    have > bound
                } else {
                    have < bound
                }
            }
        }
    }
}

/// The lexer's tokens (apimachinery's `Token`s), with the text they were read from.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Token {
    End,
    ClosePar,
    Comma,
    DoesNotExist,
    DoubleEquals,
    Equals,
    GreaterThan,
    In,
    LessThan,
    NotEquals,
    NotIn,
    OpenPar,
    Identifier(String),
}

impl Token {
    /// The text the token was read from, for error messages.
    fn literal(&self) -> &str {
        match self {
            Token::End => "",
            Token::ClosePar => ")",
            Token::Comma => ",",
            Token::DoesNotExist => "!",
            Token::DoubleEquals => "==",
            Token::Equals => "=",
            Token::GreaterThan => ">",
            Token::In => "in",
            Token::LessThan => "<",
            Token::NotEquals => "!=",
            Token::NotIn => "notin",
            Token::OpenPar => "(",
            Token::Identifier(text) => text,
        }
    }
}

fn is_whitespace(c: char) -> bool {
    matches!(c, ' ' | '\t' | '\r' | '\n')
}

fn is_special(c: char) -> bool {
    matches!(c, '=' | '!' | '(' | ')' | ',' | '>' | '<')
}

fn special_token(text: &str) -> Option<Token> {
    Some(match text {
        ")" => Token::ClosePar,
        "," => Token::Comma,
        "!" => Token::DoesNotExist,
        "==" => Token::DoubleEquals,
        "=" => Token::Equals,
        ">" => Token::GreaterThan,
        "<" => Token::LessThan,
        "!=" => Token::NotEquals,
        "(" => Token::OpenPar,
        _ => return None,
    })
}

/// Splits a label selector into tokens, ending with [`Token::End`]. Like apimachinery's lexer,
/// a run of operator characters yields its longest known prefix (`!=` rather than `!` `=`),
/// and `in`/`notin` are keywords wherever they stand alone.
fn lex(text: &str) -> Vec<Token> {
    let chars: Vec<char> = text.chars().collect();
    let mut tokens = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if is_whitespace(c) {
            i += 1;
        } else if is_special(c) {
            let mut buffer = String::new();
            let mut best: Option<(Token, usize)> = None;
            let mut j = i;
            while j < chars.len() && is_special(chars[j]) {
                buffer.push(chars[j]);
                j += 1;
                if let Some(token) = special_token(&buffer) {
                    best = Some((token, j));
                } else if best.is_some() {
                    break;
                }
            }
            // Every single operator character is a token, so `best` is always set.
            match best {
                Some((token, end)) => {
                    tokens.push(token);
                    i = end;
                }
                None => {
                    tokens.push(Token::Identifier(buffer));
                    i = j;
                }
            }
        } else {
            let start = i;
            while i < chars.len() && !is_special(chars[i]) && !is_whitespace(chars[i]) {
                i += 1;
            }
            let word: String = chars[start..i].iter().collect();
            tokens.push(match word.as_str() {
                "in" => Token::In,
                "notin" => Token::NotIn,
                _ => Token::Identifier(word),
            });
        }
    }
    tokens.push(Token::End);
    tokens
}

/// Whether a token is read as a key/value (`Values`) or as an operator (`KeyAndOperator`):
/// `in` and `notin` are plain identifiers except where an operator is expected.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Context {
    KeyAndOperator,
    Values,
}

struct Parser {
    tokens: Vec<Token>,
    position: usize,
}

impl Parser {
    fn lookahead(&self, context: Context) -> Token {
        let token = self
            .tokens
            .get(self.position)
            .cloned()
            .unwrap_or(Token::End);
        in_context(token, context)
    }

    fn consume(&mut self, context: Context) -> Token {
        let token = self.lookahead(context);
        if self.position < self.tokens.len() {
            self.position += 1;
        }
        token
    }

    fn parse(&mut self) -> Result<Vec<Requirement>, String> {
        let mut requirements = Vec::new();
        loop {
            match self.lookahead(Context::Values) {
                Token::Identifier(_) | Token::DoesNotExist => {
                    let requirement = self
                        .parse_requirement()
                        .map_err(|e| format!("unable to parse requirement: {e}"))?;
                    requirements.push(requirement);
                    match self.consume(Context::Values) {
                        Token::End => return Ok(requirements),
                        Token::Comma => {
                            let next = self.lookahead(Context::Values);
                            if !matches!(next, Token::Identifier(_) | Token::DoesNotExist) {
                                return Err(format!(
                                    "found '{}', expected: identifier after ','",
                                    next.literal()
                                ));
                            }
                        }
                        other => {
                            return Err(format!(
                                "found '{}', expected: ',' or 'end of string'",
                                other.literal()
                            ));
                        }
                    }
                }
                Token::End => return Ok(requirements),
                other => {
                    return Err(format!(
                        "found '{}', expected: !, identifier, or 'end of string'",
                        other.literal()
                    ));
                }
            }
        }
    }

    fn parse_requirement(&mut self) -> Result<Requirement, String> {
        let (key, unary) = self.parse_key_and_infer_operator()?;
        if let Some(op) = unary {
            return new_requirement(key, op, Vec::new());
        }
        let op = self.parse_operator()?;
        let values = match op {
            Op::In | Op::NotIn => self.parse_values()?,
            _ => self.parse_exact_value()?,
        };
        new_requirement(key, op, values)
    }

    /// The key, and the operator when it is unary (`!key`, or `key` before `,`/end).
    fn parse_key_and_infer_operator(&mut self) -> Result<(String, Option<Op>), String> {
        let mut op = None;
        let mut token = self.consume(Context::Values);
        if token == Token::DoesNotExist {
            op = Some(Op::DoesNotExist);
            token = self.consume(Context::Values);
        }
        let Token::Identifier(key) = token else {
            return Err(format!("found '{}', expected: identifier", token.literal()));
        };
        validate_label_key(&key)?;
        if op.is_none() && matches!(self.lookahead(Context::Values), Token::End | Token::Comma) {
            op = Some(Op::Exists);
        }
        Ok((key, op))
    }

    fn parse_operator(&mut self) -> Result<Op, String> {
        Ok(match self.consume(Context::KeyAndOperator) {
            Token::In => Op::In,
            Token::Equals => Op::Equals,
            Token::DoubleEquals => Op::DoubleEquals,
            Token::GreaterThan => Op::GreaterThan,
            Token::LessThan => Op::LessThan,
            Token::NotIn => Op::NotIn,
            Token::NotEquals => Op::NotEquals,
            other => {
                return Err(format!(
                    "found '{}', expected: in, notin, =, ==, !=, gt, lt",
                    other.literal()
                ));
            }
        })
    }

    fn parse_values(&mut self) -> Result<Vec<String>, String> {
        let token = self.consume(Context::Values);
        if token != Token::OpenPar {
            return Err(format!("found '{}' expected: '('", token.literal()));
        }
        let next = self.lookahead(Context::Values);
        match next {
            Token::Identifier(_) | Token::Comma => {
                let values = self.parse_identifiers_list()?;
                if self.consume(Context::Values) != Token::ClosePar {
                    return Err(format!("found '{}', expected: ')'", next.literal()));
                }
                Ok(values)
            }
            Token::ClosePar => {
                self.consume(Context::Values);
                Ok(vec![String::new()])
            }
            other => Err(format!(
                "found '{}', expected: ',', ')' or identifier",
                other.literal()
            )),
        }
    }

    fn parse_identifiers_list(&mut self) -> Result<Vec<String>, String> {
        let mut values: Vec<String> = Vec::new();
        loop {
            match self.consume(Context::Values) {
                Token::Identifier(value) => {
                    values.push(value);
                    match self.lookahead(Context::Values) {
                        Token::Comma => continue,
                        Token::ClosePar => return Ok(sorted_set(values)),
                        other => {
                            return Err(format!(
                                "found '{}', expected: ',' or ')'",
                                other.literal()
                            ));
                        }
                    }
                }
                Token::Comma => {
                    // `(,a)`, `(a,)` and `(a,,b)` carry an empty value.
                    if values.is_empty() {
                        values.push(String::new());
                    }
                    match self.lookahead(Context::Values) {
                        Token::ClosePar => {
                            values.push(String::new());
                            return Ok(sorted_set(values));
                        }
                        Token::Comma => {
                            self.consume(Context::Values);
                            values.push(String::new());
                        }
                        _ => {}
                    }
                }
                other => {
                    return Err(format!(
                        "found '{}', expected: ',', or identifier",
                        other.literal()
                    ));
                }
            }
        }
    }

    fn parse_exact_value(&mut self) -> Result<Vec<String>, String> {
        if matches!(self.lookahead(Context::Values), Token::End | Token::Comma) {
            return Ok(vec![String::new()]);
        }
        match self.consume(Context::Values) {
            Token::Identifier(value) => Ok(vec![value]),
            other => Err(format!("found '{}', expected: identifier", other.literal())),
        }
    }
}

fn in_context(token: Token, context: Context) -> Token {
    match (context, token) {
        (Context::Values, Token::In) => Token::Identifier("in".to_owned()),
        (Context::Values, Token::NotIn) => Token::Identifier("notin".to_owned()),
        (_, token) => token,
    }
}

fn sorted_set(mut values: Vec<String>) -> Vec<String> {
    values.sort();
    values.dedup();
    values
}

/// apimachinery's `NewRequirement` checks: the key, the number and form of the values.
fn new_requirement(key: String, op: Op, values: Vec<String>) -> Result<Requirement, String> {
    let mut errors = Vec::new();
    match op {
        Op::In | Op::NotIn if values.is_empty() => errors.push(format!(
            "values: Invalid value: {values:?}: for 'in', 'notin' operators, values set can't be empty"
        )),
        Op::Equals | Op::DoubleEquals | Op::NotEquals if values.len() != 1 => errors.push(format!(
            "values: Invalid value: {values:?}: exact-match compatibility requires one single value"
        )),
        Op::Exists | Op::DoesNotExist if !values.is_empty() => errors.push(format!(
            "values: Invalid value: {values:?}: values set must be empty for exists and does not exist"
        )),
        Op::GreaterThan | Op::LessThan => {
            if values.len() != 1 {
                errors.push(format!(
                    "values: Invalid value: {values:?}: for 'Gt', 'Lt' operators, exactly one value is required"
                ));
            }
            for (i, value) in values.iter().enumerate() {
                if value.parse::<i64>().is_err() {
                    errors.push(format!(
                        "values[{i}]: Invalid value: {value:?}: for 'Gt', 'Lt' operators, the value must be an integer"
                    ));
                }
            }
        }
        _ => {}
    }
    for (i, value) in values.iter().enumerate() {
        if let Err(detail) = validate_label_value(value) {
            errors.push(format!(
                "values[{i}][{key}]: Invalid value: {value:?}: {detail}"
            ));
        }
    }
    match errors.len() {
        0 => Ok(Requirement { key, op, values }),
        1 => Err(errors.remove(0)),
        _ => Err(format!("[{}]", errors.join(", "))),
    }
}

const QUALIFIED_NAME_MAX: usize = 63;
const LABEL_VALUE_MAX: usize = 63;
const DNS1123_SUBDOMAIN_MAX: usize = 253;
const QUALIFIED_NAME_MESSAGE: &str = "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')";
const LABEL_VALUE_MESSAGE: &str = "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')";
const SUBDOMAIN_MESSAGE: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";

/// `[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?`: a qualified name's name part, a label value.
fn is_label_word(text: &str) -> bool {
    let bytes = text.as_bytes();
    match (bytes.first(), bytes.last()) {
        (Some(first), Some(last)) => {
            first.is_ascii_alphanumeric()
                && last.is_ascii_alphanumeric()
                && bytes
                    .iter()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
        }
        _ => false,
    }
}

/// A lowercase RFC 1123 subdomain: dot-separated labels of `[a-z0-9]`, inner `-`.
fn is_dns1123_subdomain(text: &str) -> bool {
    text.split('.').all(|label| {
        let bytes = label.as_bytes();
        let alnum = |b: &u8| b.is_ascii_lowercase() || b.is_ascii_digit();
        match (bytes.first(), bytes.last()) {
            (Some(first), Some(last)) => {
                alnum(first) && alnum(last) && bytes.iter().all(|b| alnum(b) || *b == b'-')
            }
            _ => false,
        }
    })
}

/// apimachinery's `IsQualifiedName`: `[prefix/]name`, the prefix a DNS subdomain, the name at
/// most 63 characters of `[A-Za-z0-9-_.]` starting and ending alphanumeric.
fn validate_label_key(key: &str) -> Result<(), String> {
    let mut problems = Vec::new();
    let parts: Vec<&str> = key.split('/').collect();
    let name = match parts.as_slice() {
        [name] => *name,
        [prefix, name] => {
            if prefix.is_empty() {
                problems.push("prefix part must be non-empty".to_owned());
            } else {
                if prefix.len() > DNS1123_SUBDOMAIN_MAX {
                    problems.push(format!(
                        "prefix part must be no more than {DNS1123_SUBDOMAIN_MAX} characters"
                    ));
                }
                if !is_dns1123_subdomain(prefix) {
                    problems.push(format!("prefix part {SUBDOMAIN_MESSAGE}"));
                }
            }
            *name
        }
        _ => {
            problems.push(format!(
                "a qualified name {QUALIFIED_NAME_MESSAGE} with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"
            ));
            return Err(format!(
                "key: Invalid value: {key:?}: {}",
                problems.join("; ")
            ));
        }
    };
    if name.is_empty() {
        problems.push("name part must be non-empty".to_owned());
    } else if name.len() > QUALIFIED_NAME_MAX {
        problems.push(format!(
            "name part must be no more than {QUALIFIED_NAME_MAX} characters"
        ));
    }
    if !is_label_word(name) {
        problems.push(format!("name part {QUALIFIED_NAME_MESSAGE}"));
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "key: Invalid value: {key:?}: {}",
            problems.join("; ")
        ))
    }
}

/// apimachinery's `IsValidLabelValue`: empty, or at most 63 characters of `[A-Za-z0-9-_.]`
/// starting and ending alphanumeric.
fn validate_label_value(value: &str) -> Result<(), String> {
    let mut problems = Vec::new();
    if value.len() > LABEL_VALUE_MAX {
        problems.push(format!("must be no more than {LABEL_VALUE_MAX} characters"));
    }
    if !value.is_empty() && !is_label_word(value) {
        problems.push(LABEL_VALUE_MESSAGE.to_owned());
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems.join("; "))
    }
}

// ------------------------------------------------------------------------------------------
// Field selectors
// ------------------------------------------------------------------------------------------

/// A parsed `fieldSelector` query parameter for one resource: the `field=value` and
/// `field!=value` terms an object must all meet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldSelector {
    resource: String,
    terms: Vec<FieldTerm>,
}

/// One term: `field` (as the object is read, aliases resolved) equals or differs from `value`.
#[derive(Debug, Clone, PartialEq, Eq)]
struct FieldTerm {
    field: &'static str,
    value: String,
    equal: bool,
}

const META_FIELDS: &[&str] = &["metadata.name", "metadata.namespace"];
const POD_FIELDS: &[&str] = &[
    "metadata.name",
    "metadata.namespace",
    "spec.nodeName",
    "spec.restartPolicy",
    "spec.schedulerName",
    "spec.serviceAccountName",
    "spec.hostNetwork",
    "status.phase",
    "status.podIP",
    "status.podIPs",
    "status.nominatedNodeName",
];
const NODE_FIELDS: &[&str] = &["metadata.name", "spec.unschedulable"];
const REPLICATION_CONTROLLER_FIELDS: &[&str] =
    &["metadata.name", "metadata.namespace", "status.replicas"];
const EVENT_FIELDS: &[&str] = &[
    "involvedObject.kind",
    "involvedObject.namespace",
    "involvedObject.name",
    "involvedObject.uid",
    "involvedObject.apiVersion",
    "involvedObject.resourceVersion",
    "involvedObject.fieldPath",
    "reason",
    "reportingComponent",
    "source",
    "type",
    "metadata.namespace",
    "metadata.name",
];
const NAMESPACE_FIELDS: &[&str] = &["status.phase", "metadata.name"];
const SECRET_FIELDS: &[&str] = &["type", "metadata.namespace", "metadata.name"];
const SERVICE_FIELDS: &[&str] = &[
    "metadata.namespace",
    "metadata.name",
    "spec.clusterIP",
    "spec.type",
];

/// The fields kube-apiserver accepts in a `fieldSelector` for `resource` (plural); resources
/// without their own list (configmaps, endpoints, endpointslices, leases, ...) take only the
/// object's name and namespace, as apiserver's default conversion does.
pub fn supported_fields(resource: &str) -> &'static [&'static str] {
    match resource {
        "pods" => POD_FIELDS,
        "nodes" => NODE_FIELDS,
        "replicationcontrollers" => REPLICATION_CONTROLLER_FIELDS,
        "events" => EVENT_FIELDS,
        "namespaces" => NAMESPACE_FIELDS,
        "secrets" => SECRET_FIELDS,
        "services" => SERVICE_FIELDS,
        _ => META_FIELDS,
    }
}

/// The supported field `label` names for `resource`, with apiserver's aliases resolved
/// (`spec.host` is old clients' `spec.nodeName` for pods).
fn resolve_field(resource: &str, label: &str) -> Option<&'static str> {
    if resource == "pods" && label == "spec.host" {
        return Some("spec.nodeName");
    }
    supported_fields(resource)
        .iter()
        .copied()
        .find(|field| *field == label)
}

impl FieldSelector {
    /// Parses `text` as kube-apiserver parses a `fieldSelector` for `resource` (plural, e.g.
    /// `pods`), refusing fields that resource cannot be selected on; the empty text selects
    /// everything.
    pub fn parse(resource: &str, text: &str) -> Result<FieldSelector, SelectorError> {
        let mut terms = Vec::new();
        let mut parts = split_terms(text);
        parts.sort();
        for part in parts {
            if part.is_empty() {
                continue;
            }
            let Some((label, operator, raw_value)) = split_term(part) else {
                return Err(SelectorError::Field(format!(
                    "invalid selector: '{text}'; can't understand '{part}'"
                )));
            };
            let value = unescape_value(raw_value).map_err(SelectorError::Field)?;
            let Some(field) = resolve_field(resource, label) else {
                return Err(SelectorError::UnsupportedField {
                    field: label.to_owned(),
                    supported: supported_fields(resource).to_vec(),
                });
            };
            terms.push(FieldTerm {
                field,
                value,
                equal: operator != "!=",
            });
        }
        Ok(FieldSelector {
            resource: resource.to_owned(),
            terms,
        })
    }

    /// Whether `object` (the resource's JSON) meets every term. A field the object lacks reads
    /// as `""` (so `spec.nodeName=` selects unscheduled pods), booleans as `true`/`false`.
    pub fn matches(&self, object: &Value) -> bool {
        self.terms.iter().all(|term| {
            let have = field_value(&self.resource, object, term.field);
            (have == term.value) == term.equal
        })
    }

    /// Whether the selector selects everything, so a caller can skip matching.
    pub fn is_empty(&self) -> bool {
        self.terms.is_empty()
    }
}

/// Splits on commas not escaped by a backslash; the backslashes stay for [`unescape_value`].
fn split_terms(text: &str) -> Vec<&str> {
    if text.is_empty() {
        return Vec::new();
    }
    let mut terms = Vec::new();
    let mut start = 0;
    let mut escaped = false;
    for (i, c) in text.char_indices() {
        if escaped {
            escaped = false;
        } else if c == '\\' {
            escaped = true;
        } else if c == ',' {
            terms.push(&text[start..i]);
            start = i + 1;
        }
    }
    terms.push(&text[start..]);
    terms
}

/// `(field, operator, raw value)` split at the first operator (`!=` and `==` before `=`); the
/// field part has no escaping.
fn split_term(term: &str) -> Option<(&str, &'static str, &str)> {
    for (i, _) in term.char_indices() {
        let rest = &term[i..];
        for operator in ["!=", "==", "="] {
            if let Some(value) = rest.strip_prefix(operator) {
                return Some((&term[..i], operator, value));
            }
        }
    }
    None
}

/// Undoes the `\\`, `\,` and `\=` escapes of a value; any other escape, a lone trailing
/// backslash, or an unescaped `,` or `=` is refused, as apimachinery's `UnescapeValue` does.
fn unescape_value(raw: &str) -> Result<String, String> {
    let mut value = String::with_capacity(raw.len());
    let mut escaped = false;
    for c in raw.chars() {
        if escaped {
            match c {
                '\\' | ',' | '=' => value.push(c),
                other => {
                    return Err(format!(
                        "invalid field selector: invalid escape sequence: \\{other}"
                    ));
                }
            }
            escaped = false;
            continue;
        }
        match c {
            '\\' => escaped = true,
            ',' | '=' => {
                return Err(format!(
                    "invalid field selector: unescaped character in value: {c}"
                ));
            }
            other => value.push(other),
        }
    }
    if escaped {
        return Err("invalid field selector: invalid escape sequence: \\".to_owned());
    }
    Ok(value)
}

/// A JSON value as a field selector compares it: strings as they are, booleans and numbers in
/// their usual text, anything else (absent, null, objects) as `""`.
fn text_of(value: Option<&Value>) -> String {
    match value {
        Some(Value::String(text)) => text.clone(),
        Some(Value::Bool(flag)) => flag.to_string(),
        Some(Value::Number(number)) => number.to_string(),
        _ => String::new(),
    }
}

/// The value of `field` in `object`, as kube-apiserver's registry for `resource` exposes it
/// to selection (`GetAttrs` / `ToSelectableFields`).
fn field_value(resource: &str, object: &Value, field: &str) -> String {
    match (resource, field) {
        ("pods", "spec.hostNetwork") | ("nodes", "spec.unschedulable") => {
            let path = if field == "spec.hostNetwork" {
                "hostNetwork"
            } else {
                "unschedulable"
            };
            object["spec"][path].as_bool().unwrap_or(false).to_string()
        }
        ("pods", "status.podIP") => {
            let first = object["status"]["podIPs"]
                .as_array()
                .and_then(|ips| ips.first())
                .map(|ip| text_of(ip.get("ip")));
            match first {
                Some(ip) => ip,
                None => text_of(object["status"].get("podIP")),
            }
        }
        // Accepted by apiserver's conversion but absent from the pod's selectable fields, so
        // it always reads as "" there too.
        ("pods", "status.podIPs") => String::new(),
        ("replicationcontrollers", "status.replicas") => object["status"]["replicas"]
            .as_i64()
            .unwrap_or(0)
            .to_string(),
        ("events", "source") => {
            let component = text_of(object["source"].get("component"));
            if component.is_empty() {
                text_of(object.get("reportingComponent"))
            } else {
                component
            }
        }
        _ => {
            let mut current = Some(object);
            for step in field.split('.') {
                current = current.and_then(|value| value.get(step));
            }
            text_of(current)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn labels(value: Value) -> Value {
        value
    }

    fn selects(selector: &str, object_labels: &Value) -> bool {
        match LabelSelector::parse(selector) {
            Ok(parsed) => parsed.matches(Some(object_labels)),
            Err(e) => panic!("{selector:?} should parse: {e}"),
        }
    }

    fn label_error(selector: &str) -> String {
        match LabelSelector::parse(selector) {
            Ok(parsed) => panic!("{selector:?} should not parse, got {parsed:?}"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn empty_label_selector_selects_everything() {
        for text in ["", "   ", "\t\n"] {
            let selector = LabelSelector::parse(text).expect("empty parses");
            assert!(selector.is_empty());
            assert!(selector.matches(None));
            assert!(selector.matches(Some(&json!({"a": "b"}))));
        }
    }

    #[test]
    fn equality_operators() {
        let object = labels(json!({"app": "nginx", "tier": "frontend", "empty": ""}));
        assert!(selects("app=nginx", &object));
        assert!(selects("app==nginx", &object));
        assert!(!selects("app=apache", &object));
        assert!(selects("app!=apache", &object));
        assert!(!selects("app!=nginx", &object));
        assert!(
            selects("missing!=x", &object),
            "!= selects objects without the label"
        );
        assert!(!selects("missing=x", &object));
        assert!(selects("empty=", &object));
        assert!(!selects("app=", &object));
        assert!(selects("app=nginx,tier=frontend", &object));
        assert!(!selects("app=nginx,tier=backend", &object));
        assert!(selects(" app = nginx , tier==frontend ", &object));
    }

    #[test]
    fn set_operators() {
        let object = labels(json!({"env": "prod", "app": "web"}));
        assert!(selects("env in (prod, staging)", &object));
        assert!(selects("env in (prod)", &object));
        assert!(!selects("env in (dev,staging)", &object));
        assert!(selects("env notin (dev,staging)", &object));
        assert!(!selects("env notin (prod)", &object));
        assert!(
            selects("missing notin (a)", &object),
            "notin selects objects without the label"
        );
        assert!(!selects("missing in (a)", &object));
        assert!(selects("env in(prod)", &object));
        assert!(selects("env in (prod),app in (web, api)", &object));
        // `in ()` and `(a,)` carry the empty value.
        let empty = labels(json!({"env": ""}));
        assert!(selects("env in ()", &empty));
        assert!(selects("env in (a,)", &empty));
        assert!(selects("env in (,a)", &empty));
        assert!(selects("env in (a,,b)", &empty));
        assert!(!selects("env in (a,b)", &empty));
    }

    #[test]
    fn existence_operators() {
        let object = labels(json!({"app": "web", "canary": ""}));
        assert!(selects("app", &object));
        assert!(selects("canary", &object));
        assert!(!selects("missing", &object));
        assert!(selects("!missing", &object));
        assert!(!selects("!app", &object));
        assert!(selects("app,!missing", &object));
        assert!(selects("  !missing  ,  app ", &object));
        let selector = LabelSelector::parse("app").expect("parses");
        assert!(!selector.matches(None));
        assert!(LabelSelector::parse("!app").expect("parses").matches(None));
    }

    #[test]
    fn keywords_are_plain_words_as_keys_and_values() {
        let object = labels(json!({"in": "notin", "x": "in"}));
        assert!(selects("in=notin", &object));
        assert!(selects("x in (in, notin)", &object));
        assert!(selects("x=in", &object));
        assert!(selects("in", &object));
    }

    #[test]
    fn greater_and_less_than() {
        let object = labels(json!({"replicas": "5", "name": "web"}));
        assert!(selects("replicas>3", &object));
        assert!(!selects("replicas>5", &object));
        assert!(selects("replicas<6", &object));
        assert!(
            !selects("name>1", &object),
            "a non-numeric label never compares"
        );
        assert!(!selects("missing<10", &object));
        assert!(label_error("replicas>x").contains("must be an integer"));
    }

    #[test]
    fn prefixed_keys() {
        let object = labels(json!({
            "app.kubernetes.io/name": "mqtt",
            "node-role.kubernetes.io/edge": ""
        }));
        assert!(selects("app.kubernetes.io/name=mqtt", &object));
        assert!(selects("node-role.kubernetes.io/edge", &object));
        assert!(selects("node-role.kubernetes.io/edge=", &object));
    }

    #[test]
    fn non_string_label_values_count_as_absent() {
        let object = labels(json!({"n": 5, "b": true}));
        assert!(!selects("n", &object));
        assert!(selects("!n", &object));
        assert!(selects("b!=true", &object));
        assert!(
            !LabelSelector::parse("a")
                .expect("parses")
                .matches(Some(&json!("x")))
        );
    }

    #[test]
    fn label_syntax_errors() {
        assert_eq!(
            label_error("a=b,"),
            "found '', expected: identifier after ','"
        );
        assert_eq!(
            label_error(",a"),
            "found ',', expected: !, identifier, or 'end of string'"
        );
        assert_eq!(
            label_error("a b"),
            "unable to parse requirement: found 'b', expected: in, notin, =, ==, !=, gt, lt"
        );
        assert_eq!(
            label_error("!a=b"),
            "found '=', expected: ',' or 'end of string'"
        );
        assert_eq!(
            label_error("a in b"),
            "unable to parse requirement: found 'b' expected: '('"
        );
        assert_eq!(
            label_error("a in (b"),
            "unable to parse requirement: found '', expected: ',' or ')'"
        );
        assert_eq!(
            label_error("a in (b c)"),
            "unable to parse requirement: found 'c', expected: ',' or ')'"
        );
        assert_eq!(
            label_error("a in (="),
            "unable to parse requirement: found '=', expected: ',', ')' or identifier"
        );
        assert_eq!(
            label_error("a=(b)"),
            "unable to parse requirement: found '(', expected: identifier"
        );
        assert_eq!(
            label_error("a=b=c"),
            "found '=', expected: ',' or 'end of string'"
        );
        assert_eq!(
            label_error("!"),
            "unable to parse requirement: found '', expected: identifier"
        );
        assert_eq!(
            label_error("!!a"),
            "unable to parse requirement: found '!', expected: identifier"
        );
        assert_eq!(
            label_error(")"),
            "found ')', expected: !, identifier, or 'end of string'"
        );
        assert!(label_error("a (b)").contains("expected: in, notin, =, ==, !=, gt, lt"));
    }

    #[test]
    fn label_key_and_value_validation() {
        let bad_key = label_error("-app=x");
        assert!(bad_key.starts_with("unable to parse requirement: key: Invalid value: \"-app\""));
        assert!(bad_key.contains("name part must consist of alphanumeric characters"));
        assert!(label_error("Example.com/a=b").contains("prefix part a lowercase RFC 1123"));
        assert!(label_error("/a=b").contains("prefix part must be non-empty"));
        assert!(label_error("a/=b").contains("name part must be non-empty"));
        assert!(label_error("a/b/c=d").contains("a qualified name must consist"));
        let long_name = "a".repeat(64);
        assert!(label_error(&long_name).contains("must be no more than 63 characters"));
        assert!(LabelSelector::parse(&"a".repeat(63)).is_ok());
        let long_value = format!("a={}", "v".repeat(64));
        assert!(label_error(&long_value).contains("must be no more than 63 characters"));
        let bad_value = label_error("a=-v");
        assert!(
            bad_value.contains("values[0][a]: Invalid value: \"-v\""),
            "{bad_value}"
        );
        assert!(label_error("a in (ok, bad_)").contains("Invalid value: \"bad_\""));
        assert!(LabelSelector::parse("a=b.c-d_e").is_ok());
        assert!(label_error("a=é").contains("Invalid value"));
    }

    fn pod() -> Value {
        json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "web-1", "namespace": "default", "labels": {"app": "web"}},
            "spec": {
                "nodeName": "edge-node-1",
                "restartPolicy": "Always",
                "schedulerName": "default-scheduler",
                "serviceAccountName": "default",
                "hostNetwork": true
            },
            "status": {
                "phase": "Running",
                "podIP": "10.244.1.5",
                "podIPs": [{"ip": "10.244.1.5"}, {"ip": "fd00::5"}]
            }
        })
    }

    fn field_selects(resource: &str, selector: &str, object: &Value) -> bool {
        match FieldSelector::parse(resource, selector) {
            Ok(parsed) => parsed.matches(object),
            Err(e) => panic!("{selector:?} should parse: {e}"),
        }
    }

    #[test]
    fn pod_field_selectors() {
        let pod = pod();
        assert!(field_selects("pods", "spec.nodeName=edge-node-1", &pod));
        assert!(field_selects("pods", "spec.host=edge-node-1", &pod));
        assert!(!field_selects("pods", "spec.nodeName=other", &pod));
        assert!(field_selects("pods", "spec.nodeName!=other", &pod));
        assert!(field_selects(
            "pods",
            "metadata.name==web-1,metadata.namespace=default",
            &pod
        ));
        assert!(field_selects("pods", "status.phase=Running", &pod));
        assert!(field_selects(
            "pods",
            "status.phase!=Succeeded,status.phase!=Failed",
            &pod
        ));
        assert!(field_selects("pods", "spec.hostNetwork=true", &pod));
        assert!(field_selects("pods", "status.podIP=10.244.1.5", &pod));
        assert!(field_selects("pods", "spec.restartPolicy=Always", &pod));
        assert!(field_selects(
            "pods",
            "spec.schedulerName=default-scheduler",
            &pod
        ));
        assert!(field_selects(
            "pods",
            "spec.serviceAccountName=default",
            &pod
        ));
        assert!(field_selects("pods", "status.nominatedNodeName=", &pod));
        assert!(field_selects("pods", "status.podIPs=", &pod));
        assert!(field_selects("pods", "", &pod));
        assert!(FieldSelector::parse("pods", "").expect("parses").is_empty());
        assert!(
            FieldSelector::parse("pods", ",,")
                .expect("parses")
                .is_empty()
        );
    }

    #[test]
    fn missing_fields_read_as_empty_and_bools_default_false() {
        let pending = json!({
            "metadata": {"name": "p", "namespace": "default"},
            "spec": {"containers": []},
            "status": {"phase": "Pending"}
        });
        assert!(field_selects("pods", "spec.nodeName=", &pending));
        assert!(!field_selects("pods", "spec.nodeName!=", &pending));
        assert!(field_selects("pods", "spec.hostNetwork=false", &pending));
        assert!(field_selects("pods", "status.podIP=", &pending));
        let node = json!({"metadata": {"name": "edge-1"}, "spec": {}});
        assert!(field_selects("nodes", "spec.unschedulable=false", &node));
        let cordoned = json!({"metadata": {"name": "edge-1"}, "spec": {"unschedulable": true}});
        assert!(field_selects("nodes", "spec.unschedulable=true", &cordoned));
        assert!(field_selects(
            "pods",
            "metadata.name=p",
            &json!({"metadata": {"name": "p"}})
        ));
        assert!(field_selects(
            "configmaps",
            "metadata.namespace=",
            &json!(null)
        ));
    }

    #[test]
    fn other_resources_fields() {
        let secret = json!({"metadata": {"name": "s", "namespace": "kube-system"}, "type": "kubernetes.io/tls"});
        assert!(field_selects("secrets", "type=kubernetes.io/tls", &secret));
        let event = json!({
            "metadata": {"name": "web-1.17a", "namespace": "default"},
            "involvedObject": {"kind": "Pod", "name": "web-1", "namespace": "default", "uid": "u-1"},
            "reason": "BackOff",
            "type": "Warning",
            "reportingComponent": "kubelet",
            "source": {}
        });
        assert!(field_selects(
            "events",
            "involvedObject.kind=Pod,involvedObject.name=web-1,involvedObject.uid=u-1",
            &event
        ));
        assert!(field_selects(
            "events",
            "reason=BackOff,type=Warning",
            &event
        ));
        assert!(
            field_selects("events", "source=kubelet", &event),
            "source falls back to reportingComponent"
        );
        assert!(field_selects(
            "events",
            "reportingComponent=kubelet",
            &event
        ));
        let namespace = json!({"metadata": {"name": "default"}, "status": {"phase": "Active"}});
        assert!(field_selects(
            "namespaces",
            "status.phase=Active",
            &namespace
        ));
        let service = json!({"metadata": {"name": "svc"}, "spec": {"clusterIP": "10.96.0.10", "type": "ClusterIP"}});
        assert!(field_selects(
            "services",
            "spec.clusterIP=10.96.0.10,spec.type=ClusterIP",
            &service
        ));
        let rc = json!({"metadata": {"name": "rc"}, "status": {"replicas": 3}});
        assert!(field_selects(
            "replicationcontrollers",
            "status.replicas=3",
            &rc
        ));
        let slice = json!({"metadata": {"name": "svc-abc", "namespace": "default"}});
        assert!(field_selects(
            "endpointslices",
            "metadata.name=svc-abc",
            &slice
        ));
        assert!(field_selects(
            "leases",
            "metadata.namespace=default",
            &json!({"metadata": {"namespace": "default"}})
        ));
    }

    #[test]
    fn unsupported_fields_are_refused() {
        let error = FieldSelector::parse("configmaps", "data.key=x").expect_err("unsupported");
        assert_eq!(
            error.to_string(),
            "\"data.key\" is not a known field selector: only \"metadata.name\", \"metadata.namespace\""
        );
        let error = FieldSelector::parse("nodes", "metadata.namespace=x").expect_err("unsupported");
        assert!(error.to_string().starts_with("\"metadata.namespace\" is not a known field selector: only \"metadata.name\", \"spec.unschedulable\""));
        assert!(FieldSelector::parse("pods", "spec.host=x").is_ok());
        assert!(FieldSelector::parse("nodes", "spec.host=x").is_err());
        assert!(FieldSelector::parse("pods", "status.hostIP=x").is_err());
        assert!(
            FieldSelector::parse("pods", " metadata.name=x").is_err(),
            "no trimming"
        );
        assert!(FieldSelector::parse("pods", "=x").is_err());
        assert!(matches!(
            FieldSelector::parse("secrets", "spec.type=x"),
            Err(SelectorError::UnsupportedField { .. })
        ));
    }

    #[test]
    fn field_syntax_and_escapes() {
        let error = FieldSelector::parse("pods", "metadata.name").expect_err("no operator");
        assert_eq!(
            error.to_string(),
            "invalid selector: 'metadata.name'; can't understand 'metadata.name'"
        );
        let object = json!({"metadata": {"name": "a,b=c\\d"}});
        assert!(field_selects(
            "configmaps",
            r"metadata.name=a\,b\=c\\d",
            &object
        ));
        assert!(!field_selects(
            "configmaps",
            r"metadata.name!=a\,b\=c\\d",
            &object
        ));
        let error = FieldSelector::parse("pods", r"metadata.name=a\b").expect_err("bad escape");
        assert_eq!(
            error.to_string(),
            r"invalid field selector: invalid escape sequence: \b"
        );
        let error = FieldSelector::parse("pods", "metadata.name=a\\").expect_err("lone backslash");
        assert_eq!(
            error.to_string(),
            r"invalid field selector: invalid escape sequence: \"
        );
        let error = FieldSelector::parse("pods", "metadata.name=a=b").expect_err("bare =");
        assert_eq!(
            error.to_string(),
            "invalid field selector: unescaped character in value: ="
        );
        // `==` and `!=` win over `=`; a leading `=` left in the value is refused.
        assert!(field_selects("pods", "metadata.name==web-1", &pod()));
        assert!(FieldSelector::parse("pods", "metadata.name===x").is_err());
        assert!(field_selects("pods", "metadata.name!=x!y", &pod()));
    }

    #[test]
    fn parsers_never_panic() {
        let pieces = [
            "",
            " ",
            "a",
            "in",
            "notin",
            "!",
            "=",
            "==",
            "!=",
            "(",
            ")",
            ",",
            ">",
            "<",
            "\\",
            "x/y",
            "é",
            "\u{0}",
            "a.b",
            "-",
            "_",
            "1",
            "🙂",
            "metadata.name",
            "spec.nodeName",
        ];
        let objects = [pod(), json!(null), json!({"metadata": 5}), json!([1, 2])];
        let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
        for _ in 0..20_000 {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let count = (state % 7) as usize;
            let mut text = String::new();
            let mut s = state;
            for _ in 0..count {
                text.push_str(pieces[(s % pieces.len() as u64) as usize]);
                s /= pieces.len() as u64;
                s = s.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
            }
            if let Ok(selector) = LabelSelector::parse(&text) {
                for object in &objects {
                    let _ = selector.matches(object.pointer("/metadata/labels"));
                    let _ = selector.matches(Some(object));
                }
            }
            for resource in ["pods", "nodes", "events", "configmaps"] {
                if let Ok(selector) = FieldSelector::parse(resource, &text) {
                    for object in &objects {
                        let _ = selector.matches(object);
                    }
                }
            }
        }
        let long = "a=b,".repeat(10_000);
        assert!(LabelSelector::parse(&long).is_err());
        assert!(FieldSelector::parse("pods", &"metadata.name=x,".repeat(10_000)).is_ok());
    }
}
