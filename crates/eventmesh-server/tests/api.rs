//! The traffic and admin HTTP APIs of the real binary: publish in every
//! mode, input errors, CloudEvents conformance, admin auth and metrics.

mod common;

use common::*;
use serde_json::{json, Value};

async fn error_of(r: reqwest::Response) -> (u16, String, String) {
    let status = r.status().as_u16();
    let v: Value = r.json().await.expect("error answers are JSON");
    (
        status,
        v["error"].as_str().expect("error field").to_string(),
        v["message"].as_str().expect("message field").to_string(),
    )
}

#[tokio::test]
async fn publish_structured_binary_and_batch() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(dir.path(), &[]);
    let c = client();

    let r = publish(&c, &s, "orders", &event("e1")).await;
    assert_eq!(r["id"], "e1");
    assert_eq!(r["topic"], "orders");
    assert!(r["partition"].as_u64().unwrap() < 4);
    assert_eq!(r["offset"], 0);

    let r = c
        .post(s.url("/events/publish?topic=orders"))
        .header("ce-specversion", "1.0")
        .header("ce-id", "e2")
        .header("ce-source", "/bin")
        .header("ce-type", "t")
        .header("content-type", "text/plain")
        .body("hello")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 202);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["id"], "e2");

    let batch = json!([event("b1"), event("b2"), event("b3")]);
    let r = c
        .post(s.url("/events/publish-batch?topic=orders"))
        .header("content-type", "application/cloudevents-batch+json")
        .body(batch.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 202);
    let v: Vec<Value> = r.json().await.unwrap();
    assert_eq!(
        v.iter()
            .map(|x| x["id"].as_str().unwrap())
            .collect::<Vec<_>>(),
        ["b1", "b2", "b3"]
    );

    // Topic from the subject when no ?topic= is given.
    let mut ev = event("s1");
    ev["subject"] = "from-subject".into();
    let r = c
        .post(s.url("/events/publish"))
        .header("content-type", "application/cloudevents+json")
        .body(ev.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 202);
    assert_eq!(r.json::<Value>().await.unwrap()["topic"], "from-subject");

    let topics: Vec<Value> = admin_json(&c, &s, "/admin/topics").await;
    let orders = topics.iter().find(|t| t["name"] == "orders").unwrap();
    assert_eq!(orders["partitions"], 4);
    let total: u64 = orders["endOffsets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o.as_u64().unwrap())
        .sum();
    assert_eq!(total, 5);
}

/// The CloudEvents JSON batch format allows an empty array: a valid batch
/// of no events, answered 202 `[]`, appending nothing and creating no topic.
#[tokio::test]
async fn an_empty_batch_is_accepted_and_appends_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(dir.path(), &[]);
    let c = client();
    for i in 0..3 {
        publish(&c, &s, "orders", &event(&format!("o{i}"))).await;
    }
    let end_offsets = |topics: &[Value], name: &str| -> Option<Value> {
        topics
            .iter()
            .find(|t| t["name"] == name)
            .map(|t| t["endOffsets"].clone())
    };
    let topics: Vec<Value> = admin_json(&c, &s, "/admin/topics").await;
    let before = end_offsets(&topics, "orders").expect("orders exists");
    let sum = |v: &Value| -> u64 {
        v.as_array()
            .unwrap()
            .iter()
            .map(|o| o.as_u64().unwrap())
            .sum()
    };
    assert_eq!(sum(&before), 3, "{before}");
    let batch = |topic: &str, body: &str| {
        c.post(s.url(&format!("/events/publish-batch?topic={topic}")))
            .header("content-type", "application/cloudevents-batch+json")
            .body(body.to_string())
            .send()
    };
    for (topic, body) in [("orders", "[]"), ("orders", " [ ]\n"), ("fresh", "[]")] {
        let r = batch(topic, body).await.unwrap();
        assert_eq!(r.status(), 202, "{topic} {body:?}");
        assert_eq!(r.json::<Value>().await.unwrap(), json!([]), "{topic}");
    }
    let topics: Vec<Value> = admin_json(&c, &s, "/admin/topics").await;
    assert_eq!(end_offsets(&topics, "orders"), Some(before), "{topics:?}");
    assert_eq!(end_offsets(&topics, "fresh"), None, "{topics:?}");
    assert_eq!(
        metric(&c, &s, "eventmesh_events_published_total").await,
        3.0
    );

    // The topic is still checked; without `?topic=` there is no subject
    // to take it from.
    let (st, code, msg) = error_of(batch("bad%20name", "[]").await.unwrap()).await;
    assert_eq!((st, code.as_str()), (400, "invalid_topic"), "{msg}");
    let r = c
        .post(s.url("/events/publish-batch"))
        .header("content-type", "application/cloudevents-batch+json")
        .body("[]")
        .send()
        .await
        .unwrap();
    let (st, code, msg) = error_of(r).await;
    assert_eq!((st, code.as_str()), (400, "missing_topic"), "{msg}");
}

/// The metrics parser the tests compare exact samples with.
#[test]
fn metrics_text_is_parsed_into_exact_series() {
    let m = Metrics::parse(concat!(
        "# HELP eventmesh_acks Deliveries acknowledged.\n",
        "# TYPE eventmesh_acks counter\n",
        "eventmesh_acks_total 12\n",
        "eventmesh_acks_total_extra 1\n",
        "eventmesh_storage_memory_bytes{kind=\"block_cache\"} 4096\n",
        "eventmesh_x_bucket{le=\"+Inf\",path=\"a} \\\"b\\\"\"} 3 1700000000\n",
        "eventmesh_y +Inf\n",
        "# EOF\n",
    ));
    assert_eq!(m.samples.len(), 5, "{:?}", m.samples);
    assert_eq!(m.get("eventmesh_acks_total"), 12.0);
    assert_eq!(m.get("eventmesh_acks_total_extra"), 1.0);
    assert_eq!(
        m.get("eventmesh_storage_memory_bytes{kind=\"block_cache\"}"),
        4096.0
    );
    assert_eq!(
        m.get("eventmesh_x_bucket{le=\"+Inf\",path=\"a} \\\"b\\\"\"}"),
        3.0
    );
    assert_eq!(m.get("eventmesh_y"), f64::INFINITY);
    assert!(!m.samples.contains_key("eventmesh_acks"));
}

#[tokio::test]
async fn partition_key_is_sticky() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(dir.path(), &[]);
    let c = client();
    let mut partitions = std::collections::HashSet::new();
    for i in 0..8 {
        let mut ev = event(&format!("k{i}"));
        ev["partitionkey"] = "customer-42".into();
        partitions.insert(
            publish(&c, &s, "sticky", &ev).await["partition"]
                .as_u64()
                .unwrap(),
        );
    }
    assert_eq!(partitions.len(), 1);
    // Without a key, events spread over the partitions.
    let mut spread = std::collections::HashSet::new();
    for i in 0..8 {
        spread.insert(
            publish(&c, &s, "spread", &event(&format!("s{i}"))).await["partition"]
                .as_u64()
                .unwrap(),
        );
    }
    assert_eq!(spread.len(), 4);
}

#[tokio::test]
async fn bad_input_gets_clear_errors() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(dir.path(), &["eventmesh.http.max.body.bytes=2048"]);
    let c = client();
    let post = |path: &str, ct: &str, body: String| {
        c.post(s.url(path))
            .header("content-type", ct)
            .body(body)
            .send()
    };
    let ce = "application/cloudevents+json";

    let (st, code, msg) = error_of(
        post("/events/publish", ce, event("x").to_string())
            .await
            .unwrap(),
    )
    .await;
    assert_eq!((st, code.as_str()), (400, "missing_topic"), "{msg}");

    let mut bad = event("x");
    bad.as_object_mut().unwrap().remove("source");
    let (st, code, msg) = error_of(
        post("/events/publish?topic=t", ce, bad.to_string())
            .await
            .unwrap(),
    )
    .await;
    assert_eq!((st, code.as_str()), (400, "invalid_event"));
    assert!(msg.contains("source"), "{msg}");

    let (st, code, _) = error_of(
        post("/events/publish?topic=t", ce, "{not json".into())
            .await
            .unwrap(),
    )
    .await;
    assert_eq!((st, code.as_str()), (400, "malformed_json"));

    let (st, code, msg) = error_of(
        post(
            "/events/publish?topic=bad%20name",
            ce,
            event("x").to_string(),
        )
        .await
        .unwrap(),
    )
    .await;
    assert_eq!((st, code.as_str()), (400, "invalid_topic"), "{msg}");

    let mut big = event("x");
    big["data"] = "y".repeat(4096).into();
    let (st, code, _) = error_of(
        post("/events/publish?topic=t", ce, big.to_string())
            .await
            .unwrap(),
    )
    .await;
    assert_eq!((st, code.as_str()), (413, "payload_too_large"));

    let (st, code, _) = error_of(
        post("/events/publish?topic=t", "text/plain", "hi".into())
            .await
            .unwrap(),
    )
    .await;
    assert_eq!((st, code.as_str()), (415, "unsupported_media_type"));

    let (st, code, _) = error_of(
        post("/events/publish-batch?topic=t", ce, "[]".into())
            .await
            .unwrap(),
    )
    .await;
    assert_eq!((st, code.as_str()), (415, "unsupported_media_type"));

    // A batch with one bad event stores nothing.
    let batch = json!([event("ok1"), {"id": "broken"}]).to_string();
    let (st, code, msg) = error_of(
        post(
            "/events/publish-batch?topic=atomic",
            "application/cloudevents-batch+json",
            batch,
        )
        .await
        .unwrap(),
    )
    .await;
    assert_eq!((st, code.as_str()), (400, "invalid_event"));
    assert!(msg.contains("[1]"), "{msg}");
    let topics: Vec<Value> = admin_json(&c, &s, "/admin/topics").await;
    assert!(topics.iter().all(|t| t["name"] != "atomic"), "{topics:?}");

    // Binary mode with a missing required header.
    let r = c
        .post(s.url("/events/publish?topic=t"))
        .header("ce-specversion", "1.0")
        .header("ce-id", "1")
        .header("ce-source", "/s")
        .body("x")
        .send()
        .await
        .unwrap();
    let (st, code, msg) = error_of(r).await;
    assert_eq!((st, code.as_str()), (400, "invalid_event"));
    assert!(msg.contains("type"), "{msg}");

    for body in [
        json!({"topic": "t"}),
        json!({"clientId": "c", "topic": "t", "url": "ftp://x/y"}),
        json!({"clientId": "c", "topic": "t", "mode": "SOMETIMES"}),
        json!({"clientId": "c c", "topic": "t"}),
    ] {
        let (st, v) = post_json(&c, s.url("/events/subscribe"), body.clone()).await;
        assert_eq!(st, 400, "{body} -> {v}");
        assert!(v["error"].is_string() && v["message"].is_string(), "{v}");
    }
    // The A2A gateway's own client ids are nobody else's, gate or not.
    for client in ["a2a-gateway", "a2a-push"] {
        let body = json!({"clientId": client, "topic": "a2a.updates"});
        let (st, v) = post_json(&c, s.url("/events/subscribe"), body).await;
        assert_eq!(
            (st, v["error"].as_str()),
            (403, Some("reserved_client")),
            "{v}"
        );
        let r = c
            .get(s.url(&format!("/events/poll?clientId={client}&timeoutMs=1")))
            .send()
            .await
            .unwrap();
        let (st, code, _) = error_of(r).await;
        assert_eq!((st, code.as_str()), (403, "reserved_client"));
    }
    let (st, v) = post_json(&c, s.url("/events/ack"), json!({"deliveryId": "nope"})).await;
    assert_eq!(
        (st, v["error"].as_str().unwrap()),
        (404, "unknown_delivery")
    );
    let r = c
        .get(s.url("/events/poll?clientId=ghost&timeoutMs=1"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
    let r = c
        .get(s.url("/events/poll?clientId=c&timeoutMs=soon"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
}

#[tokio::test]
async fn cloudevents_json_conformance() {
    let fixture: Value =
        serde_json::from_str(include_str!("fixtures/cloudevents-json-conformance.json")).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(dir.path(), &[]);
    let c = client();
    for case in fixture["valid"].as_array().unwrap() {
        let r = c
            .post(s.url("/events/publish?topic=conformance"))
            .header("content-type", "application/cloudevents+json")
            .body(case["event"].to_string())
            .send()
            .await
            .unwrap();
        assert_eq!(
            r.status(),
            202,
            "{}: {}",
            case["id"],
            r.text().await.unwrap()
        );
    }
    for case in fixture["invalid"].as_array().unwrap() {
        let r = c
            .post(s.url("/events/publish?topic=conformance"))
            .header("content-type", "application/cloudevents+json")
            .body(case["event"].to_string())
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 400, "{} was accepted", case["id"]);
    }
}

#[tokio::test]
async fn admin_requires_token_and_serves_metrics() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(dir.path(), &["eventmesh.storage.block.cache.bytes=2097152"]);
    let c = client();
    let health = health(&c, &s).await;
    assert_eq!(health["status"], "UP");
    assert_eq!(health["topology"], "LOCAL_STICKY_PULL");

    let r = c.get(s.admin_url("/metrics")).send().await.unwrap();
    assert_eq!(r.status(), 401);
    let r = c
        .get(s.admin_url("/metrics"))
        .bearer_auth("wrong")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);

    publish(&c, &s, "m", &event("m1")).await;
    let m = metrics(&c, &s).await;
    for (series, want) in [
        ("eventmesh_events_published_total", 1.0),
        // Nobody subscribes: nothing dispatched, acknowledged or pending.
        ("eventmesh_events_dispatched_total", 0.0),
        ("eventmesh_acks_total", 0.0),
        ("eventmesh_pending_deliveries", 0.0),
        ("eventmesh_publish_failures_total", 0.0),
        ("eventmesh_publish_latency_seconds_count", 1.0),
        // The topic's creation is a direct write; the publish one commit.
        ("eventmesh_log_commit_seconds_count", 1.0),
        ("eventmesh_log_commit_appends_count", 1.0),
        ("eventmesh_log_commit_appends_sum", 1.0),
        // Its idempotency key, in the index in memory.
        ("eventmesh_publish_dedup_keys", 1.0),
    ] {
        assert_eq!(m.get(series), want, "{series}:\n{}", m.text);
    }
    // Present, with a size not known in advance.
    m.get("eventmesh_storage_memory_bytes{kind=\"block_cache\"}");
    // The memtables hold the event just written, the index its key.
    for kind in ["memtables", "dedup_index"] {
        assert!(
            m.get(&format!(
                "eventmesh_storage_memory_bytes{{kind=\"{kind}\"}}"
            )) > 0.0,
            "{kind}:\n{}",
            m.text
        );
    }
    // The disk by kind: the WAL holds the event; nothing flushed to tables.
    assert!(
        m.get("eventmesh_storage_disk_bytes{kind=\"wal\"}") > 0.0,
        "{}",
        m.text
    );
    for kind in ["log_tables", "log_blobs", "dedup_journal"] {
        assert_eq!(
            m.get(&format!("eventmesh_storage_disk_bytes{{kind=\"{kind}\"}}")),
            0.0,
            "{kind}:\n{}",
            m.text
        );
    }
    m.get("eventmesh_storage_disk_bytes{kind=\"other_tables\"}");
    let cfg: Value = admin_json(&c, &s, "/admin/config").await;
    assert_eq!(
        cfg["eventmesh.storage.block.cache.bytes"], "2097152",
        "{cfg}"
    );
    assert_eq!(cfg["eventmesh.admin.token"], "******", "{cfg}");
    assert!(!cfg.to_string().contains(TOKEN));
}

#[tokio::test]
async fn admin_without_token_is_locked() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(dir.path(), &["eventmesh.admin.token="]);
    let c = client();
    assert_eq!(
        c.get(s.admin_url("/admin/health"))
            .send()
            .await
            .unwrap()
            .status(),
        200
    );
    let r = c
        .get(s.admin_url("/admin/subscriptions"))
        .bearer_auth("anything")
        .send()
        .await
        .unwrap();
    let (st, code, _) = error_of(r).await;
    assert_eq!((st, code.as_str()), (503, "admin_locked"));
}
