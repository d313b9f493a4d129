//! The Subscriptions API filter dialects (§3.2.4.1): their JSON form, their
//! validation and their evaluation.
//!
//! A filter is a JSON object with exactly one key, the dialect:
//!
//! | dialect  | value                                   | matches when                              |
//! | -------- | --------------------------------------- | ----------------------------------------- |
//! | `exact`  | object: attribute name → string         | every attribute equals its string         |
//! | `prefix` | object: attribute name → string         | every attribute starts with its string    |
//! | `suffix` | object: attribute name → string         | every attribute ends with its string      |
//! | `all`    | non-empty array of filters              | every nested filter matches               |
//! | `any`    | non-empty array of filters              | at least one nested filter matches        |
//! | `not`    | one filter                              | the nested filter does not match          |
//! | `sql`    | string: a CESQL expression              | it evaluates to `true` without error      |
//!
//! A subscription's list of filters matches when every filter in it does
//! (an empty list matches everything).
//!
//! Invariants worth naming:
//! - An absent attribute makes `exact`, `prefix` and `suffix` false; it is
//!   not an error. Integer and boolean attributes compare through their
//!   string form (decimal; `true`/`false`).
//! - A `sql` filter whose evaluation raises any error is false, and the
//!   outcome says an error happened, so the caller can count it. Being
//!   false, it makes an enclosing `not` true, as the specification reads.
//! - `all`, `any` and the top-level list stop at the first filter that
//!   decides the result.
//! - Everything that can be checked when a subscription is created is
//!   checked by [`compile`]: shape, dialect names, attribute names, empty
//!   values, CESQL syntax, unknown functions and non-boolean expressions.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::attributes::{AttrKey, Attributes};
use crate::cesql::Expression;
use crate::error::{FilterError, FilterProblem};
use crate::MatchOutcome;

/// Nesting of `all`, `any` and `not` deeper than this is rejected.
pub const MAX_FILTER_DEPTH: usize = 32;

/// One filter in its JSON form: an object whose single key names the
/// dialect. Deserializing accepts any object; [`compile`] validates it.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(transparent)]
pub struct FilterJson(pub Map<String, Value>);

impl FilterJson {
    fn single(dialect: &str, value: Value) -> Self {
        let mut m = Map::new();
        m.insert(dialect.to_owned(), value);
        FilterJson(m)
    }

    fn attrs<'a>(dialect: &str, pairs: impl IntoIterator<Item = (&'a str, &'a str)>) -> Self {
        let map = pairs
            .into_iter()
            .map(|(k, v)| (k.to_owned(), Value::String(v.to_owned())))
            .collect();
        Self::single(dialect, Value::Object(map))
    }

    fn list(dialect: &str, filters: Vec<FilterJson>) -> Self {
        let items = filters.into_iter().map(|f| Value::Object(f.0)).collect();
        Self::single(dialect, Value::Array(items))
    }

    /// `{"exact": {name: value, ...}}`
    pub fn exact<'a>(pairs: impl IntoIterator<Item = (&'a str, &'a str)>) -> Self {
        Self::attrs("exact", pairs)
    }

    /// `{"prefix": {name: value, ...}}`
    pub fn prefix<'a>(pairs: impl IntoIterator<Item = (&'a str, &'a str)>) -> Self {
        Self::attrs("prefix", pairs)
    }

    /// `{"suffix": {name: value, ...}}`
    pub fn suffix<'a>(pairs: impl IntoIterator<Item = (&'a str, &'a str)>) -> Self {
        Self::attrs("suffix", pairs)
    }

    /// `{"all": [...]}`
    pub fn all(filters: Vec<FilterJson>) -> Self {
        Self::list("all", filters)
    }

    /// `{"any": [...]}`
    pub fn any(filters: Vec<FilterJson>) -> Self {
        Self::list("any", filters)
    }

    /// `{"not": {...}}`
    pub fn negate(filter: FilterJson) -> Self {
        Self::single("not", Value::Object(filter.0))
    }

    /// `{"sql": "..."}`
    pub fn sql(expression: &str) -> Self {
        Self::single("sql", Value::String(expression.to_owned()))
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum StrTest {
    Exact,
    Prefix,
    Suffix,
}

impl StrTest {
    fn name(self) -> &'static str {
        match self {
            StrTest::Exact => "exact",
            StrTest::Prefix => "prefix",
            StrTest::Suffix => "suffix",
        }
    }

    fn test(self, value: &str, wanted: &str) -> bool {
        match self {
            StrTest::Exact => value == wanted,
            StrTest::Prefix => value.starts_with(wanted),
            StrTest::Suffix => value.ends_with(wanted),
        }
    }
}

#[derive(Debug, Clone)]
enum Node {
    Attrs(StrTest, Box<[(AttrKey, Box<str>)]>),
    All(Box<[Node]>),
    Any(Box<[Node]>),
    Not(Box<Node>),
    Sql(Expression),
}

/// A compiled list of subscription filters, ready to match events.
#[derive(Debug, Clone, Default)]
pub struct Filter {
    filters: Box<[Node]>,
}

/// Validates and compiles a subscription's filters. Errors name the path of
/// the value at fault, rooted at `filters`.
pub fn compile(filters: &[FilterJson]) -> Result<Filter, FilterError> {
    let filters = filters
        .iter()
        .enumerate()
        .map(|(i, f)| compile_object(&f.0, &format!("filters[{i}]"), 0))
        .collect::<Result<Box<[Node]>, _>>()?;
    Ok(Filter { filters })
}

fn compile_value(v: &Value, path: &str, depth: usize) -> Result<Node, FilterError> {
    match v {
        Value::Object(m) => compile_object(m, path, depth),
        _ => Err(FilterError::new(path, FilterProblem::NotAnObject)),
    }
}

fn compile_object(m: &Map<String, Value>, path: &str, depth: usize) -> Result<Node, FilterError> {
    if depth > MAX_FILTER_DEPTH {
        return Err(FilterError::new(
            path,
            FilterProblem::TooDeep(MAX_FILTER_DEPTH),
        ));
    }
    let mut entries = m.iter();
    let (dialect, value) = match (entries.next(), m.len()) {
        (None, _) => return Err(FilterError::new(path, FilterProblem::NoDialect)),
        (Some(entry), 1) => entry,
        _ => {
            let keys = m.keys().cloned().collect();
            return Err(FilterError::new(path, FilterProblem::SeveralDialects(keys)));
        }
    };
    let here = format!("{path}.{dialect}");
    match dialect.as_str() {
        "exact" => attrs(StrTest::Exact, value, &here),
        "prefix" => attrs(StrTest::Prefix, value, &here),
        "suffix" => attrs(StrTest::Suffix, value, &here),
        "all" => list("all", value, &here, depth).map(Node::All),
        "any" => list("any", value, &here, depth).map(Node::Any),
        "not" => Ok(Node::Not(Box::new(compile_value(value, &here, depth + 1)?))),
        "sql" => match value {
            Value::String(src) => Expression::parse_strict(src)
                .map(Node::Sql)
                .map_err(|e| FilterError::new(&here, FilterProblem::Sql(e))),
            _ => Err(FilterError::new(&here, FilterProblem::SqlNotAString)),
        },
        other => Err(FilterError::new(
            path,
            FilterProblem::UnknownDialect(other.to_owned()),
        )),
    }
}

fn valid_attribute_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
}

fn attrs(test: StrTest, value: &Value, path: &str) -> Result<Node, FilterError> {
    let dialect = test.name();
    let Value::Object(m) = value else {
        return Err(FilterError::new(
            path,
            FilterProblem::NotAnAttributeMap { dialect },
        ));
    };
    if m.is_empty() {
        return Err(FilterError::new(
            path,
            FilterProblem::NoAttributes { dialect },
        ));
    }
    let mut out = Vec::with_capacity(m.len());
    for (name, wanted) in m {
        if !valid_attribute_name(name) {
            return Err(FilterError::new(
                path,
                FilterProblem::BadAttributeName(name.clone()),
            ));
        }
        let at = format!("{path}.{name}");
        match wanted {
            Value::String(s) if s.is_empty() => {
                return Err(FilterError::new(&at, FilterProblem::EmptyValue))
            }
            Value::String(s) => out.push((AttrKey::new(name), s.as_str().into())),
            _ => return Err(FilterError::new(&at, FilterProblem::NotAString)),
        }
    }
    Ok(Node::Attrs(test, out.into()))
}

fn list(
    dialect: &'static str,
    value: &Value,
    path: &str,
    depth: usize,
) -> Result<Box<[Node]>, FilterError> {
    let Value::Array(items) = value else {
        return Err(FilterError::new(
            path,
            FilterProblem::NotAnArray { dialect },
        ));
    };
    if items.is_empty() {
        return Err(FilterError::new(
            path,
            FilterProblem::EmptyArray { dialect },
        ));
    }
    items
        .iter()
        .enumerate()
        .map(|(i, v)| compile_value(v, &format!("{path}[{i}]"), depth + 1))
        .collect()
}

impl Node {
    fn matches<A: Attributes + ?Sized>(&self, event: &A, errored: &mut bool) -> bool {
        match self {
            Node::Attrs(test, pairs) => pairs.iter().all(|(key, wanted)| {
                event
                    .get_key(key)
                    .is_some_and(|v| v.with_str(|s| test.test(s, wanted)))
            }),
            Node::All(nodes) => nodes.iter().all(|n| n.matches(event, errored)),
            Node::Any(nodes) => nodes.iter().any(|n| n.matches(event, errored)),
            Node::Not(node) => !node.matches(event, errored),
            Node::Sql(expr) => {
                let outcome = expr.matches(event);
                *errored |= outcome.errored;
                outcome.matched
            }
        }
    }

    fn exact_requirements<'a>(&'a self, out: &mut Vec<(&'a str, &'a str)>) {
        match self {
            Node::Attrs(StrTest::Exact, pairs) => {
                out.extend(pairs.iter().map(|(k, v)| (k.name(), &**v)));
            }
            Node::All(nodes) => nodes.iter().for_each(|n| n.exact_requirements(out)),
            Node::Sql(expr) => out.extend(expr.exact_requirements()),
            _ => {}
        }
    }
}

impl Filter {
    /// A filter list that matches every event (no filters).
    pub fn match_all() -> Self {
        Filter::default()
    }

    /// True when there are no filters, so every event matches.
    pub fn is_match_all(&self) -> bool {
        self.filters.is_empty()
    }

    /// Matches one event: whether every filter matched, and whether a `sql`
    /// filter raised an evaluation error on the way.
    pub fn matches<A: Attributes + ?Sized>(&self, event: &A) -> MatchOutcome {
        let mut errored = false;
        let matched = self.filters.iter().all(|f| f.matches(event, &mut errored));
        MatchOutcome { matched, errored }
    }

    /// Attribute values every matching event must have, for indexing
    /// subscriptions by (for example) `type`: pairs `(attribute, value)`
    /// such that an event can match only if the attribute is present and its
    /// string form (integers in decimal, booleans `true`/`false`) equals the
    /// value.
    ///
    /// Drawn from the top-level filters, which must all match: every pair of
    /// an `exact` filter, the same inside `all` filters (recursively), and
    /// the `attribute = 'literal'` terms of a `sql` expression that is a
    /// conjunction (see [`Expression::exact_requirements`]). `any`, `not`,
    /// `prefix` and `suffix` contribute nothing. The list is conservative:
    /// it may miss an implied constraint but never states a false one. An
    /// attribute can appear more than once; with two different values, no
    /// event can match.
    pub fn exact_requirements(&self) -> Vec<(&str, &str)> {
        let mut out = Vec::new();
        self.filters
            .iter()
            .for_each(|f| f.exact_requirements(&mut out));
        out
    }
}

#[cfg(test)]
mod tests;
