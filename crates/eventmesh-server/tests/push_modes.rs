//! Webhook pushes in each content mode and the CloudEvents webhook
//! validation handshake, through the real binary, against a receiver that
//! records every request raw (`push_modes/receiver.rs`).
//!
//! What the receiver got is read back by the CloudEvents SDKs themselves
//! (`tests/interop/push_parse.py`, Python `cloudevents` 2.2, every mode;
//! `tests/interop/push_parse.cjs`, npm `cloudevents` 10, structured and
//! batch: its `HTTP.toEvent` leaves binary-mode header values
//! percent-encoded), and every attribute, extension (with its JSON type
//! where the mode carries one) and data byte is compared with what was
//! published.

mod common;
#[path = "push_modes/receiver.rs"]
mod receiver;

use std::collections::BTreeSet;
use std::time::Duration;

use common::interop::{node_script, python_script};
use common::*;
use receiver::{Answer, Receiver};
use serde_json::{json, Value};

const WAIT: Duration = Duration::from_secs(20);
/// The origin this runtime names itself by in the tests.
const ORIGIN: &str = "mesh.test";

fn start(dir: &std::path::Path, extra: &[&str]) -> Server {
    let mut settings = vec![
        "eventmesh.topic.default.partitions=1",
        "eventmesh.webhook.handshake.origin=mesh.test",
        "eventmesh.delivery.backoff.initial.ms=100",
        "eventmesh.delivery.backoff.max.ms=200",
    ];
    settings.extend_from_slice(extra);
    Server::start(dir, &settings)
}

async fn publish_batch(c: &reqwest::Client, s: &Server, topic: &str, events: &[Value]) {
    let r = c
        .post(s.url(&format!("/events/publish-batch?topic={topic}")))
        .header("content-type", "application/cloudevents-batch+json")
        .body(serde_json::to_vec(events).unwrap())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 202, "{}", r.text().await.unwrap());
}

/// Events with what a push must carry faithfully: non-ASCII, quotes and
/// percent signs in attributes and extensions, typed extensions (integer,
/// boolean), and JSON, text and binary data.
fn rich_events() -> Vec<Value> {
    vec![
        json!({
            "specversion": "1.0", "id": "json-1 \"q\" 100%", "source": "/shop/caf%C3%A9?q=a%20b",
            "type": "order.created", "subject": "Zürich 50% \"off\"",
            "time": "2026-12-06T10:00:00Z", "datacontenttype": "application/json",
            "note": "ünïcode \"quoted\" 10% ☃", "count": 42, "flag": true,
            "data": {"msg": "héllo \"world\" 100%", "n": [1, 2.5, null], "ok": false},
        }),
        json!({
            "specversion": "1.0", "id": "text-2", "source": "/shop",
            "type": "order.note", "time": "2026-12-06T10:00:01Z",
            "datacontenttype": "text/plain; charset=utf-8",
            "note": "plain", "count": -7, "flag": false,
            "data": "plain text – ünïcode, 100% \"quotes\"\nsecond line",
        }),
        json!({
            "specversion": "1.0", "id": "bin-3", "source": "/shop",
            "type": "order.blob", "time": "2026-12-06T10:00:02Z",
            "datacontenttype": "application/octet-stream", "count": 0,
            "data_base64": "AAEC//4l",
        }),
    ]
}

/// What the SDK must read from a push of `event` in `mode`: its attributes
/// and extensions (an extension is a string in binary mode, where it
/// travels as a header), the JSON type of each extension, and its data.
fn expected(event: &Value, mode: &str) -> (Value, Value, Value) {
    let mut attributes = serde_json::Map::new();
    let mut types = serde_json::Map::new();
    for (k, v) in event.as_object().unwrap() {
        if matches!(k.as_str(), "data" | "data_base64") {
            continue;
        }
        let (v, t) = match v {
            Value::Number(_) if mode == "binary" => (json!(v.to_string()), "string"),
            Value::Bool(_) if mode == "binary" => (json!(v.to_string()), "string"),
            Value::Number(_) => (v.clone(), "integer"),
            Value::Bool(_) => (v.clone(), "boolean"),
            _ => (v.clone(), "string"),
        };
        attributes.insert(k.clone(), v);
        if !matches!(k.as_str(), "time" | "specversion") {
            types.insert(k.clone(), json!(t));
        }
    }
    let data = match (&event["data"], &event["data_base64"]) {
        (Value::String(t), _) => json!({ "text": t }),
        (Value::Null, Value::String(_)) => json!({"hex": "000102fffe25"}),
        (d, _) => json!({ "json": d }),
    };
    (Value::Object(attributes), Value::Object(types), data)
}

/// Compares what an SDK read (one line per event) with the events
/// published, by id.
fn compare(sdk: &str, mode: &str, read: &[Value], published: &[Value]) {
    assert_eq!(read.len(), published.len(), "{sdk} {mode}: {read:?}");
    for event in published {
        let id = event["id"].as_str().unwrap();
        let got = read
            .iter()
            .find(|r| r["attributes"]["id"] == id)
            .unwrap_or_else(|| panic!("{sdk} {mode}: no event {id:?} in {read:?}"));
        let (mut attributes, types, data) = expected(event, mode);
        // Times are compared as instants (each SDK writes them its way).
        let mut got_attributes = got["attributes"].clone();
        let instant =
            |v: &Value| eventmesh_core::time::parse_rfc3339_ms(v.as_str().unwrap()).unwrap();
        assert_eq!(
            instant(&got_attributes["time"]),
            instant(&attributes["time"]),
            "{sdk} {mode} {id}"
        );
        got_attributes.as_object_mut().unwrap().remove("time");
        attributes.as_object_mut().unwrap().remove("time");
        assert_eq!(got_attributes, attributes, "{sdk} {mode} {id}: attributes");
        for (k, t) in types.as_object().unwrap() {
            assert_eq!(&got["types"][k], t, "{sdk} {mode} {id}: the type of {k}");
        }
        assert_eq!(got["data"], data, "{sdk} {mode} {id}: data");
    }
}

/// Runs both SDKs' readers over `requests`; what each read.
async fn read_back(requests: &[receiver::Request], node: bool) -> (Vec<Value>, Vec<Value>) {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("requests.json");
    std::fs::write(
        &file,
        serde_json::to_vec(&receiver::dump(requests)).unwrap(),
    )
    .unwrap();
    let path = file.display().to_string();
    let py = python_script("push_parse.py", vec![path.clone()]).await;
    let js = if node {
        node_script("push_parse.cjs", vec![path]).await
    } else {
        Vec::new()
    };
    (py, js)
}

#[tokio::test]
async fn each_content_mode_carries_every_attribute_extension_and_data_byte() {
    let hooks = [
        ("binary", Receiver::start(Answer::allow()).await),
        ("structured", Receiver::start(Answer::allow()).await),
        ("batch", Receiver::start(Answer::allow()).await),
    ];
    let dir = tempfile::tempdir().unwrap();
    let s = start(dir.path(), &[]);
    let c = client();
    for (mode, hook) in &hooks {
        let answer = subscribe(
            &c,
            &s,
            json!({"clientId": format!("c-{mode}"), "group": format!("g-{mode}"),
                   "topic": "rich", "url": hook.url("/hook"), "contentMode": mode}),
        )
        .await;
        assert!(!answer.is_empty());
    }
    let published = rich_events();
    publish_batch(&c, &s, "rich", &published).await;
    for (mode, hook) in &hooks {
        assert!(
            hook.wait_events(published.len(), WAIT).await,
            "{mode}: {:?}",
            hook.posts()
        );
    }
    for (mode, hook) in &hooks {
        let posts = hook.posts();
        let content_types: BTreeSet<String> =
            posts.iter().map(|p| p.header("content-type")).collect();
        let delivery_ids: Vec<String> = match *mode {
            "batch" => {
                assert_eq!(
                    content_types,
                    BTreeSet::from([
                        "application/cloudevents-batch+json; charset=utf-8".to_string()
                    ])
                );
                posts
                    .iter()
                    .flat_map(|p| {
                        let ids = p.header("eventmesh-delivery-ids");
                        let n = p.events();
                        let ids: Vec<String> = ids.split(',').map(str::to_string).collect();
                        assert_eq!(ids.len(), n, "one delivery id per event, in order");
                        assert_eq!(p.header("eventmesh-delivery-id"), "");
                        ids
                    })
                    .collect()
            }
            _ => {
                assert_eq!(posts.len(), published.len(), "{mode}: one POST per event");
                if *mode == "structured" {
                    assert_eq!(
                        content_types,
                        BTreeSet::from(["application/cloudevents+json; charset=utf-8".to_string()])
                    );
                }
                posts
                    .iter()
                    .map(|p| p.header("eventmesh-delivery-id"))
                    .collect()
            }
        };
        let distinct: BTreeSet<&String> = delivery_ids.iter().collect();
        assert_eq!(distinct.len(), published.len(), "{mode}: {delivery_ids:?}");
        // The receiver allowed this runtime's origin: every push names it.
        for p in &posts {
            assert_eq!(p.header("webhook-request-origin"), ORIGIN);
        }
        assert_eq!(hook.options().len(), 1, "{mode}: one handshake");
        let (py, js) = read_back(&posts, *mode != "binary").await;
        compare("python", mode, &py, &published);
        if *mode != "binary" {
            compare("javascript", mode, &js, &published);
        }
    }
    // Listings show how each webhook is pushed to.
    let subs: Vec<Value> = admin_json(&c, &s, "/admin/subscriptions?topic=rich").await;
    let mut shown: Vec<(String, Value)> = subs
        .iter()
        .map(|v| {
            (
                v["clientId"].as_str().unwrap().to_string(),
                v["webhook"].clone(),
            )
        })
        .collect();
    shown.sort_by(|a, b| a.0.cmp(&b.0));
    for (_, w) in &mut shown {
        let origin = w["origin"].as_object_mut().unwrap();
        assert!(origin.remove("sinceMs").unwrap().is_u64());
    }
    let allowed = json!({"state": "allowed"});
    assert_eq!(
        shown,
        [
            (
                "c-batch".to_string(),
                json!({"contentMode": "batch", "batchSize": 100, "batchLingerMs": 10,
                "handshake": true, "state": "active", "origin": allowed})
            ),
            (
                "c-binary".to_string(),
                json!({"contentMode": "binary", "handshake": true,
                "state": "active", "origin": allowed})
            ),
            (
                "c-structured".to_string(),
                json!({"contentMode": "structured", "handshake": true,
                "state": "active", "origin": allowed})
            ),
        ]
    );
}

#[tokio::test]
async fn a_batch_holds_batch_size_events_and_a_partial_one_goes_after_the_linger() {
    let hook = Receiver::start(Answer::allow()).await;
    let dir = tempfile::tempdir().unwrap();
    let s = start(dir.path(), &[]);
    let c = client();
    let (status, answer) = post_json(
        &c,
        s.url("/events/subscribe"),
        json!({"clientId": "batcher", "topic": "many", "url": hook.url("/hook"),
               "contentMode": "batch", "batchSize": 4, "batchLingerMs": 300}),
    )
    .await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(
        (
            &answer["contentMode"],
            &answer["batchSize"],
            &answer["batchLingerMs"]
        ),
        (&json!("batch"), &json!(4), &json!(300))
    );
    // Ten events at once: batches of 4, 4 and 2 (the last after the
    // linger), in log order.
    let ids: Vec<String> = (0..10).map(|i| format!("e{i}")).collect();
    let events: Vec<Value> = ids.iter().map(|id| event(id)).collect();
    publish_batch(&c, &s, "many", &events).await;
    assert!(hook.wait_events(10, WAIT).await, "{:?}", hook.posts());
    let sizes: Vec<usize> = hook.posts().iter().map(|p| p.events()).collect();
    assert_eq!(sizes, [4, 4, 2]);
    let pushed: Vec<String> = hook.posts().iter().flat_map(|p| p.event_ids()).collect();
    assert_eq!(pushed, ids);
    // Three more at once: fewer than a batch, one push after the linger.
    let more: Vec<Value> = (10..13).map(|i| event(&format!("e{i}"))).collect();
    publish_batch(&c, &s, "many", &more).await;
    assert!(hook.wait_events(13, WAIT).await, "{:?}", hook.posts());
    let sizes: Vec<usize> = hook.posts().iter().map(|p| p.events()).collect();
    assert_eq!(sizes, [4, 4, 2, 3]);
    assert_eq!(
        counter_reaching(&c, &s, "eventmesh_acks_total", 13.0, WAIT).await,
        13.0
    );
    assert_eq!(hook.options().len(), 1);
}

#[tokio::test]
async fn a_failed_batch_is_a_failed_attempt_of_each_of_its_events() {
    let hook = Receiver::start(Answer::allow()).await;
    hook.fail_posts(1);
    let dir = tempfile::tempdir().unwrap();
    let s = start(dir.path(), &["eventmesh.delivery.max.attempts=3"]);
    let c = client();
    subscribe(
        &c,
        &s,
        json!({"clientId": "retry", "topic": "again", "url": hook.url("/hook"),
               "contentMode": "batch", "batchSize": 10, "batchLingerMs": 50}),
    )
    .await;
    let events: Vec<Value> = (0..3).map(|i| event(&format!("r{i}"))).collect();
    publish_batch(&c, &s, "again", &events).await;
    // The first push (all three) failed; each event went again.
    assert!(hook.wait_events(3 + 3, WAIT).await, "{:?}", hook.posts());
    let posts = hook.posts();
    assert_eq!(posts[0].event_ids(), ["r0", "r1", "r2"]);
    let mut retried: Vec<String> = posts[1..].iter().flat_map(|p| p.event_ids()).collect();
    retried.sort();
    assert_eq!(retried, ["r0", "r1", "r2"]);
    // A retry goes under the delivery id it had.
    let first: BTreeSet<String> = posts[0]
        .header("eventmesh-delivery-ids")
        .split(',')
        .map(str::to_string)
        .collect();
    let again: BTreeSet<String> = posts[1..]
        .iter()
        .flat_map(|p| {
            p.header("eventmesh-delivery-ids")
                .split(',')
                .map(str::to_string)
                .collect::<Vec<_>>()
        })
        .collect();
    assert_eq!(first, again);
    assert_eq!(
        counter_reaching(&c, &s, "eventmesh_push_failures_total", 3.0, WAIT).await,
        3.0
    );
    assert_eq!(
        counter_reaching(&c, &s, "eventmesh_acks_total", 3.0, WAIT).await,
        3.0
    );
}

#[path = "push_modes/handshake.rs"]
mod handshake;
