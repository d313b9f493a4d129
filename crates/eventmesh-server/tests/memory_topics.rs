//! Topics kept in memory (`durability: memory`), against the real binary
//! on the standalone log: created, shown and refused with the field at
//! fault; published to, delivered and acknowledged like any topic (the
//! gate in front); a request answered through one; after a restart the
//! topic is still defined, what it held is gone, and its consumers go on
//! with what is published next.

mod common;

use std::time::Duration;

use common::topics::*;
use common::*;
use reqwest::Method;
use serde_json::{json, Value};

#[tokio::test]
async fn a_memory_topic_delivers_and_loses_its_events_on_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = Server::start(dir.path(), &[]);
    let c = client();
    let (st, v) = admin(
        &c,
        &s,
        Method::POST,
        "/admin/topics",
        Some(json!({"name": "rpc", "partitions": 1, "durability": "memory"})),
    )
    .await;
    assert_eq!(st, 201, "{v}");
    assert_eq!(v["durability"], "memory");
    let start = v["offsets"][0]["startOffset"].as_u64().unwrap();
    assert_eq!(v["offsets"][0]["endOffset"].as_u64(), Some(start));
    for (body, field) in [
        (json!({"name": "x", "durability": "ram"}), "ram"),
        (json!({"name": "x", "durability": 1}), "durability"),
    ] {
        let (st, v) = admin(&c, &s, Method::POST, "/admin/topics", Some(body.clone())).await;
        assert_eq!(
            (st, v["error"].as_str()),
            (400, Some("invalid_request")),
            "{body}"
        );
        assert!(
            v["message"].as_str().unwrap().contains(field),
            "{body}: {v}"
        );
    }
    let (st, v) = admin(&c, &s, Method::GET, "/admin/topics/x", None).await;
    assert_eq!((st, v["error"].as_str()), (404, Some("unknown_topic")));
    // Topics created by a publish, and by default, are on disk.
    publish(&c, &s, "plain", &event("p1")).await;
    assert_eq!(detail(&c, &s, "plain").await["durability"], "disk");

    // Delivered and acknowledged as any topic's events.
    subscribe(
        &c,
        &s,
        json!({"clientId": "worker", "topic": "rpc", "group": "workers"}),
    )
    .await;
    let batch: Vec<Value> = (0..5).map(|i| event(&format!("m{i}"))).collect();
    publish_batch(&c, &s, "rpc", &batch).await;
    let got = poll_n(&c, &s, "worker", 5, WAIT).await;
    assert_eq!(
        polled_ids(&got),
        ["m0", "m1", "m2", "m3", "m4"].map(String::from).to_vec()
    );
    for d in &got {
        assert_eq!(ack(&c, &s, d["deliveryId"].as_str().unwrap()).await, 200);
    }
    assert!(committed_reaches(&c, &s, "rpc", start + 5, WAIT).await);
    // Two more, never acknowledged: what a crash loses.
    publish_batch(&c, &s, "rpc", &[event("lost1"), event("lost2")]).await;
    assert_eq!(poll_n(&c, &s, "worker", 2, WAIT).await.len(), 2);
    let shown = detail(&c, &s, "rpc").await;
    assert_eq!(shown["offsets"][0]["endOffset"].as_u64(), Some(start + 7));
    assert!(shown["bytes"].as_u64().unwrap() > 0);

    // A request through a memory topic, answered by a responder.
    let (st, v) = admin(
        &c,
        &s,
        Method::POST,
        "/admin/topics",
        Some(json!({"name": "asks", "durability": "memory"})),
    )
    .await;
    assert_eq!(st, 201, "{v}");
    subscribe(
        &c,
        &s,
        json!({"clientId": "responder", "topic": "asks", "group": "responders"}),
    )
    .await;
    let asking = tokio::spawn({
        let (c, url) = (
            c.clone(),
            s.url("/events/request?topic=asks&timeoutMs=20000"),
        );
        async move {
            let r = c
                .post(url)
                .header("content-type", "application/cloudevents+json")
                .body(serde_json::to_vec(&event("ask")).unwrap())
                .send()
                .await
                .unwrap();
            (r.status().as_u16(), r.json::<Value>().await.unwrap())
        }
    });
    let got = poll_n(&c, &s, "responder", 1, WAIT).await;
    assert_eq!(polled_ids(&got), vec!["ask".to_string()]);
    let request = got[0]["event"].clone();
    let reply = json!({"specversion": "1.0", "id": "answer", "source": "/responder",
        "type": "reply", "correlationid": request["correlationid"], "data": 42});
    let r = c
        .post(s.url("/events/reply"))
        .header("content-type", "application/cloudevents+json")
        .body(serde_json::to_vec(&reply).unwrap())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
    let (st, answer) = tokio::time::timeout(WAIT, asking).await.unwrap().unwrap();
    assert_eq!((st, &answer["data"]), (200, &json!(42)), "{answer}");

    // A restart: the topic is there, empty, starting above its old offsets.
    let s = s.restart();
    let after = detail(&c, &s, "rpc").await;
    assert_eq!(after["durability"], "memory");
    assert_eq!(after["partitions"], 1);
    assert_eq!(after["bytes"], 0);
    let restart_start = after["offsets"][0]["startOffset"].as_u64().unwrap();
    assert!(restart_start > start + 8, "{after}");
    assert_eq!(
        after["offsets"][0]["endOffset"].as_u64(),
        Some(restart_start)
    );
    // The group goes on with what is published now; the lost ones are gone.
    publish(&c, &s, "rpc", &event("new1")).await;
    let got = poll_n(&c, &s, "worker", 1, WAIT).await;
    assert_eq!(polled_ids(&got), vec!["new1".to_string()]);
    assert_eq!(
        ack(&c, &s, got[0]["deliveryId"].as_str().unwrap()).await,
        200
    );
    assert!(committed_reaches(&c, &s, "rpc", restart_start + 1, WAIT).await);
    assert!(poll_n(&c, &s, "worker", 1, Duration::from_secs(1))
        .await
        .is_empty());
}
