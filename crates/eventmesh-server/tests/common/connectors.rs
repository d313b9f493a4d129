//! Connectors through the admin API: create, read their status, wait for
//! a state, and read what reached a topic.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::topics::{admin, detail};
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

/// The sum of the end offsets of a topic's partitions: the events stored.
pub async fn stored(c: &reqwest::Client, s: &Server, topic: &str) -> u64 {
    let d = detail(c, s, topic).await;
    d["offsets"]
        .as_array()
        .map(|ps| {
            ps.iter()
                .map(|p| p["endOffset"].as_u64().unwrap_or(0))
                .sum()
        })
        .unwrap_or(0)
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
    let deadline = Instant::now() + within;
    let mut got: BTreeMap<String, (Value, usize)> = BTreeMap::new();
    while got.len() < want && Instant::now() < deadline {
        let batch = poll_n(c, s, client, 1, Duration::from_millis(600)).await;
        for d in batch {
            let id = d["deliveryId"].as_str().unwrap().to_string();
            assert_eq!(ack(c, s, &id).await, 200);
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
