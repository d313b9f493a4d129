//! Single-thread throughput of filter evaluation against a decoded
//! CloudEvent.
//!
//! ```text
//! cargo run --release --example cesql_bench -p eventmesh-filter [-- SECONDS_PER_CASE]
//! ```
//!
//! Each case runs for about the given time (0.5 s by default) after a short
//! warm-up, and prints evaluations per second of the filter path
//! (`matches`, which builds no error messages) for CESQL expressions and
//! for a Subscriptions API filter list, plus compilations per second.

use std::hint::black_box;
use std::time::{Duration, Instant};

use eventmesh_core::{CloudEvent, ExtValue};
use eventmesh_filter::{compile, Expression, FilterJson};

fn event() -> CloudEvent {
    let mut ev = CloudEvent {
        id: "5b1c4f0e-8a9d-4a43-9a38-0f1e2c3d4e5f".into(),
        source: "/shop/eu-west/orders".into(),
        ty: "order.created".into(),
        datacontenttype: Some("application/json".into()),
        subject: Some("Customer-42".into()),
        time: Some("2024-05-01T12:00:00Z".into()),
        ..CloudEvent::default()
    };
    for (name, value) in [
        ("amount", ExtValue::Int(250)),
        ("region", ExtValue::Str("eu".into())),
        ("firstname", ExtValue::Str("Francesco".into())),
        ("lastname", ExtValue::Str("Guardiani".into())),
        ("sequence", ExtValue::Int(10)),
        ("hop", ExtValue::Int(3)),
        ("ttl", ExtValue::Int(10)),
        ("partitionkey", ExtValue::Str("customer-42".into())),
    ] {
        ev.set_extension(name, value);
    }
    ev
}

/// Runs `f` repeatedly for about `budget`; returns calls per second.
fn rate(budget: Duration, mut f: impl FnMut() -> bool) -> (f64, bool) {
    let mut last = false;
    let warm = Instant::now();
    while warm.elapsed() < budget / 10 {
        last = f();
    }
    let start = Instant::now();
    let mut calls = 0u64;
    while start.elapsed() < budget {
        for _ in 0..1024 {
            last = black_box(f());
        }
        calls += 1024;
    }
    (calls as f64 / start.elapsed().as_secs_f64(), last)
}

fn main() {
    let seconds: f64 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(0.5);
    let budget = Duration::from_secs_f64(seconds);
    let ev = event();

    let expressions = [
        "type = 'order.created' AND amount > 100",
        "type LIKE 'order.%' AND source LIKE '%/eu-%'",
        "subject LIKE 'Cust_mer-%2'",
        "region IN ('us', 'eu', 'apac', 'latam')",
        "EXISTS subject AND NOT EXISTS expiry",
        "(firstname = 'Francesco' AND lastname = 'Guardiani') OR subject = 'Francesco Guardiani'",
        "sequence = 10 AND hop < ttl",
        "LOWER(subject) = 'customer-42'",
        "LENGTH(id) = 36 AND SUBSTRING(type, 1, 5) = 'order'",
        "CONCAT(type, ':', region) = 'order.created:eu'",
        "amount * 2 + 1 > 400 AND amount % 7 <> 0",
        "missing = 'x' OR type = 'order.created'",
    ];
    println!("single thread, {seconds} s per case, decoded CloudEvent");
    println!("{:>14}  {:>7}  expression", "evals/s", "result");
    for src in expressions {
        let expr = Expression::parse(src).expect("valid expression");
        let (per_sec, matched) = rate(budget, || black_box(&expr).matches(black_box(&ev)).matched);
        println!("{per_sec:>14.0}  {matched:>7}  {src}");
    }

    let filters: Vec<FilterJson> = serde_json::from_str(
        r#"[{"exact": {"type": "order.created"}},
            {"prefix": {"source": "/shop/"}},
            {"any": [{"suffix": {"subject": "-42"}}, {"sql": "amount > 1000"}]}]"#,
    )
    .expect("filters JSON");
    let filter = compile(&filters).expect("valid filters");
    let (per_sec, matched) = rate(budget, || {
        black_box(&filter).matches(black_box(&ev)).matched
    });
    println!("{per_sec:>14.0}  {matched:>7}  filters: exact type, prefix source, any(suffix subject, sql)");

    let src = "type = 'order.created' AND amount > 100";
    let (per_sec, _) = rate(budget, || Expression::parse_strict(black_box(src)).is_ok());
    println!("{per_sec:>14.0}  {:>7}  compilations of: {src}", "-");
}
