//! Type casts (CESQL 1.0 §3.7), implicit and explicit.
//!
//! | from → to          | rule                                                  |
//! | ------------------ | ----------------------------------------------------- |
//! | integer → string   | decimal, `-` for negatives                             |
//! | boolean → string   | `true` / `false`                                       |
//! | string → integer   | optional `+`/`-`, decimal digits, 32-bit; else `0` + error |
//! | boolean → integer  | `1` / `0`                                              |
//! | string → boolean   | `true`/`false` in any case; else `false` + error       |
//! | integer → boolean  | explicit (`BOOL`): `0` is `false`; implicit: `false` + error |
//!
//! Casting to a string never fails and, through [`with_str`], never
//! allocates.

use std::borrow::Cow;

use crate::attributes::int_str;

use super::compile::{Const, ConstCasts};
use super::eval::{Sink, Val};
use super::ErrorKind;

pub(crate) fn parse_int(s: &str) -> Option<i32> {
    // `i32::from_str` takes exactly an optional sign and decimal digits.
    s.parse::<i32>().ok()
}

pub(crate) fn parse_bool(s: &str) -> Option<bool> {
    if s.eq_ignore_ascii_case("true") {
        Some(true)
    } else if s.eq_ignore_ascii_case("false") {
        Some(false)
    } else {
        None
    }
}

fn cast_error(sink: &mut Sink, s: &str, to: &str) {
    sink.push(ErrorKind::Cast, || {
        format!("cannot cast the string {s:?} to {to}")
    });
}

/// Casts to an integer; a failed cast yields `0` and a cast error.
pub(crate) fn to_int(v: &Val<'_>, sink: &mut Sink) -> i32 {
    match v {
        Val::Int(i) => *i,
        Val::Bool(b) => i32::from(*b),
        Val::Str(s) => parse_int(s).unwrap_or_else(|| {
            cast_error(sink, s, "an integer");
            0
        }),
    }
}

/// The implicit cast to a boolean an operator applies; integers do not
/// convert (a cast error and `false`).
pub(crate) fn to_bool(v: &Val<'_>, sink: &mut Sink) -> bool {
    match v {
        Val::Bool(b) => *b,
        Val::Str(s) => parse_bool(s).unwrap_or_else(|| {
            cast_error(sink, s, "a boolean");
            false
        }),
        Val::Int(i) => {
            sink.push(ErrorKind::Cast, || {
                format!("an integer ({i}) is not implicitly a boolean; use BOOL({i})")
            });
            false
        }
    }
}

/// The explicit cast `BOOL(x)`: integers convert, `0` being `false`.
pub(crate) fn to_bool_explicit(v: &Val<'_>, sink: &mut Sink) -> bool {
    match v {
        Val::Int(i) => *i != 0,
        other => to_bool(other, sink),
    }
}

/// Casts to a string, keeping borrowed strings borrowed.
pub(crate) fn into_str(v: Val<'_>) -> Cow<'_, str> {
    match v {
        Val::Str(s) => s,
        Val::Bool(b) => Cow::Borrowed(if b { "true" } else { "false" }),
        Val::Int(i) => Cow::Owned(i.to_string()),
    }
}

/// Calls `f` with the value's string form, without allocating.
pub(crate) fn with_str<R>(v: &Val<'_>, f: impl FnOnce(&str) -> R) -> R {
    match v {
        Val::Str(s) => f(s),
        Val::Bool(b) => f(if *b { "true" } else { "false" }),
        Val::Int(i) => {
            let mut buf = [0u8; 20];
            f(int_str(i64::from(*i), &mut buf))
        }
    }
}

/// `other` cast to `target`'s type, compared with `target`.
pub(crate) fn eq_as(target: &Val<'_>, other: &Val<'_>, sink: &mut Sink) -> bool {
    match target {
        Val::Str(t) => with_str(other, |o| o == &**t),
        Val::Int(t) => to_int(other, sink) == *t,
        Val::Bool(t) => to_bool(other, sink) == *t,
    }
}

/// `other` cast to the literal's type, compared with it.
pub(crate) fn eq_const(target: &Const, other: &Val<'_>, sink: &mut Sink) -> bool {
    match target {
        Const::Str(t) => with_str(other, |o| o == &**t),
        Const::Int(t) => to_int(other, sink) == *t,
        Const::Bool(t) => to_bool(other, sink) == *t,
    }
}

/// A literal's integer value, when the cast succeeds.
pub(crate) fn const_to_int(c: &Const) -> Option<i32> {
    match c {
        Const::Int(i) => Some(*i),
        Const::Bool(b) => Some(i32::from(*b)),
        Const::Str(s) => parse_int(s),
    }
}

/// A literal cast ahead of time to each type (`None` where the implicit
/// cast fails).
pub(crate) fn const_casts(c: &Const) -> ConstCasts {
    let (text, boolean): (Box<str>, Option<bool>) = match c {
        Const::Str(s) => (s.clone(), parse_bool(s)),
        Const::Int(i) => (i.to_string().into(), None),
        Const::Bool(b) => (b.to_string().into(), Some(*b)),
    };
    ConstCasts {
        text,
        int: const_to_int(c),
        boolean,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn string_to_integer_accepts_a_sign_and_digits_only() {
        assert_eq!(parse_int("42"), Some(42));
        assert_eq!(parse_int("+42"), Some(42));
        assert_eq!(parse_int("-2147483648"), Some(i32::MIN));
        assert_eq!(parse_int("2147483648"), None);
        assert_eq!(parse_int(" 1"), None);
        assert_eq!(parse_int("1.0"), None);
        assert_eq!(parse_int(""), None);
        assert_eq!(parse_int("-"), None);
        assert_eq!(parse_int("0x10"), None);
    }

    #[test]
    fn string_to_boolean_ignores_case_only() {
        assert_eq!(parse_bool("TRUE"), Some(true));
        assert_eq!(parse_bool("fAlSe"), Some(false));
        assert_eq!(parse_bool("yes"), None);
        assert_eq!(parse_bool(" true"), None);
    }

    #[test]
    fn failed_casts_yield_zero_values_and_errors() {
        let mut sink = Sink::collecting();
        assert_eq!(to_int(&Val::Str("x".into()), &mut sink), 0);
        assert!(!to_bool(&Val::Str("x".into()), &mut sink));
        assert!(!to_bool(&Val::Int(3), &mut sink));
        assert!(to_bool_explicit(&Val::Int(3), &mut sink));
        let errors = sink.into_errors();
        assert_eq!(errors.len(), 3);
        assert!(errors.iter().all(|e| e.kind == ErrorKind::Cast));
        assert_eq!(
            errors[0].message,
            "cannot cast the string \"x\" to an integer"
        );
    }

    #[test]
    fn literal_casts_are_precomputed() {
        let c = const_casts(&Const::Str("true".into()));
        assert_eq!(
            c,
            ConstCasts {
                text: "true".into(),
                int: None,
                boolean: Some(true)
            }
        );
        let c = const_casts(&Const::Int(-5));
        assert_eq!(
            c,
            ConstCasts {
                text: "-5".into(),
                int: Some(-5),
                boolean: None
            }
        );
    }
}
