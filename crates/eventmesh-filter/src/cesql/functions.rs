//! The built-in functions (CESQL 1.0 §3.5) and the casting functions.
//!
//! A function is bound at compile time by its upper-cased name and its
//! arity; each has fixed parameter types (or takes any type, for the
//! casting functions), and its arguments are cast to them before the call.
//! If evaluating an argument raised an error, the call yields the zero value
//! of the function's return type without running it.
//!
//! Strings are indexed by Unicode scalar value, from 1.

use std::borrow::Cow;

use crate::attributes::Attributes;

use super::cast::{self, into_str, to_bool_explicit, to_int};
use super::compile::{Node, Type};
use super::eval::{zero, Sink, Val};
use super::ErrorKind;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Builtin {
    Length,
    Concat,
    ConcatWs,
    Lower,
    Upper,
    Trim,
    Left,
    Right,
    Substring,
    SubstringLen,
    Abs,
    Int,
    Bool,
    String,
    IsInt,
    IsBool,
}

impl Builtin {
    /// The function of that (upper-case) name taking `arity` arguments.
    pub(crate) fn resolve(name: &str, arity: usize) -> Option<Self> {
        use Builtin::*;
        Some(match (name, arity) {
            ("LENGTH", 1) => Length,
            ("CONCAT", _) => Concat,
            ("CONCAT_WS", n) if n >= 1 => ConcatWs,
            ("LOWER", 1) => Lower,
            ("UPPER", 1) => Upper,
            ("TRIM", 1) => Trim,
            ("LEFT", 2) => Left,
            ("RIGHT", 2) => Right,
            ("SUBSTRING", 2) => Substring,
            ("SUBSTRING", 3) => SubstringLen,
            ("ABS", 1) => Abs,
            ("INT", 1) => Int,
            ("BOOL", 1) => Bool,
            ("STRING", 1) => String,
            ("IS_INT", 1) => IsInt,
            ("IS_BOOL", 1) => IsBool,
            _ => return None,
        })
    }

    pub(crate) fn return_type(self) -> Type {
        use Builtin::*;
        match self {
            Length | Abs | Int => Type::Int,
            Bool | IsInt | IsBool => Type::Bool,
            Concat | ConcatWs | Lower | Upper | Trim | Left | Right | Substring | SubstringLen
            | String => Type::Str,
        }
    }
}

/// Evaluates a call.
pub(crate) fn call<'a, A: Attributes + ?Sized>(
    func: Builtin,
    args: &'a [Node],
    ev: &'a A,
    sink: &mut Sink,
) -> Val<'a> {
    let before = sink.count();
    if matches!(func, Builtin::Concat | Builtin::ConcatWs) {
        let parts: Vec<Val<'a>> = args.iter().map(|a| a.eval(ev, sink)).collect();
        if sink.count() != before {
            return zero(Type::Str);
        }
        let mut parts = parts.into_iter().map(into_str);
        let sep = match func {
            Builtin::ConcatWs => parts.next().unwrap_or_default(),
            _ => Cow::Borrowed(""),
        };
        let mut out = String::new();
        for (i, p) in parts.enumerate() {
            if i > 0 {
                out.push_str(&sep);
            }
            out.push_str(&p);
        }
        return Val::Str(Cow::Owned(out));
    }
    let mut vals = [Val::Bool(false), Val::Bool(false), Val::Bool(false)];
    for (slot, arg) in vals.iter_mut().zip(args) {
        *slot = arg.eval(ev, sink);
    }
    if sink.count() != before {
        return zero(func.return_type());
    }
    let [a, b, c] = vals;
    apply(func, a, b, c, sink)
}

fn fn_error(sink: &mut Sink, message: impl FnOnce() -> String) {
    sink.push(ErrorKind::FunctionEvaluation, message);
}

fn str_arg(v: Val<'_>) -> Cow<'_, str> {
    into_str(v)
}

/// Byte offset of the `n`th character (0-based) of `s`, or `s.len()`.
fn char_offset(s: &str, n: usize) -> usize {
    s.char_indices().nth(n).map_or(s.len(), |(i, _)| i)
}

/// A sub-slice of a string argument, still borrowed if the argument was.
fn slice(s: Cow<'_, str>, start: usize, end: usize) -> Cow<'_, str> {
    match s {
        Cow::Borrowed(b) => Cow::Borrowed(&b[start..end]),
        Cow::Owned(o) => Cow::Owned(o[start..end].to_owned()),
    }
}

fn char_len(s: &str) -> usize {
    s.chars().count()
}

fn apply<'a>(func: Builtin, a: Val<'a>, b: Val<'a>, c: Val<'a>, sink: &mut Sink) -> Val<'a> {
    match func {
        Builtin::Length => {
            let s = str_arg(a);
            Val::Int(i32::try_from(char_len(&s)).unwrap_or(i32::MAX))
        }
        Builtin::Lower => {
            let s = str_arg(a);
            if s.bytes().all(|b| b.is_ascii() && !b.is_ascii_uppercase()) {
                Val::Str(s)
            } else {
                Val::Str(Cow::Owned(s.to_lowercase()))
            }
        }
        Builtin::Upper => {
            let s = str_arg(a);
            if s.bytes().all(|b| b.is_ascii() && !b.is_ascii_lowercase()) {
                Val::Str(s)
            } else {
                Val::Str(Cow::Owned(s.to_uppercase()))
            }
        }
        Builtin::Trim => {
            let s = str_arg(a);
            let start = s.len() - s.trim_start().len();
            let end = start + s[start..].trim_end().len();
            Val::Str(slice(s, start, end))
        }
        Builtin::Left | Builtin::Right => {
            let s = str_arg(a);
            let n = to_int(&b, sink);
            let Ok(n) = usize::try_from(n) else {
                let name = if func == Builtin::Left {
                    "LEFT"
                } else {
                    "RIGHT"
                };
                fn_error(sink, || format!("{name} needs a length >= 0, not {n}"));
                return Val::Str(s);
            };
            let len = char_len(&s);
            if n >= len {
                return Val::Str(s);
            }
            let (start, end) = if func == Builtin::Left {
                (0, char_offset(&s, n))
            } else {
                (char_offset(&s, len - n), s.len())
            };
            Val::Str(slice(s, start, end))
        }
        Builtin::Substring | Builtin::SubstringLen => {
            let s = str_arg(a);
            let pos = to_int(&b, sink);
            let len = if func == Builtin::SubstringLen {
                Some(to_int(&c, sink))
            } else {
                None
            };
            substring(s, pos, len, sink)
        }
        Builtin::Abs => {
            let n = to_int(&a, sink);
            Val::Int(n.checked_abs().unwrap_or_else(|| {
                sink.push(ErrorKind::Math, || {
                    format!("ABS({n}) overflows a 32-bit integer")
                });
                i32::MAX
            }))
        }
        Builtin::Int => Val::Int(to_int(&a, sink)),
        Builtin::Bool => Val::Bool(to_bool_explicit(&a, sink)),
        Builtin::String => Val::Str(into_str(a)),
        Builtin::IsInt => Val::Bool(match &a {
            Val::Str(s) => cast::parse_int(s).is_some(),
            Val::Int(_) | Val::Bool(_) => true,
        }),
        Builtin::IsBool => Val::Bool(match &a {
            Val::Str(s) => cast::parse_bool(s).is_some(),
            Val::Int(_) | Val::Bool(_) => true,
        }),
        // Variadic; handled by `call`.
        Builtin::Concat | Builtin::ConcatWs => zero(Type::Str),
    }
}

/// `SUBSTRING(s, pos)` and `SUBSTRING(s, pos, len)`.
fn substring<'a>(s: Cow<'a, str>, pos: i32, len: Option<i32>, sink: &mut Sink) -> Val<'a> {
    let total = i64::try_from(char_len(&s)).unwrap_or(i64::MAX);
    let p = i64::from(pos);
    if p > total || p < -total {
        fn_error(sink, || {
            format!("SUBSTRING position {pos} is outside a string of {total} characters")
        });
        return zero(Type::Str);
    }
    if let Some(l) = len.filter(|l| *l < 0) {
        fn_error(sink, || format!("SUBSTRING needs a length >= 0, not {l}"));
        return zero(Type::Str);
    }
    if p == 0 {
        return zero(Type::Str);
    }
    // 0-based index of the first character.
    let first = if p > 0 { p - 1 } else { total + p };
    let last = match len {
        Some(l) => (first + i64::from(l)).min(total),
        None => total,
    };
    // Both are within 0..=total, which came from a usize.
    let (first, last) = (first as usize, last as usize);
    let start = char_offset(&s, first);
    let end = start + char_offset(&s[start..], last - first);
    Val::Str(slice(s, start, end))
}
