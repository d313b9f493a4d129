//! The CloudEvents SQL expression language (CESQL 1.0): parse once, evaluate
//! many times.
//!
//! [`Expression::parse`] turns source text into a compiled tree: keywords
//! and attribute names are case-folded, attribute names are resolved to
//! [`AttrKey`]s, functions are bound to their built-in implementation by
//! name and arity, `LIKE` patterns are pre-classified (exact, prefix,
//! suffix, contains or general), and literal `IN` sets carry their values
//! pre-cast to every type. [`Expression::evaluate`] then walks that tree
//! against any [`Attributes`] implementation, borrowing attribute strings
//! from the event; comparing attributes with literals allocates nothing.
//!
//! # Semantics
//!
//! Every evaluation yields a value (boolean, integer or string) and a list
//! of errors, which is empty when all went well. Errors never stop the
//! evaluation; they decide values as follows:
//!
//! - An operator or function whose own work fails (a failed cast of an
//!   operand, division by zero, integer overflow, a function's bad
//!   argument) still yields a value: the zero value of its return type for
//!   failed casts and division by zero, the value the specification names
//!   otherwise (`ABS(-2147483648)` is `2147483647`; integer overflow in
//!   `+ - * /` and unary `-` saturates), and records the error.
//! - An operator or function one of whose operands produced an error
//!   (including a reference to an absent attribute) yields the zero value of
//!   its return type (`false`, `0`, `""`) and passes the errors on without
//!   adding its own. So `missing / 0` is `0` with only a missing-attribute
//!   error, and `true AND (1 != 1 / 0)` is `false` with a math error.
//! - A bare reference to an absent attribute evaluates to `false`.
//! - `AND` and `OR` short-circuit: `false AND x` and `true OR x` never
//!   evaluate `x`.
//!
//! Implicit casts follow §3.7: `=`/`!=`/`<>` cast the left operand to the
//! right operand's type, `IN` casts each element to the left operand's
//! type, the other operators and the functions cast to their parameter
//! types. String to integer accepts an optional sign and decimal digits;
//! string to boolean accepts `true`/`false` in any case. An integer does not
//! implicitly become a boolean (`NOT 10` is `true` with a cast error, as the
//! conformance kit requires); the explicit `BOOL(x)` maps `0` to `false` and
//! any other integer to `true`.
//!
//! # Built-in functions
//!
//! `LENGTH(s)`, `CONCAT(s...)`, `CONCAT_WS(sep, s...)`, `LOWER(s)`,
//! `UPPER(s)`, `TRIM(s)`, `LEFT(s, n)`, `RIGHT(s, n)`, `SUBSTRING(s, pos)`,
//! `SUBSTRING(s, pos, len)`, `ABS(n)`, and the casting functions `INT(x)`,
//! `BOOL(x)`, `STRING(x)`, `IS_INT(x)`, `IS_BOOL(x)` (`IS_*` tell whether the
//! explicit cast would succeed). Function names are case-insensitive;
//! string positions and lengths count Unicode scalar values. Calling an
//! unknown function, or a known one with the wrong number of arguments,
//! evaluates to `false` with a missing-function error; [`Expression::parse_strict`]
//! rejects such calls up front.

mod cast;
mod compile;
mod eval;
mod functions;
mod lexer;
mod like;
mod parser;

use std::fmt;

pub use parser::MAX_DEPTH;

use crate::attributes::{AttrKey, Attributes};
use crate::MatchOutcome;
use compile::Node;
use eval::Sink;

/// A syntax error, found when an expression is compiled.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("at character {position}: {message}")]
pub struct ParseError {
    /// Where the problem starts: a 0-based offset in characters (Unicode
    /// scalar values) into the source text.
    pub position: usize,
    pub message: String,
}

impl ParseError {
    pub(crate) fn new(position: usize, message: impl Into<String>) -> Self {
        ParseError {
            position,
            message: message.into(),
        }
    }
}

/// The kinds of evaluation error CESQL defines (§3.3), parse errors aside.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    Math,
    Cast,
    MissingFunction,
    FunctionEvaluation,
    MissingAttribute,
    Generic,
}

impl ErrorKind {
    /// The kind's name as the conformance kit spells it (`missingAttribute`).
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::Math => "math",
            ErrorKind::Cast => "cast",
            ErrorKind::MissingFunction => "missingFunction",
            ErrorKind::FunctionEvaluation => "functionEvaluation",
            ErrorKind::MissingAttribute => "missingAttribute",
            ErrorKind::Generic => "generic",
        }
    }
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One error raised while evaluating an expression.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{kind} error: {message}")]
pub struct EvalError {
    pub kind: ErrorKind,
    pub message: String,
}

/// A CESQL value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Value {
    Bool(bool),
    Int(i32),
    Str(String),
}

impl fmt::Display for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::Bool(b) => write!(f, "{b}"),
            Value::Int(i) => write!(f, "{i}"),
            Value::Str(s) => f.write_str(s),
        }
    }
}

/// What one evaluation produced: a value, and the errors met on the way
/// (empty when there were none).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Evaluation {
    pub value: Value,
    pub errors: Vec<EvalError>,
}

/// A compiled CESQL expression. Cheap to share: evaluation takes `&self`.
#[derive(Debug, Clone)]
pub struct Expression {
    source: Box<str>,
    root: Node,
}

impl Expression {
    /// Compiles an expression as the specification defines it: only syntax
    /// errors are rejected. A call to an unknown function compiles and
    /// evaluates to `false` with a missing-function error.
    pub fn parse(source: &str) -> Result<Self, ParseError> {
        Self::build(source, false)
    }

    /// Compiles an expression for use as a filter, rejecting besides syntax
    /// errors what could never evaluate without error or to a boolean: calls
    /// to unknown functions or with the wrong number of arguments, and an
    /// expression whose result is always an integer or a string.
    pub fn parse_strict(source: &str) -> Result<Self, ParseError> {
        Self::build(source, true)
    }

    fn build(source: &str, strict: bool) -> Result<Self, ParseError> {
        let ast = parser::parse(source)?;
        let root = compile::compile(&ast, strict)?;
        Ok(Expression {
            source: source.into(),
            root,
        })
    }

    /// The source text the expression was compiled from.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// Evaluates the expression against one event, collecting every error.
    pub fn evaluate<A: Attributes + ?Sized>(&self, event: &A) -> Evaluation {
        let mut sink = Sink::collecting();
        let value = self.root.eval(event, &mut sink).into_value();
        Evaluation {
            value,
            errors: sink.into_errors(),
        }
    }

    /// Evaluates the expression as a filter: it matches when the value is
    /// `true` and no error occurred (CESQL §1.2). Error details are not
    /// built, so this allocates nothing on the common paths.
    pub fn matches<A: Attributes + ?Sized>(&self, event: &A) -> MatchOutcome {
        let mut sink = Sink::counting();
        let value = self.root.eval(event, &mut sink);
        let errored = sink.count() > 0;
        MatchOutcome {
            matched: !errored && value.is_true(),
            errored,
        }
    }

    /// The `attribute = 'string literal'` terms of the expression's
    /// top-level conjunction (`a AND b AND ...`): every event the expression
    /// matches has each such attribute, and its string form equals the
    /// literal. `'literal' = attribute` counts only for the string-typed
    /// context attributes. The list may be empty; it never claims more than
    /// the expression implies.
    pub fn exact_requirements(&self) -> Vec<(&str, &str)> {
        let mut out = Vec::new();
        self.root.exact_requirements(&mut out);
        out
    }

    /// The attribute keys the expression reads, in order of first use.
    pub fn attributes(&self) -> Vec<&AttrKey> {
        let mut out = Vec::new();
        self.root.attributes(&mut out);
        out
    }
}

impl fmt::Display for Expression {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.source)
    }
}

#[cfg(test)]
mod tests;
