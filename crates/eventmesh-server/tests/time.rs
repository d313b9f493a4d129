//! Time in the log through the real binary. Per-event expiry: the
//! CloudEvents `expirytime` extension checked at publish, expired events
//! read past and counted (with and without filters), a topic's time to
//! live for events without one, and an event that expires while it is
//! being retried dead-lettered with the reason `expired`. Replay (in
//! `time/replay.rs`): a group's offsets reset to a time, the beginning,
//! an offset or the end, and `from` a time on subscribe. Members that
//! leave (in `time/members.rs`): a pulling member away past the member
//! timeout hands its share to the others and rejoins when it polls.
//! Scheduled delivery (in `time/scheduling.rs`): events held back until
//! their `deliverat` or `deliverafter`, across a kill -9, listed and
//! cancelled.

mod common;
#[path = "time/members.rs"]
mod members;
#[path = "time/replay.rs"]
mod replay;
#[path = "time/scheduling.rs"]
mod scheduling;

use std::time::{Duration, SystemTime};

use common::hook::{start_hook, HookMode};
use common::topics::admin;
use common::*;
use reqwest::Method;
use serde_json::{json, Value};

const WAIT: Duration = Duration::from_secs(15);

/// An RFC 3339 timestamp `from_now` ahead (or behind, negative) of now,
/// and the moment it is.
fn stamp(from_now_ms: i64) -> (String, SystemTime) {
    let now = SystemTime::now();
    let at = if from_now_ms >= 0 {
        now + Duration::from_millis(from_now_ms as u64)
    } else {
        now - Duration::from_millis(from_now_ms.unsigned_abs())
    };
    let t: chrono::DateTime<chrono::Utc> = at.into();
    (t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true), at)
}

fn event(id: &str, expiry: Option<&str>) -> Value {
    let mut e = json!({"specversion": "1.0", "id": id, "source": "/x", "type": "t"});
    if let Some(t) = expiry {
        e["expirytime"] = json!(t);
    }
    e
}

/// Waits until the clock is past `at`.
async fn until_past(at: SystemTime) {
    if let Ok(left) = at.duration_since(SystemTime::now()) {
        tokio::time::sleep(left + Duration::from_millis(50)).await;
    }
}

async fn refused(c: &reqwest::Client, s: &Server, body: Vec<u8>, binary: bool) -> (u16, Value) {
    let mut r = c.post(s.url("/events/publish?topic=x"));
    r = if binary {
        r.header("ce-specversion", "1.0")
            .header("ce-id", "b1")
            .header("ce-source", "/x")
            .header("ce-type", "t")
            .header("ce-expirytime", "next tuesday")
            .header("content-type", "text/plain")
    } else {
        r.header("content-type", "application/cloudevents+json")
    };
    let r = r.body(body).send().await.unwrap();
    (r.status().as_u16(), r.json().await.unwrap())
}

#[tokio::test]
async fn an_expirytime_that_does_not_parse_is_refused_at_publish() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(dir.path(), &[]);
    let c = client();
    for bad in [json!("tomorrow"), json!("2026-13-01T00:00:00Z"), json!(17)] {
        let mut e = event("e1", None);
        e["expirytime"] = bad.clone();
        let (status, v) = refused(&c, &s, serde_json::to_vec(&e).unwrap(), false).await;
        assert_eq!(
            (status, v["error"].as_str()),
            (400, Some("invalid_event")),
            "{bad}: {v}"
        );
        assert!(
            v["message"].as_str().unwrap().starts_with("expirytime"),
            "{v}"
        );
    }
    let (status, v) = refused(&c, &s, b"hello".to_vec(), true).await;
    assert_eq!(
        (status, v["error"].as_str()),
        (400, Some("invalid_event")),
        "{v}"
    );
    // In a batch, the whole batch is refused.
    let batch = json!([event("ok", None), event("bad", Some("later"))]);
    let r = c
        .post(s.url("/events/publish-batch?topic=x"))
        .header("content-type", "application/cloudevents-batch+json")
        .body(batch.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 400);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["error"], "invalid_event");
    let msg = v["message"].as_str().unwrap();
    assert!(msg.contains("[1]") && msg.contains("expirytime"), "{msg}");
    // Nothing was stored.
    let topics: Vec<Value> = admin_json(&c, &s, "/admin/topics").await;
    assert!(topics.iter().all(|t| t["name"] != "x"), "{topics:?}");
}

/// A server whose log is on the NATS server given.
fn on_jetstream(
    dir: &tempfile::TempDir,
    nats: &eventmesh_jetstream::testutil::NatsServer,
) -> Server {
    Server::start_with(
        dir.path(),
        &[
            "eventmesh.storage.type=jetstream".to_string(),
            format!("eventmesh.storage.jetstream.servers={}", nats.url()),
            "eventmesh.storage.jetstream.timeout.ms=2000".to_string(),
        ],
    )
}

#[tokio::test]
async fn expired_events_are_read_past_and_counted() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(dir.path(), &[]);
    read_past_and_counted(&s).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expired_events_are_read_past_and_counted_on_jetstream() {
    let nats = eventmesh_jetstream::testutil::NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let s = on_jetstream(&dir, &nats);
    read_past_and_counted(&s).await;
}

/// Five events, three of them expired by the time two groups (one with a
/// filter) read them: both get the other two, count three expired, and
/// move their offsets past all five.
async fn read_past_and_counted(s: &Server) {
    let c = client();
    let (past, _) = stamp(-60_000);
    let (near, near_at) = stamp(1_000);
    let (later, _) = stamp(3_600_000);
    let events = [
        event("e1", Some(&past)),
        event("e2", None),
        event("e3", Some(&later)),
        event("e4", Some(&near)),
        event("e5", Some("2000-01-01T00:00:00+02:00")),
    ];
    for e in &events {
        publish(&c, s, "x", e).await;
    }
    // e4 expires before anyone reads it.
    until_past(near_at).await;
    // One group without filters, one with (read through the sieve).
    subscribe(
        &c,
        s,
        json!({"clientId": "plain-1", "topic": "x", "group": "plain", "from": "earliest"}),
    )
    .await;
    subscribe(
        &c,
        s,
        json!({"clientId": "picky-1", "topic": "x", "group": "picky", "from": "earliest",
               "filters": [{"exact": {"type": "t"}}]}),
    )
    .await;
    for client in ["plain-1", "picky-1"] {
        let got = poll_n(&c, s, client, 2, WAIT).await;
        assert_eq!(polled_ids(&got), ["e2", "e3"], "{client}");
        for d in &got {
            assert_eq!(ack(&c, s, d["deliveryId"].as_str().unwrap()).await, 200);
        }
        assert!(poll_n(&c, s, client, 1, Duration::from_millis(500))
            .await
            .is_empty());
    }
    // Both groups' offsets move past all five.
    assert!(caught_up(&c, s, "x", WAIT).await);
    let m = metrics(&c, s).await;
    for group in ["plain", "picky"] {
        let key = format!(r#"eventmesh_expired_total{{topic="x",group="{group}"}}"#);
        assert_eq!(m.get(&key), 3.0, "{key}");
    }
    assert_eq!(
        m.get(r#"eventmesh_filter_skipped_total{topic="x",group="picky"}"#),
        0.0,
        "expired is not skipped by the filter"
    );
    assert_eq!(m.get("eventmesh_pending_deliveries"), 0.0);
}

#[tokio::test]
async fn an_event_that_expires_in_a_mailbox_is_never_handed_out() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(dir.path(), &[]);
    let c = client();
    subscribe(
        &c,
        &s,
        json!({"clientId": "late-1", "topic": "mb", "group": "late"}),
    )
    .await;
    // Both go to the client's mailbox at once; it polls after e1 expired.
    let (soon, soon_at) = stamp(1_000);
    publish(&c, &s, "mb", &event("e1", Some(&soon))).await;
    publish(&c, &s, "mb", &event("e2", None)).await;
    until_past(soon_at).await;
    let got = poll_n(&c, &s, "late-1", 1, WAIT).await;
    assert_eq!(got.len(), 1);
    assert_eq!(got[0]["event"]["id"], "e2");
    assert_eq!(
        ack(&c, &s, got[0]["deliveryId"].as_str().unwrap()).await,
        200
    );
    assert!(poll_n(&c, &s, "late-1", 1, Duration::from_millis(500))
        .await
        .is_empty());
    assert!(caught_up(&c, &s, "mb", WAIT).await);
    let m = metrics(&c, &s).await;
    assert_eq!(
        m.get(r#"eventmesh_expired_total{topic="mb",group="late"}"#),
        1.0
    );
    assert_eq!(m.get("eventmesh_dead_letters_total"), 0.0);
    assert_eq!(m.get("eventmesh_pending_deliveries"), 0.0);
}

#[tokio::test]
async fn an_event_that_expires_while_retried_is_dead_lettered_as_expired() {
    let dir = tempfile::tempdir().unwrap();
    // Attempts enough to outlast the event.
    let s = Server::start(dir.path(), &["eventmesh.delivery.max.attempts=1000"]);
    let c = client();
    let (hook_url, hook) = start_hook(HookMode::Refuse).await;
    subscribe(
        &c,
        &s,
        json!({"clientId": "w", "topic": "x", "group": "hooks", "url": hook_url}),
    )
    .await;
    let (soon, _) = stamp(1_500);
    publish(&c, &s, "x", &event("e1", Some(&soon))).await;
    publish(&c, &s, "x", &event("e2", None)).await;
    // e1 is dead-lettered once it expires; e2 (no expiry) is still retried.
    let deadline = std::time::Instant::now() + WAIT;
    let dlq: Vec<Value> = loop {
        let dlq: Vec<Value> = admin_json(&c, &s, "/admin/dlq/browse?topic=x").await;
        if !dlq.is_empty() {
            break dlq;
        }
        assert!(std::time::Instant::now() < deadline, "no dead letter");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(dlq.len(), 1, "{dlq:?}");
    assert_eq!(dlq[0]["lastError"], "expired");
    let stored: Value = serde_json::from_str(dlq[0]["eventJson"].as_str().unwrap()).unwrap();
    assert_eq!(stored["id"], "e1");
    assert!(
        hook.lock().unwrap().attempts_of("e1") >= 1,
        "it was tried before it expired"
    );
    let m = metrics(&c, &s).await;
    assert_eq!(
        m.get(r#"eventmesh_expired_total{topic="x",group="hooks"}"#),
        1.0
    );
    assert_eq!(m.get("eventmesh_dead_letters_total"), 1.0);
}

#[tokio::test]
async fn a_topic_time_to_live_expires_events_without_their_own() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(dir.path(), &[]);
    time_to_live(&s).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_topic_time_to_live_on_jetstream() {
    let nats = eventmesh_jetstream::testutil::NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let s = on_jetstream(&dir, &nats);
    time_to_live(&s).await;
}

/// A topic made with `ttlMs` 1,000: an event without `expirytime`
/// published more than a second before it is read is not delivered; one
/// with its own later `expirytime`, and one published just before, are.
/// Then the time to live is changed and refused as the API says.
async fn time_to_live(s: &Server) {
    let c = client();
    for bad in [json!(0), json!(-5), json!("1s"), json!(1.5)] {
        let (status, v) = admin(
            &c,
            s,
            Method::POST,
            "/admin/topics",
            Some(json!({"name": "ttl", "ttlMs": bad})),
        )
        .await;
        assert_eq!(
            (status, v["error"].as_str()),
            (400, Some("invalid_request")),
            "{bad}: {v}"
        );
    }
    let (status, v) = admin(
        &c,
        s,
        Method::POST,
        "/admin/topics",
        Some(json!({"name": "ttl", "ttlMs": 1000})),
    )
    .await;
    assert_eq!(status, 201, "{v}");
    assert_eq!(v["ttlMs"], 1000);
    let (later, _) = stamp(3_600_000);
    let (_, stale_at) = stamp(1_000);
    publish(&c, s, "ttl", &event("old", None)).await;
    publish(&c, s, "ttl", &event("kept", Some(&later))).await;
    until_past(stale_at).await;
    publish(&c, s, "ttl", &event("fresh", None)).await;
    subscribe(
        &c,
        s,
        json!({"clientId": "t-1", "topic": "ttl", "group": "t", "from": "earliest"}),
    )
    .await;
    let got = poll_n(&c, s, "t-1", 2, WAIT).await;
    assert_eq!(polled_ids(&got), ["fresh", "kept"]);
    for d in &got {
        assert_eq!(ack(&c, s, d["deliveryId"].as_str().unwrap()).await, 200);
    }
    assert!(caught_up(&c, s, "ttl", WAIT).await);
    let m = metrics(&c, s).await;
    assert_eq!(
        m.get(r#"eventmesh_expired_total{topic="ttl",group="t"}"#),
        1.0
    );

    // Changed, shown, and refused with a clear error.
    let patch = |body: Value| admin(&c, s, Method::PATCH, "/admin/topics/ttl", Some(body));
    let (status, v) = patch(json!({"ttlMs": 60000})).await;
    assert_eq!((status, v["ttlMs"].as_u64()), (200, Some(60000)), "{v}");
    let (status, v) = admin(&c, s, Method::GET, "/admin/topics/ttl", None).await;
    assert_eq!((status, v["ttlMs"].as_u64()), (200, Some(60000)), "{v}");
    let (status, v) = patch(json!({"ttlMs": null})).await;
    assert_eq!((status, &v["ttlMs"]), (200, &Value::Null), "{v}");
    for bad in [
        json!({"ttlMs": 0}),
        json!({"ttlMs": "soon"}),
        json!({}),
        json!({"ttl": 5}),
    ] {
        let (status, v) = patch(bad.clone()).await;
        assert_eq!(
            (status, v["error"].as_str()),
            (400, Some("invalid_request")),
            "{bad}: {v}"
        );
    }
    let (status, v) = admin(
        &c,
        s,
        Method::PATCH,
        "/admin/topics/nope",
        Some(json!({"ttlMs": 5})),
    )
    .await;
    assert_eq!(status, 404, "{v}");
}
