//! Topic management on the admin port and retention, against the real
//! binary on the standalone log: topics created with their own partitions
//! and retention, shown with offsets, bytes and consumer lag, deleted (409
//! while subscribed unless forced); retention moving the start offset,
//! keeping the data directory bounded, and a consumer that fell behind it
//! continuing from the start with the skip counted.

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::topics::*;
use common::*;
use serde_json::{json, Value};

#[tokio::test]
async fn topics_are_created_shown_changed_and_deleted() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(dir.path(), &["eventmesh.storage.retention.ms=3600000"]);
    let c = client();
    use reqwest::Method;
    let (st, v) = admin(
        &c,
        &s,
        Method::POST,
        "/admin/topics",
        Some(json!({"name": "orders", "partitions": 3, "retention": {"bytes": 1048576}})),
    )
    .await;
    assert_eq!(st, 201, "{v}");
    assert_eq!(v["name"], "orders");
    assert_eq!(v["partitions"], 3);
    assert_eq!(
        v["retention"],
        json!({"ms": 0, "bytes": 1048576, "source": "topic"})
    );
    assert_eq!(v["bytes"], 0);
    assert_eq!(v["offsets"].as_array().unwrap().len(), 3);
    assert_eq!(
        v["offsets"][2],
        json!({"partition": 2, "startOffset": 0, "endOffset": 0, "bytes": 0})
    );
    // Taken, bad name, bad partition count, unknown field.
    for (body, status, code) in [
        (json!({"name": "orders"}), 409, "topic_exists"),
        (json!({"name": "a b"}), 400, "invalid_topic"),
        (
            json!({"name": "big", "partitions": 5000}),
            400,
            "invalid_request",
        ),
        (
            json!({"name": "x", "retention": {"days": 1}}),
            400,
            "invalid_request",
        ),
    ] {
        let (st, v) = admin(&c, &s, Method::POST, "/admin/topics", Some(body.clone())).await;
        assert_eq!(
            (st, v["error"].as_str()),
            (status, Some(code)),
            "{body}: {v}"
        );
    }

    // An auto-created topic has the default partitions and retention.
    publish(&c, &s, "auto", &event("a1")).await;
    let auto = detail(&c, &s, "auto").await;
    assert_eq!(auto["partitions"], 4);
    assert_eq!(
        auto["retention"],
        json!({"ms": 3600000, "bytes": 0, "source": "default"})
    );
    // Its own retention, and back to the default.
    let (st, v) = admin(
        &c,
        &s,
        Method::PATCH,
        "/admin/topics/auto",
        Some(json!({"retention": {"ms": 60000}})),
    )
    .await;
    assert_eq!(st, 200, "{v}");
    assert_eq!(
        v["retention"],
        json!({"ms": 60000, "bytes": 0, "source": "topic"})
    );
    let (st, v) = admin(
        &c,
        &s,
        Method::PATCH,
        "/admin/topics/auto",
        Some(json!({"retention": null})),
    )
    .await;
    assert_eq!(
        (st, v["retention"]["source"].as_str()),
        (200, Some("default"))
    );
    let (st, _) = admin(
        &c,
        &s,
        Method::PATCH,
        "/admin/topics/nope",
        Some(json!({"retention": null})),
    )
    .await;
    assert_eq!(st, 404);

    // Offsets, bytes and a consumer's lag.
    subscribe(
        &c,
        &s,
        json!({"clientId": "reader", "topic": "orders", "group": "g"}),
    )
    .await;
    for i in 0..6 {
        let mut ev = event(&format!("o{i}"));
        ev["partitionkey"] = format!("k{}", i % 2).into();
        publish(&c, &s, "orders", &ev).await;
    }
    let got = poll_n(&c, &s, "reader", 6, WAIT).await;
    assert_eq!(got.len(), 6);
    // Two acknowledged: lag 4 once the offsets are written.
    for d in &got[..2] {
        assert_eq!(ack(&c, &s, d["deliveryId"].as_str().unwrap()).await, 200);
    }
    let deadline = Instant::now() + WAIT;
    let v = loop {
        let v = detail(&c, &s, "orders").await;
        if v["consumers"][0]["lag"] == 4 || Instant::now() >= deadline {
            break v;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let ends: u64 = v["offsets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["endOffset"].as_u64().unwrap())
        .sum();
    assert_eq!(ends, 6);
    let held: u64 = v["offsets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["bytes"].as_u64().unwrap())
        .sum();
    assert_eq!(v["bytes"].as_u64().unwrap(), held);
    // Six stored events of one size: each partition holds its share.
    assert!(held > 0);
    for o in v["offsets"].as_array().unwrap() {
        let (end, bytes) = (
            o["endOffset"].as_u64().unwrap(),
            o["bytes"].as_u64().unwrap(),
        );
        assert_eq!(bytes * 6, held * end, "{v}");
    }
    assert_eq!(v["subscriptions"], 1);
    assert_eq!(v["consumers"][0]["consumer"], "g");
    assert_eq!(v["consumers"][0]["lag"], 4, "{v}");

    // Deleting: refused while subscribed, forced, then gone.
    delete_in_use_by_force(&c, &s, "orders").await;
    let subs: Vec<Value> = admin_json(&c, &s, "/admin/subscriptions?topic=orders").await;
    assert!(subs.is_empty());
    let (st, _) = admin(&c, &s, Method::DELETE, "/admin/topics/orders", None).await;
    assert_eq!(st, 404);
    // The name starts afresh: a new subscriber of group g gets the new
    // topic's first event (the old committed offsets went with it).
    publish(&c, &s, "orders", &event("fresh")).await;
    assert_eq!(detail(&c, &s, "orders").await["partitions"], 4);
    subscribe(
        &c,
        &s,
        json!({"clientId": "again", "topic": "orders", "group": "g", "from": "earliest"}),
    )
    .await;
    let got = poll_n(&c, &s, "again", 1, WAIT).await;
    assert_eq!(got[0]["event"]["id"], "fresh");
    // Unsubscribed topics delete without force.
    let (st, _) = admin(&c, &s, Method::DELETE, "/admin/topics/auto", None).await;
    assert_eq!(st, 204);
}

/// Bytes of the store's own files (tables, blob files, WAL), not its text
/// log.
fn store_bytes(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap())
        .filter(|e| !e.file_name().to_string_lossy().starts_with("LOG"))
        // A file compaction removed between the listing and its stat is
        // gone: it holds no bytes.
        .filter_map(|e| e.metadata().ok())
        .map(|m| m.len())
        .sum()
}

#[tokio::test]
async fn retention_bounds_the_disk_and_a_consumer_behind_it_skips_ahead() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(
        dir.path(),
        &[
            "eventmesh.storage.retention.bytes=262144",
            "eventmesh.storage.retention.check.ms=200",
            "eventmesh.storage.write.buffer.bytes=1048576",
            "eventmesh.storage.sync=false",
        ],
    );
    let c = client();
    let (st, v) = post_json(
        &c,
        s.admin_url("/admin/topics"),
        json!({"name": "feed", "partitions": 1}),
    )
    .await;
    // (post_json sends no token)
    assert_eq!(st, 401, "{v}");
    let (st, v) = admin(
        &c,
        &s,
        reqwest::Method::POST,
        "/admin/topics",
        Some(json!({"name": "feed", "partitions": 1})),
    )
    .await;
    assert_eq!(st, 201, "{v}");
    assert_eq!(
        v["retention"],
        json!({"ms": 0, "bytes": 262144, "source": "default"})
    );

    // A consumer reads the first ten and goes away.
    read_and_leave(&c, &s, "feed", "slow", 10).await;

    // 24 MiB through a topic that keeps 256 KiB: the start moves and the
    // store stays within a few memtables whatever went through it.
    let bound = 6 << 20;
    let mut sizes = Vec::new();
    for round in 0..3 {
        let (from, to) = (10 + round * 8000, 10 + (round + 1) * 8000);
        publish_range(&c, &s, "feed", from, to).await;
        // The pass after the last publish brings the topic within its limit.
        let deadline = Instant::now() + WAIT;
        let v = loop {
            let v = detail(&c, &s, "feed").await;
            let within = v["bytes"].as_u64().unwrap() <= 262144;
            if within || Instant::now() >= deadline {
                break v;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        let held = v["bytes"].as_u64().unwrap();
        assert!(held <= 262144, "round {round}: {held} bytes held");
        let start = v["offsets"][0]["startOffset"].as_u64().unwrap();
        assert!(start >= (to - 400) as u64, "round {round}: start {start}");
        assert_eq!(v["offsets"][0]["endOffset"], to as u64);
        let deadline = Instant::now() + WAIT;
        while store_bytes(dir.path()) > bound && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        sizes.push(store_bytes(dir.path()));
    }
    assert!(
        sizes.iter().all(|&b| b <= bound),
        "store sizes {sizes:?} after 8, 16 and 24 MiB"
    );

    // The consumer comes back: it continues from the start, and the
    // offsets it never read are counted.
    let skipped = "eventmesh_retention_skipped_total{topic=\"feed\"}";
    assert_eq!(metrics(&c, &s).await.samples.get(skipped), None);
    let resumed = come_back(&c, &s, "feed", "slow").await;
    let start = detail(&c, &s, "feed").await["offsets"][0]["startOffset"]
        .as_u64()
        .unwrap();
    assert_eq!(resumed, start, "continues from the start");
    assert_eq!(metric(&c, &s, skipped).await, (resumed - 10) as f64);
    assert!(s.wait_for_log(&[
        "WARN",
        "retention dropped",
        &format!("offsets this consumer had not read; it continues from {resumed}"),
    ]));
}
