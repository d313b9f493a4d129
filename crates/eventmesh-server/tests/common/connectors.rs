//! Connectors through the admin API: create, read their status, wait for
//! a state, and read what reached a topic.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::topics::admin;
use super::*;

pub async fn create(c: &reqwest::Client, s: &Server, body: Value) -> (u16, Value) {
    admin(c, s, reqwest::Method::POST, "/admin/connectors", Some(body)).await
}

pub async fn get(c: &reqwest::Client, s: &Server, name: &str) -> (u16, Value) {
    admin(
        c,
        s,
        reqwest::Method::GET,
        &format!("/admin/connectors/{name}"),
        None,
    )
    .await
}

/// Waits until the connector's status satisfies `cond`; its last view.
pub async fn wait_status(
    c: &reqwest::Client,
    s: &Server,
    name: &str,
    within: Duration,
    cond: impl Fn(&Value) -> bool,
) -> Value {
    let deadline = Instant::now() + within;
    loop {
        let (code, v) = get(c, s, name).await;
        assert_eq!(code, 200, "{v}");
        if cond(&v) || Instant::now() >= deadline {
            return v;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The sum of the end offsets of a topic's partitions: the events stored
/// (asked again while the log answers 503 under load, 30 s at most).
pub async fn stored(c: &reqwest::Client, s: &Server, topic: &str) -> u64 {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(n) = try_stored(c, s, topic).await {
            assert!(n > 0, "no events in {topic}");
            return n;
        }
        assert!(Instant::now() < deadline, "{topic}: the log did not answer");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// [`stored`] as far as the log answers now: 0 while the topic does not
/// exist yet, and 0 when the log is too busy to say (503).
pub async fn stored_so_far(c: &reqwest::Client, s: &Server, topic: &str) -> u64 {
    try_stored(c, s, topic).await.unwrap_or(0)
}

async fn try_stored(c: &reqwest::Client, s: &Server, topic: &str) -> Option<u64> {
    let (code, d) = admin(
        c,
        s,
        reqwest::Method::GET,
        &format!("/admin/topics/{topic}"),
        None,
    )
    .await;
    match code {
        404 => return Some(0),
        503 => return None,
        _ => assert_eq!(code, 200, "{d}"),
    }
    Some(
        d["offsets"]
            .as_array()
            .map(|ps| {
                ps.iter()
                    .map(|p| p["endOffset"].as_u64().unwrap_or(0))
                    .sum()
            })
            .unwrap_or(0),
    )
}

/// Polls `client` and acknowledges everything until `want` events came
/// (or `within` passed): the events by id, with how often each came.
pub async fn drain(
    c: &reqwest::Client,
    s: &Server,
    client: &str,
    want: usize,
    within: Duration,
) -> BTreeMap<String, (Value, usize)> {
    drain_where(c, s, client, want, within, false).await
}

/// [`drain`] on a cluster whose partitions may move while it reads: an ack
/// refused as `fenced` (409, the partition has a new owner) leaves the
/// event to that owner, which hands it out again; an event counts once an
/// ack of it holds.
pub async fn drain_moving(
    c: &reqwest::Client,
    s: &Server,
    client: &str,
    want: usize,
    within: Duration,
) -> BTreeMap<String, (Value, usize)> {
    drain_where(c, s, client, want, within, true).await
}

async fn drain_where(
    c: &reqwest::Client,
    s: &Server,
    client: &str,
    want: usize,
    within: Duration,
    may_move: bool,
) -> BTreeMap<String, (Value, usize)> {
    let deadline = Instant::now() + within;
    let mut got: BTreeMap<String, (Value, usize)> = BTreeMap::new();
    while got.len() < want && Instant::now() < deadline {
        let batch = poll_n(c, s, client, 1, Duration::from_millis(600)).await;
        for d in batch {
            let id = d["deliveryId"].as_str().unwrap().to_string();
            match ack(c, s, &id).await {
                200 => {}
                409 if may_move => continue,
                code => panic!("ack of {id}: {code}"),
            }
            let ev = d["event"].clone();
            let key = ev["id"].as_str().unwrap().to_string();
            got.entry(key).or_insert((ev, 0)).1 += 1;
        }
    }
    got
}

/// Subscribes a pull client to `topic` from its start.
pub async fn reader(c: &reqwest::Client, s: &Server, client: &str, topic: &str) {
    subscribe(
        c,
        s,
        json!({"clientId": client, "topic": topic, "group": client, "from": "earliest"}),
    )
    .await;
}

/// Waits until `topic` holds at least `at_least` events (60 s at most);
/// how many it held then.
pub async fn stored_reaching(c: &reqwest::Client, s: &Server, topic: &str, at_least: u64) -> u64 {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let n = stored_so_far(c, s, topic).await;
        if n >= at_least {
            return n;
        }
        assert!(
            Instant::now() < deadline,
            "{topic} holds {n} < {at_least} events"
        );
    }
}

/// The event ids of a file of JSON events (a file sink's), and its lines.
pub fn ids_in(path: &std::path::Path) -> (BTreeSet<String>, usize) {
    let text = std::fs::read_to_string(path).unwrap();
    let ids = text
        .lines()
        .map(|l| {
            serde_json::from_str::<Value>(l).unwrap()["id"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    (ids, text.lines().count())
}
