//! Replay: a group's offsets moved back to a time, the beginning or an
//! offset, or on to the end (`POST /admin/groups/{group}/offsets`), and
//! `from` a time on subscribe; on both backends.

use std::time::Duration;

use reqwest::Method;
use serde_json::{json, Value};

use super::{on_jetstream, WAIT};
use crate::common::topics::admin;
use crate::common::*;

/// Polls and acknowledges until `want` deliveries came; their ids, sorted.
async fn take_all(c: &reqwest::Client, s: &Server, client: &str, want: usize) -> Vec<String> {
    let got = poll_n(c, s, client, want, WAIT).await;
    for d in &got {
        assert_eq!(ack(c, s, d["deliveryId"].as_str().unwrap()).await, 200);
    }
    polled_ids(&got)
}

fn ids(prefix: &str, n: usize) -> Vec<String> {
    let mut v: Vec<String> = (0..n).map(|i| format!("{prefix}{i}")).collect();
    v.sort();
    v
}

/// Waits until the clock has moved `ms` past now; the time then, RFC 3339.
async fn a_moment_later(ms: u64) -> String {
    tokio::time::sleep(Duration::from_millis(ms)).await;
    eventmesh_core::time::format_rfc3339_ms(eventmesh_core::time::now_ms())
}

async fn reset(
    c: &reqwest::Client,
    s: &Server,
    group: &str,
    query: &str,
    body: Value,
) -> (u16, Value) {
    admin(
        c,
        s,
        Method::POST,
        &format!("/admin/groups/{group}/offsets{query}"),
        Some(body),
    )
    .await
}

#[tokio::test]
async fn a_reset_to_a_time_replays_exactly_what_came_after_it() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(dir.path(), &[]);
    replays_from_a_time(&s).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reset_to_a_time_replays_exactly_what_came_after_it_on_jetstream() {
    let nats = eventmesh_jetstream::testutil::NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let s = on_jetstream(&dir, &nats);
    replays_from_a_time(&s).await;
}

/// Two bursts a moment apart, both consumed; a reset to a time between
/// them delivers exactly the second again (after a dry run that says so),
/// and a group subscribing from that time gets the same.
async fn replays_from_a_time(s: &Server) {
    let c = client();
    subscribe(
        &c,
        s,
        json!({"clientId": "w1", "topic": "r", "group": "g", "from": "earliest"}),
    )
    .await;
    for i in 0..10 {
        publish(&c, s, "r", &event(&format!("a{i}"))).await;
    }
    assert_eq!(take_all(&c, s, "w1", 10).await, ids("a", 10));
    let between = a_moment_later(100).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    for i in 0..7 {
        publish(&c, s, "r", &event(&format!("b{i}"))).await;
    }
    assert_eq!(take_all(&c, s, "w1", 7).await, ids("b", 7));
    assert!(caught_up(&c, s, "r", WAIT).await);

    let (status, plan) = reset(
        &c,
        s,
        "g",
        "?dryRun=true",
        json!({"topic": "r", "to": between}),
    )
    .await;
    assert_eq!(status, 200, "{plan}");
    assert_eq!(
        (
            &plan["applied"],
            &plan["again"],
            &plan["skipped"],
            &plan["held"]
        ),
        (&json!(false), &json!(7), &json!(0), &json!(0)),
        "{plan}"
    );
    // A dry run moves nothing.
    assert!(poll_n(&c, s, "w1", 1, Duration::from_millis(500))
        .await
        .is_empty());

    // Applied through the SDK, on the admin port.
    let admin_sdk = eventmesh_client::EventMeshClient::new(s.admin_url(""))
        .unwrap()
        .with_token(TOKEN);
    let at = eventmesh_core::time::parse_rfc3339_ms(&between).unwrap();
    let reset_to = eventmesh_client::ResetOffsets::new("r", eventmesh_client::ResetTo::TimeMs(at));
    let done = admin_sdk.reset_offsets("g", &reset_to).await.unwrap();
    assert_eq!(
        (done.applied, done.again, done.held),
        (true, 7, 0),
        "{done:?}"
    );
    assert!(done
        .partitions
        .iter()
        .all(|m| m.consumer == "g" && m.topic == "r"));
    assert_eq!(take_all(&c, s, "w1", 7).await, ids("b", 7));
    assert!(poll_n(&c, s, "w1", 1, Duration::from_millis(500))
        .await
        .is_empty());
    assert!(caught_up(&c, s, "r", WAIT).await);

    // A new group starting from that time.
    subscribe(
        &c,
        s,
        json!({"clientId": "late-1", "topic": "r", "group": "late", "from": between}),
    )
    .await;
    assert_eq!(take_all(&c, s, "late-1", 7).await, ids("b", 7));
    assert!(poll_n(&c, s, "late-1", 1, Duration::from_millis(500))
        .await
        .is_empty());
    let subs: Vec<Value> = admin_json(&c, s, "/admin/subscriptions?topic=r").await;
    let late = subs.iter().find(|v| v["group"] == "late").unwrap();
    assert_eq!(
        eventmesh_core::time::parse_rfc3339_ms(late["from"].as_str().unwrap()),
        eventmesh_core::time::parse_rfc3339_ms(&between),
        "{late}"
    );
}

#[tokio::test]
async fn a_reset_waits_for_held_deliveries_unless_forced() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(dir.path(), &["eventmesh.topic.default.partitions=2"]);
    let c = client();
    subscribe(
        &c,
        &s,
        json!({"clientId": "w1", "topic": "h", "group": "g"}),
    )
    .await;
    for i in 0..5 {
        publish(&c, &s, "h", &event(&format!("e{i}"))).await;
    }
    let held = poll_n(&c, &s, "w1", 5, WAIT).await;
    assert_eq!(polled_ids(&held), ids("e", 5));
    assert_eq!(
        ack(&c, &s, held[0]["deliveryId"].as_str().unwrap()).await,
        200
    );

    // Four in the member's hands: refused, nothing changes.
    let (status, v) = reset(&c, &s, "g", "", json!({"topic": "h", "to": "earliest"})).await;
    assert_eq!(
        (status, v["error"].as_str()),
        (409, Some("group_busy")),
        "{v}"
    );
    assert!(
        v["message"].as_str().unwrap().contains("4 deliveries"),
        "{v}"
    );
    assert_eq!(
        ack(&c, &s, held[1]["deliveryId"].as_str().unwrap()).await,
        200
    );
    let (_, plan) = reset(
        &c,
        &s,
        "g",
        "?dryRun=true",
        json!({"topic": "h", "to": "earliest"}),
    )
    .await;
    assert_eq!(plan["held"], 3, "{plan}");

    // Forced: the three held are released, and all five come again.
    let (status, done) = reset(
        &c,
        &s,
        "g",
        "?force=true",
        json!({"topic": "h", "to": "earliest"}),
    )
    .await;
    assert_eq!(status, 200, "{done}");
    assert_eq!(
        (&done["held"], &done["applied"]),
        (&json!(3), &json!(true)),
        "{done}"
    );
    assert_eq!(
        ack(&c, &s, held[2]["deliveryId"].as_str().unwrap()).await,
        404,
        "a released delivery settles nothing"
    );
    assert_eq!(take_all(&c, &s, "w1", 5).await, ids("e", 5));
    assert!(poll_n(&c, &s, "w1", 1, Duration::from_millis(500))
        .await
        .is_empty());
    assert!(caught_up(&c, &s, "h", WAIT).await);

    // One partition back to an offset: what it holds from there comes again.
    let rows: Vec<Value> = admin_json(&c, &s, "/admin/offsets?topic=h").await;
    let p0 = rows.iter().find(|r| r["partition"] == 0).unwrap()["committed"]
        .as_u64()
        .unwrap();
    let (status, done) = reset(
        &c,
        &s,
        "g",
        "",
        json!({"topic": "h", "partitions": {"0": 0}}),
    )
    .await;
    assert_eq!(status, 200, "{done}");
    assert_eq!(done["again"], p0, "{done}");
    assert_eq!(done["partitions"].as_array().unwrap().len(), 1, "{done}");
    assert_eq!(take_all(&c, &s, "w1", p0 as usize).await.len(), p0 as usize);

    // To the end: nothing comes again.
    publish(&c, &s, "h", &event("unread")).await;
    let (status, done) = reset(
        &c,
        &s,
        "g",
        "?force=true",
        json!({"topic": "h", "to": "latest"}),
    )
    .await;
    assert_eq!(status, 200, "{done}");
    assert!(caught_up(&c, &s, "h", WAIT).await);
    assert!(poll_n(&c, &s, "w1", 1, Duration::from_millis(500))
        .await
        .is_empty());

    // Bad requests name what is wrong.
    for (group, body, status, code) in [
        (
            "g",
            json!({"topic": "nope", "to": "earliest"}),
            404,
            "unknown_topic",
        ),
        (
            "other",
            json!({"topic": "h", "to": "earliest"}),
            404,
            "unknown_group",
        ),
        (
            "g",
            json!({"topic": "h", "to": "yesterday"}),
            400,
            "invalid_request",
        ),
        ("g", json!({"topic": "h"}), 400, "invalid_request"),
        (
            "g",
            json!({"topic": "h", "partitions": {"7": "earliest"}}),
            400,
            "invalid_request",
        ),
        (
            "g",
            json!({"topic": "h", "to": "earliest", "extra": 1}),
            400,
            "invalid_request",
        ),
    ] {
        let (st, v) = reset(&c, &s, group, "", body.clone()).await;
        assert_eq!(
            (st, v["error"].as_str()),
            (status, Some(code)),
            "{body}: {v}"
        );
        assert!(v["message"].as_str().is_some_and(|m| !m.is_empty()), "{v}");
    }
}
