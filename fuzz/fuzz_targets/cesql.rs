//! Fuzzes CESQL: the input is compiled as an expression (leniently and
//! strictly) and, when it compiles, evaluated against a fixed event both
//! ways. Nothing may panic or overflow the stack; the filter path must
//! agree with the full evaluation; a strictly compiled expression must
//! never raise a missing-function error.

#![no_main]

use eventmesh_core::{CloudEvent, ExtValue};
use eventmesh_filter::{ErrorKind, Expression, Value};
use libfuzzer_sys::fuzz_target;

fn event() -> CloudEvent {
    let mut ev = CloudEvent {
        id: "1".into(),
        source: "/s".into(),
        ty: "t.created".into(),
        subject: Some("Sub-ject ✓".into()),
        ..CloudEvent::default()
    };
    ev.set_extension("n", ExtValue::Int(-2147483648));
    ev.set_extension("s", ExtValue::Str("42".into()));
    ev.set_extension("b", ExtValue::Bool(true));
    ev
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let strict = Expression::parse_strict(text);
    let Ok(expr) = Expression::parse(text) else {
        assert!(strict.is_err(), "strict accepted what lenient rejected");
        return;
    };
    let ev = event();
    let full = expr.evaluate(&ev);
    let fast = expr.matches(&ev);
    assert_eq!(fast.errored, !full.errors.is_empty());
    assert_eq!(
        fast.matched,
        full.errors.is_empty() && full.value == Value::Bool(true)
    );
    if let Ok(strict) = strict {
        let errors = strict.evaluate(&ev).errors;
        assert!(errors.iter().all(|e| e.kind != ErrorKind::MissingFunction));
    }
});
