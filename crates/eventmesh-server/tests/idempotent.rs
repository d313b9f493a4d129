//! Idempotent publishing, end to end on both log backends: a publish that
//! repeats an event's `source` and `id` within the window is stored once and
//! answered with the first one's place, across a restart of `eventmesh`
//! (graceful, or SIGKILL right after the answer) and inside batches; past
//! the window the same event is stored again.

mod common;

use serde_json::{json, Value};

use common::*;
use eventmesh_jetstream::testutil::NatsServer;

async fn batch(c: &reqwest::Client, s: &Server, topic: &str, events: &[Value]) -> Vec<Value> {
    let r = c
        .post(s.url(&format!("/events/publish-batch?topic={topic}")))
        .header("content-type", "application/cloudevents-batch+json")
        .body(serde_json::to_vec(events).unwrap())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 202);
    r.json().await.unwrap()
}

fn place(v: &Value) -> (u64, u64) {
    (
        v["partition"].as_u64().unwrap(),
        v["offset"].as_u64().unwrap(),
    )
}

/// Publishes, repeats, restarts (graceful, or SIGKILL with `crash`),
/// repeats again, then a batch mixing old and new events.
async fn retried_publishes_are_stored_once(mut s: Server, crash: bool) {
    let c = client();
    let first = publish(&c, &s, "pay", &event("e1")).await;
    assert_eq!(first.get("duplicate"), None, "{first}");
    let again = publish(&c, &s, "pay", &event("e1")).await;
    assert_eq!(again["duplicate"], true, "{again}");
    assert_eq!(place(&again), place(&first));
    // Another source with the same id is another event.
    let mut other = event("e1");
    other["source"] = "/elsewhere".into();
    let other = publish(&c, &s, "pay", &other).await;
    assert_eq!(other.get("duplicate"), None, "{other}");

    if crash {
        s.kill9();
    }
    let s = s.restart();
    let after = publish(&c, &s, "pay", &event("e1")).await;
    assert_eq!(
        after["duplicate"], true,
        "the window outlives the process: {after}"
    );
    assert_eq!(place(&after), place(&first));

    let answers = batch(&c, &s, "pay", &[event("e1"), event("e2"), event("e2")]).await;
    assert_eq!(answers[0]["duplicate"], true, "{answers:?}");
    assert_eq!(place(&answers[0]), place(&first));
    assert_eq!(answers[1].get("duplicate"), None, "{answers:?}");
    assert_eq!(answers[2]["duplicate"], true, "{answers:?}");
    assert_eq!(place(&answers[2]), place(&answers[1]));

    // Stored: e1, e1 from the other source, e2; nothing else.
    subscribe(
        &c,
        &s,
        json!({"clientId": "count", "topic": "pay", "from": "earliest"}),
    )
    .await;
    let got = poll_n(&c, &s, "count", 3, std::time::Duration::from_secs(20)).await;
    let mut ids: Vec<(String, String)> = got
        .iter()
        .map(|d| {
            (
                d["event"]["source"].as_str().unwrap().to_string(),
                d["event"]["id"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    ids.sort();
    assert_eq!(
        ids,
        [
            ("/elsewhere".to_string(), "e1".to_string()),
            ("/tests".to_string(), "e1".to_string()),
            ("/tests".to_string(), "e2".to_string()),
        ]
    );
    let more = poll_n(&c, &s, "count", 1, std::time::Duration::from_millis(500)).await;
    assert!(more.is_empty(), "stored more than once: {more:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn standalone_stores_a_retried_publish_once() {
    let dir = tempfile::tempdir().unwrap();
    retried_publishes_are_stored_once(Server::start(dir.path(), &[]), false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jetstream_stores_a_retried_publish_once() {
    let nats = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let servers = format!("eventmesh.storage.jetstream.servers={}", nats.url());
    let s = Server::start(dir.path(), &["eventmesh.storage.type=jetstream", &servers]);
    retried_publishes_are_stored_once(s, true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_zero_window_stores_every_publish() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(dir.path(), &["eventmesh.publish.dedup.window.ms=0"]);
    let c = client();
    let a = publish(&c, &s, "plain", &event("same")).await;
    let b = publish(&c, &s, "plain", &event("same")).await;
    assert_eq!(b.get("duplicate"), None, "{b}");
    assert_ne!(place(&a), place(&b));
    // Nothing kept for keys, in memory or on disk.
    let m = metrics(&c, &s).await;
    for series in [
        "eventmesh_publish_dedup_keys",
        "eventmesh_storage_memory_bytes{kind=\"dedup_index\"}",
        "eventmesh_storage_disk_bytes{kind=\"dedup_journal\"}",
    ] {
        assert_eq!(m.get(series), 0.0, "{series}:\n{}", m.text);
    }
}

/// Events stored in `topic`, summed over its partitions.
async fn stored(c: &reqwest::Client, s: &Server, topic: &str) -> u64 {
    let topics: Vec<Value> = admin_json(c, s, "/admin/topics").await;
    topics
        .iter()
        .filter(|t| t["name"] == topic)
        .flat_map(|t| t["endOffsets"].as_array().unwrap().clone())
        .map(|o| o.as_u64().unwrap())
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn standalone_remembers_a_publish_killed_right_after_its_answer() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = Server::start(dir.path(), &[]);
    let c = client();
    let first = publish(&c, &s, "pay", &event("k1")).await;
    assert_eq!(first.get("duplicate"), None, "{first}");
    // No graceful close: whatever the 202 promised is on disk already.
    s.kill9();
    let s = s.restart();
    // The index in memory was rebuilt from the journal: one key, and what
    // it takes shows on /metrics.
    let m = metrics(&c, &s).await;
    assert_eq!(m.get("eventmesh_publish_dedup_keys"), 1.0, "{}", m.text);
    assert!(
        m.get("eventmesh_storage_memory_bytes{kind=\"dedup_index\"}") > 0.0,
        "{}",
        m.text
    );
    let again = publish(&c, &s, "pay", &event("k1")).await;
    assert_eq!(again["duplicate"], true, "{again}");
    assert_eq!(place(&again), place(&first));
    assert_eq!(stored(&c, &s, "pay").await, 1);
    subscribe(
        &c,
        &s,
        json!({"clientId": "count", "topic": "pay", "from": "earliest"}),
    )
    .await;
    let got = poll_n(&c, &s, "count", 2, std::time::Duration::from_secs(2)).await;
    let ids: Vec<&Value> = got.iter().map(|d| &d["event"]["id"]).collect();
    assert_eq!(ids, [&json!("k1")]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_the_window_the_same_event_is_stored_again() {
    use std::time::{Duration, Instant};
    const WINDOW: Duration = Duration::from_secs(2);
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(dir.path(), &["eventmesh.publish.dedup.window.ms=2000"]);
    let c = client();
    let sent = Instant::now();
    let first = publish(&c, &s, "pay", &event("w1")).await;
    assert_eq!(first.get("duplicate"), None, "{first}");
    // Within the window every repeat is the first one; the first repeat
    // stored again marks the window's end.
    let again = loop {
        let a = publish(&c, &s, "pay", &event("w1")).await;
        if a.get("duplicate").is_none() {
            break a;
        }
        assert_eq!(place(&a), place(&first), "{a}");
        assert!(
            sent.elapsed() < WINDOW + Duration::from_secs(8),
            "still a duplicate {:?} after the first publish",
            sent.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(
        sent.elapsed() >= WINDOW,
        "stored again {:?} after the first, within the window",
        sent.elapsed()
    );
    assert_ne!(place(&again), place(&first));
    assert_eq!(stored(&c, &s, "pay").await, 2);
    // The second copy starts a window of its own.
    let third = publish(&c, &s, "pay", &event("w1")).await;
    assert_eq!(third["duplicate"], true, "{third}");
    assert_eq!(place(&third), place(&again));
    assert_eq!(stored(&c, &s, "pay").await, 2);
}
