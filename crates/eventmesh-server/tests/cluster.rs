//! Two real `eventmesh` processes sharing one real etcd: subscriptions made
//! through one are seen by the other, and an unreachable etcd makes
//! subscribe fail with 503 `meta_unavailable` while publishing to local
//! storage goes on.

mod common;

use std::time::{Duration, Instant};

use common::hook::{start_hook, HookMode};
use common::mesh::Etcd;
use common::*;
use serde_json::{json, Value};

fn on_etcd(etcd: &Etcd) -> [String; 3] {
    [
        "eventmesh.meta.type=etcd".to_string(),
        format!("eventmesh.meta.etcd.endpoints={}", etcd.endpoint()),
        "eventmesh.meta.etcd.timeout.ms=1000".to_string(),
    ]
}

fn start(dir: &std::path::Path, etcd: &Etcd) -> Server {
    let extra = on_etcd(etcd);
    let extra: Vec<&str> = extra.iter().map(String::as_str).collect();
    Server::start(dir, &extra)
}

async fn client_ids(c: &reqwest::Client, s: &Server) -> Vec<String> {
    let subs: Vec<Value> = admin_json(c, s, "/admin/subscriptions").await;
    subs.iter()
        .map(|s| s["clientId"].as_str().unwrap().to_string())
        .collect()
}

async fn wait_for_ids(c: &reqwest::Client, s: &Server, want: &[&str]) -> Duration {
    let started = Instant::now();
    loop {
        let ids = client_ids(c, s).await;
        if ids == want {
            return started.elapsed();
        }
        assert!(
            started.elapsed() < Duration::from_secs(15),
            "{ids:?} never became {want:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn two_instances_share_subscriptions_through_etcd() {
    let etcd = Etcd::start().await;
    let (da, db) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let a = start(da.path(), &etcd);
    let b = start(db.path(), &etcd);
    let c = client();
    // One cluster name, made up by the first and kept in etcd for both.
    let names = [health(&c, &a).await, health(&c, &b).await].map(|v| v["cluster"].clone());
    assert!(names[0].as_str().unwrap().starts_with("mesh-"), "{names:?}");
    assert_eq!(names[0], names[1]);
    subscribe(&c, &a, json!({"clientId": "shared-1", "topic": "orders"})).await;
    let seen = wait_for_ids(&c, &b, &["shared-1"]).await;
    eprintln!("subscription made on A listed by B after {seen:?}");
    let (st, v) = post_json(
        &c,
        b.url("/events/unsubscribe"),
        json!({"clientId": "shared-1"}),
    )
    .await;
    assert_eq!((st, v["removed"].as_bool()), (200, Some(true)));
    wait_for_ids(&c, &a, &[]).await;
}

#[tokio::test]
async fn etcd_down_fails_subscribe_but_not_publish() {
    let mut etcd = Etcd::start().await;
    let dir = tempfile::tempdir().unwrap();
    let s = start(dir.path(), &etcd);
    let c = client();
    etcd.kill9();
    let (st, v) = post_json(
        &c,
        s.url("/events/subscribe"),
        json!({"clientId": "late", "topic": "orders"}),
    )
    .await;
    assert_eq!(
        (st, v["error"].as_str()),
        (503, Some("meta_unavailable")),
        "{v}"
    );
    // Local storage does not depend on the meta store.
    let stored = publish(&c, &s, "orders", &event("while-etcd-down")).await;
    assert_eq!(
        (&stored["id"], &stored["offset"]),
        (&json!("while-etcd-down"), &json!(0))
    );
    let health = health(&c, &s).await;
    assert_eq!(health["status"], "UP");
    // Back without restarting the runtime; the event is there to read.
    etcd.restart().await;
    subscribe_eventually(
        &c,
        &s,
        json!({"clientId": "late", "topic": "orders", "from": "earliest"}),
    )
    .await;
    wait_for_ids(&c, &s, &["late"]).await;
    assert_eq!(read_back(&c, &s, "late").await, ["while-etcd-down"]);
}

/// Polls the one event a client has coming and acknowledges it; its id.
async fn read_back(c: &reqwest::Client, s: &Server, client_id: &str) -> Vec<String> {
    let got = poll_n(c, s, client_id, 1, Duration::from_secs(10)).await;
    for d in &got {
        assert_eq!(ack(c, s, d["deliveryId"].as_str().unwrap()).await, 200);
    }
    got.iter()
        .map(|d| d["event"]["id"].as_str().unwrap().to_string())
        .collect()
}

#[tokio::test]
async fn views_converge_again_after_etcd_restarts() {
    let mut etcd = Etcd::start().await;
    let (da, db) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let a = start(da.path(), &etcd);
    let b = start(db.path(), &etcd);
    let c = client();
    subscribe(&c, &a, json!({"clientId": "before", "topic": "t"})).await;
    wait_for_ids(&c, &b, &["before"]).await;
    // Both instances' watches break; neither runtime is restarted.
    etcd.kill9();
    etcd.restart().await;
    subscribe_eventually(&c, &a, json!({"clientId": "after", "topic": "t"})).await;
    wait_for_ids(&c, &b, &["after", "before"]).await;
}

#[tokio::test]
async fn frozen_etcd_fails_subscribe_instead_of_hanging() {
    let etcd = Etcd::start().await;
    let dir = tempfile::tempdir().unwrap();
    let s = start(dir.path(), &etcd);
    let c = client();
    etcd.stop();
    let body = json!({"clientId": "f", "topic": "t"});
    let (st, v) = post_json(&c, s.url("/events/subscribe"), body).await;
    assert_eq!(
        (st, v["error"].as_str()),
        (503, Some("meta_unavailable")),
        "{v}"
    );
    let stored = publish(&c, &s, "t", &event("frozen-meta")).await;
    assert_eq!(
        (&stored["id"], &stored["offset"]),
        (&json!("frozen-meta"), &json!(0))
    );
    etcd.cont();
    // A group of its own: the refused subscribe's write may still reach
    // etcd once it thaws (a timeout does not undo a request in flight), and
    // its `latest` start would then decide the default group's offsets.
    subscribe_eventually(
        &c,
        &s,
        json!({"clientId": "reader", "group": "readers", "topic": "t", "from": "earliest"}),
    )
    .await;
    assert_eq!(read_back(&c, &s, "reader").await, ["frozen-meta"]);
}

/// Retries a subscribe until the meta store answers again.
async fn subscribe_eventually(c: &reqwest::Client, s: &Server, body: Value) {
    let started = Instant::now();
    loop {
        let (st, _) = post_json(c, s.url("/events/subscribe"), body.clone()).await;
        if st == 200 {
            return;
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "subscribe never recovered"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test]
async fn dead_letters_wait_for_a_frozen_etcd_and_none_is_lost() {
    let (url, _hook) = start_hook(HookMode::Refuse).await;
    let etcd = Etcd::start().await;
    let dir = tempfile::tempdir().unwrap();
    let mut extra = on_etcd(&etcd).to_vec();
    extra.push("eventmesh.delivery.max.attempts=2".to_string());
    let extra: Vec<&str> = extra.iter().map(String::as_str).collect();
    let s = Server::start(dir.path(), &extra);
    let c = client();
    subscribe(
        &c,
        &s,
        json!({"clientId": "doomed", "topic": "frozen", "url": url}),
    )
    .await;
    etcd.stop();
    for i in 0..3 {
        publish(&c, &s, "frozen", &event(&format!("f{i}"))).await;
    }
    // The attempts run out while etcd is frozen: the dead-letter writes time
    // out, and the deliveries stay in flight and hold the watermark.
    let failures = metric_reaching(
        &c,
        &s,
        "eventmesh_push_failures_total",
        6.0,
        Duration::from_secs(20),
    )
    .await;
    assert_eq!(failures, 6.0, "{}", s.log_text());
    // A dead-letter write timed out (the meta call timeout is 1 s).
    assert!(
        s.wait_for_log(&["dead-letter write", "failed"]),
        "{}",
        s.log_text()
    );
    assert_eq!(metric(&c, &s, "eventmesh_dead_letters_total").await, 0.0);
    assert_eq!(metric(&c, &s, "eventmesh_pending_deliveries").await, 3.0);
    let offsets: Vec<Value> = admin_json(&c, &s, "/admin/offsets?topic=frozen").await;
    let committed: u64 = offsets
        .iter()
        .map(|o| o["committed"].as_u64().unwrap())
        .sum();
    assert_eq!(committed, 0, "{offsets:?}");

    etcd.cont();
    let started = Instant::now();
    let mut dead: Vec<Value> = Vec::new();
    while dead.len() < 3 {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "{dead:?}\n{}",
            s.log_text()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
        dead = admin_json(&c, &s, "/admin/dlq/browse?topic=frozen").await;
    }
    let mut ids: Vec<String> = dead
        .iter()
        .map(|d| {
            serde_json::from_str::<Value>(d["eventJson"].as_str().unwrap()).unwrap()["id"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    ids.sort();
    assert_eq!(ids, ["f0", "f1", "f2"]);
    let dead_count = metric_reaching(
        &c,
        &s,
        "eventmesh_dead_letters_total",
        3.0,
        Duration::from_secs(10),
    )
    .await;
    assert_eq!(dead_count, 3.0);
    let pending = metric_reaching(
        &c,
        &s,
        "eventmesh_pending_deliveries",
        0.0,
        Duration::from_secs(10),
    )
    .await;
    assert_eq!(pending, 0.0, "{}", s.log_text());
    let offsets: Vec<Value> = admin_json(&c, &s, "/admin/offsets?topic=frozen").await;
    let committed: u64 = offsets
        .iter()
        .map(|o| o["committed"].as_u64().unwrap())
        .sum();
    assert_eq!(committed, 3, "{offsets:?}");
}
