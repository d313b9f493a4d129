//! Walking the compiled tree against an event.
//!
//! Invariants worth naming:
//! - Evaluation is total: every node yields a value, whatever happens.
//! - A node learns that an operand failed by the error count rising while
//!   the operand was evaluated ([`operand`]); it then yields its zero value
//!   and adds nothing (the "errored operand" rule in the module docs above).
//! - Strings stay borrowed from the event or the compiled literals unless an
//!   operation builds a new one (a cast of an integer to a string for a
//!   function argument, `CONCAT`, `LOWER`...). Comparisons cast through
//!   stack buffers.
//! - [`Sink::counting`] never formats a message: filters only need to know
//!   whether an error happened.

use std::borrow::Cow;

use crate::attributes::{AttrValue, Attributes};

use super::cast::{eq_as, eq_const, to_bool, to_int, with_str};
use super::compile::{ArithOp, Const, InSet, Node, Type};
use super::functions;
use super::{ErrorKind, EvalError, Value};

/// A value during evaluation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Val<'a> {
    Bool(bool),
    Int(i32),
    Str(Cow<'a, str>),
}

impl Val<'_> {
    pub(crate) fn is_true(&self) -> bool {
        matches!(self, Val::Bool(true))
    }

    pub(crate) fn into_value(self) -> Value {
        match self {
            Val::Bool(b) => Value::Bool(b),
            Val::Int(i) => Value::Int(i),
            Val::Str(s) => Value::Str(s.into_owned()),
        }
    }
}

/// Where errors go: counted always, kept with their messages on request.
pub(crate) struct Sink {
    count: usize,
    errors: Option<Vec<EvalError>>,
}

impl Sink {
    /// Keeps every error with its message.
    pub(crate) fn collecting() -> Self {
        Sink {
            count: 0,
            errors: Some(Vec::new()),
        }
    }

    /// Only counts errors.
    pub(crate) fn counting() -> Self {
        Sink {
            count: 0,
            errors: None,
        }
    }

    pub(crate) fn count(&self) -> usize {
        self.count
    }

    pub(crate) fn push(&mut self, kind: ErrorKind, message: impl FnOnce() -> String) {
        self.count += 1;
        if let Some(errors) = &mut self.errors {
            errors.push(EvalError {
                kind,
                message: message(),
            });
        }
    }

    pub(crate) fn into_errors(self) -> Vec<EvalError> {
        self.errors.unwrap_or_default()
    }
}

/// Evaluates an operand; `None` when it raised an error.
#[inline]
pub(crate) fn operand<'a, A: Attributes + ?Sized>(
    node: &'a Node,
    event: &'a A,
    sink: &mut Sink,
) -> Option<Val<'a>> {
    let before = sink.count;
    let v = node.eval(event, sink);
    (sink.count == before).then_some(v)
}

fn attr_val(v: AttrValue<'_>) -> Val<'_> {
    match v {
        AttrValue::Str(s) => Val::Str(Cow::Borrowed(s)),
        AttrValue::Bool(b) => Val::Bool(b),
        // An integer outside the CESQL range is not a CESQL integer; like
        // any value of another type it is represented as a string.
        AttrValue::Int(i) => match i32::try_from(i) {
            Ok(i) => Val::Int(i),
            Err(_) => Val::Str(Cow::Owned(i.to_string())),
        },
    }
}

fn math_error(sink: &mut Sink, what: impl FnOnce() -> String) {
    sink.push(ErrorKind::Math, what);
}

fn arith(op: ArithOp, a: i32, b: i32, sink: &mut Sink) -> i32 {
    let checked = match op {
        ArithOp::Add => a.checked_add(b),
        ArithOp::Sub => a.checked_sub(b),
        ArithOp::Mul => a.checked_mul(b),
        ArithOp::Div | ArithOp::Mod if b == 0 => {
            math_error(sink, || format!("division by zero in {a} {} 0", symbol(op)));
            return 0;
        }
        ArithOp::Div => a.checked_div(b),
        // Only i32::MIN % -1 overflows, and its remainder is 0.
        ArithOp::Mod => Some(a.checked_rem(b).unwrap_or(0)),
    };
    checked.unwrap_or_else(|| {
        math_error(sink, || {
            format!("{a} {} {b} overflows a 32-bit integer", symbol(op))
        });
        let wide = match op {
            ArithOp::Add => i64::from(a) + i64::from(b),
            ArithOp::Sub => i64::from(a) - i64::from(b),
            ArithOp::Mul => i64::from(a) * i64::from(b),
            ArithOp::Div | ArithOp::Mod => i64::from(a) / i64::from(b),
        };
        // Saturate, as ABS does for its one overflowing input.
        wide.clamp(i64::from(i32::MIN), i64::from(i32::MAX)) as i32
    })
}

fn symbol(op: ArithOp) -> &'static str {
    match op {
        ArithOp::Add => "+",
        ArithOp::Sub => "-",
        ArithOp::Mul => "*",
        ArithOp::Div => "/",
        ArithOp::Mod => "%",
    }
}

const FALSE: Val<'static> = Val::Bool(false);

impl Node {
    pub(crate) fn eval<'a, A: Attributes + ?Sized>(
        &'a self,
        ev: &'a A,
        sink: &mut Sink,
    ) -> Val<'a> {
        match self {
            Node::Const(c) => match c {
                Const::Bool(b) => Val::Bool(*b),
                Const::Int(i) => Val::Int(*i),
                Const::Str(s) => Val::Str(Cow::Borrowed(s)),
            },
            Node::Attr(key) => match ev.get_key(key) {
                Some(v) => attr_val(v),
                None => {
                    sink.push(ErrorKind::MissingAttribute, || {
                        format!("the event has no attribute {}", key.name())
                    });
                    FALSE
                }
            },
            Node::Exists(key) => Val::Bool(ev.get_key(key).is_some()),
            Node::Not(e) => match operand(e, ev, sink) {
                Some(v) => Val::Bool(!to_bool(&v, sink)),
                None => FALSE,
            },
            Node::Neg(e) => match operand(e, ev, sink) {
                Some(v) => Val::Int(arith(ArithOp::Sub, 0, to_int(&v, sink), sink)),
                None => Val::Int(0),
            },
            Node::And(l, r) => {
                let Some(l) = operand(l, ev, sink) else {
                    return FALSE;
                };
                if !to_bool(&l, sink) {
                    return FALSE;
                }
                match operand(r, ev, sink) {
                    Some(r) => Val::Bool(to_bool(&r, sink)),
                    None => FALSE,
                }
            }
            Node::Or(l, r) => {
                let Some(l) = operand(l, ev, sink) else {
                    return FALSE;
                };
                if to_bool(&l, sink) {
                    return Val::Bool(true);
                }
                match operand(r, ev, sink) {
                    Some(r) => Val::Bool(to_bool(&r, sink)),
                    None => FALSE,
                }
            }
            Node::Xor(l, r) => match (operand(l, ev, sink), operand(r, ev, sink)) {
                (Some(l), Some(r)) => Val::Bool(to_bool(&l, sink) != to_bool(&r, sink)),
                _ => FALSE,
            },
            Node::Eq {
                left,
                right,
                negated,
            } => match (operand(left, ev, sink), operand(right, ev, sink)) {
                (Some(l), Some(r)) => Val::Bool(eq_as(&r, &l, sink) != *negated),
                _ => FALSE,
            },
            Node::EqConst {
                left,
                right,
                negated,
            } => match operand(left, ev, sink) {
                Some(l) => Val::Bool(eq_const(right, &l, sink) != *negated),
                None => FALSE,
            },
            Node::Compare { op, left, right } => {
                match (operand(left, ev, sink), operand(right, ev, sink)) {
                    (Some(l), Some(r)) => {
                        let (l, r) = (to_int(&l, sink), to_int(&r, sink));
                        Val::Bool(op.apply(l, r))
                    }
                    _ => FALSE,
                }
            }
            Node::CompareConst { op, left, right } => match operand(left, ev, sink) {
                Some(l) => Val::Bool(op.apply(to_int(&l, sink), *right)),
                None => FALSE,
            },
            Node::Arith { op, left, right } => {
                match (operand(left, ev, sink), operand(right, ev, sink)) {
                    (Some(l), Some(r)) => {
                        let (l, r) = (to_int(&l, sink), to_int(&r, sink));
                        Val::Int(arith(*op, l, r, sink))
                    }
                    _ => Val::Int(0),
                }
            }
            Node::Like {
                operand: e,
                pattern,
                negated,
            } => match operand(e, ev, sink) {
                Some(v) => Val::Bool(with_str(&v, |s| pattern.matches(s)) != *negated),
                None => FALSE,
            },
            Node::In {
                operand: e,
                set,
                negated,
            } => {
                let Some(v) = operand(e, ev, sink) else {
                    return FALSE;
                };
                match in_set(&v, set, ev, sink) {
                    Some(found) => Val::Bool(found != *negated),
                    None => FALSE,
                }
            }
            Node::Call { func, args } => functions::call(*func, args, ev, sink),
            Node::MissingFunction { name, arity } => {
                sink.push(ErrorKind::MissingFunction, || {
                    format!("there is no function {name} taking {arity} argument(s)")
                });
                FALSE
            }
        }
    }
}

/// Whether `v` equals an element of the set, each element cast to `v`'s
/// type; `None` when an element raised an error. Elements are tried in
/// order and the search stops at the first equal one.
fn in_set<'a, A: Attributes + ?Sized>(
    v: &Val<'_>,
    set: &'a InSet,
    ev: &'a A,
    sink: &mut Sink,
) -> Option<bool> {
    match set {
        InSet::Consts { items, sorted } => Some(match v {
            Val::Str(s) => match sorted {
                Some(sorted) => sorted.binary_search_by(|x| (**x).cmp(s)).is_ok(),
                None => items.iter().any(|c| *c.text == **s),
            },
            Val::Int(i) => items.iter().any(|c| {
                let n = c.int.unwrap_or_else(|| {
                    sink.push(ErrorKind::Cast, || {
                        format!("cannot cast the string {:?} to an integer", c.text)
                    });
                    0
                });
                n == *i
            }),
            Val::Bool(b) => items.iter().any(|c| {
                let x = c.boolean.unwrap_or_else(|| {
                    sink.push(ErrorKind::Cast, || {
                        format!("cannot cast {:?} to a boolean", c.text)
                    });
                    false
                });
                x == *b
            }),
        }),
        InSet::Exprs(items) => {
            for item in items.iter() {
                let x = operand(item, ev, sink)?;
                if eq_as(v, &x, sink) {
                    return Some(true);
                }
            }
            Some(false)
        }
    }
}

/// The zero value of a type, for functions that must yield one.
pub(crate) fn zero(ty: Type) -> Val<'static> {
    match ty {
        Type::Bool => FALSE,
        Type::Int => Val::Int(0),
        Type::Str => Val::Str(Cow::Borrowed("")),
    }
}
