//! Topic management and retention with the event log on JetStream, with a
//! real `nats-server -js` and the real binary: a topic created with its own
//! retention becomes a stream with those limits, its start moves as the
//! servers drop what the limits no longer keep, a consumer that fell behind
//! continues from the start with the skip counted, and deleting follows
//! the same rules as on the standalone log.

mod common;

use reqwest::Method;
use serde_json::json;

use common::topics::*;
use common::*;
use eventmesh_jetstream::testutil::NatsServer;

#[tokio::test]
async fn retention_and_topic_management_on_jetstream() {
    let nats = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let settings = [
        "eventmesh.storage.type=jetstream".to_string(),
        format!("eventmesh.storage.jetstream.servers={}", nats.url()),
        "eventmesh.storage.jetstream.stream.prefix=RT".to_string(),
        "eventmesh.storage.retention.check.ms=200".to_string(),
    ];
    let refs: Vec<&str> = settings.iter().map(String::as_str).collect();
    let s = Server::start(dir.path(), &refs);
    let c = client();
    let limit = 64 * 1024;
    let (st, v) = admin(
        &c,
        &s,
        Method::POST,
        "/admin/topics",
        Some(json!({"name": "feed", "partitions": 1, "retention": {"bytes": limit}})),
    )
    .await;
    assert_eq!(st, 201, "{v}");
    assert_eq!(
        v["retention"],
        json!({"ms": 0, "bytes": limit, "source": "topic"})
    );
    // One stream holds the topic: no byte count per partition.
    assert_eq!(
        v["offsets"][0],
        json!({"partition": 0, "startOffset": 0, "endOffset": 0})
    );

    read_and_leave(&c, &s, "feed", "slow", 10).await;

    // 400 KiB through a topic that keeps 64 KiB.
    publish_range(&c, &s, "feed", 10, 410).await;
    let start = start_reaching(&c, &s, "feed", 300).await;
    assert!(start >= 300, "start {start}");
    let v = detail(&c, &s, "feed").await;
    assert!(v["bytes"].as_u64().unwrap() <= limit, "{v}");
    assert_eq!(v["offsets"][0]["endOffset"], 410);

    // One partition: its offsets are the stream's, so the skip is exact.
    let skipped = "eventmesh_retention_skipped_total{topic=\"feed\"}";
    assert_eq!(metrics(&c, &s).await.samples.get(skipped), None);
    let resumed = come_back(&c, &s, "feed", "slow").await;
    assert!(resumed >= start, "resumed at {resumed}, start {start}");
    assert_eq!(metric(&c, &s, skipped).await, (resumed - 10) as f64);

    // Deleting: refused while subscribed, then forced; the stream is gone.
    delete_in_use_by_force(&c, &s, "feed").await;
    let topics: Vec<serde_json::Value> = admin_json(&c, &s, "/admin/topics").await;
    assert!(topics.iter().all(|t| t["name"] != "feed"), "{topics:?}");
}
