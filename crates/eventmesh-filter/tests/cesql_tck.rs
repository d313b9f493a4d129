//! Runs every case of the CESQL 1.0 conformance kit (the YAML files under
//! `shared/conformance/cesql-tck`, next to the repository) against the
//! evaluator.
//!
//! A case has an `expression`, an optional `event` (a whole event) or
//! `eventOverrides` (attributes laid over a default event), and an expected
//! `result` and/or `error` kind. An expected `parse` error means compiling
//! must fail; any other expected error must be the one error the evaluation
//! reports, next to the expected result. Every case must pass, and at least
//! one must have been found.

use std::path::Path;

use eventmesh_core::CloudEvent;
use eventmesh_filter::{Expression, Value};
use serde::Deserialize;
use serde_json::{json, Map, Value as Json};
use serde_norway::Value as Yaml;

const KIT: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../../shared/conformance/cesql-tck"
);

#[derive(Deserialize)]
struct Suite {
    name: String,
    tests: Vec<Case>,
}

#[derive(Deserialize)]
struct Case {
    name: String,
    expression: String,
    result: Option<Yaml>,
    error: Option<String>,
    event: Option<Yaml>,
    #[serde(rename = "eventOverrides")]
    event_overrides: Option<Yaml>,
}

/// Any valid event will do where a case gives none (the kit's README).
fn default_event() -> Map<String, Json> {
    let Json::Object(m) = json!({
        "specversion": "1.0",
        "id": "tck-default",
        "source": "/tck",
        "type": "tck.default",
    }) else {
        unreachable!()
    };
    m
}

fn to_json(y: &Yaml) -> Result<Json, String> {
    Ok(match y {
        Yaml::Null => Json::Null,
        Yaml::Bool(b) => Json::Bool(*b),
        Yaml::Number(n) => match n.as_i64() {
            Some(i) => Json::from(i),
            None => return Err(format!("non-integer number {n:?}")),
        },
        Yaml::String(s) => Json::String(s.clone()),
        Yaml::Mapping(m) => {
            let mut out = Map::new();
            for (k, v) in m {
                let Yaml::String(k) = k else {
                    return Err(format!("non-string key {k:?}"));
                };
                out.insert(k.clone(), to_json(v)?);
            }
            Json::Object(out)
        }
        other => return Err(format!("unsupported YAML value {other:?}")),
    })
}

fn event_of(case: &Case) -> Result<CloudEvent, String> {
    let attrs = match (&case.event, &case.event_overrides) {
        (Some(e), _) => to_json(e)?,
        (None, overrides) => {
            let mut m = default_event();
            if let Some(o) = overrides {
                let Json::Object(o) = to_json(o)? else {
                    return Err("eventOverrides is not a mapping".into());
                };
                m.extend(o);
            }
            Json::Object(m)
        }
    };
    CloudEvent::from_json_value(attrs).map_err(|e| format!("invalid event: {e}"))
}

fn expected_value(y: &Yaml) -> Result<Value, String> {
    match y {
        Yaml::Bool(b) => Ok(Value::Bool(*b)),
        Yaml::Number(n) => n
            .as_i64()
            .and_then(|i| i32::try_from(i).ok())
            .map(Value::Int)
            .ok_or_else(|| format!("result {n:?} is not a 32-bit integer")),
        Yaml::String(s) => Ok(Value::Str(s.clone())),
        other => Err(format!("unsupported result {other:?}")),
    }
}

/// Checks one case; `Err` describes the failure.
fn run(case: &Case) -> Result<(), String> {
    if case.error.as_deref() == Some("parse") {
        return match Expression::parse(&case.expression) {
            Err(_) => Ok(()),
            Ok(_) => Err("expected a parse error, but it compiled".into()),
        };
    }
    let expr = Expression::parse(&case.expression).map_err(|e| format!("parse error {e}"))?;
    let event = event_of(case)?;
    let got = expr.evaluate(&event);
    if let Some(expected) = &case.result {
        let expected = expected_value(expected)?;
        if got.value != expected {
            return Err(format!("value {:?}, expected {expected:?}", got.value));
        }
    }
    let kinds: Vec<&str> = got.errors.iter().map(|e| e.kind.as_str()).collect();
    match &case.error {
        Some(kind) if kinds != [kind.as_str()] => {
            return Err(format!("errors {kinds:?}, expected exactly [{kind:?}]"))
        }
        None if !kinds.is_empty() => return Err(format!("unexpected errors {:?}", got.errors)),
        _ => {}
    }
    // The filter path must agree with the full evaluation.
    let outcome = expr.matches(&event);
    let errored = !got.errors.is_empty();
    if outcome.errored != errored || outcome.matched != (!errored && got.value == Value::Bool(true))
    {
        return Err(format!("matches() gave {outcome:?} for {got:?}"));
    }
    Ok(())
}

#[test]
fn every_conformance_case_passes() {
    let dir = Path::new(KIT);
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("cannot read the conformance kit at {}: {e}", dir.display()))
        .map(|entry| entry.expect("directory entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    files.sort();

    let (mut ran, mut failures) = (0usize, Vec::new());
    for file in &files {
        let text = std::fs::read_to_string(file).expect("readable kit file");
        let suite: Suite = serde_norway::from_str(&text)
            .unwrap_or_else(|e| panic!("{}: not a kit file: {e}", file.display()));
        for case in &suite.tests {
            ran += 1;
            if let Err(why) = run(case) {
                failures.push(format!(
                    "{} / {} / {}: `{}`: {why}",
                    file.file_name().unwrap_or_default().to_string_lossy(),
                    suite.name,
                    case.name,
                    case.expression
                ));
            }
        }
    }
    println!(
        "CESQL conformance kit: {} files, {ran} cases run, {} passed, {} failed",
        files.len(),
        ran - failures.len(),
        failures.len()
    );
    assert!(
        ran > 0,
        "no conformance cases found under {}",
        dir.display()
    );
    assert!(
        failures.is_empty(),
        "failing cases:\n{}",
        failures.join("\n")
    );
}
