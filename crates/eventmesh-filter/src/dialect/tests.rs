//! The filter dialects: matching (absent attributes included), validation
//! errors and the paths they name, the JSON form, and indexing hints.

use eventmesh_core::{CloudEvent, ExtValue};
use serde_json::json;

use super::*;
use crate::cesql::ParseError;

fn event() -> CloudEvent {
    let mut ev = CloudEvent {
        id: "e-1".into(),
        source: "https://github.com/cloudevents/spec".into(),
        ty: "com.github.push".into(),
        subject: Some("refs/heads/main".into()),
        ..CloudEvent::default()
    };
    ev.set_extension("amount", ExtValue::Int(250));
    ev.set_extension("vip", ExtValue::Bool(true));
    ev
}

fn from_json(v: serde_json::Value) -> Vec<FilterJson> {
    serde_json::from_value(v).expect("filters JSON")
}

fn outcome(filters: serde_json::Value) -> MatchOutcome {
    compile(&from_json(filters))
        .expect("valid")
        .matches(&event())
}

fn matched(filters: serde_json::Value) -> bool {
    let o = outcome(filters);
    assert!(!o.errored);
    o.matched
}

fn rejected(filters: serde_json::Value) -> FilterError {
    compile(&from_json(filters)).expect_err("invalid")
}

fn problem(path: &str, problem: FilterProblem) -> FilterError {
    FilterError::new(path, problem)
}

#[test]
fn exact_prefix_and_suffix_need_every_attribute() {
    assert!(matched(json!([{"exact": {"type": "com.github.push"}}])));
    assert!(!matched(json!([{"exact": {"type": "com.github"}}])));
    assert!(matched(json!([{"exact": {
        "type": "com.github.push",
        "subject": "refs/heads/main"
    }}])));
    assert!(!matched(json!([{"exact": {
        "type": "com.github.push",
        "subject": "refs/heads/dev"
    }}])));
    assert!(matched(
        json!([{"prefix": {"type": "com.github.", "source": "https://"}}])
    ));
    assert!(!matched(json!([{"prefix": {"type": "COM."}}])));
    assert!(matched(
        json!([{"suffix": {"type": ".push", "subject": "/main"}}])
    ));
    assert!(!matched(json!([{"suffix": {"type": ".pull"}}])));
    assert!(matched(
        json!([{"exact": {"specversion": "1.0", "id": "e-1"}}])
    ));
}

#[test]
fn an_absent_attribute_does_not_match_and_is_no_error() {
    for dialect in ["exact", "prefix", "suffix"] {
        let o = outcome(json!([{dialect: {"time": "2024"}}]));
        assert_eq!(
            o,
            MatchOutcome {
                matched: false,
                errored: false
            },
            "{dialect}"
        );
    }
    assert!(matched(json!([{"not": {"exact": {"region": "eu"}}}])));
}

#[test]
fn non_string_attributes_compare_by_string_form() {
    assert!(matched(
        json!([{"exact": {"amount": "250", "vip": "true"}}])
    ));
    assert!(matched(json!([{"prefix": {"amount": "2"}}])));
    assert!(matched(json!([{"suffix": {"amount": "50"}}])));
    assert!(!matched(json!([{"exact": {"amount": "0250"}}])));
}

#[test]
fn all_any_and_not_combine() {
    let push = json!({"exact": {"type": "com.github.push"}});
    let pull = json!({"exact": {"type": "com.github.pull"}});
    assert!(matched(
        json!([{"all": [push, {"suffix": {"subject": "main"}}]}])
    ));
    assert!(!matched(json!([{"all": [push, pull]}])));
    assert!(matched(json!([{"any": [pull, push]}])));
    assert!(!matched(json!([{"any": [pull, {"prefix": {"id": "x"}}]}])));
    assert!(matched(json!([{"not": pull}])));
    assert!(!matched(json!([{"not": push}])));
    assert!(matched(json!([{"not": {"not": push}}])));
    assert!(matched(json!([{"any": [{"all": [push, {"not": pull}]}]}])));
}

#[test]
fn the_list_matches_when_every_filter_does() {
    assert!(matched(json!([])));
    assert!(compile(&[]).unwrap().is_match_all());
    assert!(Filter::match_all().matches(&event()).matched);
    assert!(matched(json!([
        {"prefix": {"type": "com.github."}},
        {"sql": "amount > 100 AND vip"}
    ])));
    assert!(!matched(json!([
        {"prefix": {"type": "com.github."}},
        {"sql": "amount > 1000"}
    ])));
}

#[test]
fn sql_errors_do_not_match_and_are_reported() {
    let errored = MatchOutcome {
        matched: false,
        errored: true,
    };
    assert_eq!(outcome(json!([{"sql": "missing = 'x'"}])), errored);
    assert_eq!(outcome(json!([{"sql": "amount / 0 = 0"}])), errored);
    assert_eq!(outcome(json!([{"sql": "type = 1"}])), errored);
    // The failing expression is false, so `not` turns it true.
    assert_eq!(
        outcome(json!([{"not": {"sql": "missing = 'x'"}}])),
        MatchOutcome {
            matched: true,
            errored: true
        }
    );
    // Short-circuiting: the erroring filter is never reached.
    assert_eq!(
        outcome(json!([{"exact": {"type": "other"}}, {"sql": "missing = 'x'"}])),
        MatchOutcome {
            matched: false,
            errored: false
        }
    );
    assert_eq!(
        outcome(json!([{"any": [{"sql": "missing"}, {"exact": {"id": "e-1"}}]}])),
        MatchOutcome {
            matched: true,
            errored: true
        }
    );
}

#[test]
fn validation_names_the_path_at_fault() {
    assert_eq!(
        rejected(json!([{}])),
        problem("filters[0]", FilterProblem::NoDialect)
    );
    assert_eq!(
        rejected(json!([{"exact": {"type": "a"}}, {"regex": "a.*"}])),
        problem("filters[1]", FilterProblem::UnknownDialect("regex".into()))
    );
    assert_eq!(
        rejected(json!([{"exact": {"type": "a"}, "prefix": {"type": "b"}}])),
        problem(
            "filters[0]",
            FilterProblem::SeveralDialects(vec!["exact".into(), "prefix".into()])
        )
    );
    assert_eq!(
        rejected(json!([{"exact": {}}])),
        problem(
            "filters[0].exact",
            FilterProblem::NoAttributes { dialect: "exact" }
        )
    );
    assert_eq!(
        rejected(json!([{"prefix": "com."}])),
        problem(
            "filters[0].prefix",
            FilterProblem::NotAnAttributeMap { dialect: "prefix" }
        )
    );
    assert_eq!(
        rejected(json!([{"suffix": {"type": 5}}])),
        problem("filters[0].suffix.type", FilterProblem::NotAString)
    );
    assert_eq!(
        rejected(json!([{"exact": {"type": ""}}])),
        problem("filters[0].exact.type", FilterProblem::EmptyValue)
    );
    assert_eq!(
        rejected(json!([{"exact": {"Type": "a"}}])),
        problem(
            "filters[0].exact",
            FilterProblem::BadAttributeName("Type".into())
        )
    );
    assert_eq!(
        rejected(json!([{"exact": {"": "a"}}])),
        problem(
            "filters[0].exact",
            FilterProblem::BadAttributeName("".into())
        )
    );
    assert_eq!(
        rejected(json!([{"all": []}])),
        problem(
            "filters[0].all",
            FilterProblem::EmptyArray { dialect: "all" }
        )
    );
    assert_eq!(
        rejected(json!([{"any": {"exact": {"type": "a"}}}])),
        problem(
            "filters[0].any",
            FilterProblem::NotAnArray { dialect: "any" }
        )
    );
    assert_eq!(
        rejected(json!([{"all": [{"exact": {"type": "a"}}, "x"]}])),
        problem("filters[0].all[1]", FilterProblem::NotAnObject)
    );
    assert_eq!(
        rejected(json!([{"not": [{"exact": {"type": "a"}}]}])),
        problem("filters[0].not", FilterProblem::NotAnObject)
    );
    assert_eq!(
        rejected(json!([{"sql": true}])),
        problem("filters[0].sql", FilterProblem::SqlNotAString)
    );
}

#[test]
fn sql_errors_carry_path_and_position() {
    let e = rejected(json!([
        {"exact": {"type": "a"}},
        {"all": [{"sql": "type = 'a' AND subject LIKE 5"}]}
    ]));
    assert_eq!(
        e,
        problem(
            "filters[1].all[0].sql",
            FilterProblem::Sql(ParseError {
                position: 28,
                message: "the pattern of LIKE must be a string literal, found integer 5".into()
            })
        )
    );
    assert_eq!(e.position(), Some(28));
    assert_eq!(
        e.to_string(),
        "filters[1].all[0].sql: invalid CESQL expression at character 28: \
         the pattern of LIKE must be a string literal, found integer 5"
    );
    assert_eq!(e.code(), "invalid_filter");
    let e = rejected(json!([{"any": [{"exact": {"id": "x"}}, {"not": {"sql": "NOPE(1)"}}]}]));
    assert_eq!(e.path, "filters[0].any[1].not.sql");
    assert_eq!(e.position(), Some(0));
    let e = rejected(json!([{"sql": "amount * 2"}]));
    assert_eq!(e.path, "filters[0].sql");
}

#[test]
fn nesting_is_bounded() {
    let mut f = json!({"exact": {"type": "a"}});
    for _ in 0..=MAX_FILTER_DEPTH {
        f = json!({"not": f});
    }
    let e = compile(&[serde_json::from_value(f).unwrap()]).unwrap_err();
    assert_eq!(e.problem, FilterProblem::TooDeep(MAX_FILTER_DEPTH));
    assert_eq!(e.path.matches(".not").count(), MAX_FILTER_DEPTH + 1);
}

#[test]
fn json_form_round_trips_and_builders_agree() {
    let text = r#"[{"exact":{"type":"a"}},{"all":[{"prefix":{"source":"/x"}},{"not":{"sql":"vip"}}]},{"any":[{"suffix":{"id":"1"}}]}]"#;
    let parsed: Vec<FilterJson> = serde_json::from_str(text).unwrap();
    let built = vec![
        FilterJson::exact([("type", "a")]),
        FilterJson::all(vec![
            FilterJson::prefix([("source", "/x")]),
            FilterJson::negate(FilterJson::sql("vip")),
        ]),
        FilterJson::any(vec![FilterJson::suffix([("id", "1")])]),
    ];
    assert_eq!(parsed, built);
    assert_eq!(serde_json::to_string(&built).unwrap(), text);
    assert!(serde_json::from_str::<Vec<FilterJson>>("[1]").is_err());
}

#[test]
fn exact_requirements_for_indexing() {
    let filter = compile(&from_json(json!([
        {"exact": {"type": "com.github.push", "subject": "main"}},
        {"all": [{"exact": {"source": "/s"}}, {"prefix": {"id": "x"}}]},
        {"sql": "region = 'eu' AND amount > 1"},
        {"any": [{"exact": {"id": "1"}}]},
        {"not": {"exact": {"id": "2"}}},
        {"sql": "type = 'a' OR type = 'b'"}
    ])))
    .unwrap();
    assert_eq!(
        filter.exact_requirements(),
        vec![
            ("subject", "main"),
            ("type", "com.github.push"),
            ("source", "/s"),
            ("region", "eu"),
        ]
    );
    assert_eq!(Filter::match_all().exact_requirements(), vec![]);
}

#[test]
fn matches_through_a_trait_object() {
    let filter = compile(&[FilterJson::exact([("type", "com.github.push")])]).unwrap();
    let ev = event();
    let dynamic: &dyn Attributes = &ev;
    assert!(filter.matches(dynamic).matched);
}
