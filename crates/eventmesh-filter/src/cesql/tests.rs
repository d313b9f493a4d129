//! Unit tests of the language beyond what the conformance kit covers:
//! precedence, overflow, error propagation, casts in both directions,
//! Unicode, limits, strict compilation and the indexing hints.

use eventmesh_core::{CloudEvent, ExtValue};

use super::*;
use crate::attributes::AttrValue;

fn event() -> CloudEvent {
    let mut ev = CloudEvent {
        id: "id-1".into(),
        source: "/shop/eu".into(),
        ty: "order.created".into(),
        subject: Some("日本語".into()),
        ..CloudEvent::default()
    };
    ev.set_extension("amount", ExtValue::Int(250));
    ev.set_extension("textamount", ExtValue::Str("150".into()));
    ev.set_extension("vip", ExtValue::Bool(true));
    ev.set_extension("big", ExtValue::Int(1 << 40));
    ev
}

/// The value and the error kinds of one evaluation against [`event`].
fn eval(src: &str) -> (Value, Vec<&'static str>) {
    let expr = Expression::parse(src).unwrap_or_else(|e| panic!("{src}: {e}"));
    let got = expr.evaluate(&event());
    let kinds = got.errors.iter().map(|e| e.kind.as_str()).collect();
    (got.value, kinds)
}

fn ok(src: &str, want: Value) {
    assert_eq!(eval(src), (want, vec![]), "{src}");
}

fn err(src: &str, want: Value, kinds: &[&str]) {
    assert_eq!(eval(src), (want, kinds.to_vec()), "{src}");
}

fn b(v: bool) -> Value {
    Value::Bool(v)
}

fn i(v: i32) -> Value {
    Value::Int(v)
}

fn s(v: &str) -> Value {
    Value::Str(v.into())
}

fn parse_err(src: &str) -> ParseError {
    Expression::parse(src).expect_err(src)
}

#[test]
fn precedence_follows_the_specification_table() {
    ok("1 + 2 * 3", i(7));
    ok("2 - 1 - 1", i(0));
    ok("8 / 2 / 2", i(2));
    ok("-4 * 2", i(-8));
    ok("7 % 4 * 2", i(6));
    ok("1 + 1 = 2", b(true));
    // One level for AND, OR and XOR, grouped left to right.
    ok("true OR false AND false", b(false));
    ok("true OR (false AND false)", b(true));
    ok("false AND false OR true", b(true));
    ok("true XOR true OR true", b(true));
    // NOT binds tighter than comparisons: (NOT true) = false.
    ok("NOT true = false", b(true));
    // LIKE binds tighter than NOT IN, which binds tighter than AND.
    ok("type LIKE 'order.%' IN (true) AND true", b(true));
    ok("NOT EXISTS time AND EXISTS subject", b(true));
}

#[test]
fn integer_overflow_saturates_with_a_math_error() {
    err("2147483647 + 1", i(i32::MAX), &["math"]);
    err("-2147483648 - 1", i(i32::MIN), &["math"]);
    err("65536 * 65536", i(i32::MAX), &["math"]);
    err("65536 * -65536", i(i32::MIN), &["math"]);
    err("-(-2147483648)", i(i32::MAX), &["math"]);
    err("-2147483648 / -1", i(i32::MAX), &["math"]);
    ok("-2147483648 % -1", i(0));
    ok("-7 % 3", i(-1));
    ok("7 % -3", i(1));
    ok("-7 / 2", i(-3));
    err("ABS(-2147483648) + 1", i(0), &["math"]);
}

#[test]
fn integer_literals_are_32_bit() {
    ok("-2147483648", i(i32::MIN));
    ok("+5", i(5));
    ok("5 -1", i(4));
    ok("- 3", i(-3));
    let e = parse_err("1 + 2147483648");
    assert_eq!(e.position, 4);
    assert_eq!(
        e.message,
        "integer literal 2147483648 is outside the 32-bit range -2147483648..=2147483647"
    );
    assert_eq!(parse_err("-2147483649").position, 0);
    assert_eq!(parse_err("99999999999999999999999").position, 0);
    assert_eq!(
        parse_err("+amount").message,
        "'+' is only allowed as the sign of an integer literal"
    );
}

#[test]
fn an_errored_operand_yields_the_zero_value() {
    err("missing OR true", b(false), &["missingAttribute"]);
    err("true AND missing", b(false), &["missingAttribute"]);
    err("missing XOR true", b(false), &["missingAttribute"]);
    err("missing != 'x'", b(false), &["missingAttribute"]);
    err("NOT (missing = 'x')", b(false), &["missingAttribute"]);
    err("LENGTH(missing)", i(0), &["missingAttribute"]);
    err("CONCAT('a', missing)", s(""), &["missingAttribute"]);
    err("UPPER(missing)", s(""), &["missingAttribute"]);
    err("missing IN ('a')", b(false), &["missingAttribute"]);
    err("missing NOT IN ('a')", b(false), &["missingAttribute"]);
    err("'a' IN (missing, 'a')", b(false), &["missingAttribute"]);
    ok("'a' IN ('a', missing)", b(true));
    err("missing NOT LIKE 'x'", b(false), &["missingAttribute"]);
    err("LEFT('abc', 1 / 0)", s(""), &["math"]);
    err(
        "other + missing",
        i(0),
        &["missingAttribute", "missingAttribute"],
    );
    ok("EXISTS missing", b(false));
    ok("false AND missing", b(false));
    ok("true OR missing", b(true));
}

#[test]
fn equality_casts_the_left_operand_to_the_right_type() {
    ok("'10' = 10", b(true));
    ok("10 = '10'", b(true));
    ok("10 = '010'", b(false));
    ok("'010' = 10", b(true));
    ok("TRUE = 1", b(true));
    err("1 = TRUE", b(false), &["cast"]);
    err("'x' = 1", b(false), &["cast"]);
    ok("amount = '250'", b(true));
    ok("amount = 250", b(true));
    ok("vip = 'true'", b(true));
    ok("vip = TRUE", b(true));
    ok("textamount = 150", b(true));
    ok("type = source", b(false));
    ok("amount = textamount", b(false));
    ok("textamount = amount - 100", b(true));
}

#[test]
fn ordering_and_arithmetic_cast_to_integers() {
    ok("amount > 100", b(true));
    ok("100 < amount", b(true));
    ok("textamount > 100", b(true));
    ok("textamount >= '150'", b(true));
    ok("amount <= textamount", b(false));
    ok("vip + 1", i(2));
    err("'abc' < 'abd'", b(false), &["cast", "cast"]);
    err("type < 1", b(true), &["cast"]);
    // An integer attribute beyond 32 bits is a string.
    ok("big = '1099511627776'", b(true));
    err("big + 1", i(1), &["cast"]);
}

#[test]
fn in_sets_cast_elements_to_the_left_type() {
    err("1 IN ('a', '1')", b(true), &["cast"]);
    ok("1 IN ('1', 'a')", b(true));
    ok("'1' IN (1)", b(true));
    ok("vip IN ('TRUE')", b(true));
    err("vip IN (1)", b(false), &["cast"]);
    ok("source IN (id, '/shop/eu')", b(true));
    ok("amount IN (textamount, 250)", b(true));
    ok("amount NOT IN (1, 2, 3)", b(true));
    let many: Vec<String> = (0..40).map(|n| format!("'t{n}'")).collect();
    let set = many.join(", ");
    ok(&format!("'t39' IN ({set})"), b(true));
    ok(&format!("'t40' IN ({set})"), b(false));
    ok(&format!("type NOT IN ({set})"), b(true));
    let ints: Vec<String> = (0..40).map(|n| n.to_string()).collect();
    ok(&format!("39 IN ({})", ints.join(", ")), b(true));
    ok(&format!("'7' IN ({})", ints.join(", ")), b(true));
    assert_eq!(parse_err("a IN ()").position, 6);
}

#[test]
fn like_casts_its_operand_to_a_string() {
    ok("amount LIKE '2_0'", b(true));
    ok("vip LIKE 'tr%'", b(true));
    ok("type LIKE 'order.%'", b(true));
    ok("type LIKE '%created'", b(true));
    ok("type LIKE '%der.cr%'", b(true));
    ok("type NOT LIKE 'order._reated'", b(false));
    ok("subject LIKE '日_語'", b(true));
    assert_eq!(
        parse_err("type LIKE type").message,
        "the pattern of LIKE must be a string literal, found identifier type"
    );
}

#[test]
fn string_functions_count_characters() {
    ok("LENGTH(subject)", i(3));
    ok("LEFT(subject, 2)", s("日本"));
    ok("RIGHT(subject, 1)", s("語"));
    ok("SUBSTRING(subject, 2)", s("本語"));
    ok("SUBSTRING(subject, -2, 1)", s("本"));
    ok("SUBSTRING('abc', 3)", s("c"));
    ok("SUBSTRING('abc', -3, 2)", s("ab"));
    ok("SUBSTRING('abc', 2, 0)", s(""));
    ok("SUBSTRING('abc', 2, 99)", s("bc"));
    ok("SUBSTRING('', 0)", s(""));
    err("SUBSTRING('abc', 2, -1)", s(""), &["functionEvaluation"]);
    err("SUBSTRING('abc', 'x')", s(""), &["cast"]);
    ok("UPPER('straße')", s("STRASSE"));
    ok("LOWER('ÀB')", s("àb"));
    ok("TRIM('\u{2003} a b\t\n')", s("a b"));
    ok("CONCAT(1, TRUE, 'x')", s("1truex"));
    ok("CONCAT_WS('-', type, amount)", s("order.created-250"));
    ok("LENGTH(amount)", i(3));
    ok("lower(TYPE) = 'order.created'", b(true));
    err("RIGHT('abc', -1)", s("abc"), &["functionEvaluation"]);
}

#[test]
fn casting_functions() {
    ok("INT('+7')", i(7));
    ok("INT(textamount) + 1", i(151));
    err("INT('7 ')", i(0), &["cast"]);
    ok("BOOL('FaLsE')", b(false));
    ok("STRING(amount)", s("250"));
    ok("STRING(vip)", s("true"));
    ok("IS_INT('12')", b(true));
    ok("IS_INT('1.5')", b(false));
    ok("IS_INT(TRUE)", b(true));
    ok("IS_INT(textamount)", b(true));
    ok("IS_BOOL('False')", b(true));
    ok("IS_BOOL('no')", b(false));
    ok("IS_BOOL(0)", b(true));
    err("IS_BOOL(missing)", b(false), &["missingAttribute"]);
}

#[test]
fn unknown_functions_fail_at_evaluation_or_strictly_at_compile_time() {
    err("FOO(1)", b(false), &["missingFunction"]);
    err("LEFT('a')", b(false), &["missingFunction"]);
    err("NOT FOO()", b(false), &["missingFunction"]);
    let e = Expression::parse_strict("type = 'a' AND left('a')").unwrap_err();
    assert_eq!(e.position, 15);
    assert_eq!(e.message, "there is no function LEFT taking 1 argument");
    let e = Expression::parse_strict("FOO(1, 2)").unwrap_err();
    assert_eq!(e.message, "there is no function FOO taking 2 arguments");
}

#[test]
fn strict_compilation_wants_a_boolean_result() {
    let e = Expression::parse_strict("amount + 1").unwrap_err();
    assert_eq!(
        e.message,
        "the expression always yields an integer; a filter needs a boolean"
    );
    let e = Expression::parse_strict("LOWER(type)").unwrap_err();
    assert_eq!(
        e.message,
        "the expression always yields a string; a filter needs a boolean"
    );
    assert!(Expression::parse_strict("vip").is_ok());
    assert!(Expression::parse_strict("BOOL(amount)").is_ok());
    assert!(Expression::parse("amount + 1").is_ok());
}

#[test]
fn syntax_errors_have_positions_and_messages() {
    let cases: [(&str, usize, &str); 10] = [
        ("", 0, "expected an expression, found end of input"),
        ("type = ", 7, "expected an expression, found end of input"),
        (
            "(type = 'a'",
            11,
            "expected ')' to close the '(' at 0, found end of input",
        ),
        (
            "'a' 'b'",
            4,
            "unexpected string 'b' after a complete expression",
        ),
        (
            "type NOT 'a'",
            5,
            "expected LIKE or IN after NOT, found string 'a'",
        ),
        (
            "my_ext = 1",
            0,
            "my_ext is not an attribute name: names are letters and digits only",
        ),
        (
            "f1(2)",
            0,
            "f1 is not a function name: names are letters and '_' only",
        ),
        ("CONCAT('a',)", 11, "expected an expression, found ')'"),
        (
            "x IN ('a' 'b')",
            10,
            "expected ',' or ')' in the IN set opened at 5, found string 'b'",
        ),
        (
            "EXISTS 'a'",
            7,
            "EXISTS must be followed by an attribute name, found string 'a'",
        ),
    ];
    for (src, position, message) in cases {
        assert_eq!(
            parse_err(src),
            ParseError {
                position,
                message: message.into()
            },
            "{src}"
        );
    }
    assert_eq!(
        parse_err("subject = '日本' AND ?").to_string(),
        "at character 19: unexpected character '?'"
    );
}

#[test]
fn depth_is_bounded() {
    let deep = format!("{}true{}", "(".repeat(300), ")".repeat(300));
    assert_eq!(
        parse_err(&deep).message,
        format!("expression is nested deeper than {MAX_DEPTH} levels")
    );
    let chain = vec!["true"; 300].join(" AND ");
    assert_eq!(
        parse_err(&chain).message,
        format!("expression is nested deeper than {MAX_DEPTH} levels")
    );
    let fine = vec!["amount > 1"; 150].join(" AND ");
    ok(&fine, b(true));
    let nots = format!("{}true", "NOT ".repeat(150));
    ok(&nots, b(true));
}

#[test]
fn identifiers_and_keywords_ignore_case() {
    ok("TYPE = 'order.created' and Amount > 100", b(true));
    ok("exists SUBJECT", b(true));
    ok("Vip", b(true));
}

#[test]
fn errors_carry_messages() {
    let got = Expression::parse("missing = 1 / 0")
        .unwrap()
        .evaluate(&event());
    assert_eq!(
        got,
        Evaluation {
            value: Value::Bool(false),
            errors: vec![
                EvalError {
                    kind: ErrorKind::MissingAttribute,
                    message: "the event has no attribute missing".into()
                },
                EvalError {
                    kind: ErrorKind::Math,
                    message: "division by zero in 1 / 0".into()
                }
            ]
        }
    );
    let got = Expression::parse("5 / 0").unwrap().evaluate(&event());
    assert_eq!(
        got.errors[0].to_string(),
        "math error: division by zero in 5 / 0"
    );
}

#[test]
fn matches_needs_true_and_no_error() {
    let ev = event();
    let m = |src: &str| Expression::parse(src).unwrap().matches(&ev);
    let outcome = |matched, errored| MatchOutcome { matched, errored };
    assert_eq!(
        m("type = 'order.created' AND amount > 100"),
        outcome(true, false)
    );
    assert_eq!(m("amount > 1000"), outcome(false, false));
    assert_eq!(m("missing = 1 OR true"), outcome(false, true));
    assert_eq!(m("NOT 10"), outcome(false, true));
    assert_eq!(m("vip"), outcome(true, false));
    assert_eq!(m("'true'"), outcome(false, false));
    let dynamic: &dyn Attributes = &ev;
    assert_eq!(
        Expression::parse("EXISTS vip").unwrap().matches(dynamic),
        outcome(true, false)
    );
}

#[test]
fn exact_requirements_come_from_the_top_level_conjunction() {
    let req = |src: &str| {
        let expr = Expression::parse(src).unwrap();
        expr.exact_requirements()
            .into_iter()
            .map(|(a, v)| (a.to_owned(), v.to_owned()))
            .collect::<Vec<_>>()
    };
    let pair = |a: &str, v: &str| (a.to_owned(), v.to_owned());
    assert_eq!(
        req("type = 'a' AND amount > 1 AND (source = 'b' AND region = 'eu')"),
        vec![pair("type", "a"), pair("source", "b"), pair("region", "eu")]
    );
    assert_eq!(req("'a' = TYPE"), vec![pair("type", "a")]);
    assert_eq!(req("'5' = amount"), vec![]);
    assert_eq!(req("type = 'a' OR type = 'b'"), vec![]);
    assert_eq!(req("type != 'a'"), vec![]);
    assert_eq!(req("amount = 5"), vec![]);
    assert_eq!(req("NOT (type = 'a')"), vec![]);
}

#[test]
fn attributes_lists_the_keys_read() {
    let expr =
        Expression::parse("type = 'a' AND (EXISTS vip OR LOWER(Type) IN (source, 'x'))").unwrap();
    let names: Vec<&str> = expr.attributes().iter().map(|k| k.name()).collect();
    assert_eq!(names, ["type", "vip", "source"]);
}

#[test]
fn works_over_any_attributes_implementation() {
    struct Pairs(Vec<(&'static str, AttrValue<'static>)>);
    impl Attributes for Pairs {
        fn get(&self, name: &str) -> Option<AttrValue<'_>> {
            self.0.iter().find(|(n, _)| *n == name).map(|(_, v)| *v)
        }
    }
    let ev = Pairs(vec![
        ("type", AttrValue::Str("t")),
        ("n", AttrValue::Int(-3)),
        ("flag", AttrValue::Bool(false)),
    ]);
    let got = Expression::parse("type = 't' AND ABS(n) = 3 AND NOT flag")
        .unwrap()
        .evaluate(&ev);
    assert_eq!(got.value, Value::Bool(true));
    assert_eq!(got.errors, vec![]);
}
