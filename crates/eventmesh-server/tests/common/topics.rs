//! Topic management on the admin port: requests with the admin token, a
//! topic's detail, publishing numbered events in batches, waiting for a
//! partition's start to move.

use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::*;

pub const WAIT: Duration = Duration::from_secs(30);

pub async fn admin(
    c: &reqwest::Client,
    s: &Server,
    method: reqwest::Method,
    path: &str,
    body: Option<Value>,
) -> (u16, Value) {
    let mut req = c.request(method, s.admin_url(path)).bearer_auth(TOKEN);
    if let Some(b) = body {
        req = req.json(&b);
    }
    let r = req.send().await.unwrap();
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or(Value::Null))
}

pub async fn detail(c: &reqwest::Client, s: &Server, topic: &str) -> Value {
    admin_json(c, s, &format!("/admin/topics/{topic}")).await
}

/// Publishes events `from..to` (ids `e<n>`, about 1 KiB each) in batches
/// of 100.
pub async fn publish_range(c: &reqwest::Client, s: &Server, topic: &str, from: usize, to: usize) {
    let pad = "x".repeat(1000);
    let mut n = from;
    while n < to {
        let end = (n + 100).min(to);
        let batch: Vec<Value> = (n..end)
            .map(|i| {
                let mut e = event(&format!("e{i}"));
                e["data"] = json!({"n": i, "pad": pad});
                e
            })
            .collect();
        publish_batch(c, s, topic, &batch).await;
        n = end;
    }
}

/// Publishes one batch of structured events; asserts `202`.
pub async fn publish_batch(c: &reqwest::Client, s: &Server, topic: &str, batch: &[Value]) {
    let (status, body) = try_publish_batch(c, s, topic, batch).await;
    assert_eq!(status, 202, "{body}");
}

/// Publishes one batch of structured events; the status and the body.
pub async fn try_publish_batch(
    c: &reqwest::Client,
    s: &Server,
    topic: &str,
    batch: &[Value],
) -> (u16, String) {
    let r = c
        .post(s.url(&format!("/events/publish-batch?topic={topic}")))
        .header("content-type", "application/cloudevents-batch+json")
        .body(serde_json::to_vec(batch).unwrap())
        .send()
        .await
        .unwrap();
    (r.status().as_u16(), r.text().await.unwrap())
}

/// Waits until partition 0 of `topic` starts at or past `at_least`; its
/// start offset.
pub async fn start_reaching(c: &reqwest::Client, s: &Server, topic: &str, at_least: u64) -> u64 {
    let deadline = Instant::now() + WAIT;
    loop {
        let start = detail(c, s, topic).await["offsets"][0]["startOffset"]
            .as_u64()
            .unwrap();
        if start >= at_least || Instant::now() >= deadline {
            return start;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// `client` subscribes to `topic` in group `g` from the earliest event,
/// publishes events `0..n`, reads and acknowledges them, waits for the
/// offsets to be committed and unsubscribes: the group stays at `n`.
pub async fn read_and_leave(c: &reqwest::Client, s: &Server, topic: &str, client: &str, n: usize) {
    subscribe(
        c,
        s,
        json!({"clientId": client, "topic": topic, "group": "g", "from": "earliest"}),
    )
    .await;
    publish_range(c, s, topic, 0, n).await;
    for d in poll_n(c, s, client, n, WAIT).await {
        assert_eq!(ack(c, s, d["deliveryId"].as_str().unwrap()).await, 200);
    }
    assert!(committed_reaches(c, s, topic, n as u64, WAIT).await);
    let (st, _) = post_json(c, s.url("/events/unsubscribe"), json!({"clientId": client})).await;
    assert_eq!(st, 200);
}

/// `client` of group `g` subscribes to `topic` again (from its committed
/// offset) and takes one event: the number `n` of its id `e<n>` (where it
/// was published: its offset in a one-partition topic).
pub async fn come_back(c: &reqwest::Client, s: &Server, topic: &str, client: &str) -> u64 {
    subscribe(
        c,
        s,
        json!({"clientId": client, "topic": topic, "group": "g"}),
    )
    .await;
    let first = poll_n(c, s, client, 1, WAIT).await;
    first[0]["event"]["id"]
        .as_str()
        .unwrap()
        .trim_start_matches('e')
        .parse()
        .unwrap()
}

/// Deleting `topic`, which has a subscription: refused with 409
/// `topic_in_use`, done with `force=true`, then gone (404).
pub async fn delete_in_use_by_force(c: &reqwest::Client, s: &Server, topic: &str) {
    let path = format!("/admin/topics/{topic}");
    let (st, v) = admin(c, s, reqwest::Method::DELETE, &path, None).await;
    assert_eq!(
        (st, v["error"].as_str()),
        (409, Some("topic_in_use")),
        "{v}"
    );
    let forced = format!("{path}?force=true");
    let (st, _) = admin(c, s, reqwest::Method::DELETE, &forced, None).await;
    assert_eq!(st, 204);
    let (st, v) = admin(c, s, reqwest::Method::GET, &path, None).await;
    assert_eq!((st, v["error"].as_str()), (404, Some("unknown_topic")));
}
