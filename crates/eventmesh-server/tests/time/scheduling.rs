//! Scheduled delivery: events with a `deliverat` or `deliverafter` still
//! ahead are acknowledged at once, held back, and delivered no earlier
//! than their time, across a kill -9; listed and cancelled by id.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use reqwest::Method;
use serde_json::{json, Value};

use crate::common::hook::{start_hook, Hook, HookMode};
use crate::common::topics::{admin, try_publish_batch};
use crate::common::*;
use eventmesh_core::time::{format_rfc3339_ms, now_ms, parse_rfc3339_ms};

/// Publishes a batch; the answers.
async fn publish_all(c: &reqwest::Client, s: &Server, topic: &str, batch: &[Value]) -> Vec<Value> {
    let (status, body) = try_publish_batch(c, s, topic, batch).await;
    assert_eq!(status, 202, "{body}");
    serde_json::from_str(&body).unwrap()
}

/// Per event id, when the hook first got it and the `deliverat` it carried.
fn received(hook: &Hook) -> BTreeMap<String, (u64, Option<u64>)> {
    let h = hook.lock().unwrap();
    let mut out = BTreeMap::new();
    for ((id, _, _), (headers, at)) in h.accepted.iter().zip(h.headers.iter().zip(&h.received_ms)) {
        let due = headers
            .get("ce-deliverat")
            .and_then(|v| v.to_str().ok())
            .map(|t| parse_rfc3339_ms(&percent_decode(t)).unwrap());
        out.entry(id.clone()).or_insert((*at, due));
    }
    out
}

fn percent_decode(v: &str) -> String {
    let b = v.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = (b[i] == b'%' && i + 2 < b.len())
            .then(|| u8::from_str_radix(&v[i + 1..i + 3], 16).ok())
            .flatten();
        match hex {
            Some(byte) => {
                out.push(byte);
                i += 3;
            }
            None => {
                out.push(b[i]);
                i += 1;
            }
        }
    }
    String::from_utf8(out).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn held_back_events_come_at_their_time_across_a_kill() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(dir.path(), &["eventmesh.topic.default.partitions=4"]);
    held_back_across_a_kill(s).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn held_back_events_come_at_their_time_across_a_kill_on_jetstream() {
    let nats = eventmesh_jetstream::testutil::NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start_with(
        dir.path(),
        &[
            "eventmesh.storage.type=jetstream".to_string(),
            format!("eventmesh.storage.jetstream.servers={}", nats.url()),
            "eventmesh.storage.jetstream.timeout.ms=5000".to_string(),
            "eventmesh.topic.default.partitions=4".to_string(),
        ],
    );
    held_back_across_a_kill(s).await;
}

/// 10,000 events due over ten seconds, the runtime killed -9 halfway and
/// started again on its data: each delivered, none before its time; one
/// due after a `deliverafter`; one cancelled and never delivered.
async fn held_back_across_a_kill(mut s: Server) {
    let c = client();
    let (url, hook) = start_hook(HookMode::Accept).await;
    subscribe(
        &c,
        &s,
        json!({"clientId": "w", "topic": "later", "group": "g", "url": url}),
    )
    .await;

    // Bad schedules are refused, naming the attribute.
    for (bad, why) in [
        (json!({"deliverat": "tomorrow"}), "deliverat"),
        (json!({"deliverafter": "P1M"}), "deliverafter"),
        (json!({"deliverafter": 30}), "deliverafter"),
        (
            json!({"deliverat": "2030-01-01T00:00:00Z", "deliverafter": "PT1S"}),
            "deliverat and deliverafter",
        ),
    ] {
        let mut e = event("bad");
        for (k, v) in bad.as_object().unwrap() {
            e[k] = v.clone();
        }
        let r = c
            .post(s.url("/events/publish?topic=later"))
            .header("content-type", "application/cloudevents+json")
            .body(e.to_string())
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 400, "{bad}");
        let v: Value = r.json().await.unwrap();
        assert_eq!(v["error"], "invalid_event", "{v}");
        assert!(v["message"].as_str().unwrap().starts_with(why), "{v}");
    }

    // 10,000 events due over ten seconds, the first six seconds from now
    // (after every publish), one due three seconds after its publish, and
    // one to be cancelled.
    let start = now_ms() + 6_000;
    let mut want = Vec::new();
    for chunk in 0..50u64 {
        let batch: Vec<Value> = (0..200u64)
            .map(|i| {
                let n = chunk * 200 + i;
                let mut e = event(&format!("s{n}"));
                e["deliverat"] = json!(format_rfc3339_ms(start + n));
                want.push(format!("s{n}"));
                e
            })
            .collect();
        let answers = publish_all(&c, &s, "later", &batch).await;
        assert_eq!(answers[0]["offset"], 0, "{}", answers[0]);
        assert_eq!(
            parse_rfc3339_ms(answers[0]["scheduledFor"].as_str().unwrap()),
            Ok(start + chunk * 200)
        );
    }
    let mut after = event("after-3s");
    after["deliverafter"] = json!("PT3S");
    let published_after = now_ms();
    publish(&c, &s, "later", &after).await;
    want.push("after-3s".into());
    let mut doomed = event("cancel-me");
    doomed["deliverat"] = json!(format_rfc3339_ms(start + 8_000));
    publish(&c, &s, "later", &doomed).await;
    // Not held back: delivered at once.
    publish(&c, &s, "later", &event("now")).await;
    want.push("now".into());
    want.sort();

    let detail: Value = admin_json(&c, &s, "/admin/topics/later").await;
    assert_eq!(
        detail["scheduled"]["count"], 10_002,
        "{}",
        detail["scheduled"]
    );
    // The first due: s0, or the one three seconds after its publish when
    // the publishes took more than three seconds.
    let next = parse_rfc3339_ms(detail["scheduled"]["nextDue"].as_str().unwrap()).unwrap();
    let after_due = published_after + 3_000..=now_ms() + 3_000;
    assert!(
        next == start || (after_due.contains(&next) && next < start),
        "{}",
        detail["scheduled"]
    );
    let first: Vec<Value> = admin_json(&c, &s, "/admin/topics/later/scheduled?max=3").await;
    let ids: Vec<&str> = first.iter().map(|e| e["id"].as_str().unwrap()).collect();
    if next == start {
        assert_eq!(ids, ["s0", "s1", "s2"]);
    } else {
        assert_eq!(ids, ["after-3s", "s0", "s1"]);
    }
    let (st, v) = admin(
        &c,
        &s,
        Method::DELETE,
        "/admin/topics/later/scheduled/cancel-me",
        None,
    )
    .await;
    assert_eq!((st, &v["cancelled"]), (200, &json!(1)), "{v}");
    let (st, v) = admin(
        &c,
        &s,
        Method::DELETE,
        "/admin/topics/later/scheduled/cancel-me",
        None,
    )
    .await;
    assert_eq!(
        (st, v["error"].as_str()),
        (404, Some("unknown_scheduled_event")),
        "{v}"
    );

    // Killed while about half are released; started again on its data.
    while now_ms() < start + 5_000 {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    s.kill9();
    let released = received(&hook).len();
    eprintln!("kill -9 five seconds into the schedule, {released} delivered by then");
    let s = s.restart();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let got = received(&hook);
        if want.iter().all(|id| got.contains_key(id)) {
            break;
        }
        if Instant::now() >= deadline {
            // What the runtime complained of.
            let log = s.log_text();
            let warned: Vec<&str> = log
                .lines()
                .filter(|l| l.contains(" WARN "))
                .take(20)
                .collect();
            eprintln!("{}", warned.join("\n"));
        }
        assert!(
            Instant::now() < deadline,
            "{} of {} delivered",
            want.iter().filter(|id| got.contains_key(*id)).count(),
            want.len()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let got = received(&hook);
    let ids: Vec<&String> = got.keys().collect();
    assert_eq!(
        ids,
        want.iter().collect::<Vec<_>>(),
        "cancel-me never comes"
    );
    // None before its time.
    let mut late = Vec::new();
    for (id, (at, due)) in &got {
        let due = match id.as_str() {
            "now" => continue,
            "after-3s" => published_after + 3_000,
            _ => due.unwrap(),
        };
        assert!(*at >= due, "{id} came {} ms early", due - at);
        late.push(at - due);
    }
    late.sort_unstable();
    eprintln!(
        "lateness of {} held-back events, kill -9 included: p50 {} ms, p99 {} ms, max {} ms",
        late.len(),
        late[late.len() / 2],
        late[late.len() * 99 / 100],
        late[late.len() - 1]
    );
    let detail: Value = admin_json(&c, &s, "/admin/topics/later").await;
    assert_eq!(detail["scheduled"], json!({"count": 0}));
}
